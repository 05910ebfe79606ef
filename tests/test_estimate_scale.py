"""What makes 20,000 jobs plan in seconds (issue 13 item 8) without changing a figure: alike
machines priced once, schedules improved only where they could change the answer, libyaml.
The speed itself is shown by benchmarks/limits_bench.py, not timed here."""

from __future__ import annotations

import random
from decimal import Decimal

import yaml

from gpuplan import userfiles
from gpuplan.market import catalog
from gpuplan.planning import model, optimizer, workloads
from gpuplan.planning.model import Setting
from gpuplan.planning.plan_types import Job, Workload
from support import planner as sp


def _work(minutes) -> Workload:
    return Workload(name="t", description="", jobs=tuple(Job(f"j{i}", Decimal(m * 60)) for i, m in enumerate(minutes)),
                    unit="second", seconds_per_unit=Decimal(1), reference_gpu="K80", speed={"K80": Decimal(1)})


def test_machines_in_columns_price_exactly_as_one_by_one():
    # 5 machines, 3 of them alike, from an image on a per-minute offer, kept until the end
    o = sp.offer(price="61", granularity=60, minimum=60)
    cat = sp.catalog([o], {"azure": sp.facts(setup_min=30, capture_min=7, launch_min=3, builder_is_worker=True)})
    w = _work([50, 50, 50, 71, 13])
    for release in ("when-done", "at-end"):
        s = Setting(catalog=cat, release=release)
        one_by_one = [(o, 3000, ("j0",)), (o, 3000, ("j1",)), (o, 3000, ("j2",)), (o, 4260, ("j3",)), (o, 780, ("j4",))]
        columns = [model.Loads(o, [3000, 4260, 780], [3, 1, 1], [(("j0",), ("j1",), ("j2",)), (("j3",),), (("j4",),)])]
        a = model.make_plan(w, s, [(o, 5)], "image", 1, one_by_one)
        b = model.make_plan(w, s, [(o, 5)], "image", 1, columns)
        assert (a.cost, a.breakdown, a.wall_s, a.billed_s) == (b.cost, b.breakdown, b.wall_s, b.billed_s)
        assert [(v.role, v.jobs_s, v.idle_s, v.billed_s, v.cost, v.end_s, v.jobs) for v in a.vms] == \
            [(v.role, v.jobs_s, v.idle_s, v.billed_s, v.cost, v.end_s, v.jobs) for v in b.vms]
        assert [v.role for v in b.vms] == ["builder+worker", "worker", "worker", "worker", "worker"]
        assert b.machine_count == 5 and len(b.machines) == 2  # the builder apart, the workers in one column


def test_twenty_thousand_equal_jobs_make_few_kinds_of_machine():
    est = optimizer.estimate(workloads.videos(20_000), Setting(catalog=catalog.load("2017-08"), as_of_month="2017-08"),
                             provider="azure")
    biggest = max((p for p in est.plans if p.machines), key=lambda p: p.machine_count)
    assert biggest.machine_count >= 20_000
    assert sum(len(m.counts) for m in biggest.machines) <= 3  # 20,000 machines, priced as at most 3 kinds
    assert sum(len(v.jobs) for v in biggest.vms) == 20_000  # and every job is on one of them


def test_schedules_are_improved_where_they_could_change_the_answer():
    rng = random.Random(3)
    w = _work([rng.choice([10, 15, 20, 30, 40, 60]) + rng.random() for _ in range(300)])
    est = optimizer.estimate(w, Setting(catalog=catalog.load()))

    def method(p):
        return next(a for a in p.assumptions if a.startswith("schedule:")).split(" by ")[1].split(" ")[0]

    scheduled = [p for p in est.plans if p.machines and len(p.fleet) == 1 and p.per_gpu == 1]
    # the pick and the frontier carry improved (or proven) schedules...
    def colocated(p):  # issue 23: slowed per machine and period, its slot schedule proven, the makespan bounded
        return any(a.startswith("co-location slowdown per machine and period") for a in p.assumptions) and any(
            "not proven optimal: at most" in a for a in p.assumptions)

    for p in [est.recommended, *est.pareto]:
        assert p.optimal or method(p) != "lpt" or colocated(p), p.label
    # ...while plans beaten by their own bounds keep LPT's, honestly flagged
    kept = [p for p in scheduled if method(p) == "lpt" and not p.optimal]
    assert kept and all("not proven optimal" in " ".join(p.assumptions) for p in kept)
    assert est.proven


def test_yaml_is_read_by_libyaml_where_pyyaml_has_it(monkeypatch):
    used = []
    real = yaml.load

    def spy(text, Loader):
        used.append(Loader)
        return real(text, Loader=Loader)

    monkeypatch.setattr(yaml, "load", spy)
    work = workloads.parse("name: x\nseconds_per_unit: 2\nreference_gpu: K80\njobs:\n  - {units: 3, count: 2}\n", "test")
    assert [j.units for j in work.jobs] == [3, 3] and work.seconds_per_unit == 2
    # gpuplan's strict loader (no duplicate keys, finite numbers) is a subclass of libyaml's safe one
    assert len(used) == 1 and issubclass(used[0], getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    if yaml.__with_libyaml__:
        assert issubclass(used[0], yaml.CSafeLoader) and issubclass(used[0], yaml.cyaml.CParser)


def test_the_c_loader_is_safe():
    import pytest

    with pytest.raises(yaml.YAMLError):
        userfiles.load_yaml("a: !!python/object/apply:os.system ['true']")
