"""JSON Schemas of the files a user writes: workload, profile, inventory, prices and batch.

Shipped with the package so an editor can check a file while it is written (docs/inventory.md,
"Schemas"); gpuplan's own readers check every file again, field by field, and
tests/test_schemas.py keeps the two in step. `python -m gpuplan.schemas` prints their folder.
"""

from __future__ import annotations

from pathlib import Path

NAMES = ("workload", "profile", "inventory", "prices", "batch")


def folder() -> Path:
    return Path(__file__).parent


def path(name: str) -> Path:
    """The schema file of `name` (one of NAMES)."""
    return folder() / f"{name}.schema.json"
