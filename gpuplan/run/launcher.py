"""`gpuplan launch BATCH.yaml`: from nothing to a finished batch on whatever the pick is.

The pick is a saved plan (estimate's recommendation for the batch, or `--plan` one the user
saved): what was planned is what is built, through the same order `gpuplan provision --plan`
makes. By the kind of its offer:

- a cloud VM or owned hosts: provision (or claim) the fleet, bootstrap it (the plan's playbooks;
  `docker-gpu` where the batch names an image), run the batch's `setup` on every node, then the
  batch on the cluster's Ray engine (the Ray run backend), the yen cap enforced on the cluster
  (its driver stops the batch at `stop_at`); once it has ended, fetch the outputs and tear the
  fleet down (unless --keep);
- a 高火力 DOK task plan: every item as a DOK task from the batch's image (the DOK run backend).

The CLI parses, asks and renders; this module carries out, reporting through `progress`, and
returns typed values. A launch's settings ride on its job row (options["launch"]) so that
`gpuplan launch --resume JOB` and a launch killed half way pick up where it stopped.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from gpuplan.batchfile import outputs_dir
from gpuplan.errors import AuthMissing, UsageError
from gpuplan.planning import fmt

if TYPE_CHECKING:
    from gpuplan.batchfile import Batch
    from gpuplan.fleet.provision import Order
    from gpuplan.planning.types import Offer
    from gpuplan.run.caps import Cap
    from gpuplan.store.state import JobRow, State

Progress = Callable[[str], None]
SETUP_TIMEOUT_S = 3600


@dataclass(frozen=True)
class Pick:
    """What the launch builds: the saved plan's offer, how many, and how it runs."""

    plan_path: Path
    offer: Offer
    count: int
    setup: str  # scratch | image
    market: str  # on-demand | spot
    yen: Decimal  # the plan's own estimate
    wall_s: Decimal
    backend: str  # the run backend's name: "ray" (a cluster) or "dok" (高火力 DOK tasks)
    yen_upper: Decimal | None = None  # the top of the plan's cost range, on `yen`'s basis (None: it shows none)

    @property
    def target(self) -> str:
        return f"{self.offer.provider}:{self.offer.name}"


# Other names `infra:` takes for a provider's offers: `owned` is the baremetal provider (your own
# hosts); `dok`, `vrt` and `koukaryoku` are Sakura's 高火力 offers, `phy` its rented servers.
INFRA_ALIASES = {"owned": "baremetal", "dok": "sakura", "vrt": "sakura", "koukaryoku": "sakura", "phy": "sakura-phy"}


def infra_providers(infra: Sequence[str]) -> tuple[str, ...]:
    """A batch's `infra:` as catalog provider names (INFRA_ALIASES)."""
    return tuple(dict.fromkeys(INFRA_ALIASES.get(x.lower(), x.lower()) for x in infra))


def infra_names() -> list[tuple[str, tuple[str, ...]]]:
    """What `infra:` and `--infra` take, from the registries: each provider of the entry points
    gpuplan.providers with its other names (INFRA_ALIASES), then each run backend of
    gpuplan.run_backends that plans offers of its own (a Slurm cluster's partitions), by name."""
    from gpuplan.fleet import provider as providers
    from gpuplan.run import backends

    names = providers.available()
    out = [(p, tuple(a for a, to in INFRA_ALIASES.items() if to == p)) for p in names]
    own = [b for b in backends.registered() if b not in names and b not in INFRA_ALIASES and b != backends.CLUSTERS]
    return out + [(b, ()) for b in own]


def workload_for(batch: Batch, items: Sequence[str]):
    """The workload to plan: the batch's (a built-in name or a file; colorize-hd by default) with
    one job per item, each the size of the workload's first job, named by the item."""
    from dataclasses import replace

    from gpuplan.planning import workloads
    from gpuplan.planning.plan_types import Job

    if not batch.workload:
        raise UsageError("the batch names no workload to plan: give `workload: NAME` (one of"
                         f" {', '.join(workloads.builtin_names())}) or a workload file, or --plan a saved plan")
    work = workloads.load(batch.workload)
    if batch.profile is not None:
        work = workloads.apply_profile(work, batch.profile)
    if work.streams is not None or work.parallel != "none":
        raise UsageError(f"workload {work.name} is {'real-time streams' if work.streams else 'one data-parallel job'}:"
                         " launch runs a batch of items, one job per item")
    units = work.jobs[0].units
    return replace(batch.planned(work), jobs=tuple(Job(Path(item).name or item, units) for item in items))


def pick_of(plan_path: Path, region: str | None = None, tax: str | None = None) -> Pick:
    """The saved plan as a Pick, its offer resolved as `provision --plan` resolves it; its yen on
    the `tax` basis (the batch's: market/tax.py) where given, else on the plan's own."""
    from gpuplan.fleet import provision
    from gpuplan.market import tax as taxes
    from gpuplan.planning import saved_plan
    from gpuplan.run import backends

    saved = saved_plan.load(plan_path)
    provider, size, plan_region, count, setup = saved.target()
    offer = provision.resolve_offer(f"{provider}:{size}", region or plan_region)
    pred = saved.prediction()
    yen = Decimal(str(pred.get("plan_yen") or pred.get("yen") or 0))
    upper = saved.upper_yen()
    if tax is not None:
        yen = taxes.moved(yen, saved.listed_tax(), saved.tax, tax)
        upper = taxes.moved(upper, saved.listed_tax(), saved.tax, tax) if upper is not None else None
    return Pick(plan_path, offer, count, setup, saved.market, yen,
                Decimal(str(pred.get("plan_wall_s") or pred.get("wall_s") or 0)), backends.for_offer(offer).name,
                upper)


def budget_spend(pick: Pick, batch: Batch) -> tuple[Decimal, str]:
    """What a launch may spend, as its project's budget counts it (consumption tax included): its
    max_yen, or where it has none the plan's upper yen (the top of its cost range, else its
    estimate); and those yen in words."""
    from gpuplan.market import tax as taxes

    if batch.max_yen is not None:
        return taxes.on_basis(batch.max_yen, batch.tax, taxes.DEFAULT), "launch's max_yen"
    upper = max(pick.yen, pick.yen_upper or pick.yen)
    return taxes.on_basis(upper, batch.tax, taxes.DEFAULT), "launch's planned upper yen"


def batch_cap(pick: Pick, batch: Batch) -> Cap | None:
    """The batch's max_yen as a Cap: on its tax basis, and in the yen the provider bills and the
    ledger counts (the offer's price as listed: max_yen / 1.1 where the batch counts a tax the
    price leaves out), holding the cluster's whole ledger from claim to teardown."""
    from gpuplan.run import caps

    if batch.max_yen is None:
        return None
    return caps.Cap.on(batch.max_yen, batch.tax, pick.offer.listed_tax or pick.offer.tax, scope=caps.CLUSTER)


def refuse_over_cap(pick: Pick, max_yen: Decimal | None) -> None:
    """A plan whose own estimate passes the cap is refused before anything is bought."""
    if max_yen is not None and pick.yen > max_yen:
        raise UsageError(f"the pick, {pick.count}x {pick.target}, is estimated at {fmt.yen(pick.yen)}, over max_yen"
                         f" {fmt.yen(max_yen)}: raise max_yen, or plan with --objective cost or another infra")


def default_playbooks(pick: Pick, batch: Batch) -> list[str]:
    """Cloud machines get the GPU stack (driver, CUDA, cuDNN, NCCL); owned hosts are the user's
    own and keep theirs (name `playbooks:` to run some); an image adds Docker and the NVIDIA
    container toolkit."""
    from gpuplan.hosts.playbook import DEFAULT_PLAYBOOKS

    if batch.playbooks is not None:
        books = list(batch.playbooks)
    else:
        books = [] if pick.offer.kind == "owned" else list(DEFAULT_PLAYBOOKS)
    if batch.image and "docker-gpu" not in books:
        books.append("docker-gpu")
    return books


def check_playbooks(pick: Pick, batch: Batch) -> None:
    """Every playbook the launch would run exists and reads (a name unknown, a file broken): bad
    input, said by --dry-run too, before anything is claimed or provisioned."""
    from gpuplan.hosts import playbook
    from gpuplan.run import backends

    if backends.get(pick.backend).has_cluster:
        for name in default_playbooks(pick, batch):
            playbook.load(name)


def cluster_name(batch: Batch) -> str:
    """The batch's cluster: its `name`, else the batch file's name, else one from its items file."""
    import re

    if batch.name:
        return batch.name
    stem = (batch.source or batch.items or Path("batch")).stem
    name = re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"batch-{name}".strip("-")
    return name[:40]


def batch_identity(batch: Batch) -> str:
    """What makes a batch this batch across launches: its batch file (else its items file), resolved."""
    return str((batch.source or batch.items or Path("batch")).resolve())


def name_choices(batch: Batch) -> list[str]:
    """The names a launch of `batch` may take, in order: the one it names (`name:` or --name)
    alone; else its file's name, then that name with a digest of the file's path (unique to
    the batch file: two folders' batch.yaml never meet on one name)."""
    import hashlib

    base = cluster_name(batch)
    if batch.name:
        return [base]
    digest = hashlib.sha256(batch_identity(batch).encode()).hexdigest()[:6]
    return [base, f"{base[:25].rstrip('-')}-{digest}"]


def _owner_path(name: str) -> Path:
    from gpuplan import paths

    return paths.state_dir() / "launches" / f"{name}.owner"


def _made_for_another(state: State, name: str, me: str) -> str | None:
    """The other batch file cluster `name` was made for, where it is still up (None: free for `me`)."""
    row = state.cluster(name)
    if row is None or row.status == "gone":
        return None
    try:
        owner = _owner_path(name).read_text().strip()
    except OSError:  # made by `provision`, or by a launch before launches recorded their batch
        return "a cluster not made by a launch" if not any(j.options.get("launch") for j in state.jobs(name)) else None
    return owner if owner != me else None


def peek_name(state: State | None, batch: Batch) -> str:
    """The name a launch would take now, written nowhere (for --dry-run and the question)."""
    choices = name_choices(batch)
    if state is None:
        return choices[0]
    me = batch_identity(batch)
    return next((n for n in choices if _made_for_another(state, n, me) is None), choices[-1])


def claim_name(state: State, batch: Batch, stack) -> str:
    """The cluster name this launch takes, held until it ends: a launch never joins a cluster
    made for another batch file, nor one another launch is working on. Each name's lock
    (`launch-NAME`) is held for the whole launch (`stack`, an ExitStack; the kernel frees it
    with the process, kill -9 included); the batch file the name's cluster is made for is
    recorded (record_owner) once the launch makes it. A name `name:` gives that is taken is refused in one line."""
    from contextlib import ExitStack

    from gpuplan.errors import Busy
    from gpuplan.fleet import locks

    me = batch_identity(batch)
    why = ""
    for name in name_choices(batch):
        lock = ExitStack()
        try:
            lock.enter_context(locks.hold(f"launch-{name}", f"the launch of cluster {name}", wait_s=0))
        except Busy:
            why = f"another launch is making cluster {name} ({locks.holder(f'launch-{name}')})"
            continue
        other = _made_for_another(state, name, me)
        if other is not None:
            lock.close()  # not ours: its own batch may launch on it again meanwhile
            why = f"cluster {name} is up for another batch ({other})"
            continue
        stack.enter_context(lock)
        return name
    raise UsageError(f"{why}: give this batch another name (name: or --name), or wait for that one to end")


def plan_file(batch: Batch) -> Path:
    """Where a launch keeps the plan it acts on: one file per batch file (two folders' batch.yaml
    never write one file)."""
    import hashlib

    from gpuplan import paths

    digest = hashlib.sha256(batch_identity(batch).encode()).hexdigest()[:6]
    return paths.state_dir() / "launches" / f"{cluster_name(batch)}-{digest}.plan.json"


def record_owner(batch: Batch, name: str) -> None:
    """Cluster `name` is made for this batch file (claim_name reads it back)."""
    owner = _owner_path(name)
    owner.parent.mkdir(parents=True, exist_ok=True)
    owner.write_text(batch_identity(batch) + "\n")


def steps(pick: Pick, batch: Batch, name: str, items: int) -> list[str]:
    """The launch's sequence in words, with its yen: shown before the question and by --dry-run."""
    from gpuplan.run import backends

    outputs = outputs_dir(batch, name)
    out = []
    backend = backends.get(pick.backend)
    if not backend.has_cluster:
        out += backend.task_steps(pick.offer, batch.image, items, outputs)
    else:
        what = "claim" if pick.offer.kind == "owned" else "provision"
        out.append(f"1. {what} {pick.count}x {pick.target} as cluster {name}"
                   + (" (from an image built on one of them)" if pick.setup == "image" and pick.count > 1 else ""))
        books = default_playbooks(pick, batch)
        out.append(f"2. bootstrap: {', '.join(books) if books else 'nothing (owned hosts keep their own setup)'}"
                   + (f"; pull {batch.image} once per node" if batch.image else "")
                   + (f"; then {fmt.plural(len(batch.setup), 'setup command')} on every node" if batch.setup else ""))
        out.append(f"3. run {fmt.plural(items, 'item')} on the cluster's Ray engine"
                   + (f" in container {batch.image}" if batch.image else "") + " (the batch outlives this terminal)")
        out.append(f"4. fetch the outputs into {outputs}; tear the cluster down")
    out.append(f"plan: {fmt.yen(pick.yen)}, wall {fmt.duration(pick.wall_s)}"
               + (f"; stopped before it passes max_yen {fmt.yen(batch.max_yen)}" if batch.max_yen is not None else ""))
    return out


def preflight(state: State, pick: Pick, batch: Batch, name: str, can_answer: bool = True) -> Order | None:
    """What can be checked before anything is bought, checked before the question: the pick's
    backend (DOK: its API key and image) and, for a fleet not up yet, the provider's SDK and
    credentials, then its features and quota, as `provision` checks them; everything that fails
    before the quota, with a question no one can answer (`can_answer` False), at once
    (preflight.Problems). Returns that fleet's checked order (None: no fleet to make, or one that
    is up already: `provision` checks it is the pick's), which `start` carries out."""
    from gpuplan.fleet import lifecycle, provision
    from gpuplan.fleet import preflight as checks
    from gpuplan.run import backends

    backend = backends.get(pick.backend)
    row = state.cluster(name)
    fleet = backend.has_cluster and (row is None or row.status == "gone")
    problems = checks.provider_problems(pick.offer.provider) if fleet else []
    try:
        backend.preflight(batch.image)
        backends.check(backend, submission(pick, batch, name, ()), BATCH_WORDS)  # what it cannot honour, said now
    except UsageError as exc:
        problems.append(checks.Problem(checks.Kind.CREDENTIALS if isinstance(exc, AuthMissing) else checks.Kind.INPUT,
                                       str(exc)))
    if not can_answer:
        problems.append(checks.no_terminal("launch"))
    if problems:
        raise checks.Problems("launch", problems)
    if not fleet:
        return None
    order = provision.order(None, None, plan=pick.plan_path, name=name, spot=pick.market == "spot")
    prov = lifecycle.get_provider(order.request.provider)
    ttl_s = backstop_ttl_s(pick, batch) if provider_stops_itself(prov) else None
    if ttl_s is not None:  # the cap's backstop, set at provision as `provision --ttl` sets one
        from dataclasses import replace

        order = replace(order, request=replace(order.request, ttl_s=ttl_s,
                                               more=tuple(replace(m, ttl_s=ttl_s) for m in order.request.more)))
    checked, _ = provision.check(state, prov, order, None)
    return checked


def provider_stops_itself(prov) -> bool:
    """Does the provider stop machines at a TTL of its own (a cloud), where owned hosts get a timer (release_at)?"""
    from gpuplan.fleet.provider import Feature

    return Feature.TTL not in prov.unsupported


def start(state: State, pick: Pick, batch: Batch, name: str, order: Order | None, todo: Sequence[tuple[int, str]],
          outputs: Path, progress: Progress, keep: bool = False) -> str:
    """Build what the pick needs and submit the batch to its backend; returns the job id. The
    submission is checked against what the backend supports before anything is bought. A backend
    with clusters gets its cluster provisioned (or claimed) and bootstrapped first; one that stops
    a batch at a moment (CAP) gets the cap's, and the cap's backstop (owned hosts release
    themselves then; cloud VMs got a TTL at provision); on one that cannot, each item's time
    limit is at most what the cap buys (RunBackend.time_limit_within: DOK bills a task for the
    seconds it runs). Whatever fails once the cluster is bought (bootstrap, setup, the cap, the
    submit) tears it down again (kept with `keep`, saying what bills) before the error is raised."""
    from dataclasses import replace

    from gpuplan.run import backends

    backend = backends.get(pick.backend)
    cap = batch_cap(pick, batch)
    sub = submission(pick, batch, name, todo)
    backends.check(backend, sub, BATCH_WORDS)  # before anything is bought (preflight checked it before the question)
    if not backend.has_cluster:
        sub = replace(sub, options=launch_options(batch, pick, None, outputs, cap))
        return backends.submit(state, backend, sub, progress, BATCH_WORDS)
    take(state, pick, name, order)  # refusals first: nothing is bought or torn down by them
    record_owner(batch, name)
    held: list[Cap | None] = [cap]

    def capped() -> None:  # once the machines bill, before they are set up: the cap's moment, and its backstop
        if cap is None or backends.CAP not in backend.supports:
            return
        held[0] = moment = cap.at(_stop_at(state, name, cap))
        if moment.stop_at is not None:
            progress(f"max_yen {fmt.yen(batch.max_yen)}: the batch stops at {moment.stop_at:%H:%M:%S} UTC if it is still"
                     " running")
            backstop(state, name, moment.stop_at + timedelta(seconds=moment.allowance_s), progress)

    try:
        provision(state, pick, batch, name, order, progress, capped)
        sub = replace(sub, cap=held[0], options=launch_options(batch, pick, name, outputs, held[0]))
        return backends.submit(state, backend, sub, progress, BATCH_WORDS)
    except Exception as exc:
        wind_down(state, name, None, outputs, keep, progress)
        from gpuplan.run.ray.containers import ContainerError

        if isinstance(exc, ContainerError):  # docker or the image failed on a node: nothing ran; say what is left
            row = state.cluster(name)
            left = ("the cluster {name} was torn down" if row is None or row.status == "gone"
                    else left_billing(state, name))
            raise ContainerError(f"{exc.nodes}; nothing ran, and {left.format(name=name)}", exc.nodes) from None
        raise


def submission(pick: Pick, batch: Batch, name: str, todo: Sequence[tuple[int, str]]):
    """The batch as a backends.Submission to the pick's backend (the cap's moment not set yet: it
    is known once the fleet is up). On a backend that cannot stop a batch at a moment, each
    item's time limit is at most what the cap buys (RunBackend.time_limit_within)."""
    from gpuplan import batchfile
    from gpuplan.run import backends

    backend = backends.get(pick.backend)
    cap = batch_cap(pick, batch)
    timeout_s = batch.timeout_s
    if cap is not None and backends.CAP not in backend.supports:
        timeout_s = backend.time_limit_within(pick.offer, cap.billed, batch.timeout_s)
    return backends.Submission(
        target=backend.target_of(pick.offer, name), items=tuple(todo), command=batch.command, image=batch.image,
        registry=batch.registry if batch.image else None,
        env=batchfile.item_env(batch),  # secret_env's values read from this environment now, carried as env's are
        per_gpu=batch.per_gpu, retries=batch.retries,
        timeout_s=timeout_s, workdir=batch.workdir, checkpoint_every_s=batch.checkpoint_s or 0,
        recover=batch.recover, outputs_env=True)


# how a batch file names each option a backend may refuse (backends.OPTIONS)
BATCH_WORDS = {"recover": "recover:", "workdir": "workdir:", "torchrun": "torchrun", "per_gpu": "per_gpu:",
               "retries": "retries:", "checkpoints": "checkpoint:", "cap": "max_yen:", "image": "image:",
               "registry_login": "registry:", "registry_id": "registry:", "quote": "a price quote"}


# --- a cluster (Ray backend) -----------------------------------------------------------------


def take(state: State, pick: Pick, name: str, order: Order | None) -> None:
    """Before anything is bought: the cluster `name` is this launch's to make, or one of the
    pick's kind that is ready and runs no batch (a launch of this batch file cut off after
    provisioning, or kept with --keep); anything else is refused in one line, untouched."""
    from gpuplan.run import items as run_items

    row = state.cluster(name)
    if row is None or row.status == "gone":  # torn down: its name is free again
        if order is None:  # the name was free when preflight looked: none was checked
            raise UsageError(f"cluster {name} went while the launch was asked about; launch again")
        return
    if (row.provider, row.size) != (pick.offer.provider, pick.offer.name) or row.status != "ready":
        raise UsageError(f"cluster {name} exists already ({row.count}x {row.provider}:{row.size}, {row.status}): give"
                         " the batch another name (name: or --name), or `gpuplan teardown " + name + "` first")
    busy = [j.id for j in state.jobs(name) if j.state not in run_items.JOB_STATES_OVER]
    if busy:  # two batches on one cluster would share its GPU slots, and one's teardown would end the other
        raise UsageError(f"cluster {name} is running job {busy[0]}: wait for it (`gpuplan launch --resume {busy[0]}`),"
                         " or give this batch another name (name: or --name)")


def provision(state: State, pick: Pick, batch: Batch, name: str, order: Order | None, progress: Progress,
              bought: Callable[[], None] = lambda: None) -> None:
    """The pick's fleet as cluster `name` from `order` (preflight's, checked), bootstrapped; a
    cluster of that name that is ready and of the pick's kind is used as it is (take() checked it
    first: a launch cut off after provisioning picks up there). `bought` is called once the
    machines are there, before anything is set up on them."""
    from gpuplan.fleet import lifecycle, provision
    from gpuplan.hosts.playbook import bootstrap_cluster

    row = state.cluster(name)
    if row is not None and row.status != "gone":
        progress(f"cluster {name} is up already: using it")
        bought()
    else:
        if order is None:
            raise UsageError(f"cluster {name} went while the launch was asked about; launch again")
        prov = lifecycle.get_provider(order.request.provider)
        books = default_playbooks(pick, batch)
        provision.provision(state, prov, order, playbooks=books or None, bootstrap=False, progress=progress)
        bought()
        if books:
            progress(f"bootstrapping {name}: {', '.join(books)}")
            bootstrap_cluster(state, name, books, dict(batch.params), progress=progress)
    if batch.setup:
        run_setup(state, name, batch.setup, progress)


def run_setup(state: State, cluster: str, commands: Sequence[str], progress: Progress) -> None:
    """The batch's `setup` commands on every node at once, in order; the first that fails on a
    node stops the launch with that node's last lines."""
    from gpuplan.errors import RemoteError
    from gpuplan.hosts import remote

    hosts = remote.cluster_hosts(state, cluster)
    script = "set -e\n" + "\n".join(commands)
    progress(f"setup on {fmt.plural(len(hosts), 'node')}: {fmt.plural(len(commands), 'command')}")
    results = remote.run_many(hosts, lambda h: remote.run(h, "bash -c " + shlex.quote(script), timeout=SETUP_TIMEOUT_S))
    for h, r in zip(hosts, results):
        if isinstance(r, BaseException):
            raise RemoteError(f"setup on {h.name}: {r}")
        if not r.ok:
            raise RemoteError(f"setup on {h.name} failed (exit {r.exit_code}): {r.why()}; fix `setup:` and launch again")

def _stop_at(state: State, cluster: str, cap: Cap) -> datetime | None:
    """The launch's cap as a moment (Cap.stop_moment over the cluster's whole ledger, fetch and
    teardown kept); Capped where the ledger is over it already. None: a fleet that bills nothing."""
    from gpuplan.store.state import now

    start = now()
    moment = cap.stop_moment(state, cluster, now=start)
    if moment is not None and moment < start:
        from gpuplan.run.items import Capped

        raise Capped(f"cluster {cluster} has already spent {fmt.yen(cap.said(state.ledger_seconds_and_yen(cluster)[1]))}"
                     f" of max_yen {fmt.yen(cap.yen)} (with {cap.allowance_s} s kept for fetch and teardown):"
                     " nothing was run")
    return moment



def backstop(state: State, cluster: str, at: datetime, progress: Progress) -> None:
    """The cap holds for the bill with no client alive: owned hosts are armed to release
    themselves at `at`, the moment the ledger reaches the cap (their provider's release_at), and
    the moment is recorded for lifecycle.settle_released; cloud VMs got their backstop at
    provision (a TTL from the cap: backstop_ttl_s)."""
    from gpuplan.fleet import lifecycle

    row = state.cluster(cluster)
    if row is None:
        return
    prov = lifecycle.get_provider(row.provider)
    arm = getattr(prov, "release_at", None)
    if arm is None:
        return
    hosts = arm(lifecycle.cluster_tags(row), at)
    state.record_release_at(cluster, at)
    progress(f"max_yen backstop: {fmt.plural(len(hosts), 'host')} stop the batch and release themselves at"
             f" {at:%H:%M:%S} UTC, with or without this terminal")


BACKSTOP_MAX_S = 90 * 86400  # no cloud takes a TTL of any length (GCP: at most 120 days)


def backstop_ttl_s(pick: Pick, batch: Batch) -> int | None:
    """Cloud VMs' backstop for the cap: the seconds the pick's machines, billed by the one rule
    at the price the ledger counts, take to reach max_yen, as a TTL the cloud enforces itself
    (`provision --ttl`'s mechanism: AWS shuts down and terminates, GCP deletes, Azure
    deallocates, Sakura stops). None: no cap, or one that outlasts BACKSTOP_MAX_S."""
    from gpuplan.market import billing

    cap = batch_cap(pick, batch)
    if cap is None:
        return None
    terms = billing.terms_for(pick.offer)
    seconds = billing.seconds_within(lambda s: billing.charge(s, terms) * pick.count, cap.billed, BACKSTOP_MAX_S)
    return None if seconds >= BACKSTOP_MAX_S else max(60, seconds)


def launch_options(batch: Batch, pick: Pick, name: str | None, outputs: Path, cap: Cap | None = None) -> dict:
    """What a launch's job row keeps for --resume: the cluster made for it (None: none), its outputs, its cap,
    and the names (never the values) of its secret_env (a `run --resume` reads them again)."""
    return {"plan": str(pick.plan_path), **({"cap": cap.options()} if cap is not None else {}),
            **({"secret_env": sorted(batch.secret_env)} if batch.secret_env else {}), "launch": {
        "cluster": name, "backend": pick.backend, "outputs": str(outputs.resolve()),
        "max_yen": str(batch.max_yen) if batch.max_yen is not None else None, "image": batch.image,
        "recover": batch.recover, "on_demand_fallback": batch.on_demand_fallback, "tax": batch.tax}}


# --- after the batch ------------------------------------------------------------------------------


def cap_watch(state: State, job: str, cap: Cap | Decimal) -> Callable[[JobRow], None]:
    """For the follower: after each look, a batch whose spending (backends.spent, in ledger yen) has
    reached the cap's ledger yen is cancelled and marked capped. A cluster's driver stops the
    batch at its stop_at on its own; this also holds where the backend has no driver (DOK). A
    bare Decimal is a cap as listed."""
    from gpuplan.run import backends, caps
    from gpuplan.run import items as run_items

    held = cap if isinstance(cap, caps.Cap) else caps.Cap.on(cap)

    def look(row: JobRow) -> None:
        if row.state in run_items.JOB_STATES_OVER:
            return
        if held.reached(backends.spent(state, row, held)):
            backends.cancel(state, job)
            state.set_job_state(job, "capped")

    return look


def teardown(state: State, job: str, progress: Progress) -> int | None:
    """Tear down the cluster the job ran on (None where its backend has none); the resources deleted."""
    from gpuplan.fleet import lifecycle
    from gpuplan.run import backends

    row = backends.job_row(state, job)
    cluster = state.cluster(row.cluster)
    if not backends.of(row).has_cluster or cluster is None:
        return None
    report = lifecycle.teardown(state, lifecycle.get_provider(cluster.provider), cluster.name, progress=progress)
    return len(report.deleted)


def wind_down(state: State, cluster: str, job: str | None, outputs: Path | None, keep: bool, progress: Progress) -> None:
    """After a failure once the cluster was bought (bootstrap, setup, the submit, following the
    batch, the fetch): the batch stopped, what its items wrote fetched into `outputs` as far as
    it can be, then the cluster torn down (`keep`: left up, saying what it bills). Each step says
    how it went through `progress` and never raises: the failure that led here is what the
    caller raises next."""
    from gpuplan.run import backends
    from gpuplan.run import items as run_items

    if job is not None:
        try:
            if backends.refresh(state, job).state not in run_items.JOB_STATES_OVER:
                backends.cancel(state, job)
                progress(f"job {job} stopped")
        except Exception as exc:  # noqa: BLE001 - the teardown below stops it too
            progress(f"job {job} could not be stopped on its own ({_why(exc)}); the teardown stops it")
        if outputs is not None:
            try:
                got = backends.outputs(state, job, outputs)
                progress(f"outputs: {fmt.plural(got.files, 'file')} of {fmt.plural(got.items, 'item')} in {outputs}"
                         + (f"; left on the nodes (not plain files): {', '.join(got.skipped)}" if got.skipped else ""))
            except Exception as exc:  # noqa: BLE001 - said, and the cluster still goes
                progress(f"outputs not fetched: {_why(exc)}")
    row = state.cluster(cluster)
    if row is None or row.status == "gone":
        return
    if keep:
        progress(left_billing(state, cluster, " (--keep)"))
        return
    from gpuplan.fleet import lifecycle

    try:
        report = lifecycle.teardown(state, lifecycle.get_provider(row.provider), cluster, progress=progress)
        progress(f"cluster {cluster} torn down ({fmt.plural(len(report.deleted), 'resource')} deleted)")
    except Exception as exc:  # noqa: BLE001 - what is left is said with what it bills
        progress(f"cluster {cluster} could not be torn down: {_why(exc)}; {left_billing(state, cluster)}")


def left_billing(state: State, cluster: str, why: str = "") -> str:
    """What a cluster left up goes on billing, in one line, with when it stops itself (a launch's
    max_yen backstop) and the command that stops it sooner."""
    from gpuplan.store.state import parse_time

    row = state.cluster(cluster)
    if row is None:
        return f"`gpuplan teardown {cluster}` when done"
    price = row.price_jpy_per_hour
    bills = (f"{row.count}x {row.provider}:{row.size} bill about {fmt.yen(price * row.count)}/h" if price
             else f"{row.count}x {row.provider}:{row.size} stay claimed")
    from gpuplan.fleet.lifecycle import ttl_does_at

    at = parse_time(row.spec.get("releases_itself_at")) or row.ttl_expires_at
    # what the cloud does then, in its terms: AWS terminates, GCE deletes, Azure deallocates, Sakura stops
    stops = f" ({ttl_does_at(row.provider)} at {at:%H:%M:%S} UTC, the max_yen or TTL moment)" if at else ""
    return f"cluster {cluster} left up{why}: {bills}{stops} until `gpuplan teardown {cluster}`"


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def check_outputs(folder: Path) -> None:
    """The outputs folder can be made and written here: checked before anything is bought (an
    uncreatable one used to fail the fetch after the whole batch, with the cluster left up).
    Leaves nothing behind: what it makes to try, it removes."""
    import tempfile

    missing, at = [], folder.absolute()
    while not at.exists() and not at.is_symlink() and at != at.parent:
        missing.append(at)
        at = at.parent
    made: list[Path] = []
    try:
        for d in reversed(missing):
            d.mkdir()
            made.append(d)
        with tempfile.TemporaryDirectory(dir=folder, prefix=".gpuplan-check-"):
            pass
    except OSError as exc:
        raise UsageError(f"outputs folder {folder} cannot be made or written ({exc.strerror or exc}): name another"
                         " (outputs: or --outputs)") from None
    finally:
        for d in reversed(made):
            d.rmdir()


def raise_outcome(state: State, job: str, cap: Cap | None) -> None:
    """Exit non-zero where the batch did not finish: capped (6) or items failed (5). A capped
    batch says what the ledger counts for it (backends.spent: a launch's cluster from claim to
    teardown), on the cap's own tax basis."""
    from gpuplan.run import backends, caps
    from gpuplan.run import items as run_items
    from gpuplan.run.ray import runner

    row = backends.job_row(state, job)
    counts = state.job_counts(job)
    if row.state == "capped":
        cap = cap or caps.of_job(row) or caps.Cap.on(Decimal(0))
        if cap.scope == caps.CLUSTER:  # cost-report's figure for the cluster, on the cap's basis
            from gpuplan.store import costs

            said: Decimal | None = costs.cluster_yen(state.ledger_rows(), row.cluster, cap.tax)
            what = "the batch's cluster, claim to teardown"
        else:
            spent = backends.spent(state, row, cap)
            said, what = (cap.said(spent) if spent is not None else None), "the batch"
        raise run_items.Capped(f"job {job} stopped at max_yen {fmt.yen(cap.yen)}:"
                            f" {fmt.yen(said)} spent on {what},"
                            f" {counts.get('ok', 0)} of {fmt.plural(row.total, 'item')} done; the rest did not run")
    failed = sum(counts.get(k, 0) for k in ("failed", "bad input", "timed out", "cancelled", "queued", "running"))
    if failed:
        outputs = (row.options.get("launch") or {}).get("outputs")
        kept = Path(outputs) / runner.FAILED_LOGS if outputs else None  # fetched before the teardown
        logs = f"`gpuplan logs {row.cluster} {job} ITEM`"
        where = (f"the failed items' logs are in {kept}/ ({logs} while the cluster is up)"
                 if kept is not None and kept.is_dir() and any(kept.iterdir()) else f"logs: {logs}")
        raise run_items.JobsFailed(f"{failed} of {fmt.plural(row.total, 'item')} did not succeed; {where}")
