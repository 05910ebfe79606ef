"""The optimizer: every candidate plan for a workload over a catalog, the Pareto frontier and a pick.

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
minimises the sum of machine maxima for those slot loads. Across fleets the rules in RULES
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

import bisect
import contextlib
import heapq
import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal

from gpuplan.planning import fmt, model
from gpuplan.planning.model import Infeasible, Setting
from gpuplan.planning.plan_types import Estimate, Plan, Workload
from gpuplan.planning.types import Offer
from gpuplan.planning.units import format_duration

MILP_TIME_LIMIT_S = 1.0
MILP_MAX_VARIABLES = 20_000  # machines x job classes; larger MILPs rarely finish in the limit
RELATIVE_GAP = Decimal("1e-4")  # HiGHS mip_rel_gap default: "optimal" means within this
EXACT_BUDGET_S = 1.5  # no new exact solves once the estimate has run this long
LPT, SWAPS, EXACT = 0, 1, 2  # how hard a candidate's schedule is sought: greedy, improved, exactly solved


# ---------------------------------------------------------------------------------------------
# scheduling: p[t][j] = seconds of job j on a machine of type t; machine_type[m] = t


@dataclass(frozen=True)
class Schedule:
    assign: tuple[int, ...]  # job -> machine
    loads: tuple[int, ...]  # machine -> seconds
    makespan: int
    lower_bound: int
    optimal: bool
    method: str


def lpt(p: Sequence[Sequence[int]], machine_type: Sequence[int]) -> list[int]:
    """Longest processing time first: each job, longest first, to the machine where it ends soonest."""
    return _lpt(p, machine_type)[0]


def _lpt(p: Sequence[Sequence[int]], machine_type: Sequence[int],
         order: list[int] | None = None) -> tuple[list[int], list[int]]:
    """LPT's assignment and the machines' loads; `order`: the jobs longest first, if known."""
    n, mcount = len(p[0]), len(machine_type)
    if order is None:
        order = _longest_first(p)
    assign = [0] * n
    loads = [0] * mcount
    if len(p) == 1:  # identical machines: one heap
        p0 = p[0]
        first = order[:mcount]
        if first and p0[first[-1]] > 0:  # the longest jobs go one to each machine, in machine order
            for m, j in enumerate(first):
                assign[j] = m
            heap = [(p0[j], m) for m, j in enumerate(first)] + [(0, m) for m in range(len(first), mcount)]
            heapq.heapify(heap)
            order = order[mcount:]
        else:
            heap = [(0, m) for m in range(mcount)]
        replace = heapq.heapreplace
        for j in order:
            load, m = heap[0]
            assign[j] = m
            replace(heap, (load + p0[j], m))
        for load, m in heap:
            loads[m] = load
        return assign, loads
    heaps: list[list[tuple[int, int]]] = [[] for _ in p]
    for m, t in enumerate(machine_type):
        heaps[t].append((0, m))
    for h in heaps:
        heapq.heapify(h)
    for j in order:
        best_t = min((t for t in range(len(p)) if heaps[t]), key=lambda t: (heaps[t][0][0] + p[t][j], t))
        load, m = heapq.heappop(heaps[best_t])
        assign[j] = m
        heapq.heappush(heaps[best_t], (load + p[best_t][j], m))
    return assign, _loads(p, machine_type, assign)


def _longest_first(p: Sequence[Sequence[int]]) -> list[int]:
    """Job indexes by their shortest time, longest first; ties keep job order."""
    shortest = p[0] if len(p) == 1 else [min(col) for col in zip(*p)]
    return sorted(range(len(shortest)), key=shortest.__getitem__, reverse=True)


def lower_bound(p: Sequence[Sequence[int]], machine_type: Sequence[int], order: list[int] | None = None) -> int:
    n, mcount = len(p[0]), len(machine_type)
    types = sorted(set(machine_type))
    lb = max(p[types[0]]) if len(types) == 1 else max(min(p[t][j] for t in types) for j in range(n))
    if len(types) == 1:
        t = machine_type[0]
        lb = max(lb, -(-sum(p[t]) // mcount))
        # of the k*m + 1 longest jobs some machine runs k + 1: at least the k + 1 shortest of them
        s = [p[t][j] for j in order] if order is not None else sorted(p[t], reverse=True)
        prefix = [0, *itertools.accumulate(s)]
        k = 1
        while k * mcount < n:
            lb = max(lb, prefix[k * mcount + 1] - prefix[k * mcount - k])
            k += 1
        return lb
    # fluid bound for uniform machines: job j needs p[t][j] on type t; rate of type t = 1/p[t][j]
    # take the first type as reference and the average speed ratio per type (valid: we use min ratio)
    t0 = machine_type[0]
    ratios = {t: min(p[t0][j] / p[t][j] for j in range(n)) for t in types}
    capacity = sum(ratios[machine_type[m]] for m in range(mcount))
    lb = max(lb, math.ceil(sum(p[t0]) / capacity - 1e-9))
    return lb


def _loads(p, machine_type, assign) -> list[int]:
    loads = [0] * len(machine_type)
    if len(p) == 1:
        for d, m in zip(p[0], assign):
            loads[m] += d
        return loads
    for j, m in enumerate(assign):
        loads[m] += p[machine_type[m]][j]
    return loads


class _Loads:
    """Machine loads, with the busiest machine (lowest index among equals) and the k least busy
    (ties by index) in O(log m) a change, from two heaps whose stale entries are dropped when met."""

    def __init__(self, loads: list[int]):
        self.loads = loads
        self.high = [(-x, m) for m, x in enumerate(loads)]
        self.low = [(x, m) for m, x in enumerate(loads)]
        heapq.heapify(self.high)
        heapq.heapify(self.low)

    def busiest(self) -> int:
        while -self.high[0][0] != self.loads[self.high[0][1]]:
            heapq.heappop(self.high)
        return self.high[0][1]

    def idlest(self, k: int, skip: int):
        """Up to k machines other than `skip`, least busy first, one at a time (most rounds need
        only the first); the heap is whole again when the generator is closed."""
        seen, kept = set(), []
        try:
            while self.low and len(kept) - (skip in seen) < k:
                x, m = heapq.heappop(self.low)
                if x != self.loads[m] or m in seen:
                    continue  # stale, or a second entry for the same load
                seen.add(m)
                kept.append((x, m))
                if m != skip:
                    yield m
        finally:
            for entry in kept:
                heapq.heappush(self.low, entry)

    def set(self, m: int, load: int) -> None:
        self.loads[m] = load
        heapq.heappush(self.high, (-load, m))
        heapq.heappush(self.low, (load, m))


def improve(p, machine_type, assign: list[int], lb: int, loads: list[int],
            rounds: int = 10_000) -> tuple[list[int], list[int]]:
    """Moves and swaps off the busiest machine while they lower the larger of the two loads:
    each round tries the 16 least busy machines in turn. On identical machines the move is the
    longest job that leaves the other machine below the busiest one, else the swap that evens
    the two out best (found on sorted job lengths); on machines of two speeds, the first found.
    Returns the assignment and the loads (both changed in place)."""
    mcount = len(machine_type)
    state = _Loads(loads)
    loads = state.loads
    identical = len(p) == 1
    held: list[list[int]] = [[] for _ in range(mcount)]
    for j, m in enumerate(assign):
        held[m].append(j)
    # built for a machine when a round first looks at it (most never are): job class (its time
    # on each machine type) -> jobs, and on identical machines the sorted job lengths
    classes: dict[int, dict[tuple, list[int]]] = {}
    sizes: dict[int, list[int]] = {}

    def on(m: int) -> dict[tuple, list[int]]:
        mine = classes.get(m)
        if mine is None:
            mine = classes[m] = {}
            for j in held[m]:
                mine.setdefault(tuple(col[j] for col in p), []).append(j)
            if identical:
                sizes[m] = sorted(p[0][j] for j in held[m])
        return mine

    def shift(src: int, dst: int, c: tuple) -> None:
        j = on(src)[c].pop()
        if not classes[src][c]:
            del classes[src][c]
        on(dst).setdefault(c, []).append(j)
        assign[j] = dst
        if identical:
            del sizes[src][bisect.bisect_left(sizes[src], c[0])]
            bisect.insort(sizes[dst], c[0])

    for _ in range(rounds):
        a = state.busiest()
        la = loads[a]
        if la <= lb:
            break
        step = None
        with contextlib.closing(state.idlest(16, a)) as candidates:
            for b in candidates:
                if identical:
                    on(a), on(b)
                    found = _identical_step(sizes[a], sizes[b], la - loads[b])
                    step = found and (b, (found[0],), None if found[1] is None else (found[1],))
                else:
                    step = _first_step(on(a), on(b), machine_type[a], machine_type[b], la, loads[b], b)
                if step:
                    break
        if not step:
            break
        b, ca, cb = step
        ta, tb = machine_type[a], machine_type[b]
        shift(a, b, ca)
        na, nb = la - ca[ta], loads[b] + ca[tb]
        if cb is not None:
            shift(b, a, cb)
            na, nb = na + cb[ta], nb - cb[tb]
        state.set(a, na)
        state.set(b, nb)
    return assign, loads


def _first_step(on_a: dict, on_b: dict, ta: int, tb: int, la: int, lb_: int, b: int):
    """Machines of two speeds: (b, class to move, None) or (b, class from a, class from b) to
    swap, the first found that leaves both below la; None where there is none."""
    for ca in on_a:
        if lb_ + ca[tb] < la:
            return b, ca, None
        for cb in on_b:
            if max(la - ca[ta] + cb[ta], lb_ - cb[tb] + ca[tb]) < la:
                return b, ca, cb
    return None


def _identical_step(mine: list[int], theirs: list[int], gap: int) -> tuple[int, int | None] | None:
    """How the busiest machine (job lengths `mine`, sorted) gives work to one `gap` less busy
    (`theirs`, sorted): (the longest job shorter than the gap, None) to move; else (ca, cb) to
    swap, 0 < ca - cb < gap: the shortest ca that has such a cb, with the cb that evens the two
    out best; None where neither exists."""
    i = bisect.bisect_left(mine, gap) - 1
    if i >= 0:
        return mine[i], None
    previous = None
    for ca in mine:
        if ca == previous:
            continue
        previous = ca
        k = bisect.bisect_left(theirs, ca - gap // 2)
        near = [cb for cb in theirs[max(0, k - 1):k + 1] if ca - gap < cb < ca]
        if near:
            return ca, min(near, key=lambda cb: abs(2 * (ca - cb) - gap))
    return None


def _branch_and_bound(p, machine_type, ub_assign: list[int], lb: int) -> tuple[list[int], bool]:
    n, mcount = len(p[0]), len(machine_type)
    order = sorted(range(n), key=lambda j: -min(p[t][j] for t in range(len(p))))
    best = list(ub_assign)
    best_ms = max(_loads(p, machine_type, best))
    loads = [0] * mcount
    cur = [0] * n
    nodes = [0]

    def rec(i: int) -> bool:
        nonlocal best, best_ms
        nodes[0] += 1
        if nodes[0] > 200_000:
            return False
        if i == n:
            ms = max(loads)
            if ms < best_ms:
                best_ms, best = ms, list(cur)
            return True
        j = order[i]
        tried = set()
        for m in range(mcount):
            key = (loads[m], machine_type[m])
            if key in tried:
                continue
            tried.add(key)
            d = p[machine_type[m]][j]
            if loads[m] + d >= best_ms:
                continue
            loads[m] += d
            cur[j] = m
            ok = rec(i + 1)
            loads[m] -= d
            if not ok:
                return False
            if best_ms <= lb:
                return True
        return True

    complete = rec(0)
    return best, complete


def _milp(p, machine_type, ub_assign: list[int], lb: int, time_limit: float) -> tuple[list[int], bool]:
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp

    n, mcount, types = len(p[0]), len(machine_type), len(p)
    classes: dict[tuple, list[int]] = {}
    for j in range(n):
        classes.setdefault(tuple(p[t][j] for t in range(types)), []).append(j)
    keys = list(classes)
    D = len(keys)
    nv = mcount * D + 1  # x[m, c] then C
    c = np.zeros(nv)
    c[-1] = 1
    rows, lo, hi = [], [], []
    for ci, k in enumerate(keys):  # every job of each class is placed
        r = np.zeros(nv)
        r[[m * D + ci for m in range(mcount)]] = 1
        rows.append(r)
        lo.append(len(classes[k]))
        hi.append(len(classes[k]))
    for m in range(mcount):  # load(m) <= C
        r = np.zeros(nv)
        for ci, k in enumerate(keys):
            r[m * D + ci] = k[machine_type[m]]
        r[-1] = -1
        rows.append(r)
        lo.append(-np.inf)
        hi.append(0)
    for m in range(mcount - 1):  # symmetry: machines of one type in non-increasing load order
        if machine_type[m] == machine_type[m + 1]:
            r = np.zeros(nv)
            for ci, k in enumerate(keys):
                r[m * D + ci] = k[machine_type[m]]
                r[(m + 1) * D + ci] = -k[machine_type[m]]
            rows.append(r)
            lo.append(0)
            hi.append(np.inf)
    ub = max(_loads(p, machine_type, ub_assign))
    upper = np.array([len(classes[k]) for _ in range(mcount) for k in keys] + [ub], dtype=float)
    lower = np.zeros(nv)
    lower[-1] = lb
    integrality = np.ones(nv)
    integrality[-1] = 0
    res = milp(c, constraints=LinearConstraint(np.array(rows), lo, hi), integrality=integrality,
               bounds=Bounds(lower, upper), options={"time_limit": time_limit, "disp": False})
    if res.x is None:
        return ub_assign, False
    counts = np.rint(res.x[:-1]).astype(int).reshape(mcount, D)
    assign = [0] * n
    pools = {k: list(v) for k, v in classes.items()}
    for m in range(mcount):
        for ci, k in enumerate(keys):
            for _ in range(counts[m, ci]):
                assign[pools[k].pop()] = m
    if max(_loads(p, machine_type, assign)) > ub:
        return ub_assign, False
    return assign, res.status == 0


def schedule(p: Sequence[Sequence[int]], machine_type: Sequence[int], exact: bool = True,
             time_limit: float = MILP_TIME_LIMIT_S, swaps: bool = True, start: Schedule | None = None,
             order: list[int] | None = None) -> Schedule:
    """A makespan-minimal assignment of jobs to machines: proven optimal when it meets the lower
    bound, or by branch and bound (up to 12 jobs), or by the MILP when `exact` (unless its time
    limit hit); otherwise the best found, with optimal False. Without `swaps` it stops after LPT
    (and branch and bound): the estimate schedules every candidate so, then improves only those
    that could change its answer, carrying on from their `start` schedule. `order`: the jobs
    longest first, where the caller knows it."""
    if start is None:
        order = order if order is not None else _longest_first(p)
        lb = lower_bound(p, machine_type, order)
        assign, loads = _lpt(p, machine_type, order)
        method = "lpt"
    else:
        lb, assign, loads, method = start.lower_bound, list(start.assign), list(start.loads), start.method
    if swaps and method == "lpt" and max(loads) > lb:
        assign, loads = improve(p, machine_type, assign, lb, loads)
        method = "lpt+swaps"
    optimal = max(loads) <= lb
    if not optimal:
        if len(p[0]) <= 12 and method != "branch-and-bound":
            assign, optimal = _branch_and_bound(p, machine_type, assign, lb)
            method = "branch-and-bound"
        elif exact and len(p[0]) > 12:
            assign, optimal = _milp(p, machine_type, assign, lb, time_limit)
            method = "milp"
        loads = _loads(p, machine_type, assign)
    return Schedule(tuple(assign), tuple(loads), max(loads), lb, optimal, method)


# ---------------------------------------------------------------------------------------------
# candidates


def _schedule_note(makespan_s: int, method: str, optimal: bool, bound_s: int) -> str:
    note = f"schedule: makespan {fmt.duration(makespan_s)} by {method}"
    if optimal:
        return note
    return f"{note} (not proven optimal: at most {fmt.count(makespan_s - bound_s)} s over its lower bound)"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _counts(nmax: int, extra: Sequence[int]) -> list[int]:
    out = {n for n in range(1, min(8, nmax) + 1)}
    n = 8
    while n < nmax:
        n *= 2
        out.add(min(n, nmax))
    out.add(nmax)
    out.update(x for x in extra if 1 <= x <= nmax)
    return sorted(out)


def _ticks(ref: Sequence[Decimal]) -> tuple[list[int], Decimal]:
    """Reference job times as integers of one tick (1 s, or down to 1 ms where they have decimals)."""
    places = min(3, max((max(0, -r.as_tuple().exponent) for r in ref), default=0))
    tick = Decimal(1).scaleb(-places)
    return [model.ceil_s(r / tick) for r in ref], tick


class _Names(Sequence):
    """Each machine's job names, run by run of alike machines (a tuple per machine), built when
    asked: for the recommendation, the JSON, a plot; not for the thousands of plans nobody reads
    machine by machine."""

    def __init__(self, order: list[int], by_slot: list[list[str]], slots: int, counts: list[int]):
        self.order, self.by_slot, self.slots = order, by_slot, slots
        self.first = [0, *itertools.accumulate(counts)]

    def __len__(self) -> int:
        return len(self.first) - 1

    def __getitem__(self, run):
        if isinstance(run, slice):
            return [self[i] for i in range(*run.indices(len(self)))]
        if not 0 <= run < len(self):
            raise IndexError(run)
        s, by_slot, order = self.slots, self.by_slot, self.order
        return tuple(tuple(itertools.chain.from_iterable(by_slot[m] for m in order[v * s:(v + 1) * s]))
                     for v in range(self.first[run], self.first[run + 1]))


@dataclass
class _Candidate:
    """A priced plan and what a better schedule could at most bring: the bounds used to prove
    that no schedule of this fleet could beat the recommendation."""

    plan: Plan
    cost_lb: Decimal
    wall_lb: int
    effort: int = EXACT  # how hard its schedule was sought: LPT, SWAPS or EXACT (nothing more to try)
    redo: object = None  # callable(effort) giving the candidate from a harder-sought schedule, or None


class _Planner:
    def __init__(self, workload: Workload, setting: Setting):
        self.w = workload
        self.s = setting
        self.ref = [workload.job_seconds(j) for j in workload.jobs]
        self.ticks, self.tick = _ticks(self.ref)
        self.total_ticks = sum(self.ticks)
        self.order = _longest_first([self.ticks])  # lengthening every job by a job start keeps it
        self.names = [j.name for j in workload.jobs]
        self.start_s = workload.job_start_s  # fixed cost at every job start (seconds, any GPU)
        self.identical: dict[tuple[int, int], Schedule] = {}  # (slots, start ticks) -> schedule of the reference jobs
        self.alike: dict[tuple[int, int, int], tuple] = {}  # (slots, slots per machine, start ticks) -> (schedule, machines)
        self.packed: dict[tuple[int, int, int], tuple] = {}  # (slots, slots per machine, GPUs) -> (schedule, machines)
        self.slots: dict[tuple[int, int], tuple] = {}  # (slots, start ticks) -> (schedule, slot facts)
        self.priced: dict[tuple[int, Decimal], tuple] = {}  # (machines' kinds, factor) -> (kinds, seconds, job starts)
        self.ratios: dict[Decimal, tuple[int, int]] = {}  # factor -> factor x tick as a fraction
        self.start_ratio = self.start_s.as_integer_ratio()
        self.candidates: list[_Candidate] = []
        self.skipped_mixes = 0

    # -- helpers ------------------------------------------------------------------------------

    def _seconds(self, factor: Decimal, ticks: int, starts: int = 0) -> int:
        """A slot's busy seconds: its jobs' reference time x the offer's factor plus the fixed
        cost of its job starts, rounded up once. Exact integer arithmetic on the Decimal
        figures' ratios: called once per kind of machine of every candidate."""
        ratio = self.ratios.get(factor)
        if ratio is None:
            ratio = self.ratios[factor] = (factor * self.tick).as_integer_ratio()
        num, den = ratio
        if not starts:
            return -(-ticks * num // den)
        snum, sden = self.start_ratio
        return -(-(ticks * num * sden + starts * snum * den) // (den * sden))

    def _start_ticks(self, factor: Decimal) -> int:
        """A job start in reference ticks on a slot of this factor, rounded down: schedules of
        jobs lengthened by it never overstate a slot, so their lower bounds stay valid."""
        if not self.start_s:
            return 0
        return int(self.start_s / (factor * self.tick))

    def _overhead(self, offer: Offer, mode: str) -> int:
        setup, capture, launch, _ = model.provider_times(offer, self.w, self.s)
        return (setup + capture + launch if mode == "image" else setup) + self.w.staging_s

    def _min_overhead(self, offers: Sequence[Offer], mode: str) -> int:
        """The earliest any machine of the fleet can start on its jobs (for a wall-time bound)."""
        setup, capture, _, _ = model.provider_times(offers[0], self.w, self.s)
        if mode == "image":
            return setup + capture + self.w.staging_s
        return min(model.provider_times(o, self.w, self.s)[0] for o in offers) + self.w.staging_s

    @staticmethod
    def _floor(plan: Plan) -> Decimal:
        """What the plan's fleet costs whatever its schedule: every machine billed for its setup
        (or its start from the image), capture and staging alone, rounded up as its provider
        bills (an hourly machine pays its first hour, a monthly one its month), and the one-off
        items - the bound that the jobs' cheapest time misses where billing is coarse."""
        total = plan.breakdown.get("one_off", Decimal(0))
        for m in plan.machines:
            yen, per = m.rate
            total += sum(m.counts) * model.billed(m.setup_s + m.capture_s + m.staging_s, m.offer) * yen / per
        return total

    @staticmethod
    def _fixed_cost(plan: Plan) -> Decimal:
        """The part of a plan's cost no schedule changes: setup, capture, staging, one-off items."""
        return sum((plan.breakdown[k] for k in ("setup", "capture", "staging", "one_off")), Decimal(0))

    def _slot_schedule(self, slots: int, effort: int, start: int = 0) -> Schedule:
        """The reference jobs, each lengthened by `start` ticks, over `slots` identical slots; one
        schedule serves every offer with the same slots and start ticks, since an offer scales
        every job by the same factor (makespan order is kept). Sought as hard as `effort` asks,
        carrying on from what was found before."""
        key = (slots, start)
        have = self.identical.get(key)
        lengths = self._lengths(start)
        if have is None:
            have = self.identical[key] = schedule([lengths], [0] * slots, exact=False, swaps=effort >= SWAPS,
                                                  order=self.order)
        if not have.optimal and effort >= SWAPS and have.method == "lpt":
            have = self.identical[key] = schedule([lengths], [0] * slots, exact=False, start=have)
        if not have.optimal and effort >= EXACT and have.method != "milp":
            have = self.identical[key] = _exact(lengths, slots, have)
        return have

    def _lengths(self, start: int) -> list[int]:
        return self.ticks if not start else [t + start for t in self.ticks]

    def _slot_parts(self, sched: Schedule) -> tuple[list[int], list[int]]:
        """Per slot: the reference ticks of its jobs and how many jobs it starts."""
        ticks, starts = [0] * len(sched.loads), [0] * len(sched.loads)
        for t, m in zip(self.ticks, sched.assign):
            ticks[m] += t
            starts[m] += 1
        return ticks, starts

    def _vm_loads(self, groups: list[tuple[Offer, int, int]], loads_s: Sequence[int],
                  assign: Sequence[int]) -> list[tuple[Offer, list[int], tuple[str, ...]]]:
        """groups: (offer, machines, slots per machine) in slot order; each machine gets the
        longest remaining slots (which minimises the sum of machine maxima for these slots).
        Returns per machine its offer, its slots (longest first) and its jobs' names."""
        by_slot: list[list[str]] = [[] for _ in loads_s]
        for name, m in zip(self.names, assign):
            by_slot[m].append(name)
        out = []
        base = 0
        for offer, count, slots in groups:
            idx = sorted(range(base, base + count * slots), key=loads_s.__getitem__, reverse=True)  # stable
            for v in range(count):
                mine = idx[v * slots:(v + 1) * slots]
                names = by_slot[mine[0]] if slots == 1 else [n for m in mine for n in by_slot[m]]
                out.append((offer, mine, tuple(names)))
            base += count * slots
        return out

    def _slots_of(self, sched: Schedule, start: int) -> tuple[list[int], list[list[str]], tuple | None]:
        """Once per schedule: its slots longest first (ties in slot order), each slot's job names,
        and where job starts are counted each slot's reference ticks and job starts."""
        key = (len(sched.loads), start)
        have = self.slots.get(key)
        if have is not None and have[0] is sched:
            return have[1]
        loads = sched.loads
        by_slot: list[list[str]] = [[] for _ in loads]
        for name, m in zip(self.names, sched.assign):
            by_slot[m].append(name)
        out = (sorted(range(len(loads)), key=loads.__getitem__, reverse=True), by_slot,
               self._slot_parts(sched) if self.start_s else None)
        self.slots[key] = (sched, out)
        return out

    def _alike_machines(self, sched: Schedule, n: int, slots: int, start: int) -> tuple[list, list[int], _Names]:
        """The schedule's slots grouped onto n machines, each taking the longest slots left
        (which minimises the sum of machine maxima for these slots), in runs of alike machines,
        as columns: what decides a machine's load (without job starts its longest slot's ticks;
        with them, the (ticks, starts) of its slots), how many, each one's job names (read only
        when someone looks). Done once per schedule and machine size, then priced per offer."""
        key = (n * slots, slots, start)
        have = self.alike.get(key)
        if have is not None and have[0] is sched:
            return have[1]
        order, by_slot, parts = self._slots_of(sched, start)
        if parts is None:  # without job starts a machine's load is its longest slot's ticks
            loads = sched.loads
            each = [loads[order[v * slots]] for v in range(n)]
        else:
            each = [frozenset((parts[0][m], parts[1][m]) for m in order[v * slots:(v + 1) * slots]) for v in range(n)]
        kinds: list = []
        counts: list[int] = []
        for kind, run in itertools.groupby(each):
            kinds.append(kind)
            counts.append(sum(1 for _ in run))
        out = (kinds, counts, _Names(order, by_slot, slots, counts))
        self.alike[key] = (sched, out)
        return out

    def _packed_machines(self, sched: Schedule, n: int, slots: int, gpus: int) -> list[tuple]:
        """Per machine of a packed fleet: the ticks of each job of each slot on each GPU (its
        longest slots snaking over the GPUs), and its job names. Once per schedule and size."""
        key = (n * slots, slots, gpus)
        have = self.packed.get(key)
        if have is not None and have[0] is sched:
            return have[1]
        jobs_of: dict[int, list[int]] = {}
        for j, m in enumerate(sched.assign):
            jobs_of.setdefault(m, []).append(j)
        order, by_slot, _ = self._slots_of(sched, 0)
        out = []
        for v in range(n):
            mine = order[v * slots:(v + 1) * slots]
            names = tuple(x for m in mine for x in by_slot[m])
            per_gpu: list[list[tuple[int, ...]]] = [[] for _ in range(gpus)]
            for i, slot in enumerate(mine):  # longest first, snaking over the GPUs
                g = i % gpus if (i // gpus) % 2 == 0 else gpus - 1 - i % gpus
                per_gpu[g].append(tuple(self.ticks[j] for j in jobs_of.get(slot, [])))
            out.append((tuple(map(tuple, per_gpu)), names))
        self.packed[key] = (sched, out)
        return out

    def _machine_loads(self, offer: Offer, factor: Decimal, alike: tuple[list, list[int], list]) -> model.Loads:
        kinds, counts, names = alike
        key = (id(kinds), factor)  # scratch and image plans of one fleet (and offers alike) share them
        have = self.priced.get(key)
        if have is not None and have[0] is kinds:
            return model.Loads(offer, have[1], counts, names, have[2])
        if not self.start_s:  # the common case, kept lean: a machine's load is its longest slot's
            ratio = self.ratios.get(factor)
            if ratio is None:
                ratio = self.ratios[factor] = (factor * self.tick).as_integer_ratio()
            num, den = ratio
            jobs, starts = [-(-t * num // den) for t in kinds], []
        else:
            busiest = [max((self._seconds(factor, t, st), st) for t, st in kind) for kind in kinds]
            jobs, starts = [secs for secs, _ in busiest], [st * self.start_s for _, st in busiest]
        self.priced[key] = (kinds, jobs, starts)
        return model.Loads(offer, jobs, counts, names, starts)

    # -- fleets of one offer type -----------------------------------------------------------

    def single(self, offer: Offer) -> list[Plan]:
        w, s = self.w, self.s
        try:
            model.check_offer(w, offer, s)
        except Infeasible as exc:
            return [model.infeasible_plan(w, s, offer, 1, "scratch", 1, str(exc))]
        if w.parallel == "data":
            return self._data_parallel(offer)
        if w.streams is not None:
            return self._streams(offer)
        plans: list[Plan] = []
        owned = offer.kind in model.ONE_MACHINE_KINDS  # issue 22: a DOK task queue is one machine too
        nj = len(self.ref)
        for k in sorted(set(w.packing) | {1}):
            try:
                model.packing(w, offer, k)
            except Infeasible as exc:
                plans.append(model.infeasible_plan(w, s, offer, 1, "scratch", k, str(exc)))
                continue
            slots = offer.gpu_count * k
            nmax = 1 if owned else -(-nj // slots)
            extra = []
            if s.deadline_s is not None:
                factor, _ = model.job_factor(w, offer, s.catalog.gpus, k, min(offer.gpu_count, _ceil_div(nj, k)))
                total = self._seconds(factor, self.total_ticks, nj)
                for mode in ("scratch", "image"):
                    room = s.deadline_s - self._overhead(offer, mode)
                    if room > 0:
                        extra.append(_ceil_div(total, room * slots))
            modes_ok = not owned and model.provider_times(offer, w, s)[0] > 0 and not model.image_problem([offer], s)
            for n in _counts(nmax, extra):
                busy = min(offer.gpu_count, _ceil_div(_ceil_div(nj, n), k))
                factor, notes = model.job_factor(w, offer, s.catalog.gpus, k, busy)
                for mode in ("scratch", "image") if (modes_ok and n >= 2) else ("scratch",):
                    cand = self._single_candidate(offer, n, k, slots, factor, notes, mode, LPT)
                    self.candidates.append(cand)
                    plans.append(cand.plan)
        return plans

    def _single_candidate(self, offer, n, k, slots, factor, notes, mode, effort) -> _Candidate:
        if k > 1:
            return self._packed_candidate(offer, n, k, slots, factor, notes, mode)
        start = self._start_ticks(factor)
        sched = self._slot_schedule(n * slots, effort, start)
        loads = self._machine_loads(offer, factor, self._alike_machines(sched, n, slots, start))
        makespan_s = max(loads.jobs_s)
        bound_s = self._seconds(factor, sched.lower_bound)
        # proven for the lengthened jobs; for the true ones too where a job start is whole ticks
        whole = start * factor * self.tick == self.start_s
        optimal = sched.optimal and (whole or makespan_s <= bound_s)
        how = _schedule_note(makespan_s, sched.method, optimal, bound_s)
        plan = model.make_plan(self.w, self.s, [(offer, n)], mode, k, [loads], list(notes) + [how], optimal)
        jobs_lb = (offer.price_jpy_per_hour * (factor * self.total_ticks * self.tick + len(self.ref) * self.start_s)
                   / (slots * model.HOUR))

        def redo(harder: int) -> _Candidate:
            return self._single_candidate(offer, n, k, slots, factor, notes, mode, harder)

        done = optimal or sched.method == "milp"
        cost_lb = max(self._fixed_cost(plan) + jobs_lb, self._floor(plan))
        return _Candidate(plan, cost_lb, self._min_overhead([offer], mode) + bound_s,
                          EXACT if done else effort, None if done else redo)

    def _packed_candidate(self, offer, n, k, slots, factor, notes, mode) -> _Candidate:
        """k jobs per GPU. Jobs go to slots by the slot schedule (k slots per GPU, longest slots
        spread over the GPUs); then each GPU is simulated: while m of its slots still hold a job,
        each runs at efficiency(m) / start-up factor, so the jobs left at the end speed up (a clip
        left alone runs at full speed, report C). Proven optimal only where it meets a bound that
        holds for any schedule: the work at the GPU's best throughput, the job starts spread over
        every slot, the longest job at its best speed."""
        w, gpus = self.w, offer.gpu_count
        sched = self._slot_schedule(n * slots, SWAPS)
        busy = min(gpus, _ceil_div(_ceil_div(len(self.ref), n), k))
        alone, _ = model.job_factor(w, offer, self.s.catalog.gpus, 1, busy)  # speed and co-location, not packing
        rates = model.packing_rates(w, offer, k)
        simulated: dict[tuple, tuple[int, Decimal]] = {}  # alike machines are simulated once
        runs: list[tuple[tuple[int, Decimal], list]] = []  # consecutive machines of one load
        for shape, names in self._packed_machines(sched, n, slots, gpus):
            load = simulated.get(shape)
            if load is None:
                ends = [model.shared_gpu([[alone * t * self.tick for t in slot] for slot in queues], rates, self.start_s)
                        for queues in shape]
                end, starts = max(ends, key=lambda e: e[0])
                load = simulated[shape] = (model.ceil_s(end), starts * self.start_s)
            if runs and runs[-1][0] == load:
                runs[-1][1].append(names)
            else:
                runs.append((load, [names]))
        loads = model.Loads(offer, [secs for (secs, _), _ in runs], [len(names) for _, names in runs],
                            [tuple(names) for _, names in runs], [starts for (_, starts), _ in runs])
        makespan_s = max(loads.jobs_s)
        best = max(m * r for m, r in rates.items())  # a GPU's best throughput, in jobs' alone-seconds per second
        work = alone * self.total_ticks * self.tick
        nj = len(self.ref)
        bound_s = model.ceil_s(max(work / (n * gpus * best), nj * self.start_s / (n * slots),
                                   self.start_s + alone * max(self.ticks) * self.tick / max(rates.values())))
        optimal = makespan_s <= bound_s
        how = _schedule_note(makespan_s, f"simulating {k} slots per GPU (fewer jobs left on a GPU run faster)",
                             optimal, bound_s)
        plan = model.make_plan(w, self.s, [(offer, n)], mode, k, [loads], list(notes) + [how], optimal)
        jobs_lb = offer.price_jpy_per_hour * max(work / best, nj * self.start_s / k) / (gpus * model.HOUR)
        cost_lb = max(self._fixed_cost(plan) + jobs_lb, self._floor(plan))
        return _Candidate(plan, cost_lb, self._min_overhead([offer], mode) + bound_s)

    def _streams(self, offer: Offer) -> list[Plan]:
        """Real-time streams: each GPU takes as many streams as keep up; every machine is held for
        the whole duration, whatever its GPUs do."""
        w, s = self.w, self.s
        st = w.streams
        busy = min(offer.gpu_count, st.count)
        try:
            k, why = model.stream_capacity(w, offer, s.catalog.gpus, busy)
        except Infeasible as exc:
            return [model.infeasible_plan(w, s, offer, 1, "scratch", 1, str(exc))]
        per_machine = offer.gpu_count * k
        n = _ceil_div(st.count, per_machine)
        owned = offer.kind in model.ONE_MACHINE_KINDS  # issue 22: a DOK task queue is one machine too
        if owned and n > 1:
            return [model.infeasible_plan(w, s, offer, n, "scratch", k,
                                          f"{st.count} streams need {n} machines of {per_machine} streams; "
                                          + ("one task runs at a time" if offer.kind == "task" else "you have one"))]
        loads = model.Loads(offer, [st.duration_s], [n],
                            [tuple(tuple(self.names[i * per_machine:(i + 1) * per_machine]) for i in range(n))])
        notes = [why, f"{st.count} streams x {model.number_text(st.fps)} fps for {fmt.duration(st.duration_s)}: every machine is"
                      " held for the whole duration (real time: frames cannot wait for a cheaper hour)"]
        modes = ("scratch", "image") if (n >= 2 and not owned and model.provider_times(offer, w, s)[0] > 0
                                         and not model.image_problem([offer], s)) else ("scratch",)
        return [model.make_plan(w, s, [(offer, n)], mode, k, [loads], notes) for mode in modes]

    def _data_parallel(self, offer: Offer) -> list[Plan]:
        w, s = self.w, self.s
        sp, why = model.speed(w, offer, s.catalog.gpus)
        link = s.catalog.link(offer) if hasattr(s.catalog, "link") else None
        owned = offer.kind in model.ONE_MACHINE_KINDS  # issue 22: a DOK task queue is one machine too
        plans = []
        for n in ([1] if owned else [1, 2, 4, 8, 16]):
            try:
                up, why_up = model.dp_speedup(w, offer, n, sp, link)
            except Infeasible as exc:
                plans.append(model.infeasible_plan(w, s, offer, n, "scratch", 1, str(exc)))
                continue
            starts = len(self.ref) * self.start_s
            jobs_s = model.ceil_s(sum(r / (sp * up) for r in self.ref) + starts)
            loads = [(offer, jobs_s, tuple(self.names), starts)] * n
            notes = [f"speed on {offer.gpu}: {model.factor_text(sp)}x {w.reference_gpu} ({why})",
                     f"data-parallel over {n} x {offer.gpu_count} GPUs: {up}x one GPU ({why_up})"]
            batch = model.global_batch_warning(w, n * offer.gpu_count)
            modes = ("scratch", "image") if (n >= 2 and not owned and model.provider_times(offer, w, s)[0] > 0
                                             and not model.image_problem([offer], s)) else ("scratch",)
            for mode in modes:
                plans.append(model.make_plan(w, s, [(offer, n)], mode, 1, loads, notes, warnings=[batch]))
        return plans

    # -- mixed fleets of two offer types ------------------------------------------------------

    def pair(self, a: Offer, b: Offer, shown: list[Plan]) -> list[Plan]:
        """Mixes of a and b (1-4 machines each). A mix is scheduled only where its bounds are not
        already beaten: some shown plan at most as dear and as long means it can never be picked
        nor be on the frontier."""
        w, s = self.w, self.s
        nj = len(self.ref)
        plans = []
        total_ref = sum(self.ref, Decimal(0))
        for na in (1, 2, 3, 4):
            for nb in (1, 2, 3, 4):
                if na * a.gpu_count + nb * b.gpu_count > max(nj, a.gpu_count + b.gpu_count):
                    continue
                per_vm = -(-nj // (na + nb))
                fa, notes_a = model.job_factor(w, a, s.catalog.gpus, 1, min(a.gpu_count, per_vm))
                fb, notes_b = model.job_factor(w, b, s.catalog.gpus, 1, min(b.gpu_count, per_vm))
                slots = [fa] * (na * a.gpu_count) + [fb] * (nb * b.gpu_count)
                # fluid bound: the fleet's slots together do total_ref of reference work, a job start
                # counted as at least start / (slowest factor) of it; no job is shorter than on its
                # fastest slot type
                work = total_ref + nj * self.start_s / max(fa, fb)
                bound_s = model.ceil_s(max(work / sum(1 / f for f in slots), max(self.ref) * min(fa, fb) + self.start_s))
                jobs_lb = (total_ref * min(a.price_jpy_per_hour * fa / a.gpu_count, b.price_jpy_per_hour * fb / b.gpu_count)
                           + nj * self.start_s * min(a.price_jpy_per_hour / a.gpu_count, b.price_jpy_per_hour / b.gpu_count)
                           ) / model.HOUR
                empty = [(a, 0, ())] * na + [(b, 0, ())] * nb
                no_image = model.image_problem([a, b], s)
                if no_image and (na, nb) == (1, 1):  # said once per pair
                    plans.append(replace(model.infeasible_plan(w, s, a, na, "image", 1, no_image), fleet=((a, na), (b, nb))))
                for mode in ("scratch",) if no_image else ("scratch", "image"):
                    idle = model.make_plan(w, s, [(a, na), (b, nb)], mode, 1, empty)  # every machine, no jobs
                    cost_lb = max(self._fixed_cost(idle) + jobs_lb, idle.cost)
                    wall_lb = self._min_overhead([a, b], mode) + bound_s
                    beaten = any(p.feasible and p.recommendable and p.cost <= cost_lb and p.wall_s <= wall_lb for p in shown)
                    late = s.deadline_s is not None and wall_lb > s.deadline_s
                    if beaten or late:
                        self.skipped_mixes += 1
                        continue
                    plan = self._pair_plan(a, na, fa, b, nb, fb, mode, bound_s, notes_a + notes_b)
                    if plan is None:
                        continue
                    self.candidates.append(_Candidate(plan, cost_lb, wall_lb))
                    plans.append(plan)
        return plans

    def _pair_plan(self, a, na, fa, b, nb, fb, mode, bound_s, notes) -> Plan | None:
        # schedule on milliseconds of each slot type; the plan's loads are then exact seconds
        start_ms = self.start_s * 1000
        p = [[model.ceil_s(f * t * self.tick * 1000 + start_ms) for t in self.ticks] for f in (fa, fb)]
        types = [0] * (na * a.gpu_count) + [1] * (nb * b.gpu_count)
        sched = schedule(p, types, exact=False)
        per_slot, starts = [0] * len(types), [0] * len(types)
        for j, m in enumerate(sched.assign):
            per_slot[m] += self.ticks[j]
            starts[m] += 1
        factors = [fa if types[m] == 0 else fb for m in range(len(types))]
        loads_s = [self._seconds(factors[m], t, starts[m]) for m, t in enumerate(per_slot)]
        loads = []
        for o, mine, names in self._vm_loads([(a, na, a.gpu_count), (b, nb, b.gpu_count)], loads_s, sched.assign):
            busiest = mine[0]  # longest first
            loads.append((o, loads_s[busiest], names, starts[busiest] * self.start_s))
        if any(jobs_s == 0 for _, jobs_s, _, _ in loads):
            return None  # a machine with nothing to do: the same plan without it is listed already
        makespan_s = max(loads_s)
        optimal = makespan_s <= bound_s
        how = _schedule_note(makespan_s, sched.method, optimal, bound_s)
        return model.make_plan(self.w, self.s, [(a, na), (b, nb)], mode, 1, loads, list(notes) + [how], optimal)

    # -- proof ------------------------------------------------------------------------------------

    def could_beat(self, cand: _Candidate, rec: Plan, objective: str) -> bool:
        """Could some schedule of this candidate's fleet rank before the recommendation?"""
        p = cand.plan
        if not p.recommendable or (not p.feasible and not p.reason.startswith("misses the deadline")):
            return False
        if self.s.deadline_s is not None and cand.wall_lb > self.s.deadline_s:
            return False
        yen = _whole_yen(cand.cost_lb)
        warned = len(p.warnings)  # a fleet's warnings do not depend on its schedule
        bound = (yen, cand.wall_lb, warned, p.count) if objective == "cost" else (cand.wall_lb, yen, warned, p.count)
        return bound < rank_key(rec, objective)

    def could_join(self, cand: _Candidate, front: list[Plan]) -> bool:
        """Could some schedule of this candidate's fleet join the cost / wall-time frontier (no
        plan of it, its own aside, at most as dear and as long as its bounds)?"""
        p = cand.plan
        if not p.recommendable or (not p.feasible and not p.reason.startswith("misses the deadline")):
            return False
        if self.s.deadline_s is not None and cand.wall_lb > self.s.deadline_s:
            return False
        i = bisect.bisect_right([q.cost for q in front], cand.cost_lb) - 1  # the quickest plan at most as dear
        if i >= 0 and front[i] is p:
            i -= 1
        return i < 0 or front[i].wall_s > cand.wall_lb


def _exact(ticks: list[int], slots: int, start: Schedule) -> Schedule:
    """An exact schedule where the MILP is small enough to finish; else the start schedule."""
    classes = len(set(ticks))
    if slots * classes > MILP_MAX_VARIABLES:
        return start
    assign, optimal = _milp([ticks], [0] * slots, list(start.assign), start.lower_bound, MILP_TIME_LIMIT_S)
    loads = _loads([ticks], [0] * slots, assign)
    return Schedule(tuple(assign), tuple(loads), max(loads), start.lower_bound, optimal, "milp")


RULES = {  # how plans rank, the objective first; said in every why-line that a tie decides
    "cost": "ties on cost break on wall time, then on fewer warnings, then on fewer machines (cost in whole yen, as shown)",
    "time": "ties on wall time break on cost, then on fewer warnings, then on fewer machines (cost in whole yen, as shown)",
}


def rank_key(plan: Plan, objective: str):
    """The order plans are recommended in (RULES): cost in whole yen (what is shown: a sen
    cheaper never outranks hours faster) or wall time, then the other, then fewer warnings (a
    plan over a default quota loses a tie to one within it), then fewer machines."""
    if objective == "time":
        return (plan.wall_s, plan.cost_jpy, len(plan.warnings), plan.count)
    return (plan.cost_jpy, plan.wall_s, len(plan.warnings), plan.count)


def _whole_yen(amount: Decimal) -> int:
    return int(amount.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _pick(plans: list[Plan], objective: str) -> tuple[Plan | None, list[Plan]]:
    eligible = sorted((p for p in plans if p.feasible and p.recommendable), key=lambda p: rank_key(p, objective))
    return (eligible[0] if eligible else None), eligible


def estimate(workload: Workload, setting: Setting, provider: str | None = None, region: str | None = None,
             objective: str = "cost", mixes: bool = True) -> Estimate:
    """Every candidate plan, the cost/wall-time Pareto frontier and the recommendation.

    Schedules are first found by the fast heuristics (proven optimal where they meet a lower
    bound). Then every candidate whose bounds could still beat the recommendation is solved
    exactly where that is tractable; the estimate is `proven` when no schedule of any candidate
    fleet could beat the recommendation."""
    from gpuplan.errors import UsageError

    if objective not in ("cost", "time"):
        raise UsageError(f"bad --objective {objective!r}: use cost or time")
    started = time.perf_counter()
    cat = setting.catalog
    offers = cat.find(provider=provider, region=region, spot=setting.spot)
    if not offers:
        where = " ".join(x for x in (provider, region) if x)
        raise UsageError(f"no offers for {where} in catalog {cat.snapshot}; see `gpuplan catalog`")
    planner = _Planner(workload, setting)
    plans: list[Plan] = []
    for offer in offers:
        plans.extend(planner.single(offer))

    _seek(planner, plans, objective, SWAPS)  # before the mixes: their pruning compares with these plans
    if mixes and workload.parallel == "none" and workload.streams is None and len(workload.jobs) > 1:
        best_per_offer: dict[tuple[str, str], dict[str, tuple]] = {}
        for p in plans:
            if p.feasible and p.recommendable and p.per_gpu == 1 and p.fleet[0][0].kind == "cloud":
                o = p.fleet[0][0]
                group = best_per_offer.setdefault((o.provider, o.region), {})
                key = rank_key(p, objective)
                if o.key not in group or key < group[o.key][0]:
                    group[o.key] = (key, o)
        singles = list(plans)
        for group in best_per_offer.values():
            top = [o for _, o in sorted(group.values(), key=lambda x: x[0])[:3]]
            for i in range(len(top)):
                for j in range(i + 1, len(top)):
                    plans.extend(planner.pair(top[i], top[j], singles))

    _seek(planner, plans, objective, SWAPS)
    rec, eligible = _pick(plans, objective)
    if rec is not None and time.perf_counter() - started <= EXACT_BUDGET_S:
        _seek(planner, plans, objective, EXACT, deadline=started + EXACT_BUDGET_S)
        rec, eligible = _pick(plans, objective)
    open_ = [c for c in planner.candidates if not c.plan.optimal]
    gap, proven = _gap(planner, open_, rec, objective)

    reason = _reason(rec, eligible, objective, plans, setting)
    hourly = next((p for p in eligible if all(o.kind == "cloud" for o, _ in p.fleet)), None)
    plans = [_break_even(p, hourly, setting) if p.fleet[0][0].kind in ("owned", "monthly") and p.feasible else p
             for p in plans]
    rec, eligible = _pick(plans, objective)  # the same pick, now carrying its note
    feasible = [p for p in plans if p.feasible]
    pareto = _pareto([p for p in feasible if p.recommendable])
    ordered = sorted(feasible, key=lambda p: (not p.recommendable, rank_key(p, objective)))
    ordered += [p for p in plans if not p.feasible]
    extra = {}
    if planner.skipped_mixes:
        extra["skipped_mixes"] = (f"{planner.skipped_mixes} mixed fleets not scheduled: even their lower bounds "
                                  "are beaten by a listed plan or miss the deadline")
    return Estimate(
        snapshot=cat.snapshot, workload=workload, plans=tuple(ordered), pareto=tuple(pareto), recommended=rec,
        reason=reason, assumptions=rec.assumptions if rec else (), solver_seconds=time.perf_counter() - started,
        proven=proven, gap=gap, extra=extra,
    )


def _seek(planner: _Planner, plans: list[Plan], objective: str, effort: int, deadline: float | None = None) -> None:
    """Seek harder schedules (SWAPS: improved; EXACT: solved exactly) for the candidates that
    could change the answer, until none is left: with SWAPS, those that could be picked or join
    the cost / wall-time frontier; with EXACT, those that could be picked. Every candidate was
    scheduled by LPT first: for 20,000 jobs over a whole catalog, improving every schedule is
    most of the work, and most candidates are beaten by their bounds alone. `plans` is updated
    in place; EXACT stops starting new solves past `deadline` (time.perf_counter())."""
    while True:
        rec, eligible = _pick(plans, objective)
        front = _pareto(eligible)
        todo = [c for c in planner.candidates if c.effort < effort and c.redo is not None and not c.plan.optimal
                and ((rec is not None and planner.could_beat(c, rec, objective))
                     or (effort == SWAPS and planner.could_join(c, front)))]
        if not todo or (deadline is not None and time.perf_counter() > deadline):
            return
        at = {id(p): i for i, p in enumerate(plans)}
        for c in todo:
            better = c.redo(effort)
            plans[at[id(c.plan)]] = better.plan
            c.plan, c.effort, c.redo = better.plan, better.effort, better.redo


def _gap(planner: _Planner, open_: list[_Candidate], rec: Plan | None, objective: str) -> tuple[Decimal | int, bool]:
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
    bounds = [c.cost_lb if cost else c.wall_lb for c in open_ if planner.could_beat(c, rec, objective)]
    gap = max(mine - min(bounds, default=mine), mine * 0)  # Decimal yen for cost, int seconds for time
    return gap, gap <= RELATIVE_GAP * mine


def _pareto(plans: list[Plan]) -> list[Plan]:
    out: list[Plan] = []
    best_wall = None
    for p in sorted(plans, key=lambda p: (p.cost, p.wall_s, p.count)):
        if best_wall is None or p.wall_s < best_wall:
            out.append(p)
            best_wall = p.wall_s
    return out


def _reason(rec: Plan | None, eligible: list[Plan], objective: str, plans: list[Plan], setting: Setting) -> str:
    """One line: why the pick won, naming the rule that decided against each plan that tied with
    it on the objective; or why nothing can be recommended."""
    if rec is None:
        return _nothing_feasible(plans, objective, setting)
    if objective == "time":
        head = f"fastest feasible plan ({fmt.duration(rec.wall_s)} wall, {fmt.yen(rec.cost)})"
        same = f"as fast ({fmt.duration(rec.wall_s)})"
        lost = ("dearer", "as dear, but with more warnings", "as dear with as many warnings, but more machines")
    else:
        head = f"cheapest feasible plan ({fmt.yen(rec.cost)}, {fmt.duration(rec.wall_s)} wall)"
        same = f"also {fmt.yen(rec.cost)}"
        lost = ("longer", "as long, but with more warnings", "as long with as many warnings, but more machines")
    mine = rank_key(rec, objective)
    by_rule: dict[int, list[str]] = {}
    for p in eligible:
        theirs = rank_key(p, objective)
        if p is rec or theirs[0] != mine[0]:
            continue
        rule = next((i for i in (1, 2, 3) if theirs[i] != mine[i]), 4)
        label = f"{p.label} {'from an image' if p.setup == 'image' else 'from scratch'}"
        by_rule.setdefault(rule, [])
        if label not in by_rule[rule]:
            by_rule[rule].append(label)
    if not by_rule:
        return head
    parts = []
    for rule in sorted(by_rule):
        labels = by_rule[rule]
        more = f" and {len(labels) - 3} more" if len(labels) > 3 else ""
        why = lost[rule - 1] if rule < 4 else "equal on every rule, listed after it"
        parts.append(f"{', '.join(labels[:3])}{more} ({why})")
    return f"{head}; {same}: {'; '.join(parts)}: {RULES[objective]}"


def _nothing_feasible(plans: list[Plan], objective: str, setting: Setting) -> str:
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
        text = (f"no feasible plan: the {which}, {best.label} {how} ({fmt.yen(best.cost)}), {best.reason.split('; ')[0]}")
        if setting.deadline_s is not None and best.reason.startswith("misses the deadline"):
            fastest = min(scheduled, key=lambda p: p.wall_s)
            least = format_duration(-(-fastest.wall_s // 60) * 60)
            if fastest is best:
                text += f"; no plan is faster: give --deadline {least} or more"
            else:
                text += (f"; the fastest, {fastest.label} {'from an image' if fastest.setup == 'image' else 'from scratch'}"
                         f" ({fmt.yen(fastest.cost)}), takes {fmt.duration(fastest.wall_s)}: give --deadline {least} or more")
        return text
    if not plans:
        return "no feasible plan: no candidates"

    def promise(p: Plan):
        o = p.fleet[0][0]
        return (o.price_jpy_per_hour is None, (o.price_jpy_per_hour or 0) / max(1, o.gpu_count))

    best = min(plans, key=promise)
    others = len({p.reason.split("; ")[0] for p in plans}) - 1
    return (f"no feasible plan: the cheapest offer per GPU-hour, {best.fleet[0][0].name}, is excluded: {best.reason}"
            + (f" (and {others} other reason{'s' if others > 1 else ''}; --all lists them)" if others else ""))


def _break_even(plan: Plan, hourly: Plan | None, setting: Setting) -> Plan:
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
                f" batch, {fmt.duration(plan.wall_s)} of work here) when it is busy more than {fmt.count(need)} h a month"
                + (f" (more than the month's {month_h} h: never)" if need > month_h else ""))
        return replace(plan, note=f"{plan.note}; {line}")
    saving = hourly.cost - plan.cost
    if saving <= 0:
        line = (f"buying never pays off: the best hourly plan costs {fmt.yen(hourly.cost)} per batch, power alone "
                f"{fmt.yen(plan.cost)}")
    else:
        batches = math.ceil(mine.price / saving)
        line = (f"buying pays off after {fmt.count(batches)} batches like this one "
                f"(about {fmt.count(int(batches * hours))} hours of this work on it) against {fmt.yen(hourly.cost)} per batch"
                f" for {hourly.label}")
    return replace(plan, note=f"{plan.note}; {line}")
