"""Spot as a priced risk (issue 35): a spot plan's expected yen and wall include its expected
interruptions, as docs/model.md ("Spot interruptions") writes the formula; the figures come
from the catalog's spot_interruptions.csv with their source; the pick compares the expected
figures."""

from __future__ import annotations

import dataclasses
import json
import math
from decimal import Decimal

import pytest
import yaml

from gpuplan.market import catalog, spot_risk
from gpuplan.planning import model
from gpuplan.planning.model import Setting
from gpuplan.planning.plan_types import Job, Workload
from gpuplan.planning.types import Interruption
from support import planner as sp

M = Decimal(730 * 3600)  # the month the frequency is per: 2,628,000 s
EPS = Decimal("1e-18")  # Decimal's 28 digits: the model sums in another order than the hand arithmetic


def _eq(a: Decimal, b: Decimal) -> bool:
    return abs(a - b) < EPS


BUCKETS = [("<5 %", 0, 5), ("5-10 %", 5, 10), ("10-15 %", 10, 15), ("15-20 %", 15, 20), (">20 %", 20, 100)]


def _spot_offer(frequency: str, low: int, high: int):
    # ¥3,600 an hour billed per second: ¥1 a second, so billed seconds read as yen
    o = sp.offer(name="s1", price="3600", granularity=1, minimum=0)
    return dataclasses.replace(o, market="spot", notes="spot: may be reclaimed at any time",
                               interruption=Interruption(frequency, Decimal(low), Decimal(high), source="test figure",
                                                         as_of="2025-06-28", publisher="test"))


def _plan(frequency="10-15 %", low=10, high=15, checkpoint_s=None, hours=100):
    """One spot machine, setup 10 min, one job of `hours` on its K80 (speed 1), from scratch."""
    offer = _spot_offer(frequency, low, high)
    cat = sp.catalog([offer], {"azure": sp.facts(setup_min=10)})
    work = Workload(name="t", description="", jobs=(Job("j0", Decimal(hours * 3600)),), unit="second",
                    seconds_per_unit=Decimal(1), reference_gpu="K80", speed={"K80": Decimal(1)},
                    checkpoint_s=checkpoint_s)
    seconds = hours * 3600
    return model.make_plan(work, Setting(catalog=cat, spot=True), [(offer, 1)], "scratch", 1,
                           [(offer, seconds, ("j0",))])


def _by_hand(low: int, high: int, checkpoint_s: int | None, hours: int = 100) -> tuple[Decimal, int]:
    """docs/model.md's formula, written out for _plan's one machine (the point: the middle of the
    range; the capacity wait at its middle, 15 min)."""
    head = Decimal(600)  # setup 10 min; no staging; the run engine is not counted (never measured here)
    work = Decimal(hours * 3600)  # one item: L = work
    f = (Decimal(low) + Decimal(high)) / 2 / 100
    item = min(Decimal(checkpoint_s), work) if checkpoint_s else work
    n = f * (head + work) / M  # expected interruptions
    r = f * (head * head + work * item) / (2 * M)  # redone seconds
    restart = head  # from scratch the replacement runs setup again (billed)
    yen = (r + n * restart) * 1  # ¥1 a second
    wall = math.ceil(r + n * (restart + 900))  # + the 15-min capacity wait (unbilled)
    return yen, wall


def test_the_formula_by_hand_for_one_machine():
    # 10-15 % a month: f = 0.125 at the point; head 600 s, work 360,000 s (100 h), no checkpoint
    #   n = 0.125 x 360,600 / 2,628,000                          = 0.0171518...
    #   r = 0.125 x (600^2 + 360,000 x 360,000) / (2 x 2,628,000) = 0.125 x 129,600,360,000 / 5,256,000
    #     = 3,082.2009...  (redone seconds: half of 100 h, 12.5 % / 730 h of the time)
    #   billed extra = r + n x 600 = 3,082.2009 + 10.2911 = 3,092.49 s -> ¥3,092.49 at ¥1/s
    #   wall extra = r + n x (600 + 900) = 3,082.2009 + 25.7277 = 3,107.93 -> 3,108 s
    p = _plan()
    yen, wall = _by_hand(10, 15, None)
    assert yen.quantize(Decimal("0.01")) == Decimal("3092.49") and wall == 3108
    assert p.breakdown["interruptions"] == p.risk.yen[1] and _eq(p.risk.yen[1], yen)
    assert p.risk.wall_s[1] == wall
    # the uninterrupted plan: 600 + 360,000 s at ¥1/s; its wall the same seconds
    assert _eq(p.cost, Decimal(360600) + yen) and p.wall_s == 360600 + wall
    assert _eq(p.risk.interruptions[1], Decimal("0.125") * 360600 / M)
    # the range's ends: f at 10 % with no wait, f at 15 % with a 30-min wait
    low = Decimal("0.10") * (600 * 600 + Decimal(360000) * 360000) / (2 * M) + Decimal("0.10") * 360600 / M * 600
    high = Decimal("0.15") * (600 * 600 + Decimal(360000) * 360000) / (2 * M) + Decimal("0.15") * 360600 / M * 600
    assert _eq(p.risk.yen[0], low) and _eq(p.risk.yen[2], high)


def test_expected_yen_grows_with_the_bucket_exactly_as_the_formula_says():
    seen = []
    for frequency, low, high in BUCKETS:
        p = _plan(frequency, low, high)
        yen, wall = _by_hand(low, high, None)
        assert _eq(p.breakdown["interruptions"], yen) and p.risk.wall_s[1] == wall, frequency
        seen.append(p.cost)
    assert seen == sorted(seen) and len(set(seen)) == len(seen)
    # the extra is linear in f: the 10-15 % bucket's middle (12.5 %) costs 5x the <5 % bucket's (2.5 %)
    assert _eq(_by_hand(10, 15, None)[0], _by_hand(0, 5, None)[0] * 5)


def test_expected_yen_grows_with_the_checkpoint_interval_exactly_as_the_formula_says():
    costs = []
    for every in (600, 3600, 6 * 3600, None):  # 10 min, 1 h, 6 h, none (the whole item: 100 h)
        p = _plan(checkpoint_s=every)
        yen, wall = _by_hand(10, 15, every)
        assert _eq(p.breakdown["interruptions"], yen) and p.risk.wall_s[1] == wall, every
        costs.append(yen)
    assert costs == sorted(costs) and len(set(costs)) == 4
    # every 10 min, by hand: r = 0.125 x (600^2 + 360,000 x 600) / 5,256,000 = 5.1455... s redone;
    # billed extra = r + n x 600 = 5.1455 + 10.2911 = 15.44 s: ¥15.44 instead of ¥3,092.49 without
    assert costs[0].quantize(Decimal("0.01")) == Decimal("15.44")
    # a checkpoint longer than the item changes nothing: the item never reaches it
    assert _eq(_plan(checkpoint_s=200 * 3600).breakdown["interruptions"], costs[-1])


def test_a_plan_without_spot_machines_carries_no_risk():
    o = sp.offer(name="od", price="3600", granularity=1, minimum=0)
    cat = sp.catalog([o], {"azure": sp.facts(setup_min=10)})
    work = Workload(name="t", description="", jobs=(Job("j0", Decimal(3600)),), unit="second",
                    seconds_per_unit=Decimal(1), reference_gpu="K80", speed={"K80": Decimal(1)}, checkpoint_s=600)
    p = model.make_plan(work, Setting(catalog=cat), [(o, 1)], "scratch", 1, [(o, 3600, ("j0",))])
    assert p.risk is None and "interruptions" not in p.breakdown and p.cost == Decimal(4200)


def test_every_catalog_spot_row_carries_its_figure_with_source_and_date():
    cat = catalog.load("2026-11", user_prices=False)
    rows = [o for o in cat.offers if o.market == "spot"]
    assert rows
    for o in rows:
        fig = spot_risk.figure(o)  # a row the CSV lacks is planned as unknown (a GCP spot row would be)
        assert fig.source, o.key
        if o.provider == "aws":  # the Spot Instance Advisor's buckets, dated
            assert fig.known and fig.publisher == "AWS Spot Instance Advisor" and fig.as_of == "2025-06-28"
            assert (fig.frequency, int(fig.low_pct), int(fig.high_pct)) in BUCKETS
        else:  # no published figure stored: said, with the range assumed
            assert not fig.known and (fig.low_pct, fig.high_pct) == (0, 100) and "unknown" in fig.source
    g5 = cat.spot_offer(cat.resolve("aws:g5.xlarge", region="us-east-1"))
    assert g5.interruption.frequency == ">20 %"
    p4d = cat.spot_offer(cat.resolve("aws:p4d.24xlarge", region="ap-northeast-1"))
    assert p4d.interruption.frequency == "<5 %"


def test_estimate_spot_videos_40_shows_each_spot_plans_risk_and_its_source(cli):
    r = cli("estimate", "--spot", "--videos", "40")
    assert r.code == 0, r.err
    table = r.out.split("\nRecommended:")[0].splitlines()[3:]
    spot_rows = [line.split("  ")[1].strip() for line in table if "(spot)" in line]
    assert spot_rows
    text = " ".join(r.out.split())  # the risk lines wrap at 160 columns
    risk_lines = text.split("spot risk: ")[1:]
    assert len(risk_lines) == len(spot_rows)
    for label, line in zip(spot_rows, risk_lines):
        assert line.startswith(label), (label, line[:80])
        assert "uninterrupted +" in line and "expected (" in line and "interruptions expected" in line
        # its source: the AWS bucket with its publisher and date, or unknown with the range assumed
        assert ("AWS Spot Instance Advisor as of 2025-06-28" in line
                or "unknown, 0–100 % a month assumed (no published figure" in line), line
    assert "a month (20–100 %), AWS Spot Instance Advisor as of 2025-06-28" in text  # p3.2xlarge us-east-1: >20 %

    data = json.loads(cli("estimate", "--spot", "--videos", "40", "--format", "json").out)
    for p in data["plans"]:
        if not p["feasible"]:
            continue
        risk = p["spot_risk"]
        if p["market"] == "on-demand":
            assert risk is None
            continue
        assert risk["figures"] and all(f["source"] for f in risk["figures"])
        lo, pt, hi = (Decimal(x) for x in risk["extra_jpy"])
        assert lo <= pt <= hi
        # the plan's yen is its uninterrupted yen plus the expected extra (the breakdown's part)
        assert Decimal(risk["cost_exact_jpy_uninterrupted"]) + pt == pytest.approx(Decimal(p["cost_exact_jpy"]),
                                                                                abs=Decimal("0.011"))
        assert Decimal(p["breakdown"]["interruptions"]) == pt.quantize(Decimal("0.01"))


def _long_a10g_job(tmp_path, checkpoint: str | None):
    doc = {"name": "long-a10g", "unit": "second", "seconds_per_unit": 1, "reference_gpu": "A10G",
           "memory_gib": 20, "jobs": [{"name": "train", "units": 200 * 3600}],
           "source": "test: one 200-h job on an A10G"}
    if checkpoint:
        doc["checkpoint"] = {"every": checkpoint}
    path = tmp_path / f"long-{checkpoint or 'none'}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_pick_turns_from_spot_to_on_demand_when_the_risk_makes_spot_dearer(cli, tmp_path, monkeypatch):
    # g5.xlarge us-east-1: spot 0.4507 USD/h, interrupted >20 % of machines a month (the catalog's
    # figures). A prices file puts its on-demand row at 0.47 USD/h, 4 % over spot: uninterrupted,
    # spot is cheaper; for one 200-h job without checkpoints the expected redone work
    # (f = 0.6 at the point: 0.6 x 200 h / 730 h x 100 h redone = 16.4 h, 8 % of the job) makes it
    # dearer; with a checkpoint every 10 min it is cheaper again.
    prices = tmp_path / "prices.yaml"
    prices.write_text(yaml.safe_dump({"offers": [{"provider": "aws", "name": "g5.xlarge", "region": "us-east-1",
                                                  "price": 0.47, "currency": "USD"}]}))
    monkeypatch.setenv("GPUPLAN_PRICES", str(prices))
    picks = {}
    for every in (None, "10m"):
        r = cli("estimate", "--workload", str(_long_a10g_job(tmp_path, every)), "--spot", "--provider", "aws",
                "--region", "us-east-1", "--objective", "cost", "--format", "json")
        assert r.code == 0, r.err
        data = json.loads(r.out)
        rec = data["recommended"]
        picks[every] = (rec["instance_type"], rec["market"])
        spot = next(p for p in data["plans"] if p["feasible"] and p["instance_type"] == "g5.xlarge"
                    and p["market"] == "spot" and p["count"] == 1)
        od = next(p for p in data["plans"] if p["feasible"] and p["instance_type"] == "g5.xlarge"
                  and p["market"] == "on-demand" and p["count"] == 1)
        # uninterrupted, spot is the cheaper either way
        assert Decimal(spot["spot_risk"]["cost_exact_jpy_uninterrupted"]) < Decimal(od["cost_exact_jpy"])
        assert spot["spot_risk"]["figures"][0]["frequency"] == ">20 %"
        if every is None:
            assert Decimal(spot["cost_exact_jpy"]) > Decimal(od["cost_exact_jpy"])
        else:
            assert spot["spot_risk"]["checkpoint_minutes"] == 10
            assert Decimal(spot["cost_exact_jpy"]) < Decimal(od["cost_exact_jpy"])
    assert picks == {None: ("g5.xlarge", "on-demand"), "10m": ("g5.xlarge", "spot")}


def test_checkpoint_is_read_from_a_workload_file_and_a_batch_file(tmp_path):
    from gpuplan import batchfile
    from gpuplan.errors import UsageError
    from gpuplan.planning import workloads

    w = workloads.load(str(_long_a10g_job(tmp_path, "10m")))
    assert w.checkpoint_s == 600
    assert workloads.load(str(_long_a10g_job(tmp_path, None))).checkpoint_s is None
    items = tmp_path / "items.txt"
    items.write_text("a\nb\n")
    bf = tmp_path / "batch.yaml"
    bf.write_text(yaml.safe_dump({"workload": "colorize-hd", "items": "items.txt", "command": "run {item}",
                                  "checkpoint": {"every": "1h", "path": "/data/ckpt"}}))
    batch = batchfile.read(bf, {})
    assert (batch.checkpoint_s, batch.checkpoint_path) == (3600, "/data/ckpt")
    assert batch.planned(w).checkpoint_s == 3600  # the batch's word wins over the workload's
    bf.write_text(yaml.safe_dump({"workload": "colorize-hd", "items": "items.txt", "command": "run {item}",
                                  "checkpoint": {"often": "1h"}}))
    with pytest.raises(UsageError, match="unknown field 'often'"):
        batchfile.read(bf, {})


def test_unknown_figure_for_a_row_without_one_is_the_stated_range():
    o = dataclasses.replace(sp.offer(), market="spot", notes="spot: may be reclaimed at any time; one zone")
    fig = spot_risk.figure(o)
    assert not fig.known and (fig.low_pct, fig.high_pct) == spot_risk.UNKNOWN_PCT and fig.notes == "may be reclaimed at any time"
