"""Makespan schedules: greedy LPT is not optimal; the optimizer's schedules are, and say so."""

from __future__ import annotations

import itertools
import random

from gpuplan.planning import scheduling


def brute_force(p, machines):
    best = None
    for assign in itertools.product(range(machines), repeat=len(p)):
        loads = [0] * machines
        for j, m in enumerate(assign):
            loads[m] += p[j]
        best = max(loads) if best is None else min(best, max(loads))
    return best


def test_lpt_is_not_optimal_but_the_schedule_is():
    jobs = [3, 3, 2, 2, 2]
    lpt = scheduling.lpt([jobs], [0, 0])
    assert max(scheduling._loads([jobs], [0, 0], lpt)) == 7  # LPT: 3+2+2 | 3+2
    s = scheduling.schedule([jobs], [0, 0])
    assert s.makespan == 6 and s.optimal  # 3+3 | 2+2+2
    assert sorted(s.loads) == [6, 6]


def test_milp_and_branch_and_bound_find_the_optimum_from_the_lpt_start():
    jobs = [3, 3, 2, 2, 2]
    start = scheduling.lpt([jobs], [0, 0])
    lb = scheduling.lower_bound([jobs], [0, 0])
    assert lb == 6
    assign, proven = scheduling._milp([jobs], [0, 0], start, lb, time_limit=5)
    assert proven and max(scheduling._loads([jobs], [0, 0], assign)) == 6
    assign, complete = scheduling._branch_and_bound([jobs], [0, 0], start, lb)
    assert complete and max(scheduling._loads([jobs], [0, 0], assign)) == 6


def test_schedules_match_brute_force_on_random_instances():
    rng = random.Random(7)
    lpt_worse = 0
    for _ in range(40):
        machines = rng.choice([2, 3])
        jobs = [rng.randint(1, 9) for _ in range(rng.randint(4, 8))]
        best = brute_force(jobs, machines)
        s = scheduling.schedule([jobs], [0] * machines)
        assert s.makespan == best and s.optimal
        lpt_worse += max(scheduling._loads([jobs], [0] * machines, scheduling.lpt([jobs], [0] * machines))) > best
    assert lpt_worse > 0  # the instances include ones where greedy falls short


def test_milp_on_a_larger_instance_reaches_the_bound():
    # 14 jobs (too many for branch and bound): 3,3,2,2,2 seven... two copies plus 4 ones on 4 machines
    jobs = [3, 3, 2, 2, 2, 3, 3, 2, 2, 2, 1, 1, 1, 1]
    types = [0] * 4
    lb = scheduling.lower_bound([jobs], types)
    assert lb == 7  # 28 / 4
    assign, proven = scheduling._milp([jobs], types, scheduling.lpt([jobs], types), lb, time_limit=5)
    assert proven and max(scheduling._loads([jobs], types, assign)) == 7


def test_mixed_speeds_related_machines():
    # three jobs of 4 s on a slow machine, 2 s on a fast one: fast takes two (4 s), slow one (4 s)
    s = scheduling.schedule([[4, 4, 4], [2, 2, 2]], [0, 1])
    assert s.makespan == 4 and s.optimal
    assert sorted(s.assign).count(1) == 2


def test_thousand_jobs_are_scheduled_optimally():
    rng = random.Random(3)
    jobs = [rng.choice([600, 900, 1200, 1800, 2400, 3600, 5400, 7200]) + rng.randint(0, 59) for _ in range(1000)]
    s = scheduling.schedule([jobs], [0] * 37)
    assert s.optimal and s.makespan == s.lower_bound
    assert sum(s.loads) == sum(jobs)


def test_lower_bound_counts_the_jobs_that_must_share_a_machine():
    # 7 jobs of 5 s on 3 machines: the average (12) and the 3rd + 4th longest (10) are weak;
    # of the 7 longest jobs some machine runs 3, so no schedule beats 15: LPT is proven by it
    jobs = [5] * 7
    assert scheduling.lower_bound([jobs], [0, 0, 0]) == 15
    s = scheduling.schedule([jobs], [0, 0, 0], exact=False)
    assert s.makespan == 15 and s.optimal and s.method == "lpt"


def _lpt_of_pairs(p0: list[int], mcount: int) -> tuple[list[int], list[int]]:
    """LPT as the planner had it: a heap of (load, machine) pairs, the first mcount longest jobs
    one to each machine in machine order."""
    import heapq

    order = scheduling.longest_first([p0])
    assign, loads = [0] * len(p0), [0] * mcount
    first = order[:mcount]
    if first and p0[first[-1]] > 0:
        for m, j in enumerate(first):
            assign[j] = m
        heap = [(p0[j], m) for m, j in enumerate(first)] + [(0, m) for m in range(len(first), mcount)]
        heapq.heapify(heap)
        order = order[mcount:]
    else:
        heap = [(0, m) for m in range(mcount)]
    for j in order:
        load, m = heap[0]
        assign[j] = m
        heapq.heapreplace(heap, (load + p0[j], m))
    for load, m in heap:
        loads[m] = load
    return assign, loads


def test_lpt_with_integer_keys_is_lpt_with_pairs_ties_included():
    """issue 47: LPT's heap holds load x machines + machine; it places every job where the heap of
    (load, machine) pairs did, equal loads going to the lower machine, zero-length jobs included."""
    rng = random.Random(47)
    for _ in range(2000):
        mcount = rng.randint(1, 12)
        top = rng.choice([1, 3, 1000])
        p0 = [rng.choice([0, rng.randint(0, top)]) for _ in range(rng.randint(1, 40))]
        assert scheduling._lpt([p0], [0] * mcount) == _lpt_of_pairs(p0, mcount), (p0, mcount)


def test_the_swap_step_evens_the_two_out_best_the_lower_on_a_tie():
    # gap 10: no job of 12 or 14 moves (none is shorter than the gap); 12 swaps with 5 or 7 (both
    # within the gap): for 7 the two end |2 x (12 - 7) - 10| = 0 apart, for 5 4 apart: 7
    assert scheduling._identical_step([12, 14], [5, 7, 9], 10) == (12, 7)
    # gap 8: 7 and 9 even them out alike (|2 x 5 - 8| = |2 x 3 - 8| = 2): the lower, as before
    assert scheduling._identical_step([12], [7, 9], 8) == (12, 7)
    # nothing of theirs shorter than 12 within the gap: no step; a job shorter than the gap moves
    assert scheduling._identical_step([12], [13], 10) is None and scheduling._identical_step([3, 12], [], 10) == (3, None)
