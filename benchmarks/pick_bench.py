"""The default pick against the strictly cheapest, on the cases of issue 19.

Run: .venv/bin/python benchmarks/pick_bench.py
Prints, per case, the cheapest plan (--objective cost) and the default pick (the fastest within
--cost-slack 3 % of the cheapest, or the cheapest within 5 % of its wall; then 2 % more where that
halves the wall and saves 2 h): fleet,
yen, wall; what the pick costs more and how much sooner it finishes; the largest fleet it
starts; whether any feasible plan at most 2 % dearer than the pick finishes in half its wall
time and 2 h sooner (it must be none); and the estimate's own time.
"""

from __future__ import annotations

import sys
import time
from decimal import Decimal
from pathlib import Path

from gpuplan.market import catalog
from gpuplan.planning import fmt, optimizer, workloads
from gpuplan.planning.model import Setting

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.issue_cases import ISSUE_19_REGIONS, T4_SHORT  # noqa: E402  (the cases the tests check)
from support.issue_cases import LORA_MIX as LORA  # noqa: E402


def _beaten(rec, plans) -> int:
    return sum(1 for q in plans if q.feasible and q.recommendable and q.cost <= rec.cost * Decimal("1.02")
               and 2 * q.wall_s <= rec.wall_s and rec.wall_s - q.wall_s >= 7200)


def main() -> None:
    cases = [("mixed LoRA fine-tunes (15 jobs, A100 80GB)", workloads.parse(LORA, "lora")),
             ("200 x 6-min jobs on a T4", workloads.parse(T4_SHORT, "t4")),
             ("--videos 40", workloads.videos(40)), ("--videos 2000", workloads.videos(2000)),
             ("--videos 20000", workloads.videos(20000))]
    everywhere = catalog.load()
    # issue 19 measured its cases before Sakura 高火力 DOK joined the catalog: they are planned both
    # in every region and in issue 19's (as tests/conftest.py's issue_19_regions does)
    for where, cat in (("every region", everywhere), ("issue 19's regions", catalog.in_regions(everywhere, ISSUE_19_REGIONS))):
        print(f"== {where}")
        _cases(cases, cat)


def _cases(cases, cat) -> None:
    for name, work in cases:
        work = workloads.with_catalog_gpus(work, cat)
        setting = Setting(catalog=cat)
        t0 = time.perf_counter()
        pick = optimizer.estimate(work, setting)
        seconds = time.perf_counter() - t0
        cheapest = optimizer.estimate(work, setting, objective="cost").recommended
        rec = pick.recommended
        more = rec.cost - cheapest.cost
        print(f"{name}:")
        print(f"  cheapest: {cheapest.label}, {fmt.yen(cheapest.cost)}, wall {fmt.duration(cheapest.wall_s)}")
        print(f"  default:  {rec.label}, {fmt.yen(rec.cost)}, wall {fmt.duration(rec.wall_s)}"
              f" (+{fmt.yen(more)}, {more / cheapest.cost * 100:.2f} %; {fmt.duration(cheapest.wall_s - rec.wall_s)} sooner)")
        print(f"  machines started: {rec.machine_count}; plans 2 % dearer, half the wall, 2 h sooner: "
              f"{_beaten(rec, list(pick.plans))}; estimate {seconds:.1f} s")


if __name__ == "__main__":
    main()
