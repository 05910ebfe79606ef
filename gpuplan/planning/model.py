"""The cost and time model: how long a workload's jobs take on an offer, and what a fleet costs.

Semantics (docs/model.md and docs/planning.md, reproduced by the field report A worked example):

- Billed time per machine = its setup (unless launched from an image) + data staging + its jobs
  + idle tail, rounded UP to the provider's billing granularity and at least its minimum.
  Machines are released when their own jobs end (release="when-done", the field report's
  practice): the idle tail is then 0 and shown as such; release="at-end" keeps every machine
  until the last one finishes.
- Setup modes. scratch: every machine runs setup. image: one builder runs setup, is captured,
  and the workers start from the image. Where the provider's `builder_is_worker` is False
  (Azure: a generalized VM cannot be used again) the builder is deleted after capture and is
  not a worker; it is deallocated while captured, so capture is wall time but not billed.
  Where it is True (AWS create_image) the builder stays running during capture (billed) and
  then works like any other machine. Launching from an image is wall time, not billed (the
  report did not bill it).
- Wall time = setup on the first machine + capture + launch where an image is used + staging
  + the longest machine's jobs (exactly: the latest release time of any machine).
- Cost = sum over machines (builder included) of billed seconds x hourly price / 3600, plus
  one-off items (staging yen per machine that runs jobs); Decimal throughout, rounded to integer
  yen once (Plan.cost_jpy, ROUND_HALF_UP). The breakdown (setup, capture, staging, jobs,
  idle_tail, rounding, one_off) sums exactly to the cost.
- Job time on a GPU = the job start's fixed cost (measured: process start to first timed step,
  warm-up and exit; the same on every GPU) + reference seconds / speed x co-location slowdown
  (when G > 1 jobs run at once on G GPUs of one machine) / packing efficiency(k) x start-up
  factor (when k > 1 jobs share one GPU; report C: per-stream efficiency = time alone / time
  packed, packed wall time = packed time x start-up factor 1.2; a measured job start cost
  replaces that factor). A slot running several jobs one after another pays the fixed cost at
  every start.
- Memory: a job fits a GPU when its need (the smallest cap at which it runs at full speed,
  where measured) fits; k per GPU when k needs fit. An uncapped peak is never used as a need
  when a need is known.
- Speed: the workload's measured factor for that GPU if it has one, else the published figure of
  the workload's speed class (catalog gpus.csv, the column its `kind` names, "cnn-train" by
  default) scaled from the reference GPU: listed as an assumption. A GPU with no figure in that
  class is left unplanned (`no_speed`), never given another class's figure.
- Data-parallel workloads run each job over every GPU of the fleet, one job after another;
  speed-up = g x n x the measured efficiency for (g x n GPUs, n machines) where the workload
  has one, else g x intra^(log2 g) on one machine of g GPUs, x inter^(log2 n) over n machines.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import TYPE_CHECKING, Any, NamedTuple

from gpuplan.market import billing, spot_risk, tax
from gpuplan.market.catalog import link_of
from gpuplan.planning import evidence, fmt, outcomes
from gpuplan.planning.evidence import SpeedEvidence, SpeedKind
from gpuplan.planning.outcomes import Code, Outcome
from gpuplan.planning.plan_types import DataParallel, Machines, Plan, Workload
from gpuplan.planning.types import Offer
from gpuplan.units import DOK_TASK_LIMIT_S, MAX_MACHINES

if TYPE_CHECKING:
    from gpuplan.market.catalog import Catalog

HOUR = Decimal(3600)
# quota codes as providers name them (catalog providers.csv notes: AWS Service Quotas codes)
QUOTA_NAMES = {"L-DB2E81BA": "Running On-Demand G and VT instances", "L-417A185B": "Running On-Demand P instances",
               "L-3819A6DF": "All G and VT Spot Instance Requests", "L-7212CCBC": "All P Spot Instance Requests"}


@dataclass(frozen=True)
class Quotas:
    """User-given vCPU quotas: provider -> total, and (provider, family) -> vCPUs."""

    total: Mapping[str, int] = field(default_factory=dict)
    family: Mapping[tuple[str, str], int] = field(default_factory=dict)
    # read by `gpuplan check` in one region: (provider, region, tier name) -> (vCPUs, date read);
    # tier "cores" is Azure's Total Regional vCPUs, other names are the catalog's quota families
    read: Mapping[tuple[str, str, str], tuple[int, str]] = field(default_factory=dict)

    def family_limit(self, provider: str, quota_family: str) -> tuple[str, int] | None:
        qf = quota_family.lower()
        for (p, fam), n in self.family.items():
            f = fam.lower()
            if p == provider and qf and (f == qf or f"standard{f}family" == qf):
                return fam, n
        return None


@dataclass(frozen=True)
class Setting:
    """Everything outside the workload and fleet that a plan's figures depend on."""

    catalog: Catalog
    as_of_month: str = ""  # "YYYY-MM" the user planned for (default: the snapshot's)
    quotas: Quotas = field(default_factory=Quotas)
    deadline_s: int | None = None
    # a ceiling on the fleet's rate (yen an hour, on the catalog's tax basis): plans over it are out
    max_yen_per_hour: Decimal | None = None
    # --strict: a plan meets the deadline only if its wall range's slow end does (every GPU at its
    # speed band's low end, evidence.slow_wall), not its point estimate alone
    strict_deadline: bool = False
    release: str = "when-done"  # or "at-end"
    measured_setup: Mapping[tuple[str, str], tuple[int, str]] = field(default_factory=dict)
    # the `ray` playbook's measured seconds (run engine install) per (provider, machine type)
    measured_engine: Mapping[tuple[str, str], tuple[int, str]] = field(default_factory=dict)
    owned: tuple[str, ...] = ()
    owned_count: Mapping[str, int] = field(default_factory=dict)  # owned name (lower case) -> machines you have
    spot: bool = False  # plan on the catalog's spot rows too (--spot): only then may a spot plan be recommended


class Infeasible(Exception):
    """Why an offer cannot run this workload at all: `outcome` (its words when printed)."""

    def __init__(self, outcome: Outcome):
        super().__init__(outcome)
        self.outcome = outcome

    def __str__(self) -> str:
        return outcomes.render(self.outcome)


# ---------------------------------------------------------------------------------------------
# speed and job time


def _gpu_speed(workload: Workload, offer: Offer, gpus: Mapping) -> tuple[Decimal, str, SpeedKind]:
    """The speed of one job on one of offer's GPUs alone (no cap, no CPU feed), relative to the
    reference GPU, with where it comes from and its kind: measured or calibrated for this GPU;
    else the generic table's ratio from a measured GPU of the same architecture (scaled), else
    from the reference GPU (generic)."""
    if offer.gpu in workload.speed:
        kind = workload.speed_kinds.get(offer.gpu, SpeedKind.MEASURED)
        return workload.speed[offer.gpu], f"{kind.value} for {workload.name}", kind
    info = gpus.get(offer.gpu)
    mine = info.rel_speed.get(workload.kind) if info is not None else None
    if offer.gpu == workload.reference_gpu:
        return Decimal(1), f"measured for {workload.name} (its reference GPU)", SpeedKind.MEASURED
    ref = workload.reference_speed
    if ref is None:
        ref_info = gpus.get(workload.reference_gpu)
        ref = ref_info.rel_speed.get(workload.kind) if ref_info is not None else None
    if ref is None or mine is None:
        # no published figure in this class: the offer is left unplanned, never guessed from another
        # class's column or from a spec sheet (catalog/gpus.csv keeps only published measurements)
        missing = offer.gpu if mine is None else workload.reference_gpu
        raise Infeasible(outcomes.of(Code.NO_SPEED, kind=workload.kind, gpu=missing))
    arch = info.architecture if info is not None else ""
    basis = _basis(gpus, workload.kind, offer.gpu, workload.reference_gpu)
    # measured GPUs of the offer's architecture, the reference GPU first: the table's ratio within
    # one architecture is surer than across (evidence.BANDS)
    for anchor in dict.fromkeys((workload.reference_gpu, *workload.speed)):
        a = gpus.get(anchor)
        if not arch or a is None or a.architecture != arch or a.rel_speed.get(workload.kind) is None:
            continue
        theirs = a.rel_speed[workload.kind]
        s = mine / theirs * workload.speed.get(anchor, Decimal(1))
        basis = _basis(gpus, workload.kind, offer.gpu, anchor)
        return s, (f"scaled from {anchor}, measured, by the generic {workload.kind} table within {arch} ({offer.gpu}"
                   f" {mine} / {anchor} {theirs} vs V100{basis}), not measured for {workload.name}"), SpeedKind.SCALED
    ref_s = workload.speed.get(workload.reference_gpu, Decimal(1))
    why = (f"generic {workload.kind} table ({offer.gpu} {mine} / {workload.reference_gpu} {ref} vs V100{basis}), not"
           f" measured for {workload.name}")
    return mine / ref * ref_s, why, SpeedKind.GENERIC


def _basis(gpus: Mapping, kind: str, *names: str) -> str:
    """'; K80 cross-suite' for the figures of `names` in class `kind` not measured in the V100's own
    table (catalog/gpus.csv basis_<class>: bridged, cross-suite or proxy); '' where all were."""
    weak = []
    for name in dict.fromkeys(names):
        info = gpus.get(name)
        basis = info.speed_basis.get(kind, "") if info is not None else ""
        if basis and basis != "same-suite":
            weak.append(f"{name} {basis}")
    return f"; {', '.join(weak)}" if weak else ""


def _limits(workload: Workload, offer: Offer, s: Decimal) -> tuple[Decimal, str, str]:
    """What the workload's own limits make of a GPU speed s: its max_speed cap, and the speed the
    machine can feed: its vCPUs (CPU seconds per unit) and its network or disk (bytes per unit),
    the least of them; with why a limit binds ("" where none does) and a note where a feed limit
    could not be checked."""
    why = ""
    notes = []
    if workload.max_speed is not None and s > workload.max_speed:
        s, why = workload.max_speed, f"capped at {workload.max_speed}: {workload.name} cannot fill a faster GPU"
    gpu_units = s / workload.seconds_per_unit  # units per second the GPU does
    cpu = workload.feed_cpu_seconds_per_unit
    if cpu is not None and offer.vcpus <= 0:
        notes.append(f"feed limit not checked: the catalog gives no vCPU count for {offer.name}"
                     f" ({number_text(cpu)} CPU s per {workload.unit} to feed one job)")
    elif cpu is not None:
        # every GPU busy: each job's input pipeline gets vCPUs / GPUs of the machine
        share = Decimal(offer.vcpus) / offer.gpu_count
        fed = workload.seconds_per_unit * share / cpu  # the speed (x reference) those vCPUs can feed
        if fed < s:
            why = (f"feed-bound: {number_text(share)} vCPUs per GPU at {number_text(cpu)} CPU s per {workload.unit}"
                   f" feed {number_text(share / cpu)} {workload.unit}s/s, less than the GPU's"
                   f" {number_text(gpu_units)} ({workload.feed_source})")
            s = fed
    if workload.feed_bytes_per_unit is not None:
        rate, what, missing = _read_rate(workload, offer)
        if rate is None:
            notes.append(missing)
        else:
            # every GPU busy: each job reads at rate / GPUs of the machine
            share = rate / offer.gpu_count
            fed = workload.seconds_per_unit * share / workload.feed_bytes_per_unit
            if fed < s:
                origin = "disk" if workload.feed_reads_from == "disk" else "object storage"
                why = (f"feed-bound by {workload.feed_reads_from}: {number_text(share / 10**6)} MB/s per GPU ({what})"
                       f" at {number_text(workload.feed_bytes_per_unit / 10**6)} MB per {workload.unit} read from"
                       f" {origin} feed"
                       f" {number_text(share / workload.feed_bytes_per_unit)} {workload.unit}s/s, less than the GPU's"
                       f" {number_text(gpu_units)} ({workload.feed_source})")
                s = fed
    return s, why, "; ".join(notes)


def _read_rate(workload: Workload, offer: Offer) -> tuple[Decimal | None, str, str]:
    """Bytes per second the whole machine reads the job's input at, from where the workload reads
    it (catalog/links.csv), and what that rate is; or None and the line saying it is not known."""
    link = link_of(offer)
    gpus = f"{offer.gpu_count} GPU{'s' if offer.gpu_count > 1 else ''}"
    need = f"{number_text((workload.feed_bytes_per_unit or Decimal(0)) / 10**6)} MB per {workload.unit} read"
    if workload.feed_reads_from == "disk":
        mb = link.disk_read_mb_per_s if link is not None else None
        if mb is None:
            return None, "", (f"feed limit by disk not checked: the disk read rate of {offer.name} is unknown"
                              f" (no figure in catalog/links.csv; {need})")
        return mb * 10**6, f"disk {number_text(mb)} MB/s / {gpus}; catalog/links.csv", ""
    gbps, line = link.sustained_network_gbps() if link is not None else (None, "")
    if gbps is None:
        return None, "", (f"feed limit by network not checked: the catalog gives no network bandwidth for {offer.name}"
                          f" (catalog/links.csv; {need} from object storage)")
    return gbps * GBIT / 8, f"network {gbps} Gbit/s sustained / {gpus}; {line}; catalog/links.csv", ""


def speed(workload: Workload, offer: Offer, gpus: Mapping) -> tuple[Decimal, str]:
    """The speed of one job on one of offer's GPUs relative to the reference GPU, and its source."""
    s, why, _ = _gpu_speed(workload, offer, gpus)
    limited, limit, note = _limits(workload, offer, s)
    if limit.startswith("capped"):
        why = limit
    elif limit:
        why = f"{limit}; the GPU alone: {why}"
    return limited, f"{why}; {note}" if note else why


def speed_evidence(workload: Workload, offer: Offer, gpus: Mapping) -> SpeedEvidence:
    """The offer's GPU speed with its kind and band (evidence.py), the workload's limits applied
    to the band's ends as to the figure."""
    s, why, kind = _gpu_speed(workload, offer, gpus)
    band = evidence.band_of(kind, workload.kind)
    point, _, _ = _limits(workload, offer, s)
    low, _, _ = _limits(workload, offer, s * band.low)
    high, _, _ = _limits(workload, offer, s * band.high)
    return SpeedEvidence(offer.gpu, point, kind, low, high, why, workload.kind)


def colocation(workload: Workload, gpus_busy: int) -> tuple[Decimal, str]:
    if gpus_busy <= 1:
        return Decimal(1), "one job per machine at a time: no co-location slowdown"
    if gpus_busy in workload.colocation_slowdown:
        f = workload.colocation_slowdown[gpus_busy]
        return f, f"co-location slowdown {f}x for {gpus_busy} jobs on one machine ({workload.colocation_source})"
    f = workload.colocation_default
    return f, f"co-location slowdown {f}x for {gpus_busy} jobs on one machine (default; {workload.colocation_source})"


def colocation_rates(workload: Workload, gpus: int) -> dict[int, Decimal] | None:
    """Per-job speed (1 = alone) while m = 1..gpus jobs run on one machine's GPUs: 1 / the
    co-location slowdown for m; None where no count slows (a one-GPU machine, or factors of 1)."""
    rates = {m: 1 / colocation(workload, m)[0] for m in range(1, gpus + 1)}
    return rates if any(r != 1 for r in rates.values()) else None


def colocation_note(workload: Workload, gpus: int) -> str:
    """One line on the slowdown per machine and period."""
    figures = ", ".join(f"{m} jobs {colocation(workload, m)[0]}x" for m in range(2, gpus + 1))
    return (f"co-location slowdown per machine and period: while m jobs share a machine each takes m's factor"
            f" ({figures}; {workload.colocation_source}); a job alone on it runs at full speed")


def colocated_end(slots: Sequence[tuple[Decimal, Decimal]], rates: Mapping[int, Decimal]) -> Decimal:
    """One machine whose busy GPUs each run (fixed seconds, then work seconds at full speed): while
    m of them are still busy, work progresses at rates[m]; fixed time (job starts) is wall time.
    Returns when the last GPU finishes."""
    if not any(f for f, _ in slots):  # no fixed time: all progress alike, the shortest ends first
        return colocated_work(sorted(w for _, w in slots if w), rates)
    state = [[f, w] for f, w in slots if f or w]
    now = Decimal(0)
    tiny = Decimal("1e-9")
    while state:
        rate = rates[len(state)]
        step = min(f if f > tiny else w / rate for f, w in state)
        now += step
        for s in state:
            if s[0] > tiny:
                s[0] -= step
            else:
                s[1] -= step * rate
        state = [s for s in state if s[0] > tiny or s[1] > tiny]
    return now


def colocated_work(works: Sequence, rates: Mapping[int, Decimal]) -> Decimal:
    """colocated_end without fixed time, in closed form: the work seconds of one machine's busy
    GPUs, shortest first; while m are busy each progresses at rates[m], so the i-th shortest ends
    after the sum over j <= i of (w_j - w_(j-1)) / rates[jobs still running]. Linear in the work:
    a machine shape's figure in reference seconds, times an offer's factor, is that offer's."""
    now = Decimal(0)
    previous = 0
    left = len(works)
    for w in works:
        if w > previous:
            now += (w - previous) / rates[left]
            previous = w
        left -= 1
    return now


def packing_table(workload: Workload, offer: Offer) -> tuple[Mapping[int, Decimal | None] | None, str]:
    """The packing efficiencies measured for the offer's GPU, and on which GPU; None where none were."""
    pk = workload.packing
    if offer.gpu in pk.by_gpu:
        return pk.by_gpu[offer.gpu], offer.gpu
    if offer.gpu == workload.reference_gpu:
        return pk.efficiency, offer.gpu
    return None, ""


PERCENT = Decimal("0.01")


def memory_share(workload: Workload, offer: Offer) -> Decimal | None:
    """The fixed share of the offer's GPU memory a job of a `memory_fraction` workload runs in:
    the smallest whole percent of this card that holds what ran as fast on the card the minimum
    was measured on (minimum x that card's GiB; on that card, the minimum itself). None where the
    workload gives no fraction."""
    mf = workload.memory_fraction
    if mf is None:
        return None
    share = (mf.inside_gib / offer.gpu_memory_gib / PERCENT).to_integral_value(rounding=ROUND_CEILING) * PERCENT
    return share


def memory_need(workload: Workload, offer: Offer) -> Decimal | None:
    """GPU memory one job takes on the offer's GPU: a fixed share of this card + the context
    outside it (a `memory_fraction` workload), else the workload's memory_gib (None: not given)."""
    share = memory_share(workload, offer)
    if share is None:
        return workload.memory_gib
    assert workload.memory_fraction is not None
    return share * offer.gpu_memory_gib + workload.memory_fraction.context_gib


def most_share(workload: Workload, offer: Offer, k: int) -> Decimal | None:
    """The largest whole-percent share each of k jobs may take of the offer's GPU, their contexts
    counted (report C: three at 25 % ran, three at 30 % did not start); None without a fraction."""
    mf = workload.memory_fraction
    if mf is None:
        return None
    room = (offer.gpu_memory_gib / k - mf.context_gib) / offer.gpu_memory_gib
    return max(Decimal(0), (room / PERCENT).to_integral_value(rounding=ROUND_FLOOR) * PERCENT)


def _percent(share: Decimal) -> str:
    return f"{number_text(share * 100)} %"


def fraction_note(workload: Workload, offer: Offer, k: int) -> str:
    """One line: the fixed fraction to set for k jobs per GPU and how much room that leaves; "" without one."""
    share, need, most = memory_share(workload, offer), memory_need(workload, offer), most_share(workload, offer, k)
    mf = workload.memory_fraction
    if share is None or need is None or most is None or mf is None:
        return ""
    return (f"memory: per_process_gpu_memory_fraction {share} ({_percent(share)} of {number_text(offer.gpu_memory_gib)}"
            f" GiB = {number_text(share * offer.gpu_memory_gib)} GiB, the least that ran as fast) +"
            f" {number_text(mf.context_gib)} GiB CUDA context outside it = {number_text(need)} GiB per job; {k} per"
            f" {offer.gpu} take {number_text(k * need)} GiB, and each could take up to {_percent(most)}")


def packing(workload: Workload, offer: Offer, k: int) -> tuple[Decimal, str]:
    """Time factor for k jobs sharing one GPU all the time; raises Infeasible when they cannot."""
    if k == 1:
        return Decimal(1), ""
    mem = memory_need(workload, offer)
    if mem is None:
        raise Infeasible(outcomes.of(Code.PACKING, per_gpu=k, why="no_memory"))
    if k * mem > offer.gpu_memory_gib:
        share = memory_share(workload, offer)
        fraction = {} if share is None or workload.memory_fraction is None else {
            "share": share, "context_gib": workload.memory_fraction.context_gib,
            "most_share": most_share(workload, offer, k)}
        raise Infeasible(outcomes.of(Code.PACKING, per_gpu=k, why="memory", need_gib=mem,
                                     gpu_memory_gib=offer.gpu_memory_gib, gpu=offer.gpu, **fraction))
    table, _ = packing_table(workload, offer)
    if table is None:
        pk = workload.packing
        measured = sorted({workload.reference_gpu} | set(pk.by_gpu)) if any(
            k > 1 for k in pk.efficiency) or pk.by_gpu else []
        raise Infeasible(outcomes.of(Code.PACKING, per_gpu=k, why="not_measured", gpu=offer.gpu,
                                     measured_on=", ".join(measured)))
    if k in table and table[k] is None:
        raise Infeasible(outcomes.of(Code.PACKING, per_gpu=k, why="did_not_fit", gpu=offer.gpu))
    eff = table.get(k)
    if eff is None:
        raise Infeasible(outcomes.of(Code.PACKING, per_gpu=k, why="no_figure", gpu=offer.gpu))
    startup = workload.packing.startup_factor
    factor = startup / eff
    memory = fraction_note(workload, offer, k)
    return factor, (f"{k} per GPU: per-stream efficiency {eff} on {offer.gpu}, start-up factor {startup}"
                    f" -> each job takes {factor:.3f}x while {k} share the GPU; fewer left run at the efficiency"
                    " for their count (alone: full speed)" + (f"; {memory}" if memory else ""))


def stream_capacity(workload: Workload, offer: Offer, gpus: Mapping, gpus_busy: int) -> tuple[int, str]:
    """The most streams one of the offer's GPUs keeps in real time (per-frame time = alone time x
    co-location / efficiency(k) must not exceed 1 / fps; k streams need k memory needs and a
    measured efficiency for k on this GPU), and one line saying why. Raises Infeasible, saying
    by how much, where not even one stream keeps up."""
    st = workload.streams
    assert st is not None  # only streams workloads are planned by stream capacity
    need = 1 / st.fps
    s, _ = speed(workload, offer, gpus)
    c, _ = colocation(workload, gpus_busy)
    alone = workload.seconds_per_unit / s * c
    fps = number_text(st.fps)
    if alone > need:
        raise Infeasible(outcomes.of(Code.REAL_TIME, gpu=offer.gpu, frame_s=alone, need_s=need, fps=st.fps))
    table, _ = packing_table(workload, offer)
    measured = table or {}
    best, why_not = 1, ""
    mem = memory_need(workload, offer)
    for k in sorted(k for k in measured if k > 1):
        eff = measured[k]
        if eff is None or (mem is not None and k * mem > offer.gpu_memory_gib):
            why_not = f"{k} do not fit its memory"
            break
        if mem is None:
            why_not = "packing needs the workload's memory_gib"
            break
        if alone / eff > need:
            why_not = f"{k} would take {number_text(alone / eff * 1000)} ms per frame each"
            break
        best = k
    per = alone / (measured.get(best) or 1 if best > 1 else 1)
    if table is None:
        why_not = "packing not measured on this GPU"
    return best, (f"{best} stream{'s' if best > 1 else ''} per {offer.gpu} in real time: {number_text(per * 1000)} ms per frame"
                  f" each, {fps} fps needs at most {number_text(need * 1000)} ms" + (f"; {why_not}" if why_not else ""))


def packing_rates(workload: Workload, offer: Offer, k: int) -> dict[int, Decimal]:
    """Per-job speed (1 = alone) when m = 1..k jobs share one GPU: efficiency(m) / start-up
    factor; a count without its own figure takes the figure of the next larger measured count."""
    table, _ = packing_table(workload, offer)
    rates = {1: Decimal(1)}
    for m in range(k, 1, -1):
        eff = (table or {}).get(m)
        rates[m] = eff / workload.packing.startup_factor if eff is not None else rates.get(m + 1, Decimal(0))
    return rates


def shared_gpu(slots: Sequence[Sequence[Decimal]], rates: Mapping[int, Decimal], start_s: Decimal) -> tuple[Decimal, int]:
    """k slots sharing one GPU, each running its jobs one after another (work in seconds alone on
    this GPU; every job first pays start_s of wall time). While m slots still hold a job, each
    progresses at rates[m]. Returns when the last slot finishes and how many jobs it started."""
    queues = [list(q) for q in slots if q]
    if not queues:
        return Decimal(0), 0
    tiny = Decimal("1e-9")
    # per slot: [phase ("start" | "work" | "done"), remaining, job index]
    state: list[list[Any]] = [["start", start_s, 0] if start_s else ["work", q[0], 0] for q in queues]
    now, last = Decimal(0), (Decimal(0), 0)
    while True:
        active = [s for s in state if s[0] != "done"]
        if not active:
            return last
        rate = rates[len(active)]
        step = min(s[1] if s[0] == "start" else s[1] / rate for s in active)
        now += step
        for i, s in enumerate(state):
            if s[0] == "done":
                continue
            s[1] -= step if s[0] == "start" else step * rate
            if s[1] > tiny:
                continue
            if s[0] == "start":
                s[0], s[1] = "work", queues[i][s[2]]
            elif s[2] + 1 < len(queues[i]):
                s[2] += 1
                s[0], s[1] = ("start", start_s) if start_s else ("work", queues[i][s[2]])
            else:
                s[0] = "done"
                if now >= last[0]:
                    last = (now, s[2] + 1)


def check_offer(workload: Workload, offer: Offer, setting: Setting) -> None:
    """Raises Infeasible for reasons that exclude the offer whatever the fleet."""
    cat = setting.catalog
    if offer.price_jpy_per_hour is None:
        what = "power price or power draw" if offer.kind == "owned" else "price"
        raise Infeasible(outcomes.of(Code.UNPRICED, offer=offer.name, what=what))
    if offer.retired(cat.date):
        retired_on = offer.retired_on.isoformat() if offer.retired_on else ""
        raise Infeasible(outcomes.of(Code.RETIRED, offer=offer.name, retired_on=retired_on,
                                     snapshot=cat.snapshot, successor=offer.successor or ""))
    month = setting.as_of_month or cat.snapshot
    priced = _month(offer.as_of)
    if priced and priced > month:
        raise Infeasible(outcomes.of(Code.PRICED_LATER, offer=offer.name, priced=offer.as_of, month=month))
    if offer.available_from is not None and offer.available_from.isoformat()[:7] > month:
        raise Infeasible(outcomes.of(Code.NOT_AVAILABLE, offer=offer.name, available_from=offer.available_from.isoformat()))
    sharded = workload.data_parallel is not None and workload.data_parallel.memory is not None
    need = memory_need(workload, offer)
    if need is not None and need > offer.gpu_memory_gib and not sharded:
        raise Infeasible(outcomes.of(Code.MEMORY, need_gib=need, gpu_memory_gib=offer.gpu_memory_gib,
                                     gpu=offer.gpu))
    # where a workload gives no need, the offer's own memory bounds it: nothing more to check
    speed(workload, offer, cat.gpus)


def _month(text: str) -> str:
    m = re.match(r"^(\d{4})(?:-(\d{2}))?", text or "")
    if not m:
        return ""
    return f"{m.group(1)}-{m.group(2) or '01'}"


def job_factor(workload: Workload, offer: Offer, gpus: Mapping, k: int, gpus_busy: int) -> tuple[Decimal, list[str]]:
    """Multiply a job's reference seconds by this to get its time in one slot of the offer."""
    s, why_s = speed(workload, offer, gpus)
    c, why_c = colocation(workload, gpus_busy)
    p, why_p = packing(workload, offer, k)
    notes = [f"speed on {offer.gpu}: {factor_text(s)}x {workload.reference_gpu} ({why_s})", why_c]
    if why_p:
        notes.append(why_p)
    return c * p / s, notes


def number_text(value: Decimal) -> str:
    """A quantity for people (GiB, seconds): at most 3 decimals, no trailing zeros: 3, 5.4, 6.372."""
    text = f"{Decimal(value).quantize(Decimal('0.001')):f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def factor_text(value: Decimal) -> str:
    """A ratio for people: at most 3 decimals (the exact Decimal is what the arithmetic uses)."""
    text = f"{value.quantize(Decimal('0.001')):f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def job_start(workload: Workload) -> tuple[Decimal, str]:
    """Seconds of fixed cost at every job start, and one line saying what and from where."""
    if workload.job_start_s:
        return workload.job_start_s, (f"fixed cost {number_text(workload.job_start_s)} s at every job start on a slot"
                                      f" (process start to first timed step, warm-up, exit; the same on every GPU):"
                                      f" {workload.job_start_source}")
    return Decimal(0), (f"fixed cost per job start: not measured for {workload.name}, 0 s counted"
                        " (`gpuplan bench` measures it)")


def memory_note(workload: Workload) -> str:
    """One line on the memory figure fits and packing use, and the peak kept apart."""
    mf = workload.memory_fraction
    if mf is not None:
        return (f"memory per job: a fixed fraction of the GPU (per_process_gpu_memory_fraction) holding"
                f" {number_text(mf.inside_gib)} GiB ({_percent(mf.minimum)} of {number_text(mf.card_gib)} GiB, the least"
                f" that ran as fast) + {number_text(mf.context_gib)} GiB CUDA context outside it ({mf.source})")
    if workload.memory_gib is None:
        return f"memory per job: not given for {workload.name}; any GPU is assumed to fit one job"
    peak = (f"; uncapped peak {number_text(workload.memory_peak_gib)} GiB, not a need (an allocator takes what is free)"
            if workload.memory_peak_gib is not None and workload.memory_peak_gib != workload.memory_gib else "")
    return f"memory need {number_text(workload.memory_gib)} GiB per job ({workload.memory_source or workload.source}){peak}"


GBIT = Decimal(10) ** 9


def allreduce_seconds(grad_bytes: int, gpus_per_node: int, nodes: int, offer: Offer, link) -> tuple[Decimal, str]:
    """One step's allreduce of `grad_bytes` = L, from the link's measured figures.

    Over several machines, one process per machine talks on the network (hierarchical, report
    B: p = machines): a ring in which each sends 2L(p-1)/p bytes at the link's point-to-point
    bandwidth (line rate x its measured share). Where the link names an in-node pass bandwidth
    (a host-staged collective, report B), every machine also passes L through it: NCCL reduce and
    broadcast inside the machine (when it has several GPUs) and a device-to-host and a host-to-
    device copy around the network exchange; a single machine of such a link pays those passes
    too (the same communicator, report B). Otherwise, on one machine of g > 1 GPUs: a ring over
    its GPU link. Raises Infeasible where the catalog has no such figure."""
    g, n = gpus_per_node, nodes
    passes_gbps = link.in_node_pass_gbps if link is not None else None
    parts: list[str] = []
    seconds = Decimal(0)
    if n > 1:
        if link is None or link.inter_node_gbps is None:
            raise Infeasible(outcomes.of(Code.LINK, offer=offer.name, between="machines"))
        sustained, what = link.sustained_network_gbps()  # a burst lasts minutes; a training step runs for hours
        assert sustained is not None
        p, gbps, eff = n, sustained, link.inter_node_effective
        over = f"{n} machines"
    elif g > 1 and passes_gbps is None:
        if link is None or link.intra_node_gbps is None:
            raise Infeasible(outcomes.of(Code.LINK, offer=offer.name, between="gpus"))
        p, gbps, eff, what = g, link.intra_node_gbps, link.intra_node_effective, link.intra_node_link
        over = f"{g} GPUs of one machine"
    elif g > 1:
        p = 1
    else:
        return Decimal(0), "one GPU: no allreduce"
    if p > 1:
        volume = Decimal(2 * grad_bytes * (p - 1)) / p
        ring = volume * 8 / (gbps * GBIT * eff)
        seconds += ring
        parts.append(f"ring allreduce over {over}: 2L(p-1)/p = {number_text(volume / 10**6)} MB at {gbps} Gbit/s x {eff}"
                     f" ({what}) = {number_text(ring)} s")
    if passes_gbps is not None:
        # NCCL reduce + broadcast inside the machine where it has several GPUs; the two host copies
        # wherever the exchange is staged through host memory (one machine of this link included)
        passes = (2 if g > 1 else 0) + 2
        staged = Decimal(passes * grad_bytes * 8) / (passes_gbps * GBIT)
        seconds += staged
        named = "reduce, device-to-host, host-to-device, broadcast" if g > 1 else "device-to-host, host-to-device"
        parts.append(f"{passes} in-node passes of L ({named}) at {passes_gbps} Gbit/s = {number_text(staged)} s")
    return seconds, " + ".join(parts) + f" ({link.source})"


def step_compute_seconds(workload: Workload, speed_on_offer: Decimal) -> Decimal:
    """One data-parallel step's compute on one GPU: batch_per_gpu samples at this GPU's speed."""
    dp = workload.data_parallel
    # workloads.py requires batch_per_gpu and samples_per_unit with gradient_bytes
    assert dp is not None and dp.batch_per_gpu is not None and dp.samples_per_unit is not None
    per_unit = dp.compute_seconds_per_unit if dp.compute_seconds_per_unit is not None else workload.seconds_per_unit
    return per_unit / speed_on_offer * dp.batch_per_gpu / dp.samples_per_unit


def dp_speedup(workload: Workload, offer: Offer, nodes: int, speed_on_offer: Decimal, link=None) -> tuple[Decimal, str]:
    """Data-parallel speed-up over one GPU of the offer for `nodes` machines, and where it comes from.

    Measured efficiency for exactly (g x n GPUs, n machines) wins. Else the communication model:
    one step = compute (batch_per_gpu samples at this GPU's speed) + the allreduce time not
    hidden behind `overlap` x compute; speed-up = g x n x compute / step. Without gradient_bytes,
    g x intra^log2(g) x inter^log2(n) (a rule of thumb, said so)."""
    g, n = offer.gpu_count, nodes
    dp = workload.data_parallel or DataParallel()
    measured = dp.efficiency.get((g * n, n))
    if measured is not None:
        up = (g * n * measured).quantize(Decimal("0.0001"))
        return up, f"efficiency {measured} measured for {g * n} GPUs on {n} machine{'s' if n > 1 else ''} ({dp.source})"
    if g * n == 1:
        return Decimal(1), "one GPU"
    if dp.gradient_bytes is None:
        intra = Decimal(str(float(dp.intra_node_eff_per_doubling) ** math.log2(g)))
        inter = Decimal(str(float(dp.inter_node_speedup_per_doubling) ** math.log2(n)))
        up = (g * intra * inter).quantize(Decimal("0.0001"))
        return up, (f"rule of thumb (the workload gives no gradient_bytes): intra-node {dp.intra_node_eff_per_doubling}"
                    f" per doubling of GPUs, {dp.inter_node_speedup_per_doubling}x per doubling of machines;"
                    " not measured for this layout")
    compute = step_compute_seconds(workload, speed_on_offer)
    ar, why = allreduce_seconds(dp.gradient_bytes, g, n, offer, link)
    exposed = max(ar - dp.overlap * compute, Decimal(0))
    if dp.input_step_s is not None or dp.shared_batch:
        return _fed_speedup(dp, g * n, compute, exposed, why)
    up = (g * n * compute / (compute + exposed)).quantize(Decimal("0.0001"))
    hidden = f", {dp.overlap} of compute overlapped" if dp.overlap else ""
    return up, (f"per step {number_text(compute)} s compute ({dp.batch_per_gpu} per GPU) + {number_text(exposed)} s"
                f" allreduce{hidden}: {why}; gradients {dp.gradient_bytes:,} bytes ({dp.comm_source})")


def _fed_speedup(dp: DataParallel, gpus: int, compute: Decimal, exposed: Decimal, why: str) -> tuple[Decimal, str]:
    """The speed-up in distinct samples of a script whose step waits on one input pipeline
    (report E as it ran, docs/model.md "Report E"): a step takes the slower of the pipeline and the
    towers' compute + averaging; with a shared batch every tower trains on the same dequeued batch,
    so a step takes batch_per_gpu distinct samples whatever the GPUs (the log counts them once per
    tower). Speed-up = distinct samples a step / one GPU's x one GPU's step / this step."""
    feed = dp.input_step_s or Decimal(0)
    one = max(feed, compute)
    step = max(feed, compute + exposed)
    distinct = 1 if dp.shared_batch else gpus
    up = (distinct * one / step).quantize(Decimal("0.0001"))
    bound = "input pipeline" if feed >= compute + exposed else "compute + averaging"
    said = (f"per step the slower of the input pipeline ({number_text(feed)} s, measured) and {gpus} towers' compute"
            f" {number_text(compute)} s + averaging {number_text(exposed)} s ({why}): {number_text(step)} s, set by the"
            f" {bound}")
    if dp.shared_batch:
        said += (f"; every tower trains on the same dequeued batch of {dp.batch_per_gpu}: {dp.batch_per_gpu} distinct"
                 f" samples a step, counted {(dp.batch_per_gpu or 0) * gpus} by a per-tower log")
    if up <= 1:
        said += f"; this script gains nothing from {gpus} GPUs ({number_text(up)}x one GPU in distinct samples)"
    # compute alone is a bound, never the prediction: the pipeline may not keep up with it
    said += (f"; compute alone would allow at most {number_text(distinct * one / (compute + exposed))}x (a bound, not"
             f" a prediction)")
    return up, said + f" ({dp.comm_source})"


def sharded_need(workload: Workload, gpus: int) -> tuple[Decimal, str] | None:
    """GPU memory per GPU of a data-parallel job whose memory is given in parts, over `gpus`
    GPUs (the parts its ZeRO / FSDP stage splits are divided by the sharding degree), and one line
    saying how; None where the workload gives no parts."""
    dp = workload.data_parallel
    m = dp.memory if dp is not None else None
    if m is None:
        return None
    d = m.degree or gpus
    split = {"optimizer state": m.stage >= 1, "gradients": m.stage >= 2, "parameters": m.stage >= 3}
    parts = {"parameters": m.parameters_gib, "gradients": m.gradients_gib, "optimizer state": m.optimizer_gib}
    need = m.activations_gib + sum((v / d if split[k] else v for k, v in parts.items()), Decimal(0))
    sharded = [k for k, on in split.items() if on]
    how = (f"{', '.join(sharded)} split over {d} GPUs (ZeRO stage {m.stage})" if sharded and d > 1
           else f"nothing split (ZeRO stage {m.stage}{', one GPU' if sharded else ''})")
    return need, (f"memory need {number_text(need)} GiB per GPU: parameters {number_text(m.parameters_gib)}, gradients"
                  f" {number_text(m.gradients_gib)}, optimizer state {number_text(m.optimizer_gib)}, activations"
                  f" {number_text(m.activations_gib)} GiB; {how} ({m.source})")


def global_batch_warning(workload: Workload, gpus: int) -> Outcome | None:
    """A warning where data-parallel over `gpus` GPUs makes the global batch larger than validated."""
    dp = workload.data_parallel
    if dp is None or dp.batch_per_gpu is None or dp.validated_global_batch is None:
        return None
    batch = dp.batch_per_gpu * gpus
    if batch <= dp.validated_global_batch:
        return None
    return outcomes.of(Code.GLOBAL_BATCH, batch=batch, per_gpu=dp.batch_per_gpu, gpus=gpus,
                       validated=dp.validated_global_batch, source=dp.comm_source)


def ceil_s(x: Decimal) -> int:
    # math.ceil of a Decimal is exact (Decimal.__ceil__), and half the time of to_integral_value:
    # a 20,000-job estimate calls this some 170,000 times
    return math.ceil(x if type(x) is Decimal else Decimal(x))


# ---------------------------------------------------------------------------------------------
# billing and the plan


# Kinds planned as one machine: owned and rented servers are the one you have; a container task
# service (kind "task", Sakura 高火力 DOK) runs one task per project at a time, the others wait,
# so its plans are a serial queue on one task (or the slots of one multi-GPU task). (issue 22)
ONE_MACHINE_KINDS = ("owned", "monthly", "task")


def billed(seconds: int, offer: Offer) -> int:
    """Seconds billed for `seconds` of use: rounded up to the granularity, at least the minimum."""
    return billing.billed_seconds(seconds, offer.billing_granularity_s, offer.billing_minimum_s)


# The run engine (`gpuplan run`): Ray installed into its own venv on every machine, started, and
# each batch submitted to it as a Ray Job (docs/run-engine.md).
ENGINE_RAY = "2.60.0"
# `pip install ray[default]==2.60.0` into a fresh venv: 156 s on this project's 2-core test machine
ENGINE_INSTALL_S = 156
# Ray started on the cluster (head, the other nodes joining, a worker for each GPU slot): 67 s on
# two owned hosts (issue 30, measured; 22.8-54.7 s for 4 loopback hosts x 4 slots sharing the
# 2-core test machine, benchmarks/run_bench.py, 2026-11-26)
ENGINE_START_S = 67
# one submission to a warm cluster, from the client's start until the batch's driver began:
# 2.09-3.09 s, medians of 5 in four runs at load 1-25 (benchmarks/run_bench.py, 4 loopback hosts
# x 4 slots on the 2-core test machine, 2026-11-26)
SUBMIT_S = 3


_ONCE: dict[tuple, tuple] = {}  # (function, ids of offer, workload, setting) -> (those three, its answer)


def _once_per_offer(fn):
    """fn(offer, workload, setting) worked out once per offer of an estimate, not once per plan
    (a 20,000-job estimate prices some 2,000 plans on a few dozen offers). The three arguments
    are kept with the answer, so their ids cannot be reused while it is kept; a list in the
    answer is copied for each caller (make_plan extends its notes)."""
    def once(offer, workload, setting):
        key = (fn.__name__, id(offer), id(workload), id(setting))
        have = _ONCE.get(key)
        if have is None or have[0] is not offer or have[1] is not workload or have[2] is not setting:
            if len(_ONCE) >= 4096:
                _ONCE.clear()
            have = _ONCE[key] = (offer, workload, setting, fn(offer, workload, setting))
        return tuple(list(x) if isinstance(x, list) else x for x in have[3])

    once.__doc__, once.__name__ = fn.__doc__, fn.__name__
    return once


@_once_per_offer
def provider_times(offer: Offer, workload: Workload, setting: Setting) -> tuple[int, int, int, list[str]]:
    """(setup, capture, launch) seconds for the offer's provider, and where they came from."""
    facts = setting.catalog.providers.get(offer.provider)
    setup = facts.setup_s if facts else 0
    capture = facts.capture_s if facts else 0
    launch = facts.launch_s if facts else 0
    src = facts.source if facts else "no provider facts in the catalog: 0 assumed"
    notes = []
    if offer.kind == "task":  # issue 22: nothing to set up, the image pull is wall time only (not billed)
        pull = facts.task_start_s if facts else 0
        notes.append(f"no setup on {offer.name} (a container task): its image pull and start, {fmt.duration(pull)},"
                     f" is wall time, not billed (catalog {setting.catalog.snapshot} providers.csv task_start_minutes:"
                     " an ESTIMATE where its notes say so)")
        return pull, 0, 0, notes
    measured = setting.measured_setup.get((offer.provider, offer.name))
    if workload.setup_s is not None:
        setup = workload.setup_s
        notes.append(f"setup {fmt.duration(setup)} on {offer.name}: from the workload's setup_minutes")
    elif measured is not None:
        setup = measured[0]
        notes.append(f"setup {fmt.duration(setup)} on {offer.name}: measured ({measured[1]})")
    else:
        notes.append(f"setup {fmt.duration(setup)} on {offer.provider}: catalog {setting.catalog.snapshot} ({src})")
    engine = setting.measured_engine.get((offer.provider, offer.name))
    if engine is not None and workload.setup_s is None:
        setup += engine[0]
        notes.append(f"run engine (Ray {ENGINE_RAY}) install {fmt.duration(engine[0])} on {offer.name}: measured"
                     f" ({engine[1]}), counted in setup")
    notes.append(f"image capture {fmt.duration(capture)}, launch from image {fmt.duration(launch)} on {offer.provider} ({src})")
    return setup, capture, launch, notes


@_once_per_offer
def run_start(offer: Offer, workload: Workload, setting: Setting) -> tuple[int, list[str]]:
    """Seconds every machine of the offer spends before its jobs on `gpuplan run` itself: the
    run engine's start and one submission (ENGINE_START_S + SUBMIT_S), and what the plan says
    of them. Counted where gpuplan has run its engine on the offer (the `ray` playbook measured
    there); elsewhere 0, and the plan says what it leaves out. A container task (DOK) runs no
    engine: its image pull is its start (provider_times)."""
    if offer.kind == "task":
        return 0, []
    if (offer.provider, offer.name) in setting.measured_engine:
        return ENGINE_START_S + SUBMIT_S, [
            f"run engine (Ray {ENGINE_RAY}) start {ENGINE_START_S} s (measured on two owned hosts) and one submission"
            f" {SUBMIT_S} s (client until the batch's driver began, measured by benchmarks/run_bench.py) on {offer.name}:"
            " counted in every machine's setup, before its jobs (docs/model.md)"]
    install = "" if workload.setup_s is not None else f"install about {fmt.duration(ENGINE_INSTALL_S)} per machine, "
    return 0, [f"run engine (Ray {ENGINE_RAY}) {install}start about {ENGINE_START_S} s and one submission about"
               f" {SUBMIT_S} s per batch (docs/model.md): not counted until `gpuplan run` has run on {offer.name}"]


def image_problem(offers: Sequence[Offer], setting: Setting) -> Outcome | None:
    """Why a fleet cannot start from an image built on its first offer ("" where it can): the
    provider could not capture one in the as-of month, or the image cannot start the other
    offer's size (catalog/images.csv). No rule for the provider: capture assumed possible."""
    cat = setting.catalog
    first = offers[0]
    rule = cat.image_rule(first.provider, setting.as_of_month or cat.snapshot)
    if rule is None:
        return None
    if not rule.capture:
        return outcomes.of(Code.IMAGE, why="no_capture", provider=first.provider,
                           month=setting.as_of_month or cat.snapshot, source=rule.source)
    for o in offers[1:]:
        if rule.usable_by == "same-size" and o.name != first.name or rule.usable_by == "same-gpu" and o.gpu != first.gpu:
            return outcomes.of(Code.IMAGE, why="other_size", offer=first.name, gpu=first.gpu, other=o.name, other_gpu=o.gpu,
                               provider=first.provider, usable_by=rule.usable_by, source=rule.notes or rule.source)
    return None


def builder_is_worker(offer: Offer, setting: Setting) -> bool:
    facts = setting.catalog.providers.get(offer.provider)
    return bool(facts.builder_is_worker) if facts else True


class Machine(NamedTuple):
    """One worker machine given to make_plan on its own."""

    offer: Offer
    jobs_s: int  # its busiest slot's jobs, job starts included
    names: tuple[str, ...] = ()
    job_starts_s: Decimal | int = 0  # of jobs_s, the fixed cost of its job starts


class _Run(NamedTuple):
    """Machines of a plan that are billed alike: one role, start and setup, in columns."""

    offer: Offer
    role: str  # "builder", "worker", "builder+worker"
    start_s: int
    setup_s: int
    capture_s: int  # billed capture time
    staging_s: int
    loads: Loads


@dataclass(frozen=True, slots=True)
class Loads:
    """Worker machines of one offer, in columns: kind i is counts[i] machines alike, each busy
    jobs_s[i] seconds (its busiest slot; job_starts_s[i] of them job starts) and names[i] their
    job names, a tuple per machine. Empty job_starts_s / names: zeros / not tracked."""

    offer: Offer
    jobs_s: Sequence[int]
    counts: Sequence[int]
    names: Sequence[tuple[tuple[str, ...], ...]] = ()
    job_starts_s: Sequence[Decimal] = ()


def _columns(vm_loads) -> list[Loads]:
    """Loads as given, and runs of single machines (Machine, or a tuple of its fields) of one
    offer as one Loads."""
    out: list[Loads] = []
    singles: list[Machine] = []

    def flush() -> None:
        if singles:
            starts = [Decimal(x.job_starts_s) for x in singles]
            out.append(Loads(singles[0].offer, [x.jobs_s for x in singles], [1] * len(singles),
                             [(tuple(x.names),) for x in singles], starts if any(starts) else ()))
            singles.clear()

    for load in vm_loads:
        if isinstance(load, Loads):
            flush()
            out.append(load)
        else:
            one = load if isinstance(load, Machine) else Machine(*load)
            if singles and singles[0].offer is not one.offer:
                flush()
            singles.append(one)
    flush()
    return out


def _first_apart(g: Loads) -> tuple[Loads, Loads | None]:
    """The first machine of g alone, and the others (None when there are none). Job names stay
    unread (they may be built only when asked)."""
    one = Loads(g.offer, g.jobs_s[:1], (1,), _FirstOnly(g.names) if g.names else (), g.job_starts_s[:1])
    if g.counts[0] > 1:
        rest = Loads(g.offer, g.jobs_s, [g.counts[0] - 1, *g.counts[1:]], _AllButFirst(g.names) if g.names else (),
                     g.job_starts_s)
    elif len(g.counts) > 1:
        rest = Loads(g.offer, g.jobs_s[1:], g.counts[1:], _AllButFirst(g.names, whole_run=True) if g.names else (),
                     g.job_starts_s[1:])
    else:
        rest = None
    return one, rest


class _FirstOnly(Sequence):
    """The job names of the first machine of `names` (one run of one machine)."""

    def __init__(self, names):
        self.names = names

    def __len__(self) -> int:
        return 1

    def __getitem__(self, i):
        if i != 0:
            raise IndexError(i)
        return self.names[0][:1]


class _AllButFirst(Sequence):
    """`names` without its first machine: without its first run where that run is that machine."""

    def __init__(self, names, whole_run: bool = False):
        self.names, self.skip = names, 1 if whole_run else 0

    def __len__(self) -> int:
        return len(self.names) - self.skip

    def __getitem__(self, i):
        if not 0 <= i < len(self):
            raise IndexError(i)
        return self.names[0][1:] if i == 0 and not self.skip else self.names[i + self.skip]


def billed_each(head: int, jobs_s: Sequence[int], offer: Offer) -> list[int]:
    """billed(head + j) for each j: in one pass, as plans of thousands of machines need it."""
    return billing.billed_each(head, jobs_s, offer.billing_granularity_s, offer.billing_minimum_s)


def make_plan(
    workload: Workload,
    setting: Setting,
    fleet: Sequence[tuple[Offer, int]],
    setup_mode: str,
    per_gpu: int,
    vm_loads: Sequence[Loads | Machine | tuple],
    notes: Sequence[str] = (),
    optimal: bool = True,
    warnings: Sequence[Outcome | None] = (),
    task_seconds: Sequence[int] = (),
) -> Plan:
    """Price one plan. vm_loads: the worker machines in fleet order, as Loads (machines in
    columns) or one machine at a time as (offer, seconds of its jobs, job names[, seconds of
    those that are job starts]); the first machine of fleet[0] is the image builder where it is
    a worker. Machines are priced in bulk: a plan of 20,000 machines costs a few list passes.
    task_seconds: a queue of container tasks (a DOK offer of one GPU, one job a task): each job's
    seconds, each billed on its own with its own minimum (billing.billed_tasks)."""
    loads = _columns(vm_loads)
    first = fleet[0][0]
    setup, capture, launch, time_notes = provider_times(first, workload, setting)
    if first.kind == "task" and len(task_seconds) > 1:
        # a queue of tasks: each task is a fresh container that pulls its image before it runs (no
        # image cache between tasks is documented), so every task adds its pull to the wall; unbilled
        time_notes.append(f"each of the {len(task_seconds)} tasks pulls its image before it runs:"
                          f" {len(task_seconds)} x {fmt.duration(setup)} of wall time, not billed")
        setup *= len(task_seconds)
    bw = builder_is_worker(first, setting)
    staging = workload.staging_s
    runs: list[_Run] = []
    # `gpuplan run`'s own start on every machine that runs jobs (run_start), before its jobs
    starts_at: dict[int, int] = {}

    def own_start(o: Offer) -> int:
        if id(o) not in starts_at:
            starts_at[id(o)], said = run_start(o, workload, setting)
            time_notes.extend(n for n in said if n not in time_notes)
        return starts_at[id(o)]

    if setup_mode == "image":
        start_workers = setup + capture + launch
        if bw:
            builder, rest = _first_apart(loads[0])
            # a synchronous (data-parallel) job starts on every machine at once: the builder is held,
            # and billed, until the workers have launched (counted with its capture)
            wait = launch if workload.data_parallel is not None and (rest or len(loads) > 1) else 0
            runs.append(_Run(builder.offer, "builder+worker", 0, setup + own_start(builder.offer), capture + wait, staging,
                             builder))
            if wait:
                time_notes.append(f"the builder waits {fmt.duration(wait)} for the workers to launch before the"
                                  " synchronous job starts: held and billed (with its capture)")
            loads = ([rest] if rest else []) + loads[1:]
        else:
            runs.append(_Run(first, "builder", 0, setup, 0, 0, Loads(first, (0,), (1,))))
        runs.extend(_Run(g.offer, "worker", start_workers, own_start(g.offer), 0, staging, g) for g in loads)
    else:
        setups = {id(first): setup}
        for g in loads:
            if id(g.offer) not in setups:
                setups[id(g.offer)] = provider_times(g.offer, workload, setting)[0]
            runs.append(_Run(g.offer, "worker", 0, setups[id(g.offer)] + own_start(g.offer), 0, staging, g))

    # a builder that is not a worker is released after capture: unbilled, but wall time
    wall = max(start + s + c + st + max(g.jobs_s) + (capture if role == "builder" else 0)
               for _, role, start, s, c, st, g in runs)

    keys = ("setup", "capture", "staging", "jobs", "job_starts", "idle_tail", "rounding")
    # yen per seconds -> seconds per part (summed, priced once)
    seconds_at: dict[tuple[Decimal, int], dict[str, Decimal | int]] = {}
    machines: list[Machines] = []
    total_billed = 0
    capped = Decimal(0)  # what daily / monthly caps take off billed seconds x price (<= 0)
    at_end = setting.release == "at-end"
    for o, role, start, s, c, st, g in runs:  # _Run
        if o.kind == "task":  # the image pull of a DOK task is wall time, not billed (issue 22)
            start, s = start + s, 0
        head = s + c + st
        n = sum(g.counts)
        jobs = sum(map(operator.mul, g.jobs_s, g.counts))
        starts: Decimal | int = sum(map(operator.mul, g.job_starts_s, g.counts), Decimal(0)) if g.job_starts_s else 0
        # a monthly server the user rents already bills nothing more for this batch
        free = o.kind == "monthly" and is_yours(o, workload, setting)
        idle: Sequence[int] = ()
        held: list[int] | None
        if at_end and role != "builder":  # kept until the last one ends: each busy from its start to the end
            idle = [wall - start - head - j for j in g.jobs_s]
            busy = wall - start
            held = [busy] * len(g.counts)
            each = [busy if free else billed(busy, o)] * len(g.counts)
            idle_total, busy_total = n * busy - n * head - jobs, n * busy
        else:
            held = None  # each machine's held seconds: built only where they are billed as held (free) or capped
            each = [head + j for j in g.jobs_s] if free else billed_each(head, g.jobs_s, o)
            idle_total, busy_total = 0, n * head + jobs
        tasks: Sequence[int] = ()
        if o.kind == "task" and task_seconds and n == 1:  # one task per job: each pays the minimum (issue 22)
            tasks = tuple(task_seconds)
            each = [head + billing.billed_tasks(tasks, o.billing_granularity_s, o.billing_minimum_s)]
        billed_total = sum(map(operator.mul, each, g.counts))
        t = terms(o, workload, setting)
        price = (t.price_jpy, max(1, t.period_s))
        costs: list[Decimal] = []
        if t.capped:  # a day or a month costs at most its cap: cost is no longer billed seconds x price
            if held is None:
                held = [head + j for j in g.jobs_s]
            costs = billing.charges(held, t)
            capped += sum(map(operator.mul, costs, g.counts)) - billed_total * price[0] / price[1]
        acc = seconds_at.get(price)
        if acc is None:
            acc = seconds_at[price] = dict.fromkeys(keys, 0)
        acc["setup"] += s * n
        acc["capture"] += c * n
        acc["staging"] += st * n
        acc["jobs"] += jobs - starts
        acc["job_starts"] += starts
        acc["idle_tail"] += idle_total
        acc["rounding"] += billed_total - busy_total
        total_billed += billed_total
        machines.append(Machines(o, role, start, s, c, st, t, g.counts, g.jobs_s, each, idle, g.job_starts_s,
                                 g.names, costs, tasks))
    parts = {k: sum((acc[k] * yen / per for (yen, per), acc in seconds_at.items()), Decimal(0)) for k in keys}
    workers = sum(sum(m.counts) for m in machines if m.role != "builder")
    if capped:
        parts["cap"] = capped
    parts["one_off"] = workload.staging_jpy * workers
    risk = None
    if any(o.market == "spot" for o, _ in fleet):  # priced risk (issue 35): the expected interruptions
        risk = _spot_risk(workload, machines, per_gpu, setup_mode, launch, starts_at, staging)
        wall += risk.wall_s[1]
        parts["interruptions"] = risk.yen[1]
    total = sum(parts.values(), Decimal(0))

    provider, region = first.provider, first.region
    reasons: list[Outcome] = []
    warned: list[Outcome] = [w for w in warnings if w is not None]
    peak, qnotes = _quota(provider, fleet, setup_mode, bw, setting, reasons, warned)
    speeds = _speeds(workload, setting, fleet)
    if setting.deadline_s is not None:
        judged = wall
        if setting.strict_deadline and workload.streams is None:  # streams hold their machines whatever the speed
            judged = evidence.slow_wall(machines, wall, speeds)
        if judged > setting.deadline_s:
            slow = {"slow_end": True} if judged != wall else {}  # said: judged on the range (--strict)
            reasons.append(outcomes.of(Code.DEADLINE, wall_s=judged, deadline_s=setting.deadline_s, **slow))
    over_rate = fleet_rate_over(fleet, setting.max_yen_per_hour)
    if over_rate is not None:
        reasons.append(over_rate)
    retiring = _retires_during(fleet, wall, setting)
    warned.extend(retiring)
    warned.extend(_past_task_limit(machines))
    started = sum(sum(m.counts) for m in machines)
    if started > MAX_MACHINES and all(o.kind == "cloud" for o, _ in fleet):
        reasons.append(outcomes.of(Code.PROVISION_LIMIT, machines=started, limit=MAX_MACHINES))
    no_image = image_problem([first], setting)
    if no_image and setup_mode == "scratch":
        time_notes.append(f"{outcomes.render(no_image)}: every machine runs setup")
    if setup_mode == "image" and not bw:
        time_notes.append(f"{provider}: the builder is deleted after capture and is not a worker (deallocated during "
                          f"capture: not billed)")
    elif setup_mode == "image":
        time_notes.append(f"{provider}: the builder keeps running during capture (billed) and then works")

    spot = [o for o, _ in fleet if o.market == "spot"]
    for o in dict.fromkeys(spot):
        rule, _, where = o.notes.removeprefix("spot: ").partition("; ")
        warned.append(outcomes.of(Code.SPOT, offer=o.name, rule=rule))
        time_notes.append(f"{o.name} {o.region} at its spot price, not on demand" + (f" ({where})" if where else ""))
    if risk is not None:
        time_notes.extend(spot_risk.assumption(risk))
    warned.sort(key=lambda w: w.code is Code.QUOTA_UNKNOWN)  # what is known first
    assumptions = _assumptions(workload, setting, fleet, notes, time_notes, qnotes)
    recommendable, note = True, ""
    if retiring:  # shown with its figures, never picked: what happens past an end of sale is not promised
        recommendable, note = False, "retires: not recommended, it could not end before its offer's end of sale"
    elif spot and not setting.spot:
        recommendable, note = False, "spot: recommended only with --spot"
    elif any(o.kind == "owned" for o, _ in fleet):
        o = next(o for o, _ in fleet if o.kind == "owned")
        recommendable = is_yours(o, workload, setting)
        note = (f"owned: purchase {fmt.yen(o.price)} up front (not in the cost); cost = power only" if o.price is not None
                else f"owned: {fmt.plural(owned_machines(o, setting), 'host')} of your inventory; cost = power only")
        if not recommendable:
            note += f"; not recommended unless you own it (--owned {o.aliases[0] if o.aliases else o.name})"
    elif any(o.kind == "monthly" for o, _ in fleet):
        o = next(o for o, _ in fleet if o.kind == "monthly")
        month = fmt.yen(month_price(o, setting))
        note = (f"you rent it already: {month} a month, not in this cost (--owned)" if is_yours(o, workload, setting)
                else f"rented by the month: {month} per {o.billing_granularity_s // 86400} days, a started month billed whole")
    return Plan(
        provider=provider, region=region, fleet=tuple(fleet), setup=setup_mode, per_gpu=per_gpu,
        machines=tuple(machines), wall_s=wall, billed_s=total_billed, cost=total, breakdown=parts,
        feasible=not reasons, excluded_by=tuple(reasons), warned_by=tuple(warned),
        assumptions=tuple(assumptions), optimal=optimal, peak_vcpus=peak,
        recommendable=recommendable, note=note, speeds=speeds, risk=risk,
    )


def _spot_risk(workload: Workload, machines: Sequence[Machines], per_gpu: int, setup_mode: str, launch: int,
               starts_at: Mapping[int, int], staging: int) -> spot_risk.Risk:
    """The plan's spot machines as spot_risk exposures: each kind's held seconds, mean item length
    and what a replacement takes to work again (from the image where the plan uses one: its run
    engine start and staging, billed, after its launch; else its setup and staging)."""
    synchronous = workload.data_parallel is not None
    out = []
    for m in machines:
        o = m.offer
        if o.market != "spot":
            continue
        head = m.setup_s + m.capture_s + m.staging_s
        if setup_mode == "image" and m.role != "builder":
            restart = starts_at.get(id(o), 0) + staging
            restart_wall = launch + restart
        else:
            restart = restart_wall = m.setup_s + m.staging_s
        slots = 1 if synchronous else max(1, o.gpu_count * per_gpu)
        yen_per_s = m.terms.price_jpy / max(1, m.terms.period_s)
        for i, n in enumerate(m.counts):
            work = m.jobs_s[i]
            if synchronous:  # one job after another, each over the whole fleet
                back_to_back = max(1, len(workload.jobs))
            else:
                items = len(m.names[i][0]) if m.names and m.names[i] else 1
                back_to_back = max(1, -(-items // slots))
            out.append(spot_risk.Exposure(o, n, head, work, Decimal(work) / back_to_back, restart, restart_wall,
                                          yen_per_s))
    return spot_risk.expected(out, workload.checkpoint_s, synchronous)


class _PerOffer:
    """What a plan says of each offer, worked out once per estimate rather than once per plan
    (issue 47: 20,000 jobs make some 2,000 plans of the same few offers). Kept for the last
    (workload, setting) only, each offer by identity and held beside its figures, so an offer,
    workload or setting made later never reads another's."""

    def __init__(self) -> None:
        self.of: tuple = (None, None)
        self.speeds: dict[int, tuple[Offer, SpeedEvidence]] = {}
        self.notes: dict[int, tuple[Offer, tuple[str, ...]]] = {}

    def at(self, workload: Workload, setting: Setting) -> _PerOffer:
        if self.of[0] is not workload or self.of[1] is not setting:
            self.of, self.speeds, self.notes = (workload, setting), {}, {}
        return self


_PER_OFFER = _PerOffer()


def _speed_of(workload: Workload, setting: Setting, o: Offer) -> SpeedEvidence:
    """speed_evidence(workload, o, setting.catalog.gpus), once per offer of an estimate."""
    known = _PER_OFFER.at(workload, setting).speeds
    have = known.get(id(o))
    if have is None or have[0] is not o:
        have = known[id(o)] = (o, speed_evidence(workload, o, setting.catalog.gpus))
    return have[1]


def _speeds(workload: Workload, setting: Setting, fleet: Sequence[tuple[Offer, int]]) -> tuple[SpeedEvidence, ...]:
    """Each GPU of the fleet once, with its speed's kind and band."""
    out: dict[str, SpeedEvidence] = {}
    for o, _ in fleet:
        if o.gpu not in out:
            out[o.gpu] = _speed_of(workload, setting, o)
    return tuple(out.values())


def is_yours(offer: Offer, workload: Workload, setting: Setting) -> bool:
    """Did the user say they have this machine (--owned, or the workload's owned list)?"""
    mine = {n.lower() for n in setting.owned + workload.owned}
    return offer.name.lower() in mine or any(a.lower() in mine for a in offer.aliases)


def owned_machines(offer: Offer, setting: Setting) -> int:
    """How many machines of an owned (or monthly) offer there are to plan on: as said with
    `--owned NAME=N`, else one."""
    return max((setting.owned_count.get(n.lower(), 1) for n in (offer.name, *offer.aliases)), default=1)


def month_price(offer: Offer, setting: Setting) -> Decimal:
    """A monthly offer's rent in yen for one billed month (its row's price after FX)."""
    fx = setting.catalog.fx.get(offer.currency)
    assert offer.price is not None  # a monthly offer's row gives its rent
    return offer.price * (fx.jpy_per_unit if fx is not None else Decimal(1))


def terms(offer: Offer, workload: Workload, setting: Setting) -> billing.Terms:
    """How a machine of the offer is billed for this batch (billing.terms_for): an hourly price
    per 3600 s with its row's granularity, minimum and caps; a monthly rent per its billing period
    (the catalog row's month: a started month costs the whole rent, not 720 h x rent / 730 h);
    nothing for a monthly server the user already rents (--owned)."""
    if offer.kind == "monthly" and is_yours(offer, workload, setting):
        return billing.Terms(Decimal(0), 1)
    if offer.price_unit == "month" and offer.price is not None:
        return billing.terms_for(offer, month_price(offer, setting))
    return billing.terms_for(offer)


def fleet_rate_over(fleet: Sequence[tuple[Offer, int]], cap: Decimal | None) -> Outcome | None:
    """MAX_YEN_PER_HOUR where the fleet's machines together cost more an hour than `cap` (each
    offer's hourly price, on the catalog's tax basis, times its count); None within it or uncapped."""
    if cap is None:
        return None
    hourly = sum(((o.price_jpy_per_hour or Decimal(0)) * n for o, n in fleet), Decimal(0))
    if hourly <= cap:
        return None
    return outcomes.of(Code.MAX_YEN_PER_HOUR, yen_per_hour=hourly, max_yen_per_hour=cap)


def rate(offer: Offer, workload: Workload, setting: Setting) -> tuple[Decimal, int]:
    """Yen per so many billed seconds, as (yen, seconds), before any daily or monthly cap."""
    t = terms(offer, workload, setting)
    return t.price_jpy, max(1, t.period_s)


def infeasible_plan(workload: Workload, setting: Setting, offer: Offer, count: int, setup_mode: str, per_gpu: int,
                    reason: Outcome) -> Plan:
    """A shown-but-excluded candidate: no schedule, no cost."""
    return Plan(
        provider=offer.provider, region=offer.region, fleet=((offer, count),), setup=setup_mode, per_gpu=per_gpu,
        machines=(), wall_s=0, billed_s=0, cost=Decimal(0), breakdown={}, feasible=False, excluded_by=(reason,),
        assumptions=tuple(_price_notes(offer, setting)),
    )


def _quota(provider, fleet, setup_mode, bw, setting, reasons, warnings) -> tuple[int, list[str]]:
    """Peak concurrent vCPUs against the user's quotas (infeasible) or the provider's defaults (warning)."""
    facts = setting.catalog.providers.get(provider)
    by_family: dict[str, int] = {}
    for o, n in fleet:
        by_family[o.quota_family] = by_family.get(o.quota_family, 0) + o.vcpus * n
    first = fleet[0][0]
    if setup_mode == "image" and bw is False:
        # the builder is deleted before the workers start: the peak is the larger of the two
        pass
    peak = sum(by_family.values())
    if setup_mode == "image" and bw is False:
        peak = max(peak, first.vcpus)
    notes: list[str] = []
    region = first.region
    read = {name: v for (p, r, name), v in setting.quotas.read.items() if p == provider and r == region}
    user_total = setting.quotas.total.get(provider)
    user_given = user_total is not None or any(p == provider for p, _ in setting.quotas.family) or bool(read)
    if user_total is not None and peak > user_total:
        reasons.append(outcomes.of(Code.QUOTA, vcpus=peak, provider=provider, limit=user_total))
    elif user_total is None and "cores" in read and peak > read["cores"][0]:
        reasons.append(outcomes.of(Code.QUOTA, vcpus=peak, provider=provider, limit=read["cores"][0],
                                   read_at=read["cores"][1]))
    for fam, need in by_family.items():
        hit = setting.quotas.family_limit(provider, fam)
        if hit is not None and need > hit[1]:
            reasons.append(outcomes.of(Code.FAMILY_QUOTA, vcpus=need, family=fam, provider=provider, given_family=hit[0],
                                       limit=hit[1]))
        elif hit is None and fam in read and need > read[fam][0]:
            reasons.append(outcomes.of(Code.FAMILY_QUOTA, vcpus=need, family=fam, provider=provider, given_family=fam,
                                       limit=read[fam][0], read_at=read[fam][1]))
    if not user_given and facts is not None:
        how = facts.how_to_raise or ""
        # GCP's default total counts GPUs (GPUS_ALL_REGIONS), AWS's and Azure's vCPUs
        total = sum(o.gpu_count * n for o, n in fleet) if facts.quota_unit == "GPUs" else peak
        if facts.default_quota_vcpus is not None and total > facts.default_quota_vcpus:
            warnings.append(outcomes.of(Code.DEFAULT_QUOTA, vcpus=peak, need=total, unit=facts.quota_unit,
                                        provider=provider, quota_name=facts.quota_name,
                                        limit=facts.default_quota_vcpus, how_to_raise=how))
        for fam, need in by_family.items():
            default = facts.family_quota_vcpus.get(fam)
            if fam and default is not None and need > default and not (default == facts.default_quota_vcpus and peak > default):
                warnings.append(outcomes.of(Code.DEFAULT_FAMILY_QUOTA, vcpus=need, family=fam, limit=default,
                                            how_to_raise=how, provider=provider))
        if facts.default_quota_vcpus is not None or facts.family_quota_vcpus:
            notes.append(f"{provider} default quotas: {facts.default_quota_vcpus} {facts.quota_unit} total"
                         + "".join(f", {f} {v}" for f, v in facts.family_quota_vcpus.items() if f in by_family)
                         + f" ({facts.source})")
    if (facts is not None and user_total is None and facts.default_quota_vcpus is None and facts.quota_name != "none"
            and all(o.kind == "cloud" for o, _ in fleet)):
        for fam, need in by_family.items():  # no limit known for this family: say what it needs
            if (facts.family_quota_vcpus.get(fam) is not None or setting.quotas.family_limit(provider, fam) is not None
                    or fam in read):
                continue
            if facts.quota_name == "servers":  # a server count, not vCPUs (Sakura)
                need, unit = sum(n for o, n in fleet if o.quota_family == fam), "servers"
            else:
                unit = "vCPUs"
            warnings.append(outcomes.of(Code.QUOTA_UNKNOWN, provider=provider, family=fam or facts.quota_name,
                                        name=QUOTA_NAMES.get(fam, ""), need=need, unit=unit,
                                        how_to_raise=facts.how_to_raise or ""))
    return peak, notes


def _price_notes(offer: Offer, setting: Setting) -> list[str]:
    cat = setting.catalog
    if offer.price_jpy_per_hour is None:
        return [f"{offer.name}: {offer.notes or 'price not sourced'}"]
    named = {1: "per second", 60: "per minute", 3600: "per hour"}
    gran = named.get(offer.billing_granularity_s, f"per {offer.billing_granularity_s} s")
    if offer.price_unit == "month":
        gran = f"per month of {offer.billing_granularity_s // 86400} days (a started month billed whole)"
    has_minimum = offer.billing_minimum_s and offer.price_unit != "month"
    minimum = f", minimum {fmt.duration(offer.billing_minimum_s)}" if has_minimum else ""
    if offer.kind == "owned" and offer.price is None:  # a host of the user's inventory (issue 19)
        notes = [f"{offer.name}: {offer.notes} ({offer.source})"]
    elif offer.kind == "owned":
        facts = cat.providers.get(offer.provider)
        kwh, where = (facts.power_price_jpy_per_kwh, facts.source) if facts else ("?", "no provider facts")
        notes = [f"{offer.name}: power {offer.power_watts} W x {kwh} JPY/kWh (a household reference price with tax, not a"
                 " business tariff: set yours in prices.yaml) = "
                 f"{fmt.yen(offer.price_jpy_per_hour, 2)}/h ({where}); purchase {fmt.yen(offer.price)} ({offer.source})"]
    else:
        unit = f"{offer.price} {offer.currency}/{offer.price_unit}"
        if offer.listed_tax and offer.listed_tax != offer.tax and offer.price is not None:  # on one basis (tax.py)
            rate = offer.tax_rate if offer.tax_rate is not None else tax.CONSUMPTION_TAX
            times, over = tax.factor(offer.tax_assumed or offer.listed_tax, offer.tax, rate)
            listed = f"{(offer.price * over / times).normalize():f}"
            pct = tax.percent(rate)
            unit = f"{listed} {offer.currency}/{offer.price_unit} " + (
                f"+ {pct} consumption tax" if times > 1 else
                f"/ {1 + rate} (without its {pct} consumption tax)" if over > 1 else "as listed") + (
                f" (its source does not say whether it includes the tax: planned as {offer.tax_assumed})"
                if offer.tax_assumed else "")
        notes = [f"{offer.name} {offer.region}: {unit} = {fmt.yen(offer.price_jpy_per_hour, 2)}/h, billed {gran}{minimum} "
                 f"(source: {offer.source}; as of {offer.as_of or '?'})"]
    if offer.currency != "JPY" and offer.currency in cat.fx:
        fx = cat.fx[offer.currency]
        notes.append(f"FX {offer.currency} 1 = {fx.jpy_per_unit} JPY ({fx.date}, {fx.source})"
                     + (f"; {fx.notes}" if fx.notes else ""))
    notes.append(_tax_and_caps(offer))  # issue 22
    return notes


def _retires_during(fleet: Sequence[tuple[Offer, int]], wall_s: int, setting: Setting) -> list[Outcome]:
    """Warnings for a plan that could not end before one of its offers retires or ends sale
    (`retired_on`): Azure stops a retired size's VMs; Sakura does not say whether a V100 server
    or a waiting DOK task outlives the end of sale. Such a plan is shown, never recommended. It
    starts by the end of the catalog's month (`Catalog.date`), when a plan made today could begin."""
    start = setting.catalog.date
    ends = start + timedelta(seconds=wall_s)
    return [outcomes.of(Code.RETIRES, offer=o.name, retired_on=o.retired_on.isoformat(), start=start.isoformat(),
                        ends=ends.isoformat(), wall_s=wall_s, successor=o.successor or "")
            for o in dict.fromkeys(o for o, _ in fleet) if o.retired_on is not None and ends >= o.retired_on]


def _past_task_limit(machines: Sequence[Machines]) -> list[Outcome]:
    """A warning where one container task would run longer than DOK's default time limit: the
    whole batch in a multi-GPU task, or the longest job of a queue."""
    out = []
    for m in machines:
        if m.offer.kind != "task":
            continue
        longest = max(m.task_s) if m.task_s else m.staging_s + max(m.jobs_s)
        if longest > DOK_TASK_LIMIT_S:
            out.append(outcomes.of(Code.TASK_LIMIT, offer=m.offer.name, task_s=longest, limit_s=DOK_TASK_LIMIT_S))
    return out


def _tax_and_caps(offer: Offer) -> str:
    """How the offer's price stands to consumption tax, and its daily / monthly caps."""
    rate = offer.tax_rate if offer.tax_rate is not None else tax.CONSUMPTION_TAX
    listed = offer.listed_tax or offer.tax
    basis = {"included": f"includes Japan's {tax.percent(rate)} consumption tax", "excluded": "excludes consumption tax",
             }.get(listed, "does not say whether it includes consumption tax")
    line = f"{offer.name} {offer.region}: the listed price {basis}" + (f" ({offer.tax_source})" if offer.tax_source else "")
    caps = [f"{fmt.yen(c)} a {per}" for c, per in ((offer.daily_cap_jpy, "day"), (offer.monthly_cap_jpy, "month")) if c]
    if caps:
        line += f"; billed at most {' and '.join(caps)} (the lesser of hourly + daily, and monthly)"
    if offer.kind == "task" and offer.gpu_count == 1:
        line += ("; billed per task, one task running at a time per project (the others wait); each job is a task,"
                 f" billed for its own seconds and at least the {offer.billing_minimum_s} s minimum")
    elif offer.kind == "task":
        line += (f"; one task holds all {offer.gpu_count} GPUs and runs the jobs in its slots: billed once, at least"
                 f" the {offer.billing_minimum_s} s minimum")
    return line


def _assumptions(workload, setting, fleet, notes, time_notes, qnotes) -> list[str]:
    size = (fmt.plural(workload.streams.count, "stream") if workload.streams is not None
            else fmt.plural(len(workload.jobs), "job"))
    pace = (f"lengths in seconds of work alone on {workload.reference_gpu}" if workload.unit in ("second", "s")
            else f"{workload.seconds_per_unit} s per {workload.unit} on {workload.reference_gpu}")
    out = [f"workload {workload.name}: {size}, {pace} ({workload.source})"]
    out.extend(workload.assumptions)
    out.append(job_start(workload)[1])
    out.append(memory_note(workload))
    out.extend(notes)
    known = _PER_OFFER.at(workload, setting).notes
    for o, _ in fleet:
        have = known.get(id(o))
        if have is None or have[0] is not o:  # _price_notes once per offer of an estimate
            have = known[id(o)] = (o, tuple(_price_notes(o, setting)))
        out.extend(have[1])
    out.extend(time_notes)
    if workload.staging_s or workload.staging_jpy:
        # one rule (issue 42): the staging minutes are billed machine time (the breakdown's `staging`); staging_jpy
        # is a one-off charge on top, said as such, never as the staging's yen
        extra = (f", plus a one-off {fmt.yen(workload.staging_jpy)} each" if workload.staging_jpy
                 else "; no one-off charge given")
        out.append(f"data staging {fmt.duration(workload.staging_s)} on every machine that runs jobs, billed as machine time"
                   f" (the breakdown's staging){extra}")
    out.append("machines are released when their own jobs end (idle tail 0)" if setting.release == "when-done"
               else "machines are kept until the last one finishes (idle tail billed)")
    out.append("image storage and disk I/O are not priced (as in field report A)")
    out.extend(qnotes)
    seen, uniq = set(), []
    for line in out:
        if line and line not in seen:
            seen.add(line)
            uniq.append(line)
    return uniq
