"""What `gpuplan provision` and `gpuplan image build` do, as services the CLI calls between
asking and rendering: an order is worked out from what the user typed (or a saved plan) without
touching the state or a cloud; it is checked (credentials, features, quota, SSH source); then
carried out under the cluster's lock (image first when the plan says so, machines, bootstrap)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path

from gpuplan.errors import UsageError
from gpuplan.operating import images, lifecycle, locks
from gpuplan.operating.lifecycle import Progress, ProvisionRequest
from gpuplan.operating.provider import Provider, QuotaUsage
from gpuplan.operating.state import ClusterRow, State
from gpuplan.planning import fmt
from gpuplan.planning.types import Offer
from gpuplan.planning.units import parse_count, parse_duration

IMAGE_NOTE = "setup from an image: one builder machine is set up and captured first, then the workers start from it"


@dataclass(frozen=True)
class Order:
    offer: Offer  # what is created, at the price it bills (the spot row for --spot where there is one)
    request: ProvisionRequest
    from_image: bool = False  # a saved plan says setup: image, for more than one machine
    mapped: str = ""  # "X was retired ...; using its successor Y instead", or ""
    notes: tuple[str, ...] = ()  # spot price and rule, image setup: shown with the machines


MIN_TTL_S = 10 * 60


def resolve_offer(target: str, region: str | None, as_of: str | None = None) -> Offer:
    """A catalog offer; owned hosts (`baremetal:<group or GPU>`) come from the user's inventory."""
    from gpuplan.userfiles import check_plain

    check_plain(target, "instance type")
    if region is not None:
        check_plain(region, "--region")
    if target.startswith("baremetal:"):
        return lifecycle.get_provider("baremetal").offer(target.split(":", 1)[1])
    from gpuplan.planning import catalog

    return catalog.load(as_of).resolve(target, region=region)


def _live(target: str, region: str | None) -> tuple[Offer, str]:
    """The offer to create for `target`: a retired size maps to its successor (and says so)."""
    offer = resolve_offer(target, region)
    if not offer.retired(date.today()):
        return offer, ""
    from gpuplan.planning import catalog

    return lifecycle.live_offer(catalog.load(), offer, region)


def _spot_priced(offer: Offer) -> tuple[Offer, str]:
    """The offer at its spot row where the catalog has one, and the line that says so: the
    price shown, asked about and written to the cost ledger is the one the machines bill at."""
    from gpuplan.planning import catalog

    row = catalog.load().spot_offer(offer)
    if row is None:
        return offer, ("spot: the catalog has no spot price for this size; shown at the on-demand price, which"
                       " the spot price does not exceed")
    rule = row.notes.removeprefix("spot: ").partition("; ")[0]
    return row, f"spot at {fmt.yen(row.price_jpy_per_hour)}/h (on demand {fmt.yen(offer.price_jpy_per_hour)}/h): {rule}"


def read_plan(path: Path) -> dict:
    """The plan saved by `gpuplan estimate --save`, checked: provider, instance_type and
    region (if there) are names, count a whole number of machines, setup scratch or image."""
    from gpuplan.userfiles import load_json, read_text

    fix = "write it with `gpuplan estimate ... --save`"
    try:
        plan = load_json(read_text(path, "plan file", fix))
    except json.JSONDecodeError as exc:
        raise UsageError(f"plan file {path} is not valid JSON ({exc.msg}, line {exc.lineno}); {fix}") from None
    if isinstance(plan, dict) and "recommended" in plan:
        plan = plan["recommended"]
    if not isinstance(plan, dict):
        raise UsageError(f"plan file {path}: expected a JSON object with provider, instance_type and count; {fix}")
    missing = [k for k in ("provider", "instance_type", "count") if k not in plan]
    if missing:
        raise UsageError(f"plan file {path} lacks {', '.join(missing)}; {fix}")
    for key in ("provider", "instance_type", "region"):
        value = plan.get(key)
        if not (isinstance(value, str) and value.strip()) and not (key == "region" and value is None):
            raise UsageError(f"plan file {path}: {key} must be a name, not {value!r}; {fix}")
    count = plan["count"]
    if isinstance(count, bool) or not isinstance(count, int):
        raise UsageError(f"plan file {path}: count must be a whole number of machines, not {count!r}; {fix}")
    try:
        parse_count(str(count))
    except UsageError as exc:
        raise UsageError(f"plan file {path}: {exc}") from None
    if plan.get("setup") not in (None, "scratch", "image"):
        raise UsageError(f"plan file {path}: setup must be scratch or image, not {plan['setup']!r}; {fix}")
    if plan.get("market") not in (None, "on-demand", "spot"):
        raise UsageError(f"plan file {path}: market must be on-demand or spot, not {plan['market']!r}; {fix}")
    return plan


def order(target: str | None, count: str | None, *, plan: Path | None = None, region: str | None = None,
          name: str | None = None, image: str | None = None, ttl: str | None = None, spot: bool = False) -> Order:
    """What `gpuplan provision` would create, from a size and count or a saved plan."""
    setup = "scratch"
    if plan is not None:
        if target or count:
            raise UsageError("give either an instance type and count or --plan, not both")
        p = read_plan(plan)
        offer, mapped = _live(f"{p['provider']}:{p['instance_type']}", region or p.get("region"))
        n = int(p["count"])
        setup = p.get("setup", "scratch")
        spot = spot or p.get("market") == "spot"  # a plan made with `estimate --spot` on a spot price
    else:
        if not target:
            raise UsageError("name what to provision, e.g. `gpuplan provision nc6 x4`, or give --plan plan.json")
        offer, mapped = _live(target, region)
        n = parse_count(count or "x1")
    ttl_s = parse_duration(ttl, "--ttl") if ttl is not None else None
    if ttl_s is not None and ttl_s < MIN_TTL_S:
        raise UsageError(f"bad --ttl {ttl!r}: at least {MIN_TTL_S // 60}m (machines take minutes to start and set "
                         "up; a shorter TTL stops them before they are of use)")
    if name is not None:  # --name "" is a mistake, not a request for a generated name
        lifecycle.check_name(name)
    notes = []
    if spot and offer.kind == "cloud":
        offer, line = _spot_priced(offer)
        notes.append(line)
    req = lifecycle.request_from_offer(offer, n, name=name, image=image, ttl_s=ttl_s, spot=spot, region=region)
    from_image = setup == "image" and not image and n > 1
    if from_image:
        notes.append(IMAGE_NOTE)
    return Order(offer, req, from_image, mapped, tuple(notes))


def image_order(target: str, region: str | None, name: str | None) -> tuple[Order, str]:
    """What `gpuplan image build` would create (its one builder machine), and the image's name."""
    offer, mapped = _live(target, region)
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
    return []


def check(state: State, prov: Provider, o: Order, ssh_from: str | None) -> tuple[Order, tuple[int, list[QuotaUsage]]]:
    """Before the question: a resumable name, credentials, features and quota, the SSH source.
    Returns the order with its SSH source and (what the machines need, the quota tiers)."""
    lifecycle.resumable(state, o.request)
    quota = lifecycle.preflight(prov, o.request, lifecycle.cluster_identity(state, o.request.name))
    return replace(o, request=replace(o.request, ssh_cidr=lifecycle.ssh_source(prov, ssh_from))), quota


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
            from gpuplan.operating.playbook import bootstrap_cluster

            bootstrap_cluster(state, cluster.name, playbooks or None, {}, progress=progress)
    return cluster
