"""What interruptions are expected to cost a spot plan (docs/model.md, "Spot interruptions").

A spot row carries how often its capacity is reclaimed: f, a share of machines a month, as a
range (a published bucket such as AWS's "10-15 %", or UNKNOWN_PCT where nobody publishes one).
Each machine of the plan is held `head` seconds (setup, capture, staging) and then `work`
seconds (its busiest slot's jobs); an interruption falls anywhere in that time, at f per
MONTH_S of it. Per machine, with c the checkpoint interval and L the mean length of the items
its slots run one after another (c = L where the job does not checkpoint):

    expected interruptions   n = f x (head + work) / MONTH_S
    redone seconds           r = f x (head^2 + work x min(c, L)) / (2 x MONTH_S)
                             (in its head it loses the head so far, head / 2 on average; in its
                             jobs the running items' work since their last checkpoint or their
                             start, min(c, L) / 2 on average)
    billed extra             r + n x restart_billed
    wall extra               r + n x (restart_wall + wait)

restart_billed: what the replacement is billed before it works again (its setup and staging
from scratch; its run engine start and staging from the plan's image), restart_wall: that
and, from an image, its launch; wait: the capacity wait until a replacement starts (no source
gives one: WAIT_S, an ESTIMATE range). The yen are the billed extra at the machine's price per
second, unrounded (an expectation, not a bill: no billing granularity). The plan's wall grows
by the largest wall extra of its machines. A data-parallel job runs on every machine at
once: an interruption of any of its M machines makes all M redo their work since the
checkpoint and holds the other M - 1 (billed) through the replacement's restart and wait, and
every interruption delays the job.

The expected figures take f at the middle of its range (and the wait at the middle of its);
the range's ends take both at their low and high ends. This is the first-order expectation
(interruptions of the redone work itself are not counted): it is close where n per item is
small, and below the truth where an item is long against MONTH_S / f.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import NamedTuple

from gpuplan.planning import fmt
from gpuplan.planning.types import Interruption, Offer

MONTH_S = 730 * 3600  # a month of machine time (catalog.HOURS_PER_MONTH): the frequency's period
# no published figure: anywhere from no machine to every machine once a month, the ceiling the AWS
# feed's own `ranges` give its top bucket (">20 %": max 100)
UNKNOWN_PCT = (Decimal(0), Decimal(100))
# the wait for spot capacity before a replacement starts: no source gives one (ESTIMATE)
WAIT_S = (0, 30 * 60)
_HUNDRED = Decimal(100)
_TWO = Decimal(2)


class Exposure(NamedTuple):
    """Spot machines alike of one plan: `machines` of `offer`, each held head_s then work_s
    seconds, running items of item_s seconds on average one after another on a slot; a
    replacement billed restart_billed_s (restart_wall_s of wall) before it works; yen_per_s
    its price per billed second."""

    offer: Offer
    machines: int
    head_s: int
    work_s: int
    item_s: Decimal
    restart_billed_s: int
    restart_wall_s: int
    yen_per_s: Decimal


@dataclass(frozen=True)
class Risk:
    """A spot plan's expected interruptions and what they add, at the low end, the point (the
    middle) and the high end of each figure's range: `yen` and `wall_s` are added to the plan's
    uninterrupted cost and wall (the point is in Plan.cost and Plan.wall_s)."""

    figures: tuple[tuple[Offer, Interruption], ...]  # each spot offer of the plan with the figure assumed
    interruptions: tuple[Decimal, Decimal, Decimal]  # expected over the plan
    redone_s: tuple[Decimal, Decimal, Decimal]  # machine-seconds of work done again
    yen: tuple[Decimal, Decimal, Decimal]
    wall_s: tuple[int, int, int]
    checkpoint_s: int | None
    wait_s: tuple[int, int, int]


def figure(offer: Offer) -> Interruption:
    """The offer's interruption figure, or the unknown range with the provider's rule."""
    if offer.interruption is not None:
        return offer.interruption
    rule = offer.notes.removeprefix("spot: ").partition("; ")[0]
    return Interruption("unknown", *UNKNOWN_PCT, source="unknown: the catalog has no interruption figure for this row",
                        notes=rule)


def frequencies(fig: Interruption) -> tuple[Decimal, Decimal, Decimal]:
    """The share of machines a month at the low end, the middle and the high end."""
    low, high = fig.low_pct / _HUNDRED, fig.high_pct / _HUNDRED
    return low, (low + high) / _TWO, high


def expected(exposures: Sequence[Exposure], checkpoint_s: int | None, synchronous: bool = False) -> Risk:
    """The expected interruptions of these spot machines and what they add (see the module)."""
    figs = {e.offer: figure(e.offer) for e in exposures}
    waits = (WAIT_S[0], (WAIT_S[0] + WAIT_S[1]) // 2, WAIT_S[1])
    total = sum(e.machines for e in exposures)
    ns, rs, yens, walls = [], [], [], []
    for end in range(3):
        wait = waits[end]
        n_all = r_all = yen = Decimal(0)
        wall = Decimal(0)
        for e in exposures:
            f = frequencies(figs[e.offer])[end]
            item = min(Decimal(checkpoint_s), e.item_s) if checkpoint_s else e.item_s
            n = f * (e.head_s + e.work_s) / MONTH_S
            r_head = f * e.head_s * e.head_s / (_TWO * MONTH_S)
            r_work = f * e.work_s * item / (_TWO * MONTH_S)
            if synchronous:  # all machines redo the job's work since the checkpoint; the others wait, held
                redone = r_head + r_work * total
                billed = redone + n * e.restart_billed_s + n * (total - 1) * (e.restart_wall_s + wait)
                wall += e.machines * (r_head + r_work + n * (e.restart_wall_s + wait))
            else:
                redone = r_head + r_work
                billed = redone + n * e.restart_billed_s
                wall = max(wall, redone + n * (e.restart_wall_s + wait))
            n_all += n * e.machines
            r_all += redone * e.machines
            yen += billed * e.machines * e.yen_per_s
        ns.append(n_all)
        rs.append(r_all)
        yens.append(yen)
        walls.append(math.ceil(wall))
    return Risk(tuple(figs.items()), (ns[0], ns[1], ns[2]), (rs[0], rs[1], rs[2]), (yens[0], yens[1], yens[2]),
                (walls[0], walls[1], walls[2]), checkpoint_s, waits)


def said(fig: Interruption) -> str:
    """The figure in words: "interrupted >20 % of machines a month (20-100 %; SOURCE, 2025-06-28)"."""
    span = f"{fig.low_pct.normalize():f}–{fig.high_pct.normalize():f} %"
    if not fig.known:
        return f"interruption frequency unknown, {span} of machines a month assumed ({fig.source}; {fig.notes})"
    return (f"interrupted {fig.frequency} of machines a month ({span}; {fig.source}, as of {fig.as_of or '?'})")


def cited(fig: Interruption) -> str:
    """The figure and its source in a few words: ">20 % a month (20–100 %), AWS Spot Instance
    Advisor as of 2025-06-28"; "unknown, 0–100 % a month assumed (no published figure)"."""
    span = f"{fig.low_pct.normalize():f}–{fig.high_pct.normalize():f} %"
    if not fig.known:
        return f"unknown, {span} a month assumed (no published figure; {fig.notes.partition(';')[0] or fig.source})"
    return f"{fig.frequency} a month ({span}), {fig.publisher or fig.source} as of {fig.as_of or '?'}"


def as_dict(risk: Risk, cost: Decimal, wall_s: int) -> dict:
    """The risk as data for JSON: the plan's uninterrupted yen and wall, what interruptions add
    at the low end, the point and the high end, and each figure with its source."""
    def yen(x: Decimal) -> str:
        return f"{x.quantize(Decimal('0.01'))}"

    base = cost - risk.yen[1]
    return {
        "cost_exact_jpy_uninterrupted": yen(base),
        "wall_minutes_uninterrupted": round((wall_s - risk.wall_s[1]) / 60, 2),
        "expected_interruptions": [f"{n.quantize(Decimal('0.0001'))}" for n in risk.interruptions],
        "extra_jpy": [yen(y) for y in risk.yen],
        "extra_wall_minutes": [round(w / 60, 2) for w in risk.wall_s],
        "cost_jpy_range": [int((base + y).quantize(Decimal(1), rounding=ROUND_HALF_UP)) for y in (risk.yen[0], risk.yen[2])],
        "redone_machine_minutes": [f"{(r / 60).quantize(Decimal('0.01'))}" for r in risk.redone_s],
        "checkpoint_minutes": None if not risk.checkpoint_s else round(risk.checkpoint_s / 60, 2),
        "capacity_wait_minutes": [round(w / 60, 2) for w in risk.wait_s],
        "capacity_wait_source": "ESTIMATE: no source gives a wait for spot capacity",
        "figures": [{"instance_type": o.name, "region": o.region, "frequency": fig.frequency, "known": fig.known,
                     "low_pct": f"{fig.low_pct.normalize():f}", "high_pct": f"{fig.high_pct.normalize():f}",
                     "publisher": fig.publisher, "source": fig.source, "as_of": fig.as_of, "notes": fig.notes}
                    for o, fig in risk.figures],
    }


def checkpoint_words(checkpoint_s: int | None) -> str:
    if checkpoint_s:
        return f"checkpoints every {fmt.duration(checkpoint_s)}: an interrupted item redoes its work since the last one"
    return "no checkpoint: an interrupted item runs again from its start"


def assumption(risk: Risk) -> list[str]:
    """The assumptions lines: each figure with its source, and how an interruption is priced."""
    out = [f"spot {o.name} {o.region}: {said(fig)}" for o, fig in risk.figures]
    low, high = risk.wait_s[0], risk.wait_s[2]
    out.append("spot interruptions priced (docs/model.md, \"Spot interruptions\"): expected interruptions = frequency x"
               " machine-hours / 730 h, at the middle of each range (its ends give the range); each redoes the work"
               f" lost, restarts a replacement (setup, or launch from the image) and waits {fmt.duration(low)}–"
               f"{fmt.duration(high)} for capacity (ESTIMATE: no source gives a wait); {checkpoint_words(risk.checkpoint_s)}")
    return out
