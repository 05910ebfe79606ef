"""Shared fixtures. Test support modules live in tests/support/ and import as `support.<name>`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

pytest_plugins = ["support.aws_moto"]  # the moto_aws fixture, for every test module that asks for it


@pytest.fixture(autouse=True)
def _no_outside_calls(monkeypatch):
    """No test asks the internet for its public address (a closed local port answers at once,
    so a test that forgot its SSH source fails fast), and a busy lock refuses after 2 s."""
    monkeypatch.setenv("GPUPLAN_CHECKIP_URL", "http://127.0.0.1:9/")
    monkeypatch.setenv("GPUPLAN_LOCK_WAIT", "2")


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
