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

from gpuplan.errors import AuthMissing, UsageError
from gpuplan.planning import fmt

if TYPE_CHECKING:
    from gpuplan.batchfile import Batch
    from gpuplan.operating.launch import Order
    from gpuplan.operating.state import JobRow, State
    from gpuplan.planning.types import Offer

Progress = Callable[[str], None]
TEARDOWN_ALLOWANCE_S = 120  # the cap stops the batch this long before the yen would reach it: fetch and teardown bill too
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

    @property
    def target(self) -> str:
        return f"{self.offer.provider}:{self.offer.name}"


def infra_providers(infra: Sequence[str]) -> tuple[str, ...]:
    """A batch's `infra:` as catalog provider names (`owned` is the baremetal provider; `dok`,
    `vrt` and `phy` are Sakura's offers)."""
    names = {"owned": "baremetal", "dok": "sakura", "vrt": "sakura", "koukaryoku": "sakura", "phy": "sakura-phy"}
    return tuple(dict.fromkeys(names.get(x.lower(), x.lower()) for x in infra))


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
    the `tax` basis (the batch's: planning/tax.py) where given, else on the plan's own."""
    from gpuplan.operating import backends, launch
    from gpuplan.planning import saved_plan
    from gpuplan.planning import tax as taxes

    saved = saved_plan.load(plan_path)
    provider, size, plan_region, count, setup = saved.target()
    offer = launch.resolve_offer(f"{provider}:{size}", region or plan_region)
    pred = saved.prediction()
    yen = Decimal(str(pred.get("plan_yen") or pred.get("yen") or 0))
    if tax is not None:
        yen = taxes.moved(yen, saved.listed_tax(), saved.tax, tax)
    return Pick(plan_path, offer, count, setup, saved.market, yen,
                Decimal(str(pred.get("plan_wall_s") or pred.get("wall_s") or 0)), backends.for_offer(offer).name)


def billed_cap(pick: Pick, batch: Batch) -> Decimal | None:
    """The batch's max_yen (on its tax basis) in the yen the provider bills and the ledger counts
    (the offer's price as listed): max_yen / 1.1 where the batch counts a tax the price leaves out."""
    from gpuplan.planning import tax as taxes

    if batch.max_yen is None:
        return None
    return taxes.moved(batch.max_yen, pick.offer.tax, batch.tax, "as-listed")


def refuse_over_cap(pick: Pick, max_yen: Decimal | None) -> None:
    """A plan whose own estimate passes the cap is refused before anything is bought."""
    if max_yen is not None and pick.yen > max_yen:
        raise UsageError(f"the pick, {pick.count}x {pick.target}, is estimated at {fmt.yen(pick.yen)}, over max_yen"
                         f" {fmt.yen(max_yen)}: raise max_yen, or plan with --objective cost or another infra")


def default_playbooks(pick: Pick, batch: Batch) -> list[str]:
    """Cloud machines get the GPU stack (driver, CUDA, cuDNN, NCCL); owned hosts are the user's
    own and keep theirs (name `playbooks:` to run some); an image adds Docker and the NVIDIA
    container toolkit."""
    from gpuplan.operating.playbook import DEFAULT_PLAYBOOKS

    if batch.playbooks is not None:
        books = list(batch.playbooks)
    else:
        books = [] if pick.offer.kind == "owned" else list(DEFAULT_PLAYBOOKS)
    if batch.image and "docker-gpu" not in books:
        books.append("docker-gpu")
    return books


def cluster_name(batch: Batch) -> str:
    """The batch's cluster: its `name`, else the batch file's name, else one from its items file."""
    import re

    if batch.name:
        return batch.name
    stem = (batch.source or batch.items).stem
    name = re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"batch-{name}".strip("-")
    return name[:40]


def outputs_dir(batch: Batch, name: str) -> Path:
    """Where the outputs come back to: the batch's `outputs`, else outputs/<cluster name>."""
    return batch.outputs or Path("outputs") / name


def steps(pick: Pick, batch: Batch, name: str, items: int) -> list[str]:
    """The launch's sequence in words, with its yen: shown before the question and by --dry-run."""
    from gpuplan.operating import backends

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
    from gpuplan.operating import backends, launch, lifecycle
    from gpuplan.operating import preflight as checks

    backend = backends.get(pick.backend)
    row = state.cluster(name)
    fleet = backend.has_cluster and (row is None or row.status == "gone")
    problems = checks.provider_problems(pick.offer.provider) if fleet else []
    try:
        backend.preflight(batch.image)
    except UsageError as exc:
        problems.append(checks.Problem(checks.Kind.CREDENTIALS if isinstance(exc, AuthMissing) else checks.Kind.INPUT,
                                       str(exc)))
    if not can_answer:
        problems.append(checks.no_terminal("launch"))
    if problems:
        raise checks.Problems("launch", problems)
    if not fleet:
        return None
    order = launch.order(None, None, plan=pick.plan_path, name=name, spot=pick.market == "spot")
    checked, _ = launch.check(state, lifecycle.get_provider(order.request.provider), order, None)
    return checked


def start(state: State, pick: Pick, batch: Batch, name: str, order: Order | None, todo: Sequence[tuple[int, str]],
          outputs: Path, progress: Progress) -> str:
    """Build what the pick needs and submit the batch to its backend; returns the job id. A
    backend with clusters gets its cluster provisioned (or claimed) and bootstrapped first, and
    the cap as the moment its driver stops the batch; on one without, each task's time limit is
    at most what the cap buys (DOK bills a task for the seconds it runs)."""
    from gpuplan.operating import backends, lifecycle
    from gpuplan.operating.containers import ContainerError

    backend = backends.get(pick.backend)
    timeout_s, cap = batch.timeout_s, None
    if backend.has_cluster:
        provision(state, pick, batch, name, order, progress)
        cap = stop_at(state, name, billed_cap(pick, batch))
        if cap is not None:
            progress(f"max_yen {fmt.yen(batch.max_yen)}: the batch stops at {cap:%H:%M:%S} UTC if it is still running")
    elif batch.max_yen is not None:
        timeout_s = task_limit_within(pick, billed_cap(pick, batch) or batch.max_yen, timeout_s)
    sub = backends.Submission(
        target=backend.target_of(pick.offer, name), items=tuple(todo), command=batch.command, image=batch.image,
        registry=batch.registry if batch.image else None, env=batch.env, per_gpu=batch.per_gpu, retries=batch.retries,
        timeout_s=timeout_s, workdir=batch.workdir, stop_at=cap, checkpoint_every_s=batch.checkpoint_s or 0,
        options=launch_options(batch, pick, name if backend.has_cluster else None, outputs))
    try:
        return backend.submit(state, sub, progress)
    except ContainerError as exc:  # docker or the image failed on a node: nothing ran, nothing is kept billing
        made = state.cluster(name) if backend.has_cluster else None
        if made is None:
            raise
        progress(f"tearing down {name}: the batch cannot run there")
        try:
            lifecycle.teardown(state, lifecycle.get_provider(made.provider), name, progress=progress)
        except Exception as down:
            raise ContainerError(f"{exc.nodes}; nothing ran, and tearing down {name} failed ({down}): it may still"
                                 f" bill: run `gpuplan teardown {name}`", exc.nodes) from None
        raise ContainerError(f"{exc.nodes}; nothing ran, and the cluster {name} was torn down", exc.nodes) from None


def task_limit_within(pick: Pick, max_yen: Decimal, limit_s: int) -> int:
    """The longest a task on the pick may run (at most `limit_s`) and still cost at most `max_yen`."""
    from gpuplan.planning import billing
    from gpuplan.providers.sakura_dok import MIN_TIME_LIMIT_S

    terms = billing.terms_for(pick.offer)
    return max(MIN_TIME_LIMIT_S, billing.seconds_within(lambda s: billing.charge(s, terms), max_yen, limit_s))


# --- a cluster (Ray backend) -----------------------------------------------------------------


def provision(state: State, pick: Pick, batch: Batch, name: str, order: Order | None, progress: Progress) -> None:
    """The pick's fleet as cluster `name` from `order` (preflight's, checked), bootstrapped; a
    cluster of that name that is ready and of the pick's kind is used as it is (a launch cut off
    after provisioning picks up there)."""
    from gpuplan.operating import launch, lifecycle
    from gpuplan.operating.playbook import bootstrap_cluster

    row = state.cluster(name)
    if row is not None and row.status == "gone":  # torn down: its name is free again
        row = None
    if row is not None:
        if (row.provider, row.size) != (pick.offer.provider, pick.offer.name) or row.status != "ready":
            raise UsageError(f"cluster {name} exists already ({row.count}x {row.provider}:{row.size}, {row.status}): give"
                             " the batch another name (name: or --name), or `gpuplan teardown " + name + "` first")
        progress(f"cluster {name} is up already: using it")
    else:
        if order is None:  # the name was free when preflight looked: none was checked
            raise UsageError(f"cluster {name} went while the launch was asked about; launch again")
        prov = lifecycle.get_provider(order.request.provider)
        books = default_playbooks(pick, batch)
        launch.provision(state, prov, order, playbooks=books or None, bootstrap=False, progress=progress)
        if books:
            progress(f"bootstrapping {name}: {', '.join(books)}")
            bootstrap_cluster(state, name, books, dict(batch.params), progress=progress)
    if batch.setup:
        run_setup(state, name, batch.setup, progress)


def run_setup(state: State, cluster: str, commands: Sequence[str], progress: Progress) -> None:
    """The batch's `setup` commands on every node at once, in order; the first that fails on a
    node stops the launch with that node's last lines."""
    from gpuplan.errors import RemoteError
    from gpuplan.operating import remote

    hosts = remote.cluster_hosts(state, cluster)
    script = "set -e\n" + "\n".join(commands)
    progress(f"setup on {fmt.plural(len(hosts), 'node')}: {fmt.plural(len(commands), 'command')}")
    results = remote.run_many(hosts, lambda h: remote.run(h, "bash -c " + shlex.quote(script), timeout=SETUP_TIMEOUT_S))
    for h, r in zip(hosts, results):
        if isinstance(r, BaseException):
            raise RemoteError(f"setup on {h.name}: {r}")
        if not r.ok:
            raise RemoteError(f"setup on {h.name} failed (exit {r.exit_code}): {r.why()}; fix `setup:` and launch again"
                              " (the cluster stays up and is used as it is)")


def stop_at(state: State, cluster: str, max_yen: Decimal | None) -> datetime | None:
    """When the batch must stop so that the cluster's ledger (every node billed by the one rule,
    from its start) stays within `max_yen` once fetch and teardown (TEARDOWN_ALLOWANCE_S) are
    billed too: the latest whole second at which it still does. None: no cap, or a fleet that
    bills nothing (owned hosts with no power figure)."""
    from gpuplan.operating.state import now

    if max_yen is None:
        return None
    from gpuplan.planning import billing

    start = now()
    horizon = 366 * 86400
    seconds = billing.seconds_within(
        lambda s: state.ledger_seconds_and_yen(cluster, start + timedelta(seconds=s + TEARDOWN_ALLOWANCE_S))[1], max_yen,
        horizon)
    if seconds < 0:
        from gpuplan.operating.runner import Capped

        raise Capped(f"cluster {cluster} has already spent {fmt.yen(state.ledger_seconds_and_yen(cluster)[1])} of"
                     f" max_yen {fmt.yen(max_yen)} (with {TEARDOWN_ALLOWANCE_S} s kept for fetch and teardown):"
                     " nothing was run")
    return None if seconds == horizon else start + timedelta(seconds=seconds)  # None: the fleet bills nothing


def launch_options(batch: Batch, pick: Pick, name: str | None, outputs: Path) -> dict:
    """What a launch's job row keeps for --resume: the cluster made for it (None: none), its outputs, its cap."""
    return {"plan": str(pick.plan_path), "launch": {
        "cluster": name, "backend": pick.backend, "outputs": str(outputs.resolve()),
        "max_yen": str(batch.max_yen) if batch.max_yen is not None else None, "image": batch.image,
        "recover": batch.recover, "on_demand_fallback": batch.on_demand_fallback}}


# --- after the batch ------------------------------------------------------------------------------


def cap_watch(state: State, job: str, cap: Decimal) -> Callable[[JobRow], None]:
    """For the follower: after each look, a batch whose yen so far (its backend's, by the one
    billing rule) has reached the cap is cancelled and marked capped. A cluster's driver stops the
    batch at its stop_at on its own; this also holds where the backend has no driver (DOK)."""
    from gpuplan.operating import backends, runner

    def look(row: JobRow) -> None:
        if row.state in runner.JOB_STATES_OVER:
            return
        spent = backends.yen(state, row)
        if spent is not None and spent >= cap:
            backends.cancel(state, job)
            state.set_job_state(job, "capped")

    return look


def teardown(state: State, job: str, progress: Progress) -> int | None:
    """Tear down the cluster the job ran on (None where its backend has none); the resources deleted."""
    from gpuplan.operating import backends, lifecycle

    row = backends.job_row(state, job)
    cluster = state.cluster(row.cluster)
    if not backends.of(row).has_cluster or cluster is None:
        return None
    report = lifecycle.teardown(state, lifecycle.get_provider(cluster.provider), cluster.name, progress=progress)
    return len(report.deleted)


def raise_outcome(state: State, job: str, cap: Decimal | None) -> None:
    """Exit non-zero where the batch did not finish: capped (6) or items failed (5)."""
    from gpuplan.operating import backends, runner

    row = backends.job_row(state, job)
    counts = state.job_counts(job)
    if row.state == "capped":
        spent = backends.yen(state, row)
        raise runner.Capped(f"job {job} stopped at max_yen {fmt.yen(cap)}: {fmt.yen(spent)} spent on the batch,"
                     f" {counts.get('ok', 0)} of {fmt.plural(row.total, 'item')} done; the rest did not run")
    failed = sum(counts.get(k, 0) for k in ("failed", "bad input", "timed out", "cancelled", "queued", "running"))
    if failed:
        outputs = (row.options.get("launch") or {}).get("outputs")
        kept = Path(outputs) / runner.FAILED_LOGS if outputs else None  # fetched before the teardown
        logs = f"`gpuplan logs {row.cluster} {job} ITEM`"
        where = (f"the failed items' logs are in {kept}/ ({logs} while the cluster is up)"
                 if kept is not None and kept.is_dir() and any(kept.iterdir()) else f"logs: {logs}")
        raise runner.JobsFailed(f"{failed} of {fmt.plural(row.total, 'item')} did not succeed; {where}")
