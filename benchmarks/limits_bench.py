"""Input limits benchmark: how long `gpuplan estimate` takes at the job limit, and how fast it
refuses what is past it (docs/workloads.md, "Limits").

Run: .venv/bin/python benchmarks/limits_bench.py
Prints, for each case, the wall time and peak memory of one fresh `gpuplan estimate`
subprocess (table output, as a user gets it) and its exit code: MAX_JOBS (20,000) equal jobs
(--videos) over the whole current catalog, without and with a deadline; MAX_JOBS jobs of
mixed lengths (a workload file) without a deadline, with a 10 h one and with a tight 3 h one
(thousands of machines); each against the 10 s target (issue 13); and the refusals of
--videos 100000, a workload of 1,000,000 jobs (count:) and a workload file of one line per
job past the file-size limit.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuplan.planning.workloads import MAX_FILE_BYTES, MAX_JOBS

TARGET_S = 10  # issue 13: 20,000 jobs, tight deadline included, on the 2-CPU dev machine


def estimate(args: list[str], env: dict) -> tuple[float, int, int, str]:
    """Wall seconds, peak RSS in MiB, exit code and stderr's last line of one `gpuplan estimate`."""
    with tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "gpuplan", "estimate", *args], env=env,
                                stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
        err.seek(0)
        last = (err.read().strip().splitlines() or [""])[-1]
    return seconds, usage.ru_maxrss // 1024, os.waitstatus_to_exitcode(status), last


def main() -> None:
    work = Path(tempfile.mkdtemp())
    env = dict(os.environ, GPUPLAN_HOME=str(work / "home"))
    rng = random.Random(1)
    mixed = work / "mixed.yaml"
    mixed.write_text("name: mixed\nseconds_per_unit: 1\nreference_gpu: K80\njobs:\n"
                     + "".join(f"  - {{units: {rng.randint(600, 20000)}}}\n" for _ in range(MAX_JOBS)))
    million = work / "million.yaml"
    million.write_text("name: x\nseconds_per_unit: 1\nreference_gpu: K80\njobs:\n  - {units: 100, count: 1000000}\n")
    big = work / "big.yaml"
    big.write_text("name: x\nseconds_per_unit: 1\nreference_gpu: K80\njobs:\n"
                   + "  - {units: 100}\n" * (MAX_FILE_BYTES // 16 + 1))
    planned = [
        (f"--videos {MAX_JOBS:,}, whole current catalog", ["--videos", str(MAX_JOBS)]),
        (f"--videos {MAX_JOBS:,}, --deadline 10h", ["--videos", str(MAX_JOBS), "--deadline", "10h"]),
        (f"{MAX_JOBS:,} mixed jobs ({mixed.stat().st_size // 1024} KiB file)", ["--workload", str(mixed)]),
        (f"{MAX_JOBS:,} mixed jobs, --deadline 10h", ["--workload", str(mixed), "--deadline", "10h"]),
        (f"{MAX_JOBS:,} mixed jobs, --deadline 3h (tight)", ["--workload", str(mixed), "--deadline", "3h"]),
    ]
    refused = [
        ("--videos 100,000 (refused)", ["--videos", "100000"]),
        ("1,000,000 jobs by count: (refused)", ["--workload", str(million)]),
        (f"{big.stat().st_size // 1024} KiB workload file (refused)", ["--workload", str(big)]),
    ]
    print(f"gpuplan estimate at its input limits (MAX_JOBS {MAX_JOBS:,}, workload files up to {MAX_FILE_BYTES // 1024} KiB)"
          f" on {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    for label, args in planned + refused:
        seconds, mib, code, last = estimate(args, env)
        target = f"  target < {TARGET_S} s: {'OK' if seconds < TARGET_S else 'SLOW'}" if (label, args) in planned else ""
        print(f"  {label:52s} {seconds:6.1f} s  {mib:5d} MiB  exit {code}" + (f"  ({last[:70]})" if code else "") + target)


if __name__ == "__main__":
    main()
