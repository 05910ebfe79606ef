"""What `gpuplan provision` and `gpuplan image build` do, as services the CLI calls between
asking and rendering: an order is worked out from what the user typed (or a saved plan) without
touching the state or a cloud; it is checked (credentials, features, quota, SSH source); then
carried out under the cluster's lock (image first when the plan says so, machines, bootstrap)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path

from gpuplan.errors import UsageError
from gpuplan.fleet import images, lifecycle, locks
from gpuplan.fleet.lifecycle import Progress, ProvisionRequest
from gpuplan.fleet.provider import Provider, QuotaUsage
from gpuplan.planning import fmt, saved_plan
from gpuplan.planning.types import Offer
from gpuplan.store.state import ClusterRow, State
from gpuplan.units import parse_count, parse_duration

IMAGE_NOTE = "setup from an image: one builder machine is set up and captured first, then the workers start from it"


@dataclass(frozen=True)
class Order:
    offer: Offer  # what is created, at the price it bills (the spot row for --spot where there is one)
    request: ProvisionRequest
    from_image: bool = False  # a saved plan says setup: image, for more than one machine
    mapped: str = ""  # "X was retired ...; using its successor Y instead", or ""
    notes: tuple[str, ...] = ()  # spot price and rule, image setup: shown with the machines
    more: tuple[Offer, ...] = ()  # a mixed fleet's other sizes, in the order of request.more


MIN_TTL_S = 10 * 60


def resolve_offer(target: str, region: str | None, as_of: str | None = None) -> Offer:
    """A catalog offer; owned hosts (`baremetal:<group or GPU>`) come from the user's inventory."""
    return _resolve(target, region, as_of)[0]


def _resolve(target: str, region: str | None, as_of: str | None = None) -> tuple[Offer, str]:
    """resolve_offer, and the line saying which size a GPU name ("t4", "aws:h100") was read as
    ("" where the size was named): catalog.Catalog.resolve_named."""
    from gpuplan.userfiles import check_plain

    check_plain(target, "instance type")
    if region is not None:
        check_plain(region, "--region")
    if target.startswith("baremetal:"):
        return lifecycle.get_provider("baremetal").offer(target.split(":", 1)[1]), ""
    from gpuplan.run import backends

    own = backends.for_target(target).offer_of(target)  # a backend's own target (a Slurm partition of slurm.yaml)
    if own is not None:
        return own, ""
    from gpuplan.market import catalog

    return catalog.load(as_of).resolve_named(target, region=region)


def _preferred_region(target: str) -> str | None:
    """The first of config `preferred_regions:` the size is offered in (None: the catalog's
    default region). Issue 22."""
    from gpuplan import config

    preferred = config.preferred_regions()
    if not preferred or target.startswith("baremetal:"):
        return None
    from gpuplan.market import catalog

    cat = catalog.load()
    for r in preferred:
        try:
            cat.resolve(target, region=r)
        except UsageError:
            continue
        return r
    return None


def live(target: str, region: str | None) -> tuple[Offer, str]:
    """The offer to create for `target`, and what to say first: the size a GPU name was read as;
    a retired size maps to its successor (and says so)."""
    offer, read = _resolve(target, region)
    if not offer.retired(date.today()):
        return offer, read
    from gpuplan.market import catalog

    offer, mapped = lifecycle.live_offer(catalog.load(), offer, region)
    return offer, "; ".join(x for x in (read, mapped) if x)


def _spot_priced(offer: Offer) -> tuple[Offer, str]:
    """The offer at its spot row where the catalog has one, and the line that says so: the
    price shown, asked about and written to the cost ledger is the one the machines bill at."""
    from gpuplan.market import catalog

    row = catalog.load().spot_offer(offer)
    if row is None:
        return offer, ("spot: the catalog has no spot price for this size; shown at the on-demand price, which"
                       " the spot price does not exceed")
    rule = row.notes.removeprefix("spot: ").partition("; ")[0]
    return row, f"spot at {fmt.yen(row.price_jpy_per_hour)}/h (on demand {fmt.yen(offer.price_jpy_per_hour)}/h): {rule}"


def read_plan(path: Path) -> tuple[str, str, str | None, int, str, str]:
    """The plan saved by `gpuplan estimate --save` (planning/saved_plan.py), checked: provider,
    instance type, region or None, count, setup and market."""
    saved = saved_plan.load(path)
    return (*saved.target(), saved.market)


def _more(path: Path, provider: str, region: str | None, name: str, spot: bool, ttl_s: int | None,
          image: str | None) -> tuple[list[lifecycle.ProvisionRequest], list[Offer], list[str]]:
    """A mixed plan's other sizes as requests of the same cluster, their offers and mapped lines."""
    reqs, offers, mapped = [], [], []
    for size, n in saved_plan.load(path).more():
        offer, line = live(f"{provider}:{size}", region)
        if spot and offer.kind == "cloud":
            offer, _ = _spot_priced(offer)
        reqs.append(lifecycle.request_from_offer(offer, n, name=name, image=image, ttl_s=ttl_s, spot=spot,
                                                 region=region))
        offers.append(offer)
        if line:
            mapped.append(line)
    return reqs, offers, mapped


def replanned(path: Path, offer: Offer, count: int, setup: str, mapped: bool) -> str:
    """Where the plan's offer changed since it was saved (retired for a successor, re-priced),
    one line with its yen and wall re-estimated on today's catalog beside the saved ones; ""
    where nothing changed. The workload is rebuilt where the plan names a built-in one."""
    from decimal import ROUND_HALF_UP, Decimal

    from gpuplan.market import catalog
    from gpuplan.market.billing import terms_for
    from gpuplan.planning import optimizer, workloads
    from gpuplan.planning.model import Setting

    saved = saved_plan.load(path)
    fleet = saved.fleet if isinstance(saved.fleet, list) and saved.fleet else [{}]
    old = ((fleet[0] or {}).get("billing") or {}).get("price_jpy") if isinstance(fleet[0], dict) else None
    try:
        # the saved price is on the plan's tax basis, to the sen: the offer's on the same one (market/tax.py)
        now = terms_for(catalog.offer_with_tax(offer, saved.tax)).price_jpy
        repriced = old is not None and Decimal(str(old)) != now.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    except (ArithmeticError, ValueError):
        repriced = False
    if not (mapped or repriced):
        return ""
    machines = saved.machines if isinstance(saved.machines, list) else []
    jobs = sum(len(m.get("jobs") or ()) for m in machines if isinstance(m, dict))
    work = None
    if saved.workload == "colorize-hd" and jobs:
        work = workloads.videos(jobs)
    elif saved.workload in workloads.builtin_names():
        work = workloads.load(saved.workload)
    was = f"saved: {fmt.yen(_number(saved.cost_jpy))}, wall {fmt.duration(_number(saved.wall_minutes) * 60)}"
    why = "its offer was retired since it was saved" if mapped else "its price changed since it was saved"
    if work is None:
        return f"{why} ({was}): re-estimate it with `gpuplan estimate ... --save` before relying on its figures"
    est = optimizer.estimate(work, Setting(catalog=catalog.with_tax(catalog.load(), saved.tax)), provider=offer.provider,
                             region=offer.region, mixes=False)
    same = next((p for p in est.plans if p.feasible and p.fleet[0][0].name == offer.name and len(p.fleet) == 1
                 and p.count == count and p.setup == setup and p.per_gpu == 1), None)
    if same is None:
        return f"{why} ({was}): re-estimate it with `gpuplan estimate ... --save` before relying on its figures"
    return (f"re-estimated on today's catalog, as {why}: {count}x {offer.name} now {fmt.yen(same.cost)},"
            f" wall {fmt.duration(same.wall_s)} ({was})")


def _number(value):
    """A saved figure as Decimal (0 where unreadable: shown, never decided on)."""
    from decimal import Decimal

    try:
        return Decimal(str(value))
    except ArithmeticError:
        return Decimal(0)


def order(target: str | None, count: str | None, *, plan: Path | None = None, region: str | None = None,
          name: str | None = None, image: str | None = None, ttl: str | None = None, spot: bool = False,
          idle: str | None = None) -> Order:
    """What `gpuplan provision` would create, from a size and count or a saved plan."""
    setup = "scratch"
    if plan is not None:
        if target or count:
            raise UsageError("give either an instance type and count or --plan, not both")
        provider, size, plan_region, n, setup, market = read_plan(plan)
        offer, mapped = live(f"{provider}:{size}", region or plan_region)
        spot = spot or market == "spot"  # a plan made with `estimate --spot` on a spot price
    else:
        if not target:
            raise UsageError("name what to provision, e.g. `gpuplan provision nc6 x4`, or give --plan plan.json")
        region = region or _preferred_region(target)
        offer, mapped = live(target, region)
        n = parse_count(count or "x1")
    if offer.kind == "task":  # issue 22
        how = (f"`gpuplan launch --plan {plan} --image IMAGE --items FILE -- CMD {{item}}`" if plan is not None else
               f"`gpuplan run dok:{offer.name.removeprefix('dok-')} --image IMAGE --items FILE -- CMD {{item}}`")
        raise UsageError(f"{offer.provider}:{offer.name} is a 高火力 DOK task plan: there is no machine to provision;"
                         f" run the batch with {how}")
    ttl_s = parse_duration(ttl, "--ttl") if ttl is not None else None
    if ttl_s is not None and ttl_s < MIN_TTL_S:
        raise UsageError(f"bad --ttl {ttl!r}: at least {MIN_TTL_S // 60}m (machines take minutes to start and set "
                         "up; a shorter TTL stops them before they are of use)")
    idle_s = parse_duration(idle, "--idle") if idle is not None else None
    if idle_s is not None:
        from gpuplan.fleet import idle as idle_stop

        idle_stop.check(offer.provider, idle_s)
    if name is not None:  # --name "" is a mistake, not a request for a generated name
        lifecycle.check_name(name)
    notes = []
    if spot and offer.kind == "cloud":
        offer, line = _spot_priced(offer)
        notes.append(line)
    req = lifecycle.request_from_offer(offer, n, name=name, image=image, ttl_s=ttl_s, spot=spot, region=region)
    req = replace(req, idle_s=idle_s)
    more_offers: list[Offer] = []
    if plan is not None:
        more, more_offers, lines = _more(plan, offer.provider, req.region, req.name, spot, ttl_s, image)
        if more:
            req = replace(req, more=tuple(more))
            mapped = "; ".join(x for x in (mapped, *lines) if x)
    from_image = setup == "image" and not image and n > 1 and not req.more  # the planner mixes only from scratch
    if from_image:
        notes.append(IMAGE_NOTE)
    if plan is not None and not req.more:
        line = replanned(plan, offer, n, setup, bool(mapped))
        if line:
            mapped = f"{mapped}\n{line}" if mapped else line
    return Order(offer, req, from_image, mapped, tuple(notes), tuple(more_offers))


def image_order(target: str, region: str | None, name: str | None) -> tuple[Order, str]:
    """What `gpuplan image build` would create (its one builder machine), and the image's name."""
    offer, mapped = live(target, region)
    name = lifecycle.check_name(name, "image") if name is not None else images.default_name(offer)
    req = lifecycle.request_from_offer(offer, 1, name=images.builder_name(name), region=region)
    return Order(offer, req, mapped=mapped), name


def dry_run_notes(o: Order) -> list[str]:
    """For a dry run: refuse what the provider does not offer (--spot on Sakura, --ttl on owned
    servers) as the real run would; where its SDK is not installed, say which extra brings it."""
    try:
        prov = lifecycle.get_provider(o.request.provider)
    except UsageError as exc:
        return [f"note: {exc}"]
    prov.check_features(spot=o.request.spot, ttl_s=o.request.ttl_s)
    missing = prov.missing_sdk()
    return ([f"note: {missing}"] if missing is not None else []) + list(getattr(prov, "create_notes", ()))


def check(state: State, prov: Provider, o: Order, ssh_from: str | None) -> tuple[Order, list[tuple[QuotaUsage, int]]]:
    """Before the question: a resumable name, credentials, features and quota, the SSH source.
    Returns the order with its SSH source and each quota tier with what the machines need of it,
    in the tier's unit (lifecycle.preflight)."""
    lifecycle.resumable(state, o.request)
    quota = lifecycle.preflight(prov, o.request, lifecycle.cluster_identity(state, o.request.name))
    notes = o.notes + tuple(getattr(prov, "create_notes", ()))  # issue 22
    return replace(o, request=replace(o.request, ssh_cidr=lifecycle.ssh_source(prov, ssh_from)), notes=notes), quota


def provision(state: State, prov: Provider, o: Order, playbooks: list[str] | None = None, bootstrap: bool = True,
              keep_on_failure: bool = False, progress: Progress | None = None) -> ClusterRow:
    """Carry out a checked order: the image first when it asks for one, then the machines, then
    the setup playbooks (not on machines started from an image), under the cluster's lock so
    that nothing else works on it in between."""
    req = o.request
    with locks.cluster(req.name):
        if o.from_image:
            built = images.build(state, prov, o.offer, f"{req.name}-img", playbooks=playbooks, progress=progress,
                                 ssh_cidr=req.ssh_cidr)
            req = replace(req, image=built.name)
        cluster = lifecycle.provision(state, prov, req, progress=progress, keep_on_failure=keep_on_failure)
        if bootstrap and not req.image:
            from gpuplan.hosts.playbook import bootstrap_cluster

            bootstrap_cluster(state, cluster.name, playbooks or None, {}, progress=progress)
        if req.idle_s:  # also with --no-bootstrap or an image: the watchdog is what --idle asked for
            from gpuplan.fleet import idle
            from gpuplan.hosts.playbook import bootstrap_cluster

            bootstrap_cluster(state, cluster.name, [idle.PLAYBOOK], idle.params(req.provider, req.idle_s), progress=progress)
    return cluster
