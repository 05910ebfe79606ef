"""Shared fixtures. Test support modules live in tests/support/ and import as `support.<name>`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def gpuplan_home(tmp_path, monkeypatch) -> Path:
    """A private GPUPLAN_HOME (state + config) for one test."""
    home = tmp_path / "gpuplan-home"
    monkeypatch.setenv("GPUPLAN_HOME", str(home))
    return home


@pytest.fixture
def cli(gpuplan_home):
    """Run the gpuplan CLI in-process: cli("estimate", "--videos", "4") -> Result(code, out, err)."""
    from support.cli import run_cli

    return run_cli
