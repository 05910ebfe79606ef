"""`gpuplan run`: fan jobs out over every GPU slot of a cluster, or launch one data-parallel job.

Item mode: one job per item, a queue shared by all slots (node x GPU x --per-gpu), each job run
over SSH as `CUDA_VISIBLE_DEVICES=<gpu> CMD` with its output in a log on the node, fetched back to
`<state_dir>/runs/<cluster>/<job>.log`. A failed job goes back on the queue until it has had
1 + retries attempts. A node that is the problem (host key refused, unreachable, or failing
every job at once while they succeed elsewhere) is quarantined: its slots stop, and attempts
that failed there do not count against a job's retries (`run_items`). Every job's outcome is
recorded with `State.record_run`.

torchrun mode: the same command on every node through `python -m torch.distributed.run` (the
engine behind `torchrun`) with a static rendezvous on the first node's private address, node
ranks 0..N-1 and one process per GPU.

At the end: measured wall time and yen (nodes x the cluster's price x wall time), next to what a
saved plan predicted.
"""

from __future__ import annotations

import json
import queue
import re
import shlex
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuplan.errors import GpuplanError, NotFound, UsageError

if TYPE_CHECKING:
    from gpuplan.operating.state import State

REMOTE_LOG_DIR = ".gpuplan/runs"  # relative to the SSH user's home on each node
MAX_JOBS = 100_000  # one run: a log file per job in one folder and a state row per job
MAX_PER_GPU = 16  # jobs sharing one GPU, each with a fixed 1/k memory share: past 16 a share is under 1 GiB of 16
MAX_SLOTS_PER_NODE = 64  # `bench --gpus`: no machine in the catalog has more than 16 GPUs
MAX_RETRIES = 100  # a job failing for good is retried at most this often, never for ever
MAX_ITEMS_BYTES = 64 * 2**20  # 100,000 items of a long path each


class JobsFailed(GpuplanError):
    """Some jobs failed after all their attempts (exit code 5: the run happened, the work did not)."""

    exit_code = 5


@dataclass(frozen=True)
class Target:
    """One node of a cluster, reachable over SSH."""

    node: str
    host: Any  # gpuplan.operating.remote.Host
    private_ip: str
    gpus: int


@dataclass(frozen=True)
class Slot:
    target: int  # index into the targets
    gpu: int | None  # None on a CPU-only node: no CUDA_VISIBLE_DEVICES
    k: int  # which of --per-gpu sharing that GPU

    def label(self, targets: Sequence[Target]) -> str:
        node = targets[self.target].node
        return f"{node}:{'cpu' if self.gpu is None else self.gpu}" + (f"/{self.k}" if self.k else "")


@dataclass(frozen=True)
class JobResult:
    job: str
    item: str
    slot: str
    node: str
    status: str  # ok | failed
    attempts: int  # every attempt, including ones that did not count against --retries
    seconds: float  # the last attempt
    log_path: Path


@dataclass(frozen=True)
class Quarantine:
    """A node taken out of a run's slot pool, and why (one line)."""

    node: str
    reason: str


@dataclass(frozen=True)
class RunSummary:
    cluster: str
    jobs: tuple[JobResult, ...]
    wall_seconds: float
    nodes: int  # every node of the cluster: quarantined ones are billed too
    price_jpy_per_hour: Decimal | None
    log_dir: Path
    quarantined: tuple[Quarantine, ...] = ()

    @property
    def failed(self) -> list[JobResult]:
        return [j for j in self.jobs if j.status != "ok"]

    @property
    def yen(self) -> Decimal | None:
        """Every node billed for the run's wall time at the cluster's hourly price."""
        if self.price_jpy_per_hour is None:
            return None
        return self.price_jpy_per_hour * self.nodes * Decimal(str(self.wall_seconds)) / 3600


# --- inputs --------------------------------------------------------------------------------


def read_items(path: Path) -> list[str]:
    """One item per line; blank lines and lines starting with # are skipped. At most MAX_JOBS."""
    from gpuplan.userfiles import read_text

    fix = "write one item (video, file, seed) per line"
    lines = read_text(path, "items file", fix, max_bytes=MAX_ITEMS_BYTES).splitlines()
    items = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]
    if not items:
        raise UsageError(f"items file {path} has no items; write one per line")
    if len(items) > MAX_JOBS:
        raise UsageError(f"items file {path} has {len(items):,} items; one run takes at most {MAX_JOBS:,}"
                         " (one log file and one state row each): split it into several runs")
    return items


def read_plan(path: Path) -> dict:
    """What a plan file from `gpuplan estimate --save` predicts for the part `gpuplan run` measures.

    A run starts on machines that are already set up, so the prediction it is compared with is
    the plan's jobs phase: wall = the longest machine's jobs_s; yen = each machine's cost times
    the share of its billed time spent on jobs and idle tail (setup, capture and staging left
    out). The whole plan's wall and yen are kept beside it. Returns {"wall_s", "yen", "basis",
    "plan_wall_s", "plan_yen"} with Decimal figures, and where the plan lists its machines, the
    "workload", "provider", "instance_type" and number of "jobs" it planned (for calibration)."""
    from gpuplan.userfiles import load_json, read_text

    text = read_text(path, "plan file", f"write one with `gpuplan estimate ... --save {path}`")
    try:
        data = load_json(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"plan file {path} is not valid JSON ({exc.msg}, line {exc.lineno}); write it with "
                         "`gpuplan estimate --save`") from None
    plan = data.get("recommended", data) if isinstance(data, dict) else None
    if not isinstance(plan, dict):
        raise UsageError(f"plan file {path}: expected a JSON object; write it with `gpuplan estimate --save`")
    try:
        wall = _figure(plan["wall_minutes"]) * 60 if plan.get("wall_minutes") is not None else None
        cost = plan.get("cost_exact_jpy", plan.get("cost_jpy"))
        yen = _figure(cost) if cost is not None else None
        machines = plan.get("machines") or []
        if not isinstance(machines, list) or not all(isinstance(m, dict) for m in machines):
            raise ValueError("machines must be a list of objects")
        if machines:
            jobs_wall = Decimal(max(int(_figure(m["jobs_s"])) for m in machines))
            jobs_yen = sum(
                (_figure(m["cost_jpy"]) * (int(_figure(m["jobs_s"])) + int(_figure(m.get("idle_tail_s") or 0)))
                 / int(_figure(m["billed_s"])) for m in machines if int(_figure(m["billed_s"])) > 0),
                Decimal(0),
            )
            return {"wall_s": jobs_wall, "yen": jobs_yen, "basis": "the plan's jobs phase (setup excluded)",
                    "plan_wall_s": wall, "plan_yen": yen, "workload": data.get("workload") or "",
                    "provider": plan.get("provider") or "", "instance_type": plan.get("instance_type") or "",
                    "jobs": sum(len(m.get("jobs") or ()) for m in machines)}
    except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
        why = f"{exc} is missing" if isinstance(exc, KeyError) else str(exc)
        raise UsageError(f"plan file {path}: unreadable figure ({why}); write it with `gpuplan estimate ... --save`") from None
    if wall is None or yen is None:
        raise UsageError(f"plan file {path} has no wall time or cost; write it with `gpuplan estimate ... --save`")
    return {"wall_s": wall, "yen": yen, "basis": "the whole plan", "plan_wall_s": wall, "plan_yen": yen}


def _figure(value) -> Decimal:
    """A plan's number: finite, not negative, at most 10^15 (yen or seconds)."""
    try:
        d = Decimal(str(value))
    except ArithmeticError:
        d = Decimal("NaN")
    if isinstance(value, bool) or not d.is_finite() or not 0 <= d <= 10**15:
        raise ValueError(f"{value!r} is not a number from 0 to 10^15")
    return d


def job_name(index: int, item: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(item).name or item).strip("_.")[:60]
    return f"{index:04d}-{slug or 'item'}"


def render(command: Sequence[str], item: str) -> str:
    """The shell command for one item: each word shell-quoted after {item} is substituted."""
    return shlex.join([word.replace("{item}", item) for word in command])


def torchrun_argv(python: str, *, nodes: int, nproc_per_node: int, node_rank: int, master_addr: str,
                  master_port: int, program: Sequence[str]) -> list[str]:
    """`python -m torch.distributed.run` (torchrun) with a static rendezvous on master_addr."""
    return [python, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--nproc-per-node", str(nproc_per_node),
            "--node-rank", str(node_rank), "--master-addr", master_addr, "--master-port", str(master_port), *program]


def torchrun_program(command: Sequence[str]) -> list[str]:
    """What torchrun runs: `python -m mod ...` -> `-m mod ...`, `python x.py` -> `x.py`,
    anything else -> `--no-python cmd ...`."""
    cmd = list(command)
    if not cmd:
        raise UsageError("give the command after --")
    head = Path(cmd[0]).name
    if head in ("torchrun",) or cmd[:3] == [cmd[0], "-m", "torch.distributed.run"]:
        raise UsageError("give the training command itself after --; gpuplan adds torchrun and its rendezvous")
    if re.fullmatch(r"python(\d(\.\d+)?)?", head):
        rest = cmd[1:]
        if not rest:
            raise UsageError("the command runs python with nothing to run; add -m MODULE or a script")
        return rest
    return ["--no-python", *cmd]


# --- the cluster --------------------------------------------------------------------------


def cluster_targets(state: State, cluster: str) -> list[Target]:
    """The cluster's live nodes as SSH targets, each with its host key pinned in the state store."""
    from gpuplan.operating import remote

    nodes = {n.name: n for n in state.nodes(cluster)}
    return [Target(h.name, h, nodes[h.name].private_ip or h.address, nodes[h.name].gpus)
            for h in remote.cluster_hosts(state, cluster)]


def _ssh_run(target: Target, command: str, timeout: int):
    from gpuplan.operating import remote

    return remote.run(target.host, command, timeout=timeout)


def _ssh_get(target: Target, remote_path: str, local_path: Path) -> None:
    from gpuplan.operating import remote

    remote.get(target.host, remote_path, local_path)


def detect_gpus(targets: Sequence[Target], timeout: int = 60) -> list[int]:
    """GPUs per node: the state's count, or `nvidia-smi -L` where the state says 0."""
    counts = []
    for t in targets:
        if t.gpus > 0:
            counts.append(t.gpus)
            continue
        r = _ssh_run(t, "nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true", timeout)
        text = r.stdout.strip()
        counts.append(int(text) if text.isdigit() else 0)
    return counts


def make_slots(gpus_per_node: Sequence[int], per_gpu: int) -> list[Slot]:
    """Round-robin over nodes first, so a short queue spreads over machines, not one machine's GPUs."""
    per_node = [[Slot(t, g, k) for k in range(per_gpu) for g in (range(n) if n else [None])]
                for t, n in enumerate(gpus_per_node)]
    slots: list[Slot] = []
    for i in range(max(len(s) for s in per_node)):
        slots += [s[i] for s in per_node if i < len(s)]
    return slots


# --- item mode ----------------------------------------------------------------------------

FAST_FAILURE_S = 10.0  # a failed attempt shorter than this did no real work (a job that cannot start)
UNREACHABLE_IN_A_ROW = 2  # failed connections (each already tried 4 times by remote.connect) before a node is out


def _ssh_failure(exc: BaseException) -> str:
    """Why an attempt could not start its job, as the start of a quarantine reason."""
    from gpuplan.operating.remote import HostKeyChanged, LoginRefused

    kind = ("host key refused" if isinstance(exc, HostKeyChanged) else "login refused" if isinstance(exc, LoginRefused)
            else "unreachable")
    return f"{kind}: {exc}"


class _Pool:
    """Which nodes of one run may still take jobs. Not thread-safe: the run calls it under its lock.

    A node leaves the pool (is quarantined) when its host key is refused or it refuses our
    login (at once: neither mends itself during a run), when it cannot be reached
    UNREACHABLE_IN_A_ROW times in a row, or when its latest failures are two different jobs
    that each failed in under FAST_FAILURE_S and in under half the time of the shortest job
    that succeeded on another node (the command's own time, the SSH connection left out): the
    jobs work elsewhere and die at once there. Jobs that fail slowly, or fail everywhere, are
    the jobs' own failures and quarantine nothing.
    """

    def __init__(self, nodes: Sequence[str]) -> None:
        self.nodes = list(nodes)
        self.out: dict[str, str] = {}  # quarantined node -> why, in the order they left
        self._unreachable = dict.fromkeys(self.nodes, 0)
        self._fast_failures: dict[str, list[tuple[str, float, int]]] = {n: [] for n in self.nodes}  # job, s, exit
        self._shortest_ok: dict[str, float] = {}

    def live(self, node: str) -> bool:
        return node not in self.out

    def quarantine(self, node: str, reason: str) -> list[str]:
        if node in self.out:
            return []
        self.out[node] = reason
        return [node]

    def could_not_start(self, node: str, exc: BaseException) -> list[str]:
        """An attempt that never started its job on `node`. Returns the nodes that left the pool."""
        from gpuplan.operating.remote import HostKeyChanged, LoginRefused

        self._unreachable[node] += 1
        if isinstance(exc, (HostKeyChanged, LoginRefused)) or self._unreachable[node] >= UNREACHABLE_IN_A_ROW:
            return self.quarantine(node, _ssh_failure(exc))
        return []

    def failed(self, node: str, job: str, seconds: float, code: int) -> list[str]:
        self._unreachable[node] = 0
        if seconds < FAST_FAILURE_S:
            self._fast_failures[node].append((job, seconds, code))
        else:
            self._fast_failures[node] = []
        return self._judge([node])

    def succeeded(self, node: str, seconds: float) -> list[str]:
        self._unreachable[node] = 0
        self._fast_failures[node] = []
        self._shortest_ok[node] = min(seconds, self._shortest_ok.get(node, seconds))
        return self._judge([n for n in self.nodes if n != node])

    def _judge(self, nodes: Sequence[str]) -> list[str]:
        left = []
        for node in nodes:
            failures = self._fast_failures[node]
            elsewhere = [(s, n) for n, s in self._shortest_ok.items() if n != node and self.live(n)]
            if not self.live(node) or len({job for job, _, _ in failures}) < 2 or not elsewhere:
                continue
            slowest = max(s for _, s, _ in failures)
            shortest, other = min(elsewhere)
            if 2 * slowest <= shortest:
                codes = ", ".join(sorted({str(c) for _, _, c in failures}))
                left += self.quarantine(node, f"{len(failures)} jobs in a row failed within {slowest:.1f} s (exit {codes})"
                                              f" while jobs take {shortest:.1f} s or more on {other}")
        return left


@dataclass
class _Job:
    """One item's job while the run lasts (changed only under the run's lock)."""

    name: str
    item: str
    failed_on: list[str] = field(default_factory=list)  # the node of each failed attempt that ran
    attempts: int = 0  # every attempt, counted against --retries or not
    last: tuple[str, str, float] = ("-", "-", 0.0)  # slot, node and seconds of the latest attempt
    done: str = ""  # "" while queued or running, then "ok" or "failed" (a failure may be re-opened)


def run_items(state: State, cluster: str, items: Sequence[str], command: Sequence[str], *, per_gpu: int = 1,
              retries: int = 0, timeout: int = 86400, progress: Callable[[str], None] = lambda _m: None,
              targets: Sequence[Target] | None = None) -> RunSummary:
    """Run one job per item over every slot; returns when every job succeeded or used its attempts.

    A node that fails in a way that is the node's fault (see `_Pool`) is quarantined: its slots
    take no more jobs. The rule for --retries: a failed attempt counts against a job's retries
    only while the node it failed on stays in the pool. An attempt that could not start its job
    (no connection) never counts; when a node is quarantined, its failures stop counting, and
    jobs that had used up their retries there go back on the queue for the healthy slots."""
    from gpuplan import paths

    if "{item}" not in " ".join(command):
        raise UsageError("the command has no {item}: write where each item goes, e.g. -- python train.py {item}")
    row = state.cluster(cluster)
    if row is None:
        raise NotFound(f"no cluster named {cluster!r}; see `gpuplan status`")
    targets = list(targets) if targets is not None else cluster_targets(state, cluster)
    pool = _Pool([t.node for t in targets])
    gpus = []
    for t in targets:
        try:
            gpus += detect_gpus([t])
        except Exception as exc:  # cannot even count its GPUs: nothing would run there either
            gpus.append(0)
            pool.quarantine(t.node, f"{_ssh_failure(exc)} (while counting its GPUs)")
            progress(f"{t.node} quarantined: {pool.out[t.node]}")
    slots = make_slots(gpus, per_gpu)
    log_dir = paths.state_dir() / "runs" / cluster
    log_dir.mkdir(parents=True, exist_ok=True)
    progress(f"{len(items)} job(s) over {len(slots)} slot(s) on {len(targets)} node(s)")

    jobs = [_Job(job_name(i, item), item) for i, item in enumerate(items)]
    work: queue.Queue = queue.Queue()
    for j in jobs:
        work.put(j)
    succeeded: dict[str, JobResult] = {}
    lock = threading.Lock()
    open_jobs = [len(jobs)]  # neither succeeded nor out of retries

    def counted(j: _Job) -> int:
        return sum(1 for node in j.failed_on if pool.live(node))

    def left(nodes: list[str]) -> None:
        """Under the lock: say why each node left, and re-open the jobs that used up their retries there."""
        for node in nodes:
            progress(f"{node} quarantined: {pool.out[node]}")
            for j in jobs:
                if j.done == "failed" and node in j.failed_on and counted(j) <= retries:
                    j.done = ""
                    open_jobs[0] += 1
                    work.put(j)
                    progress(f"{j.name} goes back on the queue: its failure on {node} does not count")

    def one_attempt(slot: Slot, job: str, item: str, attempt: int) -> tuple[int, float, float, str]:
        """Exit code, seconds in all (SSH connection included), seconds the command ran, log text."""
        t = targets[slot.target]
        remote_log = f"{REMOTE_LOG_DIR}/{cluster}/{job}.{attempt}.log"
        env = f"CUDA_VISIBLE_DEVICES={slot.gpu} " if slot.gpu is not None else ""
        if per_gpu > 1:  # the reference jobs take this as their fixed memory share (report C)
            env += f"GPUPLAN_MEMORY_FRACTION={1 / per_gpu:.6f} "
        cmd = (f"mkdir -p {REMOTE_LOG_DIR}/{cluster} && ( {env}GPUPLAN_ITEM={shlex.quote(item)}"
               f" GPUPLAN_JOB={job} {render(command, item)} ) > {remote_log} 2>&1")
        t0 = time.monotonic()
        r = _ssh_run(t, cmd, timeout)
        seconds = time.monotonic() - t0
        fetched = log_dir / f"{job}.{attempt}.part"
        try:
            _ssh_get(t, remote_log, fetched)
            text = fetched.read_text(errors="replace")
            fetched.unlink()
        except Exception as exc:  # the log is evidence, not the outcome: keep going without it
            text = f"(log not fetched: {type(exc).__name__}: {exc})\n{r.stderr}"
        return r.exit_code, seconds, r.seconds, text

    def attempt_and_record(slot: Slot, label: str, j: _Job, attempt: int) -> None:
        node = targets[slot.target].node
        started = _now()
        try:
            code, seconds, ran, text = one_attempt(slot, j.name, j.item, attempt)
            error = None
        except Exception as exc:  # no connection, host key refused: the job did not start
            code, seconds, ran, error = -1, 0.0, 0.0, exc
            text = f"(the job did not start: {type(exc).__name__}: {exc})\n"
        log_path = log_dir / f"{j.name}.log"
        with open(log_path, "a") as fh:
            fh.write(f"=== {j.name} attempt {attempt} on {label}: exit {code}, {seconds:.1f} s ===\n{text}")
            if not text.endswith("\n"):
                fh.write("\n")
        with lock:
            j.last = (label, node, seconds)
            if error is not None:
                gone = pool.could_not_start(node, error)
                work.put(j)
                progress(f"{j.name} did not start on {label} ({type(error).__name__}); back on the queue")
            elif code == 0:
                j.done = "ok"
                open_jobs[0] -= 1
                succeeded[j.name] = JobResult(j.name, j.item, label, node, "ok", attempt, seconds, log_path)
                gone = pool.succeeded(node, ran)
            else:
                j.failed_on.append(node)
                gone = pool.failed(node, j.name, ran, code)
                if counted(j) <= retries:
                    progress(f"{j.name} failed on {label} (exit {code}); retrying ({counted(j)}/{retries})")
                    work.put(j)
                else:
                    j.done = "failed"
                    open_jobs[0] -= 1
                    progress(f"{j.name} failed on {label} (exit {code})")
            left(gone)
        if code == 0 and error is None:
            state.record_run(cluster, j.name, node, label, "ok", attempt, seconds, str(log_path), started)
            progress(f"{j.name} ok on {label} in {seconds:.1f} s")

    def worker(slot: Slot) -> None:
        node, label = targets[slot.target].node, slot.label(targets)
        while True:
            with lock:
                if open_jobs[0] == 0 or not pool.live(node):
                    return
            try:
                j = work.get(timeout=0.2)
            except queue.Empty:
                continue
            with lock:
                if not pool.live(node):  # quarantined while this slot waited: leave the job to others
                    work.put(j)
                    return
                j.attempts += 1
                attempt = j.attempts
            try:
                attempt_and_record(slot, label, j, attempt)
            except Exception as exc:  # bookkeeping failed (disk full, state locked): never leave the queue hanging
                progress(f"{j.name}: could not record its outcome ({type(exc).__name__}: {exc})")
                with lock:
                    if j.done == "":
                        j.done = "failed"
                        open_jobs[0] -= 1

    names = {f"{j.name}.log" for j in jobs}
    for old in log_dir.glob("*.log"):
        if old.name in names:
            old.unlink()
    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, args=(s,), daemon=True) for s in slots]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.monotonic() - t0

    results = []
    for j in jobs:  # failures are final only now: a quarantine could still re-open them
        if j.name in succeeded:
            results.append(succeeded[j.name])
            continue
        log_path = log_dir / f"{j.name}.log"
        if j.attempts == 0:
            with open(log_path, "a") as fh:
                fh.write(f"=== {j.name} never ran: every node was quarantined ===\n")
        label, node, seconds = j.last
        results.append(JobResult(j.name, j.item, label, node, "failed", j.attempts, seconds, log_path))
        state.record_run(cluster, j.name, node, label, "failed", j.attempts, seconds, str(log_path), _now())
    quarantined = tuple(Quarantine(node, why) for node, why in pool.out.items())
    return RunSummary(cluster, tuple(results), wall, len(targets), row.price_jpy_per_hour, log_dir, quarantined)


# --- torchrun mode ------------------------------------------------------------------------


def run_torchrun(state: State, cluster: str, command: Sequence[str], *, python: str = "python3", master_port: int = 29500,
                 timeout: int = 86400, progress: Callable[[str], None] = lambda _m: None,
                 targets: Sequence[Target] | None = None) -> RunSummary:
    """One data-parallel job on every node at once; node 0's private address hosts the rendezvous."""
    from concurrent.futures import ThreadPoolExecutor

    from gpuplan import paths

    program = torchrun_program(command)
    row = state.cluster(cluster)
    if row is None:
        raise NotFound(f"no cluster named {cluster!r}; see `gpuplan status`")
    targets = list(targets) if targets is not None else cluster_targets(state, cluster)
    gpus = detect_gpus(targets)
    log_dir = paths.state_dir() / "runs" / cluster
    log_dir.mkdir(parents=True, exist_ok=True)
    master = targets[0].private_ip
    progress(f"torchrun over {len(targets)} node(s), rendezvous {master}:{master_port}")

    def node(rank: int) -> JobResult:
        t = targets[rank]
        argv = torchrun_argv(python, nodes=len(targets), nproc_per_node=max(1, gpus[rank]), node_rank=rank,
                             master_addr=master, master_port=master_port, program=program)
        job = f"torchrun-{t.node}"
        remote_log = f"{REMOTE_LOG_DIR}/{cluster}/{job}.log"
        started = _now()
        t0 = time.monotonic()
        try:
            r = _ssh_run(t, f"mkdir -p {REMOTE_LOG_DIR}/{cluster} && ( {shlex.join(argv)} ) > {remote_log} 2>&1", timeout)
            code, err = r.exit_code, r.stderr
        except Exception as exc:
            code, err = -1, f"{type(exc).__name__}: {exc}"
        seconds = time.monotonic() - t0
        log_path = log_dir / f"{job}.log"
        try:
            _ssh_get(t, remote_log, log_path)
        except Exception as exc:
            log_path.write_text(f"(log not fetched: {type(exc).__name__}: {exc})\n{err}")
        status = "ok" if code == 0 else "failed"
        label = f"{t.node}:rank{rank}"
        state.record_run(cluster, job, t.node, label, status, 1, seconds, str(log_path), started)
        progress(f"{job} {status} in {seconds:.1f} s")
        return JobResult(job, "", label, t.node, status, 1, seconds, log_path)

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(targets)) as pool:
        results = tuple(pool.map(node, range(len(targets))))
    wall = time.monotonic() - t0
    return RunSummary(cluster, results, wall, len(targets), row.price_jpy_per_hour, log_dir)


# --- measured vs predicted ----------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    measured_wall_s: float
    measured_yen: Decimal | None
    predicted_wall_s: Decimal | None
    predicted_yen: Decimal | None
    wall_error_pct: Decimal | None  # (measured - predicted) / predicted x 100
    yen_error_pct: Decimal | None


def calibrate(state: State, summary: RunSummary, predicted: dict | None) -> str:
    """Record the run as a calibration of the plan's workload when it ran the plan's whole batch
    without failures; `gpuplan estimate` then plans with the measured speed. Returns one line
    saying what was recorded, or why not."""
    if not predicted or not predicted.get("workload") or not predicted.get("jobs"):
        return ""
    if summary.failed:
        return "not recorded as a calibration: some jobs failed"
    if len(summary.jobs) != predicted["jobs"]:
        return (f"not recorded as a calibration: {len(summary.jobs)} job(s) ran, the plan has {predicted['jobs']}; "
                "run the plan's whole batch to calibrate it")
    state.record_calibration(predicted["workload"], predicted["provider"], predicted["instance_type"],
                             predicted["jobs"], float(predicted["wall_s"]), summary.wall_seconds, summary.cluster)
    return (f"calibration recorded: `gpuplan estimate --workload {predicted['workload']}` now plans "
            f"{predicted['instance_type']} with the measured speed")


def compare(summary: RunSummary, predicted: dict | None) -> Comparison:
    def err(measured: Decimal | None, pred: Decimal | None) -> Decimal | None:
        if measured is None or pred is None or pred == 0:
            return None
        return (measured - pred) / pred * 100

    wall = Decimal(str(summary.wall_seconds))
    pw = predicted["wall_s"] if predicted else None
    py = predicted["yen"] if predicted else None
    # Under a yen the prediction is all rounding: a percentage of it says nothing.
    yen_error = err(summary.yen, py) if py is not None and py >= 1 else None
    return Comparison(summary.wall_seconds, summary.yen, pw, py, err(wall, pw), yen_error)


def _now():
    from gpuplan.operating.state import now

    return now()

