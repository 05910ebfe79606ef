"""What running costs in a plan (issue 30): the run engine's start and one submission on every
machine that runs jobs, in wall and billed, once gpuplan has run its engine on the offer; a DOK
task has no engine, only its image pull. Figures worked out by hand in the comments."""

from __future__ import annotations

from decimal import Decimal
from types import MappingProxyType

from gpuplan.planning import model
from gpuplan.planning.model import Setting
from gpuplan.planning.plan_types import Job, Workload
from support import planner as sp

MEASURED = {("azure", "vm1"): (156, "test state")}  # the `ray` playbook's install, as bootstrap records it


def _work(*minutes) -> Workload:
    return Workload(name="t", description="", jobs=tuple(Job(f"j{i}", Decimal(m * 60)) for i, m in enumerate(minutes)),
                    unit="second", seconds_per_unit=Decimal(1), reference_gpu="K80", speed={"K80": Decimal(1)})


def _plan(cat, fleet, mode, loads, measured=True, **kw):
    s = Setting(catalog=cat, measured_engine=MEASURED if measured else {})
    return model.make_plan(_work(10, 10), s, fleet, mode, 1, loads, **kw)


def test_the_figures_are_the_measured_ones():
    assert (model.ENGINE_INSTALL_S, model.ENGINE_START_S, model.SUBMIT_S) == (156, 67, 3)


def test_scratch_every_machine_pays_the_install_the_start_and_a_submission():
    o = sp.offer("vm1", price="100", granularity=60, minimum=60)
    cat = sp.catalog([o])  # azure: setup 60 min
    loads = [(o, 600, ("j0",)), (o, 600, ("j1",))]
    plan = _plan(cat, [(o, 2)], "scratch", loads)
    # each: 3,600 s setup + 156 s install + 67 s start + 3 s submission = 3,826 s, then 600 s of jobs:
    # 4,426 s held, 4,440 s billed (whole minutes); 2 x 4,440 s x ¥100/h = ¥246.67
    assert [(vm.setup_s, vm.jobs_s, vm.billed_s) for m in plan.machines for vm in m.each()] == [(3826, 600, 4440)] * 2
    assert plan.wall_s == 4426
    assert (round(plan.cost, 2), plan.cost_jpy) == (Decimal("246.67"), 247)
    assert round(plan.breakdown["setup"], 2) == Decimal("212.56")  # 2 x 3,826 s x ¥100/h
    said = [a for a in plan.assumptions if a.startswith("run engine")]
    assert said[0].startswith("run engine (Ray 2.60.0) install 3 min on vm1: measured (test state), counted in setup")
    assert said[1].startswith("run engine (Ray 2.60.0) start 67 s (measured on two owned hosts) and one submission 3 s")
    # not measured on vm1: none of it counted (3,600 + 600 = 4,200 s each), and the plan says so
    bare = _plan(cat, [(o, 2)], "scratch", loads, measured=False)
    assert (bare.wall_s, bare.cost_jpy) == (4200, 233)  # 2 x 4,200 s x ¥100/h = ¥233.33
    assert any(a.startswith("run engine (Ray 2.60.0) install about 3 min per machine, start about 67 s and one"
                            " submission about 3 s per batch") and "not counted" in a for a in bare.assumptions)


def test_from_an_image_the_install_is_the_builders_and_every_worker_starts_the_engine():
    o = sp.offer("vm1", price="100", granularity=60, minimum=60)
    cat = sp.catalog([o], {"azure": sp.facts(setup_min=60, capture_min=5, launch_min=5, builder_is_worker=True)})
    plan = _plan(cat, [(o, 2)], "image", [(o, 600, ("j0",)), (o, 600, ("j1",))])
    builder, worker = (vm for m in plan.machines for vm in m.each())
    # builder: 3,600 + 156 install + 70 start and submission = 3,826 s, 300 s capture (billed: it keeps
    # working), 600 s jobs: 4,726 s, billed 4,740 s
    assert (builder.role, builder.setup_s, builder.capture_s, builder.billed_s, builder.end_s) == (
        "builder+worker", 3826, 300, 4740, 4726)
    # worker: launched at 3,756 + 300 + 300 = 4,356 s, then 70 s start and submission, 600 s jobs:
    # 670 s held, billed 720 s; it ends the plan at 5,026 s
    assert (worker.role, worker.setup_s, worker.billed_s, worker.end_s) == ("worker", 70, 720, 5026)
    assert plan.wall_s == 5026
    assert (round(plan.cost, 2), plan.cost_jpy) == (Decimal("151.67"), 152)  # (4,740 + 720) s x ¥100/h


def test_a_dok_task_has_no_engine_start_only_its_image_pull():
    dok = sp.offer("dok1", provider="sakura", kind="task", price="100", granularity=1, minimum=60)
    facts = sp.facts("sakura", setup_min=0)
    cat = sp.catalog([dok], {"sakura": type(facts)(**{**facts.__dict__, "task_start_s": 180})})
    s = Setting(catalog=cat, measured_engine=MappingProxyType({("sakura", "dok1"): (156, "test state")}))
    assert model.run_start(dok, _work(10, 10), s) == (0, [])
    plan = model.make_plan(_work(10, 10), s, [(dok, 1)], "scratch", 1, [(dok, 1200, ("j0", "j1"))],
                           task_seconds=[600, 600])
    # two tasks one after the other, each pulling its image first (180 s, wall only): 2 x 180 + 1,200 s;
    # billed: each task its own 600 s
    assert plan.wall_s == 2 * 180 + 1200
    assert [vm.billed_s for m in plan.machines for vm in m.each()] == [1200]
    assert not any(a.startswith("run engine") for a in plan.assumptions)
