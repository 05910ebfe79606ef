"""Run backends: one contract for what runs a batch, as providers are one contract for what
makes machines. A job row names its backend (state column `backend`); every question about a
job (read what is new, cancel it, what it cost, what it did, fetch its outputs) goes through
`of(row)`, so no caller switches on a cluster's name.

- `ray`: a batch on a cluster's Ray engine (cloud VMs and owned hosts): operating/runner.py.
- `dok`: items as Sakura 高火力 DOK tasks: operating/dok_runs.py.
- `slurm`: items as one Slurm job array on a cluster of slurm.yaml: operating/slurm_runs.py.

The module-level functions (refresh, cancel, yen, summary, outputs) are the batch service the
CLI and the launcher call; `get(name)` and `of(row)` the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gpuplan.errors import NotFound, UsageError

if TYPE_CHECKING:
    from gpuplan.operating.runner import RunSummary
    from gpuplan.operating.state import JobRow, State


@dataclass(frozen=True)
class Submission:
    """A batch to submit, on any backend. `target`: where it goes (the cluster's name; on DOK, the
    task plan); `items` (index in the items file, item) in run order; `registry`: a private
    image's login (containers.login_of reads it; on DOK, `dok_registry` names credentials kept
    there); `stop_at`: the yen cap's moment (UTC), where the backend stops a batch itself;
    `options`: recorded with the job."""

    target: str
    items: tuple[tuple[int, str], ...]
    command: tuple[str, ...]
    image: str = ""
    registry: Any = None
    env: Mapping[str, str] = field(default_factory=dict)
    per_gpu: int = 1
    retries: int = 0
    timeout_s: int = 24 * 3600
    workdir: Path | None = None
    stop_at: datetime | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    resumes: str | None = None
    checkpoint_every_s: int = 0  # clusters: each item's $GPUPLAN_CHECKPOINT_DIR kept on the head this often
    recover: bool = False  # clusters: nodes that join while the batch runs (replacements of lost ones) get items


@dataclass(frozen=True)
class Fetched:
    items: int  # items whose outputs came back
    files: int


class RunBackend(Protocol):
    name: str
    has_cluster: bool  # its batches run on a cluster of machines gpuplan made (torn down after a launch)

    def task_steps(self, offer: Any, image: str, items: int, outputs: Path) -> list[str]:
        """A launch's steps in words on a backend without a cluster (has_cluster False)."""
    poll_s: float  # how often a follower looks (an API asked over the internet: not every second)
    stopped: tuple[str, str]  # what cancel counts and what became of them: ("running item", "stopped on every node")
    pseudo_clusters: tuple[str, ...]  # names its batches are listed under when they have no cluster

    def names(self, target: str) -> bool:
        """Does `target` (what the user typed where a cluster goes: `dok`, `dok:h100-80gb`) name this backend?"""

    def serves(self, offer: Any) -> bool:
        """Does a plan on this catalog offer run through this backend (a DOK task plan: DOK's)?"""

    def target_of(self, offer: Any, cluster: str) -> str:
        """Where a batch planned on `offer` is submitted: the cluster made for it, or the offer itself."""

    def preflight(self, image: str) -> None:
        """What this backend can check before anything is bought (credentials; an image where it needs one)."""

    def submit(self, state: State, sub: Submission, progress: Callable[[str], None]) -> str:
        """Record the batch and start it where it runs; the job id."""

    def claims(self, row: JobRow) -> bool:
        """A job recorded before jobs named their backend: is it this backend's?"""

    def session(self, state: State, job: str) -> AbstractContextManager[Any]:
        """What a follower holds open while it looks again and again (passed to refresh as `conn`)."""

    def refresh(self, state: State, job: str, conn: Any = None) -> JobRow:
        """Read what is new about the job and write it into the state; the job's row."""

    def cancel(self, state: State, job: str) -> int:
        """Stop the job everywhere; how many running things (process groups, tasks) were stopped."""

    def yen(self, state: State, row: JobRow, at: Any = None) -> Decimal | None:
        """What the job has cost so far (or by `at`), by the one billing rule."""

    def summary(self, state: State, job: str) -> RunSummary:
        """The job as a RunSummary: one result per item, set-aside nodes, wall and yen."""

    def outputs(self, state: State, job: str, into: Path, item: str | None = None) -> Fetched:
        """Copy back what every ended item (or one) wrote into `into`."""

    def logs(self, state: State, job: str, item: str | None, follow: bool, write: Callable[[str], None],
             note: Callable[[str], None]) -> None:
        """Write an item's log (or the batch's own) through `write`; `note` for a remark about it."""


class RayBackend:
    name = "ray"
    has_cluster = True
    poll_s = 1.0
    stopped = ("running item", "stopped on every node")
    pseudo_clusters: tuple[str, ...] = ()

    def names(self, target: str) -> bool:
        return not any(b.pseudo_clusters and b.names(target) for b in _BACKENDS.values())

    def serves(self, offer: Any) -> bool:
        return offer.kind != "task" and offer.provider != "slurm"  # machines: cloud VMs, rented servers, owned hosts

    def target_of(self, offer: Any, cluster: str) -> str:
        return cluster

    def task_steps(self, offer: Any, image: str, items: int, outputs: Path) -> list[str]:
        return []  # a cluster's steps (provision, bootstrap, run, fetch, teardown) are launcher.steps' own

    def preflight(self, image: str) -> None:
        return None  # the cluster's provider is checked by whoever makes the cluster

    def submit(self, state: State, sub: Submission, progress: Callable[[str], None]) -> str:
        from gpuplan.operating import locks, runner

        command = list(sub.command)
        if sub.env:  # `env` runs inside the container too, where there is one
            command = ["env", *(f"{k}={v}" for k, v in sub.env.items()), *command]
        with locks.cluster(sub.target):  # no teardown or bootstrap while the batch is submitted
            return runner.submit(state, sub.target, list(sub.items), command, per_gpu=sub.per_gpu, retries=sub.retries,
                                 timeout=sub.timeout_s, options=dict(sub.options), resumes=sub.resumes,
                                 local_workdir=sub.workdir, progress=progress, image=sub.image or None,
                                 registry=sub.registry, stop_at=sub.stop_at, checkpoint_every_s=sub.checkpoint_every_s,
                                 recover=sub.recover)

    def claims(self, row: JobRow) -> bool:
        return self.names(row.cluster)

    def session(self, state: State, job: str) -> AbstractContextManager[Any]:
        from gpuplan.operating import engine, remote

        return remote.connect(engine.engine_of(state, job_row(state, job).cluster).head.host)

    def refresh(self, state: State, job: str, conn: Any = None) -> JobRow:
        from gpuplan.operating import runner

        return runner.refresh_engine(state, job, conn)

    def cancel(self, state: State, job: str) -> int:
        from gpuplan.operating import runner

        running = state.job_counts(job).get("running", 0)
        runner.cancel_engine(state, job)
        return running  # the items that were running, each stopped on its node (process group, container)

    def yen(self, state: State, row: JobRow, at: Any = None) -> Decimal | None:
        from gpuplan.operating import runner

        return runner.engine_job_yen(state, row, at)

    def summary(self, state: State, job: str) -> RunSummary:
        from gpuplan.operating import runner

        return runner.engine_summary(state, job)

    def outputs(self, state: State, job: str, into: Path, item: str | None = None) -> Fetched:
        from gpuplan.operating import runner

        items, files = runner.fetch_outputs(state, job, item, into)
        return Fetched(items, files)

    def logs(self, state: State, job: str, item: str | None, follow: bool, write: Callable[[str], None],
             note: Callable[[str], None]) -> None:
        from gpuplan.operating import runner

        runner.engine_logs(state, job, item, follow, write)


class DokBackend:
    name = "dok"
    has_cluster = False
    poll_s = 10.0
    stopped = ("DOK task", "cancelled (waiting or running)")
    pseudo_clusters: tuple[str, ...] = ("dok",)

    def names(self, target: str) -> bool:
        from gpuplan.operating import dok_runs

        return dok_runs.is_dok(target)

    def serves(self, offer: Any) -> bool:
        return offer.kind == "task" and offer.name.startswith("dok-")

    def target_of(self, offer: Any, cluster: str) -> str:
        return offer.name.removeprefix("dok-")  # the task plan

    def task_steps(self, offer: Any, image: str, items: int, outputs: Path) -> list[str]:
        from gpuplan.planning import fmt

        return [f"1. send {fmt.plural(items, 'DOK task')} on {offer.name.removeprefix('dok-')} from image"
                f" {image or '(none given)'}, one running at a time",
                f"2. follow them; each task's artifact (SAKURA_ARTIFACT_DIR) is fetched into {outputs}"]

    def preflight(self, image: str) -> None:
        from gpuplan.operating import dok_runs

        _need_image(image, "the pick")
        dok_runs.default_client().check_credentials()

    def submit(self, state: State, sub: Submission, progress: Callable[[str], None]) -> str:
        from gpuplan.operating import dok_runs

        _need_image(sub.image, sub.target)
        # $GPUPLAN_OUTPUT_DIR is where an item's outputs go on every backend: on DOK, the task's artifact folder
        command = ["sh", "-c", 'GPUPLAN_OUTPUT_DIR="${SAKURA_ARTIFACT_DIR:-/tmp}" exec "$@"', "gpuplan", *sub.command]
        registry = getattr(sub.registry, "dok_registry", "") or None
        return dok_runs.submit(state, dok_runs.default_client(), sub.target, sub.image, list(sub.items), command,
                               environment=dict(sub.env), registry=registry, time_limit_s=sub.timeout_s,
                               resumes=sub.resumes, options=dict(sub.options), progress=progress)

    def claims(self, row: JobRow) -> bool:
        return self.names(row.cluster)

    def session(self, state: State, job: str) -> AbstractContextManager[Any]:
        return nullcontext()  # DOK is asked over its public API, one request at a time

    def refresh(self, state: State, job: str, conn: Any = None) -> JobRow:
        from gpuplan.operating import dok_runs

        return dok_runs.refresh(state, job)

    def cancel(self, state: State, job: str) -> int:
        from gpuplan.operating import dok_runs

        return dok_runs.cancel(state, job)

    def yen(self, state: State, row: JobRow, at: Any = None) -> Decimal | None:
        from gpuplan.operating import dok_runs

        return dok_runs.job_yen(state, row, at)

    def summary(self, state: State, job: str) -> RunSummary:
        from gpuplan.operating import dok_runs

        return dok_runs.summary(state, job)

    def outputs(self, state: State, job: str, into: Path, item: str | None = None) -> Fetched:
        from gpuplan.operating import dok_runs

        if item is not None:
            raise UsageError("a DOK task's outputs are its artifact: fetch them all with `--fetch DIR` (no ITEM)")
        items, files = dok_runs.fetch_artifacts(state, job, into)
        return Fetched(items, files)

    def logs(self, state: State, job: str, item: str | None, follow: bool, write: Callable[[str], None],
             note: Callable[[str], None]) -> None:
        from gpuplan.operating import dok_runs

        dok_runs.item_logs(state, job, item, follow, write, note)


class SlurmBackend:
    name = "slurm"
    has_cluster = False
    poll_s = 5.0
    stopped = ("Slurm array task", "cancelled (pending or running), none left in squeue")
    pseudo_clusters: tuple[str, ...] = ("slurm",)

    def names(self, target: str) -> bool:
        from gpuplan.operating import slurm_runs

        return slurm_runs.is_slurm(target)

    def serves(self, offer: Any) -> bool:
        return offer.provider == "slurm"

    def target_of(self, offer: Any, cluster: str) -> str:
        return "slurm:" + offer.name.replace(".", "/", 1)  # CLUSTER.PARTITION -> slurm:CLUSTER/PARTITION

    def task_steps(self, offer: Any, image: str, items: int, outputs: Path) -> list[str]:
        from gpuplan.planning import fmt

        return [f"1. submit {fmt.plural(items, 'item')} to Slurm partition {offer.name} as one job array"
                " (one GPU per task; the queue's wait comes first)",
                f"2. follow it with squeue/sacct; each item's outputs are fetched into {outputs}"]

    def preflight(self, image: str) -> None:
        if image:
            raise UsageError("the pick is a Slurm partition: its batch runs on the nodes as they are; containers"
                             " (image:) are not supported there yet")

    def submit(self, state: State, sub: Submission, progress: Callable[[str], None]) -> str:
        from gpuplan.operating import slurm_runs

        return slurm_runs.submit(state, sub.target, list(sub.items), sub.command, env=dict(sub.env),
                                 timeout_s=sub.timeout_s, image=sub.image, options=dict(sub.options),
                                 resumes=sub.resumes, progress=progress)

    def claims(self, row: JobRow) -> bool:
        return self.names(row.cluster)

    def session(self, state: State, job: str) -> AbstractContextManager[Any]:
        from gpuplan.operating import slurm_runs

        return slurm_runs.session(state, job)  # one SSH connection to the login host while following

    def refresh(self, state: State, job: str, conn: Any = None) -> JobRow:
        from gpuplan.operating import slurm_runs

        return slurm_runs.refresh(state, job, conn)

    def cancel(self, state: State, job: str) -> int:
        from gpuplan.operating import slurm_runs

        return slurm_runs.cancel(state, job)

    def yen(self, state: State, row: JobRow, at: Any = None) -> Decimal | None:
        from gpuplan.operating import slurm_runs

        return slurm_runs.job_yen(state, row, at)

    def summary(self, state: State, job: str) -> RunSummary:
        from gpuplan.operating import slurm_runs

        return slurm_runs.summary(state, job)

    def outputs(self, state: State, job: str, into: Path, item: str | None = None) -> Fetched:
        from gpuplan.operating import slurm_runs

        items, files = slurm_runs.fetch_outputs(state, job, into, item)
        return Fetched(items, files)

    def logs(self, state: State, job: str, item: str | None, follow: bool, write: Callable[[str], None],
             note: Callable[[str], None]) -> None:
        from gpuplan.operating import slurm_runs

        slurm_runs.item_logs(state, job, item, follow, write, note)


def _need_image(image: str, what: str) -> None:
    if not image:
        raise UsageError(f"{what} is a 高火力 DOK task plan: every item runs in a container there; give the batch an"
                         " image (image: or --image), e.g. one built from your code's Dockerfile")


_BACKENDS: dict[str, RunBackend] = {"ray": RayBackend(), "dok": DokBackend(), "slurm": SlurmBackend()}
CLUSTERS = "ray"  # the backend of a batch on a cluster gpuplan provisioned or claimed


def get(name: str) -> RunBackend:
    try:
        return _BACKENDS[name]
    except KeyError:
        raise UsageError(f"unknown run backend {name!r}: one of {', '.join(_BACKENDS)}") from None


def for_target(target: str) -> RunBackend:
    """The backend a `run` target names: `dok:PLAN` names DOK's, `slurm:CLUSTER[/PARTITION]` Slurm's;
    anything else is a cluster's name (Ray)."""
    named = [b for b in _BACKENDS.values() if b.pseudo_clusters and b.names(target)]
    return named[0] if named else get(CLUSTERS)


def for_offer(offer: Any) -> RunBackend:
    """The backend a plan on `offer` runs through."""
    return next(b for b in _BACKENDS.values() if b.serves(offer))


def pseudo_clusters() -> tuple[str, ...]:
    """Names batches without a cluster are listed under (`gpuplan jobs dok`): no cluster may take one."""
    return tuple(n for b in _BACKENDS.values() for n in b.pseudo_clusters)


def of(row: JobRow) -> RunBackend:
    """The backend a job runs on: the one its row names (older rows: the one that claims it)."""
    if row.backend:
        return get(row.backend)
    return next(b for b in _BACKENDS.values() if b.claims(row))


def job_row(state: State, job: str) -> JobRow:
    """The job's row; NotFound where the state has none."""
    row = state.job(job)
    if row is None:
        raise NotFound(f"no job {job!r}; `gpuplan jobs CLUSTER` lists them")
    return row


# --- the batch service ------------------------------------------------------------------------


def refresh(state: State, job: str, conn: Any = None) -> JobRow:
    """The job's row, with what is new read from where it runs (an ended job as it is)."""
    from gpuplan.operating.runner import JOB_STATES_OVER

    row = job_row(state, job)
    if row.state in JOB_STATES_OVER:
        return row
    return of(row).refresh(state, job, conn)


def cancel(state: State, job: str) -> int:
    return of(job_row(state, job)).cancel(state, job)



def yen(state: State, row: JobRow, at: Any = None) -> Decimal | None:
    return of(row).yen(state, row, at)


def summary(state: State, job: str) -> RunSummary:
    return of(job_row(state, job)).summary(state, job)


def outputs(state: State, job: str, into: Path, item: str | None = None) -> Fetched:
    return of(job_row(state, job)).outputs(state, job, into, item)
