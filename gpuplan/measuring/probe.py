"""`gpuplan probe`: time the batch's own job on the contending offers, in parallel, and save a
profile per offer (gpuplan/planning/probing.py says which offers, what each may cost and how
the two sizes are read).

Each probe is a small launch of its own, through the same steps `gpuplan launch` takes (so it
runs on every backend: cloud VMs and owned hosts on Ray, 高火力 DOK task plans as tasks): the
probe plan (one machine of the offer, the two sizes as two items) is saved, its fleet provisioned
or claimed, bootstrapped and set up as the batch says, the two sizes run with the probe's
priced yen as their cap, and the fleet torn down whatever happened. Offers run side by side;
owned hosts one offer after another (their Ray ports are the same on every group, and two groups
may be one machine). The CLI asks and renders; this module carries out and returns typed results.
"""

from __future__ import annotations

import re
import shlex
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from gpuplan.errors import GpuplanError
from gpuplan.planning import fmt
from gpuplan.run import launcher
from gpuplan.store.state import State

if TYPE_CHECKING:
    from gpuplan.batchfile import Batch
    from gpuplan.fleet.provision import Order
    from gpuplan.planning.plan_types import Workload
    from gpuplan.planning.probing import Fit, Priced
    from gpuplan.planning.types import Offer

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Result:
    """One offer's probe: its fit and profile where it measured, else the one line why not."""

    offer: Offer
    units: tuple[int, int]
    seconds: tuple[Decimal, Decimal] | None = None
    fit: Fit | None = None
    profile: Path | None = None
    yen: Decimal | None = None  # what it cost, by the one billing rule (None: nothing ran that bills)
    problem: str = ""


def probe_command(batch: Batch, first_item: str) -> tuple[str, ...]:
    """The probe's command as a batch command: {item} is the first item, {units} each size (the
    probe's items are its sizes)."""
    assert batch.probe is not None
    return tuple(w.replace("{item}", first_item).replace("{units}", "{item}") for w in batch.probe.command)


def cluster_name(offer: Offer) -> str:
    """probe-<offer>-<4 hex>, as a cluster name may be (lowercase, digits, '-', at most 40): its
    own, so that a probe never uses (nor tears down) a cluster another command works on."""
    import secrets

    slug = re.sub(r"[^a-z0-9]+", "-", f"{offer.provider}-{offer.name}".lower()).strip("-")
    return f"{f'probe-{slug}'[:34].rstrip('-')}-{secrets.token_hex(2)}"


@dataclass(frozen=True)
class Prepared:
    """One probe checked before the question: its cluster's name, its launch pick (of the saved
    probe plan), the batch it runs (the probe command at its sizes, capped at its priced yen) and
    the fleet's checked order (None: nothing to provision, as on DOK)."""

    priced: Priced
    name: str
    pick: launcher.Pick
    batch: Batch
    order: Order | None


def prepare(state: State, priced: Priced, plan_path: Path, batch: Batch, first_item: str) -> Prepared:
    """What can be checked before anything is bought, checked (the backend's key and image; a
    fleet's credentials, features and quota, as `launch` checks them); a GpuplanError says why not."""
    from gpuplan import paths

    name = cluster_name(priced.offer)
    pick = launcher.pick_of(plan_path)
    probe_batch = replace(batch, command=probe_command(batch, first_item), name=name, max_yen=priced.yen,
                          outputs=paths.state_dir() / "probes" / name / "outputs", per_gpu=1, retries=0)
    return Prepared(priced, name, pick, probe_batch, launcher.preflight(state, pick, probe_batch, name))


def run(work: Workload, batch: Batch, probes: Sequence[Prepared], progress: Progress) -> list[Result]:
    """Every probe, side by side; owned offers one after another. Results in the order given."""
    STOP.clear()
    lanes: dict[str, list[int]] = {}
    for i, p in enumerate(probes):
        lanes.setdefault("owned" if p.priced.offer.kind == "owned" else f"offer {i}", []).append(i)
    results: list[Result | None] = [None] * len(probes)
    lock = threading.Lock()

    def said(offer: Offer) -> Progress:
        def say(msg: str) -> None:
            with lock:
                progress(f"{offer.provider}:{offer.name}: {msg}")
        return say

    def lane(indexes: list[int]) -> None:
        for i in indexes:
            results[i] = one(work, batch, probes[i], said(probes[i].priced.offer))

    with ThreadPoolExecutor(max_workers=max(1, len(lanes))) as pool:
        futures = [pool.submit(lane, ix) for ix in lanes.values()]
        try:
            for f in futures:
                f.result()
        except KeyboardInterrupt:  # every probe stops its job and tears down; then the interrupt goes on
            STOP.set()
            for f in futures:
                f.result()
            raise
    return [r for r in results if r is not None]


STOP = threading.Event()  # set on Ctrl-C: each running probe cancels its job and tears down


class Stopped(GpuplanError):
    """The probe was stopped (Ctrl-C) before it measured."""


def one(work: Workload, batch: Batch, prepared: Prepared, progress: Progress) -> Result:
    """One offer's probe, start to teardown; never raises for what went wrong on the offer (a
    GpuplanError becomes the result's problem), and leaves nothing running."""
    from gpuplan.planning import probing
    from gpuplan.run import backends, batches

    state = State.open_default()
    priced, units = prepared.priced, prepared.priced.units
    job = None
    try:
        todo = [(0, str(units[0])), (1, str(units[1]))]
        job = launcher.start(state, prepared.pick, prepared.batch, prepared.name, prepared.order, todo,
                             Path(str(prepared.batch.outputs)), progress)
        backend = backends.of(backends.job_row(state, job))
        watch = launcher.cap_watch(state, job, priced.yen)

        def look(row, _progress) -> None:
            if STOP.is_set():
                raise Stopped("stopped (Ctrl-C) before it measured")
            watch(row)

        row = batches.follow(state, job, look)  # the job's row as it ended
        summary = backend.summary(state, job)
        spent = backends.yen(state, row)
        if row.state == "capped":
            return Result(priced.offer, units, yen=spent, problem=f"stopped at its cap {fmt.yen(priced.yen)}: the job ran"
                          f" slower than the slow end of the {priced.offer.gpu}'s speed band")
        by_item = {r.item: r for r in summary.jobs}
        for u in units:
            r = by_item.get(str(u))
            if r is None or r.status != "ok":
                why = "it did not run" if r is None else f"{r.status}; `gpuplan logs {summary.cluster} {job} {u}`"
                return Result(priced.offer, units, yen=spent, problem=f"the probe of {u} units: {why}")
        seconds = (Decimal(str(by_item[str(units[0])].seconds)), Decimal(str(by_item[str(units[1])].seconds)))
        f = probing.fit(units, seconds)
        prof = probing.profile(work, priced.offer, f, units, seconds,
                               shlex.join(batch.probe.command if batch.probe else ()), date.today())
        from gpuplan.planning.profiles import measured_path, save_profile

        path = save_profile(prof, measured_path(work.name, priced.offer.key))
        return Result(priced.offer, units, seconds, f, path, spent)
    except GpuplanError as exc:
        return Result(priced.offer, units, problem=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    finally:
        _stop(state, job)
        _down(state, prepared.name, job, progress)
        state.close()


def _stop(state, job: str | None) -> None:
    """A probe's job still running (interrupted, or an error while it was followed) is cancelled:
    on DOK its tasks would run on, and bill, with nothing to tear down."""
    from gpuplan.run import backends
    from gpuplan.run import items as run_items

    if job is None:
        return
    try:
        if backends.refresh(state, job).state not in run_items.JOB_STATES_OVER:
            backends.cancel(state, job)
    except GpuplanError:
        pass  # the teardown that follows stops a cluster's batch too


def _down(state, name: str, job: str | None, progress: Progress) -> None:
    """The probe's fleet torn down, whether or not its job ran (a launch cut off mid-provision
    leaves a cluster without a job): nothing a probe made is left."""
    from gpuplan.fleet import lifecycle

    try:
        if job is not None:
            launcher.teardown(state, job, progress)
            return
        row = state.cluster(name)
        if row is not None and row.status != "gone":
            lifecycle.teardown(state, lifecycle.get_provider(row.provider), name, progress=progress)
    except GpuplanError as exc:
        progress(f"teardown of {name} did not finish ({exc}); run `gpuplan teardown {name}`")
