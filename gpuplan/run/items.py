"""A batch's items and what they came to, the same on every run backend (Ray, Slurm, DOK):
reading the items file and the plan, the order items run in and their names, the limits on a
batch, its summary (RunSummary: wall, yen by the one billing rule) and end (JobsFailed, Capped),
and how it compares with what the plan predicted (compare, calibrate)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from gpuplan.errors import GpuplanError, NotFound, UsageError

if TYPE_CHECKING:
    from gpuplan.market.billing import Terms
    from gpuplan.store.costs import Interruptions
    from gpuplan.store.state import JobRow, State

MAX_JOBS = 100_000  # one run: a log file per job in one folder and a state row per job
MAX_PER_GPU = 16  # jobs sharing one GPU, each with a fixed 1/k memory share: past 16 a share is under 1 GiB of 16
MAX_SLOTS_PER_NODE = 64  # `bench --gpus`: no machine in the catalog has more than 16 GPUs
MAX_RETRIES = 100  # a job failing for good is retried at most this often, never for ever
MAX_ITEMS_BYTES = 64 * 2**20  # 100,000 items of a long path each
JOB_STATES_OVER = ("succeeded", "failed", "cancelled", "capped", "lost")
MIN_CHECKPOINT_S = 2  # a sync costs a tar of the folder and a copy to the head: not many a second


class JobsFailed(GpuplanError):
    """Some jobs failed after all their attempts (exit code 5: the run happened, the work did not)."""

    exit_code = 5


class Capped(GpuplanError):
    """The batch was stopped at its yen cap (exit code 6: it ran, and stopped as asked before it finished)."""

    exit_code = 6


@dataclass(frozen=True)
class JobResult:
    job: str
    item: str
    slot: str
    node: str
    status: str  # ok | failed
    attempts: int  # every attempt, including ones that did not count against --retries
    seconds: float  # the last attempt
    log_path: Path


@dataclass(frozen=True)
class Quarantine:
    """A node taken out of a run's slot pool: why as a code (batch_rules.QUARANTINE_CODES) and in one line."""

    node: str
    code: str
    reason: str


@dataclass(frozen=True)
class RunSummary:
    cluster: str
    jobs: tuple[JobResult, ...]
    wall_seconds: float
    nodes: int  # every node of the cluster: quarantined ones are billed too
    price_jpy_per_hour: Decimal | None
    log_dir: Path
    quarantined: tuple[Quarantine, ...] = ()
    provider: str = ""  # the fleet it ran on (calibration checks it against the plan's)
    size: str = ""
    terms: Terms | None = None  # how each node is billed (the cluster's ledger); None: its hourly price by the second
    task_seconds: tuple[int, ...] = ()  # a DOK batch: each task's billed run time (each task is billed on its own)
    # a cluster batch: each machine the ledger billed during it, by its own terms, for the seconds
    # it was held while the batch ran (a replacement from when it came, at its own price)
    node_seconds: tuple[tuple[Terms, float], ...] = ()
    interruptions: Interruptions | None = None  # what the cloud taking nodes back cost it (None: it took none)

    @property
    def failed(self) -> list[JobResult]:
        return [j for j in self.jobs if j.status != "ok"]

    @property
    def yen(self) -> Decimal | None:
        """Every node billed for the run's wall time, by the rule the plan was priced with (billing.charge);
        a DOK batch, each task for its own run time with its own minimum (billing.charge_tasks)."""
        if self.task_seconds and self.terms is not None:
            from gpuplan.market import billing

            return billing.charge_tasks(self.task_seconds, self.terms)
        if self.node_seconds:
            return held_yen(self.node_seconds)
        return yen_for(self.terms, self.price_jpy_per_hour, self.nodes, self.wall_seconds)


def yen_for(terms: Terms | None, price_jpy_per_hour: Decimal | None, nodes: int, seconds: float) -> Decimal | None:
    """`nodes` machines held `seconds` each, billed by `terms` (the cluster's ledger: granularity,
    minimum, caps); a cluster without recorded terms by its hourly price per second."""
    from gpuplan.market import billing

    if terms is None and price_jpy_per_hour is not None:
        terms = billing.per_second(price_jpy_per_hour)
    return billing.measured_yen(seconds, nodes, terms)


def read_items(path: Path) -> list[str]:
    """One item per line; blank lines and lines starting with # are skipped. At most MAX_JOBS."""
    from gpuplan.userfiles import read_text

    fix = "write one item (video, file, seed) per line"
    lines = read_text(path, "items file", fix, max_bytes=MAX_ITEMS_BYTES).splitlines()
    items = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]
    from gpuplan.userfiles import check_plain

    for n, line in enumerate(lines, 1):  # an item is printed (progress, jobs, logs): no terminal escape codes
        check_plain(line.strip(), f"items file {path} line {n}:")
    if not items:
        raise UsageError(f"items file {path} has no items; write one per line")
    if len(items) > MAX_JOBS:
        raise UsageError(f"items file {path} has {len(items):,} items; one run takes at most {MAX_JOBS:,}"
                         " (one log file and one state row each): split it into several runs")
    return items


def read_plan(path: Path) -> dict:
    """What a plan file from `gpuplan estimate --save` predicts for the part `gpuplan run`
    measures (planning/saved_plan.py: SavedPlan.prediction)."""
    from gpuplan.planning import saved_plan

    return saved_plan.load(path).prediction()


def job_name(index: int, item: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(item).name or item).strip("_.")[:60]
    return f"{index:04d}-{slug or 'item'}"


def run_order(items: Sequence[str], predicted: dict | None) -> tuple[list[tuple[int, str]], str]:
    """The items as (index in the file, item) in the order they run, and where the order came
    from. A plan lists each machine's jobs longest first; taking the first job of every machine,
    then the second, and so on runs the batch longest first. Items the plan does not name run
    after those it does, in file order; without a plan, file order."""
    numbered = list(enumerate(items))
    order = (predicted or {}).get("order") or []
    if not order:
        return numbered, "the items file's order"
    rank = {name: r for r, name in enumerate(order)}

    def key(pair: tuple[int, str]) -> tuple[int, int]:
        idx, item = pair
        r = rank.get(item, rank.get(Path(item).name, rank.get(Path(item).stem)))
        return (0, r) if r is not None else (1, idx)

    ordered = sorted(numbered, key=key)
    matched = sum(1 for p in ordered if key(p)[0] == 0)
    return ordered, f"the plan's (longest first; {matched} of {len(items)} items named in it)"


def checkpoint_interval(text: str) -> int:
    """--checkpoint-every / checkpoint.every: seconds, at least MIN_CHECKPOINT_S."""
    from gpuplan.units import parse_duration

    every = parse_duration(text, "--checkpoint-every")
    if every < MIN_CHECKPOINT_S:
        raise UsageError(f"--checkpoint-every {text}: at least {MIN_CHECKPOINT_S} s")
    return every


def job_seconds(row: JobRow, at=None) -> float:
    """The batch's wall time: from its driver's start to its end (or `at`, or now)."""
    from gpuplan.store.state import now

    if row.started_at is None:
        return 0.0
    end = row.ended_at or at or now()
    return max(0.0, (end - row.started_at).total_seconds())


def held_yen(held: Sequence[tuple[Terms, float]]) -> Decimal:
    """Each machine of node_seconds billed for its seconds by its own terms (the one billing rule)."""
    from gpuplan.market import billing

    return sum((billing.measured_yen(s, 1, t) or Decimal(0) for t, s in held), Decimal(0))


def job_row(state: State, job: str, listed: str = "CLUSTER") -> JobRow:
    """The job's row; NotFound where the state has none (`listed`: what `gpuplan jobs` lists it under)."""
    row = state.job(job)
    if row is None:
        raise NotFound(f"no job {job!r}; `gpuplan jobs {listed}` lists them")
    return row


def check_items_command(command: Sequence[str]) -> None:
    """An item batch's command says where each item goes, on every backend."""
    if "{item}" not in " ".join(command):
        raise UsageError("the command has no {item}: write where each item goes, e.g. -- python train.py {item}")


def item_results(state: State, job: str) -> tuple[JobResult, ...]:
    """One JobResult per item of the job, as the state has it (every backend's summary)."""
    results = []
    for it in state.job_items(job):
        status = "ok" if it.status == "ok" else ("timed out" if it.timed_out and it.status in ("failed", "bad input")
                                                 else it.status)
        seconds = 0.0
        if it.started_at and it.ended_at:
            seconds = (it.ended_at - it.started_at).total_seconds()
        results.append(JobResult(job_name(it.idx, it.item), it.item, it.slot or "-", it.node or "-", status,
                                 it.attempts, seconds, Path(it.log_path or "-")))
    return tuple(results)


def record_finished(state: State, job: str) -> None:
    """Each item's final outcome also as a `runs` row (what `estimate_vs_measured` reads)."""
    row = job_row(state, job)
    for it in state.job_items(job, statuses=("ok", "failed", "bad input")):
        started = it.started_at or row.submitted_at
        seconds = (it.ended_at - started).total_seconds() if it.ended_at else 0.0
        state.record_run(row.cluster, job_name(it.idx, it.item), it.node or "-", it.slot or "-",
                         "ok" if it.status == "ok" else "failed", it.attempts, seconds, it.log_path, started)


@dataclass(frozen=True)
class Comparison:
    measured_wall_s: float
    measured_yen: Decimal | None
    predicted_wall_s: Decimal | None
    predicted_yen: Decimal | None
    wall_error_pct: Decimal | None  # (measured - predicted) / predicted x 100
    yen_error_pct: Decimal | None


def calibrate(state: State, summary: RunSummary, predicted: dict | None, command: Sequence[str] = (),
              job: str = "") -> str:
    """Record the batch `job` (which ran `command`) as a calibration of the plan's workload when
    planning/calibration.decide says it is evidence of the job's speed: the plan's whole batch,
    no failures, the workload's own job, on the planned fleet, every item's time within the
    plan's band. On another fleet the measurement is kept as a per-GPU speed point; otherwise it
    is only an observation. Returns one line saying what was recorded, or why not."""
    from gpuplan.measuring import calibration

    if not predicted or not predicted.get("workload") or not predicted.get("jobs"):
        return ""
    if summary.task_seconds and len(summary.task_seconds) == len(summary.jobs):
        times, clock = tuple(float(t) for t in summary.task_seconds), calibration.CLOCK_TASKS
    else:
        times, clock = tuple(j.seconds for j in summary.jobs), calibration.CLOCK_ITEMS
    batch = calibration.Batch(job, tuple(command), summary.provider, summary.size, summary.nodes, times, clock,
                              len(summary.failed))
    verdict = calibration.decide(batch, predicted, workload_commands(predicted))
    if verdict.why is calibration.Why.OTHER_FLEET:
        gpus = summary.nodes * max(1, _gpus_per_node(state, summary.cluster))
        state.record_speed_point(predicted["workload"], summary.provider, summary.size, gpus, predicted["jobs"],
                                 summary.wall_seconds, f"the plan is for {verdict.planned}, the batch ran on {verdict.ran}",
                                 summary.cluster)
    elif verdict.used:
        state.record_calibration(predicted["workload"], predicted["provider"], predicted["instance_type"],
                                 predicted["jobs"], float(verdict.predicted_item_s or 0), float(verdict.measured_item_s or 0),
                                 summary.cluster, batch=job, clock=clock, command=verdict.command,
                                 gpu=str(predicted.get("gpu") or ""))
    return calibration.said(verdict, predicted["workload"], predicted["instance_type"])


def workload_commands(predicted: dict) -> tuple[str, ...]:
    """The commands whose batches calibrate the plan's workload: those it names, and the plan's own."""
    from gpuplan.measuring import calibration
    from gpuplan.planning import workloads

    named: tuple[str, ...] = tuple(predicted.get("workload_commands") or ())  # as the plan recorded them
    if predicted.get("workload_commands") is None:  # a plan file older than that: the built-in workload's
        try:
            named = workloads.load(str(predicted["workload"])).commands
        except UsageError:  # not a built-in name: only the plan's own command
            pass
    return calibration.accepted_commands(named, predicted.get("command"))


def _gpus_per_node(state: State, cluster: str) -> int:
    return max((n.gpus for n in state.nodes(cluster)), default=0)


def compare(summary: RunSummary, predicted: dict | None) -> Comparison:
    def err(measured: Decimal | None, pred: Decimal | None) -> Decimal | None:
        if measured is None or pred is None or pred == 0:
            return None
        return (measured - pred) / pred * 100

    wall = Decimal(str(summary.wall_seconds))
    pw = predicted["wall_s"] if predicted else None
    py = predicted["yen"] if predicted else None
    measured = summary.yen
    if measured is not None and predicted:  # the yen billed (as listed), on the plan's tax basis (market/tax.py)
        from gpuplan.market import tax

        measured = tax.on_basis(measured, predicted.get("listed_tax") or "unknown", predicted.get("tax") or "as-listed")
    # Under a yen the prediction is all rounding: a percentage of it says nothing.
    yen_error = err(measured, py) if py is not None and py >= 1 else None
    return Comparison(summary.wall_seconds, measured, pw, py, err(wall, pw), yen_error)
