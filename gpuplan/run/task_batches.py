"""What the run backends whose batch is a service's tasks share (DOK: run/dok, Slurm: run/slurm).

Such a batch has no cluster: it is recorded under its backend's pseudo-cluster (`dok`, `slurm`)
and read back from the service whenever someone looks (`run` following, `jobs`, `logs`,
`cancel`); each item is a task billed on its own for the seconds the service reports, through the
one billing rule (billing.charge_tasks), at the terms recorded with the job when it was sent.

`TaskBackend` is the common part of their adapters (run/<name>/backend.py): a backend names the
module that holds its code (`runs`, with submit, refresh, cancel, task_seconds, summary,
item_logs) and says only what is its own."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuplan.market.billing import Terms
    from gpuplan.run.items import RunSummary
    from gpuplan.store.state import JobRow, State


def iso(t: datetime | None = None) -> str:
    """A time as the state writes its times (now where none is given)."""
    from gpuplan.store.state import now

    return (t or now()).isoformat(timespec="seconds")


def terms_json(t: Terms) -> dict:
    """The billing terms as they are recorded in the job's options (`terms`) when it is sent."""
    return {"price_jpy": str(t.price_jpy), "period_s": t.period_s, "granularity_s": t.granularity_s,
            "minimum_s": t.minimum_s}


def job_terms(row: JobRow) -> Terms:
    """The terms the job was sent at (terms_json)."""
    from gpuplan.market.billing import Terms

    t = row.options["terms"]
    return Terms(Decimal(t["price_jpy"]), int(t["period_s"]), int(t["granularity_s"]), int(t["minimum_s"]))


def seconds_billed(start: datetime, end: datetime, gpus: int = 1) -> int:
    """A task's billed seconds: from its start to its end, x the GPUs it held, rounded up."""
    secs = Decimal(str(max(0.0, (end - start).total_seconds()))) * gpus
    return int(secs.to_integral_value(rounding=ROUND_CEILING))


def not_submitted(state: State, job: str, items: Sequence[tuple[int, str]], node: str) -> None:
    """Record these items failed, never sent (`--resume` sends them later)."""
    now = iso()
    state.record_job_events(job, [{"t": "end", "i": idx, "status": "failed", "attempt": 0, "node": node,
                                   "slot": "not submitted", "start": now, "end": now, "exit": None,
                                   "timed_out": False, "log": None} for idx, _ in items], 0)


def settle(state: State, job: str, at_iso: str, over: Sequence[str], started_iso: str | None = None) -> None:
    """Once no item is queued or running, the job ends at `at_iso`: succeeded when every item is
    ok, else failed; `started_iso`: when it began, where the service knows better than the first
    look did. A job in one of the states `over` is left as it is."""
    counts = state.job_counts(job)
    row = state.job(job)
    if row is None or counts.get("queued") or counts.get("running") or row.state in over:
        return
    ok = counts.get("ok", 0) == row.total
    state.record_job_events(job, [{"t": "done", "state": "succeeded" if ok else "failed", "at": at_iso,
                                   "started": started_iso}], row.events_read)


def summary(state: State, row: JobRow, nodes: int, where: str, provider: str, size: str,
            task_seconds: Sequence[int]) -> RunSummary:
    """The batch as a RunSummary: one result per item, its wall, each task billed on its own."""
    from gpuplan.run import items as run_items

    return run_items.RunSummary(row.cluster, run_items.item_results(state, row.id), run_items.job_seconds(row), nodes,
                                None, Path(where), (), provider, size, job_terms(row), tuple(task_seconds))


class TaskBackend:
    """The common part of a task backend's adapter (the RunBackend contract, run/backends.py).
    A subclass sets name, poll_s, stopped, pseudo_clusters, supports, refusal, unit and
    `min_time_limit_s`, returns its code's module from `runs()`, and writes what differs."""

    has_cluster = False
    refusal_hint = ""
    unit = "item"
    min_time_limit_s = 1  # the shortest time limit the service takes for a task

    def runs(self) -> ModuleType:
        raise NotImplementedError

    def offer_of(self, target: str) -> Any:
        return None

    def time_limit_within(self, offer: Any, billed: Decimal, limit_s: int) -> int:
        """A task backend cannot stop a batch at a moment: each task's time limit is what `billed`
        buys on `offer` (at least the service's shortest)."""
        from gpuplan.market import billing

        terms = billing.terms_for(offer)
        return max(self.min_time_limit_s, billing.seconds_within(lambda s: billing.charge(s, terms), billed, limit_s))

    def notes(self, job: str) -> list[str]:
        return []

    def after(self, job: str) -> list[str]:
        return []

    def claims(self, row: JobRow) -> bool:
        return self.names(row.cluster)

    def names(self, target: str) -> bool:
        raise NotImplementedError

    def session(self, state: State, job: str) -> AbstractContextManager[Any]:
        return nullcontext()  # the service is asked one request at a time

    def refresh(self, state: State, job: str, conn: Any = None) -> JobRow:
        return self.runs().refresh(state, job, conn)

    def cancel(self, state: State, job: str) -> int:
        return self.runs().cancel(state, job)

    def yen(self, state: State, row: JobRow, at: Any = None) -> Decimal | None:
        from gpuplan.market import billing

        return billing.charge_tasks(self.runs().task_seconds(state, row.id, at), job_terms(row))

    def summary(self, state: State, job: str) -> RunSummary:
        return self.runs().summary(state, job)

    def logs(self, state: State, job: str, item: str | None, follow: bool, write: Callable[[str], None],
             note: Callable[[str], None]) -> None:
        self.runs().item_logs(state, job, item, follow, write, note)
