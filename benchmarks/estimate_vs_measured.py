"""Prediction error of the planner: a 4-job colorize batch, predicted, then run and measured.

    # on paper, from a measured run (no GPU): the committed H100 profile and the figures of
    # shared/measurements/h100-2026-11-22 (a verbatim copy is in benchmarks/measured/):
    python benchmarks/estimate_vs_measured.py --from-shared [DIR]
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
   --local / --from-shared: the planner itself (gpuplan.planning.optimizer.estimate) over a one-offer
   catalog describing the machine (no setup, per-second billing at its price), since no
   catalog offer is "this machine";
3. run the 4 jobs (--cluster: `gpuplan run CLUSTER --items ... --plan plan.json`; --local: one
   process per GPU slot here, CUDA_VISIBLE_DEVICES=<i>, queued);
4. print measured and predicted wall time and yen, and the error %; the target is within 10 %.

Wall time includes each job's start-up (Python, torch, CUDA context, model build, warm-up): the
profile's fixed cost per job start counts it, so the prediction holds for short jobs too.
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


def predict(profile_path: Path, jobs: int, epochs: int, gpus: int, price: Decimal, reference_gpu: str | None = None):
    """The planner's plan for `jobs` colorize jobs of `epochs` queued over `gpus` GPUs of one
    machine like the profile's: (wall seconds, yen, the Plan)."""
    from gpuplan.market import catalog
    from gpuplan.market.catalog import Catalog, ProviderFacts
    from gpuplan.planning import optimizer, workloads
    from gpuplan.planning.model import Setting
    from gpuplan.planning.profiles import load_profile
    from gpuplan.planning.types import Offer

    prof = load_profile(profile_path)
    gpu = reference_gpu or prof.reference_gpu
    base = workloads.from_dict({
        "name": "colorize-bench", "unit": "epoch", "seconds_per_unit": 1, "reference_gpu": gpu,
        "speed": {gpu: 1}, "jobs": [{"name": "video", "count": jobs, "units": epochs}],
        "source": "benchmarks/estimate_vs_measured.py",
    }, "benchmarks/estimate_vs_measured.py")
    work = workloads.apply_profile(base, profile_path)
    offer = Offer(provider="local", name="this-machine", aliases=(), region="here", gpu=prof.reference_gpu,
                  gpu_count=gpus, gpu_memory_gib=prof.gpu_memory_gib or Decimal(1024), vcpus=os.cpu_count() or 1,
                  ram_gib=Decimal(0), price=price, currency="JPY", price_unit="hour", price_jpy_per_hour=price,
                  billing_granularity_s=1, billing_minimum_s=0, quota_family="", available_from=None,
                  retired_on=None, successor="", source="--price-jpy-per-hour", as_of="")
    facts = ProviderFacts(name="local", default_region="here", default_quota_vcpus=None, family_quota_vcpus={},
                          quota_name="", how_to_raise="", setup_s=0, capture_s=0, launch_s=0, builder_is_worker=True,
                          power_price_jpy_per_kwh=None, source="already set up", notes="")
    real = catalog.load()
    cat = Catalog(snapshot=real.snapshot, date=real.date, offers=(offer,), gpus=real.gpus, fx=real.fx,
                  providers={"local": facts})
    est = optimizer.estimate(work, Setting(catalog=cat), mixes=False)
    plan = next(p for p in est.plans if p.feasible and p.count == 1 and p.per_gpu == 1 and p.setup == "scratch")
    return Decimal(plan.wall_s), plan.cost, plan


def predict_local(wl_path: Path, profile_path: Path, gpus: int, price: Decimal, jobs: int, epochs: int,
                  ) -> tuple[Decimal, Decimal]:
    """(wall seconds, yen) of the jobs on this machine by the planner itself."""
    wall, yen, _ = predict(profile_path, jobs, epochs, gpus, price)
    return wall, yen


SHARED = Path("/work/shared/measurements/h100-2026-11-22")
COPY = Path(__file__).parent / "measured" / "h100-2026-11-22"
H100_PROFILE = "colorize-h100-sxm-2026-11-22.yaml"


def shared_figures(folder: Path) -> dict:
    """The measured run in a shared measurement folder: its README (the command: epochs, price;
    the machine: GPUs), evm-workload.yaml (jobs) and estimate_vs_measured.txt (what was measured
    and what was predicted then)."""
    import re

    import yaml

    readme = (folder / "README.md").read_text()
    command = next(line for line in readme.splitlines() if "estimate_vs_measured.py" in line and "--epochs" in line)
    command += next((line for line in readme.splitlines()[readme.splitlines().index(command) + 1:]), "")
    jobs = sum(int(j.get("count", 1)) for j in yaml.safe_load((folder / "evm-workload.yaml").read_text())["jobs"])
    text = (folder / "estimate_vs_measured.txt").read_text()

    def figure(label: str, what: str) -> Decimal:
        m = re.search(rf"^{label}:\s+wall (?P<wall>[\d.]+) s, yen (?P<yen>[\d.]+)", text, re.M)
        if m is None:
            sys.exit(f"{folder / 'estimate_vs_measured.txt'}: no '{label}:' line with wall and yen")
        return Decimal(m.group(what))

    return {
        "folder": folder,
        "gpus": int(re.search(r"Machine: (\d+)x", readme).group(1)),
        "epochs": int(re.search(r"--epochs (\d+)", command).group(1)),
        "price": Decimal(re.search(r"--price-jpy-per-hour (\d+)", command).group(1)),
        "jobs": jobs,
        "measured_wall": figure("measured", "wall"),
        "measured_yen": figure("measured", "yen"),
        "first_predicted_wall": figure("predicted", "wall"),
    }


def from_shared(folder: Path, profile: Path | None) -> tuple[Decimal, Decimal]:
    """Predict the shared run from the committed profile and print predicted vs measured."""
    from importlib.resources import files

    fig = shared_figures(folder)
    profile = profile or Path(str(files("gpuplan.catalog_data") / "profiles" / H100_PROFILE))
    wall, yen, plan = predict(profile, fig["jobs"], fig["epochs"], fig["gpus"], fig["price"])
    vm = plan.vms[0]
    print(f"run: {fig['jobs']} colorize jobs x {fig['epochs']} epochs queued on {fig['gpus']} GPU(s), "
          f"¥{fig['price']}/h ({fig['folder']})")
    print(f"profile: {profile}")
    print(f"predicted: wall {wall:.1f} s, yen {yen:.2f} (of which job starts {vm.job_starts_s:.1f} s)")
    print(f"measured:  wall {fig['measured_wall']:.1f} s, yen {fig['measured_yen']:.2f}")
    we, ye = pct(fig["measured_wall"], wall), pct(fig["measured_yen"], yen)
    print(f"error:     wall {we:+.1f} %, yen {ye:+.1f} %")
    first = fig["first_predicted_wall"]
    print(f"first prediction (no fixed cost per job start): {first:.1f} s, error {pct(fig['measured_wall'], first):+.1f} %")
    ok = abs(we) <= TARGET_PCT
    print(f"target within {TARGET_PCT} %: {'PASS' if ok else 'FAIL'} (on paper, from the measured figures;"
          " a run on a GPU must still confirm it)")
    return we, ye


def predict_cluster(wl_path: Path, profile_path: Path, cluster: str, folder: Path) -> Path:
    """Save the estimate's plan for this cluster's instance type and count as plan.json."""
    from gpuplan.store.state import State

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
    where.add_argument("--from-shared", nargs="?", type=Path, const=SHARED if SHARED.is_dir() else COPY,
                       metavar="DIR", help=f"predict a measured run on paper (default {SHARED}, else {COPY})")
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
    if a.from_shared is not None:
        from_shared(a.from_shared, a.profile)
        return

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
    from gpuplan.planning.profiles import load_profile

    prof = load_profile(profile)
    wl = workload_file(folder, a, prof.reference_gpu)
    print(f"profile: {prof.seconds_per_unit:.4g} s/epoch alone on {prof.reference_gpu} ({prof.provenance.gpu});"
          f" fixed cost per job start {prof.fixed_seconds_per_job} s;"
          f" co-location {dict((g, str(f)) for g, f in prof.colocation_slowdown.items())}")

    if a.local:
        cpu = prof.reference_gpu == "cpu"
        gpus = a.gpus or (2 if cpu else int(subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True).stdout.count("GPU ")))
        wall_p, yen_p = predict_local(wl, profile, gpus, a.price_jpy_per_hour, JOBS, a.epochs)
        wall_m = Decimal(str(run_local(a, gpus, cpu)))
        yen_m = a.price_jpy_per_hour * wall_m / 3600
    else:
        from gpuplan.run import items as run_items

        plan = predict_cluster(wl, profile, a.cluster, folder)
        items = folder / "items.txt"
        items.write_text("".join(f"{i}\n" for i in range(JOBS)))
        cmd = [a.python, "-m", "gpuplan.jobs.colorize", "--json", "--epochs", str(a.epochs), *job_args(a),
               "--seed", "{item}"]
        proc = gpuplan("run", a.cluster, "--items", str(items), "--plan", str(plan), "--", *cmd, check=False)
        print(proc.stdout)
        if proc.returncode != 0:
            sys.exit(f"gpuplan run failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
        from gpuplan.store.state import State

        runs = State.open_default().runs(a.cluster)[-JOBS:]
        pred = run_items.read_plan(plan)
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
