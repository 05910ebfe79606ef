"""`gpuplan provision`, `gpuplan status`, `gpuplan teardown` and `gpuplan image ...`."""

from __future__ import annotations

import json
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Annotated, Optional

import typer

from gpuplan.errors import UsageError

image_app = typer.Typer(help="Build, list and delete captured machine images (setup done once, reused).",
                        no_args_is_help=True)


def _err_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def _out_console():
    from rich.console import Console

    return Console(highlight=False)


def _progress(console):
    return lambda message: console.print(f"[dim]…[/dim] {message}")


def yen(amount: Decimal | None) -> str:
    if amount is None:
        return "?"
    return f"¥{int(amount.quantize(Decimal(1), rounding=ROUND_HALF_UP)):,}"


def _open_state():
    from gpuplan.state import State

    return State.open_default()


def _resolve(target: str, region: str | None, as_of: str | None = None):
    """A catalog offer; owned hosts (`baremetal:<group or GPU>`) come from the user's inventory."""
    if target.startswith("baremetal:"):
        from gpuplan import lifecycle

        return lifecycle.get_provider("baremetal").offer(target.split(":", 1)[1])
    from gpuplan import catalog

    return catalog.load(as_of).resolve(target, region=region)


def _read_plan(path: Path) -> dict:
    """The plan saved by `gpuplan estimate --save`, checked: provider, instance_type and
    region (if there) are names, count a whole number of machines, setup scratch or image."""
    from gpuplan.userfiles import read_text
    from gpuplan.units import parse_count

    fix = "write it with `gpuplan estimate ... --save`"
    try:
        plan = json.loads(read_text(path, "plan file", fix))
    except json.JSONDecodeError as exc:
        raise UsageError(f"plan file {path} is not valid JSON (line {exc.lineno}); {fix}") from None
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
    return plan


def provision(
    target: Annotated[Optional[str], typer.Argument(help="Instance type or alias: nc6, aws:g4dn.xlarge, sakura:h100x1.")] = None,
    count: Annotated[Optional[str], typer.Argument(help="How many machines: x4.")] = None,
    name: Annotated[Optional[str], typer.Option("--name", "-n", help="Cluster name (default: generated).")] = None,
    region: Annotated[Optional[str], typer.Option(help="Region or zone (default: the catalog row's).")] = None,
    image: Annotated[Optional[str], typer.Option(help="Start from this image (gpuplan image name or provider id); skips bootstrap.")] = None,
    plan: Annotated[Optional[Path], typer.Option(help="Provision the recommended plan saved by `gpuplan estimate --save`.")] = None,
    ttl: Annotated[Optional[str], typer.Option(help="The cloud itself stops/releases the machines after this long (4h, 90m).")] = None,
    spot: Annotated[bool, typer.Option(help="Ask for spot/low-priority capacity where the provider has it.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be created and its yen per hour; create nothing.")] = False,
    no_bootstrap: Annotated[bool, typer.Option("--no-bootstrap", help="Do not run the setup playbooks after creating.")] = False,
    playbook: Annotated[Optional[list[str]], typer.Option(help="Playbooks to run after creating (default: the standard GPU stack).")] = None,
    keep_on_failure: Annotated[bool, typer.Option(help="If a create fails, keep what was made (default: remove it).")] = False,
) -> None:
    """Create a cluster of GPU machines, then bootstrap them."""
    from gpuplan import lifecycle
    from gpuplan.units import parse_count, parse_duration

    setup_mode = "scratch"
    if plan is not None:
        if target or count:
            raise UsageError("give either an instance type and count or --plan, not both")
        p = _read_plan(plan)
        offer = _resolve(f"{p['provider']}:{p['instance_type']}", region or p.get("region"))
        n = int(p["count"])
        setup_mode = p.get("setup", "scratch")
        spot = spot or p.get("market") == "spot"  # a plan made with `estimate --spot` on a spot price
    else:
        if not target:
            raise UsageError("name what to provision, e.g. `gpuplan provision nc6 x4`, or give --plan plan.json")
        offer = _resolve(target, region)
        n = parse_count(count or "x1")
    ttl_s = parse_duration(ttl, "--ttl") if ttl is not None else None
    if name is not None:  # --name "" is a mistake, not a request for a generated name
        lifecycle.check_name(name)
    req = lifecycle.request_from_offer(offer, n, name=name, image=image, ttl_s=ttl_s, spot=spot, region=region)

    out = _out_console()
    per_hour = offer.price_jpy_per_hour
    if dry_run:
        total = per_hour * n if per_hour is not None else None
        out.print(f"would create cluster [bold]{req.name}[/bold]: {n}x {offer.provider}:{offer.name} in {req.region}")
        out.print(f"  GPUs {offer.gpu} x{offer.gpu_count} per machine, {offer.vcpus} vCPUs each, {offer.vcpus * n} vCPUs in all")
        out.print(f"  {yen(per_hour)}/h per machine, {yen(total)}/h for the cluster "
                  f"(catalog {offer.as_of or '?'}, {offer.source or 'no source'})")
        if setup_mode == "image" and not image:
            out.print("  setup from an image: one builder machine is set up and captured first, then the workers start from it")
        if ttl_s:
            out.print(f"  released by the cloud after {ttl}")
        return

    err = _err_console()
    state = _open_state()
    prov = lifecycle.get_provider(req.provider)
    if setup_mode == "image" and not image and n > 1:
        from gpuplan import images

        built = images.build(state, prov, offer, f"{req.name}-img", playbooks=playbook, progress=_progress(err))
        req = lifecycle.request_from_offer(offer, n, name=req.name, image=built.name, ttl_s=ttl_s, spot=spot,
                                           region=region)
    cluster = lifecycle.provision(state, prov, req, progress=_progress(err), keep_on_failure=keep_on_failure)
    if not (no_bootstrap or req.image):
        _bootstrap(state, cluster.name, playbook, err)
    _print_status(out, lifecycle.status(state, cluster.name))


def _bootstrap(state, cluster: str, playbooks: list[str] | None, err) -> None:
    try:
        from gpuplan.playbook import bootstrap_cluster
    except ImportError:  # the bootstrap executor is not installed in this build
        err.print("bootstrap skipped: gpuplan.playbook is unavailable; run `gpuplan bootstrap` later")
        return
    bootstrap_cluster(state, cluster, playbooks or None, {}, progress=_progress(err))


def _print_status(out, statuses) -> None:
    from rich.table import Table

    from gpuplan.units import format_duration

    if not statuses:
        out.print("no clusters; `gpuplan provision nc6 x4` creates one")
        return
    for s in statuses:
        c = s.cluster
        ttl = f", released in {format_duration(max(0, s.ttl_left_s))}" if s.ttl_left_s is not None else ""
        out.print(
            f"[bold]{c.name}[/bold]  {c.count}x {c.provider}:{c.size} in {c.region}  {c.status}  "
            f"up {format_duration(s.uptime_s)}  ≈{yen(s.yen_so_far)} so far "
            f"({yen(c.price_jpy_per_hour)}/h per machine){ttl}"
        )
        # Addresses are what a user copies from here: never truncate them (ids are in --format json).
        table = Table(show_edge=False, box=None, padding=(0, 2))
        table.add_column("node", overflow="fold")
        table.add_column("status")
        table.add_column("ssh address", no_wrap=True)
        table.add_column("private", no_wrap=True)
        table.add_column("GPUs", justify="right")
        for nd in s.nodes:
            address = f"{nd.public_ip or nd.private_ip}:{nd.ssh_port}" if (nd.public_ip or nd.private_ip) else "-"
            table.add_row(nd.name, nd.status, address, nd.private_ip or "-", str(nd.gpus))
        out.print(table)


def status(
    cluster: Annotated[Optional[str], typer.Argument(help="One cluster (default: all).")] = None,
    format: Annotated[str, typer.Option("--format", help="table or json.")] = "table",
) -> None:
    """Clusters, nodes, addresses, uptime and yen so far (from the cost ledger)."""
    from gpuplan import lifecycle

    if format not in ("table", "json"):
        raise UsageError(f"bad --format {format!r}: use table or json")
    statuses = lifecycle.status(_open_state(), cluster)
    if format == "json":
        print(json.dumps([_status_json(s) for s in statuses], indent=2))
    else:
        _print_status(_out_console(), statuses)


def _status_json(s) -> dict:
    c = s.cluster
    return {
        "name": c.name, "provider": c.provider, "region": c.region, "instance_type": c.size, "count": c.count,
        "status": c.status, "uptime_s": s.uptime_s, "machine_seconds": s.machine_seconds,
        "yen_so_far": int(s.yen_so_far.quantize(Decimal(1), rounding=ROUND_HALF_UP)),
        "price_jpy_per_hour": str(c.price_jpy_per_hour) if c.price_jpy_per_hour is not None else None,
        "ttl_left_s": s.ttl_left_s,
        "nodes": [{"name": n.name, "status": n.status, "public_ip": n.public_ip, "private_ip": n.private_ip,
                   "ssh_port": n.ssh_port, "gpus": n.gpus, "id": n.provider_id} for n in s.nodes],
    }


def teardown(
    cluster: Annotated[Optional[str], typer.Argument(help="The cluster to remove.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every cluster in the state.")] = False,
    images: Annotated[bool, typer.Option("--images", help="Also delete every image gpuplan built (with --sweep: stray tagged images too).")] = False,
    sweep: Annotated[bool, typer.Option("--sweep", help="Find and delete gpuplan-tagged resources the state does not know.")] = False,
    provider: Annotated[Optional[list[str]], typer.Option(help="Providers to sweep (default: all installed).")] = None,
    region: Annotated[Optional[list[str]], typer.Option(help="Regions to sweep besides those the state knows.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="With --sweep: list what would be deleted.")] = False,
) -> None:
    """Remove everything a cluster owns; idempotent and resumable (run it again to finish)."""
    from gpuplan import lifecycle

    if not (cluster or all_ or sweep or images):
        raise UsageError("name a cluster, or use --all, --sweep or --images (`gpuplan status` lists clusters)")
    if cluster and all_:
        raise UsageError("give a cluster name or --all, not both")
    state = _open_state()
    err = _err_console()
    out = _out_console()
    names = [c.name for c in state.clusters()] if all_ else ([cluster] if cluster else [])
    if all_ and not names and not (images or sweep):
        out.print("no clusters in the state; nothing to tear down (`--sweep` looks for tagged leftovers in the clouds)")
    failures = []
    for name in names:
        row = state.cluster(name)
        if row is None:
            raise UsageError(f"no cluster named {name!r}; `gpuplan status` lists them")
        try:
            report = lifecycle.teardown(state, lifecycle.get_provider(row.provider), name, progress=_progress(err))
            out.print(f"{name}: deleted {len(report.deleted)} resource(s); nothing of it is left")
        except Exception as exc:  # keep going with the other clusters; report all at the end
            if not all_:
                raise
            failures.append(f"{name}: {exc}")
    if images:
        from gpuplan import images as image_service

        for row in state.images():
            image_service.delete(state, lifecycle.get_provider(row.provider), row.name, progress=_progress(err))
            out.print(f"image {row.name}: deleted")
    if sweep:
        from gpuplan import provider as registry

        for pname in provider or registry.available():
            try:
                prov = lifecycle.get_provider(pname)
                prov.check_credentials()
            except UsageError as exc:
                if provider:
                    raise
                err.print(f"[dim]sweep: skipping {pname}: {exc}[/dim]")
                continue
            regions = lifecycle.sweep_regions(state, prov, region or [])
            strays = lifecycle.sweep(state, prov, regions, include_images=images, delete=not dry_run,
                                     progress=_progress(err))
            verb = "would delete" if dry_run else "deleted"
            out.print(f"sweep {pname} ({', '.join(regions) or 'no regions'}): {verb} {len(strays)} stray resource(s)")
            for r in strays:
                out.print(f"  {r.kind} {r.id} {r.region} {r.tags.get('gpuplan-cluster', '')}")
    if failures:
        raise UsageError("; ".join(failures) + " — run `gpuplan teardown --all` again")


@image_app.command("build")
def image_build(
    target: Annotated[str, typer.Argument(help="Instance type or alias the image is built on: nc6, aws:g4dn.xlarge.")],
    name: Annotated[Optional[str], typer.Option("--name", "-n", help="Image name (default: <type>-<date>).")] = None,
    region: Annotated[Optional[str], typer.Option(help="Region (default: the catalog row's).")] = None,
    playbook: Annotated[Optional[list[str]], typer.Option(help="Playbooks to bake in (default: the standard GPU stack).")] = None,
) -> None:
    """Builder machine -> bootstrap -> capture -> builder deleted; the image is recorded in the state."""
    from gpuplan import images, lifecycle

    offer = _resolve(target, region)
    lifecycle.check_not_retired(offer)
    state = _open_state()
    err = _err_console()
    prov = lifecycle.get_provider(offer.provider)
    row = images.build(state, prov, offer, name, playbooks=playbook, region=region, progress=_progress(err))
    _out_console().print(f"image {row.name} ready: {row.provider}/{row.region} {row.provider_id}; "
                         f"use it with `gpuplan provision {target} x4 --image {row.name}`")


@image_app.command("list")
def image_list() -> None:
    """Images gpuplan has built."""
    from rich.table import Table

    rows = _open_state().images()
    if not rows:
        _out_console().print("no images; `gpuplan image build nc6` makes one")
        return
    table = Table(box=None, padding=(0, 2))
    for col in ("name", "provider", "region", "built on", "status", "id", "playbooks", "created"):
        table.add_column(col)
    for r in rows:
        table.add_row(r.name, r.provider, r.region, r.size, r.status, r.provider_id or "-", r.playbooks,
                      r.created_at.strftime("%Y-%m-%d %H:%M"))
    _out_console().print(table)


@image_app.command("delete")
def image_delete(name: Annotated[str, typer.Argument(help="Image name.")]) -> None:
    """Delete one image and its snapshots/disks."""
    from gpuplan import images, lifecycle

    state = _open_state()
    row = state.image(name)
    if row is None:
        raise UsageError(f"no image named {name!r}; `gpuplan image list` shows them")
    images.delete(state, lifecycle.get_provider(row.provider), name, progress=_progress(_err_console()))
    _out_console().print(f"image {name}: deleted")


def register(app: typer.Typer) -> None:
    app.command()(provision)
    app.command()(status)
    app.command()(teardown)
    app.add_typer(image_app, name="image")
