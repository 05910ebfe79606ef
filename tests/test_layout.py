"""The layout keeps its arrows one way: planning imports nothing from operating or the CLI;
only the CLI imports typer or rich; the core imports no cloud SDK at module level."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "gpuplan"
SDKS = ("boto3", "botocore", "azure", "paramiko", "torch", "pandas", "scipy", "matplotlib")


def imports(path: Path, top_level_only: bool = False) -> set[str]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def test_planning_never_imports_operating_or_the_cli():
    files = sorted((PKG / "planning").glob("*.py"))
    assert len(files) >= 10
    for path in files:
        bad = sorted(m for m in imports(path) if m.startswith(("gpuplan.operating", "gpuplan.cli", "providers")))
        assert not bad, f"{path.name} imports {bad}"


def test_only_the_cli_knows_typer_and_rich_and_the_core_loads_no_sdk_at_import():
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if rel.parts[0] in ("cli", "jobs"):
            continue
        assert not any(m.split(".")[0] in ("typer", "rich") for m in imports(path)), rel
        assert not any(m.split(".")[0] in SDKS for m in imports(path, top_level_only=True)), rel


def test_scheduling_imports_nothing_of_gpuplan_and_the_optimizer_is_split_along_its_seams():
    assert not [m for m in imports(PKG / "planning" / "scheduling.py") if m.startswith("gpuplan")]
    for module in ("scheduling", "candidates", "ranking", "outcomes", "billing", "saved_plan"):
        assert (PKG / "planning" / f"{module}.py").is_file(), module
    # ranking reads no candidate internals at run time; the optimizer only runs the parts
    assert not [m for m in imports(PKG / "planning" / "ranking.py", top_level_only=True)
                if m.startswith("gpuplan.planning.candidates")]
    assert len((PKG / "planning" / "optimizer.py").read_text().splitlines()) < 300


def test_the_test_script_checks_types_against_a_baseline_that_may_only_shrink():
    root = PKG.parent
    script = (root / "scripts" / "test.sh").read_text()
    assert "scripts/mypy_baseline.py" in script and script.index(".venv/bin/python scripts/mypy_baseline.py") < script.index("exec .venv/bin/python -m pytest")
    assert '"mypy' in (root / "pyproject.toml").read_text()
    baseline = (root / "scripts" / "mypy-baseline.txt").read_text()
    assert "gpuplan/planning/" not in baseline  # planning has none: it is checked strictly


# The DOK run backend (and the `gpuplan dok` commands, which are DOK's own) may speak of DOK;
# everything else asks the run-backend registry (operating/backends.py), never a cluster's name.
DOK_OWN = {"operating/dok_runs.py", "operating/dok_batch.py", "operating/backends.py", "cli/sakura.py"}
DOK_SWITCH = (r"""[!=]=\s*["']dok""", r"""["']dok["']\s*[!=]=""", r"""in\s*\(\s*["']dok""", r"is_dok\(", "DOK_CLUSTER",
              r"[!=]=\s*dok_runs\.CLUSTER", r"dok_runs\.CLUSTER\s*[!=]=", r"""startswith\(\s*["']dok""")


def test_no_dok_switch_is_left_outside_the_dok_backend():
    import re

    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel in DOK_OWN:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if any(re.search(p, line) for p in DOK_SWITCH):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert found == []


# Every run backend's own modules (its adapter in operating/backends.py, the contract, and its code);
# outside them no code compares a backend's name or its pseudo-cluster (issue 41): it asks the
# registry (backends.for_target, backends.of(row)) and the backend's declared capabilities.
BACKEND_OWN = {
    "ray": {"operating/backends.py", "operating/runner.py", "operating/engine.py", "operating/ray_driver.py",
            "operating/containers.py"},
    "dok": DOK_OWN,
    "slurm": {"operating/backends.py", "operating/slurm_runs.py", "cli/slurm.py"},
}


def _name_switches(name: str) -> tuple[str, ...]:
    return (rf"""[!=]=\s*["']{name}[:"']""", rf"""["']{name}:?["']\s*[!=]=""", rf"""in\s*[(\[{{]\s*["']{name}[:"']""",
            rf"is_{name}\(", rf"[!=]=\s*{name}_runs\.CLUSTER", rf"{name}_runs\.CLUSTER\s*[!=]=",
            rf"""startswith\(\s*["']{name}[:"']""", rf"""\.(name|backend)\s*[!=]=\s*["']{name}["']""")


def test_no_backend_name_is_compared_outside_its_backend():
    import re

    from gpuplan.operating import backends

    assert set(BACKEND_OWN) <= set(backends.registered())  # each built-in backend is registered as a plugin is
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        for name, own in BACKEND_OWN.items():
            if rel in own:
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if "playbook" in line:  # the `ray` playbook (playbooks/ray), not the backend
                    continue
                if any(re.search(p, line) for p in _name_switches(name)):
                    found.append(f"{rel}:{n}: {line.strip()}")
    assert found == []


def test_the_run_modules_import_no_circle():
    """runner (Ray), dok_runs (DOK), backends (the registry) and launcher: each arrow one way."""
    names = ("runner", "dok_runs", "dok_batch", "backends", "batches", "launcher", "engine", "containers")
    graph = {n: {m.rsplit(".", 1)[-1] for m in imports(PKG / "operating" / f"{n}.py")
                 if m.startswith("gpuplan.operating") and m.rsplit(".", 1)[-1] in names} - {n} for n in names}
    # the modules a module may reach by following imports must not include itself
    for start in names:
        seen, todo = set(), list(graph[start])
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(graph[m])
        assert start not in seen, f"{start} imports itself back through {sorted(seen)}"
