"""`gpuplan provision`, `gpuplan status`, `gpuplan teardown` and `gpuplan image ...`."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from gpuplan.cli import shapes
from gpuplan.cli.shapes import owned
from gpuplan.cli.tables import LiveView, working
from gpuplan.errors import UsageError
from gpuplan.planning import fmt

image_app = typer.Typer(help="Build, list and delete captured machine images (setup done once, reused).",
                        no_args_is_help=True)


def _err_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False, markup=False, soft_wrap=True)  # names and messages as written


def _out_console():
    from rich.console import Console

    return Console(highlight=False, markup=False, soft_wrap=True)


def _progress(console):
    from rich.text import Text

    return lambda message: console.print(Text.assemble(("… ", "dim"), message), soft_wrap=True)


def _open_state():
    from gpuplan.store.state import State

    return State.open_default()


# --- asking before creating or deleting ----------------------------------------------------

YES_HELP = "Do not ask; go ahead (needed when stdin is not a terminal)."
PROJECT_HELP = ("The project the spend counts to and whose monthly budget must hold it (default: config.yaml's"
                " project:, else default; docs/teams.md).")
SSH_FROM_HELP = ("Let SSH in from this address or CIDR only (default: providers.<name>.ssh_cidr, else your "
                 "public address, detected); 0.0.0.0/0 opens it to everyone.")


def _need_answer(yes: bool, doing: str) -> None:
    """Before anything is shown or done: without --yes a person must be there to answer."""
    if not yes and not (sys.stdin is not None and sys.stdin.isatty()):
        from gpuplan.fleet.preflight import no_terminal

        raise UsageError(no_terminal(doing).line)


def _confirm(lines: list[str], question: str, yes: bool, default: bool) -> None:
    """Show what is about to happen (stderr); go on with --yes or a yes typed at the terminal."""
    err = _err_console()
    _print_lines(err, lines)
    if yes:
        return
    _need_answer(yes, question.lower().rstrip("?"))  # where nothing was asked before the lines
    if not typer.confirm(question, default=default, err=True):
        err.print("aborted: nothing was changed")
        raise typer.Exit(1)


def _power_words(per_hour, n: int = 1) -> str:
    """An owned host's price in words: its power an hour, or why it is not counted."""
    if per_hour is None:
        return "power not counted: give the hosts power_watts in the inventory (nothing else bills by the hour)"
    return (f"power {fmt.rate(per_hour)}/h per machine, {fmt.rate(per_hour * n)}/h for the cluster"
            " (power_watts x the catalog's power price; nothing else bills by the hour)")


def _on_basis(yen, listed: str):
    """Yen of a price listed on `listed` ("included", "excluded", "unknown": market/tax.py) on the
    estimate's default tax basis, and that basis in words ("as listed" where the row does not say):
    provision, status and teardown say a cluster's yen alike (issue 42: status and teardown showed
    GCP's ¥/h without tax, provision with it)."""
    from gpuplan.market import tax

    basis = tax.on_basis(yen, listed, tax.DEFAULT) if yen is not None else None
    return basis, (tax.said(tax.DEFAULT) if listed in tax.BASES else "as listed")


def _rent_words(offer, per_hour, n: int) -> str:
    """A rented machine's price an hour on the estimate's tax basis (issue 33: the estimate showed
    AWS's g4dn.xlarge with tax, provision the same row without), and as listed where that differs."""
    if per_hour is None:
        return "?/h per machine (the catalog has no price)"
    basis, said = _on_basis(per_hour, offer.tax)
    listed = "" if basis == per_hour else f"; listed {fmt.rate(per_hour)}/h without it"
    return f"{fmt.rate(basis)}/h per machine, {fmt.rate(basis * n)}/h for the cluster ({said}{listed})"


def _create_lines(o, quota: list | None = None, lifetime: str | None = None) -> list[str]:
    """What a provision (or an image builder) will create, what it costs per hour (owned hosts:
    their power), the quota it was checked against, how long it lives (`lifetime`, else the TTL
    and idle stop), where SSH comes from, and the order's notes (spot price, image setup)."""
    offer, req = o.offer, o.request
    n = req.count
    per_hour = offer.price_jpy_per_hour
    mine = owned(offer.provider)
    lines = [
        f"create cluster {req.name}: {n}x {offer.provider}:{offer.name} in {req.region}",
        f"  GPUs {offer.gpu} x{offer.gpu_count} per machine"
        + (f", {offer.vcpus} vCPUs each, {offer.vcpus * n} vCPUs in all" if offer.vcpus else ""),
        f"  {_power_words(per_hour, n)} ({offer.source or 'no source'})" if mine else
        f"  {_rent_words(offer, per_hour, n)} (catalog {offer.as_of or '?'}, {offer.source or 'no source'})",
    ]
    caps = [f"{fmt.yen(c)} a {per}" for c, per in ((offer.daily_cap_jpy, "day"), (offer.monthly_cap_jpy, "month")) if c]
    if caps:  # issue 22: Sakura VRT bills the lesser of hourly + daily, and monthly
        lines.append(f"  billed at most {' and '.join(caps)} per machine (the lesser of hourly + daily, and monthly)")
    for other, part in zip(getattr(o, "more", ()), req.more):  # a mixed fleet: its other sizes, same cluster
        price = other.price_jpy_per_hour
        lines += [
            f"  and {part.count}x {other.provider}:{other.name}: GPUs {other.gpu} x{other.gpu_count} per machine,"
            f" {other.vcpus * part.count} vCPUs in all, {fmt.yen(price)}/h per machine"
            f" ({fmt.yen(price * part.count if price is not None else None)}/h)",
        ]
    if quota is not None:  # each tier's need in its own unit (QuotaUsage.wanted): GPUs, vCPUs, servers
        lines += [f"  quota {t.name} ({t.description}): {_units(need, t.unit)} needed, {t.free} free "
                  f"(limit {t.limit}, used {t.used}): ok" for t, need in quota] or ["  quota: the provider reports none"]
    lines += [f"  {line}" for line in _lifetime_lines(req, lifetime, mine)]
    if req.ssh_cidr:
        lines.append(f"  SSH from {req.ssh_cidr}" + ("  (every address: asked for)" if req.ssh_cidr == "0.0.0.0/0" else ""))
    return lines + [f"  {note}" for note in o.notes]


def _lifetime_lines(req, lifetime: str | None, mine: bool) -> list[str]:
    """How long the machines live and bill: one true line for each of TTL, idle stop, both and
    neither (issue 33: the "no TTL" warning followed a TTL, and --idle alone hid it)."""
    if lifetime:
        return [lifetime]
    if mine:
        return [f"owned hosts: claimed for {req.name} until `gpuplan teardown {req.name}` releases them (never deleted)"]
    from gpuplan.fleet.lifecycle import TTL_DOES

    lines = []
    if req.ttl_s:
        lines.append(f"TTL {fmt.duration(req.ttl_s)}: {TTL_DOES.get(req.provider, TTL_DOES[''])[0]}")
    if req.idle_s:
        from gpuplan.fleet import idle

        lines.append(f"idle stop: a machine with no batch for {fmt.duration(req.idle_s)} {idle.check(req.provider, req.idle_s).says}")
    if not req.ttl_s:
        lines.append(f"no TTL: a machine running a batch runs, and bills, until it has been idle {fmt.duration(req.idle_s)}"
                     f" or `gpuplan teardown {req.name}`" if req.idle_s else
                     f"no TTL: the machines run, and bill, until `gpuplan teardown {req.name}`")
    return lines


def _units(n: int, unit: str) -> str:
    """"1 host", "4 vCPUs": a quota's unit is written in the plural."""
    return fmt.plural(n, unit[:-1] if n == 1 and unit.endswith("s") else unit, many=unit)


def provision(
    target: Annotated[Optional[str], typer.Argument(help="Instance type or alias: nc6, aws:g4dn.xlarge, sakura:h100x1.")] = None,
    count: Annotated[Optional[str], typer.Argument(help="How many machines, such as x4.")] = None,
    name: Annotated[Optional[str], typer.Option("--name", "-n", help="Cluster name (default: generated).", metavar="NAME")] = None,
    region: Annotated[Optional[str], typer.Option(metavar="NAME", help="Region or zone (default: the catalog row's).")] = None,
    image: Annotated[Optional[str], typer.Option(metavar="IMAGE", help="Start from this image (gpuplan image name or provider id); skips bootstrap.")] = None,
    plan: Annotated[Optional[Path], typer.Option(metavar="FILE", help="Provision the recommended plan saved by `gpuplan estimate --save`.")] = None,
    ttl: Annotated[Optional[str], typer.Option(metavar="DURATION", help="After this long the cloud itself ends the machines (4h, 90m): AWS shuts them down and terminates them, GCP deletes them, Azure deallocates them, Sakura stops them.")] = None,
    idle: Annotated[Optional[str], typer.Option(metavar="DURATION", help="Each machine stops and releases itself after this long with no batch running (30m); AWS and Sakura.")] = None,
    spot: Annotated[bool, typer.Option("--spot", help="Ask for spot/low-priority capacity where the provider has it.")] = False,
    gpus: Annotated[Optional[str], typer.Option("--gpus", metavar="MODEL[:N]", help="Instead of TARGET: the cheapest size an hour with these GPUs in each machine (V100:4, A100, 24GB), in --region where given.")] = None,
    max_yen_per_hour: Annotated[Optional[str], typer.Option("--max-yen-per-hour", metavar="YEN", help="Refuse, before anything is made, machines that together cost more than this many yen an hour (tax included).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be created and its yen per hour; create nothing.")] = False,
    no_bootstrap: Annotated[bool, typer.Option("--no-bootstrap", help="Do not run the setup playbooks after creating.")] = False,
    playbook: Annotated[Optional[list[str]], typer.Option(metavar="PLAYBOOK", help="Playbooks to run after creating (default: the standard GPU stack).")] = None,
    keep_on_failure: Annotated[bool, typer.Option("--keep-on-failure", help="If a create fails, keep what was made (default: remove it).")] = False,
    ssh_from: Annotated[Optional[str], typer.Option("--ssh-from", help=SSH_FROM_HELP, metavar="CIDR")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help=YES_HELP)] = False,
    format: Annotated[str, shapes.format_option()] = "table",
    project: Annotated[Optional[str], typer.Option("--project", help=PROJECT_HELP, metavar="NAME")] = None,
) -> None:
    """Create a cluster of GPU machines, then bootstrap them. Asks first (shows machines, yen
    per hour, the quota check and the TTL) unless --yes. In a project with a budget this month,
    the machines' yen for their --ttl must fit what is left (docs/teams.md)."""
    from gpuplan import budget, team
    from gpuplan.fleet import lifecycle, preflight, provision

    team.user()  # a bad GPUPLAN_USER or --project: refused before anything
    team.choose(project)

    as_json = shapes.check_format(format)
    if gpus is not None:  # `provision --gpus V100:4`: the cheapest size an hour that has them
        if plan is not None or (target is not None and not target.lower().lstrip("x×").isdigit()):
            raise UsageError("--gpus picks the size: give --gpus or TARGET (or --plan), not both")
        if target is not None:  # `provision --gpus V100:4 x2`: the count took TARGET's place
            target, count = None, target
        target, region = _cheapest_with(gpus, region, spot)
    # everything that needs no cloud call, checked at once before anything (and by --dry-run)
    ask = preflight.ProvisionAsk(target, count, plan=plan, region=region, name=name, image=image, ttl=ttl, spot=spot,
                                 idle=idle, playbooks=tuple(playbook or ()), bootstrap=not no_bootstrap,
                                 ssh_from=ssh_from)
    o = preflight.provision(ask, dry_run=dry_run, yes=yes, interactive=sys.stdin is not None and sys.stdin.isatty())
    if max_yen_per_hour is not None:  # issue 44: a ceiling on the rate, judged tax included as the estimate's
        from gpuplan.run import failover

        failover.refuse_over_rate([(o.offer, o.request.count), *zip(o.more, (r.count for r in o.request.more))],
                                  failover.parse_rate_cap(max_yen_per_hour), what="the machines")
    _say_mapped(o)
    spend, spend_what = budget.provision_spend(o.request)
    if dry_run:
        from gpuplan.store.state import State

        peek = State.open_existing()
        if spend is None:
            budget.refuse_unbounded(peek, team.current().project, "this provision")
        else:
            budget.check_spend(peek, team.current().project, spend, spend_what)
        lines = _create_lines(o) + [f"  {n}" for n in provision.dry_run_notes(o)]
        lines[0] = "would " + lines[0]
        if as_json:
            shapes.emit(shapes.order(o, True, lines))
        else:
            _print_lines(_out_console(), lines)
        return
    err = _err_console()
    state = _open_state()
    prov = lifecycle.get_provider(o.request.provider)
    o, quota = provision.check(state, prov, o, ssh_from)
    if spend is None:
        budget.refuse_unbounded(state, team.current().project, "this provision")
    else:
        budget.check_spend(state, team.current().project, spend, spend_what)  # before the question
    _confirm(_create_lines(o, quota), "Create these machines?", yes, default=True)
    held = _Held(budget.reserve_spend(state, team.current().project, spend, spend_what, "ttl", o.request.name)
                 if spend else None)  # checked and recorded in one transaction
    try:
        with LiveView(err, machines=lambda: [n.name for n in state.nodes(o.request.name)],
                      title=f"provisioning {o.request.name}") as view:
            cluster = _provision_or_next(state, prov, o, view, ask, held, yes=yes, playbook=playbook,
                                         bootstrap=not no_bootstrap, keep_on_failure=keep_on_failure,
                                         rate_cap=max_yen_per_hour)
    except BaseException:
        if held.rid is not None and (state.cluster(o.request.name) is None
                                     or state.cluster(o.request.name).status == "gone"):
            state.release_commitments(rid=held.rid)  # nothing of it bills
        raise
    if as_json:
        shapes.emit(shapes.cluster(lifecycle.status(state, cluster.name)[0]))
    else:
        _print_status(_out_console(), lifecycle.status(state, cluster.name))


@dataclass
class _Held:
    rid: str | None  # the budget reservation the provision holds (None: none, nothing to hold)


def _provision_or_next(state, prov, o, view, ask, held: _Held, *, yes: bool, playbook, bootstrap: bool,
                       keep_on_failure: bool, rate_cap: str | None):
    """provision.provision; where every zone of the order's region refused it (CapacityUnavailable)
    and it came from a saved plan (`--plan`), the plan's next plan (issue 44: run/failover.py
    next_for_saved, from what the plan was planned with, without the refused offer, within its
    max_yen, deadline, max_yen_per_hour and failover), saved beside it as PLAN.next.json, the
    budget reservation made to hold its spend, said in one line, asked about once (unless -y),
    and created in turn. Raises the last refusal, with why no next plan was taken."""
    from gpuplan import budget, team
    from gpuplan.cli import estimate as estimate_cli
    from gpuplan.errors import CapacityUnavailable
    from gpuplan.fleet import lifecycle, provision
    from gpuplan.planning import saved_plan
    from gpuplan.run import failover

    plan = ask.plan
    first = o
    tried: list[str] = []
    plans = 0
    written: Path | None = None
    try:
        while True:
            try:
                return provision.provision(state, prov, o, playbooks=playbook, bootstrap=bootstrap,
                                           keep_on_failure=keep_on_failure, progress=view.step)
            except CapacityUnavailable as exc:
                if plan is None:
                    raise
                tried.append(f"{o.request.count}x {o.offer.provider}:{o.offer.name} in {o.request.region}")
                if keep_on_failure:
                    exc.args = (f"{exc}; no next plan is tried with --keep-on-failure (what was made is kept)",)
                    raise
                try:
                    est, rec, policy = failover.next_for_saved(
                        saved_plan.load(plan), first.offer, "spot" if first.request.spot else "on-demand",
                        estimate_cli.plan_estimate, failover.parse_rate_cap(rate_cap), ask.region)
                except UsageError as why:
                    exc.args = (f"{exc}; no next plan: {why}",)
                    raise exc from None
                if rec is None or plans >= policy.plans:
                    exc.args = (f"{exc}; no next plan within the plan's max_yen, max_yen_per_hour, deadline and"
                                f" failover (tried {', '.join(tried)})",)
                    raise
            plans += 1
            written = plan.with_name(f"{plan.stem}.next{plan.suffix or '.json'}")
            estimate_cli.save_plan(est, written, planned=saved_plan.load(plan).planned_with)
            nxt = provision.order(None, None, plan=written, region=ask.region, name=o.request.name,
                                  image=ask.image, ttl=ask.ttl, spot=ask.spot, idle=ask.idle)
            nxt_prov = lifecycle.get_provider(nxt.request.provider)
            nxt, quota = provision.check(state, nxt_prov, nxt, ask.ssh_from)
            if rate_cap is not None:
                failover.refuse_over_rate([(nxt.offer, nxt.request.count),
                                           *zip(nxt.more, (r.count for r in nxt.request.more))],
                                          failover.parse_rate_cap(rate_cap), what="the next plan's machines")
            spend, _ = budget.provision_spend(nxt.request)
            what = f"next plan's ({nxt.request.count}x {nxt.offer.provider}:{nxt.offer.name}) yen"
            if spend is None:
                budget.refuse_unbounded(state, team.current().project, "the next plan")
            elif held.rid is not None:
                budget.re_reserve_spend(state, held.rid, team.current().project, spend, what, "ttl", o.request.name)
            elif spend:
                held.rid = budget.reserve_spend(state, team.current().project, spend, what, "ttl", o.request.name)
            view.step(f"{tried[-1]} refused in every zone; the next plan: {nxt.request.count}x"
                      f" {nxt.offer.provider}:{nxt.offer.name} in {nxt.request.region}, {fmt.yen(rec.cost)} for the"
                      f" batch (saved to {written})")
            with view.paused():  # the live display gives the terminal to the question
                _confirm(_create_lines(nxt, quota), "Create these machines instead?", yes, default=True)
            o, prov = nxt, nxt_prov
    except BaseException:
        if written is not None:  # a next plan not made leaves no file
            written.unlink(missing_ok=True)
        raise


def _say_mapped(o) -> None:
    if o.mapped:  # a retired size and its successor: one line, before anything else
        _err_console().print(o.mapped, markup=False, soft_wrap=True)


def _print_lines(console, lines: list[str]) -> None:
    for line in lines:
        console.print(line, markup=False, soft_wrap=True)


# What rich strips from text it writes (rich.control.STRIP_CONTROL_CODES: bell, backspace, vertical
# tab, form feed, carriage return; tests/test_status_output.py checks they agree).
_CONTROL_CODES = "\a\b\v\f\r"


def _plain_stdout() -> bool:
    """Whether rich would write stdout as a file, not a terminal: no styles, the characters as they
    are (rich's Console.is_terminal for a process outside IDLE and Jupyter: stdout not a tty, and
    neither TTY_COMPATIBLE nor FORCE_COLOR set, which rich is left to read). Then status writes
    its clusters without importing rich (issue 47: 0.04 s of a 0.5 s `gpuplan status`)."""
    import os

    if os.environ.get("TTY_COMPATIBLE", "") in ("0", "1") or "FORCE_COLOR" in os.environ:
        return False
    try:
        return not sys.stdout.isatty()
    except (AttributeError, ValueError):  # closed: rich's path says so as before
        return False


def _print_status(out, statuses) -> None:
    """One header line per cluster, then its nodes in aligned columns. Laid out here and
    printed in one call: a rich Table per cluster took 15 s for 1,000 clusters. `out`: a rich
    Console, or None to write the clusters to stdout as plain characters (_plain_stdout)."""
    from gpuplan.fleet.lifecycle import TTL_DOES

    if not statuses:
        out = out or _out_console()
        out.print("no clusters; `gpuplan launch batch.yaml` plans, builds and runs a batch on whatever the pick is"
                  " (docs/batch.md), or `gpuplan provision NC4as_T4_v3 x2` creates one")
        return
    parts: list[tuple[str, str]] = []  # (text, style): a rich Text on a terminal, plain characters elsewhere
    from gpuplan import team

    me = team.user()
    for s in statuses:
        c = s.cluster
        ttl = (f", TTL: {TTL_DOES.get(c.provider, TTL_DOES[''])[1]} {fmt.duration(max(0, s.ttl_left_s))}"
               if s.ttl_left_s is not None else "")
        parts.append((c.name, "bold"))
        if c.user not in (me, "unknown"):  # another user's: say whose (and for which project)
            parts.append((f"  ({c.user}'s, project {c.project})", ""))
        if owned(c.provider):  # no rental bill: their power, where the inventory gives power_watts
            cost = (f"power ≈{fmt.yen(s.yen_so_far)} so far ({fmt.rate(c.price_jpy_per_hour)}/h per machine)"
                    if c.price_jpy_per_hour is not None else "power not counted (no power_watts in the inventory)")
            cost += f"; owned hosts, released by `gpuplan teardown {c.name}`"
        else:  # on the estimate's tax basis, as provision said it (the ledger bills as listed)
            listed = c.spec.get("tax") or "unknown"
            so_far, said = _on_basis(s.yen_so_far, listed)
            cost = f"≈{fmt.yen(so_far)} so far ({fmt.rate(_on_basis(c.price_jpy_per_hour, listed)[0])}/h per machine; {said})"
        lines = [f"  {c.count}x {c.provider}:{c.size} in {c.region}  {c.status}  up {fmt.duration(s.uptime_s)}"
                 f"  {cost}{ttl}\n"]
        # Addresses are what a user copies from here: never truncated (ids are in --format json).
        rows = [("node", "status", "ssh address", "private", "GPUs")]
        for nd in s.nodes:
            address = f"{nd.public_ip or nd.private_ip}:{nd.ssh_port}" if (nd.public_ip or nd.private_ip) else "-"
            rows.append((nd.name, nd.status, address, nd.private_ip or "-", str(nd.gpus)))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        for r in rows:
            cells = [r[i].ljust(widths[i]) for i in range(4)] + [r[4].rjust(widths[4])]
            lines.append("  " + "    ".join(cells).rstrip() + "\n")
        parts.append(("".join(lines), ""))
    if out is None or (not out.is_terminal and out.file is sys.stdout):  # a pipe or a file: the characters
        # rich would write, without its pass over every line (0.3 s of `status` for 1,000 clusters); control
        # codes stripped as it does
        plain = "".join(t for t, _ in parts).rstrip()
        if any(code in plain for code in _CONTROL_CODES):  # rare: translate() is slow on a big string
            from rich.control import strip_control_codes

            plain = strip_control_codes(plain)
        sys.stdout.write(plain + "\n")
        return
    from rich.text import Text

    text = Text()
    for t, style in parts:
        text.append(t, style=style or None)
    text.rstrip()
    out.print(text, soft_wrap=True)


def _cheapest_with(gpus: str, region: str | None, spot: bool) -> tuple[str, str]:
    """`provision --gpus`: the catalog's size with those GPUs that costs least an hour (tax
    included; spot rows with --spot), in `region` where given, said in one line on stderr;
    (PROVIDER:SIZE, its region)."""
    from gpuplan.market import catalog, tax
    from gpuplan.market import gpus as gpu_asks
    from gpuplan.planning import fmt

    cat = catalog.with_tax(catalog.load(), tax.DEFAULT)
    cloud = [o for o in cat.offers if o.kind == "cloud"]
    if region is not None and not any(o.region.lower() == region.lower() and (o.market == "on-demand" or spot)
                                      for o in cloud):
        raise UsageError(f"--region {region}: no cloud offers there in catalog {cat.snapshot}; see `gpuplan catalog`")
    rows = gpu_asks.by_the_hour(cloud, gpu_asks.parse(gpus), 1, {}, spot=spot, region=region)
    if not rows:
        raise UsageError(f"--gpus {gpus}: no offer with a price has them; see `gpuplan catalog`")
    o = rows[0].offer
    print(f"--gpus {gpus}: {o.provider}:{o.name} in {o.region}{' (spot)' if o.market == 'spot' else ''}, {o.gpu_count}x"
          f" {o.gpu}, the cheapest an hour ({fmt.yen(rows[0].yen_per_hour)} a machine, tax included)", file=sys.stderr)
    return f"{o.provider}:{o.name}", o.region


ALL_USERS_HELP = "Every user's, not only yours (rows from before gpuplan kept users show to everyone)."
ONLY_PROJECT_HELP = "Only this project's."


def status(
    cluster: Annotated[Optional[str], typer.Argument(help="One cluster (default: all).")] = None,
    format: Annotated[str, shapes.format_option()] = "table",
    refresh: Annotated[bool, typer.Option("--refresh", "-r", help="First ask each cluster's provider what its machines are now, bring the state in line and say what differed.")] = False,
    all_users: Annotated[bool, typer.Option("--all-users", help=ALL_USERS_HELP)] = False,
    project: Annotated[Optional[str], typer.Option("--project", help=ONLY_PROJECT_HELP, metavar="NAME")] = None,
) -> None:
    """Clusters, nodes, addresses, uptime and yen so far (from the cost ledger): your own, unless
    --all-users (another user's cluster names its owner)."""
    from gpuplan import team
    from gpuplan.fleet import lifecycle

    me = team.user()
    only = team.check_name(project, "--project") if project is not None else None

    as_json = shapes.check_format(format)
    state = _open_state()
    if cluster and state.cluster(cluster) is None:
        raise UsageError(f"no cluster named {cluster!r}; `gpuplan status` lists them")
    if refresh:
        from gpuplan.fleet import reconcile

        err = _err_console()
        with working(err, "asking the providers what the clusters' machines are now"):
            found = reconcile.refresh(state, lifecycle.get_provider, cluster)
        for d in found:
            err.print(f"refresh: {d.text}")
        err.print(f"refresh: {fmt.plural(len(found), 'difference')} with the cloud" + ("" if found else "; the state matched"))
    statuses = [s for s in lifecycle.status(state, cluster)
                if cluster or team.visible(s.cluster.user, s.cluster.project, all_users, only, me)]
    if as_json:
        shapes.emit([shapes.cluster(s) for s in statuses])
    else:
        _print_status(None if _plain_stdout() else _out_console(), statuses)
        place = {s.cluster.name: i for i, s in enumerate(statuses)}  # in the clusters' order, then as submitted
        pending = [j for j in state.unfinished_jobs() if team.visible(j.user, j.project, all_users, only, me)]
        unfinished = sorted((j for j in pending if j.cluster in place), key=lambda j: place[j.cluster])
        if cluster is None and pending:  # batches of a backend without clusters (高火力 DOK: gpuplan run dok:PLAN)
            from gpuplan.run import backends

            unfinished += [j for j in pending if not backends.of(j).has_cluster]
        if unfinished:  # rich only where there is a batch to say
            _print_batches(state, _out_console(), unfinished)


def _print_batches(state, out, unfinished) -> None:
    """status's line per batch not over, as of the last look (`gpuplan jobs` reads the cluster)."""
    for j in unfinished:
        ok = state.job_counts(j.id).get("ok", 0)
        out.print(f"batch {j.id} on {j.cluster}: {j.state}, {ok} of {fmt.plural(j.total, 'item')}"
                  f" done when last looked at; `gpuplan jobs {j.cluster}` for now", markup=False)


def teardown(
    cluster: Annotated[Optional[str], typer.Argument(help="The cluster to remove.")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every cluster in the state.")] = False,
    images: Annotated[bool, typer.Option("--images", help="Also delete every image gpuplan built (with --sweep: stray tagged images too).")] = False,
    sweep: Annotated[bool, typer.Option("--sweep", help="Find and delete gpuplan-tagged resources of this installation the state does not know.")] = False,
    provider: Annotated[Optional[list[str]], typer.Option(metavar="NAME", help="Providers to sweep (default: all installed).")] = None,
    region: Annotated[Optional[list[str]], typer.Option(metavar="NAME", help="Regions to sweep besides those the state knows.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List what would be deleted; delete nothing.")] = False,
    grace: Annotated[str, typer.Option("--grace", help="With --sweep: leave resources younger than this alone (a provision may be making them).", metavar="DURATION")] = "30m",
    force: Annotated[bool, typer.Option("--force", help="With --sweep: take young resources too (no grace period). A cluster of another user: tear it down without asking (-y does not skip that question).")] = False,
    legacy_owner: Annotated[bool, typer.Option("--legacy-owner", help="With --sweep: also sweep resources tagged by gpuplan versions before per-installation owners (user-host; shared by all your installations).")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help=YES_HELP)] = False,
    format: Annotated[str, shapes.format_option()] = "table",
) -> None:
    """Remove everything a cluster owns; idempotent and resumable (run it again to finish). Asks
    first (shows what will be deleted) unless --yes."""
    from gpuplan.fleet import lifecycle
    from gpuplan.units import parse_duration

    if not (cluster or all_ or sweep or images):
        raise UsageError("name a cluster, or use --all, --sweep or --images (`gpuplan status` lists clusters)")
    if cluster and all_:
        raise UsageError("give a cluster name or --all, not both")
    grace_s = parse_duration(grace, "--grace")
    as_json = shapes.check_format(format)
    state = _open_state()
    err = _err_console()
    out = err if as_json else _out_console()  # with --format json, stdout holds the JSON alone
    doc: dict = {"dry_run": dry_run, "clusters": [], "images": [], "sweep": None}
    from gpuplan import team

    me = team.user()
    rows = state.clusters() if all_ else ([state.cluster(cluster)] if cluster else [])
    if all_:  # --all: your own clusters (and those older than users); another's only by its name
        others = [r for r in rows if r.user not in (me, team.UNKNOWN_USER)]
        rows = [r for r in rows if r not in others]
        if others:
            err.print(f"--all leaves {fmt.plural(len(others), 'cluster')} of other users alone ("
                      + ", ".join(f"{r.user}'s {r.name}" for r in others[:5]) + "); name one to tear it down", markup=False)
    # `--sweep --force NAME`: NAME may be a cluster of another installation under a shared owner
    take = [cluster] if cluster and sweep and force else []
    if take and rows[0] is None:
        rows = []
    if cluster and rows and rows[0] is None:
        raise UsageError(f"no cluster named {cluster!r}; `gpuplan status` lists them")
    if all_ and not rows and not (images or sweep):
        out.print("no clusters in the state; nothing to tear down (`--sweep` looks for tagged leftovers in the clouds)")
    image_rows = state.images() if images else []
    if dry_run:  # what a real run would delete, then nothing
        lines = [_teardown_line(state, row) for row in rows]
        lines += [f"delete image {r.name}: {r.provider}/{r.region} {r.provider_id or '-'} and its snapshots"
                  for r in image_rows]
        _print_lines(out, [f"would {line}" for line in lines])
        doc["clusters"] = [_teardown_json(state, row, None) for row in rows]
        doc["images"] = [{**shapes.image(r), "deleted": False} for r in image_rows]
        if sweep:
            doc["sweep"] = _sweep(state, provider, region, images, True, 0 if force else grace_s, legacy_owner, yes, out,
                                  err, take).as_json()
        if lines or not sweep:
            out.print("dry run: nothing was deleted")
        if as_json:
            shapes.emit(doc)
        return
    for row in rows:  # a teammate's batch is not killed by accident: -y does not answer this, --force does
        if row is not None and row.user not in (me, team.UNKNOWN_USER) and not force:
            question = f"{row.user}'s cluster {row.name}: tear it down? (it is not yours)"
            if not (sys.stdin is not None and sys.stdin.isatty()):
                raise UsageError(f"{row.user}'s cluster {row.name} is not yours (project {row.project}): gpuplan asks before"
                                 " tearing down another user's cluster, and -y does not answer that; answer at a terminal,"
                                 " or add --force")
            if not typer.confirm(question, default=False, err=True):
                err.print("aborted: nothing was changed")
                raise typer.Exit(1)
    if rows or image_rows:
        _need_answer(yes, "teardown")
        lines = [_teardown_line(state, row) for row in rows]
        lines += [f"delete image {r.name}: {r.provider}/{r.region} {r.provider_id or '-'} and its snapshots" for r in image_rows]
        _confirm(lines, "Delete all of this?", yes, default=False)
    failures = []
    for row in rows:
        try:
            with working(err, f"tearing down {row.name}") as step:
                report = lifecycle.teardown(state, lifecycle.get_provider(row.provider), row.name, progress=step)
            out.print(f"{row.name}: deleted {fmt.plural(len(report.deleted), 'resource')}; nothing of it is left", markup=False)
            doc["clusters"].append(_teardown_json(state, row, report.deleted))
        except Exception as exc:  # keep going with the other clusters; report all at the end
            if not all_:
                raise
            failures.append(f"{row.name}: {exc}")
            doc["clusters"].append({**_teardown_json(state, row, []), "error": str(exc)})
    if images:
        from gpuplan.fleet import images as image_service

        if not image_rows:
            out.print("no images in the state; nothing to delete" + ("" if sweep else
                      " (`--sweep --images` looks for tagged leftovers in the clouds)"))
        for row in image_rows:
            image_service.delete(state, lifecycle.get_provider(row.provider), row.name, progress=_progress(err))
            out.print(f"image {row.name}: deleted")
            doc["images"].append({**shapes.image(row), "status": "deleted", "deleted": True})
    if sweep:
        doc["sweep"] = _sweep(state, provider, region, images, dry_run, 0 if force else grace_s, legacy_owner, yes, out,
                              err, take).as_json()
    if as_json:
        shapes.emit(doc)
    if failures:
        raise UsageError("; ".join(failures) + " — run `gpuplan teardown --all` again")


def _teardown_json(state, row, deleted) -> dict:
    """A cluster of a teardown: its machines, and what was deleted (None: a dry run, nothing)."""
    nodes = [n for n in state.nodes(row.name) if n.provider_id]
    per_hour = row.price_jpy_per_hour * len(nodes) if row.price_jpy_per_hour is not None else None
    return {"name": row.name, "provider": row.provider, "region": row.region, "instance_type": row.size,
            "owned": owned(row.provider), "machines": [{"name": n.name, "id": n.provider_id} for n in nodes],
            "cluster_jpy_per_hour": shapes.exact(per_hour),
            "deleted": None if deleted is None else [shapes.resource(r, True) for r in deleted]}


def _teardown_line(state, row) -> str:
    nodes = [n for n in state.nodes(row.name) if n.provider_id]
    ids = ", ".join(f"{n.name} {n.provider_id}" for n in nodes[:8]) + (", ..." if len(nodes) > 8 else "")
    per_hour = row.price_jpy_per_hour * len(nodes) if row.price_jpy_per_hour is not None else None
    if owned(row.provider):
        rate = f"power {fmt.rate(per_hour)}/h"
    else:  # on the estimate's tax basis, as provision said it
        per_hour, said = _on_basis(per_hour, row.spec.get("tax") or "unknown")
        rate = f"{fmt.rate(per_hour)}/h, {said}"
    return (f"delete cluster {row.name} ({row.status}): {fmt.plural(len(nodes), 'machine')} of {row.provider}:{row.size} in "
            f"{row.region} ({rate}){': ' + ids if ids else ''}, and everything else tagged with it")


@dataclass
class _SweepOutcome:
    asked: list[str]  # providers whose resources were listed
    skipped: list[str]  # providers that could not be asked (credentials, SDK)
    found: list  # the stray Resources found
    deleted: list  # the Resources deleted
    kept: list  # (Resource, why) left alone

    def as_json(self) -> dict:
        gone = {(r.kind, r.id) for r in self.deleted}
        return {"asked": self.asked, "not_asked": self.skipped,
                "resources": [shapes.resource(r, (r.kind, r.id) in gone) for r in self.found],
                "kept": [{**shapes.resource(r, False), "why": why} for r, why in self.kept]}


def _sweep(state, provider, region, images: bool, dry_run: bool, grace_s: int, legacy: bool, yes: bool, out, err,
           take: list[str] | None = None) -> _SweepOutcome:
    """Find this installation's tagged resources the state does not know, ask, delete them one
    cluster at a time (each re-checked under its lock), and list the clusters left running.
    Clusters of other installations under a shared owner are kept unless named in `take`."""
    from gpuplan import config
    from gpuplan.fleet import lifecycle
    from gpuplan.fleet import provider as registry

    owners = lifecycle.sweep_owners(state, legacy)
    if config.owner():
        _print_lines(out, [f"owner {config.owner()!r} is shared (config.yaml `owner:`): clusters other installations "
                           "made under it are kept unless named (`gpuplan teardown --sweep --force NAME`)"])
    names = list(provider or registry.available())
    asked: list[str] = []
    skipped: list[str] = []
    strays: list = []
    deleted: list = []
    kept: list = []
    for pname in names:
        try:
            prov = lifecycle.get_provider(pname)
            prov.check_credentials()
        except UsageError as exc:
            if provider:
                raise
            err.print(f"sweep: skipping {pname}: {exc}", style="dim", soft_wrap=True)
            skipped.append(pname)
            continue
        regions = lifecycle.sweep_regions(state, prov, region or [])
        found = lifecycle.sweep_find(state, prov, regions, owners, include_images=images, grace_s=grace_s,
                                     take=take or ())
        asked.append(pname)
        strays += found.strays
        kept += found.spared
        where = f"sweep {pname} ({', '.join(regions) or 'no regions'})"
        for r, why in found.spared:
            out.print(f"  kept {_resource_line(r)}: {why}")
        _print_lines(out, [f"  not reached: {u}; anything of it is left as it is" for u in found.unreachable])
        if dry_run or not found.strays:
            out.print(f"{where}: would delete {fmt.plural(len(found.strays), 'stray resource')}" if dry_run
                      else f"{where}: no stray resources")
            for r in found.strays:
                out.print(f"  {_resource_line(r)}")
            continue
        _confirm([f"{where}: {fmt.plural(len(found.strays), 'stray resource')} tagged {' or '.join(owners)} that the state "
                  "does not know:"] + [f"  {_resource_line(r)}" for r in found.strays],
                 "Delete these stray resources?", yes, default=False)
        result = lifecycle.sweep_delete(state, prov, found.strays, progress=_progress(err))
        deleted += result.deleted
        kept += result.spared
        out.print(f"{where}: deleted {fmt.plural(len(result.deleted), 'stray resource')}", markup=False)
        for r in result.deleted:
            out.print(f"  {_resource_line(r)}")
        for r, why in result.spared:
            out.print(f"  kept {_resource_line(r)}: {why}")
    live = state.clusters()
    if live:
        out.print("clusters this state knows, left alone by the sweep (`gpuplan teardown NAME` removes one):")
        for c in live:
            out.print(f"  {c.name}  {c.status}  {c.count}x {c.provider}:{c.size} in {c.region}")
    if not asked:  # nothing was looked for: not a clean bill of health (issue 33)
        from gpuplan.errors import AuthMissing

        raise AuthMissing(f"sweep{' --dry-run' if dry_run else ''} asked no provider: {', '.join(skipped) or 'none'} could"
                          " not be asked (see the lines above); nothing was looked for: set up one provider's"
                          " credentials (`gpuplan check` says what is missing) and sweep again")
    found_words = (f"{fmt.plural(len(strays), 'stray resource')} found, none deleted (dry run)" if dry_run else
                   f"{fmt.plural(len(strays), 'stray resource')} found, {len(deleted)} deleted")
    out.print(f"sweep: asked {', '.join(asked)}{' (images too)' if images else ''}; {found_words}; "
              + (f"not asked: {', '.join(skipped)} (see the lines above)" if skipped else "every provider asked"),
              markup=False, soft_wrap=True)
    return _SweepOutcome(asked, skipped, strays, deleted, kept)


def _resource_line(r) -> str:
    from gpuplan.fleet.tags import TAG_CLUSTER

    return f"{r.kind} {r.id} {r.region} {r.tags.get(TAG_CLUSTER, '')}".rstrip()


@image_app.command("build")
def image_build(
    target: Annotated[str, typer.Argument(help="Instance type or alias the image is built on: nc6, aws:g4dn.xlarge.")],
    name: Annotated[Optional[str], typer.Option("--name", "-n", help="Image name (default: <type>-<date>).", metavar="NAME")] = None,
    region: Annotated[Optional[str], typer.Option(metavar="NAME", help="Region (default: the catalog row's).")] = None,
    playbook: Annotated[Optional[list[str]], typer.Option(metavar="PLAYBOOK", help="Playbooks to bake in (default: the standard GPU stack).")] = None,
    ssh_from: Annotated[Optional[str], typer.Option("--ssh-from", help=SSH_FROM_HELP, metavar="CIDR")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the builder machine and its yen per hour; create nothing.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help=YES_HELP)] = False,
) -> None:
    """Builder machine -> bootstrap -> capture -> builder deleted; the image is recorded in the
    state. Asks first unless --yes."""
    from gpuplan.fleet import images, lifecycle, provision

    o, name = provision.image_order(target, region, name)
    _say_mapped(o)
    lifetime = (f"the builder is deleted once image {name} is captured; the image's storage bills until "
                f"`gpuplan image delete {name}`")
    if dry_run:
        lines = _create_lines(o, lifetime=lifetime)
        lines[0] = f"would build image {name} on a builder: " + lines[0]
        _print_lines(_out_console(), lines)
        return
    _need_answer(yes, "image build")
    state = _open_state()
    prov = lifecycle.get_provider(o.offer.provider)
    o, quota = provision.check(state, prov, o, ssh_from)
    _confirm(_create_lines(o, quota, lifetime), f"Build image {name}?", yes, default=True)
    with working(_err_console(), f"building image {name}") as step:
        row = images.build(state, prov, o.offer, name, playbooks=playbook, region=region, progress=step,
                           ssh_cidr=o.request.ssh_cidr)
    _out_console().print(f"image {row.name} ready: {row.provider}/{row.region} {row.provider_id}; "
                         f"use it with `gpuplan provision {target} x4 --image {row.name}`")


@image_app.command("list")
def image_list(
    format: Annotated[str, shapes.format_option()] = "table",
) -> None:
    """Images gpuplan has built."""
    from gpuplan.cli import tables
    from gpuplan.cli.tables import Column

    as_json = shapes.check_format(format)
    rows = _open_state().images()
    if as_json:
        shapes.emit([shapes.image(r) for r in rows])
        return
    if not rows:
        _out_console().print("no images; `gpuplan image build NC4as_T4_v3` makes one")
        return
    columns = [Column(c) for c in ("name", "provider", "region", "built on", "status", "id")] + [
        Column("playbooks", wrap=True), Column("created")]
    tables.render(_out_console(), columns, [[r.name, r.provider, r.region, r.size, r.status, r.provider_id or "-",
                                             r.playbooks, r.created_at.strftime("%Y-%m-%d %H:%M")] for r in rows])


@image_app.command("delete")
def image_delete(
    name: Annotated[str, typer.Argument(help="Image name.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help=YES_HELP)] = False,
) -> None:
    """Delete one image and its snapshots/disks. Asks first unless --yes."""
    from gpuplan.fleet import images, lifecycle

    state = _open_state()
    row = state.image(name)
    if row is None:
        raise UsageError(f"no image named {name!r}; `gpuplan image list` shows them")
    _need_answer(yes, "image delete")
    _confirm([f"delete image {row.name}: {row.provider}/{row.region} {row.provider_id or '-'} and its snapshots"],
             "Delete this image?", yes, default=False)
    images.delete(state, lifecycle.get_provider(row.provider), name, progress=_progress(_err_console()))
    _out_console().print(f"image {name}: deleted")


def register(app: typer.Typer) -> None:
    app.command()(provision)
    app.command()(status)
    app.command()(teardown)
    app.add_typer(image_app, name="image")
