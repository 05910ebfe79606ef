"""Issue 46 item 7: estimate's plot shows the table's ranges as error bars, each provider in its
own colour, the budget and the deadline as lines, and axes labelled in yen and durations (the
log wall axis read "1")."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

pytest.importorskip("matplotlib")

SVG = "{http://www.w3.org/2000/svg}"


def _groups(root, prefix: str) -> dict:
    return {g.get("id"): g for g in root.iter(f"{SVG}g") if (g.get("id") or "").startswith(prefix)}


def _extent(group) -> tuple[float, float]:
    """Width and height of everything a group draws (its paths' coordinates)."""
    xs, ys = [], []
    for path in group.iter(f"{SVG}path"):
        for x, y in re.findall(r"(-?[\d.]+) (-?[\d.]+)", path.get("d") or ""):
            xs.append(float(x))
            ys.append(float(y))
    return (max(xs) - min(xs), max(ys) - min(ys)) if xs else (0.0, 0.0)


def test_ranges_providers_budget_deadline_and_axes(cli, tmp_path):
    out = tmp_path / "r.svg"
    r = cli("estimate", "--videos", "4", "--budget", "400", "--deadline", "3h", "--format", "json", "--plot", str(out))
    assert r.code == 0, r.err
    est = json.loads(r.out)
    root = ET.parse(out).getroot()
    words = ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]

    # a range bar for each plan the chart names (the frontier's and the pick) whose range is known
    named = {(p["provider"], p["instance_type"], p["count"], p["setup"]) for p in est["pareto"]}
    rec = est["recommended"]
    named.add((rec["provider"], rec["instance_type"], rec["count"], rec["setup"]))
    walls, yens = _groups(root, "range-"), {}
    yens = {k: g for k, g in walls.items() if k.endswith("-yen")}
    walls = {k: g for k, g in walls.items() if k.endswith("-wall")}
    assert len(named) >= len(walls) == len(yens) >= 2  # the pick's (¥46–247 in the table) among them
    # a wall range is drawn across (left to right), a yen range up and down
    for g in walls.values():
        assert _extent(g)[0] > 0 and _extent(g)[1] == 0
    for g in yens.values():
        assert _extent(g)[1] > 0 and _extent(g)[0] == 0

    # each provider its own colour, named in the legend with its number of plans
    shown = [p for p in est["plans"] if p["feasible"] and p["recommendable"]]
    for provider in {p["provider"] for p in shown}:
        n = sum(1 for p in shown if p["provider"] == provider)
        assert f"{provider} ({n:,} plans)" in words
    fills = {m.group(1) for m in re.finditer(r"fill: ?(#[0-9a-f]{6})", ET.tostring(_groups(root, "plans")["plans"],
                                                                                      encoding="unicode"))}
    assert len(fills) == len({p["provider"] for p in shown}) >= 3

    # the budget and the deadline are lines with their figures
    assert "budget ¥400" in words and "deadline 3:00 h" in words
    assert _groups(root, "budget") and _groups(root, "deadline")

    # labelled axes: the wall axis in durations, the yen axis in yen; no bare number as a tick
    assert any(w.startswith("wall time (setup counted)") for w in words)
    assert "cost (yen, billed as each provider bills)" in words
    ticks = [w for w in words if re.fullmatch(r"\d+:\d\d h|\d+ min|¥[\d,]+|0", w)]
    assert sum(1 for w in ticks if w.endswith(" h")) >= 3
    assert not any(re.fullmatch(r"\d+(\.\d+)?", w) and w != "0" for w in words), words


def test_a_log_wall_axis_has_duration_ticks_not_a_lone_1(cli, tmp_path):
    out = tmp_path / "log.svg"
    r = cli("estimate", "--videos", "40", "--plot", str(out))
    assert r.code == 0, r.err
    words = ["".join(t.itertext()) for t in ET.parse(out).getroot().iter(f"{SVG}text")]
    hours = [w for w in words if re.fullmatch(r"\d+:\d\d h", w)]
    # a span of 0:23 h to 12:24 h and more: ticks at 1, 2 and 5 of each decade, in one unit
    assert {"1:00 h", "2:00 h", "5:00 h", "10:00 h"} <= set(hours)
    assert "1" not in words
