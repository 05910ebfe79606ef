"""Where a speed comes from, how far it may be off, and what that does to a plan's yen and wall.

Every speed the planner uses is one of four kinds (SpeedKind): measured for this workload on
that GPU (a profile, the workload's own figures, a `speed:` it gives), calibrated by a `gpuplan
run --plan` batch, scaled by the generic table's ratio from a GPU of the same architecture that
was measured, or the generic table alone (scaled from the reference GPU across architectures).
Each kind has a band per speed class (the workload's `kind`, a column of catalog/gpus.csv): the
true speed lies between `low` and `high` times the figure. The bands are the spread of the figures
we have (benchmarks/speed_band.py derives and prints them with their sources), not fitted on any
figure a test checks them against. A GPU with no published figure in the workload's class has no
speed and no band: its offers are left unplanned (`no_speed`), never guessed from another class.

A plan's range holds its schedule fixed and stretches every machine's jobs (not their job
starts, setup, capture or staging) by its GPU's band; each machine is charged through
billing.charge, so granularity, minimum and caps apply to the range as to the point.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum

from gpuplan.market import billing


class SpeedKind(str, Enum):
    MEASURED = "measured"
    CALIBRATED = "calibrated"
    SCALED = "scaled"
    GENERIC = "generic"


# weakest last: a plan of several GPUs is as sure as its least sure speed
STRENGTH = (SpeedKind.MEASURED, SpeedKind.CALIBRATED, SpeedKind.SCALED, SpeedKind.GENERIC)


@dataclass(frozen=True)
class Band:
    """The true speed lies between low and high times the figure (derived_from: which figures)."""

    low: Decimal
    high: Decimal
    derived_from: str


_MEASURED = Band(Decimal("0.925"), Decimal("1.082"), "the same job on the same GPU measured twice (colorize on one"
                 " H100 at six memory caps; Lambda's H100 RN50 in two software releases)")
_CALIBRATED = Band(_MEASURED.low, _MEASURED.high, "a calibration is a measurement of the planned fleet: the measured band")

# per speed class (a column of catalog/gpus.csv), printed with every point and its source by
# benchmarks/speed_band.py (tests/test_speed_evidence.py keeps them equal)
BANDS: dict[str, dict[SpeedKind, Band]] = {
    "cnn-train": {
        SpeedKind.MEASURED: _MEASURED,
        SpeedKind.CALIBRATED: _CALIBRATED,
        SpeedKind.SCALED: Band(Decimal("0.811"), Decimal("1.232"), "how the column's ratio between two GPUs of one"
                               " architecture moves when the job changes (RN50 fp32 vs mixed precision, SSD; Lambda)"),
        SpeedKind.GENERIC: Band(Decimal("0.243"), Decimal("1.316"), "the cnn-train column against measured jobs across"
                                " architectures (report A's GTX 1080 Ti: 0.244; H100 profiles; RN50 mixed precision;"
                                " SSD in both precisions; ResNet-50 in another suite, GPU-Insights: up to 1.316)"),
    },
    "transformer-train": {
        SpeedKind.MEASURED: _MEASURED,
        SpeedKind.CALIBRATED: _CALIBRATED,
        SpeedKind.SCALED: Band(Decimal("0.720"), Decimal("1.388"), "how the column's ratio between two GPUs of one"
                               " architecture moves for BERT-base, Transformer-XL and fp32 (Lambda)"),
        SpeedKind.GENERIC: Band(Decimal("0.813"), Decimal("2.996"), "the transformer-train column (BERT-large fp16)"
                                " against BERT-base, Transformer-XL large and fp32 runs across architectures (Lambda:"
                                " 0.814 to 2.996, Transformer-XL in fp32 on an RTX 6000 Ada)"),
    },
}

# a range is shown (table, lines) where either end is more than this share off the point
SHOWN_ABOVE = Decimal("0.10")


@dataclass(frozen=True)
class SpeedEvidence:
    """One GPU's speed in a plan (x the workload's reference GPU) and how sure it is: low and high
    are the band's ends after the workload's own limits (max_speed, the vCPU and byte feeds) apply."""

    gpu: str
    speed: Decimal
    kind: SpeedKind
    low: Decimal
    high: Decimal
    source: str  # one line: from which figures
    speed_class: str = "cnn-train"  # the workload's class: which column, and which bands

    def as_dict(self) -> dict[str, str]:
        return {"gpu": self.gpu, "kind": self.kind.value, "speed": f"{self.speed:.4f}", "low": f"{self.low:.4f}",
                "high": f"{self.high:.4f}", "source": self.source, "class": self.speed_class}


@dataclass(frozen=True)
class Range:
    """A plan's wall seconds and exact yen at its speeds' low and high ends (low speed: the long,
    dear end). `shown`: whether it is worth saying (either end more than SHOWN_ABOVE off)."""

    wall_s: tuple[int, int]
    cost: tuple[Decimal, Decimal]
    shown: bool


def weakest(speeds: Sequence[SpeedEvidence]) -> SpeedKind | None:
    if not speeds:
        return None
    return max((s.kind for s in speeds), key=STRENGTH.index)


def band_of(kind: SpeedKind, speed_class: str = "cnn-train") -> Band:
    """The band of `kind` in a speed class (every class of catalog/gpus.csv has its bands)."""
    return BANDS[speed_class][kind]


def plan_range(plan, streams: bool = False, memo: dict | None = None) -> Range | None:
    """The plan's yen and wall if every GPU ran at its band's low end, and at its high end; None
    where the plan has no machines or no speeds (excluded plans), and for real-time `streams`
    (their machines are held for the streams' duration whatever the speed). `memo`: one dict
    kept while the ranges of many plans are worked out (every plan of an estimate, in JSON):
    plans of one fleet share their machines' seconds (scratch and image), stretched once."""
    if streams or not plan.machines or not plan.speeds:
        return None
    if memo is not None:  # the pick is listed again among the plans, the frontier's plans too
        hit = memo.get(id(plan))
        if hit is not None and hit[0] is plan:
            return hit[1]
    stretch = {s.gpu: (s.speed / s.low, s.speed / s.high) for s in plan.speeds}
    ends = []
    for end in (0, 1):
        ends.append(_at(plan, {g: f[end] for g, f in stretch.items()}, memo))
    (wall_hi, cost_hi), (wall_lo, cost_lo) = ends
    wall, cost = plan.wall_s, plan.cost
    off = max(abs(wall_hi - wall), abs(wall - wall_lo)) > SHOWN_ABOVE * max(wall, 1) or (
        cost > 0 and max(abs(cost_hi - cost), abs(cost - cost_lo)) > SHOWN_ABOVE * cost)
    span = Range((wall_lo, wall_hi), (cost_lo, cost_hi), off)
    if memo is not None:
        memo[id(plan)] = (plan, span)
    return span


def slow_wall(machines, wall_s: int, speeds: Sequence[SpeedEvidence]) -> int:
    """The wall seconds at the range's slow end (every GPU at its band's low end) of a plan whose
    machines and point wall these are: what `--deadline ... --strict` is judged on."""
    if not machines or not speeds:
        return wall_s
    factor = {s.gpu: s.speed / s.low for s in speeds}
    return _wall(machines, wall_s, [_stretched(m, factor.get(m.offer.gpu, _ONE)) for m in machines])


_ONE = Decimal(1)
_UP = Decimal("0.999999")  # rounds a stretched busy time up to a whole second (a hair over stays)


def _stretched(m, f: Decimal, memo: dict | None = None) -> Sequence[int]:
    """Each kind of the machines' busy seconds with its job work (jobs less job starts) times `f`,
    rounded up to a second; a kind with no jobs stays 0. `memo`: see plan_range (keyed by the
    very columns, which it keeps alive; the seconds kept as a compact array: 8 bytes each)."""
    if f == _ONE:
        return m.jobs_s
    if memo is not None:
        key = (id(m.jobs_s), id(m.job_starts_s), f)
        hit = memo.get(key)
        if hit is not None and hit[0] is m.jobs_s and hit[1] is m.job_starts_s:
            return hit[2]
    up = _UP
    if m.job_starts_s:
        out = [int(s + (j - s) * f + up) if j else 0 for j, s in zip(m.jobs_s, m.job_starts_s)]
    else:
        out = [int(j * f + up) if j else 0 for j in m.jobs_s]
    if memo is not None:
        memo[key] = (m.jobs_s, m.job_starts_s, array("q", out))
    return out


def _wall(machines, wall_s: int, jobs: Sequence[Sequence[int]]) -> int:
    """The plan's wall with each machine's busy seconds `jobs` instead of its own: the last
    working machine's end moves by as much as it does."""
    ends_now = [m.start_s + m.setup_s + m.capture_s + m.staging_s + max(m.jobs_s) for m in machines
                if m.role != "builder"]
    if not ends_now:
        return wall_s
    ends_then = [m.start_s + m.setup_s + m.capture_s + m.staging_s + max(j) for m, j in zip(machines, jobs)
                 if m.role != "builder"]
    return wall_s + max(ends_then) - max(ends_now)


def _at(plan, factor: dict[str, Decimal], memo: dict | None = None) -> tuple[int, Decimal]:
    """Wall and yen with each machine's job work (jobs less job starts) times its GPU's factor.
    Each kind of machine is charged as billing.charge charges it, summed as the plan's own yen is
    (billing.charge_sum); a spot plan's expected interruptions are added at their point."""
    factors = [factor.get(m.offer.gpu, _ONE) for m in plan.machines]
    stretched = [_stretched(m, f, memo) for m, f in zip(plan.machines, factors)]
    wall = _wall(plan.machines, plan.wall_s, stretched)
    # the one-off items, and a spot plan's expected interruptions at their point (held as they
    # are: the speed band stretches the jobs, not the interruption frequency)
    cost = plan.breakdown.get("one_off", Decimal(0)) + plan.breakdown.get("interruptions", Decimal(0))
    for m, f, jobs in zip(plan.machines, factors, stretched):
        t, head, n = m.terms, m.setup_s + m.capture_s + m.staging_s, m.counts
        if m.idle_s:  # kept until the last machine ends (release at-end)
            cost += billing.charge(wall - m.start_s, t) * sum(n)
        elif m.task_s:  # a DOK queue: each task billed on its own, with its minimum, at the factor
            held = head + billing.billed_tasks([int(x * f + _UP) for x in m.task_s], t.granularity_s, t.minimum_s)
            cost += billing.charge(held, t) * sum(n)
        else:
            cost += billing.charge_sum(head, jobs, n, t)
    return wall, cost
