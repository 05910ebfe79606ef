"""The command line. Only this package knows typer and rich.

Each command group lives in its own module with a `register(app)` function; a command imports
only its own module (_MODULES), and modules import their heavy dependencies inside the command
bodies, so `gpuplan --help` and each command start fast.
Every gpuplan error becomes one line on stderr and its exit code here, in one place.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from gpuplan.cli import plain_params
from gpuplan.errors import GpuplanError

plain_params.install()  # options parsed without pydantic where the answer is certain
plain_params.light_help()  # --help without rich's Markdown and Traceback until they are used


def _new_app() -> typer.Typer:
    made = typer.Typer(
        name="gpuplan",
        help="Plan GPU batch work in yen (setup counted), provision it, bootstrap it, run it, tear it down.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
    )
    made.callback()(_root)
    return made

_debug = False


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("gpuplan")
        except PackageNotFoundError:  # run from a source tree that was never installed
            number = "unknown (not installed)"
        print(f"gpuplan {number}")
        raise typer.Exit()


def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors, and a failed remote step's whole output."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print gpuplan's version and exit."),
) -> None:
    global _debug
    _debug = debug or bool(os.environ.get("GPUPLAN_DEBUG"))
    if _debug:
        import logging

        logging.getLogger().addHandler(logging.StreamHandler())


# The command modules in the order `gpuplan --help` lists them, and the top-level commands each
# registers (tests/test_cli_startup.py checks this against what their register() adds).
_MODULES = {
    "estimate": ("estimate",),
    "catalog": ("catalog",),
    "check": ("check",),
    "lifecycle": ("provision", "status", "teardown", "image"),
    "costs": ("cost-report", "budget"),
    "remote": ("bootstrap", "ssh"),
    "jobs": ("bench", "run", "jobs", "logs", "cancel", "dashboard"),
    "launch": ("launch", "convert"),
    "probe": ("probe",),
    "profiles": ("profiles",),
    "sakura": ("dok", "phy"),
}
_MODULE_OF = {name: module for module, names in _MODULES.items() for name in names}
_ROOT_FLAGS = ("--debug", "--version")

app = _new_app()  # every command (what --help lists, docs/cli.md and the tests read)
_commands: dict[str | None, object] = {}  # the click command per module (None: all of them), built once


def _module_for(args: list[str]) -> str | None:
    """The one command module `gpuplan ARGS` runs, or None where every command is needed: no
    command named, a name gpuplan does not know (its error suggests the near ones), shell
    completion. Only the root's flags come before a command's name."""
    if any(key.startswith("_GPUPLAN_COMPLETE") or key.startswith("_TYPER_COMPLETE") for key in os.environ):
        return None
    for word in args:
        if word not in _ROOT_FLAGS:
            return None if word.startswith("-") else _MODULE_OF.get(word)
    return None


def _register_commands(args: list[str] | None = None):
    """The click command that runs `gpuplan ARGS`, its help made readable (helptext.py): for a
    command gpuplan knows, a group of only its own module's commands (issue 47: building every
    command imported every command module, about 0.1 s of a 0.5 s `gpuplan status`); else, and
    with no ARGS, the whole CLI on `app`. Built once per process each: main() called again (tests
    run the CLI in-process) must not add every command a second time, which made each later call
    slower."""
    import importlib

    from gpuplan.cli import helptext

    module = _module_for(args) if args is not None else None
    if module not in _commands:
        if module is None:
            group = app
            if not (app.registered_commands or app.registered_groups):
                for name in _MODULES:
                    importlib.import_module(f"gpuplan.cli.{name}").register(app)
        else:
            group = _new_app()
            importlib.import_module(f"gpuplan.cli.{module}").register(group)
        _annotations_once(group)
        _commands[module] = helptext.readable(typer.main.get_command(group))
    return _commands[module]


def _annotations_once(group: typer.Typer) -> None:
    """Every command's annotations evaluated once, in place. With `from __future__ import
    annotations` each is a string, and typer evaluates every one of them twice per command
    (inspect.signature(eval_str=True), then typing.get_type_hints): about 1,000 evals, a third
    of `gpuplan --help` (issue 47). inspect.get_annotations(eval_str=True) is what the first of
    those does, so typer sees the very objects it would have made."""
    import inspect

    callbacks = [c.callback for c in group.registered_commands]
    callbacks.append(group.registered_callback.callback if group.registered_callback else None)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _annotations_once(sub.typer_instance)
    for f in callbacks:
        if f is not None and any(isinstance(a, str) for a in getattr(f, "__annotations__", {}).values()):
            f.__annotations__ = inspect.get_annotations(f, eval_str=True)


def _click_exception() -> type[Exception]:
    """The base class of typer's usage errors (bad option, missing argument, unknown command)."""
    try:  # recent typer vendors click; older typer used click itself
        from typer._click.exceptions import ClickException
    except ImportError:
        from click.exceptions import ClickException
    return ClickException


def _plain(text: str) -> str:
    from gpuplan.userfiles import printable

    return printable(text)


def _survive_narrow_encodings() -> None:
    """Under PYTHONIOENCODING=ascii (or a C locale) yen signs and ellipses are replaced, not fatal."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="replace")
        except (AttributeError, ValueError):  # not a TextIOWrapper (tests capture into StringIO)
            pass


def _quiet_libraries() -> None:
    """SDK and paramiko log records (an unreachable host's traceback, 32 lines of Azure retry
    log) reach stderr through logging's last-resort handler; gpuplan says what went wrong in
    its own one line instead. --debug shows them again."""
    import logging

    root = logging.getLogger()
    if not any(isinstance(h, logging.NullHandler) for h in root.handlers):
        root.addHandler(logging.NullHandler())


class _OutputError(OSError):
    """Writing the command's output failed: stdout closed, full, or a pipe nobody reads."""


class _Output:
    """sys.stdout as the CLI writes it: a failed write or flush is an _OutputError, so that the
    one place that reports errors tells the output failing from any other OSError."""

    def __init__(self, stream) -> None:
        self._stream = stream  # None: started with stdout closed (`>&-`)

    def _closed(self) -> _OutputError:
        import errno

        return _OutputError(errno.EBADF, "standard output is closed")

    def write(self, text: str) -> int:
        if self._stream is None:
            raise self._closed()
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise _OutputError(exc.errno, exc.strerror) from None

    def flush(self) -> None:
        if self._stream is None:
            return
        try:
            self._stream.flush()
        except OSError as exc:
            raise _OutputError(exc.errno, exc.strerror) from None

    def isatty(self) -> bool:
        return self._stream is not None and self._stream.isatty()

    def __getattr__(self, name: str):
        if self._stream is None:
            raise AttributeError(name)
        return getattr(self._stream, name)


def _output_failed(exc: OSError) -> None:
    """stdout closed, full or a pipe whose reader went: one line on stderr (none for a closed
    pipe, as `head` users expect), exit 1, and no second error when Python flushes at exit."""
    if exc.errno != 32:
        try:
            print(f"gpuplan: error: cannot write the output ({exc.strerror or exc}); nothing else went wrong",
                  file=sys.stderr)
        except (OSError, ValueError, AttributeError):
            pass
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno())  # type: ignore[union-attr]
    except (OSError, ValueError, AttributeError):
        pass
    sys.exit(1)


def _state_files() -> set[Path] | None:
    """The files in the state folder now (None: no state folder yet, or none can be named)."""
    try:
        from gpuplan import paths

        folder = paths.state_dir()
        return {p for p in folder.rglob("*")} if folder.is_dir() else None
    except Exception:  # a GPUPLAN_HOME that cannot be used: the command says so itself
        return set()


def _open_elsewhere(path: Path) -> bool:
    """Whether a process other than this one has `path` open (Linux /proc; elsewhere: assumed so)."""
    proc = Path("/proc")
    if not (proc / "self" / "fd").is_dir():
        return True
    target, me = str(path.resolve()), os.getpid()
    for pid in proc.iterdir():
        if not pid.name.isdigit() or int(pid.name) == me:
            continue
        try:
            if any(os.readlink(fd) == target for fd in (pid / "fd").iterdir()):
                return True
        except OSError:  # gone, or not ours to look at
            continue
    return False


def _undo_refused(before: set[Path] | None) -> None:
    """A refused command writes nothing: what it made in the state folder before it was refused
    goes (an empty state.db, a cluster's lock file, the state folder itself); a database with a
    row in it, or any other new file, is kept."""
    import shutil

    from gpuplan import paths
    from gpuplan.store.state import file_holds_rows

    try:
        folder = paths.state_dir()
        made = {p for p in folder.rglob("*")} - (before or set()) if folder.is_dir() else set()
        db = folder / "state.db"
        if db in made and _open_elsewhere(db):  # another command made it or works in it now: it stays
            return
        if db in made and file_holds_rows(db) is not False:  # rows in it, or unreadable: it stays
            return
        allowed = {db, db.with_name("state.db-journal"), db.with_name("state.db-wal"), db.with_name("state.db-shm"),
                   folder / "installation-id", folder / "locks"}
        if any(p not in allowed and not (p.parent == folder / "locks" and p.suffix == ".lock") for p in made):
            return
        if before is None:
            shutil.rmtree(folder, ignore_errors=True)
            return
        for p in sorted(made, reverse=True):
            if p.is_dir():
                p.rmdir()
            else:
                p.unlink(missing_ok=True)
    except OSError:
        pass


_whole_process = False


def process_ends_with_command() -> bool:
    """Whether this process is the gpuplan command itself (main() called without argv: the
    console script, `python -m gpuplan`), which exits when the command ends; not a caller
    running commands in its own process (the tests)."""
    return _whole_process


def main(argv: list[str] | None = None) -> None:
    global _whole_process
    _whole_process = argv is None
    args = list(sys.argv[1:] if argv is None else argv)
    command = _register_commands(args)
    if not isinstance(sys.stdout, _Output):
        sys.stdout = _Output(sys.stdout)
    _survive_narrow_encodings()
    _quiet_libraries()
    before = _state_files()
    from gpuplan.cli import shapes

    args = shapes.json_alias(command, args)
    try:
        code = command.main(args=args, prog_name="gpuplan", standalone_mode=False)
        if isinstance(code, int) and code:  # typer.Exit(code), --help and `gpuplan ssh` exit codes
            sys.exit(code)
    except _click_exception() as exc:  # typer's own usage errors: one line too, not a box
        if type(exc).__name__ == "NoArgsIsHelpError":  # `gpuplan` alone: the help is already printed
            sys.exit(exc.exit_code)
        ctx = getattr(exc, "ctx", None)
        where = f"; see `{ctx.command_path} --help`" if ctx is not None else ""
        print(f"gpuplan: error: {_plain(' '.join(exc.format_message().split()).rstrip('.'))}{where}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("gpuplan: aborted", file=sys.stderr)
        sys.exit(1)
    except GpuplanError as exc:
        if exc.exit_code == 2:
            _undo_refused(before)
        if _debug:  # the traceback, and still the exit code the error has (2 for bad input)
            import traceback

            traceback.print_exc()
            if exc.detail:
                print(f"gpuplan: the remote output:\n{exc.detail}", file=sys.stderr)
        from gpuplan.errors import Mistakes
        from gpuplan.fleet.preflight import Problems

        if isinstance(exc, Mistakes) and len(exc.lines) > 1:  # every mistake of a file: a line each
            print(f"gpuplan: error: {_plain(exc.where)} has {len(exc.lines)} mistakes; fix them all:", file=sys.stderr)
            for line in exc.lines:
                print(f"  - {_plain(line)}", file=sys.stderr)
        elif isinstance(exc, Problems) and len(exc.problems) > 1:  # one short block: a line each
            print(f"gpuplan: error: {exc.doing} cannot start; fix these {len(exc.problems)} first:", file=sys.stderr)
            for p in exc.problems:
                print(f"  - {_plain(p.line)}", file=sys.stderr)
        else:
            print(f"gpuplan: error: {_plain(str(exc))}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("gpuplan: interrupted; run `gpuplan teardown` to remove anything half-created", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # a bug or an unmapped SDK error: one line unless --debug
        if isinstance(exc, _OutputError):
            _output_failed(exc)
        if _debug:
            raise
        print(
            f"gpuplan: unexpected error: {type(exc).__name__}: {_plain(str(exc))} (rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        sys.exit(1)
    finally:
        from gpuplan import team

        team.reset()  # the project a command named is its own (in-process callers run many)
