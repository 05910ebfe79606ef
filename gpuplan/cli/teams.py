"""`gpuplan budget`: a project's monthly budget (JST months), what the ledger spent of it, what
running batches and live clusters have reserved, and what is left (docs/teams.md)."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Annotated, Optional

import typer

from gpuplan.cli import shapes
from gpuplan.errors import UsageError
from gpuplan.planning import fmt


def budget(
    words: Annotated[Optional[list[str]], typer.Argument(help="PROJECT to show one project; `set PROJECT YEN` to set its budget.", metavar="[set] [PROJECT] [YEN]")] = None,
    month: Annotated[Optional[str], typer.Option("--month", metavar="YYYY-MM", help="The month, Japan's (JST, UTC+9; default: this month).")] = None,
    out_format: Annotated[str, shapes.format_option()] = "table",
) -> None:
    """Each project's budget for a month (JST), spent (the cost ledger's yen in the month),
    committed (running batches' caps and live clusters' planned yen not yet spent) and left; yen
    include consumption tax. `gpuplan budget set PROJECT YEN` sets one. A project with no budget
    has no limit. `launch`, `provision`, `run` and `probe` refuse a spend that would pass what is left."""
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
    figures = [state.budget_figures(p, month) for p in projects]
    if as_json:
        shapes.emit({"month": month, "zone": "JST", "tax": "included", "projects": [
            {"project": f.project, "budget_jpy": _exact(f.budget), "spent_jpy": _exact(f.spent),
             "committed_jpy": _exact(f.committed), "left_jpy": _exact(f.left), "limited": f.budget is not None}
            for f in figures]})
        return
    from gpuplan.cli import tables
    from gpuplan.cli.tables import Column

    out = tables.console()
    if not figures:
        out.print(f"no budgets and no spend for {month} (JST); `gpuplan budget set PROJECT YEN` sets one")
        return
    rows = [[f.project, fmt.yen(f.budget) if f.budget is not None else "no limit", fmt.yen(f.spent),
             fmt.yen(f.committed), fmt.yen(f.left) if f.left is not None else "-"] for f in figures]
    tables.render(out, [Column("project"), Column("budget", right=True), Column("spent", right=True),
                        Column("committed", right=True), Column("left", right=True)], rows,
                  title=f"gpuplan budget {month} (JST months; yen include consumption tax)")
    if any(f.budget is None for f in figures):
        out.print("no limit: a project without a budget for the month is not limited (`gpuplan budget set PROJECT YEN`)")


def _exact(yen: Decimal | None) -> str | None:
    return None if yen is None else str(yen.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def register(app: typer.Typer) -> None:
    app.command("budget")(budget)
