"""Planning at the size of the whole market (issue 47) without changing a figure: offers that
cannot win pruned before fleets are built, the co-location arithmetic once per machine shape,
capped charges worked out together. The speed itself is shown by benchmarks/, not timed here."""

from __future__ import annotations

import random
from dataclasses import replace
from decimal import Decimal

from gpuplan.market import billing
from gpuplan.planning import candidates, model, optimizer
from gpuplan.planning.model import Quotas, Setting
from gpuplan.planning.plan_types import Job, Workload
from support import planner as sp


def _simulated_end(slots, rates) -> Decimal:
    """colocated_end as it was before its closed form: the machine simulated period by period."""
    state = [[f, w] for f, w in slots if f or w]
    now, tiny = Decimal(0), Decimal("1e-9")
    while state:
        rate = rates[len(state)]
        step = min(f if f > tiny else w / rate for f, w in state)
        now += step
        for s in state:
            if s[0] > tiny:
                s[0] -= step
            else:
                s[1] -= step * rate
        state = [s for s in state if s[0] > tiny or s[1] > tiny]
    return now


def test_colocated_end_without_job_starts_is_the_simulation_in_closed_form():
    rng = random.Random(47)
    rates = {1: Decimal(1), 2: 1 / Decimal("1.1"), 3: 1 / Decimal("1.25"), 4: 1 / Decimal("1.4")}
    for _ in range(300):
        slots = [(Decimal(0), Decimal(rng.choice([0, 60, 600, 601, 3000, rng.randint(1, 20000)])) * Decimal("0.813"))
                 for _ in range(rng.randint(1, 4))]
        got = model.colocated_end(slots, rates)
        assert abs(got - _simulated_end(slots, rates)) < Decimal("1e-12")
        assert model.ceil_s(got) == model.ceil_s(_simulated_end(slots, rates))
    # by hand: 100 and 300 s of work, 2 jobs at 1/1.1: the first ends at 110 s, the second's last
    # 200 s alone at full speed: 310 s
    assert model.colocated_end([(Decimal(0), Decimal(100)), (Decimal(0), Decimal(300))], rates) == Decimal(310)
    # with job starts (fixed wall time) the simulation itself still answers
    assert model.colocated_end([(Decimal(5), Decimal(100)), (Decimal(0), Decimal(300))], rates) == \
        _simulated_end([(Decimal(5), Decimal(100)), (Decimal(0), Decimal(300))], rates)


def test_capped_charges_together_are_each_charge():
    t = billing.Terms(Decimal("123.4"), 3600, 60, 60, daily_cap_jpy=Decimal("2000"))
    held = [0, 1, 59, 61, 3600, 86_399, 86_400, 86_401, 200_000, 999_999]
    assert billing.charges(held, t) == [billing.charge(x, t) for x in held]
    monthly = replace(t, monthly_cap_jpy=Decimal("30000"))
    assert billing.charges(held, monthly) == [billing.charge(x, monthly) for x in held]


def _setting(offers, quotas: Quotas | None = None):
    return Setting(catalog=sp.catalog(offers, {"azure": sp.facts(setup_min=10)}), quotas=quotas or Quotas())


def test_the_same_size_dearer_elsewhere_is_pruned_and_the_first_cheapest_kept():
    a = sp.offer(region="r1", price="100")
    b = sp.offer(region="r2", price="100")  # as cheap, listed later: cannot win a tie
    c = sp.offer(region="r3", price="90")  # cheaper: kept, and it beats the other two
    d = sp.offer(name="vm2", region="r2", price="150")  # another size: kept
    e = sp.offer(region="r4", price="80", vcpus=12)  # more vCPUs (quota, feed): not the same size
    kept, pruned = candidates.prune([a, b, c, d, e], _setting([a, b, c, d, e]))
    assert kept == [c, d, e]
    assert [(p.offer, p.by) for p in pruned] == [(a, c), (b, c)]


def test_quotas_read_in_a_region_keep_its_offers_apart():
    a = sp.offer(region="r1", price="100")
    b = sp.offer(region="r2", price="120")
    quotas = Quotas(read={("azure", "r2", "fam"): (96, "2026-11-28")})
    kept, pruned = candidates.prune([a, b], _setting([a, b], quotas))
    assert kept == [a, b] and pruned == []
    kept, pruned = candidates.prune([a, b], _setting([a, b]))
    assert kept == [a] and [p.offer for p in pruned] == [b]


def test_pruning_keeps_the_pick_and_says_what_it_left_out():
    w = Workload(name="t", description="", jobs=tuple(Job(f"j{i}", Decimal(m * 60)) for i, m in enumerate([50, 40, 30, 20])),
                 unit="second", seconds_per_unit=Decimal(1), reference_gpu="K80", speed={"K80": Decimal(1)})
    a = sp.offer(region="r1", price="100")
    copies = [replace(a, region=f"r{i}", price=Decimal(100 + i), price_jpy_per_hour=Decimal(100 + i)) for i in range(2, 6)]
    alone = optimizer.estimate(w, _setting([a]))
    many = optimizer.estimate(w, _setting([*copies, a]))
    assert (many.recommended.label, many.recommended.region, many.recommended.cost, many.recommended.wall_s) == \
        (alone.recommended.label, "r1", alone.recommended.cost, alone.recommended.wall_s)
    assert {p.region for p in many.plans} == {"r1"}
    assert "4 offers not planned" in many.extra["pruned"] and "vm1 r2 (¥102.00/h; r1 ¥100.00/h)" in many.extra["pruned"]
