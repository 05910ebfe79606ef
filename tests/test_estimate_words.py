"""Issue 33: `estimate`'s words agree with its figures. A pick whose wall range passes --deadline
says so (and --strict judges the deadline on the range's slow end); every column of the table
reads in one unit, under a header in plain words; and `--format json` keeps its figures while it
works out every plan's range in a fraction of the time (benchmarks/limits_bench.py)."""

from __future__ import annotations

import json
import random
import re
from decimal import Decimal

import pytest

from gpuplan.market import billing

# --- the JSON's ranges: the same figures as before they were worked out in bulk (issue 33) ------

# (provider, region, instance type, machines, setup): (wall_minutes_range, cost_jpy_range), as
# `estimate --format json` gave them before the ranges were summed per kind of machine and shared
# between plans (main b7704d2): a per-second pick, a capped hourly Sakura VRT plan whose cap binds
# at the slow end (days), AWS and Azure fleets of 16 machines of 300 different job lengths.
BEFORE_VIDEOS_4 = {
    ("sakura", "is1a", "dok-v100-32gb", 1, "scratch"): ([59.42, 268.8], [46, 247]),
    ("sakura", "is1a", "24Core-240GB-H100x1", 4, "image"): ([38.52, 54], [3960, 3960]),
    ("aws", "us-east-1", "g5.xlarge", 4, "image"): ([42.55, 97.92], [219, 866]),
}
BEFORE_MIXED_300 = {
    ("sakura", "is1a", "dok-v100-32gb", 1, "scratch"): ([6027.9, 28670.78], [4927, 26672]),
    ("sakura", "is1a", "24Core-240GB-H100x1", 1, "scratch"): ([1537.15, 8236.27], [25080, 133320]),
    ("aws", "us-east-1", "g5.xlarge", 16, "image"): ([369.68, 1869.58], [15888, 85722]),
    ("azure", "eastus", "Standard_NC4as_T4_v3", 16, "scratch"): ([1066.73, 5688.73], [25969, 138482]),
}


def _ranges(out: str) -> dict:
    data = json.loads(out)
    return {(p["provider"], p["region"], p["instance_type"], p["count"], p["setup"]):
            (p["wall_minutes_range"], p["cost_jpy_range"]) for p in data["plans"] if p["per_gpu"] == 1}


@pytest.mark.parametrize("case", ["videos", "mixed"])
def test_json_ranges_are_the_figures_they_were(cli, tmp_path, case):
    if case == "videos":
        args, before = ["--videos", "4"], BEFORE_VIDEOS_4
    else:
        rng = random.Random(7)
        path = tmp_path / "mixed300.yaml"
        path.write_text("name: mixed\nseconds_per_unit: 1\nreference_gpu: K80\njobs:\n"
                        + "".join(f"  - {{units: {rng.randint(600, 20000)}}}\n" for _ in range(300)))
        args, before = ["--workload", str(path)], BEFORE_MIXED_300
    r = cli("estimate", *args, "--format", "json")
    assert r.code == 0, r.err
    got = _ranges(r.out)
    for key, figures in before.items():
        assert got[key] == figures, key


def test_charge_sum_is_each_hold_charged_and_summed():
    """billing.charge_sum prices holds in bulk where the price alone decides; capped terms (a day's
    and a month's cap) and granularity and minimum still apply to each hold as billing.charge does."""
    rng = random.Random(33)
    terms = [billing.Terms(Decimal("159.13914")), billing.Terms(Decimal("990"), 3600, 3600, 3600, Decimal("23100"),
                                                                  Decimal("385000")),
             billing.Terms(Decimal("83.20794"), 3600, 60, 60), billing.Terms(Decimal("57.6"), 3600, 1, 60),
             billing.Terms(Decimal("481"), 3600, 1, 0, Decimal("11550"))]
    for t in terms:
        for _ in range(20):
            head = rng.choice([0, 600, 1200])
            seconds = [rng.choice([0, rng.randint(1, 90), rng.randint(60, 200_000), rng.randint(86_000, 3_000_000)])
                       for _ in range(rng.randint(1, 40))]
            counts = [rng.randint(1, 5) for _ in seconds]
            each = sum((billing.charge(head + s, t) * n for s, n in zip(seconds, counts)), Decimal(0))
            assert abs(billing.charge_sum(head, seconds, counts, t) - each) < Decimal("1e-18"), (t, head, seconds)


# --- --deadline: a pick whose wall range passes it says so; --strict plans on the slow end -------

def _line(out: str, start: str) -> str:
    """The summary line starting `start`, its wrapped continuation lines joined."""
    text = " ".join(out.split())
    at = text.index(start)
    ends = [i for i in (text.find(" breakdown:", at + 1), text.find(" optimal:", at + 1)) if i > 0]
    return text[at:min(ends)] if ends else text[at:]


def test_a_pick_whose_wall_range_passes_the_deadline_says_so_in_its_why_line(cli):
    r = cli("estimate", "--videos", "4", "--deadline", "10m")
    assert r.code == 0, r.err
    pick = next(line for line in r.out.splitlines() if line.startswith("→"))
    # 9 min on the generic table's speed, 7 to 27 min at its band's ends: it meets 10 min, but may not
    assert pick.split()[1:3] == ["1x", "dok-h100-8gpu-80gb"]
    assert re.search(r" 9 min +6 min +¥288 +generic +¥219–1,185 +7–27 min +yes \(wall range passes the deadline\)$", pick), pick
    why = _line(r.out, "why:")
    assert why.endswith("; deadline: its wall range reaches 27 min, past the deadline 10 min, if its speed is as far off"
                        " as its band allows; --strict plans on the range's slow end"), why
    data = json.loads(cli("estimate", "--videos", "4", "--deadline", "10m", "--format", "json").out)
    rec = data["recommended"]
    assert rec["wall_minutes"] == 8.78 and rec["wall_minutes_range"] == [7.4, 26.8]
    assert "its wall range reaches 27 min, past the deadline 10 min" in data["reason"]


def test_a_pick_within_the_deadline_at_its_slow_end_says_nothing_more(cli):
    r = cli("estimate", "--videos", "4", "--deadline", "5h")  # the pick's range reaches 4:29 h
    assert r.code == 0, r.err
    assert "deadline" not in _line(r.out, "why:") and "passes the deadline" not in r.out


def test_strict_judges_the_deadline_on_the_wall_ranges_slow_end(cli):
    loose = json.loads(cli("estimate", "--videos", "4", "--deadline", "2h", "--format", "json").out)
    assert loose["recommended"]["instance_type"] == "dok-v100-32gb"  # 74 min, but up to 4:29 h
    assert loose["recommended"]["wall_minutes_range"] == [59.42, 268.8]
    r = cli("estimate", "--videos", "4", "--deadline", "2h", "--strict", "--format", "json")
    assert r.code == 0, r.err
    data = json.loads(r.out)
    rec = data["recommended"]
    # the cheapest plan whose slow end is within 2 h: 4x g5.xlarge from an image, 47 min, 43 to 98 min
    assert (rec["instance_type"], rec["count"], rec["setup"], rec["cost_jpy"]) == ("g5.xlarge", 4, "image", 265)
    assert rec["wall_minutes_range"] == [42.55, 97.92] and rec["wall_minutes_range"][1] <= 120
    assert data["reason"].endswith("; deadline 2:00 h met at the wall range's slow end (1:38 h; --strict)")
    v100 = next(p for p in data["plans"] if p["instance_type"] == "dok-v100-32gb")
    # excluded on its slow end (4:29 h = 16,128 s), not its 74 min
    assert not v100["feasible"] and v100["wall_minutes"] == 74.4
    assert v100["excluded_by"] == [{"code": "deadline", "wall_s": 16128, "deadline_s": 7200, "slow_end": True}]
    table = cli("estimate", "--videos", "4", "--deadline", "2h", "--strict", "--all")
    assert ("no: misses the deadline by 2:29 h at its wall range's slow end (up to 4:29 h > 2:00 h; --strict)"
            in table.out)


def test_strict_with_no_plan_fast_enough_at_its_slow_end_names_the_deadline_that_works(cli):
    r = cli("estimate", "--videos", "4", "--deadline", "10m", "--strict")
    assert r.code == 2
    err = [line for line in r.err.splitlines() if line.strip()]
    assert len(err) == 1 and "Traceback" not in r.err
    assert err[0].endswith("the fastest, 1x dok-h100-8gpu-80gb from scratch (¥288), takes up to 27 min at its wall range's"
                           " slow end: give --deadline 27m or more")
    r = cli("estimate", "--videos", "4", "--deadline", "27m", "--strict")
    assert r.code == 0, r.err
    assert _line(r.out, "why:").endswith("; deadline 27 min met at the wall range's slow end (27 min; --strict)")


def test_strict_needs_a_deadline(cli):
    r = cli("estimate", "--videos", "4", "--strict")
    assert r.code == 2
    assert r.err.strip() == ("gpuplan: error: --strict judges --deadline on each plan's wall range's slow end: give"
                             " --deadline too")


# --- the table: one unit per column, headers in plain words -------------------------------------

def test_every_duration_of_the_table_reads_in_one_unit_under_plain_headers(cli):
    r = cli("estimate", "--videos", "4")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[1].split() == ["fleet", "where", "setup", "wall", "billed", "yen", "speed", "evidence", "yen", "range",
                                "wall", "range", "feasible", "/", "why", "excluded"]
    assert "speed kind" not in r.out and "if off" not in r.out
    rows = [line for line in lines[3:] if line[:1] in ("→", "·", " ") and " yes" in line]
    assert len(rows) >= 4
    for row in rows:  # the longest figure (4:51 h) sets h:mm for wall, billed and the wall range alike
        assert " min" not in row, row
        assert re.search(r"\d+:\d\d h +\d+:\d\d h +¥[\d,]+ +generic +¥[\d,]+–[\d,]+ +\d+:\d\d–\d+:\d\d h +yes", row), row
    # 74 min of wall beside 62 min billed read 1:14 h and 1:02 h, not "74 min" and "1:02 h"
    assert re.search(r"1x dok-v100-32gb +sakura is1a +scratch +1:14 h +1:02 h +¥60", r.out)
    # the pick's line says its pair in the table's unit, as its row does (issue 42: it read "74 min"
    # under a row of "1:14 h")
    assert "Recommended: 1x dok-v100-32gb sakura is1a, from scratch: ¥60, wall 1:14 h, billed 1:02 h" in r.out


def test_a_table_past_two_days_keeps_hours_and_minutes_in_every_row(cli, monkeypatch):
    # issue 42: a column in days wrote a 1:57 h plan "0 d 2 h" beside "1:57 h" for the same figure
    # elsewhere. 100 videos: the pick runs 31:00 h and its slow end 112:00 h (past two days), the
    # H100 plan 1:18 h; every duration of the table stays in h:mm, and the pick's line reads as its row.
    monkeypatch.setenv("COLUMNS", "400")
    r = cli("estimate", "--videos", "100", "--all")
    assert r.code == 0, r.err
    rows = [line for line in r.out.splitlines() if line[:1] in ("→", "·", " ") and " yes" in line]
    assert len(rows) > 20
    for row in rows:
        assert not re.search(r"\d d \d", row), row
        assert re.search(r" \d+:\d\d h +\d+:\d\d h +¥[\d,]+ ", row), row
    assert re.search(r"→ +1x dok-v100-32gb +sakura is1a +scratch +31:00 h +26:00 h +¥1,498 .* 24:45–112:00 h", r.out)
    assert re.search(r"1x dok-h100-8gpu-80gb +sakura is1a +scratch +1:18 h +1:15 h +¥3,735 .* 1:00–5:12 h", r.out)
    assert "from scratch: ¥1,498, wall 31:00 h, billed 26:00 h" in r.out
    assert "wall 24:45–112:00 h" in r.out  # the range line: one unit, not "24:45 h–4 d 16 h"


def test_a_table_of_minutes_stays_in_minutes(cli):
    # only plans whose slow end is within 30 min: every figure of the table is under 2 h
    r = cli("estimate", "--videos", "4", "--deadline", "30m", "--strict")
    assert r.code == 0, r.err
    rows = [line for line in r.out.splitlines() if line[:1] in ("→", "·", " ") and " yes" in line]
    assert rows and all(re.search(r" \d+ min +\d+ min +¥[\d,]+ +generic +¥[\d,]+–[\d,]+ +\d+–\d+ min +yes", row)
                        for row in rows), rows
    assert ":" not in " ".join(row.split("¥")[0] for row in rows)  # no h:mm before the yen
