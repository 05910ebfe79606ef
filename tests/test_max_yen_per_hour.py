"""max_yen_per_hour (issue 44 item 5): plans whose fleet costs more an hour than the ceiling are
left out with that reason (MAX_YEN_PER_HOUR), on the estimate's tax basis, and a saved plan
over it is refused before anything is bought. Figures worked by hand."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpuplan.errors import UsageError
from gpuplan.planning import optimizer, outcomes
from gpuplan.planning.model import Setting
from gpuplan.planning.outcomes import Code
from gpuplan.planning.plan_types import Job, Workload
from support import planner as sp


def _work(jobs: int = 4) -> Workload:
    # each job one hour on a K80; no setup: a machine's wall is its jobs
    return Workload(name="t", description="", jobs=tuple(Job(f"j{i}", Decimal(3600)) for i in range(jobs)),
                    unit="second", seconds_per_unit=Decimal(1), reference_gpu="K80", speed={"K80": Decimal(1)})


def _estimate(cap):
    cheap = sp.offer(name="cheap", price="300", vcpus=4)  # ¥300/h
    dear = sp.offer(name="dear", price="500", vcpus=4, gpu="V100", memory="16")  # ¥500/h, 7.7x as fast
    cat = sp.catalog([cheap, dear], {"azure": sp.facts(setup_min=0, quota=64)})
    return optimizer.estimate(_work(), Setting(catalog=cat, max_yen_per_hour=cap), mixes=False)


def test_plans_over_the_hourly_ceiling_are_left_out_with_their_rate():
    est = _estimate(Decimal(1000))
    by_fleet = {(p.fleet[0][0].name, p.count): p for p in est.plans if len(p.fleet) == 1}
    # 2x cheap = 2 x 300 = ¥600/h (in); 3x cheap = ¥900/h (in); 4x cheap = ¥1,200/h (out: 200 over)
    assert by_fleet[("cheap", 2)].feasible and by_fleet[("cheap", 3)].feasible
    out = by_fleet[("cheap", 4)]
    assert not out.feasible
    [reason] = [r for r in out.excluded_by if r.code is Code.MAX_YEN_PER_HOUR]
    assert reason.get("yen_per_hour") == Decimal(1200) and reason.get("max_yen_per_hour") == Decimal(1000)
    assert outcomes.render(reason) == "costs ¥1,200.00/h, over max_yen_per_hour ¥1,000.00/h"
    # 2x dear = ¥1,000/h: exactly the ceiling is within it; 3x dear = ¥1,500/h is not
    assert by_fleet[("dear", 2)].feasible
    assert Code.MAX_YEN_PER_HOUR in [r.code for r in by_fleet[("dear", 3)].excluded_by]
    # the pick is never over the ceiling
    rec = est.recommended
    assert rec is not None and sum(o.price_jpy_per_hour * n for o, n in rec.fleet) <= Decimal(1000)


def test_no_ceiling_leaves_every_plan_as_it_was():
    est = _estimate(None)
    assert not any(r.code is Code.MAX_YEN_PER_HOUR for p in est.plans for r in p.excluded_by)
    four = next(p for p in est.plans if len(p.fleet) == 1 and p.fleet[0][0].name == "cheap" and p.count == 4)
    assert four.feasible


def test_a_ceiling_under_every_machine_leaves_nothing_to_pick():
    est = _estimate(Decimal(299))  # one cheap machine alone is ¥300/h
    assert est.recommended is None
    assert all(Code.MAX_YEN_PER_HOUR in [r.code for r in p.excluded_by] for p in est.plans)


def test_a_saved_plan_over_the_ceiling_is_refused_on_the_tax_basis():
    from gpuplan.run import failover

    listed = sp.offer(name="g", provider="aws", price="1000")  # ¥1,000/h listed without tax
    listed = type(listed)(**{**listed.__dict__, "tax": "excluded"})
    # x2 = ¥2,000/h without tax = ¥2,200/h with Japan's 10 % tax: over a ¥2,100 ceiling tax included ...
    with pytest.raises(UsageError) as err:
        failover.refuse_over_rate([(listed, 2)], Decimal(2100), "included")
    assert str(err.value) == ("the pick, 2x aws:g, costs ¥2,200.00/h, over max_yen_per_hour ¥2,100.00/h: raise "
                              "max_yen_per_hour, or plan again within it (`gpuplan estimate ... --max-yen-per-hour`)")
    # ... and within it on the basis without tax (¥2,000 <= ¥2,100)
    failover.refuse_over_rate([(listed, 2)], Decimal(2100), "excluded")
    failover.refuse_over_rate([(listed, 2)], None, "included")


def test_the_flag_and_the_batch_field(cli, tmp_path):
    r = cli("estimate", "--videos", "4", "--max-yen-per-hour", "0")
    assert r.code == 2 and "--max-yen-per-hour" in r.err and "Traceback" not in r.err
    r = cli("estimate", "--videos", "4", "--provider", "aws", "--max-yen-per-hour", "1", "--format", "json")
    assert r.code == 2  # nothing left to pick: every AWS machine costs more than ¥1 an hour
    import json

    data = json.loads(r.out)
    assert data["plans"] and not any(p["feasible"] for p in data["plans"])
    rated = [p for p in data["plans"] if "max_yen_per_hour" in [x["code"] for x in p["excluded_by"]]]
    assert rated and all(p["provider"] == "aws" for p in rated)
    from gpuplan import batchfile

    items = tmp_path / "items.txt"
    items.write_text("a\n")
    batch = tmp_path / "b.yaml"
    batch.write_text(f"items: {items}\ncommand: echo {{item}}\nmax_yen_per_hour: 1500\n")
    assert batchfile.read(batch, {}).max_yen_per_hour == Decimal(1500)
    assert batchfile.read(batch, {"max_yen_per_hour": "900"}).max_yen_per_hour == Decimal(900)
