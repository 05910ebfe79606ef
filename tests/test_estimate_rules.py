"""`gpuplan estimate` as people read it (issue 13): one way to write figures, plain text when
piped, every note once, ranking rules that are stated and kept, proofs only where a gap is
real, "no feasible plan" naming what excludes the best plan (exit 2), and spot plans."""

from __future__ import annotations

import json
import re
from decimal import Decimal

from gpuplan.market import catalog
from gpuplan.planning import candidates, model, optimizer, workloads
from gpuplan.planning.model import Setting
from gpuplan.planning.plan_types import Job, Workload
from support import planner as sp


def _json(cli, *args, code=0):
    r = cli("estimate", *args, "--format", "json")
    assert r.code == code, r.err
    return json.loads(r.out), r


# --- item 4: how the figures read ----------------------------------------------------------------

def test_piped_output_is_plain_text_without_trailing_spaces_or_forced_width(cli):
    # report A's own figures: they include 2017's 8 % tax (¥91.80 = ¥85 x 1.08), the default basis
    r = cli("estimate", "--videos", "4", "--as-of", "2017-08", "--all", "--tax", "included")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert not [line for line in lines if line != line.rstrip()]  # no trailing spaces on any line
    assert "\x1b[" not in r.out  # no colour codes
    # not centred in 200 columns; the tax basis every yen is on
    assert lines[0] == "gpuplan estimate: colorize-hd (4 jobs), catalog 2017-08; yen include Japan's 8 % consumption tax"
    header = lines[1]
    assert len(header) < 200 and header.split() == ["fleet", "where", "setup", "wall", "billed", "yen", "speed", "evidence",
                                                    "yen", "range", "wall", "range", "feasible", "/", "why", "excluded"]
    # one line per plan, every column on it; minutes under 2 h, h:mm above, yen with separators
    row = next(line for line in lines if line.startswith("→"))
    assert re.search(r"4x Standard_NC6 +azure westus2 +image +3:00 h +9:00 h +¥826 +measured +yes", row)
    assert "Recommended: 4x Standard_NC6 azure westus2, from an image: ¥826, wall 3:00 h, billed 9:00 h" in r.out
    # the breakdown shows sen so that it adds up, and says how it rounds
    assert "breakdown: setup ¥91.80, jobs ¥734.40 (total ¥826.20 → ¥826)" in r.out
    for old in (" 91 min", "91.0 min", ".0 min", "¥14601"):
        assert old not in r.out
    assert not re.search(r"¥\d{4}", r.out)  # thousands always separated


def test_assumptions_and_reasons_use_the_same_formats(cli):
    data, _ = _json(cli, "--videos", "4", "--as-of", "2017-08", "--deadline", "3h", "--tax", "included")  # report A's
    nc24 = next(p for p in data["plans"] if p["instance_type"] == "Standard_NC24" and p["setup"] == "scratch")
    assert nc24["reason"] == "misses the deadline by 30 min (wall 3:30 h > 3:00 h)"
    text = "\n".join(data["recommended"]["assumptions"])
    assert "Standard_NC6 westus2: 91.80 JPY/hour = ¥91.80/h, billed per minute, minimum 1 min" in text
    assert "schedule: makespan 2:00 h by lpt" in text
    # JSON keeps exact, machine-readable figures
    assert data["recommended"]["wall_minutes"] == 180 and data["recommended"]["cost_exact_jpy"] == "826.20"


def test_every_note_is_printed_once(cli):
    from dataclasses import replace

    from gpuplan.cli.estimate import _summary

    r = cli("estimate", "--videos", "4", "--as-of", "2017-08", "--owned", "onprem-1080ti", "--all")
    assert r.code == 0, r.err
    notes = [line for line in r.out.splitlines() if "purchase ¥350,000 up front" in line]
    assert len(notes) == 1
    # two plans on the same hardware with the same note (packings, regions): the note once
    est = optimizer.estimate(workloads.videos(4), Setting(catalog=catalog.load("2017-08"), as_of_month="2017-08"))
    owned = next(p for p in est.plans if p.note and p.feasible)
    twice = replace(est, plans=est.plans + (replace(owned),), extra={"a": "same line", "b": "same line"})
    lines = [text for _, text in _summary(twice, True)]  # --all: every plan's note (the short view: shown plans')
    assert sum(owned.note in line for line in lines) == 1 and lines.count("note: same line") == 1


# --- item 5: the rules that pick ------------------------------------------------------------------

def test_a_tie_goes_to_the_plan_without_a_quota_warning_and_the_why_line_says_so(cli, gpuplan_home):
    # one video: g4dn.xlarge (AWS) and NC4as_T4_v3 (Azure, over its default family quota of 0)
    # cost the same whole yen and take as long: the warning decides, not the catalog order
    # (issue 19: the default pick is no longer strictly the cheapest; the strict rules are --objective cost's).
    # In their US regions only: since issue 22 a Sakura DOK task (per second, ¥57.60/h) is cheaper.
    # Since the T4's cnn-train figure is a published training one (0.307 x V100, issue 31; it was an
    # inference proxy, 0.34), g5.xlarge's A10G is cheaper than both for this job: priced out here,
    # so that the two T4 plans meet as the tie they still are
    (gpuplan_home / "config").mkdir(parents=True)
    (gpuplan_home / "config" / "config.yaml").write_text("preferred_regions: [us-east-1, eastus, westus2]\n")
    (gpuplan_home / "config" / "prices.yaml").write_text(
        "offers:\n  - {provider: aws, name: g5.xlarge, region: us-east-1, price: 100}\n")
    data, _ = _json(cli, "--videos", "1", "--objective", "cost")
    rec = data["recommended"]
    # issue 19: AWS's quota is unknown (said, weighing less than Azure's known default of 0)
    assert rec["instance_type"] == "g4dn.xlarge" and [w["code"] for w in rec["warned_by"]] == ["quota_unknown"]
    azure = [p for p in data["plans"] if p["instance_type"] == "Standard_NC4as_T4_v3" and p["count"] == 1
             and p["feasible"]]
    assert azure and all(p["cost_jpy"] == rec["cost_jpy"] and p["wall_minutes"] == rec["wall_minutes"]
                         and p["warnings"] for p in azure)
    assert "1x Standard_NC4as_T4_v3 from scratch (as long, but with more warnings)" in data["reason"]
    assert "longer" not in data["reason"]
    assert data["reason"].endswith("ties on cost break on wall time, then on fewer warnings, then on fewer machines"
                                   " (cost in whole yen, as shown)")


def test_the_rules_in_order_on_a_hand_made_catalog():
    # two offers at the same price and speed: "b" is over its default quota (a warning)
    a = sp.offer(name="a", price="60", granularity=60, minimum=60)
    b = sp.offer(name="b", price="60", granularity=60, minimum=60, family="capped", vcpus=8)
    facts = sp.facts(setup_min=0, family={"capped": 4})
    w = Workload(name="t", description="", jobs=(Job("j", Decimal(3600)),), unit="second",
                 seconds_per_unit=Decimal(1), reference_gpu="K80", speed={"K80": Decimal(1)})
    for offers in ([a, b], [b, a]):  # whatever the catalog order
        est = optimizer.estimate(w, Setting(catalog=sp.catalog(offers, {"azure": facts})), mixes=False)
        assert est.recommended.fleet[0][0].name == "a"
        assert "1x b from scratch (as long, but with more warnings)" in est.reason


def test_an_obvious_optimum_on_hourly_machines_is_proven(cli):
    # four videos on Sakura's hourly machines: the first hour of every machine is billed whatever
    # the schedule, so no mix can come near the pick (it claimed "not proven, up to 43 %")
    data, r = _json(cli, "--provider", "sakura", "--videos", "4")
    assert data["recommendation_proven_optimal"] is True and Decimal(str(data["optimality_gap"])) == 0
    table = cli("estimate", "--provider", "sakura", "--videos", "4")
    assert "optimal: proven: no schedule of any candidate fleet beats it" in table.out


def test_the_billing_floor_is_a_lower_bound_of_every_schedule():
    # a mix of an hourly ¥600 and an hourly ¥900 machine with 10 minutes of setup: whatever
    # runs on them, each bills at least its first hour: ¥1,500
    o1 = sp.offer(name="x", price="600", granularity=3600, minimum=3600)
    o2 = sp.offer(name="y", price="900", granularity=3600, minimum=3600)
    cat = sp.catalog([o1, o2], {"azure": sp.facts(setup_min=10)})
    w = Workload(name="t", description="", jobs=tuple(Job(f"j{i}", Decimal(600)) for i in range(2)), unit="second",
                 seconds_per_unit=Decimal(1), reference_gpu="K80", speed={"K80": Decimal(1)})
    setting = Setting(catalog=cat)
    plan = model.make_plan(w, setting, [(o1, 1), (o2, 1)], "scratch", 1, [(o1, 600, ("j0",)), (o2, 600, ("j1",))])
    assert candidates.Planner._floor(plan) == 1500
    est = optimizer.estimate(w, setting)
    # so the mix from scratch is not even scheduled: 2x x (¥1,200, 20 min) beats its bound
    assert [p.setup for p in est.plans if len(p.fleet) == 2] == ["image"] and "1 mixed fleets" in est.extra["skipped_mixes"]
    image = next(p for p in est.plans if len(p.fleet) == 2)
    assert candidates.Planner._floor(image) == 600 <= image.cost == 2100  # the builder's hour; workers may idle
    assert est.recommended.cost == 600 and est.proven and est.gap == 0


def test_no_feasible_plan_names_the_deadline_by_how_much_and_exits_2(cli):
    r = cli("estimate", "--videos", "4", "--as-of", "2017-08", "--deadline", "2h", "--tax", "included")  # report A's yen
    assert r.code == 2
    assert "4x Standard_NC6" in r.out  # the plans are still shown
    err = r.err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in r.err
    assert err[0] == ("gpuplan: error: no feasible plan: the cheapest, 4x Standard_NC6 from an image (¥826), misses the"
                      " deadline by 60 min (wall 3:00 h > 2:00 h); no plan is faster: give --deadline 3h00m or more")
    data, _ = _json(cli, "--videos", "4", "--as-of", "2017-08", "--deadline", "2h", code=2)
    assert data["recommended"] is None and data["reason"].startswith("no feasible plan: the cheapest")


# --- item 6: spot -----------------------------------------------------------------------------------

def test_spot_plans_only_with_spot_priced_at_the_spot_row(cli, tmp_path):
    base = ("--videos", "1", "--provider", "aws", "--region", "us-east-1")
    plain, _ = _json(cli, *base, "--all")
    assert not [p for p in plain["plans"] if p["market"] == "spot"]
    data, _ = _json(cli, *base, "--all", "--spot", "--schedules")
    rec = data["recommended"]
    assert (rec["market"], rec["count"]) == ("spot", 1)  # since issue 31's T4 figure: p3.2xlarge's V100, at spot
    # g4dn.xlarge at spot: priced at 0.2158 USD/h x the catalog's FX, per second, plus 10 % consumption
    # tax (AWS lists without it)
    g4dn = next(p for p in data["plans"] if (p["instance_type"], p["market"], p["count"], p["setup"])
                == ("g4dn.xlarge", "spot", 1, "scratch"))
    fx = catalog.load("2026-11").fx["USD"].jpy_per_unit
    billed = sum(m["billed_s"] for m in g4dn["machines"])
    # issue 35: a spot plan's yen also holds its expected interruptions (breakdown "interruptions",
    # docs/model.md "Spot interruptions"; its arithmetic is checked in tests/test_spot_risk.py)
    risk = Decimal(g4dn["spot_risk"]["extra_jpy"][1])
    assert risk > 0 and g4dn["breakdown"]["interruptions"] == g4dn["spot_risk"]["extra_jpy"][1]
    assert Decimal(g4dn["cost_exact_jpy"]) == (Decimal(billed) * Decimal("0.2158") * fx * Decimal("1.1") / 3600
                                               + risk).quantize(Decimal("0.01"))
    assert g4dn["warnings"][0].startswith("spot (g4dn.xlarge): EC2 may stop or terminate a Spot Instance with a"
                                          " two-minute notice")
    assert any("0.2158 USD/hour" in a for a in g4dn["assumptions"])
    assert any("at its spot price, not on demand" in a for a in g4dn["assumptions"])
    r = cli("estimate", *base, "--spot")
    assert f"1x {rec['instance_type']} (spot)" in r.out and "warning: spot" in r.out
    # the saved plan asks provision for spot capacity
    saved = tmp_path / "plan.json"
    assert cli("estimate", *base, "--spot", "--save", str(saved)).code == 0
    assert json.loads(saved.read_text())["market"] == "spot"


def test_provision_of_a_spot_plan_asks_for_spot(cli, tmp_path, monkeypatch):
    from gpuplan.fleet import lifecycle

    asked = []
    real = lifecycle.request_from_offer

    def spy(*args, **kw):
        asked.append(kw.get("spot"))
        return real(*args, **kw)

    monkeypatch.setattr(lifecycle, "request_from_offer", spy)
    saved = tmp_path / "plan.json"
    assert cli("estimate", "--videos", "1", "--provider", "aws", "--region", "us-east-1", "--spot",
               "--save", str(saved)).code == 0
    r = cli("provision", "--plan", str(saved), "--dry-run")
    assert r.code == 0, r.err
    assert asked == [True]


def test_a_spot_plan_is_not_recommended_without_the_flag():
    cat = catalog.load("2026-11")
    spot = cat.spot_offer(cat.resolve("aws:g4dn.xlarge", region="us-east-1"))
    w = Workload(name="t", description="", jobs=(Job("j", Decimal(3600)),), unit="second",
                 seconds_per_unit=Decimal(1), reference_gpu="T4", speed={"T4": Decimal(1)})
    plan = model.make_plan(w, Setting(catalog=cat), [(spot, 1)], "scratch", 1, [(spot, 3600, ("j",))])
    assert not plan.recommendable and plan.label == "1x g4dn.xlarge (spot)"
    assert model.make_plan(w, Setting(catalog=cat, spot=True), [(spot, 1)], "scratch", 1,
                           [(spot, 3600, ("j",))]).recommendable
