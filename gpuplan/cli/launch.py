"""`gpuplan launch BATCH.yaml`: estimate, show the pick and its yen, ask, then provision (or claim,
or send DOK tasks), bootstrap, run the batch, fetch its outputs and tear down: one command from
nothing to a finished batch (gpuplan/run/launcher.py carries it out; docs/batch.md)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from gpuplan import foreign
from gpuplan.errors import UsageError
from gpuplan.planning import fmt

PROJECT_HELP = ("The project the spend counts to and whose monthly budget must hold it (default: the batch file's"
                " project:, else config.yaml's, else default; docs/teams.md).")


def launch(
    batch_file: Annotated[Optional[Path], typer.Argument(help="The batch file, ending in .yaml or .yml (docs/batch.md): workload, items, command, image, infra, max_yen, ...; or a SkyPilot task YAML or a dstack task, read as a batch (`gpuplan convert FILE` shows how).", metavar="BATCH.yaml")] = None,
    command: Annotated[Optional[list[str]], typer.Argument(help="After --: the command ({item} is each item); overrides the file's.")] = None,
    items: Annotated[Optional[Path], typer.Option("--items", help="File with one item per line.", metavar="FILE")] = None,
    workload: Annotated[Optional[str], typer.Option("--workload", help="Built-in workload or a workload file to plan with (one job per item).", metavar="NAME|FILE")] = None,
    plan: Annotated[Optional[Path], typer.Option("--plan", help="Launch this saved plan (`gpuplan estimate --save`) instead of planning again.", metavar="FILE")] = None,
    image: Annotated[Optional[str], typer.Option("--image", help="Run each item in this container image.", metavar="IMAGE")] = None,
    infra: Annotated[Optional[str], typer.Option("--infra", help="Only these providers, comma-separated: {infra}.", metavar="NAMES")] = None,
    region: Annotated[Optional[str], typer.Option("--region", help="Only this region's offers.", metavar="NAME")] = None,
    objective: Annotated[Optional[str], typer.Option("--objective", help="balanced, cost or time (as estimate).", metavar="NAME")] = None,
    deadline: Annotated[Optional[str], typer.Option("--deadline", help="The latest acceptable wall time (3h, 90m).", metavar="DURATION")] = None,
    max_yen: Annotated[Optional[str], typer.Option("--max-yen", help="Stop the batch before it spends more than this (plan refused if its estimate is over).", metavar="YEN")] = None,
    max_yen_per_hour: Annotated[Optional[str], typer.Option("--max-yen-per-hour", help="Leave out plans whose fleet costs more than this many yen an hour (a saved plan over it is refused).", metavar="YEN")] = None,
    outputs: Annotated[Optional[Path], typer.Option("--outputs", help="Where the items' outputs are fetched to (default outputs/NAME).", metavar="DIR")] = None,
    name: Annotated[Optional[str], typer.Option("--name", help="The cluster's name (default: the batch file's).", metavar="NAME")] = None,
    env: Annotated[Optional[list[str]], typer.Option("--env", help="KEY=VALUE for every item (repeatable); KEY alone: its value from the environment you run gpuplan in.", metavar="KEY[=VALUE]")] = None,
    env_file: Annotated[Optional[Path], typer.Option("--env-file", help="KEY=VALUE lines (# comments) for every item, as --env's; an --env of the same KEY wins.", metavar="FILE")] = None,
    gpus: Annotated[Optional[str], typer.Option("--gpus", help="Only machines with these GPUs: V100:4 (four V100s in each machine), A100 (any count), 24GB (at least 24 GB each).", metavar="MODEL[:N]")] = None,
    secret_env: Annotated[Optional[list[str]], typer.Option("--secret-env", help="NAME: a variable of this environment whose value every item gets, as --env's, never written anywhere but the nodes' owner-only file (repeatable; replaces the file's secret_env).", metavar="NAME")] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="When the batch ends, draw it against its plan into an .svg or .png, as `gpuplan jobs CLUSTER JOB --plot` does (needs gpuplan[plot]).", metavar="FILE.svg|png")] = None,
    resume: Annotated[Optional[str], typer.Option("--resume", help="Pick up a launch: follow its job to the end, fetch, tear down.", metavar="JOB")] = None,
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Return once the batch runs, with its job id (`gpuplan launch --resume JOB` finishes it).")] = False,
    keep: Annotated[bool, typer.Option("--keep", help="Leave the cluster up after the batch.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the whole sequence with its yen; create nothing.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask (needed when stdin is not a terminal).")] = False,
    recover: Annotated[bool, typer.Option("--recover", help="A node lost, or taken back by the cloud, mid-batch gets a replacement of the same kind, within max_yen (as `run --recover`).")] = False,
    on_demand_fallback: Annotated[bool, typer.Option("--on-demand-fallback", help="With --recover on spot: a replacement that finds no spot capacity is bought on-demand.")] = False,
    probe: Annotated[bool, typer.Option("--probe", help="First time the batch's own job on the pick and its rivals (`gpuplan probe`), then plan again from what was measured.")] = False,
    probe_budget: Annotated[Optional[str], typer.Option("--probe-budget", help="With --probe: at most this for the probes, a share of the pick's yen (2%, the default) or yen.", metavar="PERCENT|YEN")] = None,
    project: Annotated[Optional[str], typer.Option("--project", help=PROJECT_HELP, metavar="NAME")] = None,
) -> None:
    """Plan a batch, build the pick, run the batch on it, fetch its outputs, tear it down."""
    from contextlib import ExitStack

    from gpuplan import batchfile
    from gpuplan.cli.jobs import _console
    from gpuplan.cli.lifecycle import _print_lines
    from gpuplan.run import launcher

    if batch_file is not None and batch_file.suffix.lower() not in (".yaml", ".yml"):
        # no batch file, a command after --: its first word landed in BATCH.yaml's place
        command, batch_file = [str(batch_file), *(command or [])], None
    if (probe or probe_budget) and plan is not None:
        raise UsageError("--probe plans again from what it measures: leave out --plan (or probe first: `gpuplan probe`)")
    if plot is not None:
        from gpuplan.planning import plot as plotting

        plotting.check_target(plot)  # before anything is bought: the drawing comes at the batch's end
    if resume:
        if batch_file is not None or command or plan is not None:
            raise UsageError("--resume picks up a launch from its job alone; leave out the batch file, --plan and the command")
        _resume(resume, keep, detach, yes, plot)
        return
    from gpuplan.cli.jobs import env_pairs

    overrides = {"items": items, "workload": workload, "image": image, "infra": infra, "region": region,
                 "objective": objective, "deadline": deadline, "max_yen": max_yen, "max_yen_per_hour": max_yen_per_hour, "outputs": outputs, "name": name,
                 "env": env_pairs(env, env_file) or None, "secret_env": secret_env,
                 "command": list(command) if command else None, "gpus": gpus,
                 "recover": recover or None, "on_demand_fallback": on_demand_fallback or None, "project": project}
    out = _console()
    batch, conv = read_batch(batch_file, overrides)
    from gpuplan import budget, team

    team.user()  # a bad GPUPLAN_USER is refused before anything
    team.choose(None, batch.project or None)
    batchfile.check_environment(batch)  # a secret it names but this environment lacks: refused before anything
    todo_items = batchfile.items_of(batch)
    if conv is not None and not batch.workload and plan is None:  # planned as SkyPilot plans a task: its machines by the hour
        _print_lines(out, hourly_lines(batch, conv.nodes))
        if dry_run:
            _print_lines(out, ["dry run: nothing was created"])
            return
        raise UsageError(f"{batch_file} names no workload, so its total time and yen are unknown and no cap can hold:"
                         " give --workload NAME or a workload file (docs/workloads.md), or launch the batch"
                         " `gpuplan convert` writes with `workload:` added")
    saved = plan is None  # the plan is this command's own file (removed if the launch is refused)
    work = None  # the workload planned here: a refused pick may fall over to the next plan (issue 44)
    if plan is None:
        from gpuplan.cli import estimate as estimate_cli

        work = launcher.workload_for(batch, todo_items)
        est = estimate_cli.show_plan(estimate_cli.plan_batch(batch, work))
        probed_job = ""  # the job the probes timed, recorded in the plan: its calibration accepts it
        if probe:
            from gpuplan.cli.probe import measured_job, probe_and_plan_again

            again = probe_and_plan_again(batch, work, todo_items[0], est, probe_budget, yes, dry_run)
            if again is not None:
                est = estimate_cli.show_plan(again, "planned again with what the probes measured:")
                probed_job = measured_job(batch)
        if dry_run:  # nothing is written: the plan goes to a file that is gone once the sequence is shown
            import tempfile

            plan = Path(tempfile.mkdtemp(prefix="gpuplan-launch-")) / "plan.json"
        else:
            plan = launcher.plan_file(batch)
            plan.parent.mkdir(parents=True, exist_ok=True)
        estimate_cli.save_plan(est, plan, command=probed_job, planned=estimate_cli.batch_planned_with(batch, work))
    from gpuplan.store.state import State

    with ExitStack() as held:  # the cluster name's lock, held until the launch ends (the kernel frees it with the process)
        try:  # a refused launch writes nothing: the plan it saved goes with it (the dry run's always)
            pick = launcher.pick_of(plan, batch.region or None, batch.tax)
            launcher.refuse_over_cap(pick, batch.max_yen)
            launcher.check_playbooks(pick, batch)
            from gpuplan.run import failover

            failover.refuse_over_rate([(pick.offer, pick.count)], batch.max_yen_per_hour, batch.tax)
            spend, spend_what = launcher.budget_spend(pick, batch)
            if dry_run:
                peek = State.open_existing()
                budget.check_spend(peek, team.current().project, spend, spend_what)  # before anything is written
                cluster = launcher.peek_name(peek, batch)
                if peek is not None:
                    peek.close()
            else:
                state = State.open_default()
                budget.check_spend(state, team.current().project, spend, spend_what)  # reserved after the question
                cluster = launcher.claim_name(state, batch, held)
            batchfile.check_before_buying(batch, cluster)
            outputs_dir = launcher.outputs_dir(batch, cluster)
            if outputs_dir.exists() and (not outputs_dir.is_dir() or any(outputs_dir.iterdir())):
                raise UsageError(f"outputs folder {outputs_dir} is not empty: name another (outputs: or --outputs), or move"
                                 " it away")
            launcher.check_outputs(outputs_dir)
            lines = [f"launch {fmt.plural(len(todo_items), 'item')} on {pick.count}x {pick.target}:",
                     *(f"  {s}" for s in launcher.steps(pick, batch, cluster, len(todo_items)))]
        except BaseException:
            if saved and not dry_run:
                plan.unlink(missing_ok=True)
            raise
        finally:
            if dry_run and plan.parent.name.startswith("gpuplan-launch-"):
                import shutil

                shutil.rmtree(plan.parent, ignore_errors=True)
        if dry_run:
            _print_lines(out, lines + ["dry run: nothing was created"])
            return
        _launch(state, pick, batch, cluster, lines, plan, todo_items, outputs_dir, yes, detach, keep,
                work if saved else None, plot)


def _launch(state, pick, batch, cluster: str, lines: list[str], plan: Path, todo_items, outputs_dir: Path, yes: bool,
            detach: bool, keep: bool, work, plot: Path | None = None) -> None:
    """A launch past its checks that need nothing but its files: preflight, the question, the
    build and the batch, under the cluster name's lock (`work`: the workload this command
    planned, for the next plan where the pick is refused; None: a saved plan, launched as it is)."""
    from gpuplan.cli.jobs import _console
    from gpuplan.cli.lifecycle import _confirm
    from gpuplan.cli.tables import LiveView
    from gpuplan.run import backends, launcher
    from gpuplan.run import items as run_items

    out, err = _console(), _console(stderr=True)
    # extras, credentials, the backend, a terminal for the question: all at once; then quota
    order = launcher.preflight(state, pick, batch, cluster, can_answer=yes or (sys.stdin is not None and sys.stdin.isatty()))
    _confirm(lines, f"Spend about {fmt.yen(pick.yen)} on this batch?", yes, default=True)
    todo, _ = run_items.run_order(todo_items, run_items.read_plan(plan))
    from gpuplan import budget, team

    spend, spend_what = launcher.budget_spend(pick, batch)  # checked before the question, reserved now in one transaction
    reserved = budget.reserve_spend(state, team.current().project, spend, spend_what,
                                  "cap" if batch.max_yen is not None else "plan",
                                  cluster if backends.get(pick.backend).has_cluster else None)
    try:
        # one live display of the build on a terminal: each machine's latest step (cli/tables.py)
        with LiveView(err, machines=lambda: [n.name for n in state.nodes(cluster)], title=f"launching {cluster}") as view:
            job = _start_or_next(state, pick, batch, cluster, order, todo, outputs_dir, view.step, plan, work, yes, keep,
                                 view.paused, reserved)
    except BaseException:
        state.release_commitments(rid=reserved)  # nothing of it is left running (start tears down what it made)
        raise
    state.attach_commitment(reserved, job=job)
    row = backends.job_row(state, job)
    # the next plan's, where the first was refused (a saved plan's is saved beside it: the job says which)
    pick = launcher.pick_of(Path(row.options.get("plan") or plan), batch.region or None, batch.tax)
    where = row.cluster
    out.print(f"job {job} submitted: {fmt.plural(len(todo), 'item')} on {pick.count}x {pick.target}", markup=False)
    sys.stdout.flush()  # the id reaches a pipe even if this process is killed while it follows
    if detach:
        out.print(f"it runs on without this terminal: `gpuplan jobs {where}`, `gpuplan logs {where} {job} ITEM`;"
                  f" `gpuplan launch --resume {job}` follows it, fetches its outputs and tears down", markup=False)
        return
    _finish(state, job, keep, yes, plot)


def _start_or_next(state, pick, batch, cluster, order, todo, outputs_dir, progress, plan: Path, work, yes: bool,
                   keep: bool = False, paused=contextlib.nullcontext, reserved: str | None = None) -> str:
    """launcher.start; where every zone of the pick's region refused it, the next plan without the
    refused offer, within the batch's `failover:` (run/failover.py): the batch planned again where
    the launch planned it (`work`), saved over the plan; a saved plan (--plan) planned again from
    what it was planned with (its planned_with, within the batch's max_yen, deadline, region and
    max_yen_per_hour too), saved beside it as PLAN.next.json; or the pick again after
    failover.wait. The budget reservation `reserved` is made to hold the next plan's spend before
    it is asked about or bought (its upper yen may pass the first pick's): one line where the
    project's month cannot."""
    from gpuplan.cli import estimate as estimate_cli
    from gpuplan.cli.lifecycle import _confirm
    from gpuplan.planning import saved_plan
    from gpuplan.run import backends, failover, launcher
    from gpuplan.run import items as run_items

    orders = {id(pick): (order, todo)}

    def adopt(est, path: Path, planned, command: str = ""):
        """The next plan `est` saved to `path`, checked, its spend reserved and its order made."""
        estimate_cli.save_plan(est, path, command=command, planned=planned)
        nxt = launcher.pick_of(path, batch.region or None, batch.tax)
        launcher.refuse_over_cap(nxt, batch.max_yen)
        if reserved is not None:
            from gpuplan import budget, team

            spend, what = launcher.budget_spend(nxt, batch)
            what = what.removeprefix("launch's ")  # "max_yen" or "planned upper yen"
            budget.re_reserve_spend(state, reserved, team.current().project, spend,
                                    f"next plan's ({nxt.count}x {nxt.target}) {what}",
                                    "cap" if batch.max_yen is not None else "plan",
                                    cluster if backends.get(nxt.backend).has_cluster else None)
        orders[id(nxt)] = (launcher.preflight(state, nxt, batch, cluster, can_answer=True),
                           run_items.run_order([item for _, item in todo], run_items.read_plan(path))[0])
        return nxt

    def replan(first):
        est, rec = failover.next_plan(batch, work, estimate_cli.plan_batch, first)
        if rec is None:
            return None
        return adopt(est, plan, estimate_cli.batch_planned_with(batch, work),
                     saved_plan.load(plan).command)  # the job a probe timed, kept

    def replan_saved(first):
        saved = saved_plan.load(plan)
        try:
            est, rec, _ = failover.next_for_saved(
                saved, first.offer, first.market, estimate_cli.plan_estimate, failover.parse_rate_cap(batch.max_yen_per_hour),
                batch.region or None, deadline=batch.deadline or None, max_yen=batch.max_yen, policy=batch.failover)
        except UsageError as why:
            progress(f"no next plan: {why}")
            return None
        if rec is None:
            return None
        return adopt(est, plan.with_name(f"{plan.stem}.next{plan.suffix or '.json'}"), saved.planned_with, saved.command)

    def start(p):
        o, t = orders[id(p)]
        return launcher.start(state, p, batch, cluster, o, t, outputs_dir, progress, keep=keep)

    def ask(p):
        with paused():  # the live display gives the terminal to the question
            _confirm([f"launch on {p.count}x {p.target} instead"], f"Spend about {fmt.yen(p.yen)} on this batch?", yes,
                     default=True)

    from gpuplan.units import parse_duration

    deadline_s = parse_duration(batch.deadline, "deadline") if batch.deadline else None
    return failover.start_or_next(start, pick, replan if work is not None else replan_saved, progress,
                                  ask=None if yes else ask, policy=batch.failover, deadline_s=deadline_s)


def _resume(job: str, keep: bool, detach: bool, yes: bool, plot: Path | None = None) -> None:
    from gpuplan.store.state import State

    state = State.open_default()
    row = state.job(job)
    if row is None or not row.options.get("launch"):
        raise UsageError(f"no launch with job {job!r}; `gpuplan jobs CLUSTER` lists the jobs")
    if detach:
        raise UsageError("--resume follows the job to its end; leave out --detach")
    _finish(state, job, keep, yes, plot)


def _finish(state, job: str, keep: bool, yes: bool = False, plot: Path | None = None) -> None:
    """Follow the job to its end (the cap checked on every look; with the batch's `recover`, its
    lost nodes replaced as `run --recover` does), print what it did, fetch its outputs, tear the
    cluster down (unless --keep), draw it against its plan (`plot`); exit non-zero when it was
    capped or items failed."""
    from gpuplan.cli.jobs import _console, _follow, _print_summary, _progress, _recoverer
    from gpuplan.fleet import lifecycle
    from gpuplan.run import backends, batches, launcher, recover
    from gpuplan.run import items as run_items

    released = lifecycle.settle_released(state)  # a cluster that released itself at the cap: its job ended there
    row = state.job(job)
    opts = row.options["launch"]
    cluster = row.cluster
    cap = recover.job_cap(row)
    watchers = [launcher.cap_watch(state, job, cap)] if cap is not None else []
    if opts.get("recover") and backends.RECOVER in backends.of(row).supports:
        watchers.append(_recoverer(state, cluster, yes, bool(opts.get("on_demand_fallback"))))

    def look(seen) -> None:
        for watch in watchers:
            watch(seen)

    out = _console()
    say = _progress(_console(stderr=True))
    fetched = False
    try:
        if row.state not in run_items.JOB_STATES_OVER:  # one that ended (or was settled) has nothing to follow
            _follow(state, cluster, job, look if watchers else None)
        predicted = run_items.read_plan(Path(row.options["plan"])) if row.options.get("plan") else None
        # a whole batch on the planned fleet calibrates the plan's workload, as `run --plan` does
        summary, calibration = batches.finish(state, job, predicted)
        _print_summary(summary, predicted, job)
        if calibration:
            out.print(calibration, markup=False)
        fetched = True  # from here on a second fetch would find its own folders: fetch once
        if cluster in released or (backends.of(row).has_cluster and _released(state, cluster)):
            say(f"cluster {cluster} released itself at the max_yen moment (its hosts stopped the batch and dropped"
                f" its login key): outputs are not fetched; the hosts keep them in ~/.gpuplan/jobs/{job}/out")
            launcher.raise_outcome(state, job, cap)
            return
        got = backends.outputs(state, job, Path(opts["outputs"]))
    except Exception as exc:
        # Ctrl-C (typer.Exit 130 from _follow) stops following only: the batch goes on, `launch --resume` picks it up
        if backends.of(row).has_cluster and not isinstance(exc, typer.Exit):
            launcher.wind_down(state, cluster, job, None if fetched else Path(opts["outputs"]), keep, say)
        raise
    out.print(f"outputs: {fmt.plural(got.files, 'file')} of {fmt.plural(got.items, 'item')} in {opts['outputs']}",
              markup=False)
    if got.skipped:
        say(f"not fetched, as they are not plain files: {', '.join(got.skipped)}")
    if not keep:
        deleted = launcher.teardown(state, job, lambda m: _console(stderr=True).print(f"… {m}", markup=False))
        if deleted is not None:
            out.print(f"cluster {cluster} torn down ({fmt.plural(deleted, 'resource')} deleted)", markup=False)
    else:
        out.print(launcher.left_billing(state, cluster, " (--keep)"), markup=False)
    if plot is not None:  # after the teardown: the yen drawn are the batch's whole bill
        from gpuplan.cli.jobs import _plot_job

        _plot_job(state, job, plot)
    launcher.raise_outcome(state, job, cap)


def _released(state, cluster: str) -> bool:
    row = state.cluster(cluster)
    return row is not None and row.status == "gone" and bool(row.spec.get("releases_itself_at"))


def read_batch(batch_file: Optional[Path], overrides: dict):
    """foreign.read_batch, the mapping of a SkyPilot or dstack task printed first."""
    from gpuplan.cli.jobs import _console
    from gpuplan.cli.lifecycle import _print_lines

    return foreign.read_batch(batch_file, overrides, lambda lines: _print_lines(_console(), lines))


def hourly_lines(batch, nodes: int, shown: int = 8) -> list[str]:
    """A task that names no workload, planned as SkyPilot plans one: the offers with its GPUs by
    yen per hour for its machines, each machine's setup counted (catalog provider facts), and that
    the batch's total stays unknown until a workload (or `gpuplan probe`) times it."""
    from gpuplan.market import catalog, gpus
    from gpuplan.market import tax as taxes
    from gpuplan.run import launcher

    cat = catalog.with_tax(catalog.load(), batch.tax, taxes.ASSUMED_UNKNOWN)
    setup = {name: (f.setup_s, f.source) for name, f in cat.providers.items()}
    ask = gpus.parse(batch.gpus, "gpus") if batch.gpus else None
    rows = gpus.by_the_hour(cat.offers, ask, nodes, setup, spot=batch.spot, region=batch.region or None,
                            providers=launcher.infra_providers(batch.infra), what="gpus")
    head = (f"no workload: planned by the hour as SkyPilot plans a task ({nodes}x machine{'s' if nodes > 1 else ''}"
            f" with {batch.gpus or 'any GPU'}; yen {batch.tax} tax, catalog {cat.snapshot}):")
    if not rows:
        return [head, "  no offer with a price fits; `gpuplan catalog` lists them"]
    body = [f"  {fmt.yen(r.yen_per_hour)}/h  {r.nodes}x {r.offer.provider}:{r.offer.name} {r.offer.region}"
            f"{' spot' if r.offer.market == 'spot' else ''} ({r.offer.gpu_count}x {r.offer.gpu})"
            f"  setup {fmt.duration(r.setup_s)} {fmt.yen(r.setup_yen)}" for r in rows[:shown]]
    more = [f"  ... and {len(rows) - shown} more"] if len(rows) > shown else []
    pick = rows[0]
    return [head, *body, *more,
            f"cheapest: {pick.nodes}x {pick.offer.provider}:{pick.offer.name} at {fmt.yen(pick.yen_per_hour)} an hour after"
            f" {fmt.duration(pick.setup_s)} of setup ({fmt.yen(pick.setup_yen)});"
            " the batch's total time and yen stay unknown until a workload says its size or `gpuplan probe` times it"]


def convert(
    task_file: Annotated[Path, typer.Argument(help="A SkyPilot task YAML or a dstack task (`type: task`).", metavar="TASK.yaml")],
) -> None:
    """Print the gpuplan batch file a SkyPilot task YAML or a dstack task is, and every field of it
    that does not map, with what to do in gpuplan (as comments at its end)."""
    kind, data = foreign.read(task_file)
    if not kind:
        raise UsageError(f"{task_file} is not a SkyPilot task (run:, resources:, envs:, ...) nor a dstack task (type:"
                         " task, commands:); a gpuplan batch file runs as it is: `gpuplan launch FILE --dry-run`")
    conv = foreign.convert(data, task_file, kind)
    if conv.refusal:
        raise UsageError(conv.refusal)
    sys.stdout.write(foreign.batch_yaml(conv))
    sys.stdout.write("".join(f"# {line}\n" for line in foreign.lines(conv)))


def register(app: typer.Typer) -> None:
    app.command("launch", context_settings={"allow_extra_args": False})(launch)
    app.command("convert")(convert)
