"""A big catalog for the planner benchmarks (issue 47): today's AWS, Azure and GCP rows copied into
more regions, what a refreshed catalog of every region looks like (SkyPilot's own catalogs hold
thousands of rows).

Run: .venv/bin/python benchmarks/big_catalog.py --rows 1162 --home DIR
Writes the shipped newest snapshot's rows, plus copies of every aws/azure/gcp row (its spot row
and interruption figure too) into regions named `<region>-c<k>`, as a refreshed snapshot in
DIR/data/snapshots/ (the one `GPUPLAN_HOME=DIR gpuplan estimate` then plans on). Each copy adds
72 rows to the 82 shipped: 298, 586 and 1,162 rows are 3, 7 and 15 copies. The copies keep their
row's price and source (a copy is the same offer in a region nobody priced: a load, not a fact).
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

CLOUDS = ("aws", "azure", "gcp")
NAME = "2026-11-30"  # newer than the shipped 2026-11, same month: the newest snapshot, the same prices and rates


def _shipped() -> Path:
    from gpuplan.market import catalog

    newest = [n for n in catalog.snapshots() if len(n) == len("YYYY-MM")][-1]
    return Path(str(catalog.snapshot_folder(newest)))


def _rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _write(path: Path, fields: list[str], rows: list[dict[str, str]]) -> None:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(out.getvalue(), encoding="utf-8")


def copies_for(rows: int) -> int:
    """How many copies of the cloud rows give `rows` rows (82 + 72 x copies)."""
    fields, offers = _rows(_shipped() / "offers.csv")
    cloud = sum(1 for r in offers if r["provider"] in CLOUDS)
    k, left = divmod(rows - len(offers), cloud)
    if k < 0 or left:
        raise SystemExit(f"--rows {rows}: the shipped catalog has {len(offers)} rows, {cloud} of them cloud rows; "
                         f"use {len(offers)} + {cloud} x copies (e.g. {len(offers) + 3 * cloud}, {len(offers) + 7 * cloud},"
                         f" {len(offers) + 15 * cloud})")
    return k


def write(home: Path, rows: int) -> Path:
    """The snapshot of `rows` rows under home/data/snapshots; returns its folder."""
    k = copies_for(rows)
    src = _shipped()
    dst = home / "data" / "snapshots" / NAME
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("offers.csv", "spot.csv", "spot_interruptions.csv"):
        if not (src / name).is_file():
            continue
        fields, base = _rows(src / name)
        out = list(base)
        for c in range(1, k + 1):
            out += [{**r, "region": f"{r['region']}-c{c}"} for r in base if r["provider"] in CLOUDS]
        _write(dst / name, fields, out)
    for name in ("providers.csv", "quotas.csv"):
        (dst / name).write_text((src / name).read_text(encoding="utf-8"), encoding="utf-8")
    return dst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, required=True, help="82, 298, 586, 1162, ...")
    ap.add_argument("--home", type=Path, required=True, help="a GPUPLAN_HOME to write the snapshot into")
    a = ap.parse_args()
    folder = write(a.home, a.rows)
    print(f"{a.rows} rows in {folder}", file=sys.stderr)


if __name__ == "__main__":
    main()
