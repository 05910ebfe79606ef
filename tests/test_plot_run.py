"""Issue 46 item 7: `gpuplan jobs CLUSTER JOB --plot` draws a batch against its plan: each machine's
planned jobs phase beside the items it ran, and the yen billed over time against the plan's. The
state is written here as `run` leaves it (no Ray): the SVG is read back.

The batch by hand: cluster `c`, two aws nodes at ¥360/h (¥0.1 a second), billed by the second,
listed before tax, held from 05:50 (ten minutes of set-up before the batch) to 07:00. The batch
runs from 06:00 to 06:40: c-0 runs a (0-20 min) and c (20-35 min), c-1 runs b (0-25 min) and d
(25-40 min). Its yen are the nodes' seconds inside the batch: 2 x 2,400 s x ¥0.1 = ¥480 at its
end, ¥240 at 20 min. The plan (tax excluded) lists [b, d] first (jobs phase 2,400 s, billed 3,000 s
for ¥300) and [a, c] second (1,800 s of 2,400 s for ¥240): c-0 is paired with the second by the
jobs it ran; the plan's jobs phase is 2,400 s and 300 x 2400/3000 + 240 x 1800/2400 = ¥420.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from test_plot import SVG, _by_id, _width  # the estimate plot's SVG readers

from gpuplan.market import billing
from gpuplan.store import state as state_mod
from gpuplan.store.state import State

pytest.importorskip("matplotlib")

T0 = datetime(2026, 11, 24, 6, 0, tzinfo=timezone.utc)


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat(timespec="milliseconds")


def ran(i: int, node: str, began: float, ended: float) -> list[dict]:
    return [{"t": "start", "i": i, "node": node, "attempt": 1, "at": at(began)},
            {"t": "end", "i": i, "node": node, "slot": f"{node}:0", "attempt": 1, "start": at(began), "end": at(ended),
             "exit": 0, "timed_out": False, "log": f"/logs/{i}.log", "status": "ok"}]


def plan_file(path) -> str:
    machines = [{"jobs": ["b", "d"], "jobs_s": 2400, "billed_s": 3000, "cost_jpy": 300},
                {"jobs": ["a", "c"], "jobs_s": 1800, "billed_s": 2400, "cost_jpy": 240}]
    path.write_text(json.dumps({"recommended": {
        "provider": "aws", "instance_type": "g4dn.xlarge", "count": 2, "wall_minutes": 50, "cost_jpy": 540,
        "tax": "excluded", "machines": machines,
        "fleet": [{"instance_type": "g4dn.xlarge", "count": 2, "listed_tax": "excluded"}]}}))
    return str(path)


@pytest.fixture
def batch(gpuplan_home, tmp_path, monkeypatch):
    """The cluster, its ledger and two ended batches: c-1 run with --plan, c-2 without."""
    state = State(gpuplan_home / "state" / "state.db")
    clock = [T0 - timedelta(minutes=10)]
    with monkeypatch.context() as m:
        m.setattr(state_mod, "now", lambda: clock[0])
        state.add_cluster("c", "aws", "ap-northeast-1", "g4dn.xlarge", 2, price_jpy_per_hour=Decimal(360))
        for node in ("c-0", "c-1"):
            state.add_node("c", node, gpus=1)
            state.ledger_start("c", node, "aws", "g4dn.xlarge", Decimal(360), billing.per_second(Decimal(360)),
                               tax="excluded")
        clock[0] = T0 - timedelta(minutes=1)
        items = [(0, "a"), (1, "b"), (2, "c"), (3, "d")]
        state.add_job("c-1", "c", ["color", "{item}"], {"plan": plan_file(tmp_path / "plan.json")}, items, nodes=2,
                      backend="ray")
        state.add_job("c-2", "c", ["color", "{item}"], {}, [(0, "e")], nodes=2, backend="ray")
        clock[0] = T0 + timedelta(minutes=60)
        for node in ("c-0", "c-1"):
            state.ledger_stop("c", node)
    state.record_job_events("c-1", [{"t": "begin", "at": at(0), "slots": 2, "nodes": 2},
                                    *ran(0, "c-0", 0, 20), *ran(1, "c-1", 0, 25), *ran(2, "c-0", 20, 35),
                                    *ran(3, "c-1", 25, 40), {"t": "done", "state": "succeeded", "at": at(40)}], 10)
    state.record_job_events("c-2", [{"t": "begin", "at": at(45), "slots": 2, "nodes": 2}, *ran(0, "c-0", 45, 50),
                                    {"t": "done", "state": "succeeded", "at": at(50)}], 3)
    yield state
    state.close()


def _texts(root) -> list[str]:
    return ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]


def test_the_picture_pairs_nodes_with_the_plan_and_prices_the_batch_as_it_went(batch):
    from gpuplan.run import against_plan

    pic = against_plan.picture(batch, "c-1")
    assert [(m.name, m.planned_s, m.planned_items, m.spans) for m in pic.machines] == [
        ("c-0", 1800, 2, ((0.0, 1200.0), (1200.0, 2100.0))),  # ran a and c: the plan's second machine
        ("c-1", 2400, 2, ((0.0, 1500.0), (1500.0, 2400.0)))]
    assert (pic.planned_wall_s, pic.planned_yen) == (Decimal(2400), Decimal(420))
    yen = dict(pic.yen)
    assert yen[0.0] == 0 and yen[1200.0] == Decimal(240) and yen[2400.0] == Decimal(480)
    assert [y for _, y in pic.yen] == sorted(y for _, y in pic.yen)  # billed yen only grows
    assert pic.yen_basis == "consumption tax excluded"


def test_jobs_plot_draws_planned_and_actual_bars_and_labelled_axes(batch, cli, tmp_path):
    out = tmp_path / "run.svg"
    r = cli("jobs", "c", "c-1", "--plot", str(out))
    assert r.code == 0, r.err
    assert f"plot written to {out}" in r.err and "c-1" in r.out
    root = ET.parse(out).getroot()
    planned = [_by_id(root, f"planned-{i}") for i in range(2)]
    actual = [_by_id(root, f"actual-{i}-{k}") for i in range(2) for k in range(2)]
    assert all(g is not None for g in planned + actual)
    # c-0's planned 30 min against c-1's 40; c-0's first item (20 min) against its planned 30
    assert _width(planned[0]) / _width(planned[1]) == pytest.approx(1800 / 2400, rel=1e-3)
    assert _width(actual[0]) / _width(planned[0]) == pytest.approx(1200 / 1800, rel=1e-3)
    assert _by_id(root, "yen-actual") is not None and _by_id(root, "yen-planned") is not None
    texts = _texts(root)
    assert texts.count("time from the batch's start") == 2
    assert "machine" in texts and "yen billed so far" in texts and "(consumption tax excluded)" in texts
    assert "billed: ¥480" in texts and "planned: ¥420 for its jobs phase" in texts
    assert "c-0: 2 items (planned 2 items)" in texts
    assert any(t.startswith("job c-1 (succeeded) against ") and t.endswith("plan.json") for t in texts)


def test_a_batch_run_without_a_plan_is_drawn_alone_and_says_so(batch, cli, tmp_path):
    out = tmp_path / "alone.svg"
    r = cli("jobs", "c", "c-2", "--plot", str(out))
    assert r.code == 0, r.err
    root = ET.parse(out).getroot()
    assert _by_id(root, "planned-0") is None and _by_id(root, "yen-planned") is None
    assert _by_id(root, "actual-0-0") is not None
    texts = _texts(root)
    assert "job c-2 (succeeded) no plan: run with --plan plan.json to draw it against one" in texts
    assert "billed: ¥60" in texts  # 2 nodes x 300 s x ¥0.1, as listed
    assert "(as billed, before tax)" in texts  # the ledger's rows: AWS lists before tax
    assert "c-0: 1 item (not in the plan)" in texts


def test_plot_needs_one_job(batch, cli, tmp_path):
    r = cli("jobs", "c", "--plot", str(tmp_path / "x.svg"))
    assert r.code == 2 and "--plot draws one batch against its plan: name it" in r.err
    assert not (tmp_path / "x.svg").exists()


def test_attempts_the_cloud_stopped_are_drawn_on_the_node_taken_back(gpuplan_home, monkeypatch):
    """test_interruption_costs' batch spot-5 (from 06:05 to 07:10; spot-1 taken back at 06:30, its two
    attempts redone on spot-0 and spot-2). Its yen by hand, each ledger row for its seconds in the
    batch: spot-0 ¥360/h for 3,900 s = ¥390, spot-1 ¥360/h until 06:32, 1,620 s = ¥162, spot-2 (the
    replacement at ¥720/h) from 06:33, 2,220 s = ¥444: ¥996, as `jobs` counts it."""
    from test_interruption_costs import spot as spot_fixture

    from gpuplan.run import against_plan, backends

    gen = spot_fixture.__wrapped__(gpuplan_home, monkeypatch)
    state = next(gen)
    try:
        pic = against_plan.picture(state, "spot-5")
        by_node = {m.name: m for m in pic.machines}
        assert by_node["spot-1"].spans == () and by_node["spot-1"].interrupted == ((300.0, 1500.25), (900.0, 1500.5))
        assert by_node["spot-0"].spans == ((0.0, 2700.0), (2700.0, 3900.0)) and by_node["spot-0"].planned_s is None
        assert pic.yen[-1] == (3900.0, Decimal(996)) == (3900.0, backends.yen(state, state.job("spot-5")))
        assert pic.note.startswith("no plan")
    finally:
        gen.close()


def test_launch_plot_to_a_file_it_cannot_draw_is_refused_before_anything(cli, tmp_path):
    """launch --plot draws at the batch's end: a file it could not draw into is refused first."""
    r = cli("launch", "--resume", "batch-1", "--plot", str(tmp_path / "run.txt"))
    assert r.code == 2 and f"--plot {tmp_path / 'run.txt'}: name an .svg or .png file" in r.err
    assert not (tmp_path / "run.txt").exists() and not any(tmp_path.rglob("state.db"))
