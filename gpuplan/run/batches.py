"""The batch service: what happens to a batch once it is submitted, on any run backend
(run/backends.py): following it, its progress, what it did when it ended (and whether that
calibrates its plan), the jobs of a cluster as they are now, and the nodes a batch lost that a
replacement could take over. `gpuplan run`, `jobs` and `launch` call these and render what they
return; no words are decided on here.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from gpuplan.errors import UsageError
from gpuplan.run import backends

if TYPE_CHECKING:
    from gpuplan.run.items import RunSummary
    from gpuplan.run.recover import Cost
    from gpuplan.store.state import JobRow, State

FAILED = ("failed", "bad input", "timed out")


@dataclass(frozen=True)
class Progress:
    """A batch as of one look: its counts, when it may end (None until an item has ended) and its yen so far."""

    job: str
    state: str
    ok: int
    failed: int
    running: int
    total: int
    eta_s: float | None
    yen: Decimal | None
    over: bool


def progress(state: State, row: JobRow) -> Progress:
    from gpuplan.run import items as run_items

    counts = state.job_counts(row.id)
    ok, failed = counts.get("ok", 0), sum(counts.get(k, 0) for k in FAILED)
    left = row.total - ok - failed
    eta = 0.0 if not left else (run_items.job_seconds(row) / (ok + failed) * left if ok else None)
    return Progress(row.id, row.state, ok, failed, counts.get("running", 0), row.total, eta, backends.yen(state, row),
                    row.state in run_items.JOB_STATES_OVER)


def follow(state: State, job: str, look: Callable[[JobRow, Progress], None], every_s: float | None = None) -> JobRow:
    """Look at the batch again and again (every GPUPLAN_POLL_S, else its backend's pace) until it
    ends, calling `look` after each; returns its last row. Ctrl-C reaches the caller; the batch
    goes on where it runs."""
    backend = backends.of(backends.job_row(state, job))
    every = every_s if every_s is not None else float(os.environ.get("GPUPLAN_POLL_S") or backend.poll_s)
    with backend.session(state, job) as conn:  # an engine's batch: one SSH connection to its head
        while True:
            row = backends.refresh(state, job, conn)
            p = progress(state, row)
            look(row, p)
            if p.over:
                return row
            time.sleep(every)


def finish(state: State, job: str, predicted: dict | None) -> tuple[RunSummary, str]:
    """An ended batch: each item recorded as a run, its summary, and the line saying whether it
    calibrated its plan ("" where it has none; a capped batch never does: it did not run whole)."""
    from gpuplan.run import items as run_items

    run_items.record_finished(state, job)
    summary = backends.summary(state, job)
    row = backends.job_row(state, job)
    return summary, "" if row.state == "capped" else run_items.calibrate(state, summary, predicted, row.command, job)


@dataclass(frozen=True)
class JobView:
    """One batch of a cluster as `gpuplan jobs` shows it: its row and counts as of now, why it
    could not be read anew (or ""), and what its end recorded as a calibration (or "")."""

    row: JobRow
    counts: dict[str, int]
    not_refreshed: str
    calibration: str


def overview(state: State, cluster: str) -> list[JobView]:
    """The cluster's batches, each unfinished one read anew from where it runs; one that has
    ended since anyone looked is recorded and, when it ran a saved plan whole, calibrates it."""
    from gpuplan.run import items as run_items

    if state.cluster(cluster) is None and cluster not in backends.pseudo_clusters():
        raise UsageError(f"no cluster named {cluster!r}; `gpuplan status` lists them")
    views = []
    for row in state.jobs(cluster):
        why, calibration = "", ""
        if row.state not in run_items.JOB_STATES_OVER:
            try:
                row = backends.refresh(state, row.id)
                if row.state in run_items.JOB_STATES_OVER:
                    run_items.record_finished(state, row.id)
                    calibration = _calibrate_detached(state, row)
            except Exception as exc:  # noqa: BLE001 - an unreachable head: show what the state knows, say why
                why = f"{type(exc).__name__}: {exc}"
        views.append(JobView(row, state.job_counts(row.id), why, calibration))
    return views


def _calibrate_detached(state: State, row: JobRow) -> str:
    """A batch submitted with --plan that ended while nobody followed it: its calibration, now."""
    from gpuplan.run import items as run_items

    plan = row.options.get("plan")
    if not plan or row.state != "succeeded":
        return ""
    try:
        predicted = run_items.read_plan(Path(plan))
    except UsageError as exc:
        return f"not calibrated ({exc})"
    return run_items.calibrate(state, backends.summary(state, row.id), predicted, row.command, row.id)


@dataclass(frozen=True)
class Lost:
    """A node the batch lost (set aside with code LOST, or drained on the cloud's interruption
    notice: INTERRUPTED): what replacing it would cost for the batch's time left and a
    replacement's setup."""

    node: str
    code: str  # batch_rules LOST, or INTERRUPTED: the cloud announced it takes the node back
    reason: str
    left_s: float
    cost: Cost

    @property
    def taken_back(self) -> bool:
        """The cloud announced it takes the node back (a spot interruption), rather than it was lost."""
        from gpuplan.run.ray.batch_rules import INTERRUPTED

        return self.code == INTERRUPTED


def newly_lost(state: State, cluster: str, row: JobRow, handled: set[str]) -> list[Lost]:
    """The nodes the running batch has lost that `handled` does not hold yet (added to it)."""
    from gpuplan.run import items as run_items
    from gpuplan.run import recover
    from gpuplan.run.ray.batch_rules import INTERRUPTED, LOST

    if row.state in run_items.JOB_STATES_OVER:
        return []
    lost = [q for q in state.job_quarantines(row.id) if q.code in (LOST, INTERRUPTED) and q.node not in handled]
    if not lost:
        return []
    p = progress(state, row)
    done = p.ok + p.failed
    elapsed = run_items.job_seconds(row)
    left = elapsed / done * (row.total - done) if done else elapsed
    handled.update(q.node for q in lost)
    return [Lost(q.node, q.code, q.reason, left, recover.cost(state, cluster, left + recover.SETUP_GUESS_S)) for q in lost]
