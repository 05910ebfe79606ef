"""The optimizer: every candidate plan for a workload over a catalog, the Pareto frontier and a pick.

This module runs the parts: candidates.py (every fleet, priced from a schedule), scheduling.py
(makespan schedules; imports nothing of gpuplan), ranking.py (the order, the frontier, the
proof, the why-line), and seeks better schedules only where they could change the answer.

Candidates. For every offer (after --provider/--region): N machines of it (counts 1-8, powers
of two up to the count that gives every job its own slot, that count, and the smallest count
that can meet the deadline), k jobs per GPU for every packing the workload measured, scratch
and image setup; for each provider/region, pairs of its three best offer types (mixed fleets);
data-parallel workloads: 1, 2, 4, 8, 16 machines running each job over all their GPUs.

What is optimised, and why. With per-machine billing and machines released when their own
jobs end, a fleet's cost is sum over machines of round_up(setup + staging + busy time). For
one offer type the sum of busy time is the same however jobs are assigned, so cost differs
between schedules only by rounding and by how the slots of a multi-GPU machine are grouped;
wall time is the makespan. So a schedule is chosen to minimise the makespan (P||Cmax for one
type, Q||Cmax for a mix), then the slots are grouped onto machines longest-first, which
minimises the sum of machine maxima for those slot loads. Across fleets the rules in ranking.RULES
pick the plan (cost in whole yen, then wall time, then fewer warnings, then fewer machines; or
time first); a deadline removes plans whose wall time is later.

Scale. Plans of 20,000 jobs hold thousands of machines: machines alike are kept as columns
(model.Loads / plan_types.Machines) and priced in one pass, their job names built only when
read; scratch and image plans of one fleet share their machines' seconds.

A slot's busy time is its jobs' reference time x the offer's factor (speed, co-location,
packing), rounded up to a second once. An offer scales every job by the same factor, so one
schedule of the reference jobs over S identical slots serves every offer with S slots: the
work is one schedule per slot count, not per offer.

Makespan is NP-hard and greedy LPT is not optimal (jobs 3,3,2,2,2 on 2 machines: LPT 7,
optimum 6). Every schedule starts from LPT and is proven optimal when it reaches a lower
bound (max job, total / machines, the k+1 shortest of the k*m+1 longest jobs, fluid bound for
mixed speeds); up to 12 jobs, by branch and bound. Candidates whose bounds (cost: the larger
of its fixed part plus the jobs' cheapest possible time, and every machine's setup billed as
its provider bills; wall: earliest start plus the makespan bound) could still make them the
pick or put them on the frontier are improved by moves and swaps off the busiest machine
(heaps find it and the least busy in O(log m)); improving all of them was most of the time of
a 20,000-job estimate. Then every candidate not proven whose bounds could still beat the
recommendation is solved exactly by a MILP over job classes (jobs of equal length are
interchangeable: x[machine, class] counts) with HiGHS through scipy.optimize.milp, imported
only then, where the MILP is small enough. What remains is reported as a gap: the estimate is
`proven` when no schedule of any candidate could beat the pick by more than HiGHS's own
relative tolerance (1e-4), and says by how much at most. Mixes whose bounds are beaten by a
plan already listed are not scheduled at all: they could be neither picked nor on the frontier.
"""


from __future__ import annotations

import time
from decimal import Decimal

from gpuplan.collector import collector_paused
from gpuplan.planning import fmt, ranking
from gpuplan.planning.candidates import EXACT, SWAPS, Planner, prune
from gpuplan.planning.model import Setting
from gpuplan.planning.outcomes import Code
from gpuplan.planning.plan_types import Estimate, Plan, Workload

EXACT_BUDGET_S = 1.5  # no new exact solves once the estimate has run this long
EXACT_PHASE_S = 0.6  # and exact solving adds at most this much: each solve is limited to what is left


def estimate(workload: Workload, setting: Setting, provider: str | None = None, region: str | None = None,
             objective: str = "balanced", mixes: bool = True, cost_slack: Decimal = ranking.DEFAULT_SLACK,
             budget: Decimal | None = None) -> Estimate:
    """Every candidate plan, the cost/wall-time Pareto frontier and the recommendation
    (_estimate), with Python's cyclic garbage collector paused (collector_paused)."""
    with collector_paused():
        return _estimate(workload, setting, provider, region, objective, mixes, cost_slack, budget)


def _estimate(workload: Workload, setting: Setting, provider: str | None, region: str | None, objective: str,
              mixes: bool, cost_slack: Decimal, budget: Decimal | None) -> Estimate:
    """Every candidate plan, the cost/wall-time Pareto frontier and the recommendation.

    Schedules are first found by the fast heuristics (proven optimal where they meet a lower
    bound). Then every candidate whose bounds could still beat the recommendation is solved
    exactly where that is tractable; the estimate is `proven` when no schedule of any candidate
    fleet could beat the recommendation."""
    from gpuplan.errors import UsageError

    if objective not in ranking.OBJECTIVES:
        raise UsageError(f"bad --objective {objective!r}: use balanced, cost or time")
    choice = ranking.Choice(objective, cost_slack, budget)
    started = time.perf_counter()
    cat = setting.catalog
    offers = cat.find(provider=provider, region=region, spot=setting.spot)
    if not offers:
        where = " ".join(x for x in (provider, region) if x)
        if region and not cat.find(region=region):  # a region the catalog has no rows in at all
            from gpuplan.market import regions

            raise UsageError(f"no offers in {region}: {regions.no_offers([region], cat.snapshot)}")
        raise UsageError(f"no offers for {where} in catalog {cat.snapshot}; see `gpuplan catalog`")
    offers, pruned = prune(offers, setting)
    planner = Planner(workload, setting)
    plans: list[Plan] = []
    for offer in offers:
        plans.extend(planner.single(offer))

    _seek(planner, plans, choice, SWAPS)  # before the mixes: their pruning compares with these plans
    if mixes and workload.parallel == "none" and workload.streams is None and len(workload.jobs) > 1:
        best_per_offer: dict[tuple[str, str], dict[str, tuple]] = {}
        for p in plans:
            if p.feasible and p.recommendable and p.per_gpu == 1 and p.fleet[0][0].kind == "cloud":
                o = p.fleet[0][0]
                group = best_per_offer.setdefault((o.provider, o.region), {})
                key = ranking.rank_key(p, choice.base)
                if o.key not in group or key < group[o.key][0]:
                    group[o.key] = (key, o)
        singles = list(plans)
        for group in best_per_offer.values():
            top = [o for _, o in sorted(group.values(), key=lambda x: x[0])[:3]]
            for i in range(len(top)):
                for j in range(i + 1, len(top)):
                    plans.extend(planner.pair(top[i], top[j], singles))

    _seek(planner, plans, choice, SWAPS)
    rec, eligible = ranking.choose(plans, choice)
    now = time.perf_counter()
    if rec is not None and now - started <= EXACT_BUDGET_S:
        planner.exact_until = min(started + EXACT_BUDGET_S, now + EXACT_PHASE_S)
        _seek(planner, plans, choice, EXACT, deadline=planner.exact_until)
        rec, eligible = ranking.choose(plans, choice)
    open_ = [c for c in planner.candidates if not c.plan.optimal]
    if choice.objective == "balanced":  # the pick rests on the cheapest (its cost sets the cap): prove that one
        gap, proven = ranking.gap(open_, eligible[0] if eligible else None, "cost", setting.deadline_s)
    else:
        gap, proven = ranking.gap(open_, rec, choice.base, setting.deadline_s, ranking.cost_cap(rec, eligible, choice))

    # the why's durations in the unit the estimate's table writes every plan's wall and billed in
    scale = fmt.scale_of([p.wall_s for p in eligible] + [p.billed_s for p in eligible])
    reason = ranking.why(rec, eligible, choice, plans, setting, scale)
    words = ranking.deadline_words(rec, setting, workload.streams is not None)
    reason = f"{reason}; {words}" if words else reason
    faster = ranking.faster_for_more(rec, eligible)
    hourly = next((p for p in eligible if all(o.kind == "cloud" for o, _ in p.fleet)), None)
    plans = [ranking.break_even(p, hourly, setting) if p.fleet[0][0].kind in ("owned", "monthly") and p.feasible else p
             for p in plans]
    rec, eligible = ranking.choose(plans, choice)  # the same pick, now carrying its note
    feasible = [p for p in plans if p.feasible]
    pareto = ranking.pareto([p for p in feasible if p.recommendable])
    ordered = sorted(feasible, key=lambda p: (not p.recommendable, ranking.rank_key(p, choice.base)))
    ordered += [p for p in plans if not p.feasible]
    extra = {}
    if planner.skipped_mixes:
        extra["skipped_mixes"] = (f"{planner.skipped_mixes} mixed fleets not scheduled: even their lower bounds "
                                  "are beaten by a listed plan or miss the deadline")
    if pruned:
        extra["pruned"] = pruned_line(pruned)
    unmeasured = [p for p in plans if not p.feasible and p.excluded_by and p.excluded_by[0].code is Code.NO_SPEED]
    if unmeasured:  # said in the estimate, not only under --all: these offers were not guessed
        named = sorted({p.excluded_by[0].get("gpu") for p in unmeasured})
        extra["no_speed"] = (f"no published {workload.kind} figure for {', '.join(named)}: {fmt.plural(len(unmeasured), 'plan')}"
                             " left unplanned, not guessed from another class; `gpuplan probe` times your job on them")
    return Estimate(
        snapshot=cat.snapshot, workload=workload, plans=tuple(ordered), pareto=tuple(pareto), recommended=rec,
        reason=reason, assumptions=rec.assumptions if rec else (), solver_seconds=time.perf_counter() - started,
        proven=proven, gap=gap, extra=extra, faster=faster, named=tuple(ranking.named(rec, eligible, choice)),
        ranked_on=choice.base, deadline_s=setting.deadline_s, strict=setting.strict_deadline,
    )


def pruned_line(pruned: list) -> str:
    """What the estimate says of the offers it did not plan (candidates.prune), naming a few."""
    first = ", ".join(f"{p.offer.name} {p.offer.region} ({fmt.yen(p.offer.price_jpy_per_hour, 2)}/h; "
                      f"{p.by.region} {fmt.yen(p.by.price_jpy_per_hour, 2)}/h)" for p in pruned[:2])
    more = f" and {fmt.count(len(pruned) - 2)} more" if len(pruned) > 2 else ""
    return (f"{fmt.plural(len(pruned), 'offer')} not planned: the same size is as cheap or cheaper in another region"
            f" with the same quotas, so no plan on it could win nor join the frontier: {first}{more};"
            " --region plans a region's own")


def _seek(planner: Planner, plans: list[Plan], choice: ranking.Choice, effort: int,
          deadline: float | None = None) -> None:
    """Seek harder schedules (SWAPS: improved; EXACT: solved exactly) for the candidates that
    could change the answer, until none is left: with SWAPS, those that could be picked or join
    the cost / wall-time frontier; with EXACT, those that could be picked. Every candidate was
    scheduled by LPT first: for 20,000 jobs over a whole catalog, improving every schedule is
    most of the work, and most candidates are beaten by their bounds alone. `plans` is updated
    in place; EXACT stops starting new solves past `deadline` (time.perf_counter())."""
    while True:
        rec, eligible = ranking.choose(plans, choice)
        front = ranking.pareto(eligible)
        cap = ranking.cost_cap(rec, eligible, choice)
        order = "time" if choice.objective == "balanced" else choice.base  # under the cap, the fastest wins
        todo = [c for c in planner.candidates if c.effort < effort and c.redo is not None and not c.plan.optimal
                and ((rec is not None and ranking.could_beat(c, rec, order, planner.s.deadline_s, cap))
                     or (effort == SWAPS and ranking.could_join(c, front, planner.s.deadline_s)))]
        if not todo or (deadline is not None and time.perf_counter() > deadline):
            return
        at = {id(p): i for i, p in enumerate(plans)}
        for c in todo:
            assert c.redo is not None  # todo holds only candidates that can be sought harder
            better = c.redo(effort)
            plans[at[id(c.plan)]] = better.plan
            c.plan, c.effort, c.redo = better.plan, better.effort, better.redo
