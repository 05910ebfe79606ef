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

from gpuplan.cli import shapes
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
    provider: Annotated[Optional[str], typer.Option(metavar="NAME", help="Only this provider: {providers}.")] = None,
    gpu: Annotated[Optional[str], typer.Option(metavar="GPU", help="Only this GPU: t4, a100 (both sizes), h100 (every form), \"H100 SXM\"; case and spaces do not matter.")] = None,
    region: Annotated[Optional[str], typer.Option(metavar="NAME", help="Only this region or zone.")] = None,
    as_of: Annotated[Optional[str], typer.Option("--as-of", help="Use the newest snapshot not after this month (YYYY-MM) or day (YYYY-MM-DD).", metavar="YYYY-MM[-DD]")] = None,
    fmt: Annotated[str, shapes.format_option(csv=True)] = "table",
    show_all: Annotated[bool, typer.Option("--all", help="Also list retired instance types.")] = False,
    spot: Annotated[bool, typer.Option("--spot", help="Also list spot prices (interruptible capacity), where the snapshot has them.")] = False,
) -> None:
    """List instance types with GPU, price in their own currency and in yen per hour, billing, status and source."""
    if ctx.invoked_subcommand is not None:
        return
    from gpuplan.market import catalog

    shapes.check_format(fmt, csv=True)
    cat = catalog.load(as_of)
    if as_of is None:  # your own hosts (the inventory) are offers too, as every estimate plans them
        from gpuplan.cli.estimate import _inventory

        cat = _inventory(cat)[0]
    from gpuplan.cli.estimate import as_of_note

    note = as_of_note(as_of, cat)
    if note:
        print(note, file=sys.stderr)
    if gpu is not None and not cat.match_gpus(gpu):
        raise UsageError(f"unknown GPU {gpu!r}; known: {', '.join(sorted(cat.gpus))}")
    offers = cat.find(provider=provider, gpu=gpu, region=region, spot=spot)
    shown = [o for o in offers if show_all or not o.retired(cat.date)]
    hidden = len(offers) - len(shown)
    empty = None
    if region and not cat.find(region=region):  # a region the catalog has no rows in: what adds them
        from gpuplan.market import regions

        empty = f"note: no offers in {region}: {regions.no_offers([region], cat.snapshot)}"
        if fmt != "table":  # JSON and CSV stay data
            print(empty, file=sys.stderr)

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
    _table(cat, shown, hidden, empty)


def _table(cat, offers, hidden: int, empty: str | None = None) -> None:
    """One row per offer in the common table style (tables.py): piped, one line per offer with
    every column; on a terminal under 120 columns, the columns that matter most, fitted."""
    from gpuplan.cli import tables
    from gpuplan.cli.tables import Column

    out = tables.console()
    narrow = out.is_terminal and out.width < 120
    columns = [Column("instance"), Column("region"), Column("GPU"), Column("vCPU", right=True),
               Column("price", right=True), Column("¥/h", right=True), Column("billing", wrap=True), Column("status", wrap=True),
               Column("source", wrap=True)]
    keep = ("instance", "GPU", "¥/h", "status") if narrow else tuple(c.name for c in columns)
    sources: dict[str, int] = {}
    rows = []
    for o in offers:
        mem = f" {o.gpu_memory_gib.normalize():f}G" if o.gpu_memory_gib else ""
        status = cat.offer_status(o)
        style = "red" if status.startswith("retired") else "yellow" if status != "active" else "green"
        ref = sources.setdefault(o.source, len(sources) + 1)
        cells = {"instance": f"{o.provider}:{o.name}" + (" (spot)" if o.market == "spot" else ""), "region": o.region,
                 "GPU": f"{o.gpu} x{o.gpu_count}{mem}", "vCPU": str(o.vcpus or "?"), "price": _own_price(o),
                 "¥/h": fmt.rate(o.price_jpy_per_hour), "billing": _billing(o), "status": (status, style),
                 "source": f"[{ref}] {o.as_of}"}
        if narrow:  # the region under the name: two lines a row rather than a table wider than the terminal
            cells["instance"] += f"\n  {o.region}"
        rows.append([cells[k] for k in keep])
    newest = newest_source(offers)
    dated = f" (newest source {newest or 'undated'})" if offers else ""
    tables.render(out, [c for c in columns if c.name in keep], rows, title=f"gpuplan catalog {cat.snapshot}{dated}")
    if not offers:
        out.print("no offers match these filters", markup=False)
    if empty:
        out.print(empty, markup=False, soft_wrap=True)
    if "source" in keep:
        for text, ref in sources.items():
            out.print(f"[{ref}] {text}", style="dim", markup=False, soft_wrap=True)
    else:
        out.print("sources, billing and vCPUs: on a terminal of 120 columns or more, or with --format csv", style="dim")
    for code, rate in sorted(cat.fx.items()):
        if code != "JPY":
            notes = f"; {rate.notes}" if rate.notes else ""
            out.print(f"{code} = ¥{rate.jpy_per_unit} ({rate.date or 'undated'}; {rate.source}{notes})", style="dim",
                      markup=False, soft_wrap=True)
    if cat.prices_file:
        out.print(f"user prices applied from {cat.prices_file}", style="dim", markup=False, soft_wrap=True)
    if hidden:
        out.print(f"{fmt.plural(hidden, 'retired instance type row')} hidden (--all lists them)", markup=False)


def newest_source(offers) -> str | None:
    """The newest date among the offers' sources (`as_of` is free text: "2026-11-09 (derived)",
    "~2025 H1", "2025-2026"): what the prices shown are dated by, never the snapshot's own label
    date, which may lie in the future. A year range's newest is its last year ("2026"), not
    "2025-20" read as a month."""
    import re

    dated = re.compile(r"(?<!\d)\d{4}(?:-[01]\d(?:-[0-3]\d)?)?(?!\d)")
    dates = [d for o in offers for d in dated.findall(str(o.as_of or ""))]
    return max(dates) if dates else None


@catalog_app.command("refresh")
def refresh_command(
    provider: Annotated[Optional[list[str]], typer.Option(metavar="NAME", 
        help="Only this provider: {refreshable} (repeat for several; default: all of them).")] = None,
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="Write the snapshot folder under DIR instead of your data dir (where gpuplan finds it).",
        metavar="DIR")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Fetch and show the diff; write nothing.")] = False,
    region: Annotated[Optional[list[str]], typer.Option(metavar="NAME[,NAME]",
        help="Also ask for these regions or zones (japaneast,japanwest), each of its own provider; "
             "default: those of preferred_regions in config.yaml.")] = None,
) -> None:
    """Fetch today's public prices into a new dated snapshot and show what changed.

    Sources: the Azure Retail Prices API (in yen), the AWS Price List files, Sakura's public price
    API and the ECB reference rates (USD/JPY), asked only about the instance types the catalog
    knows, in the regions it has rows in and in those --region (else preferred_regions) names:
    `--provider azure --region japaneast,japanwest` adds Azure's Japan rows. Never needed for
    planning: the shipped snapshots work offline.
    """
    from gpuplan import config
    from gpuplan.cli import tables
    from gpuplan.cli.tables import working
    from gpuplan.market import catalog_refresh

    if out is not None and not dry_run:
        from gpuplan.userfiles import check_writable

        check_writable(out, "--out", folder=True)  # before the network, not after it
    preferred = [] if region else config.preferred_regions()
    with working(tables.console(stderr=True), "fetching today's prices"):
        result = catalog_refresh.refresh(provider, out_dir=out, dry_run=dry_run, regions=region, preferred=preferred)
    _refresh_report(result)


def _refresh_report(result) -> None:
    """The diff as a table (a column per fact on wide terminals, two lines per offer under 120
    columns), the FX rate, counts, and where the snapshot went."""
    from gpuplan.cli import tables
    from gpuplan.cli.tables import Column

    out = tables.console()
    columns = [Column("change"), Column("offer", wrap=True), Column("before", right=True), Column("after", right=True),
               Column("¥/h before", right=True), Column("¥/h after", right=True), Column("Δ ¥/h", right=True)]
    order = {"changed": 0, "added": 1, "removed": 2}
    shown = [c for c in result.changes if c.change in order]
    rows = []
    for c in sorted(shown, key=lambda c: (order[c.change], c.key)):
        pct = "" if c.percent is None else f"{c.percent:+}%"
        before = _own_price(c.before) if c.before else "-"
        after = _own_price(c.after) if c.after else "-"
        rows.append([c.change, c.key, before, after, _yen_h(c.before) or "-", _yen_h(c.after) or "-", pct])
    if shown:
        tables.render(out, columns, rows, title=f"catalog {result.previous} -> {result.snapshot}")
    else:
        out.print(f"no price changed between {result.previous} and {result.snapshot}")
    before, after = result.fx_before, result.fx_after
    was = f"¥{before.jpy_per_unit} ({before.date})" if before else "none"
    out.print(f"USD = ¥{after.jpy_per_unit} ({after.date}; {after.source}); was {was}")
    counts = {k: sum(1 for c in result.changes if c.change == k) for k in (*order, "fx")}
    moved = sorted({c.percent for c in result.changes if c.change == "fx" and c.percent is not None})
    if counts["fx"]:
        span = f"{moved[0]:+}%" if len(moved) == 1 else f"{moved[0]:+}% to {moved[-1]:+}%" if moved else "?"
        out.print(f"{fmt.plural(counts['fx'], 'offer')} keep their own price and move {span} in yen with the USD rate only")
    out.print(f"{counts['changed']} changed, {counts['added']} added, {counts['removed']} removed, "
              f"{result.unchanged} refreshed and unchanged, {result.kept} kept as they were "
              f"(other providers, owned or monthly hardware, DOK tasks, retired sizes)")
    for provider, where in result.asked:
        added = result.added_in(provider, where)
        have = result.offers_in(provider, where)
        if added:
            out.print(f"{where} ({provider}): {fmt.plural(len(added), 'row')} added ({', '.join(added)}); "
                      f"{have} offers there now", markup=False)
        elif have:
            out.print(f"{where} ({provider}): no row added; its {have} offers were in the catalog already", markup=False)
        else:
            out.print(f"{where} ({provider}): no row added: the source lists none of the catalog's sizes there",
                      markup=False)
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
