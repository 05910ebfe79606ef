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
    r = cli("estimate", "--videos", "4", "--as-of", "2017-08", "--format", "json", "--plot", str(out))
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
