"""Four 10-minute H100 jobs on today's catalog: Sakura 高火力 DOK (one task queue, or one 8-GPU task),
one VRT H100 and AWS p5.4xlarge in Tokyo, as `gpuplan estimate` plans them (issue 22's worked
comparison). Prints each plan's wall, billed time and yen; no network, no GPU.

    python benchmarks/sakura_dok_comparison.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from gpuplan.market import catalog
from gpuplan.planning import fmt, optimizer, workloads
from gpuplan.planning.model import Setting

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.issue_cases import FOUR_TEN_MINUTE_H100_JOBS as JOBS  # noqa: E402  (the batch the tests check)

WANTED = (("sakura", "is1a", "dok-h100-80gb"), ("sakura", "is1a", "dok-h100-8gpu-80gb"),
          ("sakura", "is1a", "24Core-240GB-H100x1"), ("aws", "ap-northeast-1", "p5.4xlarge"))


def main() -> None:
    cat = catalog.load("2026-11", user_prices=False)
    work = workloads.parse(JOBS, "benchmark")
    for provider, region, name in WANTED:
        est = optimizer.estimate(work, Setting(catalog=cat), provider=provider, region=region, mixes=False)
        plans = [p for p in est.plans if p.feasible and p.fleet[0][0].name == name and len(p.fleet) == 1]
        best = min(plans, key=lambda p: (p.cost, p.wall_s))
        count = best.fleet[0][1]
        print(f"{provider:6} {region:15} {count}x {name:22} wall {fmt.duration(best.wall_s):>7}  "
              f"billed {fmt.duration(best.billed_s):>7}  {fmt.yen(best.cost, 2):>10}")


if __name__ == "__main__":
    main()
