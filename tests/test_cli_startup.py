"""Start-up (issue 47): a command that does not need them imports neither pydantic (typer 0.29
coerces options through it: gpuplan/cli/plain_params.py answers the certain cases) nor rich's
help machinery; typer is pinned to the version this is tested with; a value the plain path does
not answer still gets typer's own check and wording."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the gpuplan under test, also where it is not the installed one (a worktree on PYTHONPATH)
_PATH = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}

_PROBE = """
import sys
from gpuplan.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("LOADED=" + ",".join(sorted(m for m in sys.modules if m.split(".")[0] in ("pydantic", "pydantic_core")
                                  or m in ("typer.rich_utils", "typer._adapters", "markdown_it", "rich.traceback", "rich.markdown"))),
      file=sys.__stderr__)
"""


def _loaded(args: list[str], home: Path) -> set[str]:
    done = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, cwd=home,
                          env={"GPUPLAN_HOME": str(home), "PATH": "/usr/bin:/bin", "COLUMNS": "120", **_PATH}, timeout=120)
    line = next(x for x in done.stderr.splitlines() if x.startswith("LOADED="))
    return set(filter(None, line[len("LOADED="):].split(",")))


def test_typer_is_pinned_to_the_version_installed():
    text = (ROOT / "pyproject.toml").read_text()
    pin = re.search(r'"typer==([0-9.]+)"', text)
    assert pin is not None, "typer is not pinned in pyproject.toml"
    assert pin.group(1) == version("typer")


def test_status_and_estimate_import_no_pydantic_nor_rich_help(tmp_path: Path):
    for args in (["status"], ["status", "--format", "json"], ["estimate", "--videos", "4", "--deadline", "10h"]):
        assert _loaded(args, tmp_path) == set(), args
    # the help itself needs typer's rich help, not rich's Markdown (markdown_it) nor its tracebacks
    assert _loaded(["--help"], tmp_path) == {"typer.rich_utils"}


def test_the_stand_ins_for_rich_markdown_and_traceback_are_the_real_classes_when_used(tmp_path: Path):
    code = """
import gpuplan.cli
from typer import rich_utils
from rich.markdown import Markdown
from rich.traceback import Traceback
md = rich_utils.Markdown("*x*")
try:
    raise ValueError("x")
except ValueError as exc:
    tb = rich_utils.Traceback.from_exception(type(exc), exc, exc.__traceback__)
print(type(md) is Markdown, type(tb) is Traceback, rich_utils.Traceback.__name__)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.stdout.split() == ["True", "True", "Traceback"], done.stderr


def test_values_the_plain_path_leaves_to_typer_are_checked_as_before(cli):
    r = cli("estimate", "--videos", "abc")
    assert r.code == 2 and "Invalid value for '--videos'" in r.err and "integer" in r.err
    r = cli("estimate", "--videos", "007", "--format", "json")  # a leading zero: typer's own answer, 7
    assert r.code == 0 and json.loads(r.out)["jobs"] == 7
    r = cli("estimate", "--videos", "3", "--format", "json")
    assert r.code == 0 and json.loads(r.out)["jobs"] == 3


def test_a_command_builds_only_its_own_module_and_the_map_says_which(tmp_path: Path):
    """gpuplan.cli._MODULES names, per command module, the top-level commands its register()
    adds: a command starts with only its module imported, so a name missing from the map would
    still run (every command is built then) but slowly, and a wrong one would not run at all."""
    import typer

    from gpuplan import cli

    for module, names in cli._MODULES.items():
        group = typer.Typer()
        __import__(f"gpuplan.cli.{module}", fromlist=["register"]).register(group)
        added = [c.name or c.callback.__name__ for c in group.registered_commands] + [
            g.name for g in group.registered_groups]
        assert sorted(added) == sorted(names), module
    assert cli._module_for(["status"]) == "lifecycle"
    assert cli._module_for(["--debug", "image", "ls"]) == "lifecycle"
    assert cli._module_for(["--help"]) is None and cli._module_for([]) is None
    assert cli._module_for(["statu"]) is None  # unknown: every command, for typer's "did you mean"
    code = """
import sys
from gpuplan.cli import main
try:
    main(["status"])
except SystemExit:
    pass
print(",".join(sorted(m for m in sys.modules if m.startswith("gpuplan.cli."))), file=sys.__stderr__)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={"GPUPLAN_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "COLUMNS": "120", **_PATH})
    loaded = set(done.stderr.strip().splitlines()[-1].split(","))
    assert "gpuplan.cli.lifecycle" in loaded
    assert not loaded & {"gpuplan.cli.estimate", "gpuplan.cli.jobs", "gpuplan.cli.launch", "gpuplan.cli.costs"}, loaded
