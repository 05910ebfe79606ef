"""Everything a measured profile gives reaches the plan: the fixed cost of a job start, the memory
need (not the uncapped peak), data-parallel efficiency per (GPUs, nodes); and the H100 run of
shared/measurements/h100-2026-11-22 is predicted within 10 % from the committed profile."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

from gpuplan.planning import optimizer, profiles, workloads
from gpuplan.planning.model import Setting
from gpuplan.planning.plan_types import Job, Workload
from support import benchmarks
from support import planner as sp

ROOT = Path(__file__).resolve().parents[1]


def _profile(tmp_path, name="p.yaml", **fields) -> Path:
    data = {"schema": 1, "workload": "colorize", "unit": "epoch", "reference_gpu": "T4", "seconds_per_unit": 1,
            "provenance": {"source": "gpuplan bench", "date": "2026-11-22", "gpu": "Tesla T4"}, **fields}
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _videos(n: int, units: int = 100) -> Workload:
    return Workload(name="clips", description="", jobs=tuple(Job(f"v{i}", Decimal(units)) for i in range(n)),
                    unit="epoch", seconds_per_unit=Decimal(7), reference_gpu="K80", speed={"K80": Decimal(1)})


# --- the fixed cost of a job start ---------------------------------------------------------------

def test_the_fixed_cost_is_paid_at_every_job_start_in_wall_time_and_yen(tmp_path):
    # 4 jobs of 100 epochs x 1 s on one T4 at ¥3,600/h per second, no setup; 20 s per job start:
    # queued on one GPU: 4 x (20 + 100) = 480 s = ¥480 (without the fixed cost 400 s = ¥400)
    work = workloads.apply_profile(_videos(4), _profile(tmp_path, fixed_seconds_per_job=20))
    assert work.job_start_s == 20 and work.packing.startup_factor == 1
    one = sp.offer(gpu="T4", memory="16", price="3600", granularity=1, minimum=0)
    cat = sp.catalog([one], {"azure": sp.facts(setup_min=0)})
    plan = next(p for p in optimizer.estimate(work, Setting(catalog=cat), mixes=False).plans
                if p.count == 1 and p.per_gpu == 1)
    assert plan.wall_s == 480 and plan.cost == Decimal(480) and plan.cost_jpy == 480
    assert plan.breakdown["jobs"] == Decimal(400) and plan.breakdown["job_starts"] == Decimal(80)
    assert plan.vms[0].job_starts_s == 80
    assert any(a.startswith("fixed cost 20 s at every job start on a slot") and "gpuplan bench on Tesla T4" in a
               for a in plan.assumptions)
    # two machines of one GPU each: two jobs each, 2 x 120 s = 240 s per machine, ¥480 in all
    two = next(p for p in optimizer.estimate(work, Setting(catalog=cat), mixes=False).plans
               if p.count == 2 and p.per_gpu == 1)
    assert two.wall_s == 240 and two.cost_jpy == 480 and two.breakdown["job_starts"] == Decimal(80)
    # without the profile: 400 s, ¥400, and the plan says the fixed cost was not measured
    bare = optimizer.estimate(workloads.apply_profile(_videos(4), _profile(tmp_path, "q.yaml")),
                              Setting(catalog=cat), mixes=False)
    base = next(p for p in bare.plans if p.count == 1 and p.per_gpu == 1)
    assert base.wall_s == 400 and base.cost_jpy == 400 and base.breakdown["job_starts"] == 0
    assert any("fixed cost per job start: not measured" in a for a in base.assumptions)


def test_a_job_start_changes_which_schedule_is_best():
    # jobs of 90, 30, 30, 30 s on 2 GPUs: by length alone 90 | 30+30+30 (90 s each) is best; with 40 s per
    # job start that is 130 | 210, and 90+30 | 30+30 = 200 | 140 is best
    w = Workload(name="t", description="", unit="second", seconds_per_unit=Decimal(1), reference_gpu="K80",
                 speed={"K80": Decimal(1)}, job_start_s=Decimal(40), job_start_source="test", colocation_default=Decimal(1),
                 jobs=(Job("a", Decimal(90)), Job("b", Decimal(30)), Job("c", Decimal(30)), Job("d", Decimal(30))))
    o = sp.offer(gpus=2, price="3600", granularity=1, minimum=0)
    est = optimizer.estimate(w, Setting(catalog=sp.catalog([o], {"azure": sp.facts(setup_min=0)})), mixes=False)
    plan = next(p for p in est.plans if p.count == 1)
    assert plan.wall_s == 200 and plan.optimal and plan.cost_jpy == 200
    assert plan.vms[0].job_starts_s == 80  # the busiest slot starts two jobs


# --- the memory need, not the uncapped peak ------------------------------------------------------

def test_a_job_with_a_65_9_gib_peak_but_a_5_4_gib_need_is_planned_on_a_16_gib_gpu(tmp_path):
    t4 = sp.offer(name="t4", gpu="T4", memory="16", price="60")
    cat = sp.catalog([t4], {"azure": sp.facts(setup_min=0)})
    need = workloads.apply_profile(_videos(1), _profile(tmp_path, memory_peak_gib=65.9, memory_need_gib=5.4,
                                                        memory_need_fraction=0.08))
    assert need.memory_gib == Decimal("5.4") and need.memory_peak_gib == Decimal("65.9")
    est = optimizer.estimate(need, Setting(catalog=cat))
    assert est.recommended is not None and est.recommended.fleet[0][0].name == "t4"
    assert any(a.startswith("memory need 5.4 GiB per job (smallest cap at full speed") and "uncapped peak 65.9 GiB, not a need" in a
               for a in est.recommended.assumptions)
    # a profile from before the need was measured: only the peak, which then decides, and says so
    peak_only = workloads.apply_profile(_videos(1), _profile(tmp_path, "old.yaml", memory_per_job_gib=65.9))
    old = optimizer.estimate(peak_only, Setting(catalog=cat))
    assert old.recommended is None
    assert old.plans[0].reason == "a job needs 65.9 GiB, more than the 16 GiB of a T4"
    assert "uncapped peak, need not measured" in peak_only.memory_source


def test_packing_uses_the_need(tmp_path):
    # need 5.4 GiB: 2 per 16 GiB GPU fit (10.8), 3 do not (16.2)
    work = workloads.apply_profile(_videos(3), _profile(tmp_path, memory_need_gib=5.4, packing={
        1: {"efficiency": 1, "fits": True}, 2: {"efficiency": 0.8, "fits": True}, 3: {"efficiency": 0.6, "fits": True}}))
    cat = sp.catalog([sp.offer(gpu="T4", memory="16")], {"azure": sp.facts(setup_min=0)})
    plans = optimizer.estimate(work, Setting(catalog=cat), mixes=False).plans
    assert any(p.feasible and p.per_gpu == 2 for p in plans)
    three = next(p for p in plans if p.per_gpu == 3)
    assert not three.feasible and "3 x 5.4 GiB fixed fractions exceed the 16 GiB" in three.reason


# --- data-parallel efficiency per (GPUs, nodes) ---------------------------------------------------

def test_measured_data_parallel_efficiencies_change_the_estimates_speed(cli, tmp_path):
    # resnet50 (90 epochs) at 1000 s per epoch on one A10G; AWS g5.12xlarge has 4 A10G
    prof = _profile(tmp_path, workload="resnet50", reference_gpu="A10G", seconds_per_unit=1000, dp_scaling=[
        {"gpus": 1, "nodes": 1, "efficiency": 1}, {"gpus": 4, "nodes": 1, "efficiency": 0.8},
        {"gpus": 8, "nodes": 2, "efficiency": 0.5}])

    def jobs_s(*extra):
        r = cli("estimate", "--workload", "resnet50", "--provider", "aws", "--region", "us-east-1", "--all",
                "--format", "json", *extra)
        assert r.code == 0, r.err
        plans = json.loads(r.out)["plans"]
        out = {}
        for n in (1, 2):
            p = next(p for p in plans if p["instance_type"] == "g5.12xlarge" and p["count"] == n and p["setup"] == "scratch")
            out[n] = (p["machine_groups"][0]["jobs_s_max"], p["assumptions"])  # machines one by one: --schedules
        return out

    measured = jobs_s("--profile", str(prof))
    # 90 x 1000 s / (4 x 0.8) = 28,125 s on one machine; / (8 x 0.5) = 22,500 s on two
    assert measured[1][0] == 28125 and measured[2][0] == 22500
    assert any("efficiency 0.8 measured for 4 GPUs on 1 machine" in a for a in measured[1][1])
    assert any("efficiency 0.5 measured for 8 GPUs on 2 machines" in a for a in measured[2][1])
    # the same profile without its scaling points: the communication model's speed, not the measured one
    flat = _profile(tmp_path, "flat.yaml", workload="resnet50", reference_gpu="A10G", seconds_per_unit=1000)
    unmeasured = jobs_s("--profile", str(flat))
    assert unmeasured[1][0] != 28125 and unmeasured[2][0] != 22500
    assert any("ring allreduce over 4 GPUs of one machine" in a for a in unmeasured[1][1])
    assert any("ring allreduce over 2 machines" in a for a in unmeasured[2][1])


# --- the H100 run, on paper -------------------------------------------------------------------------

def _bench_module():
    return benchmarks.load("estimate_vs_measured")


def test_the_h100_run_is_predicted_within_10_percent_from_the_committed_profile():
    mod = _bench_module()
    fig = mod.shared_figures(mod.COPY)  # verbatim copy of shared/measurements/h100-2026-11-22
    assert (fig["jobs"], fig["epochs"], fig["gpus"], fig["price"]) == (4, 268, 1, Decimal(990))
    assert (fig["measured_wall"], fig["first_predicted_wall"]) == (Decimal("261.8"), Decimal("204.0"))
    profile = next(p for p in profiles.catalog_profiles() if p.name == mod.H100_PROFILE)
    wall, yen, plan = mod.predict(profile, fig["jobs"], fig["epochs"], fig["gpus"], fig["price"])
    # 4 x 268 epochs x 0.187079 s = 200.552 s of work + 4 starts x 17.2 s = 68.8 s -> 269.352 -> 270 s
    assert wall == 270 and plan.vms[0].job_starts_s == Decimal("68.8")
    assert yen == Decimal(990) * 270 / 3600 == Decimal("74.25")
    error = (fig["measured_wall"] - wall) / wall * 100
    assert abs(error) <= 10  # -3.0 %; the first prediction (204.0 s) was +28.4 %
    assert abs((fig["measured_yen"] - yen) / yen * 100) <= 10


def test_the_benchmark_prints_predicted_vs_measured_offline():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "estimate_vs_measured.py"), "--from-shared",
                          str(ROOT / "benchmarks" / "measured" / "h100-2026-11-22")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "predicted: wall 270.0 s, yen 74.25 (of which job starts 68.8 s)" in out.stdout
    assert "measured:  wall 261.8 s, yen 72.01" in out.stdout
    assert "error:     wall -3.0 %" in out.stdout and "target within 10 %: PASS" in out.stdout
