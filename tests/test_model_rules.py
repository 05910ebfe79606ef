"""The cost/time model's rules, each with hand-computed yen (shared/domain.md, last section)."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from gpuplan.planning import model, optimizer, ranking
from gpuplan.planning.model import Quotas, Setting
from gpuplan.planning.plan_types import DataParallel, Job, Packing, Workload
from support import planner as sp


def work(*minutes, memory=None, **kw) -> Workload:
    jobs = tuple(Job(f"j{i}", Decimal(m * 60)) for i, m in enumerate(minutes))
    return Workload(name="t", description="", jobs=jobs, unit="second", seconds_per_unit=Decimal(1),
                    reference_gpu="K80", speed={"K80": Decimal(1)},
                    memory_gib=Decimal(memory) if memory else None, **kw)


def plan(w, cat, fleet, mode="scratch", k=1, loads=None, **setting):
    s = Setting(catalog=cat, **setting)
    loads = loads or [(o, int(w.job_seconds(w.jobs[i])), ()) for i, (o, _) in enumerate(
        [(o, None) for o, n in fleet for _ in range(n)])]
    return model.make_plan(w, s, fleet, mode, k, loads)


# --- billing granularity -----------------------------------------------------------------------

def test_billed_rounds_up_to_granularity_and_minimum():
    per_minute = sp.offer(granularity=60, minimum=60)
    per_second = sp.offer(granularity=1, minimum=60)
    hourly = sp.offer(granularity=3600, minimum=3600)
    assert model.billed(61, per_minute) == 120
    assert model.billed(30, per_second) == 60  # 60-s minimum
    assert model.billed(61, per_second) == 61
    assert model.billed(3601, hourly) == 7200
    assert model.billed(10, hourly) == 3600


def test_plan_cost_per_granularity():
    # one job of 60 min + 1 s, no setup: per-second ¥3600/h = ¥1/s -> 3601 s = ¥3601;
    # hourly ¥3600/h -> 2 h = ¥7200; per-minute -> 61 min = ¥3660
    w = work(Decimal(3601) / 60)
    cat = sp.catalog([], {"azure": sp.facts(setup_min=0)})
    for gran, minimum, yen in ((1, 60, 3601), (3600, 3600, 7200), (60, 60, 3660)):
        o = sp.offer(price="3600", granularity=gran, minimum=minimum)
        p = plan(w, cat, [(o, 1)], loads=[(o, 3601, ())])
        assert p.cost_jpy == yen


# --- image vs scratch; builder worker or not -----------------------------------------------------

def _two_jobs_two_vms(builder_is_worker: bool, mode: str):
    # setup 60 min, capture 10, launch 5; two jobs of 120 min; ¥60/h per minute = ¥1/min
    w = work(120, 120)
    o = sp.offer(price="60")
    cat = sp.catalog([o], {"azure": sp.facts(setup_min=60, capture_min=10, launch_min=5, builder_is_worker=builder_is_worker)})
    return plan(w, cat, [(o, 2)], mode=mode, loads=[(o, 7200, ("j0",)), (o, 7200, ("j1",))])


def test_image_on_azure_builder_is_deleted_and_capture_not_billed():
    p = _two_jobs_two_vms(False, "image")
    # builder 60 min (¥60) + 2 workers x 120 min (¥240) = ¥300; wall 60 + 10 + 5 + 120 = 195 min
    assert [v.role for v in p.vms] == ["builder", "worker", "worker"]
    assert p.cost_jpy == 300
    assert p.wall_s == 195 * 60
    assert p.breakdown["setup"] == Decimal(60) and p.breakdown["capture"] == 0


def test_image_on_aws_builder_works_and_capture_is_billed():
    p = _two_jobs_two_vms(True, "image")
    # builder+worker 60 + 10 + 120 = 190 min, worker 120 min -> 310 min = ¥310; wall max(190, 195) = 195 min
    assert [v.role for v in p.vms] == ["builder+worker", "worker"]
    assert p.cost_jpy == 310
    assert p.breakdown["capture"] == Decimal(10)
    assert p.wall_s == 195 * 60


def test_scratch_pays_setup_on_every_machine():
    p = _two_jobs_two_vms(False, "scratch")
    # 2 x (60 + 120) min = ¥360; wall 180 min
    assert p.cost_jpy == 360
    assert p.wall_s == 180 * 60


def test_breakdown_sums_to_cost_and_idle_tail_when_kept_to_the_end():
    w = work(120, 60)
    o = sp.offer(price="60")
    cat = sp.catalog([o])
    loads = [(o, 7200, ()), (o, 3600, ())]
    done = plan(w, cat, [(o, 2)], loads=loads)
    kept = plan(w, cat, [(o, 2)], loads=loads, release="at-end")
    # when-done: 180 + 120 min = ¥300; at-end: the second machine idles 60 min: 180 + 180 = ¥360
    assert done.cost_jpy == 300 and done.breakdown["idle_tail"] == 0
    assert kept.cost_jpy == 360 and kept.breakdown["idle_tail"] == Decimal(60)
    for p in (done, kept):
        assert sum(p.breakdown.values()) == p.cost


# --- job time: co-location, packing, memory ----------------------------------------------------

def test_colocation_slowdown_measured_and_default():
    w = work(120, 120, 120, 120, colocation_slowdown={4: Decimal("1.25")})
    o4 = sp.offer(gpus=4, price="400", vcpus=24)
    f4, _ = model.job_factor(w, o4, sp.GPUS, 1, 4)
    assert f4 == Decimal("1.25")
    # NC24-like: setup 60 + 4 jobs at once 120 x 1.25 = 150 -> 210 min x ¥400/h = ¥1,400
    cat = sp.catalog([o4])
    est = optimizer.estimate(w, Setting(catalog=cat), mixes=False)
    assert est.recommended.wall_s == 210 * 60
    assert est.recommended.cost_jpy == 1400
    f2, why = model.job_factor(w, o4, sp.GPUS, 1, 2)
    assert f2 == Decimal("1.10") and "default" in why[1]
    f1, _ = model.job_factor(w, o4, sp.GPUS, 1, 1)
    assert f1 == 1


def test_packing_fits_uses_measured_efficiency_and_startup_factor():
    w = work(40, 40, 40, memory="2.4", packing=Packing({1: Decimal(1), 3: Decimal("0.57")}))
    o = sp.offer(memory="8", price="3600", granularity=1, minimum=0)
    factor, _ = model.job_factor(w, o, sp.GPUS, 3, 1)
    assert factor == Decimal("1.2") / Decimal("0.57")
    # 2400 s x 1.2 / 0.57 = 5052.63 -> 5053 s; 3 packed on one GPU, ¥1/s, no setup -> ¥5,053 and wall 5053 s
    cat = sp.catalog([o], {"azure": sp.facts(setup_min=0)})
    est = optimizer.estimate(w, Setting(catalog=cat), mixes=False)
    packed = [p for p in est.plans if p.feasible and p.per_gpu == 3]
    assert packed and packed[0].cost_jpy == 5053 and packed[0].wall_s == 5053
    assert est.recommended.per_gpu == 3  # 5053 s beats 3 x 2400 = 7200 s one after another


def test_packing_that_does_not_fit_and_unmeasured_efficiency_are_infeasible():
    w = work(40, memory="3", packing=Packing({1: Decimal(1), 3: Decimal("0.57"), 4: None}))
    o = sp.offer(memory="8")
    big = sp.offer(memory="16")
    with pytest.raises(model.Infeasible, match="3 x 3 GiB fixed fractions exceed the 8 GiB"):
        model.packing(w, o, 3)
    with pytest.raises(model.Infeasible, match="no measured per-stream efficiency for 2 jobs on one K80"):
        model.packing(w, o, 2)
    with pytest.raises(model.Infeasible, match="4 jobs did not fit one K80 in the measurement"):
        model.packing(w, big, 4)  # null: measured not to fit
    with pytest.raises(model.Infeasible, match="3 per GPU on T4: per-stream efficiency measured only on K80"):
        model.packing(w, sp.offer(gpu="T4", memory="16"), 3)  # measured on another GPU: not reused


def test_job_memory_over_gpu_memory_is_infeasible():
    w = work(60, memory="13")
    o = sp.offer(memory="12")
    est = optimizer.estimate(w, Setting(catalog=sp.catalog([o])))
    assert est.recommended is None
    assert est.plans[0].reason == "a job needs 13 GiB, more than the 12 GiB of a K80"


def test_generic_speed_table_is_used_and_named_when_not_measured():
    w = work(60)
    o = sp.offer(gpu="V100")
    s, why = model.speed(w, o, sp.GPUS)
    assert s == Decimal("1.0") / Decimal("0.13")
    assert "generic" in why and "not measured" in why


# --- quota, retirement, deadline, price --------------------------------------------------------

def test_quota_default_is_a_warning_and_user_quota_excludes():
    w = work(120, 120, 120, 120)
    o = sp.offer(vcpus=6, family="standardNCFamily")
    loads = [(o, 7200, ())] * 4
    warned = plan(w, sp.catalog([o]), [(o, 4)], loads=loads)
    assert warned.feasible and warned.peak_vcpus == 24
    assert "over azure's default Total Regional vCPUs quota of 20" in warned.warnings[0]
    strict = plan(w, sp.catalog([o]), [(o, 4)], loads=loads, quotas=Quotas(total={"azure": 20}))
    assert not strict.feasible and strict.reason == "needs 24 vCPUs at once, over your azure quota of 20"
    fam = Quotas(family={("azure", "NC"): 18})
    by_family = plan(w, sp.catalog([o]), [(o, 4)], loads=loads, quotas=fam)
    assert not by_family.feasible and "24 vCPUs of standardNCFamily, over your quota azure:NC=18" in by_family.reason
    assert plan(w, sp.catalog([o]), [(o, 3)], loads=loads[:3], quotas=fam).feasible  # 18 vCPUs fit


def test_retired_type_depends_on_the_as_of_date():
    w = work(60)
    o = sp.offer(name="Standard_NC6", retired_on=date(2023, 9, 6), successor="Standard_NC4as_T4_v3")
    before = optimizer.estimate(w, Setting(catalog=sp.catalog([o], on=date(2017, 8, 31))))
    assert before.recommended is not None
    after = optimizer.estimate(w, Setting(catalog=sp.catalog([o], snapshot="2026-11", on=date(2026, 11, 30))))
    assert after.recommended is None
    assert after.plans[0].reason == "Standard_NC6 retired on 2023-09-06 (as of 2026-11); successor Standard_NC4as_T4_v3"


def test_price_not_sourced_and_priced_after_as_of_are_excluded():
    w = work(60)
    unpriced = sp.offer(name="bm", price=None)
    later = sp.offer(name="later", as_of="2017-12")
    est = optimizer.estimate(w, Setting(catalog=sp.catalog([unpriced, later]), as_of_month="2017-08"))
    reasons = sorted(p.reason for p in est.plans)
    assert reasons == ["later priced 2017-12, after the as-of month 2017-08",
                       "price not sourced for bm; set it in prices.yaml"]


def test_deadline_excludes_late_plans():
    # 10 jobs of 60 min, setup 60, ¥60/h per minute, image without capture time:
    # cost = 60 min builder + 600 min of jobs = ¥660 whatever the count; ties go to the shortest wall
    w = work(*[60] * 10)
    o = sp.offer(price="60", vcpus=1)
    cat = sp.catalog([o])
    est = optimizer.estimate(w, Setting(catalog=cat, deadline_s=180 * 60), mixes=False)
    rec = est.recommended
    assert rec.cost_jpy == 660 and rec.setup == "image" and rec.count == 10 and rec.wall_s == 120 * 60
    late = [p for p in est.plans if not p.feasible]
    assert late and all("misses the deadline" in p.reason for p in late)
    assert all(p.wall_s > 180 * 60 for p in late)
    none = optimizer.estimate(w, Setting(catalog=cat, deadline_s=100 * 60), mixes=False)
    assert none.recommended is None and "misses the deadline" in none.reason


# --- owned hardware ----------------------------------------------------------------------------

def test_owned_needs_the_flag_and_shows_break_even():
    # cloud: 1 job of 480 min on ¥91.80/h per minute with 60 min setup = 9 h = ¥826.20
    # owned: power ¥7.50/h x 8 h = ¥60; saving ¥766.20 per batch -> 350,000 / 766.20 = 456.8 -> 457 batches
    w = work(480)
    cloud = sp.offer(name="nc6", price="91.80")
    owned = sp.offer(name="ws", provider="baremetal", kind="owned", price="7.5", purchase="350000", granularity=1, minimum=0)
    providers = {"azure": sp.facts(), "baremetal": sp.facts("baremetal", setup_min=0, builder_is_worker=True, quota=None)}
    cat = sp.catalog([cloud, owned], providers)
    est = optimizer.estimate(w, Setting(catalog=cat))
    assert est.recommended.fleet[0][0].name == "nc6" and est.recommended.cost_jpy == 826
    ws = next(p for p in est.plans if p.fleet[0][0].name == "ws")
    assert ws.feasible and not ws.recommendable and ws.cost_jpy == 60
    assert "pays off after 457 batches" in ws.note and "3,656 hours" in ws.note
    mine = optimizer.estimate(w, Setting(catalog=cat, owned=("ws",)))
    assert mine.recommended.fleet[0][0].name == "ws"


def test_data_parallel_rule_of_thumb_without_gradient_bytes():
    w = work(60, data_parallel=DataParallel())
    # no gradient_bytes: 4 GPUs x 0.985^2 x 1.5 (two machines) = 5.82135, and the plan says it is a rule of thumb
    up, why = model.dp_speedup(w, sp.offer(gpus=4), 2, Decimal(1))
    assert up == Decimal("5.8214") and why.startswith("rule of thumb (the workload gives no gradient_bytes)")
    assert model.dp_speedup(w, sp.offer(gpus=1), 1, Decimal(1))[0] == 1


# --- the schedule and the proof behind a recommendation -------------------------------------------

def test_a_slot_is_rounded_up_once_not_per_job():
    # speed 0.3: two 100-s jobs in one slot take 200 / 0.3 = 666.67 s -> 667 s (per job it would be 668)
    w = Workload(name="t", description="", jobs=(Job("a", Decimal(100)), Job("b", Decimal(100))), unit="second",
                 seconds_per_unit=Decimal(1), reference_gpu="K80", speed={"K80": Decimal("0.3")})
    o = sp.offer(granularity=1, minimum=0)
    est = optimizer.estimate(w, Setting(catalog=sp.catalog([o], {"azure": sp.facts(setup_min=0)})), mixes=False)
    one = next(p for p in est.plans if p.count == 1)
    assert [v.jobs_s for v in one.vms] == [667]


def test_recommendation_is_proven_within_the_solver_gap_and_says_how_close():
    # 300 jobs on per-second machines: fleets of one type differ only by per-machine rounding
    import random

    rng = random.Random(2)
    w = Workload(name="t", description="", unit="second", seconds_per_unit=Decimal(1), reference_gpu="K80",
                 speed={"K80": Decimal("0.7")},
                 jobs=tuple(Job(f"j{i}", Decimal(rng.choice([600, 1800, 3600]) + rng.randint(0, 99))) for i in range(300)))
    o = sp.offer(price="3600", granularity=1, minimum=60)
    cat = sp.catalog([o], {"azure": sp.facts(setup_min=10, quota=10_000)})
    # the cost objective's proof (issue 19: the default pick is no longer the cheapest; its proof is the cheapest's)
    est = optimizer.estimate(w, Setting(catalog=cat, deadline_s=6 * 3600), mixes=False, objective="cost")
    rec = est.recommended
    assert est.proven and Decimal(0) <= est.gap <= rec.cost * ranking.RELATIVE_GAP
    # the gap is honest: no candidate's own cost is below the pick's minus the gap
    assert all(p.cost >= rec.cost - est.gap for p in est.plans if p.feasible)


def test_small_batches_are_proven_exactly():
    # greedy puts 30+20+20 | 30+20 on two GPUs; the optimum is 30+30 | 20+20+20
    w = work(30, 30, 20, 20, 20, colocation_default=Decimal(1))
    o = sp.offer(gpus=2, price="60", granularity=60)
    est = optimizer.estimate(w, Setting(catalog=sp.catalog([o], {"azure": sp.facts(setup_min=0)})), mixes=False)
    assert est.proven and est.gap == 0
    assert est.recommended.wall_s == 60 * 60 and est.recommended.optimal


def test_mixes_whose_bounds_are_beaten_are_not_scheduled():
    # two types of the same speed, one ten times dearer: every mix costs more than the cheap type alone and is no faster
    w = work(60, 60, 60, 60)
    cheap = sp.offer(name="cheap", gpu="K80", price="60")
    dear = sp.offer(name="dear", gpu="K80", price="600")
    cat = sp.catalog([cheap, dear], {"azure": sp.facts(setup_min=0)})
    est = optimizer.estimate(w, Setting(catalog=cat))
    assert not [p for p in est.plans if len(p.fleet) == 2]
    assert "mixed fleets not scheduled" in est.extra["skipped_mixes"]
