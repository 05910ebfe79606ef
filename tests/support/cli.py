"""Run gpuplan's CLI in this process, the way a user's shell would, capturing output and exit code."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_cli(*args: str) -> Result:
    from gpuplan.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return Result(code, out.getvalue(), err.getvalue())


class Terminal(io.StringIO):
    """Someone at a terminal, typing these answers (monkeypatch it in as sys.stdin)."""

    def isatty(self) -> bool:
        return True


def items_file(folder, names) -> str:
    """An items file in `folder` with one of `names` a line; its path."""
    f = folder / "items.txt"
    f.write_text("".join(f"{n}\n" for n in names))
    return str(f)


def submitted_job(out: str) -> str:
    """The job id from `gpuplan run`'s (or launch's) "job ID submitted" line."""
    return next(line.split()[1] for line in out.splitlines() if line.startswith("job ") and " submitted" in line)
