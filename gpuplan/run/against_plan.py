"""A batch against its plan, for `gpuplan jobs CLUSTER JOB --plot` (planning/plot.py draws it).

Read from the state alone (no cluster is asked): each node's items, from their rows (start and
end of their latest attempt) and the attempts the cloud stopped (job_interruptions); the plan
the batch was run with (`--plan`, its file read again: each machine's jobs phase, jobs_s, and
its jobs); and the yen billed as the batch went, by the backend's own rule (run/backends.py
`yen`) applied to the state as it stood at each moment. The plan's machines are not named
after nodes: a node is paired with the planned machine whose jobs it ran the most of, then the
rest longest with longest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuplan.errors import UsageError
from gpuplan.planning.plot import MachineRun, RunPicture
from gpuplan.run import backends

if TYPE_CHECKING:
    from gpuplan.store.state import ItemRow, JobRow, State

MAX_YEN_POINTS = 200  # the yen curve is priced at most this many times (each is a pass over the batch's rows)
EVEN_POINTS = 60


class _AsOf:
    """The state as it stood at `t`, for what a batch's yen reads: its row still running if it
    ended later, its items not yet started or still running, the ledger's machines not yet
    started or still held. Everything else is the state itself."""

    def __init__(self, state: State, t: datetime, read: dict[Any, list] | None = None):
        self._state, self._t = state, t
        self._read = read if read is not None else {}  # the rows read once for every moment priced

    def _rows(self, key: Any, fetch) -> list:
        if key not in self._read:
            self._read[key] = fetch()
        return self._read[key]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._state, name)

    def job(self, job: str) -> JobRow | None:
        row = self._state.job(job)
        return None if row is None else self.row(row)

    def row(self, row: JobRow) -> JobRow:
        if row.ended_at is not None and row.ended_at > self._t:
            return replace(row, ended_at=None, state="running")
        return row

    def job_items(self, job: str, statuses: Sequence[str] | None = None, limit: int | None = None) -> list[ItemRow]:
        out = []
        for it in self._rows(("items", job), lambda: self._state.job_items(job)):
            if it.started_at is None or it.started_at > self._t:
                it = replace(it, status="queued", started_at=None, ended_at=None)
            elif it.ended_at is not None and it.ended_at > self._t:
                it = replace(it, status="running", ended_at=None)
            if not statuses or it.status in statuses:
                out.append(it)
        return out[:limit] if limit is not None else out

    def ledger_rows(self) -> list[dict]:
        out = []
        for r in self._rows("ledger", self._state.ledger_rows):
            if r["started_at"] > self._t:
                continue
            out.append({**r, "stopped_at": None} if r["stopped_at"] is not None and r["stopped_at"] > self._t else r)
        return out


def picture(state: State, job: str) -> RunPicture:
    """The batch `job` against its plan, as far as the state knows it (refresh it first)."""
    from gpuplan.market import tax
    from gpuplan.store.state import now

    row = state.job(job)
    if row is None:
        raise UsageError(f"no job {job!r}; `gpuplan jobs CLUSTER` lists them")
    if row.started_at is None:
        raise UsageError(f"job {job} has not started: nothing to draw yet")
    start, end = row.started_at, row.ended_at or now()
    items = state.job_items(job)
    ran: dict[str, list[tuple[float, float]]] = {}
    names: dict[str, list[str]] = {}
    for it in items:
        if it.node is None or it.started_at is None:
            continue
        ran.setdefault(it.node, []).append(_span(it.started_at, it.ended_at or end, start))
        names.setdefault(it.node, []).append(it.item)
    stopped: dict[str, list[tuple[float, float]]] = {}
    for x in state.job_interruptions(job):
        if x.started_at is not None and x.ended_at is not None:
            stopped.setdefault(x.node, []).append(_span(x.started_at, x.ended_at, start))
            ran.setdefault(x.node, [])

    plan, note = _plan(row)
    planned = [m for m in (plan.machines if plan is not None and isinstance(plan.machines, list) else [])
               if isinstance(m, dict)]
    pairs = _pair(sorted(ran), names, ran, planned)
    machines = []
    for node, m in pairs:
        planned_s = int(m.get("jobs_s") or 0) if m is not None else None
        planned_items = len(m.get("jobs") or ()) if m is not None else 0
        machines.append(MachineRun(node or "", planned_s, planned_items, tuple(sorted(ran.get(node or "", ()))),
                                   tuple(sorted(stopped.get(node or "", ())))))
    numbered = [replace(mr, name=f"planned machine {k + 1}") if not mr.name else mr for k, mr in enumerate(machines)]

    predicted = plan.prediction() if plan is not None else None
    # the plan's basis, as `run --plan` compares them (run/items.py compare); without a plan as the
    # ledger's rows list their prices
    listed_by_rows = {r["tax"] for r in state.ledger_rows() if r["cluster"] == row.cluster}
    listed, basis = ((predicted.get("listed_tax") or "unknown", predicted.get("tax") or "as-listed") if predicted
                     else (listed_by_rows.pop() if len(listed_by_rows) == 1 else "unknown", "as-listed"))
    curve = tuple((secs, tax.on_basis(yen, listed, basis)) for secs, yen in _yen_curve(state, row, items, start, end))
    return RunPicture(
        job=job, state=row.state, machines=tuple(numbered), yen=curve,
        yen_basis=_basis_words(basis, listed),
        planned_wall_s=predicted["wall_s"] if predicted else None,
        planned_yen=predicted["yen"] if predicted else None,
        plan_file=str(row.options.get("plan") or ""), note=note)


def _span(a: datetime, b: datetime, start: datetime) -> tuple[float, float]:
    return (max(0.0, (a - start).total_seconds()), max(0.0, (b - start).total_seconds()))


def _plan(row: JobRow):
    """The plan file the batch was run with, read again, and why not where it cannot be."""
    from gpuplan.planning import saved_plan

    path = row.options.get("plan")
    if not path:
        return None, "no plan: run with --plan plan.json to draw it against one"
    try:
        return saved_plan.load(Path(path)), ""
    except UsageError as exc:
        return None, f"plan not drawn ({exc})"


def _matches(item: str, jobs: set[str]) -> bool:
    """An item is a planned job where its text, file name or stem is the job's name (as run_order matches them)."""
    return item in jobs or Path(item).name in jobs or Path(item).stem in jobs


def _pair(nodes: list[str], names: dict[str, list[str]], ran: dict[str, list[tuple[float, float]]],
          planned: list[dict]) -> list[tuple[str | None, dict | None]]:
    """Each node with the planned machine whose jobs it ran the most of; the rest longest with
    longest (the node's busy time, the machine's jobs_s); a node or machine left over alone."""
    jobs = [{str(j) for j in m.get("jobs") or ()} for m in planned]
    shared = sorted(((sum(_matches(i, jobs[k]) for i in names.get(n, ())), n, k)
                     for n in nodes for k in range(len(planned))), key=lambda x: (-x[0], x[1], x[2]))
    paired: dict[str, int] = {}
    taken: set[int] = set()
    for count, n, k in shared:
        if count and n not in paired and k not in taken:
            paired[n] = k
            taken.add(k)

    def busy(n: str) -> float:
        return sum(b - a for a, b in ran.get(n, ()))

    rest_nodes = sorted((n for n in nodes if n not in paired), key=lambda n: (-busy(n), n))
    rest_machines = sorted((k for k in range(len(planned)) if k not in taken),
                           key=lambda k: (-int(planned[k].get("jobs_s") or 0), k))
    for n, k in zip(rest_nodes, rest_machines):
        paired[n] = k
        taken.add(k)
    out: list[tuple[str | None, dict | None]] = [(n, planned[paired[n]] if n in paired else None) for n in nodes]
    out += [(None, planned[k]) for k in range(len(planned)) if k not in taken]
    return out


def _yen_curve(state: State, row: JobRow, items: Sequence[ItemRow], start: datetime, end: datetime
               ) -> list[tuple[float, Decimal]]:
    """(seconds from the start, yen billed by then) at the batch's start, each item's start and
    end and each ledger row's start and stop inside the batch, its end, and EVEN_POINTS moments
    evenly apart between (a minimum or an hourly granularity shows as the step it is): at most
    MAX_YEN_POINTS of them, evenly picked, the end always kept."""
    span = end - start
    moments = {start, end, *(start + span * k / EVEN_POINTS for k in range(1, EVEN_POINTS))}
    for it in items:
        moments.update(t for t in (it.started_at, it.ended_at) if t is not None and start <= t <= end)
    for r in state.ledger_rows():
        if r["cluster"] == row.cluster:
            moments.update(t for t in (r["started_at"], r["stopped_at"]) if t is not None and start <= t <= end)
    times = sorted(moments)
    if len(times) > MAX_YEN_POINTS:
        step = len(times) / (MAX_YEN_POINTS - 1)
        times = sorted({times[int(k * step)] for k in range(MAX_YEN_POINTS - 1)} | {end})
    out = []
    read: dict[Any, list] = {}
    for t in times:
        view = _AsOf(state, t, read)
        yen = backends.yen(view, view.row(row), t)  # type: ignore[arg-type]  # the state as it stood at t
        out.append(((t - start).total_seconds(), yen if yen is not None else Decimal(0)))
    return out


def _basis_words(basis: str, listed: str) -> str:
    if basis == "included":
        return "consumption tax included"
    if basis == "excluded":
        return "consumption tax excluded"
    return {"included": "as billed, tax included", "excluded": "as billed, before tax"}.get(listed, "as billed")
