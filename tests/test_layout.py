"""The layout keeps its arrows one way: planning and the market import nothing that makes machines,
runs batches or talks to people; only the CLI imports typer or rich; the core imports no cloud SDK at
module level; no module imports itself back; no folder grows past the point where its name says
what is in it."""

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


SIDE_EFFECTS = ("gpuplan.run", "gpuplan.fleet", "gpuplan.hosts", "gpuplan.measuring", "gpuplan.store", "gpuplan.cli",
                "gpuplan.providers", "providers")


def test_planning_and_the_market_never_import_what_makes_machines_runs_batches_or_talks():
    files = sorted((PKG / "planning").glob("*.py")) + sorted((PKG / "market").glob("*.py"))
    assert len(files) >= 16
    for path in files:
        bad = sorted(m for m in imports(path) if m.startswith(SIDE_EFFECTS))
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
    for module in ("scheduling", "candidates", "ranking", "outcomes", "saved_plan"):
        assert (PKG / "planning" / f"{module}.py").is_file(), module
    assert (PKG / "market" / "billing.py").is_file()
    # ranking reads no candidate internals at run time; the optimizer only runs the parts
    assert not [m for m in imports(PKG / "planning" / "ranking.py", top_level_only=True)
                if m.startswith("gpuplan.planning.candidates")]
    assert len((PKG / "planning" / "optimizer.py").read_text().splitlines()) < 300


def test_the_test_script_checks_types_against_a_baseline_that_may_only_shrink():
    root = PKG.parent
    script = (root / "scripts" / "test.sh").read_text()
    assert "scripts/mypy_baseline.py" in script and script.index(".venv/bin/python scripts/mypy_baseline.py") < script.index(".venv/bin/python -m pytest -n")
    assert '"mypy' in (root / "pyproject.toml").read_text()
    baseline = (root / "scripts" / "mypy-baseline.txt").read_text()
    assert "gpuplan/planning/" not in baseline  # planning has none: it is checked strictly


# The DOK run backend (and the `gpuplan dok` commands, which are DOK's own) may speak of DOK;
# everything else asks the run-backend registry (run/backends.py), never a cluster's name.
DOK_OWN = {"run/dok/dok_runs.py", "run/dok/dok_batch.py", "run/dok/backend.py", "cli/sakura.py"}
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


# Every run backend's own modules (its folder run/<name>/: its adapter backend.py and its code);
# outside them no code compares a backend's name or its pseudo-cluster (issue 41), not even the
# contract (run/backends.py): it asks the registry (backends.for_target, backends.of(row)) and the
# backend's declared capabilities.
BACKEND_OWN = {
    "ray": {"run/ray/backend.py", "run/ray/runner.py", "run/ray/engine.py", "run/ray/ray_driver.py",
            "run/ray/containers.py"},
    "dok": DOK_OWN,
    "slurm": {"run/slurm/backend.py", "run/slurm/slurm_runs.py"},
}


def _name_switches(name: str) -> tuple[str, ...]:
    return (rf"""[!=]=\s*["']{name}[:"']""", rf"""["']{name}:?["']\s*[!=]=""", rf"""in\s*[(\[{{]\s*["']{name}[:"']""",
            rf"is_{name}\(", rf"[!=]=\s*{name}_runs\.CLUSTER", rf"{name}_runs\.CLUSTER\s*[!=]=",
            rf"""startswith\(\s*["']{name}[:"']""", rf"""\.(name|backend)\s*[!=]=\s*["']{name}["']""")


def test_no_backend_name_is_compared_outside_its_backend():
    import re

    from gpuplan.run import backends

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


def module_graph() -> dict[str, set[str]]:
    """Every module of gpuplan (and the providers, installed as gpuplan.providers) and the modules it
    imports, at any depth of the file. `from gpuplan.cli import shapes` is an arrow to the module
    gpuplan.cli.shapes, not to the package gpuplan.cli (whose __init__ Python runs first anyway)."""
    root = PKG.parent
    paths = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        paths[".".join(parts)] = path
    for path in sorted((root / "providers").glob("*.py")):
        if path.stem != "__init__":
            paths[f"gpuplan.providers.{path.stem}"] = path
    graph = {}
    for name, path in paths.items():
        arrows = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                arrows |= {a.name for a in node.names if a.name in paths}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = {f"{node.module}.{a.name}" for a in node.names} & paths.keys()
                names = {a.name for a in node.names if f"{node.module}.{a.name}" not in paths}
                arrows |= subs
                if names and node.module in paths:
                    arrows.add(node.module)
        graph[name] = arrows - {name}
    return graph


def test_no_module_of_gpuplan_imports_itself_back():
    """An import circle anywhere (a module reaching itself by following imports, at module level or
    inside a function) is a seam in the wrong place: the shared part belongs in a module of its own."""
    graph = module_graph()
    assert {"gpuplan.run.backends", "gpuplan.run.ray.runner", "gpuplan.cli.jobs", "gpuplan.store.state"} <= graph.keys()
    circles = []
    for start in sorted(graph):
        seen, todo = set(), list(graph[start])
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(graph[m])
        if start in seen:
            circles.append(start)
    assert circles == []


def test_no_folder_of_gpuplan_holds_more_than_15_modules():
    sizes = {d.relative_to(PKG).as_posix(): len([p for p in d.glob("*.py") if p.name != "__init__.py"])
             for d in [PKG, *PKG.rglob("*")] if d.is_dir() and d.name != "__pycache__"}
    assert sizes["run"] >= 4 and sizes["fleet"] >= 8
    assert {d: n for d, n in sizes.items() if n > 15} == {}


def _backend_folders() -> set[str]:
    """The run backends' folders: each sub-folder of gpuplan/run holding an adapter (backend.py)."""
    return {d.name for d in (PKG / "run").iterdir() if (d / "backend.py").is_file()}


def test_each_backend_is_one_folder_with_its_adapter_registered_by_one_entry_point():
    """A new backend is one folder and one entry point (issue 41): the built-in ones' adapters live
    beside their code, registered as a plugin's would be, and no backend's folder reaches into
    another's (what they share is in run/, the contract's folder)."""
    import tomllib

    from gpuplan.run import backends

    declared = tomllib.loads((PKG.parent / "pyproject.toml").read_text())["project"]["entry-points"][backends.GROUP]
    assert set(declared) == _backend_folders() == set(BACKEND_OWN)
    for name, target in declared.items():
        assert target == f"gpuplan.run.{name}.backend:{type(backends.get(name)).__name__}"
        assert type(backends.get(name)).__module__ == f"gpuplan.run.{name}.backend"
    for name in _backend_folders():
        for path in sorted((PKG / "run" / name).glob("*.py")):
            others = sorted(m for m in imports(path) for o in _backend_folders() - {name}
                            if m == f"gpuplan.run.{o}" or m.startswith(f"gpuplan.run.{o}."))
            assert others == [], f"run/{name}/{path.name} imports {others}"
    # the contract and the batch service import no backend's module
    assert not [m for m in imports(PKG / "run" / "backends.py")
                for o in _backend_folders() if m.startswith(f"gpuplan.run.{o}.")]


# a backend's own commands may use its code: `gpuplan dok ...` is DOK's (cli/sakura.py)
CLI_OF_A_BACKEND = {"cli/sakura.py": "dok"}


def test_the_cli_imports_no_backends_module():
    """The CLI reaches every backend through the contract and the batch service (run/backends.py):
    `gpuplan run --torchrun`'s check, a private registry's login, a lost node's cause and the
    dashboard included."""
    found = []
    for path in sorted((PKG / "cli").glob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        for m in sorted(imports(path)):
            for name in _backend_folders() - {CLI_OF_A_BACKEND.get(rel)}:
                if m.startswith(f"gpuplan.run.{name}.") or m == f"gpuplan.run.{name}":
                    found.append(f"{rel}: {m}")
    assert found == []


def _bodies(path: Path) -> dict[str, str]:
    """Each function of a module (methods too) by its qualified name: its body as the AST has it,
    without its docstring."""
    out = {}
    tree = ast.parse(path.read_text())

    def walk(node, prefix=""):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = child.body
                if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                    body = body[1:]
                if len(body) > 1 or (body and not isinstance(body[0], (ast.Return, ast.Pass, ast.Raise))):
                    out[prefix + child.name] = ast.dump(ast.Module(body=body, type_ignores=[]))
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")

    walk(tree)
    return out


def test_no_function_of_the_run_wing_is_written_twice():
    """What two backends share is written once, in run/ (task_batches.py for the task backends,
    items.py for every backend's job vocabulary): no function or method of gpuplan/run has the
    body of another (one-statement ones aside: a `return X` may well repeat)."""
    seen: dict[str, str] = {}
    twice = []
    for path in sorted((PKG / "run").rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        for name, body in _bodies(path).items():
            if body in seen:
                twice.append(f"{rel}:{name} = {seen[body]}")
            else:
                seen[body] = f"{rel}:{name}"
    assert twice == []


def _run_with_the_test_scripts_exit_trap(body: str, tmp_path) -> tuple[int, bool]:
    """Runs BODY under scripts/test.sh's own opening (set -euo pipefail, its scratch folder and exit
    trap, taken from the script); returns the exit status and whether the scratch folder is gone."""
    import subprocess

    script = (PKG.parent / "scripts" / "test.sh").read_text()
    opening = script[script.index("set -euo pipefail"):script.index("trap cleanup EXIT") + len("trap cleanup EXIT")]
    marker = tmp_path / "work-folder"
    program = "\n".join([opening.replace('cd "$(dirname "$0")/.."', ":"), f'echo "$work" > {marker}', body])
    done = subprocess.run(["bash", "-c", program], timeout=30)
    from pathlib import Path
    return done.returncode, not Path(marker.read_text().strip()).exists()


def test_the_test_script_exits_with_the_suites_status_and_removes_its_scratch_folder(tmp_path):
    # CI failed with exit 2 after all tests passed: the exit trap's `kill` had no job left to stop
    assert _run_with_the_test_scripts_exit_trap("sleep 0.1 & wait; true", tmp_path) == (0, True)
    assert _run_with_the_test_scripts_exit_trap("sleep 0.1 & wait; exit 3", tmp_path) == (3, True)
    # a set-up job still running is stopped, and the status is still the script's
    assert _run_with_the_test_scripts_exit_trap("sleep 60 & true", tmp_path) == (0, True)
