"""Prediction error of the planner: a 4-job colorize batch, predicted, then run and measured.

    # on a GPU machine (jobs run here, one per local GPU):
    python benchmarks/estimate_vs_measured.py --local --epochs 20 --price-jpy-per-hour 990
    # on a provisioned cluster (jobs run through `gpuplan run`):
    python benchmarks/estimate_vs_measured.py --cluster demo --python /opt/venv/bin/python --epochs 200
    # CPU smoke test of the pipeline itself (tiny shapes; the figures mean nothing):
    python benchmarks/estimate_vs_measured.py --local --quick

Steps:
1. measure a colorize profile with `gpuplan bench colorize` (alone; co-location over the GPUs);
2. predict the batch (4 jobs x --epochs) with the planner applied to that profile:
   --cluster: `gpuplan estimate --workload <4 jobs> --profile <profile> --format json`, the plan
   for the cluster's own instance type and count, saved as plan.json (jobs phase: setup excluded,
   the cluster is already set up);
   --local: the planner's model (gpuplan.model.job_factor + gpuplan.optimizer.schedule) on an
   offer describing this machine, since no catalog offer is "this machine";
3. run the 4 jobs (--cluster: `gpuplan run CLUSTER --items ... --plan plan.json`; --local: one
   process per GPU slot here, CUDA_VISIBLE_DEVICES=<i>, queued);
4. print measured and predicted wall time and yen, and the error %; the target is within 10 %.

Wall time includes each job's start-up (Python, torch, CUDA context): choose --epochs so a job
runs minutes, not seconds, or start-up dominates the error.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from decimal import Decimal
from pathlib import Path

TARGET_PCT = Decimal(10)
JOBS = 4


def gpuplan(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "gpuplan", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        sys.exit(f"gpuplan {' '.join(args[:2])} failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    return proc


def job_args(a: argparse.Namespace) -> list[str]:
    if a.quick:
        return ["--quick", "--steps", str(a.steps)]
    return ["--steps", str(a.steps), "--height", str(a.height), "--width", str(a.width)]


def workload_file(folder: Path, a: argparse.Namespace, reference_gpu: str) -> Path:
    import yaml

    path = folder / "workload.yaml"
    path.write_text(yaml.safe_dump({
        "name": "colorize-bench",
        "description": f"{JOBS} colorize jobs of {a.epochs} epochs ({a.steps} steps of 3 frames each)",
        "unit": "epoch",
        "seconds_per_unit": 1,  # replaced by the profile's figure
        "reference_gpu": reference_gpu,
        "speed": {reference_gpu: 1},  # measured on this very GPU type
        "jobs": [{"name": "video", "count": JOBS, "units": a.epochs}],
        "parallel": "none",
        "source": "benchmarks/estimate_vs_measured.py",
    }, sort_keys=False))
    return path


def predict_local(wl_path: Path, profile_path: Path, gpus: int, price: Decimal) -> tuple[Decimal, Decimal]:
    """(wall seconds, yen) of the jobs on this machine by the planner's own model."""
    from gpuplan import catalog, model, optimizer, workloads
    from gpuplan.profiles import load_profile
    from gpuplan.types import Offer

    prof = load_profile(profile_path)
    work = workloads.apply_profile(workloads.load(str(wl_path)), profile_path)
    offer = Offer(provider="local", name="this-machine", aliases=(), region="here", gpu=prof.reference_gpu,
                  gpu_count=gpus, gpu_memory_gib=prof.gpu_memory_gib or Decimal(1024), vcpus=os.cpu_count() or 1,
                  ram_gib=Decimal(0), price=price, currency="JPY", price_unit="hour", price_jpy_per_hour=price,
                  billing_granularity_s=1, billing_minimum_s=0, quota_family="", available_from=None,
                  retired_on=None, successor="")
    busy = min(gpus, len(work.jobs))
    factor, _notes = model.job_factor(work, offer, catalog.load().gpus, 1, busy)
    durations = [model.ceil_s(work.job_seconds(job) * factor) for job in work.jobs]
    sched = optimizer.schedule([durations], [0] * gpus)
    wall = Decimal(sched.makespan)
    return wall, price * wall / 3600


def predict_cluster(wl_path: Path, profile_path: Path, cluster: str, folder: Path) -> Path:
    """Save the estimate's plan for this cluster's instance type and count as plan.json."""
    from gpuplan.state import State

    row = State.open_default().cluster(cluster)
    if row is None:
        sys.exit(f"no cluster named {cluster!r}; see `gpuplan status`")
    est = json.loads(gpuplan("estimate", "--workload", str(wl_path), "--profile", str(profile_path),
                             "--provider", row.provider, "--region", row.region, "--format", "json").stdout)
    wanted = [p for p in est.get("plans", []) if p.get("instance_type") == row.size and p.get("count") == row.count]
    if not wanted:
        sizes = sorted({f"{p.get('instance_type')} x{p.get('count')}" for p in est.get("plans", [])})
        sys.exit(f"the estimate has no plan with {row.size} x{row.count} (it has: {', '.join(sizes[:8])})")
    plan = folder / "plan.json"
    plan.write_text(json.dumps(wanted[0], indent=2))
    return plan


def run_local(a: argparse.Namespace, gpus: int, cpu: bool) -> float:
    """Run the jobs here, one per GPU slot, queued; returns the wall seconds."""
    cmd = [sys.executable, "-m", "gpuplan.jobs.colorize", "--json", "--epochs", str(a.epochs), *job_args(a)]
    if cpu:
        cmd += ["--device", "cpu", "--threads", "1"]
    queue = list(range(JOBS))
    lock = threading.Lock()
    failures: list[str] = []

    def slot(i: int) -> None:
        while True:
            with lock:
                if not queue:
                    return
                job = queue.pop(0)
            env = dict(os.environ) if cpu else {**os.environ, "CUDA_VISIBLE_DEVICES": str(i)}
            proc = subprocess.run([*cmd, "--seed", str(job)], env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                failures.append(f"job {job}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")

    t0 = time.monotonic()
    threads = [threading.Thread(target=slot, args=(i,)) for i in range(gpus)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        sys.exit("; ".join(failures))
    return time.monotonic() - t0


def pct(measured: Decimal, predicted: Decimal) -> Decimal | None:
    return None if predicted == 0 else (measured - predicted) / predicted * 100


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--local", action="store_true")
    where.add_argument("--cluster")
    p.add_argument("--quick", action="store_true", help="CPU smoke run with tiny shapes")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--steps", type=int, default=10, help="steps per epoch")
    p.add_argument("--height", type=int, default=720)
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--gpus", type=int, help="--local: slots to use (default: every GPU; 2 on a CPU)")
    p.add_argument("--price-jpy-per-hour", type=Decimal, default=Decimal(0), help="--local: this machine's price")
    p.add_argument("--python", default="python3", help="--cluster: Python on the nodes")
    p.add_argument("--profile", type=Path, help="use this profile instead of measuring one")
    p.add_argument("--keep", type=Path, help="folder for the profile, workload and plan (default: a temp dir)")
    a = p.parse_args()

    folder = a.keep or Path(tempfile.mkdtemp(prefix="gpuplan-evm-"))
    folder.mkdir(parents=True, exist_ok=True)
    profile = a.profile
    if profile is None:
        profile = folder / "profile.yaml"
        target = ["--local"] if a.local else ["--cluster", a.cluster, "--python", a.python]
        extra = ["--quick"] if a.quick else []
        if a.gpus:
            extra += ["--gpus", str(a.gpus)]
        t0 = time.monotonic()
        gpuplan("bench", "colorize", *target, *extra, "--max-pack", "1", "--out", str(profile),
                "--job-args", shlex.join([a for a in job_args(a) if a != "--quick"]))
        print(f"profile measured in {time.monotonic() - t0:.0f} s: {profile}")
    from gpuplan.profiles import load_profile

    prof = load_profile(profile)
    wl = workload_file(folder, a, prof.reference_gpu)
    print(f"profile: {prof.seconds_per_unit:.4g} s/epoch alone on {prof.reference_gpu} ({prof.provenance.gpu});"
          f" co-location {dict((g, str(f)) for g, f in prof.colocation_slowdown.items())}")

    if a.local:
        cpu = prof.reference_gpu == "cpu"
        gpus = a.gpus or (2 if cpu else int(subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True).stdout.count("GPU ")))
        wall_p, yen_p = predict_local(wl, profile, gpus, a.price_jpy_per_hour)
        wall_m = Decimal(str(run_local(a, gpus, cpu)))
        yen_m = a.price_jpy_per_hour * wall_m / 3600
    else:
        from gpuplan import runner

        plan = predict_cluster(wl, profile, a.cluster, folder)
        items = folder / "items.txt"
        items.write_text("".join(f"{i}\n" for i in range(JOBS)))
        cmd = [a.python, "-m", "gpuplan.jobs.colorize", "--json", "--epochs", str(a.epochs), *job_args(a),
               "--seed", "{item}"]
        proc = gpuplan("run", a.cluster, "--items", str(items), "--plan", str(plan), "--", *cmd, check=False)
        print(proc.stdout)
        if proc.returncode != 0:
            sys.exit(f"gpuplan run failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
        from gpuplan.state import State

        runs = State.open_default().runs(a.cluster)[-JOBS:]
        pred = runner.read_plan(plan)
        wall_p, yen_p = pred["wall_s"], pred["yen"]
        row = State.open_default().cluster(a.cluster)
        # the run's own span: first job start to last job end, every node billed for it
        starts = [r["started_at"] for r in runs]
        from datetime import datetime

        first = min(datetime.fromisoformat(s) for s in starts)
        last = max(datetime.fromisoformat(r["started_at"]).timestamp() + r["seconds"] for r in runs)
        wall_m = Decimal(str(round(last - first.timestamp(), 3)))
        yen_m = (row.price_jpy_per_hour or Decimal(0)) * row.count * wall_m / 3600

    we, ye = pct(wall_m, wall_p), pct(yen_m, yen_p)
    print(f"predicted: wall {wall_p:.1f} s, yen {yen_p:.2f}")
    print(f"measured:  wall {wall_m:.1f} s, yen {yen_m:.2f}")
    print(f"error:     wall {we:+.1f} %" + (f", yen {ye:+.1f} %" if ye is not None else ", yen n/a (price 0)"))
    ok = we is not None and abs(we) <= TARGET_PCT
    print(f"target within {TARGET_PCT} %: {'PASS' if ok else 'FAIL'}" + ("  (quick CPU run: not a real test)" if a.quick else ""))


if __name__ == "__main__":
    main()
