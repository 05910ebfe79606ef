"""A toy run backend, registered from tests/ through the entry-point group gpuplan.run_backends as
a third party's would be (tests/test_run_backend_contract.py writes a *.dist-info naming it):
each item runs here, one per look, as `sh -c` of its rendered command, in a folder of its own
under $GPUPLAN_TOY_DIR. It supports no option beyond items and a command, so it refuses the
rest in one line (backends.check), and bills nothing."""

from __future__ import annotations

import os
import subprocess
from contextlib import nullcontext
from decimal import Decimal
from pathlib import Path

from gpuplan.errors import UsageError
from gpuplan.planning import fmt
from gpuplan.run import backends, command_line
from gpuplan.run import items as run_items

PSEUDO = "toy"


def _root() -> Path:
    return Path(os.environ["GPUPLAN_TOY_DIR"])


def _now() -> str:
    from gpuplan.store.state import now

    return now().isoformat()


class ToyBackend:
    name = "toy"
    has_cluster = False
    poll_s = 0.05
    stopped = ("toy item", "stopped")
    pseudo_clusters = (PSEUDO,)
    supports: frozenset[str] = frozenset()
    refusal = "a toy run is one local process per item"
    refusal_hint = ""
    unit = "item"

    def names(self, target: str) -> bool:
        return target == PSEUDO or target.startswith(PSEUDO + ":")

    def serves(self, offer) -> bool:
        return False

    def target_of(self, offer, cluster: str) -> str:
        return PSEUDO

    def task_steps(self, offer, image, items, outputs) -> list[str]:
        return [f"1. run {fmt.plural(items, 'item')} here"]

    def preflight(self, image: str) -> None:
        return None

    def validate(self, sub) -> None:
        if sub.timeout_s < 1:
            raise UsageError("a toy item needs at least a second")

    def dashboard(self, state, target: str, port: int, ready, stop) -> None:
        raise UsageError("a toy run has no dashboard")

    def resolve(self, target, predicted) -> str:
        return target

    def resumed(self, old, sub):
        from dataclasses import replace

        return replace(sub, target=PSEUDO, command=tuple(old.command))

    def offer_of(self, target: str):
        return None

    def bench_hint(self, offer, job: str, out: str) -> str | None:
        return None

    def time_limit_within(self, offer, billed, limit_s: int) -> int:
        return limit_s  # it bills nothing

    def submitted(self, state, job, count: int) -> str:
        return f"{fmt.plural(count, 'item')} as local processes"

    def notes(self, job: str) -> list[str]:
        return []

    def after(self, job: str) -> list[str]:
        return []

    def submit(self, state, sub, progress) -> str:
        run_items.check_items_command(list(sub.command))
        if not sub.items:
            raise UsageError("no items to run")
        job = f"{PSEUDO}-{state.next_job_number(PSEUDO)}"
        state.add_job(job, PSEUDO, list(sub.command), dict(sub.options), list(sub.items), 1, sub.resumes,
                      backend=self.name)
        progress(f"{job}: {fmt.plural(len(sub.items), 'item')} queued here")
        return job

    def claims(self, row) -> bool:
        return self.names(row.cluster)

    def session(self, state, job):
        return nullcontext()

    def refresh(self, state, job: str, conn=None):
        row = backends.job_row(state, job)
        if row.state in run_items.JOB_STATES_OVER:
            return row
        events: list[dict] = []
        if row.state == "submitted":
            events.append({"t": "begin", "at": _now()})
        queued = state.job_items(job, ["queued"], limit=1)
        if queued:  # one item a look
            it = queued[0]
            folder = _root() / job / f"{it.idx:04d}"
            folder.mkdir(parents=True, exist_ok=True)
            start = _now()
            line = command_line.exec_line(row.command)  # {item}, {out} and $NAME as on every backend
            r = subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=60,
                               env={**os.environ, "GPUPLAN_OUTPUT_DIR": str(folder), "GPUPLAN_ITEM": it.item})
            (folder / "log.txt").write_text(r.stdout + r.stderr)
            events.append({"t": "end", "i": it.idx, "status": "ok" if r.returncode == 0 else "failed", "attempt": 1,
                           "node": "here", "slot": "0", "start": start, "end": _now(), "exit": r.returncode,
                           "timed_out": False, "log": str(folder / "log.txt")})
        elif not state.job_items(job, ["running"]):
            counts = state.job_counts(job)
            events.append({"t": "done", "state": "succeeded" if counts.get("ok", 0) == row.total else "failed",
                           "at": _now()})
        state.record_job_events(job, events, row.events_read + len(events))
        return backends.job_row(state, job)

    def cancel(self, state, job: str) -> int:
        queued = state.job_items(job, ["queued"])
        now = _now()
        state.record_job_events(job, [{"t": "end", "i": it.idx, "status": "cancelled", "attempt": 0, "node": "-",
                                       "slot": "-", "start": now, "end": now, "exit": None, "timed_out": False,
                                       "log": ""} for it in queued], backends.job_row(state, job).events_read)
        state.set_job_state(job, "cancelled")
        return 0  # nothing was running: an item runs only while someone looks

    def yen(self, state, row, at=None):
        return Decimal(0)

    def summary(self, state, job: str):
        row = backends.job_row(state, job)
        return run_items.RunSummary(row.cluster, run_items.item_results(state, job), run_items.job_seconds(row), 1, Decimal(0),
                                 _root() / job, (), "toy", "here")

    def outputs(self, state, job: str, into: Path, item: str | None = None) -> backends.Fetched:
        import shutil

        items = files = 0
        for it in state.job_items(job, ["ok", "failed"]):
            if item is not None and item not in (it.item, str(it.idx)):
                continue
            folder = _root() / job / f"{it.idx:04d}"
            target = into / f"{it.idx:04d}-{it.item}"
            shutil.copytree(folder, target, dirs_exist_ok=True)
            items += 1
            files += sum(1 for p in target.rglob("*") if p.is_file())
        return backends.Fetched(items, files)

    def logs(self, state, job: str, item, follow: bool, write, note) -> None:
        it = state.job_item(job, item) if item is not None else None
        if it is None or not it.log_path:
            note(f"no log for {item!r} yet")
            return
        write(Path(it.log_path).read_text())
