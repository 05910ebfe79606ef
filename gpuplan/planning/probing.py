"""Measuring the user's own job before choosing (`gpuplan probe`): which offers to measure, what
measuring them may cost, and what two timed sizes say.

A probe runs the batch's own command at two sizes (A < B units of the workload's unit) on one
machine of each offer whose speed could change the pick (one DOK task per size on a DOK task
plan): the pick and the rivals whose yen range (wall range with --objective time) overlaps the
pick's, on GPUs whose speed for this workload nobody measured. Two sizes separate the job's
fixed start (interpreter, imports, model load; on DOK the image pull) from its time per unit:

    per unit = (t_B - t_A) / (B - A)        start = t_A - A x per unit

The profile a probe writes holds the time per unit on that offer's GPU; every later estimate
of the workload plans that GPU from it and says `measured (probe)`.

What a probe may cost is priced as a plan of its own (the two sizes as two jobs on one machine
of the offer, setup and job starts included, billed by the one rule) at the slow end of the
GPU's speed band; the budget (by default 2 % of the pick's yen) takes offers in the order they
contend, the pick first, and names those it leaves out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date
from decimal import ROUND_CEILING, Decimal, InvalidOperation

from gpuplan.errors import UsageError
from gpuplan.planning.evidence import SpeedKind, plan_range
from gpuplan.planning.plan_types import Job, Plan, Workload
from gpuplan.planning.profiles import Profile, Provenance
from gpuplan.planning.types import Offer

SOURCE = "gpuplan probe"  # a profile's provenance.source when a probe wrote it
DEFAULT_BUDGET = "2%"  # of the pick's estimated yen
SMALL_S = Decimal(30)  # the default sizes: about this much work at the planned speed...
LARGE_S = Decimal(120)  # ...and this much: long enough that the start cost does not hide the per-unit time
SURE = (SpeedKind.MEASURED, SpeedKind.CALIBRATED)
MAX_OFFERS = 6  # GPUs one probe campaign names at most (in the order they contend; the budget may take fewer)


def rivals(rec: Plan, shown: Sequence[Plan], by_time: bool) -> list[Plan]:
    """The shown plans whose yen range (wall range when the pick was made on time) overlaps the
    pick's, on other GPUs, where some speed of either is not measured: the plans a measurement
    could put ahead of the pick. In the order shown (rank order)."""
    mine = plan_range(rec)
    if mine is None:
        return []
    out = []
    for p in shown:
        if p is rec or not p.feasible or not p.recommendable:
            continue
        theirs = plan_range(p)
        if theirs is None or {e.gpu for e in p.speeds} == {e.gpu for e in rec.speeds}:
            continue  # one GPU's error moves both plans alike
        a, b = (mine.wall_s, theirs.wall_s) if by_time else (mine.cost, theirs.cost)
        if a[0] <= b[1] and b[0] <= a[1] and any(e.kind not in SURE for e in (*p.speeds, *rec.speeds)):
            out.append(p)
    return out


def offers_to_probe(plans: Sequence[Plan]) -> list[Offer]:
    """One offer per GPU whose speed is not measured, in the plans' order (the pick first): one
    measurement settles a GPU for every offer that has it. Spot rows are left out (a probe
    interrupted says nothing); DOK task plans and owned hosts are in."""
    named: dict[str, Offer] = {}
    for p in plans:
        unsure = {e.gpu for e in p.speeds if e.kind not in SURE}
        for o, _ in p.fleet:
            if o.gpu in unsure and o.gpu not in named and o.market != "spot":
                named[o.gpu] = o
    return list(named.values())


def default_units(seconds_per_unit: Decimal) -> tuple[int, int]:
    """Sizes of about SMALL_S and LARGE_S of work at `seconds_per_unit` (the planned time per unit
    on the offer), at least 1 and 2 units."""
    def units(seconds: Decimal) -> int:
        return max(1, int((seconds / seconds_per_unit).to_integral_value(ROUND_CEILING)))

    small = units(SMALL_S)
    return small, max(small + 1, units(LARGE_S))


def probe_workload(work: Workload, units: tuple[int, int]) -> Workload:
    """The workload as the probe runs it: two jobs, of A and B units."""
    return replace(work, jobs=(Job(f"probe-{units[0]}", Decimal(units[0])), Job(f"probe-{units[1]}", Decimal(units[1]))))


def probe_plan(plans: Sequence[Plan], offer: Offer) -> Plan | None:
    """Among a probe workload's plans, the one a probe runs: one machine of `offer` set up from
    scratch, one job per GPU."""
    for p in plans:
        if (p.feasible and len(p.fleet) == 1 and p.fleet[0][0].key == offer.key and p.fleet[0][1] == 1
                and p.setup == "scratch" and p.per_gpu == 1):
            return p
    return None


def yen_at_most(plan: Plan) -> Decimal:
    """What the probe plan may cost, and the cap it runs under: its yen at the slow end of its
    GPU's speed band, up to the next whole yen and one more, so that a probe billed a minimum
    charge the moment it starts (DOK's 8-GPU task) is not stopped by its cap right there."""
    span = plan_range(plan)
    high = max(plan.cost, span.cost[1]) if span is not None else plan.cost
    return high.to_integral_value(ROUND_CEILING) + 1


def budget_of(text: str | None, pick_yen: Decimal) -> Decimal:
    """--probe-budget: a share of the pick's yen ("2%") or yen ("500", "¥1,500")."""
    raw = (text or DEFAULT_BUDGET).strip()
    try:
        if raw.endswith("%"):
            share = Decimal(raw[:-1].strip())
            if not share.is_finite() or not 0 < share <= 100:
                raise InvalidOperation
            return pick_yen * share / 100
        from gpuplan.units import yen

        amount = yen(raw)
        if amount is None:
            raise InvalidOperation
        return amount
    except InvalidOperation:
        raise UsageError(f"bad --probe-budget {text!r}: a share of the pick's yen such as 2% (the default), or yen such"
                         " as 500") from None


@dataclass(frozen=True)
class Priced:
    """One offer's probe as planned: its sizes, its plan, what it may cost."""

    offer: Offer
    units: tuple[int, int]
    plan: Plan | None  # None: no one-machine plan of the offer fits the probe (the reason is in `why`)
    yen: Decimal
    why: str = ""


def within(priced: Sequence[Priced], budget: Decimal) -> tuple[list[Priced], list[Priced]]:
    """The probes the budget takes, in order (the pick's first), and those it leaves out: a probe
    is taken while the ones taken so far and it cost at most `budget` together."""
    take, skip = [], []
    spent = Decimal(0)
    for p in priced:
        if p.plan is not None and spent + p.yen <= budget:
            take.append(p)
            spent += p.yen
        else:
            skip.append(p)
    return take, skip


@dataclass(frozen=True)
class Fit:
    per_unit_s: Decimal
    start_s: Decimal


class ProbeMisfit(UsageError):
    """Two sizes that do not separate: the larger did not take longer."""


def fit(units: tuple[int, int], seconds: tuple[Decimal, Decimal]) -> Fit:
    """Time per unit and start cost from the two timed sizes (see the module's docstring)."""
    (a, b), (ta, tb) = units, seconds
    per_unit = (tb - ta) / (b - a)
    if per_unit <= 0:
        raise ProbeMisfit(f"{b} units took {tb:.1f} s, no longer than {a} units ({ta:.1f} s): does the probe command"
                          " use {units}? (e.g. --steps {units})")
    return Fit(per_unit, max(Decimal(0), ta - a * per_unit))


def profile(work: Workload, offer: Offer, f: Fit, units: tuple[int, int], seconds: tuple[Decimal, Decimal],
            command: str, on: date, gpu_seen: str = "") -> Profile:
    """The profile one probe writes: the workload's unit, timed on the offer's GPU, naming the offer."""
    notes = (f"{units[0]} {work.unit}s in {seconds[0]:.2f} s, {units[1]} in {seconds[1]:.2f} s: the command's wall,"
             " start included")
    return Profile(
        workload=work.name, unit=work.unit, reference_gpu=offer.gpu, seconds_per_unit=f.per_unit_s.quantize(Decimal("0.000001")),
        fixed_seconds_per_job=f.start_s.quantize(Decimal("0.01")),
        provenance=Provenance(source=SOURCE, date=on.isoformat(), gpu=gpu_seen or offer.gpu, command=command,
                              notes=notes, offer=offer.key))
