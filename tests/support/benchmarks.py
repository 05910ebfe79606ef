"""Load a script of benchmarks/ as a module, so a test checks the figures it prints."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load(name: str) -> ModuleType:
    """benchmarks/NAME.py, executed once per call."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
