"""Issue 33: `estimate`'s words agree with its figures. A pick whose wall range passes --deadline
says so (and --strict judges the deadline on the range's slow end); every column of the table
reads in one unit, under a header in plain words; and `--format json` keeps its figures while it
works out every plan's range in a fraction of the time (benchmarks/limits_bench.py)."""

from __future__ import annotations

import json
import random
from decimal import Decimal

import pytest

from gpuplan.planning import billing

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
