"""Budgets that hold before buying (issue 45): a project's month (JST: team.BUDGET_ZONE) priced from
the cost ledger by the one billing rule, on the "included" tax basis, and a spend checked, or
reserved, against what is left. The store keeps the figures (State.budget_figures, State.reserve:
read and written in one transaction); this module prices them and words a refusal."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from gpuplan.errors import UsageError
from gpuplan.team import month_of, user


def priced(rows: list[dict], month: str, at: datetime) -> tuple[Decimal, dict[str, Decimal]]:
    """The ledger `rows`' yen in `month` (JST), and each cluster's, consumption tax included (each
    row put there by its own listed basis, as cost-report does)."""
    from gpuplan.market import tax
    from gpuplan.store import costs
    from gpuplan.team import BUDGET_ZONE

    per: dict[str, Decimal] = {}
    for x in costs.on_basis(costs.report(rows, month, at, zone=BUDGET_ZONE), tax.DEFAULT):
        per[x.cluster] = per.get(x.cluster, Decimal(0)) + x.yen
    return sum(per.values(), Decimal(0)), per

def refusal(figures, yen, what: str) -> str:
    """The one line a spend over a project's month is refused with."""
    from gpuplan.planning import fmt

    return (f"project {figures.project}'s budget for {figures.month} (JST) would be passed: budget"
            f" {fmt.yen(figures.budget)}, spent {fmt.yen(figures.spent)}, committed {fmt.yen(figures.committed)},"
            f" this {what} {fmt.yen(yen)}, left {fmt.yen(figures.left)} (yen include consumption tax); lower the"
            f" spend, or raise the budget with `gpuplan budget set {figures.project} YEN`")


def check_spend(state, project: str, yen, what: str) -> None:
    """Refuse (one line, exit 2) a spend of `yen` ("included" basis) that would pass what is left of
    `project`'s budget this month; reserves nothing (a dry run, the look before the question).
    `state` None: no state yet, so no budget."""
    if state is None:
        return
    figures = state.budget_figures(project, month_of(), priced)
    if figures.left is not None and yen > figures.left:
        raise UsageError(refusal(figures, yen, what))


def reserve_spend(state, project: str, yen, what: str, source: str, cluster: str | None = None) -> str:
    """check_spend, and the spend reserved in the same transaction (two teammates at once never
    both take the yen left); returns the reservation's id."""
    r = state.reserve(project, month_of(), yen, source, user(), priced, cluster=cluster)
    if r.refused:
        raise UsageError(refusal(r.figures, yen, what))
    return r.id


def re_reserve_spend(state, rid: str, project: str, yen, what: str, source: str, cluster: str | None = None) -> None:
    """Reservation `rid` (reserve_spend's) made to hold `yen` instead: a launch's or provision's
    next plan, whose spend may be more than its first pick's (issue 44); refused in one line (exit
    2) where that passes what is left of `project`'s month with the old figure given back."""
    r = state.re_reserve(rid, project, month_of(), yen, source, user(), priced, cluster=cluster)
    if r.refused:
        raise UsageError(refusal(r.figures, yen, what))


def has_budget(state, project: str) -> bool:
    return state is not None and state.budget_figures(project, month_of(), priced).budget is not None


def provision_spend(request) -> tuple[Decimal | None, str]:
    """What a provision may spend, consumption tax included: its machines' hourly prices x its TTL
    (the hours it is planned for: the cloud ends the machines then); None without a TTL (no bound).
    Owned hosts with no power price spend nothing."""
    from gpuplan.market import tax

    per_hour = sum((tax.on_basis(p.price_jpy_per_hour * p.count, p.tax, tax.DEFAULT) for p in request.parts
                    if p.price_jpy_per_hour is not None), Decimal(0))
    if not per_hour:
        return Decimal(0), "provision"
    if not request.ttl_s:
        return None, "provision"
    return per_hour * request.ttl_s / 3600, f"provision's {request.ttl_s / 3600:g} h (--ttl)"


def refuse_unbounded(state, project: str, what: str) -> None:
    """A spend with no bound (no cap, no TTL) in a project with a budget this month: refused, one line."""
    if has_budget(state, project):
        raise UsageError(f"project {project} has a budget for {month_of()} (JST) and {what} has no bound on its spend:"
                         " give --ttl (the cloud ends the machines then) so it can be held against the budget")


def spent_by_day(rows: list[dict], month: str, at: datetime) -> tuple[list[int], list[Decimal]]:
    """The month's (JST) ledger yen, consumption tax included, by the end of each of its days up to
    `at`: each row cut at the day's end (a machine held on bills only what it had by then)."""
    from datetime import timedelta

    from gpuplan.team import month_bounds

    start, end = month_bounds(month)
    days, spent = [], []
    day = 1
    while start + timedelta(days=day - 1) < min(end, at):
        edge = min(start + timedelta(days=day), at, end)
        cut = [{**r, "stopped_at": min(r["stopped_at"] or edge, edge)} for r in rows if r["started_at"] < edge]
        days.append(day)
        spent.append(priced(cut, month, edge)[0])
        day += 1
    return days, spent
