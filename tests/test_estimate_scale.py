"""What makes 20,000 jobs plan in seconds (issue 13 item 8) without changing a figure: alike
machines priced once, schedules improved only where they could change the answer, libyaml.
The speed itself is shown by benchmarks/limits_bench.py, not timed here."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest
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
    parsed, loaded = [], []
    real_parse, real_load = yaml.parse, yaml.load

    def spy_parse(text, Loader):
        parsed.append(Loader)
        return real_parse(text, Loader=Loader)

    def spy_load(text, Loader):
        loaded.append(Loader)
        return real_load(text, Loader=Loader)

    monkeypatch.setattr(yaml, "parse", spy_parse)
    monkeypatch.setattr(yaml, "load", spy_load)
    work = workloads.parse("name: x\nseconds_per_unit: 2\nreference_gpu: K80\njobs:\n  - {units: 3, count: 2}\n", "test")
    assert [j.units for j in work.jobs] == [3, 3] and work.seconds_per_unit == 2
    # a plain file is parsed once, by libyaml's parser, and built from its events (issue 47)
    assert parsed == [getattr(yaml, "CSafeLoader", yaml.SafeLoader)] and loaded == []
    if yaml.__with_libyaml__:
        assert issubclass(parsed[0], yaml.cyaml.CParser)
    # anything unusual (here an explicit tag) is read again by gpuplan's strict loader (no duplicate
    # keys, finite numbers), a subclass of libyaml's safe one
    work = workloads.parse("name: x\nseconds_per_unit: !!int 2\nreference_gpu: K80\njobs:\n  - {units: 3}\n", "test")
    assert work.seconds_per_unit == 2
    assert len(loaded) == 1 and issubclass(loaded[0], getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    if yaml.__with_libyaml__:
        assert issubclass(loaded[0], yaml.CSafeLoader) and issubclass(loaded[0], yaml.cyaml.CParser)


def test_the_c_loader_is_safe():
    import pytest

    with pytest.raises(yaml.YAMLError):
        userfiles.load_yaml("a: !!python/object/apply:os.system ['true']")


@pytest.mark.parametrize("text", [
    "", "---\n", "a: 1", "3", "'x'", "[]", "{}", "a:\nb:\n", "- \n- ''", "[1, 2, [3, [4, {a: b}]]]", "- a\n- b: c\n  d: [e, f]",
    "x: 0x10\ny: 1_000\nz: yes\nw: 1:30\nv: ~\nu: null\nt: True\ns: '12'\nr: \"a\\tb\"\nq: 1.5e3\np: .5\no: -3\nn: 012\nm: 1.",
    "x: 2026-01-05\ny: 2026-01-05 10:00:00\nz: a: b", "a: &anchor [1]\n", "a: ! 12", "name: x\njobs:\n  - {units: 1}\n  - {units: 1}",
    # refused: the same message for the same first fault, in PyYAML's order (a mapping's keys, then
    # its scalars, then what is nested, level by level)
    "a: 1\na: 2", "{1: a, true: b}", "1: a\n1.0: b", "a: 'x'\n'a': y", "a: [1, 2, {b: 3, b: 4}]\nc: 1e999",
    "a: {x: 1e999}\nb: 1\nb: 2", "a: {x: 1, x: 2}\nb: {y: .inf}", "a: {b: {c: {d: 1e999}}, e: 1, e: 2}", "x: 2026-13-45",
    "x: 1234567890123456789012345678901", "k: .NaN", "a: b\n  c",
    # left to the full loader: merge keys, explicit tags, several documents, keys that are not scalars
    "<<: {a: 1}\nb: 2", "=: 1", "a: !!str 12", "!!set {a, b}", "--- 1\n--- 2\n", "? [a, b]\n: 1", "? {a: 1, a: 2}\n: 1",
    "a: &x 1\nb: *x",
])
def test_yaml_built_from_events_is_what_the_strict_loader_builds(text):
    """issue 47: load_yaml builds a plain document from the parser's events in one pass; every
    value and every refusal is the strict loader's own."""
    def outcome(read):
        try:
            value = read(text)
            return "ok", repr(value), type(value).__name__
        except yaml.YAMLError as exc:
            return "refused", type(exc).__name__, userfiles.yaml_problem(exc)

    def strict(text):  # load_yaml as it was: the events checked, then the strict loader
        userfiles._check_events(yaml.parse(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
        return yaml.load(text, Loader=userfiles._strict_loader())

    assert outcome(userfiles.load_yaml) == outcome(strict)
