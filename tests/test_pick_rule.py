"""The default pick a person would take (issue 19): the fastest plan within --cost-slack of the
cheapest, never beaten by a plan at most 2 % dearer that finishes in half the wall time and at
least 2 h sooner; --objective cost still the strictly cheapest; --budget; fleets within the
1,000 machines `provision` makes."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from support.issue_cases import LORA_MIX as LORA
from support.issue_cases import T4_SHORT

pytestmark = pytest.mark.usefixtures("issue_19_regions")


def _estimate(cli, *args):
    r = cli("estimate", *args, "--format", "json")
    assert r.code == 0, r.err
    return json.loads(r.out)


def _eligible(data):
    return [p for p in data["plans"] if p["feasible"] and p["recommendable"]]


def _beaten_by(rec, plans):
    """Plans at most 2 % dearer that finish in half the wall time and at least 2 h sooner."""
    cost, wall = Decimal(rec["cost_exact_jpy"]), Decimal(str(rec["wall_minutes"]))
    return [p for p in plans if Decimal(p["cost_exact_jpy"]) <= cost * Decimal("1.02")
            and 2 * Decimal(str(p["wall_minutes"])) <= wall and wall - Decimal(str(p["wall_minutes"])) >= 120]


def _cases(tmp_path):
    (tmp_path / "lora.yaml").write_text(LORA)
    (tmp_path / "t4.yaml").write_text(T4_SHORT)
    return {"lora": ["--workload", str(tmp_path / "lora.yaml")], "t4": ["--workload", str(tmp_path / "t4.yaml")],
            "videos2000": ["--videos", "2000"], "videos40": ["--videos", "40"]}


@pytest.mark.parametrize("case", ["lora", "t4", "videos2000", "videos40"])
def test_the_default_pick_is_not_beaten_by_a_plan_a_little_dearer_and_much_sooner(cli, tmp_path, case):
    args = _cases(tmp_path)[case]
    data = _estimate(cli, *args)
    rec, plans = data["recommended"], _eligible(data)
    assert not _beaten_by(rec, plans), (rec["instance_type"], rec["count"], _beaten_by(rec, plans)[:1])
    assert "rule: fastest within 3 % of the cheapest, or cheaper within 5 % of its wall" in data["reason"]
    strict = _estimate(cli, *args, "--objective", "cost")
    cheapest = min(Decimal(p["cost_exact_jpy"]) for p in _eligible(strict))
    assert Decimal(strict["recommended"]["cost_exact_jpy"]) == cheapest
    assert strict["reason"].startswith("cheapest feasible plan")


def test_the_issue_figures_fine_tunes_pick_six_machines_over_three_days(cli, tmp_path):
    # main picked 1x g6e.2xlarge, 74:11 h, ¥26,314 over 6x in 14:39 h for ¥26,343 (+0.1 %): the issue's
    # figures are AWS's list prices, without consumption tax (--tax excluded reproduces them)
    args = _cases(tmp_path)["lora"]
    rec = _estimate(cli, *args, "--tax", "excluded")["recommended"]
    assert rec["wall_minutes"] <= 15 * 60 and rec["cost_jpy"] <= 26_314 * 1.03
    strict = _estimate(cli, *args, "--objective", "cost", "--tax", "excluded")
    assert (strict["recommended"]["count"], strict["recommended"]["cost_jpy"]) == (1, 26_314)
    # the strict pick names the faster plan for a little more, in one line
    assert strict["faster"].startswith("for +¥30 (0.1 %), 6x g6e.2xlarge aws us-east-1 finishes in 14:39 h instead of")
    # by default with 10 % consumption tax: the same six machines, ¥26,343.26 x 1.1 = ¥28,977.59 -> ¥28,978;
    # the strict pick ¥26,313.51 x 1.1 = ¥28,944.86 -> ¥28,945. Its faster line now names 3x from an image
    # (¥28,977.48 -> ¥28,977, a yen under the 6x's ¥28,978; without tax both rounded to ¥26,343 and the tie
    # went to the faster 6x)
    rec = _estimate(cli, *args)["recommended"]
    assert (rec["count"], rec["cost_jpy"], rec["wall_minutes"] <= 15 * 60) == (6, 28_978, True)
    strict = _estimate(cli, *args, "--objective", "cost")
    assert (strict["recommended"]["count"], strict["recommended"]["cost_jpy"]) == (1, 28_945)
    assert strict["faster"].startswith("for +¥33 (0.1 %), 3x g6e.2xlarge aws us-east-1 finishes in 25:34 h instead of")


def test_the_faster_line_is_printed_under_the_why_line(cli):
    r = cli("estimate", "--videos", "4")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    why = next(i for i, line in enumerate(lines) if line.startswith("  why: "))
    # AWS's yen with 10 % consumption tax, as every estimate compares them: ¥265.26 - ¥250.81 -> +¥15 (without it, +¥13)
    assert lines[why + 1] == "  faster: for +¥15 (5.9 %), 4x g5.xlarge aws us-east-1 finishes in 47 min instead of 86 min"


def test_cost_slack_zero_still_takes_a_plan_two_percent_dearer_that_halves_the_wall(cli, tmp_path):
    # 200 jobs of 6 min on a T4: the cheapest is 1x g5.xlarge, 6:49 h, ¥1,195 (¥1,086 without consumption
    # tax); within 2 % of it, 200x g5.xlarge from an image finish in 32 min for ¥1,211 (¥1,101): even with
    # no slack the rule takes it. (A10G 0.946 / T4 0.307 = 3.08x the T4 the jobs were timed on, since
    # issue 31 replaced the T4's inference proxy 0.34 with a training figure: it was 2.78x, ¥1,337 / ¥1,317.)
    args = _cases(tmp_path)["t4"]
    data = _estimate(cli, *args, "--cost-slack", "0")
    zero = data["recommended"]
    assert (zero["count"], zero["cost_jpy"], zero["wall_minutes"] <= 35) == (200, 1211, True)
    assert "2 % more again where that halves the wall time and saves 2 h" in data["reason"]
    assert data["reason"].startswith("+¥16 (1.3 %) over the cheapest, 1x g5.xlarge (¥1,195, 6:49 h); rule: fastest"
                                     " within 0 % of the cheapest")
    without = _estimate(cli, *args, "--cost-slack", "0", "--tax", "excluded")
    assert (without["recommended"]["count"], without["recommended"]["cost_jpy"]) == (200, 1101)
    assert without["reason"].startswith("+¥15 (1.4 %) over the cheapest, 1x g5.xlarge (¥1,086, 6:49 h)")


def test_budget_picks_the_fastest_plan_within_it_and_says_so(cli):
    data = _estimate(cli, "--videos", "4", "--budget", "¥400")
    rec = data["recommended"]
    assert rec["cost_jpy"] <= 400
    assert not [p for p in _eligible(data) if p["cost_jpy"] <= 400 and p["wall_minutes"] < rec["wall_minutes"]]
    assert data["reason"].startswith("fastest plan within the budget ¥400")
    r = cli("estimate", "--videos", "4", "--budget", "100")
    # the budget is on the estimate's tax basis: 1x g5.xlarge ¥228.01 + 10 % consumption tax = ¥250.81
    assert r.code == 2 and "no plan within the budget ¥100: the cheapest" in r.err and "--budget 251" in r.err
    r = cli("estimate", "--videos", "4", "--budget", "100", "--tax", "excluded")
    assert r.code == 2 and "--budget 228" in r.err
    r = cli("estimate", "--videos", "4", "--budget", "lots")
    assert r.code == 2 and "bad --budget 'lots'" in r.err and "Traceback" not in r.err
    r = cli("estimate", "--videos", "4", "--cost-slack", "-3%")
    assert r.code == 2 and "bad --cost-slack '-3%'" in r.err


@pytest.mark.parametrize("videos", ["2000", "20000"])
def test_no_pick_needs_more_machines_than_provision_makes(cli, videos):
    r = cli("estimate", "--videos", videos, "--format", "csv")
    assert r.code == 0, r.err
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(r.out)))
    rec = next(row for row in rows if row["recommended"] == "true")
    assert int(rec["count"]) <= 1000
    over = [row for row in rows if int(row["count"]) > 1000]
    assert over and all(row["feasible"] == "false" and "provision_limit" in row["codes"].split() for row in over)
    assert "machines: `gpuplan provision` makes at most 1,000 per cluster" in over[0]["reason"]


def test_owned_machines_are_planned_several_at_once(cli):
    # four owned boxes: a four-box plan (main planned at most one owned machine)
    data = _estimate(cli, "--videos", "4", "--owned", "onprem-1080ti=4")
    rec = data["recommended"]
    assert (rec["instance_type"], rec["count"], rec["wall_minutes"]) == ("gtx1080ti-workstation", 4, 120)
    one = _estimate(cli, "--videos", "4", "--owned", "onprem-1080ti")["recommended"]
    assert (one["instance_type"], one["count"], one["wall_minutes"]) == ("gtx1080ti-workstation", 1, 480)
    owned = [p for p in data["plans"] if p["instance_type"] == "gtx1080ti-workstation" and p["feasible"]]
    assert max(p["count"] for p in owned) == 4
    for bad in ("onprem-1080ti=0", "onprem-1080ti=many", "=3"):
        r = cli("estimate", "--videos", "4", "--owned", bad)
        assert r.code == 2 and f"bad --owned {bad!r}" in r.err and "Traceback" not in r.err
