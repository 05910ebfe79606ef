"""`gpuplan catalog`: list the instance types, prices in yen and their sources, as of a snapshot;
`gpuplan catalog refresh`: fetch today's public prices into a new dated snapshot and show the diff."""

from __future__ import annotations

import csv
import json
import sys
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from gpuplan.errors import UsageError
from gpuplan.planning import fmt

_FORMATS = ("table", "json", "csv")
_FIELDS = (
    "provider", "name", "aliases", "region", "gpu", "gpu_count", "gpu_memory_gib", "vcpus", "ram_gib",
    "price", "currency", "price_unit", "price_jpy_per_hour", "billing_granularity_s", "billing_minimum_s",
    "daily_cap_jpy", "monthly_cap_jpy", "tax", "quota_family", "available_from", "retired_on", "successor", "kind",
    "market", "power_watts", "status", "source", "as_of", "notes",
)


def _plain(value: Any) -> Any:
    """JSON/CSV value: Decimals as exact strings ("91.80"), dates ISO, None stays None."""
    if isinstance(value, Decimal):
        return str(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, tuple):
        return list(value)
    return value


def _row(cat, offer) -> dict[str, Any]:
    row = {f: _plain(getattr(offer, f)) for f in _FIELDS if f != "status"}
    row["status"] = cat.offer_status(offer)
    return {f: row[f] for f in _FIELDS}


def _own_price(o) -> str:
    if o.price is None:
        return "-"
    unit = {"hour": "/h", "month": "/month", "purchase": " once"}[o.price_unit]
    sym = "¥" if o.currency == "JPY" else f"{o.currency} "
    return f"{sym}{o.price:,f}{unit}"


def _billing(o, short: bool = False) -> str:
    g, m = o.billing_granularity_s, o.billing_minimum_s
    if o.price_unit == "purchase":
        return "owned"
    if o.price_unit == "month":
        return "monthly"
    caps = [f"{fmt.yen(c)}/{per}" for c, per in ((o.daily_cap_jpy, "day"), (o.monthly_cap_jpy, "month")) if c]
    if short:
        step = {3600: "hourly"}.get(g, f"{g}s")
        step = f"{step}, min {m}s" if m and m != g else step
        return f"{step}, caps {' '.join(caps)}" if caps else step
    step = {3600: "hourly", 1: "per second"}.get(g, f"{g} s")
    step = f"{step} (min {m} s)" if m and m != g else step
    step += " per task" if o.kind == "task" else ""
    return f"{step}, at most {' or '.join(caps)}" if caps else step


catalog_app = typer.Typer(
    help="List instance types with GPU, price in their own currency and in yen per hour, billing, status and "
         "source; `gpuplan catalog refresh` fetches today's public prices into a new dated snapshot.",
    invoke_without_command=True,
)


@catalog_app.callback(invoke_without_command=True)
def catalog_command(
    ctx: typer.Context,
    provider: Annotated[Optional[str], typer.Option(help="Only this provider: azure, aws, sakura, baremetal.")] = None,
    gpu: Annotated[Optional[str], typer.Option(help="Only this GPU: t4, a100 (both sizes), h100 (every form), \"H100 SXM\"; case and spaces do not matter.")] = None,
    region: Annotated[Optional[str], typer.Option(help="Only this region or zone.")] = None,
    as_of: Annotated[Optional[str], typer.Option("--as-of", help="Use the newest snapshot not after this month (YYYY-MM) or day (YYYY-MM-DD).")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table, json or csv.")] = "table",
    show_all: Annotated[bool, typer.Option("--all", help="Also list retired instance types.")] = False,
    spot: Annotated[bool, typer.Option("--spot", help="Also list spot prices (interruptible capacity), where the snapshot has them.")] = False,
) -> None:
    """List instance types with GPU, price in their own currency and in yen per hour, billing, status and source."""
    if ctx.invoked_subcommand is not None:
        return
    from gpuplan.planning import catalog

    if fmt not in _FORMATS:
        raise UsageError(f"bad --format {fmt!r}: use table, json or csv")
    cat = catalog.load(as_of)
    if gpu is not None and not cat.match_gpus(gpu):
        raise UsageError(f"unknown GPU {gpu!r}; known: {', '.join(sorted(cat.gpus))}")
    offers = cat.find(provider=provider, gpu=gpu, region=region, spot=spot)
    shown = [o for o in offers if show_all or not o.retired(cat.date)]
    hidden = len(offers) - len(shown)

    if fmt == "json":
        doc = {
            "snapshot": cat.snapshot,
            "date": cat.date.isoformat(),
            "fx": {c: {"jpy_per_unit": str(r.jpy_per_unit), "date": r.date, "source": r.source, "notes": r.notes}
                   for c, r in cat.fx.items() if c != "JPY"},
            "prices_file": str(cat.prices_file) if cat.prices_file else None,
            "retired_hidden": hidden,
            "offers": [_row(cat, o) for o in shown],
        }
        json.dump(doc, sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
        return
    if fmt == "csv":
        writer = csv.DictWriter(sys.stdout, fieldnames=_FIELDS, lineterminator="\n")
        writer.writeheader()
        for o in shown:
            row = _row(cat, o)
            row["aliases"] = ";".join(row["aliases"])
            writer.writerow({k: "" if v is None else v for k, v in row.items()})
        return
    _table(cat, shown, hidden)


def _table(cat, offers, hidden: int) -> None:
    """One row per offer; wide terminals get a column per fact, narrow ones (under 120
    columns) stack the facts in two lines per row so nothing is cut to a few letters."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    out = Console(highlight=False)
    wide = out.width >= 120
    table = Table(title=f"gpuplan catalog {cat.snapshot} (as of {cat.date.isoformat()})",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    if wide:
        columns = (("instance", {"no_wrap": True}), ("region", {"no_wrap": True}), ("GPU", {"no_wrap": True}),
                   ("vCPU", {"justify": "right", "no_wrap": True}), ("price", {"justify": "right", "no_wrap": True}),
                   ("¥/h", {"justify": "right", "no_wrap": True}), ("billing", {"no_wrap": True}),
                   ("status", {"overflow": "fold"}), ("src", {"no_wrap": True}))
    else:
        columns = (("instance", {"min_width": 24, "overflow": "fold"}), ("GPU", {"max_width": 13}),
                   ("¥/h", {"justify": "right", "no_wrap": True}), ("status, source", {"min_width": 22, "overflow": "fold"}))
    for col, kw in columns:
        table.add_column(col, **kw)
    sources: dict[str, int] = {}
    for o in offers:
        aliases = f"[dim]{', '.join(o.aliases)}[/dim]" if o.aliases else ""
        mem = f" {o.gpu_memory_gib.normalize():f}G" if o.gpu_memory_gib else ""
        yen = fmt.rate(o.price_jpy_per_hour)
        status = cat.offer_status(o)
        style = "red" if status.startswith("retired") else "yellow" if status != "active" else "green"
        ref = sources.setdefault(o.source, len(sources) + 1)
        spot_mark = " [yellow](spot)[/yellow]" if o.market == "spot" else ""
        if wide:
            name = f"{o.provider}:{o.name}{spot_mark}" + (f"\n{aliases}" if aliases else "")
            table.add_row(name, o.region, f"{o.gpu} x{o.gpu_count}{mem}", str(o.vcpus or "?"), _own_price(o), yen,
                          _billing(o), f"[{style}]{status}[/{style}]", f"[{ref}] {o.as_of}")
        else:
            name = f"{o.name}{spot_mark}\n[dim]{o.provider} {o.region}[/dim]" + (f"\n{aliases}" if aliases else "")
            table.add_row(name, f"{o.gpu} x{o.gpu_count}\n[dim]{mem.strip()}, {o.vcpus or '?'} vCPU[/dim]",
                          f"{yen}\n[dim]{_billing(o, short=True)}[/dim]", f"[{style}]{status.replace(' -> ', chr(10) + '-> ')}[/{style}]\n[dim]\\[{ref}] {o.as_of}[/dim]")
    out.print(table)
    if not offers:
        out.print("no offers match these filters")
    for text, ref in sources.items():
        out.print(f"[dim]\\[{ref}] {text}[/dim]")
    for code, rate in sorted(cat.fx.items()):
        if code != "JPY":
            notes = f"; {rate.notes}" if rate.notes else ""
            out.print(f"[dim]{code} = ¥{rate.jpy_per_unit} ({rate.date or 'undated'}; {rate.source}{notes})[/dim]")
    if cat.prices_file:
        out.print(f"[dim]user prices applied from {cat.prices_file}[/dim]")
    if hidden:
        out.print(f"{hidden} retired instance type row{'s' if hidden != 1 else ''} hidden (--all lists them)")


@catalog_app.command("refresh")
def refresh_command(
    provider: Annotated[Optional[list[str]], typer.Option(
        help="Only this provider: azure, aws or sakura (repeat for several; default: all three).")] = None,
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="Write the snapshot folder under DIR instead of your data dir (where gpuplan finds it).",
        metavar="DIR")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Fetch and show the diff; write nothing.")] = False,
) -> None:
    """Fetch today's public prices into a new dated snapshot and show what changed.

    Sources: the Azure Retail Prices API (in yen), the AWS Price List files, Sakura's public price
    API and the ECB reference rates (USD/JPY), asked only about the instance types the catalog
    knows. Never needed for planning: the shipped snapshots work offline.
    """
    from gpuplan.planning import catalog_refresh

    result = catalog_refresh.refresh(provider, out_dir=out, dry_run=dry_run)
    _refresh_report(result)


def _refresh_report(result) -> None:
    """The diff as a table (a column per fact on wide terminals, two lines per offer under 120
    columns), the FX rate, counts, and where the snapshot went."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    out = Console(highlight=False)
    wide = out.width >= 120
    table = Table(title=f"catalog {result.previous} -> {result.snapshot}", title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    right = {"justify": "right", "no_wrap": True}
    if wide:
        columns = (("change", {"no_wrap": True}), ("offer", {"no_wrap": True}), ("before", right), ("after", right),
                   ("¥/h before", right), ("¥/h after", right), ("Δ ¥/h", right))
    else:
        columns = (("offer, change", {"min_width": 32, "overflow": "fold"}), ("price", right), ("¥/h", right),
                   ("Δ ¥/h", right))
    for col, kw in columns:
        table.add_column(col, **kw)
    order = {"changed": 0, "added": 1, "removed": 2}
    shown = [c for c in result.changes if c.change in order]
    for c in sorted(shown, key=lambda c: (order[c.change], c.key)):
        pct = "" if c.percent is None else f"{c.percent:+}%"
        before = _own_price(c.before) if c.before else "-"
        after = _own_price(c.after) if c.after else "-"
        if wide:
            table.add_row(c.change, c.key, before, after, _yen_h(c.before), _yen_h(c.after), pct)
        else:
            offer, _, region = c.key.partition("@")
            table.add_row(f"{offer}\n[dim]{region}, {c.change}[/dim]", f"{before}\n{after}",
                          f"{_yen_h(c.before) or '-'}\n{_yen_h(c.after) or '-'}", pct)
    if shown:
        out.print(table)
    else:
        out.print(f"no price changed between {result.previous} and {result.snapshot}")
    before, after = result.fx_before, result.fx_after
    was = f"¥{before.jpy_per_unit} ({before.date})" if before else "none"
    out.print(f"USD = ¥{after.jpy_per_unit} ({after.date}; {after.source}); was {was}")
    counts = {k: sum(1 for c in result.changes if c.change == k) for k in (*order, "fx")}
    moved = sorted({c.percent for c in result.changes if c.change == "fx" and c.percent is not None})
    if counts["fx"]:
        span = f"{moved[0]:+}%" if len(moved) == 1 else f"{moved[0]:+}% to {moved[-1]:+}%" if moved else "?"
        out.print(f"{counts['fx']} offers keep their own price and move {span} in yen with the USD rate only")
    out.print(f"{counts['changed']} changed, {counts['added']} added, {counts['removed']} removed, "
              f"{result.unchanged} refreshed and unchanged, {result.kept} kept as they were "
              f"(other providers, owned or monthly hardware, DOK tasks, retired sizes)")
    for note in result.notes:
        out.print(note)
    if result.path is None:
        out.print(f"dry run: nothing written (snapshot {result.snapshot} would hold {len(result.catalog.offers)} offers)")
    else:
        out.print(f"wrote snapshot {result.snapshot} to {result.path}; gpuplan estimate and gpuplan catalog now use it "
                  f"(--as-of {result.previous} for the one before)")


def _yen_h(offer) -> str:
    if offer is None or offer.price_jpy_per_hour is None:
        return ""
    return fmt.rate(offer.price_jpy_per_hour)


def register(app: typer.Typer) -> None:
    app.add_typer(catalog_app, name="catalog")
