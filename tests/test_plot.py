"""`gpuplan estimate --plot`: the SVG is read back and its marks checked against the estimate's own figures."""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET

import pytest

pytest.importorskip("matplotlib")

SVG = "{http://www.w3.org/2000/svg}"


def _by_id(root, gid: str):
    return next((g for g in root.iter(f"{SVG}g") if g.get("id") == gid), None)


def _width(group) -> float:
    """Horizontal extent of the one bar drawn in a group (its path's x coordinates)."""
    d = next(group.iter(f"{SVG}path")).get("d")
    xs = [float(x) for x in re.findall(r"([-\d.]+) [-\d.]+", d)]
    return max(xs) - min(xs)


def test_report_a_chart_and_timeline(cli, tmp_path):
    out = tmp_path / "a.svg"
    # report A's own yen: they include 2017's 8 % tax (¥91.80 = ¥85 x 1.08), the default basis
    r = cli("estimate", "--videos", "4", "--as-of", "2017-08", "--format", "json", "--plot", str(out), "--tax", "included")
    assert r.code == 0, r.err
    est = json.loads(r.out)  # stdout stays pure JSON; the note goes to stderr
    assert f"plot written to {out}" in r.err
    root = ET.parse(out).getroot()

    # every feasible, recommendable plan is one point
    points = _by_id(root, "plans").findall(f".//{SVG}use")
    assert len(points) == sum(1 for p in est["plans"] if p["feasible"] and p["recommendable"])
    assert _by_id(root, "pick") is not None and _by_id(root, "frontier") is not None
    texts = ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]
    assert "4x Standard_NC6 from an image: ¥826, 3:00 h" in texts

    # the builder sets up for 60 min; each of the four workers then trains for 120 min
    assert _by_id(root, "vm0-setup") is not None and _by_id(root, "vm0-jobs") is None
    workers = [_by_id(root, f"vm{i}-jobs") for i in range(1, 5)]
    assert all(w is not None for w in workers)
    assert _width(workers[0]) / _width(_by_id(root, "vm0-setup")) == pytest.approx(2.0, rel=1e-3)


def test_png_is_written(cli, tmp_path):
    out = tmp_path / "a.png"
    r = cli("estimate", "--videos", "2", "--as-of", "2017-08", "--plot", str(out))
    assert r.code == 0, r.err
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_other_suffix_is_a_usage_error(cli, tmp_path):
    r = cli("estimate", "--videos", "2", "--plot", str(tmp_path / "a.pdf"))
    assert r.code == 2 and "name an .svg or .png file" in r.err


def test_without_matplotlib_the_message_names_the_extra(cli, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    r = cli("estimate", "--videos", "2", "--plot", str(tmp_path / "a.svg"))
    assert r.code == 2
    assert r.err.strip() == "gpuplan: error: --plot needs matplotlib: pip install 'gpuplan[plot]'"


def _texts(root):
    """(text, x, y, font size px, anchor) of every text element drawn at a position."""
    out = []
    for t in root.iter(f"{SVG}text"):
        if t.get("x") is None:
            continue
        style = dict(part.split(":", 1) for part in (t.get("style") or "").split(";") if ":" in part)
        size = float(style.get(" font-size", style.get("font-size", "10px")).strip().rstrip("px"))
        anchor = style.get(" text-anchor", style.get("text-anchor", "start")).strip()
        turned = "rotate(-90" in (t.get("transform") or "")
        out.append(("".join(t.itertext()), float(t.get("x")), float(t.get("y")), size, anchor, turned))
    return out


def test_axis_in_yen_frontier_labelled_jobs_drawn_nothing_clipped(cli, tmp_path):
    out = tmp_path / "b.svg"
    r = cli("estimate", "--videos", "4", "--format", "json", "--plot", str(out))
    assert r.code == 0, r.err
    est = json.loads(r.out)
    root = ET.parse(out).getroot()
    texts = _texts(root)
    words = [t[0] for t in texts]

    # the cost axis reads in yen with thousands separators, never as 6x10^3
    yen_ticks = [w for w in words if re.fullmatch(r"¥[\d,]+", w)]
    assert len(yen_ticks) >= 3 and any("," in w for w in yen_ticks)
    assert not any("10^" in w or "×10" in w or "$10" in w for w in words)

    # every frontier point but the pick carries its fleet and yen
    labelled = [g for g in root.iter(f"{SVG}g") if (g.get("id") or "").startswith("frontier-label-")]
    others = [p for p in est["pareto"] if p["instance_type"] != est["recommended"]["instance_type"]
              or p["count"] != est["recommended"]["count"] or p["setup"] != est["recommended"]["setup"]]
    assert len(labelled) == min(len(others), 8) and len(labelled) >= 2
    for g in labelled:
        assert re.search(r"^\dx .+: ¥[\d,]+, ", "".join(g.itertext()).strip())

    # the pick's machine shows its jobs, and its tick says how many
    rec = est["recommended"]
    jobs = [j for m in rec["machines"] for j in m["jobs"]]
    drawn = " ".join("".join(g.itertext()) for g in root.iter(f"{SVG}g") if (g.get("id") or "").endswith("job-names"))
    assert jobs and jobs[0] in drawn
    assert any(re.search(r"\(worker\): \d+ jobs?$", w) for w in words)

    # nothing drawn outside the picture (anchor and an upper bound of the text's width)
    width, height = (float(root.get(k).rstrip("pt")) for k in ("width", "height"))
    for text, x, y, size, anchor, turned in texts:
        span = 0.45 * size * len(text)  # DejaVu Sans averages about half an em a character
        start = {"start": 0, "middle": span / 2, "end": span}[anchor]
        along, across, room, other = (y, x, height, width) if turned else (x, y, width, height)
        first = along + start if turned else along - start  # a turned text runs upwards from its anchor
        lo, hi = (first - span, first) if turned else (first, first + span)
        assert -1 <= across <= other + 1 and lo >= -2 and hi <= room + 2, (text, x, y)


@pytest.mark.filterwarnings("error::UserWarning")
def test_a_pick_at_no_yen_keeps_the_yen_axis_linear_and_its_label_on_the_chart(cli, gpuplan_home, tmp_path):
    """Two owned T4 hosts with no power price: the pick costs ¥0, which a log yen axis put at minus
    infinity with its label (matplotlib: "Tight layout not applied", the README example's warning)."""
    config = gpuplan_home / "config"
    config.mkdir(parents=True)
    (config / "inventory.yaml").write_text(
        "defaults: {user: root}\nhosts:\n"
        "  - {name: host-0, address: 192.0.2.1, gpus: {model: Tesla T4, count: 1}}\n"
        "  - {name: host-1, address: 192.0.2.2, gpus: {model: Tesla T4, count: 1}}\n")
    out = tmp_path / "owned.svg"
    r = cli("estimate", "--videos", "4", "--plot", str(out))
    assert r.code == 0, r.err
    assert "Tight layout" not in r.err
    root = ET.parse(out).getroot()
    label = next(t for t in root.iter(f"{SVG}text") if "".join(t.itertext()).startswith("2x tesla-t4 from scratch: ¥0"))
    y = float(label.get("y"))
    height = float(root.get("height").removesuffix("pt"))
    assert 0 <= y <= height  # on the chart, not tens of thousands of points below it
