"""Types checked (issue 18 item 7): gpuplan/planning, gpuplan/market and gpuplan/units.py have no
mypy errors; the rest of gpuplan and providers may have no more errors per file than
scripts/mypy-baseline.txt records, which may only shrink.

Check (scripts/test.sh runs this):    .venv/bin/python scripts/mypy_baseline.py
Re-record (after fixing errors, or after a merge brings new files; commit the file):
                                      .venv/bin/python scripts/mypy_baseline.py --record
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "scripts" / "mypy-baseline.txt"
STRICT = ("gpuplan/planning/", "gpuplan/market/", "gpuplan/units.py")  # no errors at all here
TARGETS = ["gpuplan", "providers"]
ERROR = re.compile(r"^(?P<path>[^:\s]+\.py):\d+: error: ")


def mypy_counts() -> tuple[collections.Counter, str]:
    done = subprocess.run([sys.executable, "-m", "mypy", *TARGETS], cwd=ROOT, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit(f"mypy did not run: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    counts: collections.Counter = collections.Counter()
    for line in done.stdout.splitlines():
        m = ERROR.match(line)
        if m:
            counts[m.group("path")] += 1
    return counts, done.stdout


def read_baseline() -> dict[str, int]:
    out = {}
    for line in BASELINE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            count, path = line.split(maxsplit=1)
            out[path.strip()] = int(count)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="write the current counts as the new baseline")
    args = parser.parse_args()
    counts, report = mypy_counts()
    strict = [line for line in report.splitlines() if line.startswith(STRICT) and ": error: " in line]
    if strict:
        print("\n".join(strict))
        print(f"mypy: {len(strict)} error(s) in {', '.join(STRICT)}, which must have none")
        return 1
    if args.record:
        lines = [f"{n} {path}" for path, n in sorted(counts.items())]
        BASELINE.write_text("# mypy errors per file outside gpuplan/planning (may only shrink): "
                            "scripts/mypy_baseline.py --record\n" + "\n".join(lines) + "\n")
        print(f"mypy baseline recorded: {sum(counts.values())} errors in {len(counts)} files -> {BASELINE.name}")
        return 0
    baseline = read_baseline()
    worse = [(path, n, baseline.get(path, 0)) for path, n in sorted(counts.items()) if n > baseline.get(path, 0)]
    if worse:
        for path, n, was in worse:
            print(f"{path}: {n} mypy errors, baseline {was}:")
            print("\n".join(f"  {line}" for line in report.splitlines() if line.startswith(f"{path}:")))
        print("mypy: more errors than scripts/mypy-baseline.txt allows; fix them (the baseline may only shrink)")
        return 1
    better = sum(baseline.values()) - sum(counts.values())
    print(f"mypy: {', '.join(STRICT)} clean; {sum(counts.values())} errors elsewhere, within the baseline"
          + (f" ({better} fewer: re-record it with scripts/mypy_baseline.py --record)" if better > 0 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
