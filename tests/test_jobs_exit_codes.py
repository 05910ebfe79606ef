"""Every exit code means one thing, on every command (issue 41: two launches started together
made the second exit 6, "busy", the code launch documents for "capped"). The table in
docs/commands.md is the meaning; each code is set by one exception class (its subclasses share
its meaning) or written as itself where nothing else fits, and never one the table lacks."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def documented() -> dict[int, str]:
    text = (ROOT / "docs" / "commands.md").read_text()
    table = text[text.index("## Bad input, errors and exit codes"):]
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d+) \| (.+) \|$", table, re.M)}


def sources() -> list[Path]:
    # gpuplan/jobs/ are the reference jobs: programs of their own, run on the GPU machines
    return [p for p in sorted((ROOT / "gpuplan").rglob("*.py")) + sorted((ROOT / "providers").glob("*.py"))
            if "jobs" not in p.relative_to(ROOT).parts[1:2]]


def test_each_code_is_set_by_one_exception_class_and_is_in_the_table():
    table = documented()
    assert {0, 1, 2, 3, 4, 5, 6, 7, 130} <= set(table)
    setters: dict[int, list[str]] = {}
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            for stmt in node.body:
                if (isinstance(stmt, ast.Assign) and [getattr(t, "id", "") for t in stmt.targets] == ["exit_code"]
                        and isinstance(stmt.value, ast.Constant)):
                    setters.setdefault(stmt.value.value, []).append(f"{path.relative_to(ROOT)}:{node.name}")
    assert set(setters) <= set(table), {c: s for c, s in setters.items() if c not in table}
    assert {c: s for c, s in setters.items() if len(s) > 1} == {}  # one class a code: its subclasses share it
    from gpuplan import errors
    from gpuplan.run import items

    assert (errors.UsageError.exit_code, errors.ProviderError.exit_code, errors.RemoteError.exit_code) == (2, 3, 4)
    assert (items.JobsFailed.exit_code, items.Capped.exit_code, errors.Busy.exit_code) == (5, 6, 7)
    assert "yen cap" in table[6] and "another gpuplan command holds" in table[7] and "failed" in table[5]


def test_a_code_written_as_itself_is_one_the_table_has():
    table = documented()
    written = []
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("Exit", "exit")
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, int)):
                written.append((node.args[0].value, f"{path.relative_to(ROOT)}:{node.lineno}"))
    assert written  # typer.Exit(2) of `check`, 130 on Ctrl-C, ...
    assert [w for w in written if w[0] not in table] == []
