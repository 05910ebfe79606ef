#!/usr/bin/env python3
"""Writes docs/cli.md from the CLI itself: every command and subcommand, its usage, its help and
each parameter with its metavar, default and help, read from the click command tree typer builds.

    .venv/bin/python scripts/cli_docs.py > docs/cli.md     # after changing a command or an option
    .venv/bin/python scripts/cli_docs.py --check           # exit 1, one line, when docs/cli.md is stale

The text depends on nothing but the command tree: no terminal width, no colors, no rich (the
help formatter is not used at all), commands in the order the CLI registers them.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "cli.md"
REGENERATE = ".venv/bin/python scripts/cli_docs.py > docs/cli.md"


def root_command():
    """The click command `gpuplan` runs: every command registered, help made readable."""
    sys.path.insert(0, str(ROOT))  # a checkout's gpuplan, installed or not
    from gpuplan.cli import _register_commands, helptext

    return helptext.fill_lists(_register_commands())  # the provider lists, made from the registries


def batch_infra_row() -> str:
    """docs/batch.md's `infra` row, from the registries as `--infra`'s help (tests/test_cli_docs.py
    holds the doc to it)."""
    sys.path.insert(0, str(ROOT))
    from gpuplan.run.launcher import infra_names

    names = []
    for name, also in infra_names():
        names.append(f"`{name}`" + (f" (`{'`, `'.join(also)}`)" if also else "")
                     + (" (a cluster of slurm.yaml: [slurm.md](slurm.md))" if name == "slurm" else ""))
    return f"| `infra` | providers allowed: {', '.join(names)} | every one |"


def walk(command, path: tuple[str, ...] = ("gpuplan",)):
    """(path, command) for the command and every visible subcommand below it, depth first."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        if not getattr(sub, "hidden", False):
            yield from walk(sub, (*path, name))


def _text(text: str | None) -> str:
    # helptext.readable() escapes "[plot]" as "\[plot]" for rich; markdown wants it plain
    return (text or "").replace("\\[", "[").strip()


def _usage(path: tuple[str, ...], command) -> str:
    pieces = [" ".join(path)]
    if any(p.param_type_name == "option" and not p.hidden for p in command.params):
        pieces.append("[OPTIONS]")
    for p in command.params:
        if p.param_type_name != "argument":
            continue
        word = p.metavar or p.name.upper()
        if p.nargs == -1:
            word += "..."
        pieces.append(word if p.required else f"[{word}]")
    if getattr(command, "commands", None):
        pieces.append("COMMAND [ARGS]...")
    return " ".join(pieces)


def _default(param) -> str | None:
    """The default as the user would type it, or None when there is nothing worth saying."""
    value = param.default
    if callable(value):  # computed when the command runs: nothing fixed to print
        return None
    if value is None or value == () or value == []:
        return None
    if getattr(param, "is_flag", False) and value is False:
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _param_line(param) -> str:
    if param.param_type_name == "argument":
        name = f"`{param.metavar or param.name.upper()}`"
    else:
        names = ", ".join([*param.opts, *param.secondary_opts])
        flag = getattr(param, "is_flag", False) or getattr(param, "count", False)
        name = f"`{names}`" if flag or not param.metavar else f"`{names} {param.metavar}`"
    notes = []
    if param.required:
        notes.append("required")
    if getattr(param, "multiple", False) or (param.param_type_name == "argument" and param.nargs == -1):
        notes.append("repeatable")
    default = _default(param)
    if default is not None:
        notes.append(f"default: `{default}`")
    if getattr(param, "envvar", None):
        notes.append(f"env: `{param.envvar}`")
    line = f"- {name}"
    if notes:
        line += f" ({'; '.join(notes)})"
    help_text = " ".join(_text(getattr(param, "help", None)).split())
    return f"{line}: {help_text}" if help_text else line


def _anchor(path: tuple[str, ...]) -> str:
    return "-".join(path)  # GitHub's anchor of the heading "gpuplan catalog refresh"


def render() -> str:
    commands = list(walk(root_command()))
    out = [
        "# gpuplan command line",
        "",
        "Every command and option, generated from the CLI itself by `scripts/cli_docs.py`; do not edit",
        f"by hand: after changing a command or an option run `{REGENERATE}`",
        "(tests/test_cli_docs.py fails until you do). `gpuplan COMMAND --help` says the same on a terminal.",
        "JSON output: [docs/json.md](json.md). What the commands do, in words: [docs/commands.md](commands.md).",
        "",
        "## Commands",
        "",
    ]
    for path, command in commands[1:]:
        summary = _text(command.short_help or command.help).split("\n\n")[0]
        summary = " ".join(summary.split())
        out.append(f"- [`{' '.join(path)}`](#{_anchor(path)}): {summary}")
    for path, command in commands:
        out += ["", f"## {' '.join(path)}", "", "```", _usage(path, command), "```", ""]
        help_text = _text(command.help)
        if help_text:
            out += [help_text, ""]
        params = [p for p in command.params if not getattr(p, "hidden", False)]
        arguments = [p for p in params if p.param_type_name == "argument"]
        options = [p for p in params if p.param_type_name != "argument"]
        if arguments:
            out += ["Arguments:", "", *(_param_line(p) for p in arguments), ""]
        if options:
            out += ["Options:", "", *(_param_line(p) for p in options), "- `--help`: Show this message and exit.", ""]
        subs = [name for name, sub in getattr(command, "commands", {}).items() if not getattr(sub, "hidden", False)]
        if subs:
            out += ["Subcommands: " + ", ".join(f"[`{n}`](#{_anchor((*path, n))})" for n in subs) + ".", ""]
        if out[-1] == "":
            out.pop()
    return "\n".join(out) + "\n"


def check(doc: Path = DOC) -> int:
    """0 when `doc` is what render() writes, else 1 with one line saying what to run."""
    current = doc.read_text(encoding="utf-8") if doc.exists() else ""
    if current == render():
        return 0
    print(f"{doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc} is out of date with the CLI: "
          f"run `{REGENERATE}` and commit it", file=sys.stderr)
    return 1


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        return check()
    if argv:
        print("usage: scripts/cli_docs.py [--check]", file=sys.stderr)
        return 2
    sys.stdout.buffer.write(render().encode())  # UTF-8 (高火力) whatever the locale
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
