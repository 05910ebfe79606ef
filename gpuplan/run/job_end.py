"""How a job followed item by item (DOK tasks, Slurm array tasks) ends: one rule for both.
Imports nothing of the run modules, which all import it or may (tests/test_layout.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuplan.store.state import State


def settle(state: State, job: str, at_iso: str, over: Sequence[str], started_iso: str | None = None) -> None:
    """Once no item is queued or running, the job ends at `at_iso`: succeeded when every item is
    ok, else failed; `started_iso`: when it began, where the backend knows better than the first
    look did. A job in one of the states `over` is left as it is."""
    counts = state.job_counts(job)
    row = state.job(job)
    if row is None or counts.get("queued") or counts.get("running") or row.state in over:
        return
    ok = counts.get("ok", 0) == row.total
    state.record_job_events(job, [{"t": "done", "state": "succeeded" if ok else "failed", "at": at_iso,
                                   "started": started_iso}], row.events_read)
