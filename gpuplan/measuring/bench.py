"""`gpuplan bench`: measure a reference job and save it as a profile.

What is measured, each by starting the job's processes and reading their JSON lines:

1. alone: one job on GPU 0 -> seconds per unit, peak memory (uncapped), and the fixed cost of a
   job start = the process's wall time - its timed steps (interpreter, imports, CUDA context,
   model build, cuDNN autotuning, warm-up steps, exit); for a job with an input pipeline
   (vgg_cifar: CIFAR-10's records read from a file, crop, flip, normalise), the CPU seconds that
   pipeline spends per unit and the bytes it read per unit, run alone after the timed steps on
   one thread (the planner's feed limits read them);
   memory need: the smallest `--memory-fraction` cap at which the job still runs at full speed
   (within FULL_SPEED_TOLERANCE), found by bisection (GPU runs only: a CPU enforces no cap);
2. co-location: G jobs at once on a G-GPU machine, one per GPU (CUDA_VISIBLE_DEVICES=i) ->
   slowdown(G) = mean seconds per unit / alone;
3. packing: k jobs on GPU 0, each capped at 1/k of its memory -> whether all k started, and
   per-job efficiency(k) = alone / mean seconds per unit; stops at the first k that does not fit;
4. data-parallel scaling (jobs that support it): 1..G processes on one machine and 1..N machines
   through torchrun (NCCL on GPU, gloo on CPU), rendezvous on the first node's private address ->
   efficiency(N) = throughput / (N x throughput on one GPU).

Processes start through an `Executor`: `LocalExecutor` (this machine) or `ClusterExecutor`
(the cluster's nodes over SSH via gpuplan.hosts.remote). Nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from gpuplan.errors import GpuplanError, RemoteError, UsageError
from gpuplan.planning.profiles import Profile, Provenance, ScalingPoint, profiles_dir, save_profile

if TYPE_CHECKING:
    from gpuplan.store.state import State


@dataclass(frozen=True)
class JobSpec:
    module: str
    unit: str  # the profile's unit: the unit of the planner's built-in workload of the same job
    spu_key: str  # the JSON key holding seconds per job-reported unit
    data_parallel: bool
    quick_args: tuple[str, ...]
    full_args: tuple[str, ...] = ()
    extra_args: tuple[str, ...] = ()  # always passed
    per_unit: Decimal = Decimal(1)  # job-reported units in one profile unit (images per epoch)
    feed: bool = False  # the job can run its input pipeline alone (--measure-feed) and report its CPU need


IMAGENET_TRAIN_IMAGES = Decimal(1_281_167)  # ILSVRC2012 training set
CIFAR10_TRAIN_IMAGES = Decimal(50_000)

JOBS: dict[str, JobSpec] = {
    # epoch = the job's --steps steps of 3 HD frames (pass the same --steps to `gpuplan run`)
    "colorize": JobSpec("gpuplan.jobs.colorize", "epoch", "seconds_per_epoch", False,
                        ("--quick", "--steps", "2", "--warmup", "1"), ("--steps", "10", "--warmup", "2")),
    "resnet50": JobSpec("gpuplan.jobs.resnet50", "epoch", "seconds_per_unit", True,
                        ("--quick", "--steps", "2", "--warmup", "1"), ("--steps", "30", "--warmup", "5"),
                        per_unit=IMAGENET_TRAIN_IMAGES),
    "vgg_cifar": JobSpec("gpuplan.jobs.vgg_cifar", "epoch", "seconds_per_unit", True,
                         ("--quick", "--steps", "3", "--warmup", "1"), ("--steps", "50", "--warmup", "5"),
                         per_unit=CIFAR10_TRAIN_IMAGES, feed=True),
    "detect_streams": JobSpec("gpuplan.jobs.detect_streams", "frame", "seconds_per_unit", False,
                              ("--quick", "--steps", "3", "--warmup", "1"), ("--steps", "50", "--warmup", "5"),
                              ("--worker",)),
}

EXIT_NO_FIT = 3  # gpuplan.jobs._common.EXIT_NO_FIT, repeated to keep torch out of this import
FULL_SPEED_TOLERANCE = Decimal("0.05")  # capped runs within 5 % of alone count as full speed (run-to-run noise is ~3 %)
MEMORY_SEARCH_STEPS = 7  # bisection steps: 1/128 of the GPU's memory at most (0.6 GiB of 80 GiB)


@dataclass(frozen=True)
class Launch:
    """One process to start: on `node` (index into the executor's nodes), with extra env."""

    argv: tuple[str, ...]
    node: int = 0
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    stdout: str
    stderr: str
    seconds: float | None = None  # the process's wall time as the executor saw it (start to exit)

    def record(self) -> dict | None:
        """The job's JSON line (the last line that parses), or None."""
        for line in reversed(self.stdout.strip().splitlines()):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
        return None


@dataclass(frozen=True)
class Machine:
    """What the executor reports about its first node."""

    gpus: int  # GPUs on each node (0 = CPU only)
    gpu_name: str  # "NVIDIA H100 80GB HBM3" or "cpu"
    gpu_memory_mib: int | None
    driver: str
    host: str


class Executor:
    """Starts processes on nodes, all of a batch at once, and waits for them."""

    python: str = sys.executable
    nodes: int = 1

    def run_all(self, launches: Sequence[Launch], timeout: int) -> list[Outcome]:
        raise NotImplementedError

    def machine(self) -> Machine:
        raise NotImplementedError

    def private_address(self, node: int) -> str:
        raise NotImplementedError

    def remove_dirs(self, dirs: Sequence[str]) -> None:
        """Remove scratch folders this bench made on the first node."""


class LocalExecutor(Executor):
    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable
        self.nodes = 1

    def run_all(self, launches: Sequence[Launch], timeout: int) -> list[Outcome]:
        """Start every launch at once; each outcome's seconds run from the batch's start to when
        that process was collected (exact for a batch of one, an upper bound otherwise)."""
        import time

        procs = []
        started = time.monotonic()
        for launch in launches:
            env = {**os.environ, **dict(launch.env)}
            procs.append(subprocess.Popen(list(launch.argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, env=env))
        outcomes = []
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                err += f"\ntimed out after {timeout} s"
            outcomes.append(Outcome(proc.returncode, out, err, time.monotonic() - started))
        return outcomes

    def machine(self) -> Machine:
        smi = shutil.which("nvidia-smi")
        if smi:
            proc = subprocess.run([smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"],
                                  capture_output=True, text=True)
            parsed = parse_nvidia_smi(proc.stdout) if proc.returncode == 0 else None
            if parsed:
                return Machine(len(parsed), parsed[0][0], parsed[0][1], parsed[0][2], platform.node())
        return Machine(0, "cpu", None, "", platform.node())

    def private_address(self, node: int) -> str:
        return "127.0.0.1"

    def remove_dirs(self, dirs: Sequence[str]) -> None:
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


# Where a node keeps what the reference jobs need when no --python is given: the client's own
# gpuplan/jobs code (the jobs run from this folder: `python -m gpuplan.jobs.X` finds them in the
# working directory) and a venv that sees the system's packages, with torch from the package index
# where the system Python has none. A fresh cloud machine has a driver and CUDA after bootstrap,
# not torch (SkyPilot's `setup:` installs it the same way, per task).
BENCH_HOME = ".gpuplan/bench"


def bench_env_command(find_links: str | None = None) -> str:
    """The shell command that makes a node's bench venv (idempotent; torch installed only where the
    venv cannot import it). `find_links`: a folder of wheels on the node (offline install)."""
    venv = f"$HOME/{BENCH_HOME}/venv"
    index = f"--no-index --find-links {shlex.quote(find_links)}" if find_links else ""
    return (f'mkdir -p "$HOME/{BENCH_HOME}/src" && {{ [ -x "{venv}/bin/python" ] || python3 -m venv --system-site-packages'
            f' "{venv}"; }} && {{ "{venv}/bin/python" -c "import torch" 2>/dev/null || "{venv}/bin/pip" install -q'
            f' {index} torch; }} && "{venv}/bin/python" -c "import torch; print(torch.__version__)"')


class ClusterExecutor(Executor):
    """The nodes of a cluster in the state store, reached over SSH with pinned host keys."""

    def __init__(self, state: State, cluster: str, python: str = "python3", workdir: str | None = None) -> None:
        from gpuplan.run.ray import runner

        self.state = state
        self.cluster = cluster
        self.python = python
        self.workdir = workdir
        self.targets = runner.cluster_targets(state, cluster)
        self.nodes = len(self.targets)

    def prepare(self, find_links: str | None = None, timeout: int = 1800) -> str:
        """Give every node the reference jobs' code and a Python with torch (BENCH_HOME), and run
        the jobs with them from now on; returns the torch version the first node reports. For a
        node whose Python already has gpuplan[bench], give --python instead."""
        import gpuplan.jobs
        from gpuplan.hosts import remote

        code = Path(gpuplan.jobs.__file__).parent
        files = [code.parent / "__init__.py", *sorted(code.glob("*.py"))]

        def one(host) -> tuple[str, str]:
            with remote.connect(host) as conn:  # one login per node
                r = conn.run(bench_env_command(find_links), timeout=timeout)
                if r.exit_code != 0:
                    raise RemoteError(f"{host.name}: could not make the bench's Python with torch (exit {r.exit_code}):"
                                      f" {(r.stderr or r.stdout).strip()[-300:]}")
                home = conn.run('mkdir -p "$HOME/' + BENCH_HOME + '/src/gpuplan/jobs" && printf %s "$HOME"',
                                timeout=60).stdout.strip()
                for f in files:
                    conn.put(f, f"{home}/{BENCH_HOME}/src/{f.relative_to(code.parent.parent)}")
            return (r.stdout.strip().splitlines() or [""])[-1], home

        results = remote.run_many([t.host for t in self.targets], one)
        for r in results:
            if isinstance(r, BaseException):
                raise r if isinstance(r, GpuplanError) else RemoteError(f"bench environment: {type(r).__name__}: {r}")
        version, home = results[0]  # type: ignore[misc]
        # a cluster's nodes share the user gpuplan logs in as, so node 0's home is every node's
        self.python = f"{home}/{BENCH_HOME}/venv/bin/python"
        self.workdir = f"{home}/{BENCH_HOME}/src"
        return str(version)

    def _command(self, launch: Launch) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in launch.env)
        cmd = (f"env {env} " if env else "") + shlex.join(launch.argv)
        return f"cd {shlex.quote(self.workdir)} && {cmd}" if self.workdir else cmd

    def run_all(self, launches: Sequence[Launch], timeout: int) -> list[Outcome]:
        from gpuplan.hosts import remote

        # run_many takes one function per host; a launch index stands in for the host here
        results = remote.run_many(
            list(range(len(launches))),
            lambda i: remote.run(self.targets[launches[i].node].host, self._command(launches[i]), timeout=timeout),
        )
        return [r if isinstance(r, Outcome) else
                Outcome(-1, "", f"{type(r).__name__}: {r}") if isinstance(r, BaseException) else
                Outcome(r.exit_code, r.stdout, r.stderr, r.seconds) for r in results]

    def machine(self) -> Machine:
        from gpuplan.hosts import remote

        target = self.targets[0]
        r = remote.run(target.host, "nvidia-smi --query-gpu=name,memory.total,driver_version"
                       " --format=csv,noheader,nounits 2>/dev/null || true", timeout=60)
        parsed = parse_nvidia_smi(r.stdout)
        if parsed:
            return Machine(len(parsed), parsed[0][0], parsed[0][1], parsed[0][2], target.node)
        return Machine(target.gpus, "cpu" if target.gpus == 0 else "unknown GPU", None, "", target.node)

    def private_address(self, node: int) -> str:
        return self.targets[node].private_ip

    def remove_dirs(self, dirs: Sequence[str]) -> None:
        from gpuplan.hosts import remote

        if dirs:
            remote.run(self.targets[0].host, "rm -rf " + " ".join(shlex.quote(d) for d in dirs), timeout=60)


def parse_nvidia_smi(text: str) -> list[tuple[str, int | None, str]]:
    """Rows of `--query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits`."""
    rows = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0]:
            mem = int(parts[1]) if parts[1].isdigit() else None
            rows.append((parts[0], mem, parts[2]))
    return rows


# nvidia-smi names -> catalog/gpus.csv keys; first match wins, so specific patterns come first.
_GPU_KEYS = (
    (r"H200", "H200"), (r"H100.*NVL", "H100 NVL"), (r"H100.*PCIe", "H100 PCIe"), (r"H100", "H100 SXM"),
    (r"A100.*80", "A100 80GB"), (r"A100", "A100 40GB"), (r"A10G", "A10G"), (r"A10\b", "A10"),
    (r"L40S", "L40S"), (r"\bL4\b", "L4"), (r"T4\b", "T4"), (r"V100", "V100"), (r"P100", "P100"), (r"P40", "P40"),
    (r"K80", "K80"), (r"M60", "M60"), (r"1080 Ti", "GTX 1080 Ti"), (r"TITAN X \(Pascal\)|TITAN Xp", "TITAN X (Pascal)"),
)


def catalog_gpu_key(smi_name: str) -> str:
    """The catalog's GPU key for a driver's GPU name; the name itself when none matches."""
    if smi_name == "cpu":
        return "cpu"
    for pattern, key in _GPU_KEYS:
        if re.search(pattern, smi_name):
            return key
    return smi_name


@dataclass
class BenchOptions:
    workload: str
    quick: bool = False
    gpus: int | None = None  # override: slots per node (CPU runs: processes standing in for GPUs)
    max_pack: int = 4
    timeout: int = 1800
    job_args: tuple[str, ...] = ()  # extra arguments for the job (shapes, steps)
    command: str = ""  # the command line, for provenance
    progress: Callable[[str], None] = field(default=lambda _msg: None)


def measure(opts: BenchOptions, executor: Executor) -> Profile:
    """Run the measurements and return the profile (not yet saved)."""
    spec = JOBS.get(opts.workload)
    if spec is None:
        raise UsageError(f"unknown workload {opts.workload!r}: choose one of {', '.join(sorted(JOBS))}")
    machine = executor.machine()
    cpu = machine.gpus == 0
    if cpu and not opts.quick:
        raise UsageError("no GPU found (nvidia-smi): on a CPU-only machine run `gpuplan bench ... --quick`,"
                         " which measures tiny shapes with --device cpu")
    slots = opts.gpus or (min(2, os.cpu_count() or 1) if cpu else machine.gpus)
    base = [*spec.extra_args, *(spec.quick_args if opts.quick else spec.full_args), "--json", *opts.job_args]
    if cpu:
        base += ["--device", "cpu", "--threads", "1"]

    def job(*extra: str) -> tuple[str, ...]:
        return (executor.python, "-m", spec.module, *base, *extra)

    def gpu_env(i: int, together: str = "") -> tuple[tuple[str, str], ...]:
        env = () if cpu else (("CUDA_VISIBLE_DEVICES", str(i)),)
        return env + ((("GPUPLAN_START_BARRIER", together),) if together else ())

    barriers: list[str] = []

    def together(n: int) -> str:
        barriers.append(f"/tmp/gpuplan-bench-{uuid.uuid4().hex[:12]}")
        return f"{barriers[-1]}:{n}"

    def records(launches: list[Launch], what: str, allow_no_fit: bool = False, rank0_only: bool = False,
                ) -> list[dict] | None:
        return records_of(executor.run_all(launches, opts.timeout), what, allow_no_fit, rank0_only)

    def records_of(outs: list[Outcome], what: str, allow_no_fit: bool = False, rank0_only: bool = False,
                   ) -> list[dict] | None:
        if allow_no_fit and any(o.exit_code == EXIT_NO_FIT for o in outs):
            return None
        recs = []
        for i, o in enumerate(outs):
            rec = o.record()
            if rank0_only and i > 0 and o.exit_code == 0:
                continue  # under torchrun only rank 0 (on node 0) prints the record
            if o.exit_code != 0 or rec is None or rec.get("status") != "ok":
                last = (o.stderr.strip().splitlines() or o.stdout.strip().splitlines() or ["no output"])[-1]
                raise RemoteError(f"bench {opts.workload}: {what} failed (exit {o.exit_code}): {last[:300]}")
            recs.append(rec)
        return recs

    def spu(recs: list[dict]) -> Decimal:
        return sum(Decimal(str(r[spec.spu_key])) for r in recs) / len(recs)

    opts.progress(f"alone: 1 job on {'a CPU' if cpu else 'GPU 0'}" + (", then its input pipeline alone" if spec.feed else ""))
    alone_out = executor.run_all([Launch(job(*(("--measure-feed",) if spec.feed else ())), 0, gpu_env(0))],
                                 opts.timeout)[0]
    alone_rec = records_of([alone_out], "the job alone")[0]
    alone = spu([alone_rec])
    fixed = _fixed_seconds(alone_out, alone_rec)
    feed_cpu = alone_rec.get("feed_cpu_seconds_per_image")
    feed_need = Decimal(str(feed_cpu)) * spec.per_unit if feed_cpu else None
    feed_bytes = alone_rec.get("feed_bytes_per_image")  # what the pipeline read, counted as it read
    feed_read = Decimal(str(feed_bytes)) * spec.per_unit if feed_bytes and feed_need is not None else None

    need_fraction = None
    if not cpu and machine.gpu_memory_mib:
        def full_speed_at(fraction: Decimal) -> bool:
            out = executor.run_all([Launch(job("--memory-fraction", f"{fraction:.6f}"), 0, gpu_env(0))], opts.timeout)[0]
            rec = out.record()
            ok = out.exit_code == 0 and rec is not None and rec.get("status") == "ok"
            return ok and spu([rec]) <= alone * (1 + FULL_SPEED_TOLERANCE)

        need_fraction = memory_need(full_speed_at, lambda f: opts.progress(
            f"memory need: 1 job capped at {f:.4f} of GPU 0's memory"))

    slowdown = {1: Decimal(1)}
    for g in _points(slots):
        opts.progress(f"co-location: {g} jobs at once, one per {'process' if cpu else 'GPU'}")
        barrier = together(g)
        recs = records([Launch(job(), 0, gpu_env(i, barrier)) for i in range(g)], f"{g} co-located jobs")
        slowdown[g] = _ratio(spu(recs) / alone)

    efficiency, fits = {1: Decimal(1)}, {1: True}
    for k in range(2, opts.max_pack + 1):
        opts.progress(f"packing: {k} jobs on one {'CPU' if cpu else 'GPU'}, {1 / k:.3g} of its memory each")
        barrier = together(k)
        recs = records([Launch(job("--memory-fraction", f"{1 / k:.6f}"), 0, gpu_env(0, barrier)) for _ in range(k)],
                       f"{k} packed jobs", allow_no_fit=True)
        if recs is None:
            fits[k] = False
            break
        fits[k] = True
        efficiency[k] = _ratio(alone / spu(recs))

    scaling: list[ScalingPoint] = []
    if spec.data_parallel:
        from gpuplan.run.ray.runner import torchrun_argv

        thr1 = Decimal(str(alone_rec["throughput"]))
        layouts = [(1, n) for n in _points(slots)] + [(m, slots) for m in range(2, executor.nodes + 1)]
        port = 29500 + (os.getpid() % 1000)
        scaling.append(ScalingPoint(1, 1, Decimal(1), thr1))
        for nodes, per_node in layouts:
            opts.progress(f"data-parallel: {nodes} node(s) x {per_node} process(es)")
            master = executor.private_address(0)
            launches = [
                Launch(tuple(torchrun_argv(executor.python, nodes=nodes, nproc_per_node=per_node, node_rank=r,
                                           master_addr=master, master_port=port,
                                           program=("-m", spec.module, *base))), r)
                for r in range(nodes)
            ]
            port += 1
            recs = records(launches, f"data-parallel over {nodes}x{per_node}", rank0_only=True)
            rank0 = recs[0]
            thr = Decimal(str(rank0["throughput"]))
            n = nodes * per_node
            scaling.append(ScalingPoint(n, nodes, _ratio(thr / (n * thr1)), thr))

    executor.remove_dirs(barriers)
    mem = alone_rec.get("peak_memory_bytes") if alone_rec.get("memory_source") == "cuda" else None
    gpu_mem = (Decimal(machine.gpu_memory_mib) / 1024) if machine.gpu_memory_mib else None
    notes = []
    if cpu:
        notes.append(f"CPU run with tiny shapes (--quick --device cpu); {slots} processes stand in for GPUs;"
                     " memory shares are not enforced on a CPU, so the memory need is not measured")
    if fixed is None:
        notes.append("fixed cost per job not measured: the executor gave no process wall time")
    if feed_need is None:
        notes.append("CPU need to feed not measured: this job has no input pipeline of its own (synthetic batches)")
    provenance = Provenance(
        source="gpuplan bench",
        date=date.today().isoformat(),
        host=machine.host,
        gpu=machine.gpu_name,
        driver=machine.driver,
        cuda=str(alone_rec.get("cuda") or ""),
        torch=str(alone_rec.get("torch") or ""),
        command=opts.command,
        device="cpu" if cpu else "cuda",
        quick=opts.quick,
        notes="; ".join(notes),
    )
    return Profile(
        workload=opts.workload,
        unit=spec.unit,
        reference_gpu=catalog_gpu_key(machine.gpu_name),
        seconds_per_unit=alone * spec.per_unit,
        provenance=provenance,
        memory_peak_gib=(Decimal(mem) / 2**30) if mem else None,
        gpu_memory_gib=gpu_mem,
        memory_need_gib=(need_fraction * gpu_mem) if need_fraction is not None and gpu_mem else None,
        memory_need_fraction=need_fraction,
        fixed_seconds_per_job=fixed,
        colocation_slowdown=slowdown,
        packing_efficiency=efficiency,
        packing_fits=fits,
        dp_scaling=tuple(scaling),
        feed_cpu_seconds_per_unit=feed_need,
        feed_how=str(alone_rec.get("feed") or "") if feed_need is not None else "",
        feed_bytes_per_unit=feed_read,
    )


def _fixed_seconds(out: Outcome, rec: dict) -> Decimal | None:
    """A job start's fixed cost: the process's wall time minus its timed steps (never below 0)."""
    if out.seconds is None or rec.get("seconds") is None:
        return None
    wall, timed = Decimal(str(round(out.seconds, 3))), Decimal(str(round(float(rec["seconds"]), 3)))
    return max(wall - timed, Decimal(0))


def memory_need(full_speed_at: Callable[[Decimal], bool], progress: Callable[[Decimal], None] = lambda f: None,
                steps: int = MEMORY_SEARCH_STEPS) -> Decimal:
    """The smallest memory fraction (to 1/2**steps) at which the job runs at full speed, by
    bisection: the whole GPU is known to; a cap the job does not fit, or that slows it by more
    than FULL_SPEED_TOLERANCE, is too small. Returns 1 when every cap tried was too small."""
    low, high = Decimal(0), Decimal(1)
    for _ in range(steps):
        mid = (low + high) / 2
        progress(mid)
        if full_speed_at(mid):
            high = mid
        else:
            low = mid
    return high


def _ratio(value: Decimal) -> Decimal:
    """Ratios of measured times to 4 decimals: finer digits are float noise, not measurement."""
    return value.quantize(Decimal("0.0001"))


def _points(n: int) -> list[int]:
    """2, 4, 8, ... up to n, and n itself."""
    pts, p = [], 2
    while p < n:
        pts.append(p)
        p *= 2
    return pts + ([n] if n >= 2 else [])


def default_path(profile: Profile) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", profile.reference_gpu.lower()).strip("-")
    quick = "-quick" if profile.provenance.quick else ""
    return profiles_dir() / f"{profile.workload}-{slug}{quick}-{profile.provenance.date}.yaml"


def bench(opts: BenchOptions, executor: Executor, out: Path | None = None) -> tuple[Profile, Path]:
    """Measure and save; returns the profile and where it was written."""
    profile = measure(opts, executor)
    return profile, save_profile(profile, out or default_path(profile))
