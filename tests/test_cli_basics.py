"""What a shell user expects of any CLI: --version, and completion that can be installed."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version


def _gpuplan(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuplan", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=60)


def test_version_prints_the_installed_version(cli):
    r = cli("--version")
    assert r.code == 0
    assert r.out == f"gpuplan {version('gpuplan')}\n"


def test_completion_can_be_shown_and_completes_commands_and_options():
    # what `--install-completion` writes into ~/.bashrc's sourced file (the shell is named, not detected)
    shown = _gpuplan(env={"_GPUPLAN_COMPLETE": "source_bash"})
    assert shown.returncode == 0 and "_gpuplan_completion" in shown.stdout
    assert "--install-completion" in _gpuplan("--help", env={"COLUMNS": "200"}).stdout
    words = _gpuplan(env={"_GPUPLAN_COMPLETE": "complete_bash", "COMP_WORDS": "gpuplan prov", "COMP_CWORD": "1"})
    assert words.stdout.split() == ["provision"]
    opts = _gpuplan(env={"_GPUPLAN_COMPLETE": "complete_bash", "COMP_WORDS": "gpuplan estimate --obj", "COMP_CWORD": "2"})
    assert opts.stdout.split() == ["--objective"]
