"""Issue 35 part 4: what the cloud taking a batch's nodes back cost it. The driver's events (as
ray_driver writes them) go through State.record_job_events; `jobs`, `jobs CLUSTER JOB`,
`cost-report` and `run`'s end line then show the interrupted attempts, the nodes taken back,
the item-seconds done twice (from each attempt's last saved checkpoint, or its start, to its
end) and the machine time they held: the node's price per second x those seconds / its slots.

The batch here: cluster `spot`, two aws nodes of 4 GPUs at ¥360/h (¥0.1 a second) billed by
the second, run with --per-gpu 2 (8 slots a node: ¥0.0125 a slot-second). spot-1 is taken back
at 06:30 while two items run on it: item a saved a checkpoint at 06:25:00 and stopped at
06:30:00.250 (300.25 s redone), item b saved none and ran from 06:20:00 to 06:30:00.500
(600.5 s redone). 900.75 item-seconds x ¥0.0125 = ¥11.259375: ¥11.26 as billed (AWS lists
without consumption tax), x 1.1 = ¥12.3853125: ¥12.39 with it.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
import types
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from gpuplan.market import billing
from gpuplan.run.ray import batch_rules as rules
from gpuplan.run.ray import runner
from gpuplan.store import costs
from gpuplan.store import state as state_mod
from gpuplan.store.state import State

T0 = datetime(2026, 11, 24, 6, 0, tzinfo=timezone.utc)
SLOT_SECOND = Decimal(360) / 3600 / (4 * 2)  # ¥ a slot-second on spot-1
REDONE_S = Decimal("300.25") + Decimal("600.5")


def at(minutes: float, ms: int = 0) -> str:
    """An event time, as the driver writes it: ISO 8601 UTC with milliseconds."""
    return (T0 + timedelta(minutes=minutes, milliseconds=ms)).isoformat(timespec="milliseconds")


def start(i: int, node: str, attempt: int, minutes: float) -> dict:
    return {"t": "start", "i": i, "node": node, "attempt": attempt, "at": at(minutes)}


def end(i: int, node: str, attempt: int, began: float, ended: float, status: str, ms: int = 0, **extra) -> dict:
    ok = status == rules.OK
    return {"t": "end", "i": i, "node": node, "slot": f"{node}:{i % 4}", "attempt": attempt, "start": at(began),
            "end": at(ended, ms), "exit": 0 if ok else 143, "timed_out": False, "log": f"/logs/{i}.{attempt}.log",
            "status": status, **extra}


def interrupted_batch() -> list[dict]:
    """Three items; spot-1 is taken back mid-batch, its two items finish elsewhere."""
    return [
        {"t": "begin", "at": at(5), "slots": 16, "nodes": 2},
        {"t": "ready", "at": at(5)},
        start(2, "spot-0", 1, 5),
        start(0, "spot-1", 1, 10),
        start(1, "spot-1", 1, 20),
        {"t": "notice", "node": "spot-1", "action": "terminate", "time": at(30), "at": at(28)},
        {"t": "quarantine", "node": "spot-1", "code": rules.INTERRUPTED,
         "reason": f"the cloud takes it back (terminate at {at(30)}): drained"},
        end(0, "spot-1", 1, 10, 30, rules.INTERRUPTED, ms=250, saved=at(25)),
        {"t": "requeue", "i": 0},
        end(1, "spot-1", 1, 20, 30, rules.INTERRUPTED, ms=500),  # no checkpoint saved: redone from its start
        {"t": "requeue", "i": 1},
        {"t": "joined", "node": "spot-2", "at": at(38)},
        start(0, "spot-2", 2, 40),
        end(2, "spot-0", 1, 5, 50, rules.OK),
        start(1, "spot-0", 2, 50),
        end(0, "spot-2", 2, 40, 60, rules.OK, saved=at(55)),
        end(1, "spot-0", 2, 50, 70, rules.OK),
        {"t": "done", "state": "succeeded", "at": at(70)},
    ]


def quiet_batch() -> list[dict]:
    """A batch nothing interrupted."""
    return [{"t": "begin", "at": at(-50), "slots": 16, "nodes": 2}, start(0, "spot-0", 1, -50),
            end(0, "spot-0", 1, -50, -45, rules.OK), {"t": "done", "state": "succeeded", "at": at(-45)}]


@pytest.fixture
def spot(gpuplan_home, monkeypatch):
    """The cluster and its ledger as provision and `run --recover` leave them (spot-2: the
    on-demand replacement at ¥720/h), and two batches: spot-4 (nothing interrupted) and spot-5."""
    state = State(gpuplan_home / "state" / "state.db")
    clock = [T0 - timedelta(hours=1)]
    with monkeypatch.context() as m:
        m.setattr(state_mod, "now", lambda: clock[0])
        state.add_cluster("spot", "aws", "ap-northeast-1", "g4dn.12xlarge", 2, price_jpy_per_hour=Decimal(360))
        for node, price in (("spot-0", 360), ("spot-1", 360)):
            state.add_node("spot", node, gpus=4)
            state.ledger_start("spot", node, "aws", "g4dn.12xlarge", Decimal(price), billing.per_second(Decimal(price)),
                               tax="excluded")
        clock[0] = T0 + timedelta(minutes=32)
        state.ledger_stop("spot", "spot-1")
        state.update_node("spot", "spot-1", status="lost")
        clock[0] = T0 + timedelta(minutes=33)
        state.add_node("spot", "spot-2", gpus=4)
        state.ledger_start("spot", "spot-2", "aws", "g4dn.12xlarge", Decimal(720), billing.per_second(Decimal(720)),
                           tax="excluded")
        for job, items, minutes in (("spot-4", [(0, "z")], -51), ("spot-5", [(0, "a"), (1, "b"), (2, "c")], 4)):
            clock[0] = T0 + timedelta(minutes=minutes)
            state.add_job(job, "spot", ["train", "{item}"], {"per_gpu": 2, "checkpoint_every_s": 60}, items, nodes=2,
                          backend="ray")
        clock[0] = T0 + timedelta(hours=2)
        for node in ("spot-0", "spot-2"):
            state.ledger_stop("spot", node)
    state.record_job_events("spot-4", quiet_batch(), 100)
    events = interrupted_batch()
    state.record_job_events("spot-5", events[:9], 900)  # read in two looks, as `run` follows it
    state.record_job_events("spot-5", events[9:], 1800)
    yield state
    state.close()


# --- the state's record ---------------------------------------------------------------------------


def test_the_interrupted_attempts_are_kept_apart_from_the_items_latest(spot):
    a, b = spot.job_interruptions("spot-5")
    assert (a.idx, a.attempt, a.node, a.node_gpus) == (0, 1, "spot-1", 4)
    assert a.saved_at == T0 + timedelta(minutes=25) and a.ended_at == T0 + timedelta(minutes=30, milliseconds=250)
    assert (b.idx, b.saved_at, b.started_at) == (1, None, T0 + timedelta(minutes=20))
    # the items' rows hold their last attempt, which succeeded elsewhere
    assert [(it.item, it.status, it.node, it.attempts) for it in spot.job_items("spot-5")] == [
        ("a", "ok", "spot-2", 2), ("b", "ok", "spot-0", 2), ("c", "ok", "spot-0", 1)]
    assert spot.job_interruptions("spot-4") == []
    assert [j.id for j in spot.interrupted_jobs()] == ["spot-5"]


def test_redone_seconds_and_their_yen_by_hand(spot):
    a, b = spot.job_interruptions("spot-5")
    assert costs.redone_seconds(a) == Decimal("300.25")  # 06:25:00 saved -> 06:30:00.250
    assert costs.redone_seconds(b) == Decimal("600.5")  # 06:20:00 start -> 06:30:00.500, nothing saved
    cost = costs.interruptions(spot, spot.job("spot-5"))
    assert cost == costs.Interruptions(attempts=2, nodes=1, redone_s=Decimal("900.75"), yen=Decimal("11.259375"))
    assert cost.yen == REDONE_S * SLOT_SECOND
    with_tax = costs.interruptions(spot, spot.job("spot-5"), basis="included")
    assert with_tax.yen.quantize(Decimal("0.01")) == Decimal("12.39")  # 11.259375 x 1.1 = 12.3853125
    assert costs.interruptions(spot, spot.job("spot-4")) is None


def test_an_end_event_from_a_driver_older_than_saved_redoes_the_whole_attempt(spot):
    spot.add_job("spot-6", "spot", ["train", "{item}"], {"per_gpu": 2}, [(0, "a")], nodes=2, backend="ray")
    spot.record_job_events("spot-6", [start(0, "spot-1", 1, 10), end(0, "spot-1", 1, 10, 30, rules.INTERRUPTED),
                                      {"t": "requeue", "i": 0}], 10)
    cost = costs.interruptions(spot, spot.job("spot-6"))
    assert cost.redone_s == Decimal(1200) and cost.nodes == 0  # this batch never saw the quarantine
    assert cost.yen == Decimal(1200) * SLOT_SECOND == Decimal(15)


def test_the_nodes_own_price_counts_a_dearer_replacement_taken_back_too(spot):
    spot.add_job("spot-7", "spot", ["train", "{item}"], {"per_gpu": 1}, [(0, "a")], nodes=2, backend="ray")
    spot.record_job_events("spot-7", [  # spot-2 (¥720/h, 4 slots at --per-gpu 1) taken back in its turn
        start(0, "spot-2", 1, 40), end(0, "spot-2", 1, 40, 50, rules.INTERRUPTED, saved=at(48)),
        {"t": "quarantine", "node": "spot-2", "code": rules.INTERRUPTED, "reason": "the cloud takes it back"}], 10)
    cost = costs.interruptions(spot, spot.job("spot-7"))
    assert cost == costs.Interruptions(1, 1, Decimal(120), Decimal(720) / 3600 * 120 / 4)  # ¥6
    assert cost.yen == Decimal(6)


def test_a_database_made_before_the_table_gains_it_on_opening(tmp_path):
    path = tmp_path / "state.db"
    State(path).close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE job_interruptions")
    db.commit()
    db.close()
    state = State(path)
    try:
        state.add_job("c-1", "c", ["x"], {}, [(0, "a")], nodes=1, backend="ray")
        state.record_job_events("c-1", [end(0, "c-0", 1, 0, 1, rules.INTERRUPTED)], 1)
        [row] = state.job_interruptions("c-1")
        assert (row.node, row.node_gpus) == ("c-0", 0)  # a node the state does not know: no GPUs
    finally:
        state.close()


# --- what the commands print -----------------------------------------------------------------------

LINE = ("1 node taken back by the cloud, 2 attempts stopped; 901 item-seconds redone, ¥11.26 of machine time spent on"
        " work done twice (part of the yen above, not added to it)")


def test_jobs_lists_the_interruptions_of_the_batch_that_had_them(spot, cli):
    r = cli("jobs", "spot")
    assert r.code == 0, r.err
    assert f"spot-5 interrupted: {LINE}" in r.out
    assert "spot-4 interrupted" not in r.out and r.out.count("interrupted:") == 1
    quiet, loud = json.loads(cli("jobs", "spot", "--format", "json").out)
    assert quiet["id"] == "spot-4" and quiet["interruptions"] is None
    assert loud["interruptions"] == {"interrupted_attempts": 2, "nodes_taken_back": 1, "redone_s": 900.75,
                                     "redone_jpy": "11.26"}


def test_jobs_of_one_job_shows_it_its_set_aside_node_and_its_interruptions(spot, cli):
    r = cli("jobs", "spot", "spot-5")
    assert r.code == 0, r.err
    assert "spot-5" in r.out and "spot-4" not in r.out
    assert f"set aside spot-1: the cloud takes it back (terminate at {at(30)}): drained" in r.out
    assert f"spot-5 interrupted: {LINE}" in r.out
    doc = json.loads(cli("jobs", "spot", "spot-5", "--format", "json").out)
    assert doc["id"] == "spot-5" and doc["interruptions"]["redone_jpy"] == "11.26"
    assert doc["quarantined"] == [{"node": "spot-1", "code": rules.INTERRUPTED,
                                   "reason": f"the cloud takes it back (terminate at {at(30)}): drained"}]
    quiet = cli("jobs", "spot", "spot-4")
    assert quiet.code == 0 and "interrupt" not in quiet.out and "set aside" not in quiet.out
    assert json.loads(cli("jobs", "spot", "spot-4", "--format", "json").out)["interruptions"] is None
    missing = cli("jobs", "spot", "spot-9")
    assert missing.code == 2 and "no job 'spot-9' on cluster 'spot'" in missing.err


def test_cost_report_shows_them_on_its_tax_basis(spot, cli):
    r = cli("cost-report")
    assert r.code == 0, r.err
    tail = ("1 node taken back by the cloud, 2 attempts stopped; 901 item-seconds redone, ¥12.39 of machine time"
            " spent on work done twice (part of the yen above, not added to it)")
    assert f"2026-11 spot spot-5 interrupted: {tail}" in r.out
    assert "spot-4" not in r.out
    doc = json.loads(cli("cost-report", "--format", "json").out)
    assert doc["interruptions"] == [{"month": "2026-11", "cluster": "spot", "job": "spot-5", "interrupted_attempts": 2,
                                     "nodes_taken_back": 1, "redone_s": 900.75, "redone_jpy": "12.39"}]
    excluded = json.loads(cli("cost-report", "--format", "json", "--tax", "excluded").out)
    assert excluded["interruptions"][0]["redone_jpy"] == "11.26"
    assert json.loads(cli("cost-report", "--format", "json", "--month", "2026-10").out)["interruptions"] == []


def test_cost_report_without_interruptions_says_nothing_of_them(gpuplan_home, cli):
    state = State(gpuplan_home / "state" / "state.db")
    state.add_cluster("calm", "aws", "ap-northeast-1", "g4dn.xlarge", 1, price_jpy_per_hour=Decimal(100))
    state.ledger_start("calm", "calm-0", "aws", "g4dn.xlarge", Decimal(100), tax="excluded")
    state.close()
    r = cli("cost-report")
    assert r.code == 0 and "interrupt" not in r.out
    assert json.loads(cli("cost-report", "--format", "json").out)["interruptions"] == []


def test_the_runs_end_line_says_what_interruptions_cost(spot, capsys):
    from gpuplan.cli import jobs as jobs_cli

    summary = runner.engine_summary(spot, "spot-5")
    assert summary.interruptions == costs.interruptions(spot, spot.job("spot-5"))
    jobs_cli._finish(spot, "spot-5", None)  # what `run` prints once the batch it follows has ended
    out = capsys.readouterr().out.splitlines()
    measured = next(i for i, line in enumerate(out) if line.startswith("measured: "))
    assert out[measured + 1] == f"interrupted: {LINE}"
    assert runner.engine_summary(spot, "spot-4").interruptions is None
    jobs_cli._finish(spot, "spot-4", None)
    assert "interrupt" not in capsys.readouterr().out


# --- the driver reports when it saved ---------------------------------------------------------------


class _Store:
    """CheckpointStore's calls as Ray makes them (`.remote`), answered at once."""

    def __init__(self, data: bytes | None = None) -> None:
        self.data, self.puts = data, 0
        self.get = types.SimpleNamespace(remote=lambda index: self.data)
        self.put = types.SimpleNamespace(remote=self._put)

    def _put(self, index: int, data: bytes) -> None:
        self.data, self.puts = data, self.puts + 1


@pytest.fixture
def node_here(tmp_path, monkeypatch):
    """This machine as the node of one attempt: a home for ~/.gpuplan/jobs and a stub for Ray."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUPLAN_NODE", "n-0")
    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(get_gpu_ids=lambda: [], get=lambda value: value))


def _seconds(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def test_run_item_reports_when_it_last_sent_a_changed_checkpoint(node_here):
    from gpuplan.run.ray import ray_driver

    store = _Store()
    shell = 'echo 1 > "$GPUPLAN_CHECKPOINT_DIR/step"; sleep 1; exit 143'
    before = time.time()
    r = ray_driver.run_item("j-1", 0, "a", 1, shell, 30, "", "", checkpoints=store, checkpoint_every_s=0.2)
    assert r["exit"] == 143 and store.puts == 1  # sent once, while it ran: unchanged after, at its end too
    assert before < _seconds(r["saved"]) < _seconds(r["end"]) - 0.3


def test_run_item_that_saved_nothing_of_its_own_reports_none(node_here):
    from gpuplan.run.ray import ray_driver

    store = _Store()
    r = ray_driver.run_item("j-2", 0, "a", 1, "sleep 0.5", 30, "", "", checkpoints=store, checkpoint_every_s=0.2)
    assert r["saved"] is None and store.puts == 0
    # what it was given back from the store and left as it was is not a save of its own
    seeded = ray_driver.run_item("j-2", 1, "b", 1, 'echo 1 > "$GPUPLAN_CHECKPOINT_DIR/step"', 30, "", "",
                                 checkpoints=store, checkpoint_every_s=0.2)
    assert seeded["saved"] is not None and store.puts == 1
    again = ray_driver.run_item("j-2", 1, "b", 2, "cat \"$GPUPLAN_CHECKPOINT_DIR/step\"; sleep 0.5", 30, "", "",
                                checkpoints=store, checkpoint_every_s=0.2)
    assert again["restored"] > 0 and again["saved"] is None and store.puts == 1
    # without checkpoints there is nothing to save
    plain = ray_driver.run_item("j-2", 2, "c", 1, "true", 30, "", "")
    assert plain["saved"] is None


def test_the_batchs_yen_bills_each_node_at_its_own_price_for_its_time_in_the_batch(spot, capsys):
    """spot-5 ran from 5 to 70 min: spot-0 at ¥360/h all 65 min (¥390), spot-1 at ¥360/h until
    its ledger stopped at 32 min (27 min: ¥162), the on-demand replacement spot-2 at ¥720/h from
    33 min (37 min: ¥444)."""
    from gpuplan.cli import jobs as jobs_cli

    row = spot.job("spot-5")
    assert runner.engine_job_yen(spot, row) == Decimal(390 + 162 + 444)
    assert runner.engine_summary(spot, "spot-5").yen == Decimal(996)
    jobs_cli._finish(spot, "spot-5", None)
    measured = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("measured: "))
    assert "¥996 (3 nodes: 2 x ¥360/h, 1 x ¥720/h, each for its time in the batch)" in measured, measured
    # a batch on nodes of one price is billed as before: spot-4 ran 5 min on spot-0 and spot-1
    assert runner.engine_job_yen(spot, spot.job("spot-4")) == 2 * Decimal(360) * 300 / 3600 == Decimal(60)
