"""The planner's nouns: workloads and the plans made for them. Frozen dataclasses, no logic.

Money is Decimal yen (rounded to integer yen once, in Plan.cost_jpy); durations integer seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from typing import TYPE_CHECKING

from gpuplan.market.billing import Terms
from gpuplan.planning import outcomes
from gpuplan.planning.evidence import SpeedEvidence, SpeedKind
from gpuplan.planning.outcomes import Outcome
from gpuplan.planning.types import Offer

if TYPE_CHECKING:
    from gpuplan.market.spot_risk import Risk


@dataclass(frozen=True)
class Job:
    """One unit of work: `units` of the workload's unit (epochs, frames...) alone on the reference GPU."""

    name: str
    units: Decimal


@dataclass(frozen=True)
class Streams:
    """Real-time work: `count` streams of `fps` frames per second, each for `duration_s`. Every
    frame must be processed as fast as it arrives, so machines are held for the whole duration."""

    count: int
    fps: Decimal
    duration_s: int


@dataclass(frozen=True)
class Packing:
    """k jobs per GPU. efficiency: k -> measured per-stream efficiency (time alone / time packed)
    on the reference GPU; None = measured not to fit. by_gpu: the same per other GPU key. A GPU
    with neither is not packed (efficiency depends on the job and the GPU: report C, the H100
    measurements). startup_factor divides the packed per-job speed (report C's 1.2). Fewer jobs
    left on a GPU than k run at the efficiency for that count (1 alone)."""

    efficiency: Mapping[int, Decimal | None] = field(default_factory=dict)
    by_gpu: Mapping[str, Mapping[int, Decimal | None]] = field(default_factory=dict)
    startup_factor: Decimal = Decimal("1.2")


@dataclass(frozen=True)
class MemoryFraction:
    """A job that runs in a fixed share of its GPU's memory (TensorFlow's
    per_process_gpu_memory_fraction) plus a CUDA context outside that share. minimum: the smallest
    share that ran as fast as the whole card, measured on a card of card_gib (so minimum x card_gib
    GiB inside the share is what the job needs on any card); context_gib: the memory each process
    takes outside its share; source says where these come from."""

    minimum: Decimal
    card_gib: Decimal
    context_gib: Decimal
    source: str = ""

    @property
    def inside_gib(self) -> Decimal:
        return self.minimum * self.card_gib


@dataclass(frozen=True)
class ShardedMemory:
    """A data-parallel job's GPU memory in parts (GiB, unsharded, per replica): parameters,
    gradients, optimizer state and activations. stage says what is split over the GPUs (ZeRO
    stages; FSDP full sharding is 3): 0 nothing, 1 the optimizer state, 2 and the gradients, 3 and
    the parameters; `degree` GPUs share each split part (None: every GPU of the plan)."""

    parameters_gib: Decimal
    gradients_gib: Decimal
    optimizer_gib: Decimal
    activations_gib: Decimal
    stage: int = 0
    degree: int | None = None
    source: str = ""


@dataclass(frozen=True)
class DataParallel:
    """Each job spans every GPU of the fleet. efficiency {(GPUs, nodes): efficiency} measured
    (source says where) wins; else the communication model: per step, compute (batch_per_gpu of
    samples_per_unit at the GPU's speed) + the ring allreduce of gradient_bytes over the offer's
    links (catalog/links.csv) not hidden by `overlap` (the share of compute it can overlap); where
    gradient_bytes is not given, intra_node_eff_per_doubling and inter_node_speedup_per_doubling
    (a rule of thumb). validated_global_batch: past batch_per_gpu x GPUs above it, plans carry a
    warning (comm_source says where the communication figures come from)."""

    efficiency: Mapping[tuple[int, int], Decimal] = field(default_factory=dict)
    source: str = ""
    gradient_bytes: int | None = None
    batch_per_gpu: int | None = None
    samples_per_unit: Decimal | None = None
    overlap: Decimal = Decimal(0)
    validated_global_batch: int | None = None
    comm_source: str = ""
    intra_node_eff_per_doubling: Decimal = Decimal("0.985")
    inter_node_speedup_per_doubling: Decimal = Decimal("1.5")
    memory: ShardedMemory | None = None  # the memory need per GPU follows from the GPUs sharing it
    # a script whose step waits on one input pipeline (report E, issue 42): the pipeline's seconds
    # per step (`input_step_s`, measured: it does not get faster with the GPU), the GPU's own
    # compute per unit on the reference GPU (`compute_seconds_per_unit`; seconds_per_unit is then
    # the measured one-GPU time, pipeline included) and whether every tower trains on the same
    # dequeued batch (`shared_batch`: a step takes batch_per_gpu distinct samples, whatever the GPUs)
    input_step_s: Decimal | None = None
    compute_seconds_per_unit: Decimal | None = None
    shared_batch: bool = False


@dataclass(frozen=True)
class Workload:
    """A batch of jobs and the measured facts about how they run.

    seconds_per_unit: one job alone on one `reference_gpu` (its timed work, start-up excluded
        where job_start_s is given).
    job_start_s: the fixed cost of starting one job (process start to first timed step, warm-up,
        exit), paid at every job start on a slot, whatever the GPU; job_start_source says where
        it comes from ("" = not measured, 0 counted).
    memory_gib: GPU memory one job needs (the smallest cap at which it runs at full speed where
        measured): fits and packing use it. memory_peak_gib: the uncapped peak, shown, never
        used for fits (an allocator takes what is free). memory_source: where memory_gib comes from.
    memory_fraction: the job runs in a fixed share of the card plus a context outside it
        (MemoryFraction); its need on a card then follows from the card (model.memory_need) and
        memory_gib is that need on the card the share was measured on.
    speed: measured speed per GPU key relative to the reference GPU (overrides the generic table).
    speed_kinds: the kind of a `speed` entry that is not a measurement of this workload (a
        calibration by `gpuplan run`); the others are measured.
    reference_speed: the reference GPU's figure in the generic table, when the table lacks it.
    max_speed: the job cannot go faster than this factor (small inputs that cannot fill a GPU).
    colocation_slowdown: G jobs on G GPUs of one machine -> factor >= 1 on each job's time;
        colocation_default applies for any G > 1 not listed.
    packing: k jobs per GPU (Packing); used where k > 1 fits.
    data_parallel: the data-parallel facts (DataParallel), or None: one job per GPU slot.
    feed_cpu_seconds_per_unit: CPU seconds the input pipeline spends per unit: a job runs no faster
        than its share of the machine's vCPUs (vCPUs / GPUs) feeds it (feed_source says where).
    feed_bytes_per_unit: input bytes the job reads per unit, from feed_reads_from ("network":
        object storage over the machine's sustained network bandwidth; "disk": its local disk's
        read rate): a job runs no faster than its share of that rate (rate / GPUs) feeds it.
    streams: real-time streams (unit "frame"; seconds_per_unit = seconds per frame alone): a GPU
        takes the most streams k whose per-frame time (alone time / efficiency(k)) keeps up.
    staging_s: data staging per machine that runs jobs; staging_jpy a one-off per such machine.
    setup_s: overrides the provider's setup minutes (a playbook measured for this workload).
    owned: names of owned offers the user already has (owned hardware may then be recommended).
    """

    name: str
    description: str
    jobs: tuple[Job, ...]
    unit: str
    seconds_per_unit: Decimal
    reference_gpu: str
    kind: str = "cnn-train"
    memory_gib: Decimal | None = None
    memory_peak_gib: Decimal | None = None
    memory_source: str = ""
    memory_fraction: MemoryFraction | None = None
    job_start_s: Decimal = Decimal(0)
    job_start_source: str = ""
    speed: Mapping[str, Decimal] = field(default_factory=dict)
    speed_kinds: Mapping[str, SpeedKind] = field(default_factory=dict)  # a speed's kind where not measured (calibrated)
    reference_speed: Decimal | None = None
    max_speed: Decimal | None = None
    colocation_slowdown: Mapping[int, Decimal] = field(default_factory=dict)
    colocation_default: Decimal = Decimal("1.10")
    colocation_source: str = "ESTIMATE (not measured for this workload)"
    packing: Packing = field(default_factory=lambda: Packing())
    data_parallel: DataParallel | None = None  # each job over every GPU of the fleet; None: one job per GPU slot
    streams: Streams | None = None
    feed_cpu_seconds_per_unit: Decimal | None = None  # CPU seconds to feed one unit (decode, augment); None: not limited
    feed_bytes_per_unit: Decimal | None = None  # input bytes read per unit; None: not limited by bytes
    feed_reads_from: str = "network"  # where those bytes come from: "network" (object storage) or "disk"
    feed_source: str = ""
    staging_s: int = 0
    staging_jpy: Decimal = Decimal(0)
    setup_s: int | None = None
    owned: tuple[str, ...] = ()
    source: str = ""
    assumptions: tuple[str, ...] = ()
    # how often a job saves its work (`checkpoint: {every: 10m}`): an interrupted spot machine's
    # items redo their work since the last one (market/spot_risk.py); None: from their start
    checkpoint_s: int | None = None
    checkpoint_path: str = ""  # where it saves them, for the run engine (the model does not read it)
    # the commands that run this workload's job (`command:`): only a batch of one of them may
    # calibrate its speed (measuring/calibration.py); empty: none named
    commands: tuple[str, ...] = ()

    def job_seconds(self, job: Job) -> Decimal:
        return job.units * self.seconds_per_unit

    @property
    def parallel(self) -> str:
        """"data" (each job over every GPU of the fleet) or "none" (one job per GPU slot)."""
        return "data" if self.data_parallel is not None else "none"


@dataclass(slots=True)  # not frozen: built by the thousand (JSON, plots), 5x cheaper so
class VmUse:
    """One machine of a plan and what it is billed for (seconds, before rounding unless billed_s)."""

    offer: Offer
    role: str  # "builder" (set up, captured, deleted), "worker", "builder+worker"
    setup_s: int
    capture_s: int  # billed capture time (0 where the machine is deallocated while captured)
    staging_s: int
    jobs_s: int  # its busiest slot's jobs, job starts included
    idle_s: int
    billed_s: int
    cost: Decimal  # billed_s x price, unrounded
    end_s: int  # when it is released, from the plan's start
    jobs: tuple[str, ...] = ()
    job_starts_s: Decimal = Decimal(0)  # of jobs_s, the fixed cost of the job starts on that slot


@dataclass(frozen=True, slots=True)
class Machines:
    """The machines of a plan that share an offer, a role and a start, in columns (a plan of
    20,000 jobs may hold thousands of machines: they are priced in bulk, and made into VmUse
    only when someone looks at them). Kind i is counts[i] machines alike: each busy jobs_s[i]
    seconds (job_starts_s[i] of them job starts), billed billed_s[i], idle idle_s[i] after its
    jobs; names[i] holds each one's job names (a tuple per machine). Empty job_starts_s,
    idle_s or names mean zeros / none. costs[i] is what one of them costs where its terms cap a
    day or a month (cost is then not billed seconds x rate); empty: billed_s[i] x rate."""

    offer: Offer
    role: str  # "builder" (set up, captured, deleted), "worker", "builder+worker"
    start_s: int  # when they start, from the plan's start
    setup_s: int
    capture_s: int  # billed capture time
    staging_s: int
    terms: Terms  # how each is billed (market/billing.py)
    counts: Sequence[int]
    jobs_s: Sequence[int]
    billed_s: Sequence[int]
    idle_s: Sequence[int] = ()
    job_starts_s: Sequence[Decimal] = ()
    names: Sequence[tuple[tuple[str, ...], ...]] = ()
    costs: Sequence[Decimal] = ()
    task_s: Sequence[int] = ()  # a queue of container tasks (DOK): each job's seconds, billed one by one

    @property
    def rate(self) -> tuple[Decimal, int]:
        """Yen per so many billed seconds (before any cap)."""
        return self.terms.price_jpy, max(1, self.terms.period_s)

    def cost_of(self, i: int) -> Decimal:
        """What one machine of kind i costs (exact Decimal)."""
        if self.costs:
            return self.costs[i]
        yen, per = self.rate
        return self.billed_s[i] * yen / per

    def each(self) -> list[VmUse]:
        """Every machine on its own, in order."""
        out = []
        head = self.setup_s + self.capture_s + self.staging_s
        for i, n in enumerate(self.counts):
            jobs, billed = self.jobs_s[i], self.billed_s[i]
            idle = self.idle_s[i] if self.idle_s else 0
            starts = self.job_starts_s[i] if self.job_starts_s else Decimal(0)
            names = self.names[i] if self.names else ()
            cost = self.cost_of(i)
            for k in range(n):
                out.append(VmUse(self.offer, self.role, self.setup_s, self.capture_s, self.staging_s, jobs, idle,
                                 billed, cost, self.start_s + head + jobs + idle,
                                 names[k] if k < len(names) else (), starts))
        return out


@dataclass(frozen=True)
class Plan:
    """A fleet on one provider/region plus its schedule, setup mode, costs and explanation."""

    provider: str
    region: str
    fleet: tuple[tuple[Offer, int], ...]  # (offer, worker count), one or two offer types
    setup: str  # "scratch" | "image"
    per_gpu: int  # k jobs packed on each GPU
    machines: tuple[Machines, ...]  # in machine order: the builder first
    wall_s: int
    billed_s: int
    cost: Decimal  # exact sum of VM costs and one-off items
    breakdown: Mapping[str, Decimal]  # setup, capture, staging, jobs, job_starts, idle_tail, rounding, one_off: sums to cost
    feasible: bool
    excluded_by: tuple[Outcome, ...] = ()  # why excluded (infeasible); empty where feasible
    warned_by: tuple[Outcome, ...] = ()
    assumptions: tuple[str, ...] = ()
    optimal: bool = True  # the schedule is proven optimal (makespan)
    peak_vcpus: int = 0
    recommendable: bool = True  # False for owned hardware the user did not say they own, spot without --spot
    note: str = ""  # e.g. owned hardware's purchase price and break-even
    speeds: tuple[SpeedEvidence, ...] = ()  # per GPU of the fleet: its speed, kind and band (evidence.py)
    # a spot plan's expected interruptions (market/spot_risk.py): their point is in cost
    # (breakdown "interruptions") and wall_s; None for a plan with no spot machine
    risk: Risk | None = None

    @property
    def reason(self) -> str:
        """Why excluded, in words ("" where feasible): for people only, never for a decision."""
        return outcomes.sentences(self.excluded_by)

    @property
    def warnings(self) -> tuple[str, ...]:
        """The warnings in words: for people only."""
        return tuple(outcomes.render(o) for o in self.warned_by)

    @cached_property
    def vms(self) -> tuple[VmUse, ...]:
        """Every machine on its own, in order (built when asked: the recommendation, JSON, a plot)."""
        return tuple(vm for group in self.machines for vm in group.each())

    @property
    def machine_count(self) -> int:
        """Machines started, the image builder included."""
        return sum(sum(g.counts) for g in self.machines)

    @property
    def cost_jpy(self) -> int:
        from decimal import ROUND_HALF_UP

        return int(self.cost.quantize(Decimal(1), rounding=ROUND_HALF_UP))

    @property
    def count(self) -> int:
        return sum(n for _, n in self.fleet)

    @property
    def label(self) -> str:
        return " + ".join(f"{n}x {o.name}" + (" (spot)" if o.market == "spot" else "") for o, n in self.fleet)


@dataclass(frozen=True)
class Estimate:
    """Everything `gpuplan estimate` shows: every candidate, the frontier and the pick."""

    snapshot: str
    workload: Workload
    plans: tuple[Plan, ...]
    pareto: tuple[Plan, ...]
    recommended: Plan | None
    reason: str  # one line: why the recommendation won (or why nothing is feasible)
    assumptions: tuple[str, ...] = ()
    solver_seconds: float = 0.0
    proven: bool = True  # no schedule of any candidate fleet beats the recommendation by more than the gap
    gap: Decimal | int = 0  # at most this much better is possible: yen (objective cost) or seconds (time)
    extra: Mapping[str, str] = field(default_factory=dict)
    faster: str = ""  # one line: a plan that finishes sooner for a little more than the pick ("" where none)
    named: tuple[Plan, ...] = ()  # the plans the reason names (the cheapest, the ties it lists)
    ranked_on: str = "cost"  # the figure the pick was ranked on first: "cost", or "time" (--objective time, --budget)
    deadline_s: int | None = None  # --deadline, where given
    strict: bool = False  # --strict: the deadline judged on each plan's wall range's slow end
    tax: str = "as-listed"  # the basis every yen is on: "included", "excluded" (market/tax.py), or as each row lists it
