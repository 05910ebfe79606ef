"""The candidates: for every offer, fleets of N machines of it (counts 1-8, powers of two up to
the count that gives every job its own slot, that count, and the smallest count that can meet the
deadline), k jobs per GPU for every packing the workload measured, scratch and image setup; pairs
of offer types (mixed fleets); data-parallel fleets; real-time streams. Each is priced by
model.make_plan from a schedule (scheduling.py) and carries the bounds that prove whether a better
schedule could change the answer (ranking.py).

A slot's busy time is its jobs' reference time x the offer's factor (speed, co-location,
packing), rounded up to a second once. An offer scales every job by the same factor, so one
schedule of the reference jobs over S identical slots serves every offer with S slots: the
work is one schedule per slot count, not per offer. Machines alike are kept as columns
(model.Loads / plan_types.Machines) and priced in one pass, their job names built only when read.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import ROUND_CEILING, Decimal
from typing import Any, NamedTuple

from gpuplan.market import billing
from gpuplan.planning import fmt, model, outcomes
from gpuplan.planning.model import Infeasible, Setting
from gpuplan.planning.outcomes import Code
from gpuplan.planning.plan_types import Plan, Workload
from gpuplan.planning.scheduling import Schedule, longest_first, schedule, solve_exactly
from gpuplan.planning.types import Offer
from gpuplan.units import MAX_MACHINES

LPT, SWAPS, EXACT = 0, 1, 2  # how hard a candidate's schedule is sought: greedy, improved, exactly solved


# Offer fields that change nothing a plan on it computes but its price and where it is (an
# offer's region changes a plan only through the quotas read there, compared apart)
_PRICE_AND_PLACE = frozenset({"region", "price", "price_jpy_per_hour", "source", "notes", "aliases"})


class Pruned(NamedTuple):
    """An offer not planned, and the offer that beats it on every plan it could make."""

    offer: Offer
    by: Offer


def prune(offers: Sequence[Offer], setting: Setting) -> tuple[list[Offer], list[Pruned]]:
    """The offers worth planning (in their order) and those that cannot win (issue 47): an hourly
    cloud offer with no caps is pruned where an offer of the same size (every field alike but
    region and price: provider, GPU, count, memory, vCPUs, billing granularity and minimum, quota
    family, availability, retirement, market, spot interruption, tax, price date) costs at most as
    much an hour, and the quotas read in its region are those read in the other's. Then every
    fleet of the pruned offer (any count, packing, setup, schedule) has a twin on the other with
    the same machines, seconds, wall time, warnings and count at a price no higher: cost is
    billed seconds x the hourly price, so it never costs more and never ranks before it in cost
    or time, nor is it on the frontier. Mixed fleets (pairs within one region, optimizer.py) are
    formed from the offers planned. Of offers alike, the cheapest is kept, the first in catalog order among
    equals (a tie on every rule goes to the first listed, as before). A region of a whole-market
    catalog is mostly copies of the same sizes at the same or a dearer price: what is planned
    stays the sizes, not the rows."""
    read = setting.quotas.read
    best: dict[tuple, tuple[int, Decimal]] = {}  # the kept offer's index and hourly price
    by: dict[tuple, Offer] = {}
    keys: list[tuple | None] = []
    for i, o in enumerate(offers):
        price = o.price_jpy_per_hour
        if (o.kind != "cloud" or o.price_unit != "hour" or price is None
                or o.daily_cap_jpy is not None or o.monthly_cap_jpy is not None):
            keys.append(None)
            continue
        quotas = tuple(sorted((name, v) for (p, r, name), v in read.items() if p == o.provider and r == o.region))
        key: tuple = (tuple(getattr(o, f.name) for f in dataclasses.fields(o) if f.name not in _PRICE_AND_PLACE), quotas)
        keys.append(key)
        have = best.get(key)
        if have is None or price < have[1]:
            best[key], by[key] = (i, price), o
    kept: list[Offer] = []
    pruned: list[Pruned] = []
    for i, (o, alike) in enumerate(zip(offers, keys)):
        if alike is None or best[alike][0] == i:
            kept.append(o)
        else:
            pruned.append(Pruned(o, by[alike]))
    return kept, pruned


class Cached(NamedTuple):
    """A value worked out from one schedule (kept while that schedule is the one cached)."""

    schedule: Schedule
    value: Any


class SlotFacts(NamedTuple):
    order: list[int]  # slots, longest first (ties in slot order)
    by_slot: Callable[[], list[list[int]]]  # each slot's jobs (indexes), longest first (worked out when first asked)
    parts: tuple[list[int], list[int]] | None  # per slot its reference ticks and job starts, where starts are counted


class Alike(NamedTuple):
    """A schedule's slots on n machines, in runs of alike machines."""

    kinds: list  # what decides a run's load: its longest slot's ticks, or the (ticks, starts) of its slots
    counts: list[int]  # machines in each run
    names: Sequence  # each machine's job names, per run (built when read)


class Priced(NamedTuple):
    kinds: list  # the Alike.kinds they were priced from
    jobs_s: list[int]  # each run's busy seconds on the offer
    job_starts_s: list[Decimal]  # of those, job starts (empty where not counted)


class PackedMachine(NamedTuple):
    shape: tuple  # per GPU, per slot, the ticks of each job
    names: tuple[str, ...]


class MachineSlots(NamedTuple):
    offer: Offer
    slots: list[int]  # longest first
    names: tuple[str, ...]


def queued(setting: Setting, plan: Plan) -> Plan:
    """A plan on a Slurm partition (providers/slurm.py PartitionOffer) with the partition's queue
    wait, an assumption the user sets (`queue_wait:`), in its wall: its machines start that much
    later, unbilled (Slurm bills a job from its start), the deadline judged again, the assumption
    said. Any other plan as it is."""
    offer = plan.fleet[0][0] if plan.fleet else None
    said = getattr(offer, "queue_wait_said", "")
    if not said:
        return plan
    wait = getattr(offer, "queue_wait_s", 0)
    kept = tuple(a for a in plan.assumptions if not a.startswith("run engine (Ray"))  # a Slurm job runs no Ray
    plan = replace(plan, assumptions=(said, *kept), note=offer.notes if offer is not None else plan.note)
    if not wait or not plan.machines:
        return plan
    from gpuplan.planning import evidence

    machines = tuple(replace(m, start_s=m.start_s + wait) for m in plan.machines)
    wall = plan.wall_s + wait
    reasons = tuple(r for r in plan.excluded_by if r.code is not Code.DEADLINE)
    if setting.deadline_s is not None:
        judged = evidence.slow_wall(machines, wall, plan.speeds) if setting.strict_deadline else wall
        if judged > setting.deadline_s:
            slow = {"slow_end": True} if judged != wall else {}
            reasons += (outcomes.of(Code.DEADLINE, wall_s=judged, deadline_s=setting.deadline_s, **slow),)
    return replace(plan, machines=machines, wall_s=wall, excluded_by=reasons, feasible=not reasons)


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


def _capped_floor(idle: Plan, a: Offer, fa: Decimal, b: Offer, fb: Decimal, work: Decimal) -> Decimal:
    """The least a mix of a and b costs where a cap bills some of its machines: every machine's
    fixed seconds and the fleet's reference `work` (done where it is cheapest a second) at the
    fewest yen a second its terms ever bill (billing.floor_rate), plus the one-off items."""
    rate = {m.offer.key: billing.floor_rate(m.terms) for m in idle.machines}
    fixed = sum((sum(m.counts) * (m.setup_s + m.capture_s + m.staging_s) * rate[m.offer.key] for m in idle.machines),
                Decimal(0))
    per_ref_s = min(rate[a.key] * fa / a.gpu_count, rate[b.key] * fb / b.gpu_count)
    return fixed + work * per_ref_s + idle.breakdown.get("one_off", Decimal(0))


def _best_throughput(rates, jobs: int):
    """A GPU's best throughput, in jobs' alone-seconds per second, from `rates` (jobs sharing it
    -> each one's speed): with no more jobs at once than the batch has (4 jobs never run 8 at a
    time)."""
    return max(m * r for m, r in rates.items() if m <= jobs)


def _hourly(offer: Offer) -> Decimal:
    """The offer's hourly price: every offer a candidate is priced on has one (model.check_offer)."""
    assert offer.price_jpy_per_hour is not None
    return offer.price_jpy_per_hour


def _ticks(ref: Sequence[Decimal]) -> tuple[list[int], Decimal]:
    """Reference job times as integers of one tick (1 s, or down to 1 ms where they have decimals)."""
    places = min(3, max((max(0, -int(r.as_tuple().exponent)) for r in ref), default=0))
    tick = Decimal(1).scaleb(-places)
    return [model.ceil_s(r / tick) for r in ref], tick


class _Names(Sequence):
    """Each machine's job names, longest first, run by run of alike machines (a tuple per
    machine), built when asked: for the recommendation, the JSON, a plot; not for the thousands
    of plans nobody reads machine by machine."""

    def __init__(self, order: list[int], by_slot: Callable[[], list[list[int]]], slots: int, counts: list[int],
                 named: Callable[[Iterable[int]], tuple[str, ...]]):
        self.order, self.by_slot, self.slots, self.named = order, by_slot, slots, named
        self.first = [0, *itertools.accumulate(counts)]

    def __len__(self) -> int:
        return len(self.first) - 1

    def __getitem__(self, run):
        if isinstance(run, slice):
            return [self[i] for i in range(*run.indices(len(self)))]
        if not 0 <= run < len(self):
            raise IndexError(run)
        s, by_slot, order = self.slots, self.by_slot(), self.order
        return tuple(self.named(itertools.chain.from_iterable(by_slot[m] for m in order[v * s:(v + 1) * s]))
                     for v in range(self.first[run], self.first[run + 1]))


class _Lazy:
    """A value worked out when first asked for, then kept: each slot's jobs are read only for the
    plans whose machines someone lists (the pick, the JSON, a plot); sorting 20,000 jobs into
    slots for every schedule was a tenth of a 20,000-job estimate."""

    def __init__(self, make: Callable[[], Any]):
        self.make: Callable[[], Any] | None = make
        self.value: Any = None

    def __call__(self) -> Any:
        if self.make is not None:
            self.value, self.make = self.make(), None
        return self.value


@dataclass
class Candidate:
    """A priced plan and what a better schedule could at most bring: the bounds used to prove
    that no schedule of this fleet could beat the recommendation."""

    plan: Plan
    cost_lb: Decimal
    wall_lb: int
    effort: int = EXACT  # how hard its schedule was sought: LPT, SWAPS or EXACT (nothing more to try)
    redo: Callable[[int], Candidate] | None = None  # the candidate from a harder-sought schedule (effort), or None


class Planner:
    def __init__(self, workload: Workload, setting: Setting):
        self.w = workload
        self.s = setting
        self.ref = [workload.job_seconds(j) for j in workload.jobs]
        self.ticks, self.tick = _ticks(self.ref)
        self.total_ticks = sum(self.ticks)
        self.order = longest_first([self.ticks])  # lengthening every job by a job start keeps it
        self.rank = [0] * len(self.order)  # job -> its place in self.order
        for r, j in enumerate(self.order):
            self.rank[j] = r
        self.names = [j.name for j in workload.jobs]
        self.start_s = workload.job_start_s  # fixed cost at every job start (seconds, any GPU)
        self.identical: dict[tuple[int, int], Schedule] = {}  # (slots, start ticks) -> schedule of the reference jobs
        self.alike: dict[tuple[int, int, int, bool], Cached] = {}  # (slots, per machine, start ticks, every slot) -> Alike
        self.packed: dict[tuple[int, int, int], Cached] = {}  # (slots, slots per machine, GPUs) -> [PackedMachine]
        self.slots: dict[tuple[int, int], Cached] = {}  # (slots, start ticks) -> SlotFacts
        self.priced: dict[tuple[int, Decimal], Priced] = {}  # (id of the machines' kinds, factor) -> their seconds
        self.colocated: dict[tuple, dict[tuple, Decimal]] = {}  # co-location rates -> machine shape -> its end in ticks
        self.shape_ends: dict[tuple, tuple[list, list[Decimal]]] = {}  # (id of Alike.kinds, rates) -> (kinds, their ends)
        self.ratios: dict[Decimal, tuple[int, int]] = {}  # factor -> factor x tick as a fraction
        self.start_ratio = self.start_s.as_integer_ratio()
        self.candidates: list[Candidate] = []
        self.skipped_mixes = 0
        self.exact_until: float | None = None  # exact solves stop then (time.perf_counter())

    # -- helpers ------------------------------------------------------------------------------

    def _named(self, jobs: Iterable[int]) -> tuple[str, ...]:
        """The jobs' names, longest first (ties in the workload's order): how a plan lists a
        machine's jobs, the order `gpuplan run --plan` hands them out in."""
        return tuple(self.names[j] for j in sorted(jobs, key=self.rank.__getitem__))

    def _by_slot(self, assign: Sequence[int], slots: int) -> list[list[int]]:
        """Each slot's jobs (indexes), longest first."""
        by_slot: list[list[int]] = [[] for _ in range(slots)]
        for j in self.order:
            by_slot[assign[j]].append(j)
        return by_slot

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
        own = model.run_start(offer, self.w, self.s)[0]
        return (setup + capture + launch if mode == "image" else setup) + own + self.w.staging_s

    def _min_overhead(self, offers: Sequence[Offer], mode: str) -> int:
        """The earliest any machine of the fleet can start on its jobs (for a wall-time bound)."""
        setup, capture, _, _ = model.provider_times(offers[0], self.w, self.s)
        if mode == "image":
            return setup + capture + model.run_start(offers[0], self.w, self.s)[0] + self.w.staging_s
        return min(model.provider_times(o, self.w, self.s)[0] + model.run_start(o, self.w, self.s)[0]
                   for o in offers) + self.w.staging_s

    @staticmethod
    def _floor(plan: Plan) -> Decimal:
        """What the plan's fleet costs whatever its schedule: every machine billed for its setup
        (or its start from the image), capture and staging alone, rounded up as its provider
        bills (an hourly machine pays its first hour, a monthly one its month), and the one-off
        items - the bound that the jobs' cheapest time misses where billing is coarse."""
        total = plan.breakdown.get("one_off", Decimal(0))
        for m in plan.machines:
            total += sum(m.counts) * billing.charge(m.setup_s + m.capture_s + m.staging_s, m.terms)
        return total

    def _cost_bound(self, plan: Plan, jobs_lb: Decimal) -> Decimal:
        """The least any schedule of the plan's fleet costs: its fixed part plus the jobs' cheapest
        time, or what billing makes certain, whichever is more. Where a daily or monthly cap
        applies, seconds x price overstates the cost; but holding one machine longer never costs
        more than holding two for the same seconds (a cap only ever favours the longer hold:
        charge(a + b) <= charge(a) + charge(b)), so the fleet costs at least one machine held
        for all of its seconds: its fixed seconds and the jobs' cheapest machine-seconds
        (`jobs_lb` is those at the offer's hourly price)."""
        if any(m.terms.capped for m in plan.machines):
            terms = {m.terms for m in plan.machines}
            if len(terms) != 1:
                return self._floor(plan)
            [t] = terms
            hourly = plan.machines[0].offer.price_jpy_per_hour
            fixed_s = sum(sum(m.counts) * (m.setup_s + m.capture_s + m.staging_s) for m in plan.machines)
            jobs_s = int(jobs_lb * model.HOUR / hourly) if hourly else 0  # rounded down: still a bound
            return max(billing.charge(fixed_s + jobs_s, t) + plan.breakdown.get("one_off", Decimal(0)), self._floor(plan))
        return max(self._fixed_cost(plan) + jobs_lb, self._floor(plan))

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
            have = self.identical[key] = solve_exactly(lengths, slots, have, self.exact_until)
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
                  assign: Sequence[int]) -> list[MachineSlots]:
        """groups: (offer, machines, slots per machine) in slot order; each machine gets the
        longest remaining slots (which minimises the sum of machine maxima for these slots).
        Returns per machine its offer, its slots (longest first) and its jobs' names."""
        by_slot = self._by_slot(assign, len(loads_s))
        out = []
        base = 0
        for offer, count, slots in groups:
            idx = sorted(range(base, base + count * slots), key=loads_s.__getitem__, reverse=True)  # stable
            for v in range(count):
                mine = idx[v * slots:(v + 1) * slots]
                out.append(MachineSlots(offer, mine, self._named(j for m in mine for j in by_slot[m])))
            base += count * slots
        return out

    def _slots_of(self, sched: Schedule, start: int) -> SlotFacts:
        """Once per schedule: its slots longest first (ties in slot order), each slot's job names,
        and where job starts are counted each slot's reference ticks and job starts."""
        key = (len(sched.loads), start)
        have = self.slots.get(key)
        if have is not None and have.schedule is sched:
            return have.value
        loads = sched.loads
        by_slot = _Lazy(lambda: self._by_slot(sched.assign, len(loads)))
        out = SlotFacts(sorted(range(len(loads)), key=loads.__getitem__, reverse=True), by_slot,
                        self._slot_parts(sched) if self.start_s else None)
        self.slots[key] = Cached(sched, out)
        return out

    def _alike_machines(self, sched: Schedule, n: int, slots: int, start: int, every_slot: bool = False) -> Alike:
        """The schedule's slots grouped onto n machines, each taking the longest slots left
        (which minimises the sum of machine maxima for these slots), in runs of alike machines,
        as columns: what decides a machine's load (without job starts its longest slot's ticks;
        with them, the (ticks, starts) of its slots), how many, each one's job names (read only
        when someone looks). Done once per schedule and machine size, then priced per offer.
        every_slot: each machine's kind is all its slots' (ticks, starts), longest first (its
        co-location depends on how many are busy when)."""
        key = (n * slots, slots, start, every_slot)
        have = self.alike.get(key)
        if have is not None and have.schedule is sched:
            return have.value
        order, by_slot, parts = self._slots_of(sched, start)
        each: list
        if every_slot and parts is None:
            loads = sched.loads
            each = [tuple([(loads[m], 0) for m in order[v * slots:(v + 1) * slots]]) for v in range(n)]
        elif every_slot:
            assert parts is not None  # (mypy: the branch above took None)
            ticks, starts = parts
            each = [tuple([(ticks[m], starts[m]) for m in order[v * slots:(v + 1) * slots]]) for v in range(n)]
        elif parts is None:  # without job starts a machine's load is its longest slot's ticks
            loads = sched.loads
            each = [loads[order[v * slots]] for v in range(n)]
        else:
            each = [frozenset((parts[0][m], parts[1][m]) for m in order[v * slots:(v + 1) * slots]) for v in range(n)]
        kinds: list = []
        counts: list[int] = []
        for kind in each:  # runs of equal kinds (as itertools.groupby finds them), counted as they come
            if kinds and kind == kinds[-1]:
                counts[-1] += 1
            else:
                kinds.append(kind)
                counts.append(1)
        out = Alike(kinds, counts, _Names(order, by_slot, slots, counts, self._named))
        self.alike[key] = Cached(sched, out)
        return out

    def _packed_machines(self, sched: Schedule, n: int, slots: int, gpus: int) -> list[PackedMachine]:
        """Per machine of a packed fleet: the ticks of each job of each slot on each GPU (its
        longest slots snaking over the GPUs), and its job names. Once per schedule and size."""
        key = (n * slots, slots, gpus)
        have = self.packed.get(key)
        if have is not None and have.schedule is sched:
            return have.value
        jobs_of: dict[int, list[int]] = {}
        for j, m in enumerate(sched.assign):
            jobs_of.setdefault(m, []).append(j)
        order, lazy, _ = self._slots_of(sched, 0)
        by_slot = lazy()
        out = []
        for v in range(n):
            mine = order[v * slots:(v + 1) * slots]
            names = self._named(j for m in mine for j in by_slot[m])
            per_gpu: list[list[tuple[int, ...]]] = [[] for _ in range(gpus)]
            for i, slot in enumerate(mine):  # longest first, snaking over the GPUs
                g = i % gpus if (i // gpus) % 2 == 0 else gpus - 1 - i % gpus
                per_gpu[g].append(tuple(self.ticks[j] for j in jobs_of.get(slot, [])))
            out.append(PackedMachine(tuple(map(tuple, per_gpu)), names))
        self.packed[key] = Cached(sched, out)
        return out

    def _machine_loads(self, offer: Offer, factor: Decimal, alike: Alike,
                       rates: Mapping[int, Decimal] | None = None) -> model.Loads:
        kinds, counts, names = alike
        key = (id(kinds), factor)  # scratch and image plans of one fleet (and offers alike) share them
        have = self.priced.get(key)
        if have is not None and have.kinds is kinds:
            return model.Loads(offer, have.jobs_s, counts, names, have.job_starts_s)
        if rates is not None and not self.start_s:  # all slots of each machine, slowed while several are busy
            # without job starts a machine's end is its shape's (reference ticks) times the factor:
            # worked out once per shape, whatever the offer
            rated = tuple(sorted(rates.items()))
            shaped = self.shape_ends.get((id(kinds), rated))
            if shaped is None or shaped[0] is not kinds:  # each machine's end once per fleet, whatever the offer
                shapes = self.colocated.setdefault(rated, {})
                ends = []
                for kind in kinds:
                    end = shapes.get(kind)
                    if end is None:
                        end = shapes[kind] = model.colocated_work(sorted(t for t, _ in kind if t), rates)
                    ends.append(end)
                shaped = self.shape_ends[id(kinds), rated] = (kinds, ends)
            scale = factor * self.tick
            ceil = math.ceil  # model.ceil_s without its call: exact for a Decimal
            jobs, starts = [ceil(scale * end) for end in shaped[1]], []  # type: list[int], list[Decimal]
        elif rates is not None:
            jobs, starts = [], []
            for kind in kinds:
                slots = [(st * self.start_s, factor * t * self.tick) for t, st in kind if t or st]
                jobs.append(model.ceil_s(model.colocated_end(slots, rates)))
                starts.append(max((st for t, st in kind), default=0) * self.start_s)
        elif not self.start_s:  # the common case, kept lean: a machine's load is its longest slot's
            ratio = self.ratios.get(factor)
            if ratio is None:
                ratio = self.ratios[factor] = (factor * self.tick).as_integer_ratio()
            num, den = ratio
            jobs, starts = [-(-t * num // den) for t in kinds], []
        else:
            busiest = [max((self._seconds(factor, t, st), st) for t, st in kind) for kind in kinds]
            jobs, starts = [secs for secs, _ in busiest], [st * self.start_s for _, st in busiest]
        self.priced[key] = Priced(kinds, jobs, starts)
        return model.Loads(offer, jobs, counts, names, starts)

    # -- fleets of one offer type -----------------------------------------------------------

    def single(self, offer: Offer) -> list[Plan]:
        w, s = self.w, self.s
        try:
            model.check_offer(w, offer, s)
        except Infeasible as exc:
            return [model.infeasible_plan(w, s, offer, 1, "scratch", 1, exc.outcome)]
        if w.parallel == "data":
            return self._data_parallel(offer)
        if w.streams is not None:
            return self._streams(offer)
        plans: list[Plan] = []
        owned = offer.kind in model.ONE_MACHINE_KINDS  # a DOK task queue is one machine too (issue 22)
        nj = len(self.ref)
        for k in sorted(set(w.packing.efficiency) | {1}):
            try:
                model.packing(w, offer, k)
            except Infeasible as exc:
                plans.append(model.infeasible_plan(w, s, offer, 1, "scratch", k, exc.outcome))
                continue
            slots = offer.gpu_count * k
            nmax = min(model.owned_machines(offer, s), -(-nj // slots)) if owned else -(-nj // slots)
            extra = []
            if s.deadline_s is not None:
                factor, _ = model.job_factor(w, offer, s.catalog.gpus, k, min(offer.gpu_count, _ceil_div(nj, k)))
                total = self._seconds(factor, self.total_ticks, nj)
                if s.strict_deadline:  # the range's slow end must meet it (--strict): every job that much longer
                    ev = model.speed_evidence(w, offer, s.catalog.gpus)
                    total = int((total * ev.speed / ev.low).to_integral_value(rounding=ROUND_CEILING))
                for mode in ("scratch", "image"):
                    room = s.deadline_s - self._overhead(offer, mode)
                    if room > 0:
                        extra.append(_ceil_div(total, room * slots))
            if nmax >= MAX_MACHINES:  # the largest fleet provision makes, its image builder included
                extra.append(MAX_MACHINES - 1)
            modes_ok = not owned and model.provider_times(offer, w, s)[0] > 0 and not model.image_problem([offer], s)
            rates = model.colocation_rates(w, offer.gpu_count) if k == 1 else None
            for n in _counts(nmax, extra):
                busy = min(offer.gpu_count, _ceil_div(_ceil_div(nj, n), k))
                factor, notes = model.job_factor(w, offer, s.catalog.gpus, k, 1 if rates else busy)
                if rates:  # the slowdown per machine and period, not one factor for the fleet
                    notes = [notes[0], model.colocation_note(w, offer.gpu_count), *notes[2:]]
                for mode in ("scratch", "image") if (modes_ok and n >= 2) else ("scratch",):
                    cand = self._single_candidate(offer, n, k, slots, factor, notes, mode, LPT, rates)
                    self.candidates.append(cand)
                    plans.append(cand.plan)
        return plans

    def _single_candidate(self, offer, n, k, slots, factor, notes, mode, effort, rates=None) -> Candidate:
        if k > 1:
            return self._packed_candidate(offer, n, k, slots, factor, notes, mode)
        start = self._start_ticks(factor)
        sched = self._slot_schedule(n * slots, effort, start)
        alike = self._alike_machines(sched, n, slots, start, every_slot=rates is not None)
        loads = self._machine_loads(offer, factor, alike, rates)
        makespan_s = max(loads.jobs_s)
        bound_s = self._seconds(factor, sched.lower_bound)
        if rates is not None:  # nor can any schedule beat the work at a machine's best throughput
            best = _best_throughput(rates, len(self.ref))
            bound_s = max(bound_s, model.ceil_s(factor * self.total_ticks * self.tick / (n * best)))
        # proven for the lengthened jobs; for the true ones too where a job start is whole ticks
        whole = start * factor * self.tick == self.start_s
        optimal = sched.optimal and ((whole and rates is None) or makespan_s <= bound_s)
        how = _schedule_note(makespan_s, sched.method, optimal, bound_s)
        tasks: list[int] = []
        if offer.kind == "task" and offer.gpu_count == 1 and rates is None:  # a DOK queue: one task per job
            tasks = [self._seconds(factor, t, 1) for t in self.ticks]
        plan = queued(self.s, model.make_plan(self.w, self.s, [(offer, n)], mode, k, [loads], list(notes) + [how], optimal,
                                              task_seconds=tasks))
        jobs_lb = (_hourly(offer) * (factor * self.total_ticks * self.tick + len(self.ref) * self.start_s)
                   / (slots * model.HOUR))

        def redo(harder: int) -> Candidate:
            return self._single_candidate(offer, n, k, slots, factor, notes, mode, harder, rates)

        # under co-location a proven slot schedule is all the planner can seek; the plan says how far
        # it may be from its bound
        done = optimal or sched.method == "milp" or (rates is not None and sched.optimal)
        cost_lb = self._cost_bound(plan, jobs_lb)
        return Candidate(plan, cost_lb, self._min_overhead([offer], mode) + bound_s,
                          EXACT if done else effort, None if done else redo)

    def _packed_candidate(self, offer, n, k, slots, factor, notes, mode) -> Candidate:
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
        nj = len(self.ref)
        best = _best_throughput(rates, nj)
        work = alone * self.total_ticks * self.tick
        bound_s = model.ceil_s(max(work / (n * gpus * best), nj * self.start_s / (n * slots),
                                   self.start_s + alone * max(self.ticks) * self.tick / max(rates.values())))
        optimal = makespan_s <= bound_s
        how = _schedule_note(makespan_s, f"simulating {k} slots per GPU (fewer jobs left on a GPU run faster)",
                             optimal, bound_s)
        plan = queued(self.s, model.make_plan(w, self.s, [(offer, n)], mode, k, [loads], list(notes) + [how], optimal))
        jobs_lb = _hourly(offer) * max(work / best, nj * self.start_s / k) / (gpus * model.HOUR)
        cost_lb = self._cost_bound(plan, jobs_lb)
        return Candidate(plan, cost_lb, self._min_overhead([offer], mode) + bound_s)

    def _streams(self, offer: Offer) -> list[Plan]:
        """Real-time streams: each GPU takes as many streams as keep up; every machine is held for
        the whole duration, whatever its GPUs do."""
        w, s = self.w, self.s
        st = w.streams
        assert st is not None  # single() sends streams here
        busy = min(offer.gpu_count, st.count)
        try:
            k, why = model.stream_capacity(w, offer, s.catalog.gpus, busy)
        except Infeasible as exc:
            return [model.infeasible_plan(w, s, offer, 1, "scratch", 1, exc.outcome)]
        per_machine = offer.gpu_count * k
        n = _ceil_div(st.count, per_machine)
        owned = offer.kind in model.ONE_MACHINE_KINDS  # a DOK task queue is one machine too (issue 22)
        have = model.owned_machines(offer, s) if offer.kind in ("owned", "monthly") else 1
        if owned and n > have:
            return [model.infeasible_plan(w, s, offer, n, "scratch", k, outcomes.of(
                Code.FLEET_LIMIT, streams=st.count, machines=n, per_machine=per_machine, have=have,
                task=offer.kind == "task"))]
        loads = model.Loads(offer, [st.duration_s], [n],
                            [tuple(tuple(self.names[i * per_machine:(i + 1) * per_machine]) for i in range(n))])
        notes = [why, f"{st.count} streams x {model.number_text(st.fps)} fps for {fmt.duration(st.duration_s)}: every machine is"
                      " held for the whole duration (real time: frames cannot wait for a cheaper hour)"]
        modes = ("scratch", "image") if (n >= 2 and not owned and model.provider_times(offer, w, s)[0] > 0
                                         and not model.image_problem([offer], s)) else ("scratch",)
        return [queued(s, model.make_plan(w, s, [(offer, n)], mode, k, [loads], notes)) for mode in modes]

    def _data_parallel(self, offer: Offer) -> list[Plan]:
        w, s = self.w, self.s
        sp, why = model.speed(w, offer, s.catalog.gpus)
        link = s.catalog.link(offer)
        owned = offer.kind in model.ONE_MACHINE_KINDS  # a DOK task queue is one machine too (issue 22)
        plans = []
        have = model.owned_machines(offer, s)
        for n in ([n for n in (1, 2, 4, 8, 16) if n <= have] if owned else [1, 2, 4, 8, 16]):
            sharded = model.sharded_need(w, n * offer.gpu_count)
            try:
                if sharded is not None and sharded[0] > offer.gpu_memory_gib:
                    raise Infeasible(outcomes.of(Code.MEMORY, need_gib=sharded[0], gpu_memory_gib=offer.gpu_memory_gib,
                                                 gpu=offer.gpu))
                up, why_up = model.dp_speedup(w, offer, n, sp, link)
            except Infeasible as exc:
                plans.append(model.infeasible_plan(w, s, offer, n, "scratch", 1, exc.outcome))
                continue
            starts = len(self.ref) * self.start_s
            jobs_s = model.ceil_s(sum(r / (sp * up) for r in self.ref) + starts)
            loads = [model.Machine(offer, jobs_s, self._named(range(len(self.names))), starts)] * n
            notes = [f"speed on {offer.gpu}: {model.factor_text(sp)}x {w.reference_gpu} ({why})",
                     f"data-parallel over {n} x {offer.gpu_count} GPUs: {up}x one GPU ({why_up})"]
            if sharded is not None:
                notes.append(sharded[1])
            batch = model.global_batch_warning(w, n * offer.gpu_count)
            modes = ("scratch", "image") if (n >= 2 and not owned and model.provider_times(offer, w, s)[0] > 0
                                             and not model.image_problem([offer], s)) else ("scratch",)
            for mode in modes:
                plans.append(queued(s, model.make_plan(w, s, [(offer, n)], mode, 1, loads, notes, warnings=[batch])))
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
        longest_ref = max(self.ref)  # once per pair, not once per mix: 20,000 Decimals each time
        for na in (1, 2, 3, 4):
            for nb in (1, 2, 3, 4):
                if na * a.gpu_count + nb * b.gpu_count > max(nj, a.gpu_count + b.gpu_count):
                    continue
                per_vm = -(-nj // (na + nb))
                rates = {id(o): model.colocation_rates(w, o.gpu_count) for o in (a, b)}
                fa, notes_a = self._mix_factor(a, per_vm, rates[id(a)])
                fb, notes_b = self._mix_factor(b, per_vm, rates[id(b)])
                slots = [fa] * (na * a.gpu_count) + [fb] * (nb * b.gpu_count)
                # fluid bound: the fleet's slots together do total_ref of reference work, a job start
                # counted as at least start / (slowest factor) of it; no job is shorter than on its
                # fastest slot type
                work = total_ref + nj * self.start_s / max(fa, fb)
                bound_s = model.ceil_s(max(work / sum(1 / f for f in slots), longest_ref * min(fa, fb) + self.start_s))
                pa, pb = _hourly(a), _hourly(b)
                jobs_lb = (total_ref * min(pa * fa / a.gpu_count, pb * fb / b.gpu_count)
                           + nj * self.start_s * min(pa / a.gpu_count, pb / b.gpu_count)) / model.HOUR
                empty = [model.Machine(a, 0)] * na + [model.Machine(b, 0)] * nb
                no_image = model.image_problem([a, b], s)
                if no_image and (na, nb) == (1, 1):  # said once per pair
                    plans.append(replace(model.infeasible_plan(w, s, a, na, "image", 1, no_image), fleet=((a, na), (b, nb))))
                for mode in ("scratch",) if no_image else ("scratch", "image"):
                    idle = model.make_plan(w, s, [(a, na), (b, nb)], mode, 1, empty)  # every machine, no jobs
                    capped = any(m.terms.capped for m in idle.machines)  # a cap makes seconds x price overstate
                    cost_lb = max((_capped_floor(idle, a, fa, b, fb, work) if capped else self._fixed_cost(idle) + jobs_lb),
                                  idle.cost)
                    wall_lb = self._min_overhead([a, b], mode) + bound_s
                    beaten = any(p.feasible and p.recommendable and p.cost <= cost_lb and p.wall_s <= wall_lb for p in shown)
                    late = s.deadline_s is not None and wall_lb > s.deadline_s
                    if beaten or late:
                        self.skipped_mixes += 1
                        continue
                    plan = self._pair_plan(a, na, fa, b, nb, fb, mode, bound_s, notes_a + notes_b, rates)
                    if plan is None:
                        continue
                    self.candidates.append(Candidate(plan, cost_lb, wall_lb))
                    plans.append(plan)
        return plans

    def _mix_factor(self, offer: Offer, per_vm: int, rates) -> tuple[Decimal, list[str]]:
        """A mixed fleet's job factor on the offer: without co-location where it is counted per
        machine and period (rates), else for the jobs each machine would hold."""
        factor, notes = model.job_factor(self.w, offer, self.s.catalog.gpus, 1,
                                         1 if rates else min(offer.gpu_count, per_vm))
        if rates:
            notes = [notes[0], model.colocation_note(self.w, offer.gpu_count), *notes[2:]]
        return factor, notes

    def _pair_plan(self, a, na, fa, b, nb, fb, mode, bound_s, notes, rates=None) -> Plan | None:
        # schedule on milliseconds of each slot type; the plan's loads are then exact seconds
        start_ms = self.start_s * 1000
        tick, ceil = self.tick, math.ceil  # model.ceil_s without its call (exact for a Decimal): 20,000 jobs x 2
        p = [[ceil(f * t * tick * 1000 + start_ms) for t in self.ticks] for f in (fa, fb)]
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
            busy_s = loads_s[busiest]
            r = (rates or {}).get(id(o))
            if r is not None and loads_s[busiest]:  # slowed while several of its GPUs are busy
                busy_s = model.ceil_s(model.colocated_end(
                    [(starts[m] * self.start_s, factors[m] * per_slot[m] * self.tick) for m in mine], r))
            loads.append(model.Machine(o, busy_s, names, starts[busiest] * self.start_s))
        if any(m.jobs_s == 0 for m in loads):
            return None  # a machine with nothing to do: the same plan without it is listed already
        makespan_s = max(m.jobs_s for m in loads)
        optimal = makespan_s <= bound_s
        how = _schedule_note(makespan_s, sched.method, optimal, bound_s)
        return model.make_plan(self.w, self.s, [(a, na), (b, nb)], mode, 1, loads, list(notes) + [how], optimal)
