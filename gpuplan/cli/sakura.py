"""`gpuplan dok`: 高火力 DOK container tasks (submit items as tasks, status, cancel, artifacts);
`gpuplan phy`: the 高火力 PHY servers the account rents (list, reinstall an OS)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from gpuplan.cli import shapes
from gpuplan.errors import UsageError
from gpuplan.planning import fmt

dok_app = typer.Typer(help="高火力 DOK: run container tasks billed per second (one runs at a time per project).",
                      no_args_is_help=True)
phy_app = typer.Typer(help="高火力 PHY: the bare-metal servers your account rents (claim them with "
                           "`gpuplan provision sakura-phy:phy-h100x8`).", no_args_is_help=True)

RUN_TAG = "gpuplan-run"


def _dok():
    from gpuplan import config
    from gpuplan.providers.sakura_dok import DokClient

    return DokClient(config.provider_config("sakura"))


def _table(title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for c in columns:
        table.add_column(c, overflow="fold")
    for r in rows:
        table.add_row(*(escape(x) for x in r))
    Console(highlight=False).print(table)


@dok_app.command("submit")
def dok_submit(
    command: Annotated[list[str], typer.Argument(help="After --: the container's command; {item} is replaced by each item.")],
    image: Annotated[str, typer.Option("--image", help="The container image to run (any Docker Registry v2; linux/amd64, at most 30 GB).")],
    items: Annotated[Path, typer.Option("--items", help="File with one item per line: one task each (# comments skipped).")],
    plan: Annotated[str, typer.Option("--plan", help="v100-32gb, h100-80gb or h100-8gpu-80gb.")] = "h100-80gb",
    run: Annotated[Optional[str], typer.Option("--run", help="A name for this batch (tags its tasks; default: from the items file).")] = None,
    env: Annotated[Optional[list[str]], typer.Option("--env", help="KEY=VALUE for every task (repeatable; not SAKURA_*); KEY alone: its value from the environment you run gpuplan in.", metavar="KEY[=VALUE]")] = None,
    env_file: Annotated[Optional[Path], typer.Option("--env-file", help="KEY=VALUE lines (# comments) for every task, as --env's; an --env of the same KEY wins.", metavar="FILE")] = None,
    registry: Annotated[Optional[str], typer.Option("--registry", help="The UUID of the registry credentials registered with DOK, for a private image.")] = None,
    time_limit: Annotated[Optional[str], typer.Option("--time-limit", help="Longest a task may run: 2h, 90m (at least 10 min; default 20 days).")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Send the billed tasks without asking.")] = False,
) -> None:
    """Submit one task per item. DOK runs one task at a time per project; the others wait."""
    from gpuplan.cli.jobs import confirm_dok
    from gpuplan.providers.sakura_dok import check_task_input
    from gpuplan.run import items as run_items
    from gpuplan.run.dok import dok_runs
    from gpuplan.store.state import State
    from gpuplan.units import parse_duration

    if not command:
        raise UsageError("give the command after --, e.g. gpuplan dok submit --image IMG --items clips.txt -- python run.py {item}")
    values = run_items.read_items(items)
    name = run or re.sub(r"[^A-Za-z0-9_.-]", "-", items.stem)[:40] or "batch"
    from gpuplan.cli.jobs import env_pairs

    environment = env_pairs(env, env_file)
    limit_s = parse_duration(time_limit, "--time-limit") if time_limit else None
    check_task_input(plan, image, environment, limit_s)
    dok = _dok()
    dok.check_credentials()
    # one task per item, whatever the plan: an 8-GPU task here runs one item on all 8 GPUs
    confirm_dok(yes, "dok submit")(dok_runs.spend(plan, len(values), len(values), limit_s))
    state = State.open_default()
    rows = []
    for i, item in enumerate(values):
        with state.journaled("dok-task", f"{name}-{i}", dok_runs.CLUSTER, f"{plan} {image}"):
            task = dok.submit(f"{name}-{i}", image, plan, [part.replace("{item}", item) for part in command],
                              environment=environment, tags=[f"{RUN_TAG}={name}"], time_limit_s=limit_s,
                              registry=registry)
        rows.append((item, task.id, task.status))
    _table(f"dok run {name}: {fmt.plural(len(rows), 'task')} on {plan}", ("item", "task", "status"), rows)
    print(f"one task runs at a time per project (the others wait); `gpuplan dok status --run {name}` follows them")


@dok_app.command("status")
def dok_status(
    run: Annotated[Optional[str], typer.Option("--run", help="Only this batch's tasks.")] = None,
    format: Annotated[str, shapes.format_option()] = "table",
) -> None:
    """The project's tasks and their status (waiting, running, done, error, aborted, canceled)."""
    as_json = shapes.check_format(format)
    tasks = _dok().tasks(f"{RUN_TAG}={run}" if run else None)
    if as_json:
        shapes.emit([shapes.dok_task(t) for t in tasks])
        return
    _table("dok tasks", ("task", "name", "plan", "status", "artifact"),
           [(t.id, t.name, t.plan, t.status, "yes" if t.artifact_id else "-") for t in tasks])
    if not tasks:
        print("no tasks" + (f" tagged {RUN_TAG}={run}" if run else ""))


@dok_app.command("cancel")
def dok_cancel(
    tasks: Annotated[Optional[list[str]], typer.Argument(help="Task ids.")] = None,
    run: Annotated[Optional[str], typer.Option("--run", help="Every unfinished task of this batch.")] = None,
) -> None:
    """Cancel waiting or running tasks (finished ones stay as they are)."""
    dok = _dok()
    if bool(tasks) == bool(run):
        raise UsageError("name task ids or --run NAME (not both)")
    ids = list(tasks or []) or [t.id for t in dok.tasks(f"{RUN_TAG}={run}") if not t.finished]
    for tid in ids:
        t = dok.cancel(tid)
        print(f"{t.name} ({t.id}): {t.status}")


@dok_app.command("logs")
def dok_logs(
    task: Annotated[str, typer.Argument(help="Task id, or its name (`gpuplan dok status` lists them).")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Wait for a waiting task to start, then print its output until it ends.")] = False,
) -> None:
    """Print a task's output from its log stream (DOK streams a task's log only while it runs;
    afterwards its artifact holds what it wrote to SAKURA_ARTIFACT_DIR)."""
    dok = _dok()
    task_id = _task_id(dok, task)
    for text in dok.logs(task_id, follow=follow):
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()


def _task_id(dok, task: str) -> str:
    """A task id as given, or the id of the one task with that name."""
    from gpuplan.errors import ProviderError

    try:
        return dok.task(task).id
    except ProviderError:
        named = [t for t in dok.tasks() if t.name == task]
        if len(named) != 1:
            raise UsageError(f"no DOK task with id or name {task!r}" if not named else
                             f"{len(named)} DOK tasks are named {task!r}: give the task id") from None
        return named[0].id


@dok_app.command("artifacts")
def dok_artifacts(
    run: Annotated[str, typer.Option("--run", help="The batch whose finished tasks' artifacts to fetch.")],
    out: Annotated[Path, typer.Option("--out", help="Folder to write <task name>.tar.gz into.")] = Path("."),
) -> None:
    """Download the artifacts (SAKURA_ARTIFACT_DIR, tar.gz) of a batch's finished tasks; links last 72 hours."""
    from gpuplan.userfiles import check_writable

    check_writable(out, "--out", folder=True)  # before the network, not after it
    dok = _dok()
    tasks = dok.tasks(f"{RUN_TAG}={run}")
    got = [dok.download_artifact(t, out / f"{t.name}.tar.gz") for t in tasks if t.artifact_id]
    waiting = sum(1 for t in tasks if not t.finished)
    print(f"{fmt.plural(len(got), 'artifact')} written to {out}" + (f"; {fmt.plural(waiting, 'task')} not finished yet" if waiting else ""))


def _phy():
    from gpuplan.fleet import lifecycle

    return lifecycle.get_provider("sakura-phy")


@phy_app.command("list")
def phy_list(
    format: Annotated[str, shapes.format_option()] = "table",
) -> None:
    """The servers the account rents, as the PHY API lists them (one API request of the 300 an hour)."""
    as_json = shapes.check_format(format)
    servers = _phy().servers()
    if as_json:
        shapes.emit([shapes.phy_server(s) for s in servers])
        return
    _table("高火力 PHY servers", ("server", "nickname", "plan", "address", "size", "state"),
           [(s.id, s.nickname, s.plan, s.address or "-", s.catalog_name or "-", s.locked or "ready") for s in servers])


@phy_app.command("reinstall")
def phy_reinstall(
    server: Annotated[str, typer.Argument(help="Server id (gpuplan phy list).")],
    os_image: Annotated[str, typer.Option("--os", help="OS image id or the start of its name (Ubuntu 24).")],
    yes: Annotated[bool, typer.Option("-y", "--yes", help="Do not ask.")] = False,
) -> None:
    """Install an OS afresh on a server no cluster holds: everything on its disks is lost. The root
    password is read from GPUPLAN_PHY_PASSWORD, else asked for."""
    import os

    from gpuplan.cli.lifecycle import _need_answer

    password = os.environ.get("GPUPLAN_PHY_PASSWORD")
    if not password and not (sys.stdin is not None and sys.stdin.isatty()):
        raise UsageError("phy reinstall needs the new OS's root password, but stdin is not a terminal to ask it on: "
                         "set GPUPLAN_PHY_PASSWORD")
    _need_answer(yes, f"reinstalling server {server}")
    password = password or typer.prompt("root password for the new OS", hide_input=True, confirmation_prompt=True)
    if not yes and not typer.confirm(f"Reinstall server {server} with {os_image}? Everything on it is erased"):
        raise typer.Abort()
    _phy().reinstall(server, os_image, password)
    print(f"server {server}: OS install started; it leaves the pool of claimable servers until done")


def register(app: typer.Typer) -> None:
    app.add_typer(dok_app, name="dok")
    app.add_typer(phy_app, name="phy")
