"""Ranking and proof: the order plans are recommended in, the cost / wall-time frontier, whether
some schedule of a candidate fleet could still beat the pick (and by how much at most), and the
one line that says why the pick won or why nothing can be recommended.

The estimate is `proven` when no schedule of any candidate could beat the pick by more than
HiGHS's own relative tolerance (1e-4), and says by how much at most.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal
from typing import TYPE_CHECKING

from gpuplan.planning import fmt, model, outcomes
from gpuplan.planning.model import Setting
from gpuplan.planning.outcomes import Code
from gpuplan.planning.plan_types import Plan
from gpuplan.units import format_duration

if TYPE_CHECKING:
    from gpuplan.planning.candidates import Candidate

RELATIVE_GAP = Decimal("1e-4")  # HiGHS mip_rel_gap default: "optimal" means within this


OBJECTIVES = ("balanced", "cost", "time")
DEFAULT_SLACK = Decimal("0.03")  # the default pick: the fastest plan within 3 % of the cheapest
TRADE_COST = Decimal("0.02")  # then a plan at most 2 % dearer is taken where it halves the wall time
TRADE_SAVES_S = 7200  # and finishes at least 2 h sooner
WALL_SLACK_PCT = 5  # within the cost slack, a plan this much slower than the fastest is as good, if cheaper
FASTER_SHARE = Decimal("0.10")  # "for +¥N, a faster plan": only where it is at most 10 % dearer


@dataclass(frozen=True)
class Choice:
    """How the pick is made. objective "balanced" (the default): the fastest plan costing at most
    cost_slack more than the cheapest (or the cheapest of those within 5 % of its wall time),
    then, while one exists, a plan at most 2 % dearer that finishes in half the wall time and at
    least 2 h sooner; "cost": strictly the cheapest; "time": the fastest. budget (yen): only
    plans costing at most it, the fastest of them."""

    objective: str = "balanced"
    cost_slack: Decimal = DEFAULT_SLACK
    budget: Decimal | None = None

    @property
    def base(self) -> str:
        """The order of the rank key (RULES) that ranks plans under this choice."""
        return "time" if self.objective == "time" or self.budget is not None else "cost"


RULES = {  # how plans rank, the objective first; said in every why-line that a tie decides
    "cost": "ties on cost break on wall time, then on fewer warnings, then on fewer machines (cost in whole yen, as shown)",
    "time": "ties on wall time break on cost, then on fewer warnings, then on fewer machines (cost in whole yen, as shown)",
}


def rank_key(plan: Plan, objective: str):
    """The order plans are recommended in (RULES): cost in whole yen (what is shown: a sen
    cheaper never outranks hours faster) or wall time, then the other, then fewer warnings (a
    plan over a default quota loses a tie to one within it), then fewer machines."""
    if objective == "time":
        return (plan.wall_s, plan.cost_jpy, warning_weight(plan), plan.count)
    return (plan.cost_jpy, plan.wall_s, warning_weight(plan), plan.count)


KNOWN_OVER = (Code.DEFAULT_QUOTA, Code.DEFAULT_FAMILY_QUOTA)


def warning_weight(plan: Plan) -> int:
    """Warnings counted for a tie: over a known quota counts twice, so that a plan that certainly
    needs an increase loses to one whose quota is only unknown."""
    return sum(2 if w.code in KNOWN_OVER else 1 for w in plan.warned_by)


def whole_yen(amount: Decimal) -> int:
    return int(amount.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def pick(plans: list[Plan], objective: str) -> tuple[Plan | None, list[Plan]]:
    eligible = sorted((p for p in plans if p.feasible and p.recommendable), key=lambda p: rank_key(p, objective))
    return (eligible[0] if eligible else None), eligible


def choose(plans: list[Plan], choice: Choice) -> tuple[Plan | None, list[Plan]]:
    """The pick under `choice` (see Choice), and every eligible plan in the base order."""
    rec, eligible = pick(plans, choice.base)
    if rec is None or (choice.objective != "balanced" and choice.budget is None):
        return rec, eligible
    if choice.budget is not None:
        within = [p for p in eligible if p.cost <= choice.budget]
        return (within[0] if within else None), eligible
    return least_increase(balanced(rec, eligible, choice), eligible, choice), eligible


def balanced(rec: Plan, eligible: list[Plan], choice: Choice) -> Plan:
    """The balanced rule's pick before quota is weighed (see Choice); rec: the cheapest."""
    limit = rec.cost * (1 + choice.cost_slack)
    near = [p for p in eligible if p.cost <= limit]
    fastest = min(near, key=lambda p: rank_key(p, "time"))
    # minutes are not worth yen: the cheapest of those within 5 % of the fastest's wall time
    best = min((p for p in near if p.wall_s * 100 <= fastest.wall_s * (100 + WALL_SLACK_PCT)),
               key=lambda p: rank_key(p, "cost"))
    while True:
        better = [q for q in eligible if q.cost <= best.cost * (1 + TRADE_COST) and 2 * q.wall_s <= best.wall_s
                  and best.wall_s - q.wall_s >= TRADE_SAVES_S]
        if not better:
            return best
        best = min(better, key=lambda p: rank_key(p, "time"))


def quota_increase(plan: Plan) -> int:
    """vCPUs the plan needs beyond the quotas known to it (the providers' sourced defaults: Azure's
    20 regional vCPUs, its GPU families' 0); 0 where it fits them or its quota is only unknown."""
    return sum(max(0, int(w.get("vcpus", 0)) - int(w.get("limit", 0))) for w in plan.warned_by if w.code in KNOWN_OVER)


def near_equal(best: Plan, eligible: list[Plan], choice: Choice) -> list[Plan]:
    """The plans as good as `best` under the balanced rule: at most cost_slack dearer and at most
    5 % slower (WALL_SLACK_PCT)."""
    return [q for q in eligible if q.cost <= best.cost * (1 + choice.cost_slack)
            and q.wall_s * 100 <= best.wall_s * (100 + WALL_SLACK_PCT)]


def least_increase(best: Plan, eligible: list[Plan], choice: Choice) -> Plan:
    """Where the pick needs a quota increase, the plan needing the least among the near-equal
    ones (best itself on a tie): a new account can launch it sooner, or at all."""
    if not quota_increase(best):
        return best
    return min(near_equal(best, eligible, choice), key=lambda q: (quota_increase(q), q is not best, rank_key(q, "cost")))


def cost_cap(rec: Plan | None, eligible: list[Plan], choice: Choice) -> Decimal | None:
    """The most a plan may cost and still be picked under `choice` (None: no cap)."""
    if choice.budget is not None:
        return choice.budget
    if choice.objective != "balanced" or rec is None or not eligible:
        return None
    cheapest = min(p.cost for p in eligible)
    return max(cheapest * (1 + choice.cost_slack), rec.cost * (1 + TRADE_COST))


def faster_plan(rec: Plan | None, eligible: list[Plan]) -> Plan | None:
    """The cheapest plan finishing at least a quarter sooner than the pick for at most 10 % more."""
    if rec is None:
        return None
    sooner = [p for p in eligible if 4 * p.wall_s <= 3 * rec.wall_s and p.cost <= rec.cost * (1 + FASTER_SHARE)]
    return min(sooner, key=lambda q: rank_key(q, "cost")) if sooner else None


def faster_for_more(rec: Plan | None, eligible: list[Plan]) -> str:
    """One line naming a plan that finishes at least a quarter sooner than the pick for a little
    more (at most 10 % dearer), the cheapest such; "" where there is none."""
    p = faster_plan(rec, eligible)
    if rec is None or p is None:
        return ""
    more = p.cost - rec.cost
    share = f"{more / rec.cost * 100:.1f} %" if rec.cost else "-"
    how = f"for +{fmt.yen(more)} ({share})" if more > 0 else f"for {fmt.yen(-more)} less"
    return (f"{how}, {p.label} {p.provider} {p.region} finishes in {fmt.duration(p.wall_s)} instead of"
            f" {fmt.duration(rec.wall_s)}")


def could_beat(cand: Candidate, rec: Plan, objective: str, deadline_s: int | None, cap: Decimal | None = None) -> bool:
    """Could some schedule of this candidate's fleet rank before the recommendation (and cost at
    most `cap`, where one is given)?"""
    p = cand.plan
    if not p.recommendable or (not p.feasible and not outcomes.only(p.excluded_by, Code.DEADLINE)):
        return False
    if deadline_s is not None and cand.wall_lb > deadline_s:
        return False
    if cap is not None and cand.cost_lb > cap:
        return False
    yen = whole_yen(cand.cost_lb)
    warned = warning_weight(p)  # a fleet's warnings do not depend on its schedule
    bound = (yen, cand.wall_lb, warned, p.count) if objective == "cost" else (cand.wall_lb, yen, warned, p.count)
    return bound < rank_key(rec, objective)

def could_join(cand: Candidate, front: list[Plan], deadline_s: int | None) -> bool:
    """Could some schedule of this candidate's fleet join the cost / wall-time frontier (no
    plan of it, its own aside, at most as dear and as long as its bounds)?"""
    p = cand.plan
    if not p.recommendable or (not p.feasible and not outcomes.only(p.excluded_by, Code.DEADLINE)):
        return False
    if deadline_s is not None and cand.wall_lb > deadline_s:
        return False
    i = bisect.bisect_right([q.cost for q in front], cand.cost_lb) - 1  # the quickest plan at most as dear
    if i >= 0 and front[i] is p:
        i -= 1
    return i < 0 or front[i].wall_s > cand.wall_lb


def gap(open_: list[Candidate], rec: Plan | None, objective: str, deadline_s: int | None,
        cap: Decimal | None = None) -> tuple[Decimal | int, bool]:
    """How much better than the pick any schedule of any candidate could at most be (yen for
    cost, seconds for time), and whether that is within the MILP solvers' own tolerance.

    Why a tolerance: with per-second billing, fleets of one type differ in cost only by how each
    machine's seconds round, a few yen on a large batch; proving which schedule rounds best is
    as hard as the whole problem and worth nothing. HiGHS calls a MILP optimal at a relative gap
    of 1e-4 (its mip_rel_gap default); the estimate is `proven` on the same terms, and says the gap."""
    if rec is None:
        return 0, False
    cost = objective == "cost"
    mine = rec.cost if cost else rec.wall_s
    bounds = [c.cost_lb if cost else c.wall_lb for c in open_ if could_beat(c, rec, objective, deadline_s, cap)]
    gap = max(mine - min(bounds, default=mine), mine * 0)  # Decimal yen for cost, int seconds for time
    return gap, gap <= RELATIVE_GAP * mine


def pareto(plans: list[Plan]) -> list[Plan]:
    out: list[Plan] = []
    best_wall = None
    # in whole yen, as shown: a plan a few sen dearer and slower than another is not on it
    for p in sorted(plans, key=lambda p: (p.cost_jpy, p.wall_s, p.cost, p.count)):
        if best_wall is None or p.wall_s < best_wall:
            out.append(p)
            best_wall = p.wall_s
    return out


def why(rec: Plan | None, eligible: list[Plan], choice: Choice, plans: list[Plan], setting: Setting,
        scale: str | None = None) -> str:
    """One line: why the pick won, stating the rule of the choice; for the strict objectives,
    naming the rule that decided against each plan that tied with it; or why nothing can be
    recommended. Its durations in `scale` (fmt.scale_of), the unit of the table it is read under:
    "1:14 h" under a row of "1:14 h", never "74 min" (issue 42)."""
    objective = choice.base
    if rec is None:
        if choice.budget is not None and eligible:
            cheapest = min(eligible, key=lambda p: rank_key(p, "cost"))
            return (f"no plan within the budget {fmt.yen(choice.budget)}: the cheapest, {cheapest.label}"
                    f" {cheapest.provider} {cheapest.region}, costs {fmt.yen(cheapest.cost)}; give --budget"
                    f" {cheapest.cost_jpy} or more")
        return nothing_feasible(plans, objective, setting)
    if choice.budget is not None:
        return (f"fastest plan within the budget {fmt.yen(choice.budget)} ({fmt.duration(rec.wall_s, scale)} wall,"
                f" {fmt.yen(rec.cost)})")
    if choice.objective == "balanced":
        return balanced_why(rec, eligible, choice, scale)
    if objective == "time":
        head = f"fastest feasible plan ({fmt.duration(rec.wall_s, scale)} wall, {fmt.yen(rec.cost)})"
        same = f"as fast ({fmt.duration(rec.wall_s, scale)})"
        lost = ("dearer", "as dear, but with more warnings", "as dear with as many warnings, but more machines")
    else:
        head = f"cheapest feasible plan ({fmt.yen(rec.cost)}, {fmt.duration(rec.wall_s, scale)} wall)"
        same = f"also {fmt.yen(rec.cost)}"
        lost = ("longer", "as long, but with more warnings", "as long with as many warnings, but more machines")
    ties = _ties(rec, eligible, objective, lost, lambda p: rank_key(p, objective)[0] == rank_key(rec, objective)[0])
    return f"{head}; {same}: {ties}: {RULES[objective]}" if ties else head


def tied_groups(rec: Plan, eligible: list[Plan], objective: str, tied) -> dict[int, list[tuple[str, Plan]]]:
    """The plans `tied` with the pick, by the rule of the rank key that decided against them:
    rule -> (label, first plan of that label) in rank order."""
    mine = rank_key(rec, objective)
    by_rule: dict[int, list[tuple[str, Plan]]] = {}
    for p in eligible:
        theirs = rank_key(p, objective)
        if p is rec or not tied(p):
            continue
        rule = next((i for i in (1, 2, 3) if theirs[i] != mine[i]), 4)
        label = f"{p.label} {'from an image' if p.setup == 'image' else 'from scratch'}"
        group = by_rule.setdefault(rule, [])
        if label not in (x for x, _ in group):
            group.append((label, p))
    return by_rule


def named(rec: Plan | None, eligible: list[Plan], choice: Choice) -> list[Plan]:
    """Every plan the why line names (the cheapest, the ties it lists): the short view shows them."""
    if rec is None or not eligible:
        return []
    out = [min(eligible, key=lambda p: rank_key(p, "cost"))]
    if choice.budget is not None:
        return out
    if choice.objective == "balanced":
        groups = tied_groups(rec, eligible, "cost", lambda p: p.cost_jpy == rec.cost_jpy and p.wall_s == rec.wall_s)
    else:
        first = rank_key(rec, choice.base)[0]
        groups = tied_groups(rec, eligible, choice.base, lambda p: rank_key(p, choice.base)[0] == first)
    return out + [p for group in groups.values() for _, p in group[:3]]


def _ties(rec: Plan, eligible: list[Plan], objective: str, lost: tuple[str, ...], tied) -> str:
    """The plans `tied` with the pick, grouped by the rule of the rank key that decided against them."""
    parts = []
    for rule, group in sorted(tied_groups(rec, eligible, objective, tied).items()):
        labels = [label for label, _ in group]
        more = f" and {len(labels) - 3} more" if len(labels) > 3 else ""
        why = lost[rule - 1] if rule < 4 else "equal on every rule, listed after it"
        parts.append(f"{', '.join(labels[:3])}{more} ({why})")
    return "; ".join(parts)


def balanced_why(rec: Plan, eligible: list[Plan], choice: Choice, scale: str | None = None) -> str:
    """The default rule in words, with the figures that applied it."""
    cheapest = min(eligible, key=lambda p: rank_key(p, "cost"))
    slack = f"{choice.cost_slack * 100:f}".rstrip("0").rstrip(".") or "0"  # "0", not "" (--cost-slack 0)
    rule = f"rule: fastest within {slack} % of the cheapest, or cheaper within 5 % of its wall; --objective cost: cheapest"
    lost = ("longer", "as long, but with more warnings", "as long with as many warnings, but more machines")
    ties = _ties(rec, eligible, "cost", lost, lambda p: p.cost_jpy == rec.cost_jpy and p.wall_s == rec.wall_s)
    ties = f"; also {fmt.yen(rec.cost)} and {fmt.duration(rec.wall_s, scale)}: {ties}" if ties else ""
    before = balanced(cheapest, eligible, choice)
    if before is not rec:  # the quota rule moved the pick
        need = quota_increase(rec)
        rule += (f"; quota: of the plans within {slack} % and 5 % of {before.label} (needs {quota_increase(before)} vCPUs"
                 f" more quota), the one needing the least ({'none' if not need else f'{need} vCPUs'})")
    if rec is cheapest or (rec.cost_jpy == cheapest.cost_jpy and rec.wall_s <= cheapest.wall_s):
        return f"the cheapest ({fmt.yen(rec.cost)}, {fmt.duration(rec.wall_s, scale)}){ties}; {rule}"
    if rec.cost > cheapest.cost * (1 + choice.cost_slack):
        rule += "; 2 % more again where that halves the wall time and saves 2 h"
    more = Decimal(rec.cost_jpy - cheapest.cost_jpy)  # in whole yen, as both are shown
    share = more / cheapest.cost * 100 if cheapest.cost else Decimal(0)
    return (f"+{fmt.yen(more)} ({share:.1f} %) over the cheapest, {cheapest.label}"
            f" ({fmt.yen(cheapest.cost)}, {fmt.duration(cheapest.wall_s, scale)}){ties}; {rule}")


def nothing_feasible(plans: list[Plan], objective: str, setting: Setting) -> str:
    """Why nothing can be recommended, naming what excludes the most promising plan: the best
    ranked of those that were scheduled and then excluded (a deadline, a quota), saying by how
    much; else the exclusion of the cheapest offer per GPU-hour."""
    if any(p.feasible for p in plans):
        return "no plan can be recommended: the only feasible ones use owned hardware; name it with --owned"
    scheduled = sorted((p for p in plans if p.machines and p.recommendable), key=lambda p: rank_key(p, objective))
    if scheduled:
        best = scheduled[0]
        how = "from an image" if best.setup == "image" else "from scratch"
        which = "fastest" if objective == "time" else "cheapest"
        first = outcomes.render(best.excluded_by[0])
        text = f"no feasible plan: the {which}, {best.label} {how} ({fmt.yen(best.cost)}), {first}"
        if setting.deadline_s is not None and best.excluded_by[0].code is Code.DEADLINE:
            fastest = min(scheduled, key=judged_wall)
            least = format_duration(-(-judged_wall(fastest) // 60) * 60)
            takes = (f"takes up to {fmt.duration(judged_wall(fastest))} at its wall range's slow end"
                     if setting.strict_deadline else f"takes {fmt.duration(fastest.wall_s)}")
            if fastest is best:
                text += f"; no plan is faster: give --deadline {least} or more"
            else:
                text += (f"; the fastest, {fastest.label} {'from an image' if fastest.setup == 'image' else 'from scratch'}"
                         f" ({fmt.yen(fastest.cost)}), {takes}: give --deadline {least} or more")
        return text
    if not plans:
        return "no feasible plan: no candidates"

    def promise(p: Plan):
        o = p.fleet[0][0]
        return (o.price_jpy_per_hour is None, (o.price_jpy_per_hour or 0) / max(1, o.gpu_count))

    best = min(plans, key=promise)
    others = len({outcomes.shown(p.excluded_by[0]) for p in plans}) - 1  # kinds as they read
    return (f"no feasible plan: the cheapest offer per GPU-hour, {best.fleet[0][0].name}, is excluded: {best.reason}"
            + (f" (and {others} other reason{'s' if others > 1 else ''}; --all lists them)" if others else ""))


def judged_wall(plan: Plan) -> int:
    """The wall time --deadline judged the plan on: its wall, or with --strict its wall range's
    slow end (the figure its deadline exclusion carries)."""
    late = next((o for o in plan.excluded_by if o.code is Code.DEADLINE), None)
    return int(late.get("wall_s")) if late is not None else plan.wall_s


def deadline_words(rec: Plan | None, setting: Setting, streams: bool = False) -> str:
    """For the why line, where --deadline is given: with --strict, that the pick meets it at its
    wall range's slow end; without, where that slow end passes it, that it may be missed (the
    point estimate meets it; its speed's band says how far off that can be)."""
    from gpuplan.planning import evidence

    if rec is None or setting.deadline_s is None:
        return ""
    span = evidence.plan_range(rec, streams)
    if span is None:
        return ""
    slow, deadline = span.wall_s[1], setting.deadline_s
    slow_text, deadline_text = fmt.durations([slow, deadline])  # in one unit
    if setting.strict_deadline:
        return f"deadline {deadline_text} met at the wall range's slow end ({slow_text}; --strict)"
    if slow <= deadline:
        return ""
    return (f"deadline: its wall range reaches {slow_text}, past the deadline {deadline_text}, if its speed is as far"
            " off as its band allows; --strict plans on the range's slow end")


def break_even(plan: Plan, hourly: Plan | None, setting: Setting) -> Plan:
    """The note of an owned or monthly machine's plan, with its break-even against the best
    hourly plan: batches to pay off a purchase; hours a month above which monthly rent wins."""
    from dataclasses import replace

    mine = plan.fleet[0][0]
    if hourly is None:
        return replace(plan, note=f"{plan.note}; no hourly plan to compare it with")
    hours = Decimal(plan.wall_s) / 3600
    if mine.kind == "monthly":
        rent = model.month_price(mine, setting)
        per_hour = hourly.cost / hours  # what the hourly plan costs per hour of this work on the monthly server
        need = (rent / per_hour).quantize(Decimal(1), rounding=ROUND_CEILING)
        month_h = mine.billing_granularity_s // 3600
        line = (f"break-even: renting it at {fmt.yen(rent)} a month beats {hourly.label} ({fmt.yen(hourly.cost)} for this"
                f" batch, {fmt.duration(plan.wall_s)} of work here) when it is busy more than {fmt.count(int(need))} h a month"
                + (f" (more than the month's {month_h} h: never)" if need > month_h else ""))
        return replace(plan, note=f"{plan.note}; {line}")
    saving = hourly.cost - plan.cost
    if mine.price is None:  # an inventory host: no purchase to pay off
        line = f"the best hourly plan, {hourly.label}, costs {fmt.yen(hourly.cost)} per batch"
    elif saving <= 0:
        line = (f"buying never pays off: the best hourly plan costs {fmt.yen(hourly.cost)} per batch, power alone "
                f"{fmt.yen(plan.cost)}")
    else:
        batches = math.ceil((mine.price or Decimal(0)) / saving)
        line = (f"buying pays off after {fmt.count(batches)} batches like this one "
                f"(about {fmt.count(int(batches * hours))} hours of this work on it) against {fmt.yen(hourly.cost)} per batch"
                f" for {hourly.label}")
    return replace(plan, note=f"{plan.note}; {line}")
