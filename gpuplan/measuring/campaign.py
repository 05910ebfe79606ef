"""`gpuplan bench WORKLOAD --on OFFER[,OFFER...]`: measure a reference job on one machine of each
offer and save one profile per offer where every later estimate reads it.

For each offer: one machine is provisioned through the normal path (journal, tags, the cluster's
lock; cloud machines are bootstrapped, an owned offer claims one inventory host of its kind and
is used as it is), the existing bench runs on it over SSH (ClusterExecutor), the profile is saved
under the state's profiles/measured/ with the offer it measured, and the machine is torn down
whatever happened. What it will cost is said first: the offer's billing terms
(market/billing.py) charged for the expected seconds of setup and bench runs.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from gpuplan.errors import GpuplanError, ProviderError, UsageError
from gpuplan.market import billing
from gpuplan.measuring import bench as bench_mod
from gpuplan.planning import fmt
from gpuplan.planning.types import Offer

# One bench run (a process measured alone, capped, co-located or packed): ESTIMATE. A job start
# took 17.2 s on an H100 (catalog/profiles/colorize-h100-sxm-2026-11-22.yaml) before its timed
# steps; slower GPUs and full shapes take longer. Quick runs are tiny shapes.
RUN_S = 120
QUICK_RUN_S = 30
# Making the bench's Python on a machine without one (bench.BENCH_HOME: a venv, torch and its CUDA
# wheels from the package index, some 3 GB): ESTIMATE, a cloud machine's download at a few hundred
# MB/s plus unpacking. Not counted where --python names a ready one.
ENV_S = 300
MAX_OFFERS = 8


@dataclass(frozen=True)
class Target:
    """One offer of a campaign: what is measured, the cluster made for it, and what it costs."""

    text: str  # as the user wrote it
    offer: Offer
    cluster: str
    setup_s: int  # bootstrap before the bench (0 for an owned host: used as it is)
    bootstrap: bool  # run the setup playbooks first (cloud machines, unless --no-bootstrap)
    runs: int
    seconds: int  # setup + runs: what the machine is expected to be held
    terms: billing.Terms
    yen: Decimal  # billing.charge(seconds, terms)
    price_line: str

    @property
    def owned(self) -> bool:
        return self.offer.kind in ("owned", "monthly")


def split(on: str) -> list[str]:
    """"aws:g5.xlarge, baremetal:t4" -> the offers, in order; refused when empty or repeated."""
    texts = [t.strip() for t in on.split(",")]
    if not on.strip() or any(not t for t in texts):
        raise UsageError(f"bad --on {on!r}: name offers separated by commas, such as aws:g5.xlarge,baremetal:t4")
    if len(texts) > MAX_OFFERS:
        raise UsageError(f"bad --on: {len(texts)} offers; a campaign measures at most {MAX_OFFERS} at once")
    seen = set()
    for t in texts:
        if t.lower() in seen:
            raise UsageError(f"bad --on {on!r}: {t} is named twice")
        seen.add(t.lower())
    return texts


def resolve(text: str) -> Offer:
    """The offer `text` names: PROVIDER:NAME[@REGION] from the catalog (the provider's default or
    preferred region without @), or baremetal:KIND, a kind of host of the inventory."""
    from gpuplan.userfiles import check_plain

    check_plain(text, "--on")
    target, _, region = text.partition("@")
    from gpuplan.run import backends

    own = backends.for_target(target)
    offer = own.offer_of(target)
    hint = own.bench_hint(offer, "WORKLOAD", "FILE.yaml") if offer is not None else None
    if hint is not None:  # e.g. a Slurm partition: shared, never provisioned
        raise UsageError(f"bad --on {text!r}: gpuplan does not provision this offer's machines; {hint}")
    if target.lower().startswith("baremetal:"):
        return _inventory_offer(text, target.split(":", 1)[1])
    from gpuplan.fleet import provision
    from gpuplan.market import catalog

    try:
        offer = catalog.load().resolve(target, region=region or provision._preferred_region(target))
    except UsageError as exc:
        raise UsageError(f"bad --on {text!r}: {exc}") from None
    if offer.kind == "task":
        raise UsageError(f"bad --on {text!r}: a 高火力 DOK task plan has no machine to provision; run `gpuplan bench"
                         " WORKLOAD --local` inside a `gpuplan dok submit` task instead")
    if offer.retired(catalog.load().date):
        raise UsageError(f"bad --on {text!r}: {offer.name} was retired on {offer.retired_on}; bench"
                         f" {offer.provider}:{offer.successor or 'a live size'} instead")
    if offer.price_jpy_per_hour is None and offer.kind == "cloud":
        raise UsageError(f"bad --on {text!r}: the catalog has no price for {offer.name}, so the bench's cost cannot be"
                         " said; set it in prices.yaml")
    return offer


def _inventory_offer(text: str, kind: str) -> Offer:
    from importlib import import_module

    from gpuplan import config
    from gpuplan.market import catalog

    prov = import_module("gpuplan.providers.baremetal").BaremetalProvider(config.provider_config("baremetal"))
    offers, _ = prov.owned_offers(catalog.load())
    want = re.sub(r"[\s_-]+", "", kind).lower()
    for offer, _n in offers:
        if re.sub(r"[\s_-]+", "", offer.name).lower() == want:
            return offer
    kinds = ", ".join(f"baremetal:{o.name}" for o, _ in offers) or "none"
    raise UsageError(f"bad --on {text!r}: no kind of host {kind!r} in the inventory {prov.inventory_path()}; its kinds:"
                     f" {kinds}")


def runs(opts: bench_mod.BenchOptions, gpus: int) -> int:
    """How many processes the bench starts one after another on a machine of `gpus` GPUs
    (measuring/bench.measure): alone, the memory-need search, co-location, packing and, for a
    data-parallel job, its layouts on one machine."""
    spec = bench_mod.JOBS[opts.workload]
    slots = opts.gpus or gpus
    points = len(bench_mod._points(slots))
    return 1 + bench_mod.MEMORY_SEARCH_STEPS + points + (opts.max_pack - 1) + (points if spec.data_parallel else 0)


def plan(texts: list[str], opts: bench_mod.BenchOptions, state=None, bootstrap: bool = True,
         make_python: bool = False) -> list[Target]:
    """Every offer resolved and priced: nothing is created. Cloud machines are bootstrapped
    first (its setup time counted) unless `bootstrap` is False (an image with everything);
    `make_python`: the bench's Python is made on each machine first (ENV_S counted)."""
    from gpuplan.market import catalog

    offers = [resolve(t) for t in texts]
    keys = [o.key for o in offers]
    for k in keys:
        if keys.count(k) > 1:
            raise UsageError(f"bad --on: {k} is named twice")
    facts = catalog.load().providers
    out = []
    tag = secrets.token_hex(2)
    for text, offer in zip(texts, offers):
        setup = 0
        if offer.kind == "cloud" and bootstrap:
            measured = state.setup_time(offer.provider, offer.name) if state is not None else None
            f = facts.get(offer.provider)
            setup = int(measured[0]) if measured is not None else (f.setup_s if f else 0)
        if make_python:
            setup += ENV_S
        n = runs(opts, offer.gpu_count)
        seconds = setup + n * (QUICK_RUN_S if opts.quick else RUN_S)
        if offer.kind == "monthly":  # rented by the month already: holding it longer costs nothing more
            terms, price = billing.Terms(Decimal(0)), "rented by the month: nothing more to pay"
        else:
            terms = billing.terms_for(offer)
            price = (f"{fmt.rate(terms.price_jpy)}/h" + (", billed per second" if terms.granularity_s == 1 else
                                                         f", billed per {fmt.duration(terms.granularity_s)}")
                     + (f", at least {fmt.duration(terms.minimum_s)}" if terms.minimum_s else ""))
            if offer.kind == "owned":
                price = f"your own host: power only, {fmt.rate(terms.price_jpy)}/h"
        slug = re.sub(r"[^a-z0-9]+", "-", offer.name.lower()).strip("-")[:30]
        out.append(Target(text, offer, f"bench-{slug}-{tag}", setup, bootstrap and offer.kind == "cloud", n, seconds, terms,
                          billing.charge(seconds, terms), price))
    return out


def describe(t: Target, workload: str) -> str:
    """One line of the campaign's plan."""
    o = t.offer
    how = ("claim 1 inventory host" if o.provider == "baremetal" else "provision 1 machine")
    setup = f"setup {fmt.duration(t.setup_s)} + " if t.setup_s else ""
    return (f"{o.provider}:{o.name} {o.region} ({o.gpu_count}x {o.gpu}): {how} ({t.cluster}), about"
            f" {fmt.duration(t.seconds)} ({setup}{t.runs} runs of {workload} x"
            f" {fmt.duration((t.seconds - t.setup_s) // max(1, t.runs))}, an ESTIMATE): {fmt.yen(t.yen)} ({t.price_line})")


def check(state, t: Target, ssh_from: str | None):
    """Before the question: the order for one machine of the offer and its checks (credentials,
    quota, SSH source), as `gpuplan provision` does them."""
    from gpuplan.fleet import lifecycle, provision

    region = None if t.offer.provider == "baremetal" else t.offer.region
    o = provision.order(f"{t.offer.provider}:{t.offer.name}", "x1", region=region, name=t.cluster)
    prov = lifecycle.get_provider(o.request.provider)
    o, _ = provision.check(state, prov, o, ssh_from)
    return o, prov


def measure(state, t: Target, order, prov, opts: bench_mod.BenchOptions, python: str | None,
            progress: Callable[[str], None]) -> tuple[object, Path]:
    """Provision, bench, save; the machine is torn down whatever happens (a failed bench, an
    interrupt). Returns the profile and where it was saved. The offers of a campaign run at
    once, each in its own thread (the state serializes its writes; each cluster has its lock)."""
    from gpuplan.fleet import lifecycle, provision
    from gpuplan.planning.profiles import measured_path, save_profile

    try:
        progress(f"provisioning {t.cluster}")
        provision.provision(state, prov, order, bootstrap=t.bootstrap, progress=progress)
        executor = bench_mod.ClusterExecutor(state, t.cluster, python=python or "python3")
        if python is None:
            progress("making the bench's Python (a venv with torch) on it")
            executor.prepare()
        profile = bench_mod.measure(opts, executor)
        from dataclasses import replace

        profile = replace(profile, provenance=replace(profile.provenance, offer=t.offer.key))
        path = save_profile(profile, measured_path(opts.workload, t.offer.key))
    finally:
        if state.cluster(t.cluster) is not None:
            progress(f"tearing down {t.cluster}")
            try:
                lifecycle.teardown(state, prov, t.cluster, progress=progress)
            except GpuplanError as exc:
                raise ProviderError(f"could not tear down {t.cluster} after its bench ({exc}); run `gpuplan teardown"
                                    f" {t.cluster}` to finish") from exc
    return profile, path
