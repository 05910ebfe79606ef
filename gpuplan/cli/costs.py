"""`gpuplan cost-report`: what the clusters cost, per month and per cluster, from the cost ledger; `gpuplan
budget`: a project's monthly budget, what was spent and reserved of it, and what is left."""

from __future__ import annotations

import re
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Annotated, Optional

import typer

from gpuplan.cli import shapes
from gpuplan.cli.estimate import tax_basis
from gpuplan.errors import UsageError
from gpuplan.market import tax as taxes
from gpuplan.planning import fmt


def cost_report(
    month: Annotated[Optional[str], typer.Option("--month", metavar="YYYY-MM", help="Only this month (UTC).")] = None,
    out_format: Annotated[str, shapes.format_option()] = "table",
    tax: Annotated[str, typer.Option("--tax", metavar="included|excluded", callback=tax_basis, help="The one tax basis every yen is shown on, as `gpuplan estimate`'s: included (the default: Japan's 10 % consumption tax on every provider) or excluded.")] = "included",
    all_users: Annotated[bool, typer.Option("--all-users", help="Every user's clusters, not only yours (rows from before gpuplan kept users show to everyone).")] = False,
    project: Annotated[Optional[str], typer.Option("--project", help="Only this project's.", metavar="NAME")] = None,
    by: Annotated[Optional[str], typer.Option("--by", help="Also the totals per user, project or month.", metavar="user|project|month")] = None,
) -> None:
    """Yen per cluster and per month from the cost ledger, each machine billed as its provider
    bills it (granularity, minimum, daily and monthly caps), running machines up to now, on one
    tax basis (the estimate's)."""
    from gpuplan import team
    from gpuplan.cli import tables
    from gpuplan.cli.tables import Column
    from gpuplan.store import costs
    from gpuplan.store.state import State

    as_json = shapes.check_format(out_format)
    if by is not None and by not in BY:
        raise UsageError(f"bad --by {by!r}: use user, project or month")
    only = team.check_name(project, "--project") if project is not None else None
    me = team.user()
    if month is not None and not re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", month.strip()):
        raise UsageError(f"bad --month {month!r}: write it as YYYY-MM, e.g. 2026-11")
    state = State.open_default()
    from gpuplan.fleet import lifecycle

    lifecycle.settle_released(state)  # hosts that released themselves at a launch's max_yen bill no more
    month = month.strip() if month else None
    lines = [x for x in costs.on_basis(costs.report(state.ledger_rows(), month), tax)
             if team.visible(x.user, x.project, all_users, only, me)]
    groups = _grouped(lines, by) if by else []
    interrupted = costs.report_interruptions(state, month, tax)
    total = sum((line.yen for line in lines), Decimal(0))
    unknown = sum(1 for x in lines if x.tax == "unknown")
    basis = f"{taxes.said(tax)}" + (f"; {fmt.plural(unknown, 'line')} whose price does not say (or was recorded"
                                     " before gpuplan kept it): as billed" if unknown else "")
    if as_json:
        shapes.emit({"month": month, "tax": tax, "total_jpy": _exact(total), "lines": [
            {"month": x.month, "cluster": _name(x.cluster), "provider": x.provider, "instance_type": x.size,
             "machines": x.machines, "machine_seconds": x.seconds, "cost_jpy": _exact(x.yen), "running": x.running,
             "billing": x.terms, "listed_tax": x.tax, "user": x.user, "project": x.project} for x in lines],
            **({"by": by, "groups": [{by: k, "cost_jpy": _exact(y), "machine_seconds": s} for k, y, s in groups]}
               if by else {}),
            "interruptions": [{"month": b.month, "cluster": b.cluster, "job": b.job,
                               **shapes.interruptions(b.interruptions)} for b in interrupted]})
        return
    out = tables.console()
    if not lines:
        out.print(f"nothing in the cost ledger{' for ' + month if month else ''}: no machine was held"
                  + ("" if month else " (`gpuplan provision` records each machine it creates)"))
        return
    columns = [Column("month"), Column("cluster"), Column("machines"), Column("held", right=True),
               Column("yen", right=True), Column("billing", wrap=True)]
    held = fmt.durations([x.seconds for x in lines])
    rows = [[x.month, _name(x.cluster) + (" (running)" if x.running else "")
             + (f" ({x.user}'s, {x.project})" if x.user not in (me, team.UNKNOWN_USER) else ""),
             f"{x.machines}x {x.provider}:{x.size}", h, fmt.yen(x.yen), x.terms] for x, h in zip(lines, held)]
    tables.render(out, columns, rows, title="gpuplan cost-report" + (f" {month}" if month else "") + f"; {taxes.said(tax)}")
    by_month: dict[str, Decimal] = {}
    for x in lines:
        by_month[x.month] = by_month.get(x.month, Decimal(0)) + x.yen
    for m, yen in by_month.items():
        out.print(f"{m}: {fmt.yen(yen)}")
    if by:
        tables.render(out, [Column(by), Column("held", right=True), Column("yen", right=True)],
                      [[k, h, fmt.yen(y)] for (k, y, _), h in zip(groups, fmt.durations([s for _, _, s in groups]))],
                      title=f"by {by}")
    out.print(f"total: {fmt.yen(total)} (each line rounded once; machines still held counted up to now)")
    out.print(f"tax: {basis}; --tax {'excluded' if tax == 'included' else 'included'} shows the other view")
    from gpuplan.cli.jobs import interruption_words

    for b in interrupted:  # in the month the batch started
        out.print(f"{b.month} {b.cluster} {b.job} interrupted: {interruption_words(b.interruptions)}")


BY = ("user", "project", "month")


def _grouped(lines, by: str) -> list[tuple[str, Decimal, int]]:
    """(user, project or month; exact yen; machine-seconds) per group, in name order."""
    out: dict[str, tuple[Decimal, int]] = {}
    for x in lines:
        key = getattr(x, by)
        yen, seconds = out.get(key, (Decimal(0), 0))
        out[key] = (yen + x.yen, seconds + x.seconds)
    return [(k, y, s) for k, (y, s) in sorted(out.items())]


def _name(cluster: str) -> str:
    """A torn-down cluster's ledger rows keep its name with "@<created>" (the name may be reused)."""
    return cluster.split("@", 1)[0]


def _exact(yen: Decimal) -> str:
    return str(yen.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def _exact_or_none(yen: Decimal | None) -> str | None:
    return None if yen is None else _exact(yen)


# --- gpuplan budget: a project's monthly budget (JST months; docs/teams.md) ------------------------

def budget(
    words: Annotated[Optional[list[str]], typer.Argument(help="PROJECT to show one project; `set PROJECT YEN` to set its budget.", metavar="[set] [PROJECT] [YEN]")] = None,
    month: Annotated[Optional[str], typer.Option("--month", metavar="YYYY-MM", help="The month, Japan's (JST, UTC+9; default: this month).")] = None,
    out_format: Annotated[str, shapes.format_option()] = "table",
    plot: Annotated[Optional[Path], typer.Option("--plot", metavar="FILE.svg|png", help="With one PROJECT: draw its month's spend day by day against its budget (needs gpuplan[plot]).")] = None,
) -> None:
    """Each project's budget for a month (JST), spent (the cost ledger's yen in the month),
    committed (running batches' caps and live clusters' planned yen not yet spent) and left; yen
    include consumption tax. `gpuplan budget set PROJECT YEN` sets one. A project with no budget
    has no limit. `launch`, `provision`, `run` and `probe` refuse a spend that would pass what is left."""
    from gpuplan import budget as budgets
    from gpuplan import team
    from gpuplan.store.state import State
    from gpuplan.units import yen as parse_yen

    as_json = shapes.check_format(out_format)
    words = list(words or [])
    month = team.check_month(month) if month is not None else team.month_of()
    if words and words[0] == "set":
        if len(words) != 3:
            raise UsageError("write `gpuplan budget set PROJECT YEN [--month YYYY-MM]`, e.g. gpuplan budget set vision 300000")
        project = team.check_name(words[1], "project")
        amount = parse_yen(words[2])
        if amount is None:
            raise UsageError(f"bad budget {words[2]!r}: a number of yen above 0, such as 300000")
        state = State.open_default()
        state.set_budget(project, month, amount, team.user())
        words = [project]
    elif len(words) > 1:
        raise UsageError("give one project (or none for all), or `set PROJECT YEN`")
    else:
        state = State.open_default()
    projects = [team.check_name(words[0], "project")] if words else state.budget_projects(month)
    figures = [state.budget_figures(p, month, budgets.priced) for p in projects]
    if plot is not None:
        if not words:
            raise UsageError("--plot draws one project's month: name it (gpuplan budget PROJECT --plot FILE.svg)")
        from datetime import datetime, timezone

        from gpuplan.planning import plot as plotting

        f = figures[0]
        ledger = [r for r in state.ledger_rows() if r["project"] == f.project]
        days, spent = budgets.spent_by_day(ledger, month, datetime.now(timezone.utc))
        plotting.budget_chart(plot, f"project {f.project}, {month} (JST)", days, spent, f.budget, f.committed)
        print(f"plot written to {plot}", file=sys.stderr)
    if as_json:
        shapes.emit({"month": month, "zone": "JST", "tax": "included", "projects": [
            {"project": f.project, "budget_jpy": _exact_or_none(f.budget), "spent_jpy": _exact_or_none(f.spent),
             "committed_jpy": _exact_or_none(f.committed), "left_jpy": _exact_or_none(f.left), "limited": f.budget is not None}
            for f in figures]})
        return
    from gpuplan.cli import tables
    from gpuplan.cli.tables import Cell, Column

    out = tables.console()
    if not figures:
        out.print(f"no budgets and no spend for {month} (JST); `gpuplan budget set PROJECT YEN` sets one")
        return
    rows: list[list[Cell]] = [[f.project, fmt.yen(f.budget) if f.budget is not None else "no limit", fmt.yen(f.spent),
             fmt.yen(f.committed), fmt.yen(f.left) if f.left is not None else "-"] for f in figures]
    tables.render(out, [Column("project"), Column("budget", right=True), Column("spent", right=True),
                        Column("committed", right=True), Column("left", right=True)], rows,
                  title=f"gpuplan budget {month} (JST months; yen include consumption tax)")
    if any(f.budget is None for f in figures):
        out.print("no limit: a project without a budget for the month is not limited (`gpuplan budget set PROJECT YEN`)")


def register(app: typer.Typer) -> None:
    app.command("cost-report")(cost_report)
    app.command("budget")(budget)
