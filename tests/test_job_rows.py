"""Jobs, items and set-aside nodes come out of the state as frozen typed rows, and why a node was
set aside is a code (batch_rules), stored beside its words: `run --recover` decides on the code."""

from __future__ import annotations

import dataclasses
import sqlite3
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from gpuplan.run.ray import batch_rules as rules
from gpuplan.store.state import ItemRow, JobRow, QuarantineRow, State

T0 = "2026-11-24T06:00:00+00:00"


def _job(state: State, job: str = "c-1", cluster: str = "c") -> None:
    state.add_job(job, cluster, ["echo", "{item}"], {"per_gpu": 1, "plan": None}, [(1, "b"), (0, "a")], nodes=2,
                  backend="ray")


def test_the_state_returns_frozen_rows(tmp_path, store):
    state = State(tmp_path / "state.db", url=store)
    try:
        _job(state)
        state.record_job_events("c-1", [
            {"t": "begin", "at": T0},
            {"t": "end", "i": 1, "status": "failed", "attempt": 1, "node": "c-0", "slot": "c-0:0",
             "start": "2026-11-24T06:00:01.250+00:00", "end": "2026-11-24T06:00:04+00:00", "exit": 124,
             "timed_out": True, "log": "/logs/1.1.log"},
            {"t": "quarantine", "node": "c-1", "code": rules.FAILURES, "reason": "2 items failed there"}], 10)
        row = state.job("c-1")
        assert isinstance(row, JobRow) and state.jobs("c") == [row] and state.unfinished_jobs() == [row]
        assert (row.id, row.cluster, row.state, row.command, row.total, row.nodes, row.backend, row.events_read) == (
            "c-1", "c", "running", ("echo", "{item}"), 2, 2, "ray", 10)
        assert row.options == {"per_gpu": 1, "plan": None} and row.options.get("plan") is None
        assert row.started_at == datetime(2026, 11, 24, 6, tzinfo=timezone.utc) and row.ended_at is None
        assert row.submitted_at.tzinfo is not None
        first, second = state.job_items("c-1")  # in run order
        assert isinstance(first, ItemRow) and (first.idx, first.item, first.position) == (1, "b", 0)
        assert (first.status, first.timed_out, first.exit_code, first.attempts, first.node, first.log_path) == (
            "failed", True, 124, 1, "c-0", "/logs/1.1.log")
        assert (first.ended_at - first.started_at).total_seconds() == 2.75
        assert (second.status, second.timed_out, second.started_at, second.node) == ("queued", False, None, None)
        assert state.job_item("c-1", "a") == second and state.job_item("c-1", "1") == first
        [q] = state.job_quarantines("c-1")
        assert isinstance(q, QuarantineRow)
        for frozen, field in ((row, "state"), (first, "status"), (q, "code")):
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(frozen, field, "x")
    finally:
        state.close()


def test_a_quarantine_events_code_is_stored_and_read_back(tmp_path, store):
    state = State(tmp_path / "state.db", url=store)
    try:
        _job(state)
        state.record_job_events("c-1", [
            {"t": "quarantine", "node": "c-1", "code": rules.LOST, "reason": "lost: ActorDiedError: the actor died"},
            {"t": "quarantine", "node": "c-2", "code": rules.LEFT_OUT, "reason": "host key refused: ..."},
            {"t": "quarantine", "node": "c-3", "reason": "a driver older than the codes"}], 3)
        assert state.job_quarantines("c-1") == [
            QuarantineRow("c-1", rules.LOST, "lost: ActorDiedError: the actor died"),
            QuarantineRow("c-2", rules.LEFT_OUT, "host key refused: ..."),
            QuarantineRow("c-3", rules.UNKNOWN, "a driver older than the codes")]
    finally:
        state.close()


def test_a_database_older_than_the_code_column_opens_and_reads(tmp_path):
    path = tmp_path / "state.db"
    State(path).close()
    db = sqlite3.connect(path)  # job_quarantines as it was shipped: no code column, one row written then
    db.executescript("""
        DROP TABLE job_quarantines;
        CREATE TABLE job_quarantines (job TEXT NOT NULL, node TEXT NOT NULL, reason TEXT NOT NULL);
        INSERT INTO job_quarantines VALUES ('c-1', 'c-1', 'lost: NodeDiedError');
    """)
    db.close()
    state = State(path)
    try:
        _job(state)
        state.record_job_events("c-1", [{"t": "quarantine", "node": "c-2", "code": rules.FAILURES, "reason": "why"}], 1)
        assert [(q.node, q.code, q.reason) for q in state.job_quarantines("c-1")] == [
            ("c-1", rules.UNKNOWN, "lost: NodeDiedError"), ("c-2", rules.FAILURES, "why")]
    finally:
        state.close()


def test_the_driver_codes_every_node_it_sets_aside():
    from gpuplan.run.ray import ray_driver

    b = rules.Batch.of([(0, "a"), (1, "b"), (2, "c")], ["x", "y", "z"])
    assert b.next_for("x") == 0 and b.lost(0, "x", node_gone=True, reason="NodeDiedError") == ["x"]
    assert b.next_for("y") == 0 and b.succeeded(0, "y") == []
    for i in (1, 2):
        assert b.next_for("y") == i and b.failed(i, "y", 9) == rules.QUEUED
        assert b.next_for("z") == i
    assert b.succeeded(1, "z") == [] and b.succeeded(2, "z") == ["y"]
    assert {n: s.code for n, s in b.out.items()} == {"x": rules.LOST, "y": rules.FAILURES}
    assert b.out["x"].reason == "lost: NodeDiedError"
    assert ray_driver._absent(rules, "w", {"w": "unreachable (timed out)"}) == (rules.LEFT_OUT, "unreachable (timed out)")
    assert ray_driver._absent(rules, "w", {}) == (rules.NOT_IN_RAY, "not in the Ray cluster (its Ray node is not running)")
    assert set(rules.QUARANTINE_CODES) == {rules.LOST, rules.FAILURES, rules.LEFT_OUT, rules.NOT_IN_RAY, rules.UNKNOWN,
                                           rules.INTERRUPTED}


def test_a_drained_node_queues_its_items_again_without_a_failure():
    """The cloud's notice (issue 35): the node is set aside as interrupted; an attempt the drain
    stopped goes back on the queue at its place, its attempt not counted as a failure there."""
    b = rules.Batch.of([(0, "a"), (1, "b")], ["x", "y"], retries=0)
    assert b.next_for("x") == 0 and b.next_for("y") == 1
    assert b.quarantine("x", rules.INTERRUPTED, "the cloud takes it back (terminate at 12:00): drained") == ["x"]
    b.interrupted(0, "x")
    assert b.items[0].status == rules.QUEUED and b.items[0].failed_on == []
    assert b.next_for("x") is None and b.succeeded(1, "y") == [] and b.next_for("y") == 0
    assert b.succeeded(0, "y") == [] and b.done()


def test_run_recover_replaces_the_nodes_set_aside_as_lost_by_their_code(gpuplan_home, monkeypatch):
    """The words are only shown: a node whose reason reads "lost: ..." but whose code is not LOST
    stays out, and one coded LOST whatever its words is replaced (once)."""
    from gpuplan import paths
    from gpuplan.cli import jobs
    from gpuplan.run import recover

    state = State(paths.state_db())
    try:
        _job(state)
        state.record_job_events("c-1", [
            {"t": "begin", "at": T0},
            {"t": "quarantine", "node": "c-1", "code": rules.FAILURES, "reason": "lost: in words only"},
            {"t": "quarantine", "node": "c-2", "code": rules.LOST, "reason": "its worker died twice"}], 3)
        replaced = []
        monkeypatch.setattr(recover, "cost", lambda *_a: recover.Cost("1x test:t4", Decimal(100), Decimal(50), 600.0))
        monkeypatch.setattr(recover, "replace_node", lambda _s, _c, node, _p, _market=None: replaced.append(node) or "c-9")
        from gpuplan.run import batches

        handled: set[str] = set()
        assert [lost.node for lost in batches.newly_lost(state, "c", state.job("c-1"), handled)] == ["c-2"]
        assert batches.newly_lost(state, "c", state.job("c-1"), handled) == []  # each lost node once
        look = jobs._recoverer(state, "c", yes=True)
        look(state.job("c-1"))
        look(state.job("c-1"))
        assert replaced == ["c-2"]
    finally:
        state.close()
