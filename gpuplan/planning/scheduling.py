"""Scheduling jobs on machines to minimise the makespan (P||Cmax for one machine type, Q||Cmax
for two): p[t][j] = seconds of job j on a machine of type t; machine_type[m] = t. Pure: imports
nothing of gpuplan (tests/test_layout.py holds it to that).

Makespan is NP-hard and greedy LPT is not optimal (jobs 3,3,2,2,2 on 2 machines: LPT 7,
optimum 6). Every schedule starts from LPT and is proven optimal when it reaches a lower bound
(max job, total / machines, the k+1 shortest of the k*m+1 longest jobs, fluid bound for mixed
speeds); up to 12 jobs, by branch and bound; improved by moves and swaps off the busiest machine
(heaps find it and the least busy in O(log m)); solved exactly by a MILP over job classes (jobs
of equal length are interchangeable: x[machine, class] counts) with HiGHS through
scipy.optimize.milp, imported only then, on a sparse matrix, within a time limit.
"""

from __future__ import annotations

import bisect
import contextlib
import heapq
import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

MILP_TIME_LIMIT_S = 1.0
MILP_MAX_VARIABLES = 20_000  # machines x job classes; larger MILPs rarely finish in the limit


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
        order = longest_first(p)
    assign = [0] * n
    loads = [0] * mcount
    if len(p) == 1 and {*map(type, p[0])} == {int}:  # whole numbers only (the planner's ticks)
        return _lpt_identical(p[0], mcount, order, assign, loads)
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


def _lpt_identical(p0: Sequence[int], mcount: int, order: list[int], assign: list[int],
                   loads: list[int]) -> tuple[list[int], list[int]]:
    """_lpt on identical machines of whole-number job lengths, its heap of (load, machine) kept as
    the integers load x M + machine (M > every machine's index): they order exactly as the pairs
    do (load first, then the lower machine), and a heap of integers is several times faster than
    one of tuples; 20,000 jobs are placed once per slot count of an estimate."""
    scale = mcount  # machine indexes are 0 .. mcount - 1
    first = order[:mcount]
    if first and p0[first[-1]] > 0:  # the longest jobs go one to each machine, in machine order
        for m, j in enumerate(first):
            assign[j] = m
        heap = [p0[j] * scale + m for m, j in enumerate(first)] + list(range(len(first), mcount))
        heapq.heapify(heap)
        order = order[mcount:]
    else:
        heap = list(range(mcount))  # load 0 on every machine
    replace = heapq.heapreplace
    for j in order:
        key = heap[0]
        assign[j] = key % scale
        replace(heap, key + p0[j] * scale)
    for key in heap:
        loads[key % scale] = key // scale
    return assign, loads


def longest_first(p: Sequence[Sequence[int]]) -> list[int]:
    """Job indexes by their shortest time, longest first; ties keep job order."""
    shortest = p[0] if len(p) == 1 else [min(col) for col in zip(*p)]
    return sorted(range(len(shortest)), key=shortest.__getitem__, reverse=True)


def lower_bound(p: Sequence[Sequence[int]], machine_type: Sequence[int], order: list[int] | None = None) -> int:
    n, mcount = len(p[0]), len(machine_type)
    types = sorted(set(machine_type))
    lb = max(p[types[0]]) if len(types) == 1 else max(min(p[t][j] for t in types) for j in range(n))
    if len(types) == 1:
        t = machine_type[0]
        total = sum(p[t])
        lb = max(lb, -(-total // mcount))
        # of the k*m + 1 longest jobs some machine runs k + 1: at least the k + 1 shortest of them
        prefix = _prefix(p[t], order, total)
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


_PREFIXES: list[tuple] = []  # the last few (lengths, order, prefix)


def _prefix(lengths: Sequence[int], order: list[int] | None, total: int) -> list[int]:
    """Prefix sums of the job lengths, longest first. A planner asks for them once per slot count,
    on the same lengths and order: kept for the last few (the same list objects, of the same
    count and total, as a list changed in place would not be)."""
    for have, have_order, prefix in _PREFIXES:
        if have is lengths and have_order is order and len(prefix) == len(lengths) + 1 and prefix[-1] == total:
            return prefix
    s = [lengths[j] for j in order] if order is not None else sorted(lengths, reverse=True)
    prefix = [0, *itertools.accumulate(s)]
    _PREFIXES.insert(0, (lengths, order, prefix))
    del _PREFIXES[4:]
    return prefix


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
        seen: set[int] = set()
        kept: list[tuple[int, int]] = []
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
    # built for a machine when a round first needs it (most never are): its sorted job lengths
    # (identical machines) when a step is sought, job class (its time on each machine type) ->
    # jobs when a job is moved. A machine's jobs are its first ones until a move touches it, and
    # a move builds both first: built late, they are what they would have been built early.
    classes: dict[int, dict] = {}
    sizes: dict[int, list[int]] = {}
    p0 = p[0]

    def on(m: int) -> dict:  # on identical machines keyed by the job's length, else by its class
        mine = classes.get(m)
        if mine is None:
            mine = classes[m] = {}
            if identical:
                for j in held[m]:
                    d = p0[j]
                    have = mine.get(d)
                    if have is None:
                        mine[d] = [j]
                    else:
                        have.append(j)
            else:
                for j in held[m]:
                    mine.setdefault(tuple(col[j] for col in p), []).append(j)
        return mine

    def sized(m: int) -> list[int]:
        mine = sizes.get(m)
        if mine is None:
            mine = sizes[m] = sorted(p0[j] for j in held[m])
        return mine

    def shift(src: int, dst: int, c: tuple) -> None:
        if identical:
            sized(src), sized(dst)
        key = c[0] if identical else c
        j = on(src)[key].pop()
        if not classes[src][key]:
            del classes[src][key]
        on(dst).setdefault(key, []).append(j)
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
                    found = _identical_step(sized(a), sized(b), la - loads[b])
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
    half, count, find = gap // 2, len(theirs), bisect.bisect_left
    for ca in mine:  # the hottest loop of a 20,000-job estimate: no list or lambda per length
        if ca == previous:
            continue
        previous = ca
        k = find(theirs, ca - half)
        # the two lengths of theirs nearest ca - gap / 2 (below, then above) that swap in the gap;
        # of those the one that evens the two out best, the lower one where both do as well
        best = None
        if k > 0 and ca - gap < (cb := theirs[k - 1]) < ca:
            best = cb
        if k < count and ca - gap < (cb := theirs[k]) < ca and (
                best is None or abs(2 * (ca - cb) - gap) < abs(2 * (ca - best) - gap)):
            best = cb
        if best is not None:
            return ca, best
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
    """Makespan by a MILP over job classes: x[m, c] jobs of class c on machine m, then C. The
    matrix is built sparse (a machine's row touches only its own D variables: under 1 % of it is
    non-zero at the cap, where a dense one took hundreds of MiB)."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_array

    n, mcount, types = len(p[0]), len(machine_type), len(p)
    classes: dict[tuple, list[int]] = {}
    for j in range(n):
        classes.setdefault(tuple(p[t][j] for t in range(types)), []).append(j)
    keys = list(classes)
    D = len(keys)
    nv = mcount * D + 1  # x[m, c] then C
    c = np.zeros(nv)
    c[-1] = 1
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    lo: list[float] = []
    hi: list[float] = []
    m_index = np.arange(mcount) * D
    for ci, k in enumerate(keys):  # every job of each class is placed
        r = len(lo)
        rows.append(np.full(mcount, r))
        cols.append(m_index + ci)
        vals.append(np.ones(mcount))
        lo.append(len(classes[k]))
        hi.append(len(classes[k]))
    length = np.array(keys, dtype=float).reshape(D, types)  # class -> seconds on each machine type
    for m in range(mcount):  # load(m) <= C
        r = len(lo)
        rows.append(np.full(D + 1, r))
        cols.append(np.append(m * D + np.arange(D), nv - 1))
        vals.append(np.append(length[:, machine_type[m]], -1.0))
        lo.append(-np.inf)
        hi.append(0)
    for m in range(mcount - 1):  # symmetry: machines of one type in non-increasing load order
        if machine_type[m] == machine_type[m + 1]:
            r = len(lo)
            own = length[:, machine_type[m]]
            rows.append(np.full(2 * D, r))
            cols.append(np.concatenate([m * D + np.arange(D), (m + 1) * D + np.arange(D)]))
            vals.append(np.concatenate([own, -own]))
            lo.append(0)
            hi.append(np.inf)
    matrix = coo_array((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(len(lo), nv)).tocsr()
    ub = max(_loads(p, machine_type, ub_assign))
    upper = np.array([len(classes[k]) for _ in range(mcount) for k in keys] + [ub], dtype=float)
    lower = np.zeros(nv)
    lower[-1] = lb
    integrality = np.ones(nv)
    integrality[-1] = 0
    res = milp(c, constraints=LinearConstraint(matrix, lo, hi), integrality=integrality,
               bounds=Bounds(lower, upper), options={"time_limit": max(0.01, time_limit), "disp": False})
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
        order = order if order is not None else longest_first(p)
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
            loads = _loads(p, machine_type, assign)
        elif exact and len(p[0]) > 12:
            assign, optimal = _milp(p, machine_type, assign, lb, time_limit)
            method = "milp"
            loads = _loads(p, machine_type, assign)
        # else: LPT and the swaps kept `loads` in step with `assign`
    return Schedule(tuple(assign), tuple(loads), max(loads), lb, optimal, method)


def solve_exactly(ticks: list[int], slots: int, start: Schedule, until: float | None = None) -> Schedule:
    """An exact schedule where the MILP is small enough to finish; else the start schedule. The
    solve stops at `until` (time.perf_counter()), what is left of the estimate's budget."""
    classes = len(set(ticks))
    if slots * classes > MILP_MAX_VARIABLES:
        return start
    limit = MILP_TIME_LIMIT_S if until is None else min(MILP_TIME_LIMIT_S, until - time.perf_counter())
    if limit < 0.01:
        return start
    assign, optimal = _milp([ticks], [0] * slots, list(start.assign), start.lower_bound, limit)
    loads = _loads([ticks], [0] * slots, assign)
    return Schedule(tuple(assign), tuple(loads), max(loads), start.lower_bound, optimal, "milp")
