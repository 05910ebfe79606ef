"""What gpuplan records of a Slurm batch, from what squeue and sacct say (issue 41), without
daemons: the two readers stand in for the login host's answers. The same on a real Slurm:
tests/test_slurm_runs.py."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from gpuplan.run import backends
from gpuplan.run import items as run_items
from gpuplan.run.slurm import slurm_runs
from gpuplan.store.state import State

T0 = datetime(2026, 11, 28, 10, 0, 0, tzinfo=timezone.utc)
PRICE = Decimal(30)  # yen a GPU-hour


@pytest.fixture
def batch(tmp_path, monkeypatch):
    """A submitted two-item array job `slurm-1` on lab/gpu; `said` is what squeue and sacct answer."""
    state = State(tmp_path / "state.db")
    opts = {"slurm_cluster": "lab", "partition": "gpu", "array_items": [0, 1],
            "terms": {"price_jpy": str(PRICE), "period_s": 3600, "granularity_s": 1, "minimum_s": 0}, "timeout_s": 600}
    job = state.add_numbered_job(slurm_runs.CLUSTER, ["sh", "-c", "sleep 10"], opts, [(0, "a"), (1, "b")], 1, None,
                                 backend="slurm")
    entry = state.journal_intent(slurm_runs.JOURNAL_OP, job, slurm_runs.CLUSTER, "lab/gpu 2 tasks")
    state.journal_outcome(entry, True, "array 77 folder /home/me/gpuplan-batches/" + job)
    said: dict = {"queued": {}, "ended": {}}
    monkeypatch.setattr(slurm_runs, "_cluster", lambda _row: (object(), None))
    monkeypatch.setattr(slurm_runs, "_queued", lambda _c, _a, _conn: said["queued"])
    monkeypatch.setattr(slurm_runs, "_ended_sacct", lambda _c, _a, _conn: said["ended"])
    yield state, job, said
    state.close()


def _at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_a_batch_read_late_has_the_wall_gpus_and_ledger_slurm_timed(batch, monkeypatch):
    """Issue 41: a detached job's wall was 1 s for 10 s tasks (the time between two looks), the
    summary said the batch ran on 1 x the partition when both GPUs ran, and cost-report said
    "nothing in the cost ledger" after the spending."""
    from gpuplan.store import costs

    state, job, said = batch
    # first look at T0+8: both tasks have run since T0+1 and T0+2
    monkeypatch.setattr("gpuplan.store.state.now", lambda: _at(8))
    said["queued"] = {0: ("RUNNING", _at(1)), 1: ("RUNNING", _at(2))}
    slurm_runs.refresh(state, job)
    assert state.job(job).started_at == _at(1)
    # next look at T0+30, both ended ten seconds after they began
    monkeypatch.setattr("gpuplan.store.state.now", lambda: _at(30))
    said["queued"] = {}
    said["ended"] = {t: {"state": "COMPLETED", "exit": "0:0", "start": _at(1 + t), "end": _at(11 + t), "elapsed": 10,
                         "gpus": 1} for t in (0, 1)}
    row = slurm_runs.refresh(state, job)
    assert row.state == "succeeded"
    assert (row.started_at, row.ended_at) == (_at(1), _at(12))  # not the looks' 8 and 30
    assert run_items.job_seconds(row) == 11
    assert slurm_runs.summary(state, job).nodes == 2  # both GPUs at once
    # the ledger: one row a task, its own seconds, the same yen as the job's
    rows = [r for r in state.ledger_rows() if r["provider"] == "slurm"]
    assert [(r["cluster"], r["node"], r["size"], r["started_at"], r["stopped_at"]) for r in rows] == [
        ("slurm", f"{job}/77_0", "lab.gpu", _at(1), _at(11)), ("slurm", f"{job}/77_1", "lab.gpu", _at(2), _at(12))]
    lines = costs.report(state.ledger_rows())
    assert [(x.cluster, x.provider, x.size, x.machines, x.seconds) for x in lines] == [("slurm", "slurm", "lab.gpu", 2, 20)]
    assert lines[0].yen == backends.yen(state, state.job(job)) == Decimal(20) * PRICE / 3600
    slurm_runs.refresh(state, job)  # read again: nothing is billed twice
    assert len([r for r in state.ledger_rows() if r["provider"] == "slurm"]) == 2


def test_one_gpu_at_a_time_is_said_as_one(batch, monkeypatch):
    state, job, said = batch
    monkeypatch.setattr("gpuplan.store.state.now", lambda: _at(60))
    said["ended"] = {0: {"state": "COMPLETED", "exit": "0:0", "start": _at(0), "end": _at(10), "elapsed": 10, "gpus": 1},
                     1: {"state": "FAILED", "exit": "1:0", "start": _at(10), "end": _at(15), "elapsed": 5, "gpus": 1}}
    row = slurm_runs.refresh(state, job)
    assert row.state == "failed" and run_items.job_seconds(row) == 15
    assert slurm_runs.summary(state, job).nodes == 1
