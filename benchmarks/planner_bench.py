"""Planner benchmark: CLI start-up time and heavy imports, and optimizer time for 1,000 jobs.

Run: .venv/bin/python benchmarks/planner_bench.py [--runs 7]
Prints (a) the median wall time of `gpuplan --help` and `gpuplan estimate --videos 4` in fresh
subprocesses against the targets (0.3 s and 0.6 s) and which heavy modules each imported, and
(b) the optimizer time for 1,000 jobs of mixed lengths over every offer of the current snapshot
with a deadline, and whether the recommendation is proven optimal.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from decimal import Decimal

HEAVY = ("scipy", "numpy", "pandas", "torch", "boto3", "botocore", "azure", "paramiko", "requests", "highspy")

_PROBE = """
import sys, runpy
sys.argv = {argv!r}
try:
    from gpuplan.cli import main
    main(sys.argv[1:])
except SystemExit:
    pass
finally:
    heavy = sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r}))
    sys.__stderr__.write('HEAVY=' + ','.join(heavy) + '\\n')
"""


def startup(argv: list[str], runs: int, env: dict) -> tuple[float, list[str]]:
    times = []
    heavy: list[str] = []
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "gpuplan", *argv[1:]], env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {proc.stderr.strip()}")
    probe = subprocess.run([sys.executable, "-c", _PROBE.format(argv=argv, heavy=HEAVY)], env=env,
                           capture_output=True, text=True)
    for line in probe.stderr.splitlines():
        if line.startswith("HEAVY="):
            heavy = [m for m in line[6:].split(",") if m]
    return statistics.median(times), heavy


def optimizer_run(jobs: int, deadline_h: int, seed: int) -> None:
    from gpuplan.market import catalog
    from gpuplan.planning import optimizer, ranking
    from gpuplan.planning.model import Setting
    from gpuplan.planning.plan_types import Job, Workload

    rng = random.Random(seed)
    lengths = [rng.choice([20, 30, 45, 60, 90, 120]) * 60 + rng.randint(0, 300) for _ in range(jobs)]
    work = Workload(
        name=f"bench-{jobs}", description="mixed lengths", unit="second", seconds_per_unit=Decimal(1),
        reference_gpu="V100", memory_gib=Decimal(10),
        jobs=tuple(Job(f"j{i}", Decimal(s)) for i, s in enumerate(lengths)),
    )
    cat = catalog.load()
    setting = Setting(catalog=cat, deadline_s=deadline_h * 3600)
    t0 = time.perf_counter()
    est = optimizer.estimate(work, setting)
    took = time.perf_counter() - t0
    feasible = sum(p.feasible for p in est.plans)
    rec = est.recommended
    print(f"(b) optimizer: {jobs} jobs ({sum(lengths) / 3600:.0f} GPU-hours on a V100), deadline {deadline_h} h, "
          f"{len(cat.offers)} offers of snapshot {cat.snapshot}")
    print(f"    {len(est.plans)} candidate plans ({feasible} feasible) in {took:.2f} s (target < 2 s): "
          f"{'OK' if took < 2 else 'SLOW'}")
    proven_schedules = sum(p.optimal for p in est.plans if p.machines)
    print(f"    recommendation proven optimal: {est.proven} (no schedule of any candidate fleet is cheaper by more "
          f"than ¥{est.gap:.2f}, relative gap {Decimal(est.gap) / rec.cost:.1e}, tolerance {ranking.RELATIVE_GAP}); "
          f"{proven_schedules} of {sum(1 for p in est.plans if p.machines)} scheduled plans proven makespan-optimal; "
          f"the rest are bounded away from the pick")
    for line in est.extra.values():
        print(f"    {line}")
    if rec:
        print(f"    recommended: {rec.label} {rec.provider} {rec.region} {rec.setup}, "
              f"wall {rec.wall_s / 3600:.2f} h, ¥{rec.cost_jpy:,}, schedule optimal: {rec.optimal}")
    else:
        print(f"    no recommendation: {est.reason}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--deadline-h", type=int, default=24)
    args = ap.parse_args()
    env = dict(os.environ, GPUPLAN_HOME=tempfile.mkdtemp(prefix="gpuplan-bench-"))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    for argv, target in ((["gpuplan", "--help"], 0.3), (["gpuplan", "estimate", "--videos", "4"], 0.6),
                         (["gpuplan", "estimate", "--videos", "4", "--as-of", "2017-08"], 0.6)):
        median, heavy = startup(argv, args.runs, env)
        verdict = "OK" if median < target else "SLOW"
        print(f"(a) {' '.join(argv):<45} median {median:.3f} s over {args.runs} runs (target < {target} s): {verdict}; "
              f"heavy modules imported: {', '.join(heavy) or 'none'}")
    optimizer_run(args.jobs, args.deadline_h, seed=1)


if __name__ == "__main__":
    main()
