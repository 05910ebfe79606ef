"""docs/cli.md is what scripts/cli_docs.py makes from the CLI today, names every command and option,
and does not depend on the terminal it was made on."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "cli.md"


def _generator():
    spec = importlib.util.spec_from_file_location("cli_docs", ROOT / "scripts" / "cli_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_cli_md_is_current():
    text = _generator().render()
    assert DOC.read_text(encoding="utf-8") == text, \
        "docs/cli.md is out of date with the CLI: run `.venv/bin/python scripts/cli_docs.py > docs/cli.md` and commit it"


def test_it_names_every_command_and_option():
    gen = _generator()
    text = DOC.read_text(encoding="utf-8")
    sections = text.split("\n## ")
    commands = list(gen.walk(gen.root_command()))
    assert len(commands) > 20  # every group and subcommand, not the root alone
    for path, command in commands:
        name = " ".join(path)
        section = next((s for s in sections if s.startswith(name + "\n")), None)
        assert section is not None, f"docs/cli.md has no section for `{name}`"
        for param in command.params:
            if param.hidden:
                continue
            shown = param.metavar if param.param_type_name == "argument" else param.opts[0]
            assert f"`{shown}" in section, f"docs/cli.md's `{name}` does not name {shown}"
    for must in ("## gpuplan estimate\n", "## gpuplan dok submit\n", "## gpuplan catalog refresh\n",
                 "`--deadline DURATION`", "`--objective balanced|cost|time` (default: `balanced`)", "docs/json.md"):
        assert must in text


def test_the_same_text_on_any_terminal_and_check_says_what_to_run(tmp_path):
    """A fresh process on a 40-column terminal with colors forced writes the same file; --check
    passes on it and fails in one line, naming the command, on a stale copy."""
    env = {**os.environ, "COLUMNS": "40", "TERM": "xterm-256color", "FORCE_COLOR": "1"}
    made = subprocess.run([sys.executable, "scripts/cli_docs.py"], cwd=ROOT, env=env, capture_output=True, timeout=60)
    assert made.returncode == 0, made.stderr
    assert made.stdout.decode() == _generator().render()
    assert b"\x1b[" not in made.stdout
    gen = _generator()
    stale = tmp_path / "cli.md"
    stale.write_text(made.stdout.decode().replace("## gpuplan estimate\n", "## gpuplan estimate (old)\n"))
    assert gen.check(stale) == 1
    fresh = tmp_path / "fresh.md"
    fresh.write_bytes(made.stdout)
    assert gen.check(fresh) == 0


def test_check_line(tmp_path, capsys):
    gen = _generator()
    stale = tmp_path / "cli.md"
    stale.write_text("# old\n")
    assert gen.check(stale) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "run `.venv/bin/python scripts/cli_docs.py > docs/cli.md`" in err[0]


def test_provider_lists_come_from_the_registries():
    """Issue 46: `catalog --provider`, `--infra` and docs/batch.md's `infra` row list every provider
    of the entry points (gcp and sakura-phy were missing) and the Slurm backend, each from the
    registries, so a provider added as a plugin shows up in them."""
    gen = _generator()
    from gpuplan.fleet import provider as providers

    names = providers.available()
    assert {"gcp", "sakura-phy", "aws", "azure", "sakura", "baremetal"} <= set(names)
    tree = {" ".join(path): command for path, command in gen.walk(gen.root_command())}
    helps = {f"{path} {p.opts[0]}": p.help for path, c in tree.items() for p in c.params if p.opts}
    for option in ("gpuplan catalog --provider", "gpuplan launch --infra", "gpuplan probe --infra",
                   "gpuplan estimate --provider"):
        assert "{" not in helps[option], helps[option]
        for name in (*names, "slurm"):
            assert name in helps[option], (option, name)
    assert "sakura (= dok, vrt, koukaryoku)" in helps["gpuplan launch --infra"]
    row = gen.batch_infra_row()
    assert "`gcp`" in row and "`slurm`" in row
    assert row in (ROOT / "docs" / "batch.md").read_text(encoding="utf-8"), \
        f"docs/batch.md's infra row is out of date; it should read:\n{row}"


def test_a_plugin_provider_joins_the_lists(monkeypatch):
    from gpuplan.cli import helptext
    from gpuplan.fleet import provider as providers

    providers.override("lambda-labs", lambda config: None)
    try:
        made = helptext.lists()
    finally:
        providers.override("lambda-labs", None)
    assert "lambda-labs" in made["providers"] and "lambda-labs" in made["infra"]
