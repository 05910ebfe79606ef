"""`gpuplan status` to a pipe or a file writes its clusters without rich (issue 47: importing
rich.console was 0.04 s of a 0.5 s status), character for character what rich writes there;
at a terminal, or where FORCE_COLOR asks for it, rich still writes them with their styles."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))


def _state(home: Path, clusters: int = 3) -> None:
    import status_bench

    status_bench.build(home, clusters, clusters * 6)


def test_the_control_codes_stripped_are_those_rich_strips():
    from rich.control import STRIP_CONTROL_CODES

    from gpuplan.cli import lifecycle

    assert sorted(ord(c) for c in lifecycle._CONTROL_CODES) == sorted(STRIP_CONTROL_CODES)


def test_plain_status_is_what_rich_writes_to_a_file(gpuplan_home: Path):
    from rich.console import Console

    from gpuplan.cli import lifecycle as cli_lifecycle
    from gpuplan.fleet import lifecycle
    from gpuplan.store.state import State

    _state(gpuplan_home)
    state = State.open_default()
    with state._tx() as db:  # a node name with control codes in it (rows a provider filled in)
        db.execute("UPDATE nodes SET name=? WHERE name='c0001-2'", ("c0001-\r2\a",))
    statuses = lifecycle.status(state)
    state.close()
    rich_file = io.StringIO()
    cli_lifecycle._print_status(Console(file=rich_file, highlight=False, markup=False, soft_wrap=True,
                                        force_terminal=False, width=200), statuses)
    plain = io.StringIO()
    with contextlib.redirect_stdout(plain):
        cli_lifecycle._print_status(None, statuses)
    assert "c0001-2" in plain.getvalue() and "\r" not in plain.getvalue() and "\a" not in plain.getvalue()
    assert plain.getvalue() == rich_file.getvalue()
    assert plain.getvalue().count("ready  up ") == 3


def _status(home: Path, **env: str) -> subprocess.CompletedProcess:
    code = ("import sys\nfrom gpuplan.cli import main\ntry:\n    main(['status'])\nexcept SystemExit:\n    pass\n"
            "print('RICH=' + ','.join(sorted(m for m in sys.modules if m.split('.')[0] == 'rich')), file=sys.stderr)")
    path = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=home, timeout=120,
                          env={"GPUPLAN_HOME": str(home), "PATH": "/usr/bin:/bin", "COLUMNS": "120", **path, **env})


def test_status_to_a_pipe_imports_no_rich_and_forced_colour_still_styles(tmp_path: Path):
    home = tmp_path / "home"
    _state(home)
    piped = _status(home)
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.count("ready  up ") == 3 and "\x1b[" not in piped.stdout
    assert "RICH=\n" in piped.stderr + "\n" and piped.stderr.strip().endswith("RICH="), piped.stderr
    forced = _status(home, FORCE_COLOR="1")
    assert forced.returncode == 0, forced.stderr
    assert "\x1b[1mc0000" in forced.stdout  # the cluster's name in bold, as rich writes it at a terminal
    assert "rich.console" in forced.stderr


def test_a_batch_not_over_is_still_said_after_the_clusters(cli, gpuplan_home: Path):
    from gpuplan.store.state import State

    _state(gpuplan_home, clusters=2)
    state = State.open_default()
    state.add_job("c0001-1", "c0001", ["echo", "{item}"], {}, [(0, "a"), (1, "b")], 4)
    state.close()
    r = cli("status")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[-1] == ("batch c0001-1 on c0001: submitted, 0 of 2 items done when last looked at;"
                         " `gpuplan jobs c0001` for now")
    assert sum(" ready  up " in line for line in lines) == 2
