"""`gpuplan check [PROVIDER...]`: credentials, region and GPU quota per provider; creates nothing."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from gpuplan.cli import shapes
from gpuplan.errors import UsageError


def check_command(
    providers: Annotated[Optional[list[str]], typer.Argument(help="Providers to check (default: every installed one).")] = None,
    region: Annotated[Optional[str], typer.Option(metavar="NAME", help="Region or zone to read quota in (default: the catalog's default region).")] = None,
    fmt: Annotated[str, shapes.format_option()] = "table",
) -> None:
    """Check credentials and GPU quota for each provider, as `sky check` does; nothing is created."""
    from gpuplan.fleet import checks
    from gpuplan.market import catalog

    as_json = shapes.check_format(fmt)
    names = [p.strip().lower() for p in providers or []]
    if region and len(names) != 1:
        raise UsageError("--region applies to one provider: name it, e.g. `gpuplan check aws --region ap-northeast-1`")
    results = checks.check(names, region, catalog.load())
    _store(results)
    if as_json:
        shapes.emit([_as_dict(r) for r in results])
    else:
        _table(results)
    failed = [r for r in results if not r.ready]
    # Named providers must all be ready; with none named, one ready provider is enough to work.
    if failed and (names or len(failed) == len(results)):
        raise typer.Exit(2)


def _store(results) -> None:
    """Keep each vCPU quota read, with its date, for every later `gpuplan estimate` to plan within."""
    readable = [(r, q) for r in results if r.credentials == "found" for q in r.quotas
                if not q.error and q.limit is not None and q.unit == "vCPUs"]
    if not readable:
        return
    from gpuplan.store.state import State

    state = State.open_default()
    for r, q in readable:
        state.save_quota(r.provider, r.region, q.name, int(q.limit), q.unit)


def _as_dict(r) -> dict:
    return {
        "provider": r.provider, "region": r.region, "ready": r.ready, "credentials": r.credentials,
        "quotas": [{"name": q.name, "description": q.description, "example_size": q.example_size, "limit": q.limit,
                    "used": q.used, "free": q.free, "unit": q.unit, "how_to_raise": q.how_to_raise, "error": q.error}
                   for q in r.quotas],
    }


def _table(results) -> None:
    """A row per quota tier of each ready provider; what keeps a provider from being ready is
    said below the table, one line each, in full (those lines are what the user acts on)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    out = Console(highlight=False, markup=False, soft_wrap=True)  # credentials hints name extras: gpuplan[aws]
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for col, kw in (("provider", {"no_wrap": True}), ("region", {"no_wrap": True}), ("credentials", {"no_wrap": True}),
                    ("quota", {"overflow": "fold"}), ("limit", {"justify": "right"}), ("used", {"justify": "right"}),
                    ("free", {"justify": "right", "no_wrap": True})):
        table.add_column(col, **kw)
    problems = []
    for r in results:
        if r.credentials != "found":
            table.add_row(r.provider, r.region or "-", Text("missing", "red"), "-", "", "", "")
            problems.append(f"{r.provider}: {r.credentials}")
            continue
        if not r.quotas:
            table.add_row(r.provider, r.region or "-", Text("found", "green"), "none reported", "", "", "")
        for i, q in enumerate(r.quotas):
            head = (r.provider, r.region or "-", Text("found", "green")) if i == 0 else ("", "", "")
            if q.error:
                table.add_row(*head, Text(f"unreadable for {q.example_size}", "red"), "?", "?", "?")
                problems.append(f"{r.provider} quota for {q.example_size}: {q.error}")
                continue
            free = Text(f"{q.free} {q.unit}", "red" if q.free is not None and q.free <= 0 else "")
            table.add_row(*head, Text.assemble(q.name, (f" ({q.description}; e.g. {q.example_size})", "dim")),
                          str(q.limit), str(q.used), free)
            if q.free is not None and q.free <= 0 and q.how_to_raise:
                problems.append(f"{r.provider} {q.name}: nothing free; {q.how_to_raise}")
    out.print(table)
    for line in problems:
        out.print(line, soft_wrap=True)
    ready = [r.provider for r in results if r.ready]
    out.print(f"ready: {', '.join(ready) if ready else 'none'}")


def register(app: typer.Typer) -> None:
    app.command("check")(check_command)
