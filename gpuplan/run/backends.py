"""Run backends: one contract for what runs a batch, as providers are one contract for what
makes machines. A job row names its backend (state column `backend`); every question about a
job (read what is new, cancel it, what it cost, what it did, fetch its outputs) goes through
`of(row)`, so no caller switches on a cluster's name.

- `ray`: a batch on a cluster's Ray engine (cloud VMs and owned hosts): run/ray/.
- `dok`: items as Sakura 高火力 DOK tasks: run/dok/.
- `slurm`: items as one Slurm job array on a cluster of slurm.yaml: run/slurm/.

Backends are plugins: each is registered under the entry-point group `gpuplan.run_backends`
(pyproject.toml), the built-in ones as a third party's would be: each one's adapter is
run/<name>/backend.py beside its code, so a new backend is one folder and one entry point. This
module names none of them; the two whose batch is a service's tasks share run/task_batches.py.
Each declares the options it `supports` (OPTIONS); `submit` here refuses a Submission that asks
for another in one line (Unsupported, exit 2) before anything is sent, and lets the backend
`validate` the rest.

The module-level functions (submit, refresh, cancel, yen, summary, outputs) are the batch
service the CLI and the launcher call; `registered()`, `get(name)` and `of(row)` the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gpuplan.errors import UsageError
from gpuplan.run.items import job_row  # noqa: F401 (the batch service's: backends.job_row)

if TYPE_CHECKING:
    from gpuplan.run.caps import Cap
    from gpuplan.run.items import RunSummary
    from gpuplan.store.state import JobRow, State


# What a Submission may ask of a backend beyond items and a command (RunBackend.supports): a
# backend refuses a submission that asks for one it does not declare, in one line, before
# anything is bought or sent (check).
RECOVER = "recover"  # nodes that join while the batch runs get items (replacements of lost ones)
WORKDIR = "workdir"  # a local folder copied to every node, the items run in it
TORCHRUN = "torchrun"  # one data-parallel job over every node's GPUs
PER_GPU = "per_gpu"  # more than one item on a GPU at once
RETRIES = "retries"  # a failed item tried again
CHECKPOINTS = "checkpoints"  # $GPUPLAN_CHECKPOINT_DIR kept and handed to an item run again
CAP = "cap"  # the batch stopped where it runs at its yen cap's moment (no client needed)
IMAGE = "image"  # each item in a container
REGISTRY_LOGIN = "registry_login"  # a private image's login, fed to the nodes
REGISTRY_ID = "registry_id"  # a private image's credentials registered with the service itself (DOK)
QUOTE = "quote"  # shows what it can cost and asks before it sends (Submission.confirm)
OPTIONS = (RECOVER, WORKDIR, TORCHRUN, PER_GPU, RETRIES, CHECKPOINTS, CAP, IMAGE, REGISTRY_LOGIN, REGISTRY_ID, QUOTE)


@dataclass(frozen=True)
class Torchrun:
    python: str = "python3"
    master_port: int = 29500


@dataclass(frozen=True)
class Submission:
    """A batch to submit, on any backend. `target`: where it goes (the cluster's name; on DOK, the
    task plan); `items` (index in the items file, item) in run order; `registry`: a private
    image's login (containers.login_of reads it; on DOK, `dok_registry` names credentials kept
    there, or `registry_id`); `cap`: the yen cap (caps.Cap), its `stop_at` the moment a backend
    that can stops the batch itself; `options`: recorded with the job; `node_workdir`: a folder
    already on the nodes (a resumed job's) to run in; `torchrun`: one data-parallel job instead of
    items; `confirm`: shown what the batch can cost before it is sent (raises to stop);
    `outputs_env`: $GPUPLAN_OUTPUT_DIR set to where the backend keeps an item's outputs."""

    target: str
    items: tuple[tuple[int, str], ...]
    command: tuple[str, ...]
    image: str = ""
    registry: Any = None
    registry_id: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    per_gpu: int = 1
    retries: int = 0
    timeout_s: int = 24 * 3600
    workdir: Path | None = None
    cap: Cap | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    resumes: str | None = None
    checkpoint_every_s: int = 0  # clusters: each item's $GPUPLAN_CHECKPOINT_DIR kept on the head this often
    recover: bool = False  # clusters: nodes that join while the batch runs (replacements of lost ones) get items
    node_workdir: str = ""
    torchrun: Torchrun | None = None
    confirm: Callable[[Any], None] | None = None
    outputs_env: bool = False

    @property
    def stop_at(self) -> datetime | None:
        return self.cap.stop_at if self.cap is not None else None

    def asks(self) -> tuple[str, ...]:
        """The options (OPTIONS) this submission asks its backend for."""
        wants = {RECOVER: self.recover, WORKDIR: self.workdir is not None or bool(self.node_workdir),
                 TORCHRUN: self.torchrun is not None, PER_GPU: self.per_gpu != 1, RETRIES: self.retries > 0,
                 CHECKPOINTS: self.checkpoint_every_s > 0, CAP: self.cap is not None, IMAGE: bool(self.image),
                 REGISTRY_LOGIN: self.registry is not None and not getattr(self.registry, "dok_registry", ""),
                 REGISTRY_ID: bool(self.registry_id or getattr(self.registry, "dok_registry", "")),
                 QUOTE: self.confirm is not None}
        return tuple(o for o in OPTIONS if wants[o])


class Unsupported(UsageError):
    """A submission asks a backend for what it does not do: one line, exit 2, before anything is bought or sent."""


def check(backend: RunBackend, sub: Submission, words: Mapping[str, str] | None = None,
          also: Sequence[str] = ()) -> None:
    """Refuse, in one line, a submission that asks `backend` for options it does not declare;
    `words` names each option as the caller's user wrote it (`--recover`, `recover:`); `also`:
    the caller's own options that the backend cannot take, said in the same line."""
    refused = [o for o in sub.asks() if o not in backend.supports]
    if refused or also:
        named = [(words or {}).get(o, o) for o in refused] + list(also)
        verb = "does" if len(named) == 1 else "do"
        raise Unsupported(f"{backend.refusal}: {', '.join(named)} {verb} not apply{backend.refusal_hint}")
    backend.validate(sub)


@dataclass(frozen=True)
class Fetched:
    items: int  # items whose outputs came back
    files: int
    skipped: tuple[str, ...] = ()  # what was left on the node: links and other entries that are not plain files


class RunBackend(Protocol):
    name: str
    has_cluster: bool  # its batches run on a cluster of machines gpuplan made (torn down after a launch)
    supports: frozenset[str]  # the OPTIONS it honours; a Submission asking for another is refused (check)
    refusal: str  # what a batch is there, said before the options it refuses: "a DOK run is one container task per item"
    refusal_hint: str  # said after them: what to do instead ("" where nothing needs saying)
    unit: str  # what one item becomes there, for counts: "item", "DOK task"

    def resolve(self, target: str, predicted: Mapping[str, Any] | None) -> str:
        """What the user typed where a batch goes (`dok:h100-80gb`), as submit's target (the plan
        `h100-80gb`); bad input in one line."""

    def resumed(self, old: JobRow, sub: Submission) -> Submission:
        """`sub` for the items of `old` that did not succeed: where it went, its own command and
        settings, as its row recorded them (what `sub` sets itself wins)."""

    def offer_of(self, target: str) -> Any:
        """The offer a target this backend names stands for, where it is no catalog row (a Slurm
        partition of slurm.yaml); None: the catalog's."""

    def time_limit_within(self, offer: Any, billed: Decimal, limit_s: int) -> int:
        """The longest one item may run (at most `limit_s`) and cost at most `billed` ledger yen
        on `offer`: how a cap holds on a backend that cannot stop a batch at a moment (CAP)."""

    def submitted(self, state: State, job: str, count: int) -> str:
        """What was submitted and how it runs there, for the line that gives its id:
        "4 items as one Slurm job array"."""

    def notes(self, job: str) -> list[str]:
        """Where else a detached batch's results are found (said after how to follow it)."""

    def after(self, job: str) -> list[str]:
        """What is left to know once a followed batch ended (its artifacts' keeping)."""

    def task_steps(self, offer: Any, image: str, items: int, outputs: Path) -> list[str]:
        """A launch's steps in words on a backend without a cluster (has_cluster False)."""

    def bench_hint(self, offer: Any, job: str, out: str) -> str | None:
        """How to time reference job `job` on one GPU of `offer` (profile file `out`) where gpuplan
        cannot provision that machine for `bench --on`; None where it can."""
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

    def validate(self, sub: Submission) -> None:
        """Bad input in a submission whose options it supports, said in one line before anything
        is read or sent (a --torchrun command torchrun cannot start, a DOK time limit too short)."""

    def dashboard(self, state: State, target: str, port: int, ready: Callable[[int], None],
                  stop: Callable[[], bool]) -> None:
        """Serve the engine's dashboard of `target` on 127.0.0.1:`port` (`ready(port)` once it
        listens) until stop(); a backend without one refuses in one line."""

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


GROUP = "gpuplan.run_backends"  # the entry-point group backends register in, built-in ones as a plugin would
CLUSTERS = "ray"  # the backend of a batch on a cluster gpuplan provisioned or claimed
_loaded: tuple[tuple[str, ...], dict[str, RunBackend]] | None = None


def registered() -> dict[str, RunBackend]:
    """Every run backend registered under GROUP, by name (each class made once; found again
    when sys.path changes, as when a plugin's folder is added)."""
    global _loaded
    import sys
    from importlib.metadata import entry_points

    key = tuple(sys.path)
    if _loaded is None or _loaded[0] != key:
        found: dict[str, RunBackend] = {}
        for ep in entry_points(group=GROUP):
            if ep.name not in found:
                try:
                    backend = ep.load()()
                except (ImportError, AttributeError) as exc:  # an install whose entry points are older than its code
                    raise UsageError(f"run backend entry point {ep.name} = {ep.value} does not load ({exc}); an"
                                     " editable install reads its entry points when it is installed: run"
                                     " `pip install -e .` again") from None
                if backend.name != ep.name:
                    raise UsageError(f"run backend entry point {ep.name!r} loads a backend named {backend.name!r}")
                found[ep.name] = backend
        _loaded = (key, found)
    return _loaded[1]


def _backends() -> dict[str, RunBackend]:
    return registered()


def get(name: str) -> RunBackend:
    try:
        return _backends()[name]
    except KeyError:
        raise UsageError(f"unknown run backend {name!r}: one of {', '.join(_backends())}") from None


def for_target(target: str) -> RunBackend:
    """The backend a `run` target names: `dok:PLAN` names DOK's, `slurm:CLUSTER[/PARTITION]` Slurm's;
    anything else is a cluster's name (Ray)."""
    named = [b for b in _backends().values() if b.pseudo_clusters and b.names(target)]
    return named[0] if named else get(CLUSTERS)


def for_offer(offer: Any) -> RunBackend:
    """The backend a plan on `offer` runs through."""
    return next(b for b in _backends().values() if b.serves(offer))


def pseudo_clusters() -> tuple[str, ...]:
    """Names batches without a cluster are listed under (`gpuplan jobs dok`): no cluster may take one."""
    return tuple(n for b in _backends().values() for n in b.pseudo_clusters)


def of(row: JobRow) -> RunBackend:
    """The backend a job runs on: the one its row names (older rows: the one that claims it)."""
    if row.backend:
        return get(row.backend)
    return next(b for b in _backends().values() if b.claims(row))


# --- the batch service ------------------------------------------------------------------------


def submit(state: State, backend: RunBackend, sub: Submission, progress: Callable[[str], None],
           words: Mapping[str, str] | None = None) -> str:
    """Check the submission against what the backend supports (one line, nothing sent, where it
    asks for more), then submit it; the job id."""
    check(backend, sub, words)
    return backend.submit(state, sub, progress)


def refresh(state: State, job: str, conn: Any = None) -> JobRow:
    """The job's row, with what is new read from where it runs (an ended job as it is)."""
    from gpuplan.run.items import JOB_STATES_OVER

    row = job_row(state, job)
    if row.state in JOB_STATES_OVER:
        return row
    return of(row).refresh(state, job, conn)


def cancel(state: State, job: str) -> int:
    return of(job_row(state, job)).cancel(state, job)


def dashboard(state: State, cluster: str, port: int, ready: Callable[[int], None], stop: Callable[[], bool]) -> None:
    """The dashboard of the engine a cluster's batches run on (`gpuplan dashboard CLUSTER`)."""
    for_target(cluster).dashboard(state, cluster, port, ready, stop)


def spent(state: State, row: JobRow, cap: Cap) -> Decimal | None:
    """What the batch has spent against its cap, in ledger yen: a launch's cluster, its whole
    ledger (claim to teardown); else the batch's own machine time (its backend's yen)."""
    from gpuplan.run import caps

    if cap.scope == caps.CLUSTER and state.cluster(row.cluster) is not None:
        return state.ledger_seconds_and_yen(row.cluster)[1]
    return yen(state, row)


def yen(state: State, row: JobRow, at: Any = None) -> Decimal | None:
    return of(row).yen(state, row, at)


def summary(state: State, job: str) -> RunSummary:
    return of(job_row(state, job)).summary(state, job)


def outputs(state: State, job: str, into: Path, item: str | None = None) -> Fetched:
    return of(job_row(state, job)).outputs(state, job, into, item)
