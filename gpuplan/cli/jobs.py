"""`gpuplan bench` (measure a reference job into a profile), `gpuplan run` (a batch of items on
the cluster's engine, or one data-parallel job through torchrun) and the batch commands `jobs`,
`logs` and `cancel`."""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from gpuplan.cli import shapes
from gpuplan.cli.shapes import owned
from gpuplan.errors import UsageError
from gpuplan.planning import fmt
from gpuplan.run import backends

if TYPE_CHECKING:
    from gpuplan.store.state import JobRow


# With --format json, stdout holds the JSON alone: every line of words goes to stderr.
_words_to_stderr: ContextVar[bool] = ContextVar("words_to_stderr", default=False)


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr or _words_to_stderr.get(), highlight=False, markup=False,
                   soft_wrap=True)  # paths and names as written


@contextmanager
def _json_mode(on: bool) -> Iterator[None]:
    token = _words_to_stderr.set(on)
    try:
        yield
    finally:
        _words_to_stderr.reset(token)


def _progress(console):
    from rich.text import Text

    return lambda message: console.print(Text.assemble(("… ", "dim"), message))



def bench(
    workload: Annotated[str, typer.Argument(help="The reference job: colorize, resnet50, vgg_cifar or detect_streams (or the workload it models: colorize-hd, vgg-cifar10, yolo-fhd).")],
    local: Annotated[bool, typer.Option("--local", help="Measure on this machine.")] = False,
    cluster: Annotated[Optional[str], typer.Option("--cluster", help="Measure on this cluster's nodes over SSH.", metavar="NAME")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Tiny shapes (CPU-only machines): proves the pipeline, not the speed.")] = False,
    gpus: Annotated[Optional[int], typer.Option("--gpus", help="How many slots per node to use, a number (default: all GPUs; 2 processes on a CPU); not estimate's --gpus MODEL[:N].", metavar="N")] = None,
    max_pack: Annotated[int, typer.Option("--max-pack", help="Try up to this many jobs sharing one GPU.", metavar="N")] = 4,
    out: Annotated[Optional[Path], typer.Option("--out", help="Profile file to write (.yaml or .json).", metavar="FILE")] = None,
    python: Annotated[Optional[str], typer.Option("--python", help="Python on the nodes with gpuplan[bench] installed (default: gpuplan makes one there: a venv with torch from the package index, the jobs' code copied from here).", metavar="PATH")] = None,
    timeout: Annotated[Optional[str], typer.Option("--timeout", help="How long each measurement may take, such as 120s or 30m (default 30m; a bare number is refused).", metavar="DURATION")] = None,
    job_args: Annotated[Optional[str], typer.Option("--job-args", help="Extra arguments for the job, quoted: '--height 360 --width 640'.", metavar="ARGS")] = None,
    on: Annotated[Optional[str], typer.Option("--on", help="Provision one machine per offer (an inventory host for baremetal:KIND), bench it, save one profile per offer where every estimate reads it, tear it down. Asks first with the yen it costs.", metavar="OFFER[,OFFER...]")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="With --on: print the campaign (offers, time, yen); provision nothing.")] = False,
    ssh_from: Annotated[Optional[str], typer.Option("--ssh-from", help="With --on: let SSH in from this address or CIDR only (default: as `gpuplan provision`).", metavar="CIDR")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="With --on: do not ask; go ahead (needed when stdin is not a terminal).")] = False,
    no_bootstrap: Annotated[bool, typer.Option("--no-bootstrap", help="With --on: do not run the setup playbooks on cloud machines (their image has the driver and gpuplan[bench]).")] = False,
    format: Annotated[str, shapes.format_option()] = "table",
) -> None:
    """Measure a reference job (alone, co-located, packed, data-parallel) and save a profile;
    with --on, on one new machine per offer, torn down after."""
    as_json = shapes.check_format(format)
    with _json_mode(as_json):  # the words on stderr, the profile as JSON on stdout
        _bench(workload=workload, local=local, cluster=cluster, quick=quick, gpus=gpus, max_pack=max_pack, out=out,
               python=python, timeout=timeout, job_args=job_args, on=on, dry_run=dry_run, ssh_from=ssh_from, yes=yes,
               no_bootstrap=no_bootstrap)


def _bench(workload, local, cluster, quick, gpus, max_pack, out, python, timeout, job_args, on, dry_run, ssh_from,
           yes, no_bootstrap) -> None:
    """`gpuplan bench`, its options checked by typer."""
    from gpuplan.measuring import bench as bench_mod

    if sum((local, cluster is not None, on is not None)) != 1:
        raise UsageError("say where to measure: --local or --cluster NAME, or --on OFFER[,OFFER...] (one of them)")
    if on is None and (dry_run or yes or ssh_from or no_bootstrap):
        raise UsageError("--dry-run, --yes, --ssh-from and --no-bootstrap go with --on (a campaign that provisions machines)")
    from gpuplan.run.items import MAX_PER_GPU, MAX_SLOTS_PER_NODE
    from gpuplan.units import MAX_DURATION_S, parse_duration

    timeout = 1800 if timeout is None else parse_duration(timeout, "--timeout", bare_meant="seconds")
    if max_pack < 1 or (gpus is not None and gpus < 1) or timeout < 1:
        raise UsageError("--max-pack, --gpus and --timeout must be at least 1")
    if max_pack > MAX_PER_GPU or (gpus or 0) > MAX_SLOTS_PER_NODE or timeout > MAX_DURATION_S:
        raise UsageError(f"--max-pack is at most {MAX_PER_GPU}, --gpus at most {MAX_SLOTS_PER_NODE} and --timeout at most"
                         f" {MAX_DURATION_S:,} s (366 days)")
    if out is not None and out.suffix not in (".yaml", ".yml", ".json"):
        raise UsageError(f"--out {out}: the profile file must end in .yaml, .yml or .json")
    if out is not None:
        from gpuplan.userfiles import check_writable

        check_writable(out, "--out", folder=False)  # before the benchmark, not after it
    from gpuplan.planning import workloads

    workload = workloads.bench_job(workload) or workload
    if workload not in bench_mod.JOBS:
        raise UsageError(f"unknown workload {workload!r}: choose one of {', '.join(sorted(bench_mod.JOBS))}")
    if on is not None and out is not None:
        raise UsageError("--out names one profile file; with --on each offer's profile goes where the estimate reads it")
    err = _console(stderr=True)
    try:
        extra_args = tuple(shlex.split(job_args or ""))
    except ValueError as exc:
        raise UsageError(f"--job-args {job_args!r}: {exc}; quote it as one shell string: --job-args '--height 360'") from None
    where = ["--local"] if local else ["--cluster", cluster] if cluster is not None else ["--on", on]
    opts = bench_mod.BenchOptions(
        workload=workload, quick=quick, gpus=gpus, max_pack=max_pack, timeout=timeout,
        job_args=extra_args,
        command=shlex.join(["gpuplan", "bench", workload, *where,
                            *(["--quick"] if quick else []), *(["--gpus", str(gpus)] if gpus else []),
                            "--max-pack", str(max_pack), *(["--job-args", job_args] if job_args else [])]),
        progress=_progress(err),
    )
    if on is not None:
        _campaign(on, opts, python, dry_run, ssh_from, yes, not no_bootstrap)
        return
    executor: bench_mod.Executor
    if local or cluster is None:
        executor = bench_mod.LocalExecutor()
    else:
        from gpuplan.store.state import State

        nodes = bench_mod.ClusterExecutor(State.open_default(), cluster, python=python or "python3")
        if python is None:
            opts.progress("making the bench's Python (a venv with torch) on the nodes")
            nodes.prepare()
        executor = nodes
    profile, path = bench_mod.bench(opts, executor, out)
    _print_profile(profile, path)
    if _words_to_stderr.get():
        shapes.emit(shapes.profile(profile, path))


def _campaign(on: str, opts, python: Optional[str], dry_run: bool, ssh_from: Optional[str], yes: bool, bootstrap: bool) -> None:
    """`bench --on`: the campaign's plan and its yen, asked about; then every offer provisioned,
    benched and torn down at once, each on its own (a failed one does not stop the others)."""
    from dataclasses import replace

    from gpuplan.cli.lifecycle import _confirm, _need_answer, _print_lines
    from gpuplan.cli.tables import working
    from gpuplan.errors import GpuplanError
    from gpuplan.measuring import campaign
    from gpuplan.planning.profiles import measured_dir
    from gpuplan.store.state import State

    texts = campaign.split(on)
    known = State.open_existing()  # measured setup times, if any
    targets = campaign.plan(texts, opts, known, bootstrap, make_python=python is None)
    total = sum((t.yen for t in targets), Decimal(0))
    lines = [f"bench {opts.workload} on {fmt.plural(len(targets), 'offer')}, one machine each, torn down after its bench:"]
    lines += [f"  {campaign.describe(t, opts.workload)}" for t in targets]
    lines.append(f"  in all about {fmt.yen(total)}; each offer's profile goes to {measured_dir()}, where every"
                 " `gpuplan estimate` reads it")
    if dry_run:
        _print_lines(_console(), lines + ["dry run: nothing was provisioned"])
        if _words_to_stderr.get():
            shapes.emit({"dry_run": True, "workload": opts.workload, "total_jpy": shapes.exact(total, "0.01"),
                         "offers": [shapes.campaign_target(t, opts.workload) for t in targets], "profiles": []})
        return
    _need_answer(yes, "bench --on")
    state = State.open_default()
    checked = [campaign.check(state, t, ssh_from) for t in targets]
    _confirm(lines, f"Spend about {fmt.yen(total)} on these measurements?", yes, default=True)
    from concurrent.futures import ThreadPoolExecutor

    err, failures = _console(stderr=True), []
    with working(err, f"bench {opts.workload} on {fmt.plural(len(targets), 'offer')}") as step:
        def one(pair):
            t, (order, prov) = pair

            def say(message: str) -> None:
                step(f"{t.offer.provider}:{t.offer.name}: {message}")

            try:
                return campaign.measure(state, t, order, prov, replace(opts, progress=say), python, say)
            except GpuplanError as exc:
                return exc

        with ThreadPoolExecutor(max_workers=len(targets)) as pool:  # one machine per offer, all at once
            results = list(pool.map(one, zip(targets, checked)))
    for t, result in zip(targets, results):
        if isinstance(result, GpuplanError):
            failures.append((t, result))
            err.print(f"{t.text}: {result}")
        else:
            _print_profile(*result)
    if _words_to_stderr.get():
        shapes.emit({"dry_run": False, "workload": opts.workload, "total_jpy": shapes.exact(total, "0.01"),
                     "offers": [{**shapes.campaign_target(t, opts.workload),
                                 "error": str(r) if isinstance(r, GpuplanError) else None}
                                for t, r in zip(targets, results)],
                     "profiles": [shapes.profile(*r) for r in results if not isinstance(r, GpuplanError)]})
    if failures:
        t, first = failures[0]
        names = ", ".join(f.text for f, _ in failures)
        raise type(first)(f"bench failed on {names} ({t.text}: {first}); what was provisioned for it was torn down,"
                          " unless a line above says otherwise")


def _print_profile(profile, path: Path) -> None:
    from gpuplan.cli import tables
    from gpuplan.cli.tables import Column

    con = _console()
    p = profile.provenance
    con.print(f"{profile.workload} on {profile.reference_gpu} ({p.gpu}; torch {p.torch or '?'}, CUDA {p.cuda or '-'},"
              f" driver {p.driver or '-'})")
    if p.quick:
        con.print("quick CPU run: tiny shapes, not real speed", style="yellow")
    con.print(f"alone: {profile.seconds_per_unit:.6g} s per {profile.unit}"
              + (f", uncapped peak {profile.memory_peak_gib:.3g} GiB GPU memory" if profile.memory_peak_gib else ""))
    if profile.memory_need_gib is not None:
        con.print(f"memory need: {profile.memory_need_gib:.3g} GiB (full speed capped at {profile.memory_need_fraction:.4g}"
                  " of the GPU's memory)")
    if profile.fixed_seconds_per_job is not None:
        con.print(f"fixed cost per job start: {profile.fixed_seconds_per_job:.3g} s (process wall time - timed steps)")
    if profile.feed_cpu_seconds_per_unit is not None:
        con.print(f"CPU need to feed: {profile.feed_cpu_seconds_per_unit:.4g} CPU s per {profile.unit}"
                  " (its input pipeline alone, one thread)")
    if profile.feed_bytes_per_unit is not None:
        con.print(f"bytes read to feed: {profile.feed_bytes_per_unit:,.0f} bytes per {profile.unit}")
    if profile.unmeasured():
        con.print(f"not measured: {', '.join(profile.unmeasured())}")
    rows = [["co-location slowdown", str(g), f"{f:.3f}x"] for g, f in sorted(profile.colocation_slowdown.items())]
    for k in sorted(profile.packing_fits):
        eff = profile.packing_efficiency.get(k)
        rows.append(["packed per GPU: efficiency", str(k), f"{eff:.3f}" if profile.packing_fits[k] and eff else "does not fit"])
    for s in profile.dp_scaling:
        rows.append(["data-parallel efficiency", f"{s.gpus} on {fmt.plural(s.nodes, 'node')}", f"{s.efficiency:.3f}"])
    tables.render(con, [Column("measure"), Column("n", right=True), Column("value", right=True)], rows)
    con.print(f"profile written to {path}")


def run(
    cluster: Annotated[str, typer.Argument(help="Cluster name (see `gpuplan status`), or dok:PLAN (dok:h100-80gb) for Sakura 高火力 DOK tasks.")],
    command: Annotated[Optional[list[str]], typer.Argument(help="After --: the command; {item} is replaced by each item.")] = None,
    items: Annotated[Optional[Path], typer.Option("--items", help="File with one item per line (# comments skipped).", metavar="FILE")] = None,
    resume: Annotated[Optional[str], typer.Option("--resume", help="Run again only the items of this job that did not succeed.", metavar="JOB")] = None,
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Submit and return at once with the job id.")] = False,
    per_gpu: Annotated[int, typer.Option("--per-gpu", help="Items sharing each GPU at once (1/k of a GPU each).", metavar="N")] = 1,
    retries: Annotated[int, typer.Option("--retries", help="Extra attempts for a failed item (on any free slot).", metavar="N")] = 0,
    plan: Annotated[Optional[Path], typer.Option("--plan", help="plan.json from `gpuplan estimate --save`: its order (longest first), and measured vs predicted.", metavar="FILE")] = None,
    torchrun: Annotated[bool, typer.Option("--torchrun", help="One data-parallel job over all nodes' GPUs through torchrun.")] = False,
    python: Annotated[str, typer.Option("--python", help="Python on the nodes, for --torchrun.", metavar="PATH")] = "python3",
    master_port: Annotated[int, typer.Option("--master-port", help="torchrun rendezvous port on the first node.", metavar="PORT")] = 29500,
    timeout: Annotated[Optional[str], typer.Option("--timeout", help="How long one item may run, such as 90s, 30m or 2h (default 24h; a bare number is refused); then its processes are killed.", metavar="DURATION")] = None,
    down: Annotated[bool, typer.Option("--down", help="Tear the cluster down when the batch ends (follows it to the end); the outputs are fetched first.")] = False,
    fetch: Annotated[Optional[Path], typer.Option("--fetch", help="With --down: fetch the items' outputs into DIR before the teardown (default outputs/CLUSTER-JOB).", metavar="DIR")] = None,
    workdir: Annotated[Optional[Path], typer.Option("--workdir", help="Folder copied to every node before the batch; the items run in it.", metavar="DIR")] = None,
    image: Annotated[Optional[str], typer.Option("--image", help="Each item runs in a container of this image: on a cluster `docker run --gpus` (pulled on every node first; `gpuplan bootstrap CLUSTER --playbook docker-gpu` installs Docker); with dok:PLAN the task's image (linux/amd64, at most 30 GB).", metavar="IMAGE")] = None,
    env: Annotated[Optional[list[str]], typer.Option("--env", help="dok:PLAN runs: KEY=VALUE in every task (repeatable; not SAKURA_*); KEY alone: its value from the environment you run gpuplan in.", metavar="KEY[=VALUE]")] = None,
    env_file: Annotated[Optional[Path], typer.Option("--env-file", help="dok:PLAN runs: " + ENV_FILE_HELP.format(what="task"), metavar="FILE")] = None,
    secret_env: Annotated[Optional[list[str]], typer.Option("--secret-env", help="dok:PLAN runs: NAME, a variable of this environment whose value every task gets, as --env's (repeatable; never on a command line or in the state; --resume reads it again).", metavar="NAME")] = None,
    registry: Annotated[Optional[str], typer.Option("--registry", help="dok:PLAN runs: the UUID of the registry credentials registered with DOK, for a private image.", metavar="UUID")] = None,
    registry_user: Annotated[Optional[str], typer.Option("--registry-user", help="Cluster runs with --image: the private registry's user (its server is the image's).", metavar="USER")] = None,
    registry_password_env: Annotated[Optional[str], typer.Option("--registry-password-env", help="Cluster runs with --image: the environment variable holding the registry's password or token (fed to `docker login --password-stdin` on each node; never on a disk or a command line).", metavar="VAR")] = None,
    max_yen: Annotated[Optional[str], typer.Option("--max-yen", help="Cluster runs: stop the batch on the cluster once the nodes' bill for it would pass N yen (the items running are stopped, the rest stay queued; exit 6).", metavar="N")] = None,
    recover: Annotated[bool, typer.Option("--recover", help="A node lost mid-batch, or announced by the cloud as taken back (AWS spot), gets a replacement of the same kind (provisioned, bootstrapped, joined), after showing its yen; within --max-yen (a dearer one stops the batch sooner).")] = False,
    on_demand_fallback: Annotated[bool, typer.Option("--on-demand-fallback", help="With --recover on a spot cluster: a replacement that finds no spot capacity is bought on-demand instead, after showing its on-demand yen.")] = False,
    checkpoint_every: Annotated[Optional[str], typer.Option("--checkpoint-every", help="Cluster runs: each item gets $GPUPLAN_CHECKPOINT_DIR, kept on the head every DURATION (and at the attempt's end); an item run again (its node lost, a retry) starts from it. The folder is copied as it is at that moment: write each file under a temporary name and rename it (as the reference jobs do), or a copy taken mid-write is what the next attempt finds.", metavar="DURATION")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="With --recover: replace lost nodes without asking; with dok:PLAN: send the billed tasks without asking.")] = False,
    format: Annotated[str, shapes.format_option()] = "table",
    project: Annotated[Optional[str], typer.Option("--project", help="The project the batch's spend counts to and whose monthly budget must hold its --max-yen (default: the cluster's; docs/teams.md).", metavar="NAME")] = None,
) -> None:
    """Run a batch of items on the cluster's engine (Ray, on the cluster: killing this command
    does not stop it) and follow it; compare time and yen with the plan. CLUSTER `dok:PLAN`
    (e.g. dok:h100-80gb) runs each item as a Sakura 高火力 DOK task from --image instead: one task
    at a time per project, the rest wait; dok:h100-8gpu-80gb runs them all in one 8-GPU task, one
    item per GPU at a time; `gpuplan jobs dok`, `logs dok JOB ITEM`, `cancel dok JOB`."""
    as_json = shapes.check_format(format)
    with _json_mode(as_json):  # the words on stderr, the job as JSON on stdout
        _run(cluster=cluster, command=command, items=items, resume=resume, detach=detach, per_gpu=per_gpu,
             retries=retries, plan=plan, torchrun=torchrun, python=python, master_port=master_port, timeout=timeout,
             down=down, fetch=fetch, workdir=workdir, image=image, env=env, env_file=env_file, secret_env=secret_env,
             registry=registry,
             registry_user=registry_user, registry_password_env=registry_password_env, max_yen=max_yen,
             recover=recover, on_demand_fallback=on_demand_fallback, checkpoint_every=checkpoint_every, yes=yes,
             project=project)


def _run(cluster, command, items, resume, detach, per_gpu, retries, plan, torchrun, python, master_port, timeout,
         down, fetch, workdir, image, env, secret_env, registry, registry_user, registry_password_env, max_yen, recover,
         on_demand_fallback, checkpoint_every, yes, env_file=None, project=None) -> None:
    """`gpuplan run`, its options checked by typer: the target resolved to its backend, the
    submission checked against what that backend supports, submitted and followed through the
    batch service, on every backend the same way."""
    from dataclasses import replace

    from gpuplan import budget, team
    from gpuplan.run import items as run_items
    from gpuplan.store.state import State
    from gpuplan.units import MAX_DURATION_S

    team.user()  # a bad GPUPLAN_USER or --project: refused before anything
    if project is not None:  # none named: a batch on a cluster counts to the cluster's project
        team.choose(project)
    command = list(command or [])
    from gpuplan.units import parse_duration

    timeout = 24 * 3600 if timeout is None else parse_duration(timeout, "--timeout", bare_meant="seconds")
    if per_gpu < 1 or retries < 0 or timeout < 1:
        raise UsageError("--per-gpu and --timeout must be at least 1 and --retries at least 0")
    if per_gpu > run_items.MAX_PER_GPU or retries > run_items.MAX_RETRIES or timeout > MAX_DURATION_S:
        raise UsageError(f"--per-gpu is at most {run_items.MAX_PER_GPU}, --retries at most {run_items.MAX_RETRIES} and"
                         f" --timeout at most {MAX_DURATION_S:,} s (366 days)")
    if not 1 <= master_port <= 65535:
        raise UsageError(f"bad --master-port {master_port}: a TCP port from 1 to 65535")
    if sum(bool(x) for x in (torchrun, items is not None, resume)) != 1:
        raise UsageError("give --items FILE (one job per item), --resume JOB or --torchrun (one job over all GPUs): one of them")
    if detach and down:
        raise UsageError("--down waits for the batch to end; it cannot go with --detach")
    if fetch is not None and not down:
        raise UsageError("--fetch goes with --down (the outputs are fetched before the teardown); on a cluster that stays"
                         " up: `gpuplan logs CLUSTER JOB --fetch DIR`")
    if fetch is not None and fetch.exists() and (not fetch.is_dir() or any(fetch.iterdir())):
        raise UsageError(f"--fetch {fetch} is not an empty folder: name another, or move it away")
    if on_demand_fallback and not recover:
        raise UsageError("--on-demand-fallback says how --recover buys a replacement: give --recover too")
    if recover and (detach or torchrun):
        raise UsageError("--recover replaces lost nodes while `run` follows the batch: it cannot go with --detach or"
                         " --torchrun")
    if not command and not resume:
        raise UsageError("give the command after --, e.g. gpuplan run demo --items videos.txt -- python train.py {item}")
    if workdir is not None and not workdir.is_dir():
        raise UsageError(f"--workdir {workdir}: no such folder; give the folder to copy to every node")
    if workdir is not None and resume:
        raise UsageError("--resume runs in the job's own workdir (already on the nodes); leave out --workdir")
    backend = backends.for_target(cluster)
    if (env or env_file or secret_env or registry) and backends.REGISTRY_ID not in backend.supports:
        raise UsageError("--env, --env-file, --secret-env and --registry are for DOK task runs: gpuplan run dok:PLAN --image IMAGE"
                         " ...; a private image on a cluster: --registry-user USER --registry-password-env VAR")
    if (registry_user or registry_password_env) and not (registry_user and registry_password_env):
        raise UsageError("a private registry needs both --registry-user USER and --registry-password-env VAR")
    if torchrun and (image or max_yen is not None):
        raise UsageError("--image and --max-yen are for item batches; --torchrun runs on the nodes themselves")
    if (registry_user or registry_password_env) and not image and not resume:
        raise UsageError("--registry-user and --registry-password-env log in to pull --image IMAGE: give the image")
    cap = _max_yen(max_yen)
    every_s = run_items.checkpoint_interval(checkpoint_every) if checkpoint_every is not None else 0
    predicted = run_items.read_plan(plan) if plan else None
    from gpuplan import batchfile

    login = None
    if registry_user:  # the password is read from its variable where the image is pulled, never kept
        login = batchfile.Registry(username=registry_user, password_env=registry_password_env or "")
        login.password()  # not set: one line before anything starts
    from gpuplan.run import caps

    where = cluster if backend.has_cluster else backend.pseudo_clusters[0]  # what its jobs are listed under
    environment = env_pairs(env, env_file)
    secrets = batchfile.secret_env_names("--secret-env", secret_env, environment)
    environment.update(batchfile.secret_env_values(secrets, "--secret-env"))  # read now, held in memory only
    sub = backends.Submission(
        target=cluster, items=(), command=tuple(command), image=image or "", registry=login, registry_id=registry or "",
        env=environment, per_gpu=per_gpu, retries=retries, timeout_s=timeout, workdir=workdir,
        cap=caps.Cap.on(cap) if cap is not None else None,
        options={"plan": str(plan.resolve()) if plan else None, **({"max_yen": str(cap)} if cap is not None else {}),
                 **({"secret_env": sorted(secrets)} if secrets else {})},
        resumes=resume, checkpoint_every_s=every_s, recover=recover,
        torchrun=backends.Torchrun(python, master_port) if torchrun else None)
    also = ("--down",) if down and not backend.has_cluster else ()
    # before anything is read from where it runs; the backend validates the rest (a --torchrun command)
    backends.check(backend, sub, RUN_WORDS, also)
    if backends.QUOTE in backend.supports:  # what the batch can cost, shown and asked about before it is sent
        sub = replace(sub, confirm=confirm_dok(yes, f"run {where}", predicted))
    if not torchrun and not resume:
        sub = replace(sub, target=backend.resolve(cluster, predicted))
    state = State.open_default()
    err = _console(stderr=True)
    progress = _progress(err)
    if torchrun:
        _refuse_busy(state, cluster, "--torchrun takes every node's GPUs")
        order_note = "one rank per node, started together (a Ray gang)"
    elif resume:
        old, todo = _resumable(state, where, resume, command)
        if not todo:
            return
        sub = backend.resumed(old, replace(sub, items=tuple(todo)))
        order_note = f"job {resume}'s order, {fmt.plural(len(todo), 'item')} that did not succeed"
    else:
        todo, order_note = run_items.run_order(run_items.read_items(items), predicted)
        sub = replace(sub, items=tuple(todo))
    reserved = None
    if cap is not None:  # the batch's cap held against its project's month, checked and recorded in one transaction
        from gpuplan.market import tax as taxes

        row = state.cluster(cluster) if backend.has_cluster else None
        run_project = team.chosen() or (row.project if row is not None else None) or team.project()
        listed = (row.spec.get("tax") if row is not None else None) or "unknown"  # the cap is in billed yen, as listed
        reserved = budget.reserve_spend(state, run_project, taxes.on_basis(cap, listed, taxes.DEFAULT),
                                        "run's --max-yen", "cap")
    try:
        job = backends.submit(state, backend, sub, progress, RUN_WORDS)  # checked again: a resumed job's own settings
    except BaseException:
        if reserved is not None:
            state.release_commitments(rid=reserved)
        raise
    if reserved is not None:
        state.attach_commitment(reserved, job=job)  # held while the batch runs
    count = len(state.job_items(job)) if torchrun else len(sub.items)
    out = _console()
    out.print(f"job {job} submitted: {backend.submitted(state, job, count)}; order: {order_note}", markup=False)
    sys.stdout.flush()  # the id reaches a pipe even if this process is killed while it follows
    if detach:
        out.print(f"follow it with `gpuplan jobs {where}`, `gpuplan logs {where} {job} [ITEM]`;"
                  f" stop it with `gpuplan cancel {where} {job}`" + "".join(f"; {n}" for n in backend.notes(job)),
                  markup=False)
        _emit_job(state, job)
        return
    _follow(state, where, job, _recoverer(state, cluster, yes, on_demand_fallback) if recover else None)
    run_items.record_finished(state, job)
    ended = _job_of(state, where, job)
    if cap is not None and ended.state == "capped":
        summary = backends.summary(state, job)
        _print_summary(summary, predicted, job)
        _emit_job(state, job, summary, predicted)
        if down:
            _down(state, cluster, job, fetch)
        raise run_items.Capped(f"capped at {fmt.yen(cap)}: {fmt.yen(backends.yen(state, ended))} spent;"
                            f" `gpuplan run {cluster} --resume {job}` runs the items it did not finish")
    try:
        _finish(state, job, predicted)
    finally:
        for line in backend.after(job):
            out.print(line, markup=False)
    if down:
        _down(state, cluster, job, fetch)


# how `gpuplan run` names each option a backend may refuse (backends.OPTIONS)
RUN_WORDS = {backends.RECOVER: "--recover", backends.WORKDIR: "--workdir", backends.TORCHRUN: "--torchrun",
             backends.PER_GPU: "--per-gpu", backends.RETRIES: "--retries", backends.CHECKPOINTS: "--checkpoint-every",
             backends.CAP: "--max-yen", backends.IMAGE: "--image",
             backends.REGISTRY_LOGIN: "--registry-user and --registry-password-env", backends.REGISTRY_ID: "--registry",
             backends.QUOTE: "a price quote"}


def _max_yen(text: Optional[str]) -> Decimal | None:
    """--max-yen N: a number of yen above 0."""
    from gpuplan.units import yen

    if text is None:
        return None
    value = yen(text)
    if value is None:
        raise UsageError(f"bad --max-yen {text!r}: a number of yen above 0 and at most 1,000,000,000,000, e.g."
                         " --max-yen 500")
    return value


def dok_spend_lines(spend, predicted: dict | None = None) -> list[str]:
    """What a DOK submission can cost, shown before it is sent (`run dok:PLAN`, `dok submit`)."""
    t = spend.terms
    if spend.tasks == 1 and spend.items > 1:
        what = f"send one {spend.plan} DOK task for {fmt.plural(spend.items, 'item')}, one per GPU at a time"
    else:
        what = f"send {fmt.plural(spend.tasks, 'DOK task')} on {spend.plan} (one runs at a time per project, the rest wait)"
    each = "the task" if spend.tasks == 1 else "each task"
    billed = f"  billed {fmt.rate(t.price_jpy * 3600 / t.period_s)}/h for the seconds {each} runs"
    if t.minimum_s > 1:
        billed += f", at least {fmt.duration(t.minimum_s)}: at least {fmt.yen(spend.least_jpy(), 2)} in all"
    lines = [what, billed, f"  DOK stops {each} at its time limit, {fmt.duration(spend.time_limit_s)}: at most"
                           f" {fmt.yen(spend.most_jpy_a_task())} {'a task' if spend.tasks > 1 else ''}".rstrip()]
    if predicted and predicted.get("plan_yen") is not None:
        lines.append(f"  the plan: {fmt.yen(predicted['plan_yen'])}, {fmt.duration(predicted.get('plan_wall_s'))}")
    return lines


def confirm_dok(yes: bool, doing: str, predicted: dict | None = None):
    """The confirm hook of dok_runs.submit: show what the tasks can cost and ask (-y: don't)."""
    from gpuplan.cli.lifecycle import _confirm, _need_answer

    def confirm(spend) -> None:
        _need_answer(yes, doing)
        _confirm(dok_spend_lines(spend, predicted), "Send these tasks?" if spend.tasks > 1 else "Send this task?",
                 yes, default=True)

    return confirm


def _refuse_busy(state, cluster: str, why: str) -> None:
    """Bad input: a batch still running on the cluster (its slots hold the GPUs)."""
    from gpuplan.run import items as run_items

    for row in state.jobs(cluster):
        if row.state not in run_items.JOB_STATES_OVER:
            row = backends.refresh(state, row.id)
            if row.state not in run_items.JOB_STATES_OVER:
                raise UsageError(f"job {row.id} is still {row.state} on {cluster} and {why}: wait for it or"
                                 f" `gpuplan cancel {cluster} {row.id}` first")


ENV_FILE_HELP = "KEY=VALUE lines (# comments) for every {what}, as --env's; an --env of the same KEY wins."


def env_pairs(env: Optional[list[str]], env_file: Optional[Path] = None) -> dict[str, str]:
    """--env KEY=VALUE options (KEY alone: its value from this process's environment) over an
    --env-file's lines, as a mapping; one line for a malformed one or a KEY that is not set."""
    import os

    from gpuplan.userfiles import ENV_NAME, read_env_file

    environment = read_env_file(env_file) if env_file is not None else {}
    for kv in env or []:
        key, sep, value = kv.partition("=")
        if not ENV_NAME.match(key.strip()):
            raise UsageError(f"bad --env {kv!r}: write KEY=VALUE, or KEY alone for its value in your environment")
        if not sep:
            if key.strip() not in os.environ:
                raise UsageError(f"--env {key.strip()}: not set in this environment; export it, or write"
                                 f" {key.strip()}=VALUE")
            value = os.environ[key.strip()]
        environment[key.strip()] = value
    return environment


def _resumable(state, cluster: str, resume: str, command: list[str]) -> tuple[JobRow, list[tuple[int, str]]]:
    """`run --resume JOB`: the job (ended, its own command) and its items that did not succeed;
    none (said here) when every one did."""
    from gpuplan.run import items as run_items

    _job_of(state, cluster, resume)
    old = backends.refresh(state, resume)
    if old.state not in run_items.JOB_STATES_OVER:
        raise UsageError(f"job {resume} is still {old.state}; wait for it or `gpuplan cancel {cluster} {resume}` first")
    if old.options.get("torchrun"):
        raise UsageError(f"job {resume} is a --torchrun job: its ranks run together or not at all; start it again with"
                         " --torchrun")
    if command and tuple(command) != old.command:
        raise UsageError(f"--resume runs job {resume}'s own command; leave out the command after --")
    todo = [(it.idx, it.item) for it in state.job_items(resume) if it.status != "ok"]
    if not todo:
        _console().print(f"job {resume}: every item succeeded; nothing to resume")
        _emit_job(state, resume)
    return old, todo


def _job_of(state, cluster: str, job: str) -> JobRow:
    row = state.job(job)
    if row is None or row.cluster != cluster:
        raise UsageError(f"no job {job!r} on cluster {cluster!r}; `gpuplan jobs {cluster}` lists them")
    return row


def _progress_line(p) -> str:
    """One look at a batch (batches.Progress) in words."""
    eta = "-" if p.eta_s is None else fmt.duration(p.eta_s)
    return (f"{p.job} {p.state}: {p.ok} done, {p.failed} failed, {p.running} running / {p.total};"
            f" ETA {eta}; {fmt.yen(p.yen)} so far")


def _recoverer(state, cluster: str, yes: bool, on_demand: bool = False):
    """For `run --recover`: after each look at the batch, each node it has newly lost, or that
    the cloud announced it takes back (batches.newly_lost), is replaced once, after its yen is
    shown and the user agrees: in the cluster's market; with `on_demand`, a spot cluster's
    replacement that finds no spot capacity is bought on-demand instead. Never past the batch's
    yen cap: a replacement that would reach it before it is set up is not made, and a dearer one
    moves the cap earlier (recover.cap_time)."""
    from datetime import datetime, timezone

    from gpuplan.errors import CapacityUnavailable
    from gpuplan.run import batches, recover

    handled: set[str] = set()
    err = _console(stderr=True)

    def say(text: str) -> None:
        err.print(text, markup=False)

    def replace(row: JobRow, lost: batches.Lost) -> None:
        went = "is being taken back by the cloud" if lost.taken_back else "was lost"
        say(f"{lost.node} {went} ({lost.reason.removeprefix('lost: ')[:120]})")
        markets = [None] + ([recover.ON_DEMAND] if on_demand and lost.cost.market == recover.SPOT else [])
        for market in markets:
            c = lost.cost if market is None else recover.cost(state, cluster, lost.cost.seconds, market)
            stop, cap = recover.cap_time(state, row, gone=[lost.node], joining=c.terms), recover.job_cap(row)
            say(f"a replacement, {c.what}, costs {fmt.yen(c.price_jpy_per_hour)}/h: about {fmt.yen(c.yen)} for the"
                f" batch's {fmt.duration(lost.left_s)} left and {fmt.duration(recover.SETUP_GUESS_S)} of setup"
                + (f"; with it the batch's {fmt.yen(cap.yen)} cap stops it at {stop:%H:%M:%S} UTC"
                   if stop is not None and cap is not None else ""))
            if stop is not None and (stop - datetime.now(timezone.utc)).total_seconds() < recover.SETUP_GUESS_S:
                say(f"not replacing {lost.node}: the batch would reach its cap before a replacement is set up")
                return
            if not yes:
                if not sys.stdin.isatty():
                    say("not replacing it: no one to ask; `run --recover -y` replaces without asking")
                    return
                if not typer.confirm(f"Replace {lost.node}?", default=True):
                    return
            try:
                new = recover.replace_node(state, cluster, lost.node, _progress(err), market)
            except CapacityUnavailable as exc:
                if market is None and len(markets) > 1:
                    say(f"no spot capacity for the replacement ({exc}); trying on-demand")
                    continue
                row_c = state.cluster(cluster)
                where = f" {row_c.region}" if row_c is not None else ""
                say(f"could not replace {lost.node}: {exc}; every zone of its region{where} was asked, and no other"
                    " region is: a replacement joins the cluster over that region's private network;"
                    " the batch goes on without it")
                return
            except Exception as exc:  # noqa: BLE001 - the batch goes on on the nodes it has
                say(f"could not replace {lost.node}: {exc}; the batch goes on without it")
                return
            try:
                moved = recover.move_cap(state, row)
            except Exception as exc:  # noqa: BLE001 - the cap each attempt was given still holds
                moved = None
                say(f"could not move the batch's yen cap earlier for {new}: {exc}")
            say(f"{new} joined the batch in place of {lost.node}"
                + (f"; the yen cap now stops the batch at {moved:%H:%M:%S} UTC" if moved is not None else ""))
            return

    def look(row: JobRow) -> None:
        for lost in batches.newly_lost(state, cluster, row, handled):
            replace(row, lost)

    return look


def _follow(state, cluster: str, job: str, on_look=None) -> None:
    """Show the batch's progress until it ends (batches.follow): on a terminal one live display
    (cli/tables.py LiveView: a bar with its ETA, the yen so far against its cap in ledger yen), elsewhere a
    line per change. Ctrl-C stops following, not the batch."""
    from gpuplan.cli.tables import LiveView
    from gpuplan.run import batches, recover

    err = _console(stderr=True)
    row = state.job(job)
    cap = recover.job_cap(row) if row is not None else None
    view = LiveView(err, (cap.billed or cap.yen) if cap is not None else None)
    quiet_s = 10.0  # a log file gets a line when something changed, at most every 10 s
    last, last_at = "", 0.0

    def look(row: JobRow, p) -> None:
        nonlocal last, last_at
        if view.drawing:
            view.batch(p)
        else:
            line = _progress_line(p)
            if line != last and (p.over or time.monotonic() - last_at >= quiet_s):
                err.print(line, markup=False, highlight=False)
                last, last_at = line, time.monotonic()
        if not p.over and on_look is not None:
            on_look(row)

    try:
        with view:
            batches.follow(state, job, look)
    except KeyboardInterrupt:
        err.print(f"stopped following; job {job} goes on on the cluster: `gpuplan jobs {cluster}`,"
                  f" `gpuplan cancel {cluster} {job}`", markup=False)
        raise typer.Exit(130) from None


def _finish(state, job: str, predicted) -> None:
    """An ended batch: its summary, whether it calibrated its plan, exit 5 when items failed."""
    from gpuplan.run import batches
    from gpuplan.run import items as run_items

    summary, line = batches.finish(state, job, predicted)
    _print_summary(summary, predicted, job)
    if line:
        _console().print(line, markup=False)
    _emit_job(state, job, summary, predicted)
    if summary.failed:
        raise run_items.JobsFailed(f"{len(summary.failed)} of {fmt.plural(len(summary.jobs), 'item')} failed:"
                                f" {', '.join(j.item or j.job for j in summary.failed[:5])}; logs:"
                                f" `gpuplan logs {summary.cluster} {job} ITEM`")


def _print_summary(summary, predicted, job: str | None = None) -> None:
    from rich.table import Table

    from gpuplan.run import items as run_items

    con = _console()
    counts: dict[str, int] = {}
    for j in summary.jobs:
        counts[j.status] = counts.get(j.status, 0) + 1
    con.print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f" of {fmt.plural(len(summary.jobs), 'item')}", markup=False)
    failed = summary.failed
    if failed:  # the items that need a look; the ones that succeeded are in `gpuplan jobs` and the state
        table = Table("item", "status", "node", "attempts", "seconds")
        for j in failed[:20]:
            table.add_row(j.item or j.job, j.status, j.node, str(j.attempts), fmt.duration(j.seconds))
        con.print(table)
        if len(failed) > 20:
            con.print(f"... and {len(failed) - 20} more: `gpuplan jobs {summary.cluster} --format json`", markup=False)
    for q in summary.quarantined:
        con.print(f"set aside {q.node}: {q.reason}", markup=False, soft_wrap=True)
    cmp = run_items.compare(summary, predicted)
    how = _billed_how(summary)
    unpriced = owned(summary.provider) and summary.price_jpy_per_hour is None
    spent = ("power not counted (no power_watts in the inventory)" if unpriced else
             fmt.yen(cmp.measured_yen, 2 if owned(summary.provider) else 0))  # power: sen count
    con.print(f"measured: wall {fmt.duration(cmp.measured_wall_s)}, {spent} ({how})", markup=False)
    if summary.interruptions is not None:
        con.print(f"interrupted: {interruption_words(summary.interruptions)}", markup=False)
    if predicted is not None:
        yen_error = "" if unpriced else f", yen {_pct(cmp.yen_error_pct)}"
        con.print(f"plan:     wall {fmt.duration(cmp.predicted_wall_s)}, {fmt.yen(cmp.predicted_yen)} ({predicted['basis']})"
                  f"  -> error wall {_pct(cmp.wall_error_pct)}{yen_error}", markup=False)


def _billed_how(summary) -> str:
    """How a run's measured yen was counted, in words."""
    if len(summary.task_seconds) == 1 and summary.terms is not None:
        how = (f"one task billed for its run time at {fmt.rate(summary.terms.price_jpy)}/h, at least"
               f" {summary.terms.minimum_s} s")
    elif summary.task_seconds and summary.terms is not None:
        how = (f"{fmt.plural(len(summary.task_seconds), 'task')} each billed for its own run time at"
               f" {fmt.rate(summary.terms.price_jpy)}/h, at least {summary.terms.minimum_s} s a task")
    elif owned(summary.provider):  # the user's own hosts: their power, as the estimate charges it
        whose = "1 owned host's" if summary.nodes == 1 else f"{fmt.count(summary.nodes)} owned hosts'"
        how = (f"{whose} power at {fmt.rate(summary.price_jpy_per_hour)}/h each"
               if summary.price_jpy_per_hour is not None else "owned hosts")
    elif len({t.hourly for t, _ in summary.node_seconds}) > 1:  # a replacement at another price joined
        from collections import Counter

        prices = Counter(t.hourly for t, _ in summary.node_seconds)
        how = (f"{fmt.plural(len(summary.node_seconds), 'node')}: "
               + ", ".join(f"{n} x {fmt.yen(p)}/h" for p, n in sorted(prices.items())) + ", each for its time in the batch")
    else:
        how = f"{fmt.plural(summary.nodes, 'node')} x {fmt.yen(summary.price_jpy_per_hour)}/h"
    return how


def _emit_job(state, job: str, summary=None, predicted: dict | None = None) -> None:
    """With --format json: the job's shape on stdout (shapes.job), and once it was followed to its
    end, what it measured against the plan (shapes.outcome)."""
    if not _words_to_stderr.get():
        return
    from gpuplan.run import items as run_items

    row = state.job(job)
    doc = shapes.job(state, row, state.job_counts(job))
    if summary is not None:
        doc.update(shapes.outcome(summary, run_items.compare(summary, predicted), predicted, _billed_how(summary)))
    shapes.emit(doc)


def _pct(value: Decimal | None) -> str:
    return "n/a" if value is None else f"{value:+.1f}%"


def _down(state, cluster: str, job: str, into: Path | None) -> None:
    """--down: the job's outputs fetched (into `into`, else outputs/CLUSTER-JOB), then the cluster
    torn down. A fetch that fails stops here with the cluster up: its outputs are still on it."""
    from gpuplan.errors import GpuplanError
    from gpuplan.fleet import lifecycle

    folder = into or Path("outputs") / f"{cluster}-{job}"
    try:
        got = backends.outputs(state, job, folder)
    except GpuplanError as exc:
        raise type(exc)(f"--down: the outputs could not be fetched ({exc}); cluster {cluster} is left up with them:"
                        f" `gpuplan logs {cluster} {job} --fetch DIR`, then `gpuplan teardown {cluster}`") from None
    _console().print(f"--down: outputs of {fmt.plural(got.items, 'item')} ({fmt.plural(got.files, 'file')}) in {folder}",
                     markup=False)
    row = state.cluster(cluster)
    report = lifecycle.teardown(state, lifecycle.get_provider(row.provider), cluster,
                                progress=lambda m: _console(stderr=True).print(f"… {m}", markup=False))
    _console().print(f"--down: cluster {cluster} torn down ({fmt.plural(len(report.deleted), 'resource')} deleted)", markup=False)


def jobs(
    cluster: Annotated[str, typer.Argument(help="Cluster name (see `gpuplan status`), or dok for 高火力 DOK batches.")],
    job: Annotated[Optional[str], typer.Argument(help="One job (see the list): its row, the nodes it set aside and what interruptions cost it.")] = None,
    format: Annotated[str, shapes.format_option()] = "table",
    all_users: Annotated[bool, typer.Option("--all-users", help="Every user's batches, not only yours (rows from before gpuplan kept users show to everyone).")] = False,
    project: Annotated[Optional[str], typer.Option("--project", help="Only this project's batches.", metavar="NAME")] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="With JOB: draw it against its plan (each machine's planned jobs phase beside the items it ran, and the yen billed over time against the plan's) into an .svg or .png (needs gpuplan[plot]).", metavar="FILE.svg|png")] = None,
) -> None:
    """List the cluster's batches: id, state, counts, started, yen (reads what is new from the cluster);
    and what the cloud taking nodes back cost each interrupted one. Your own, unless --all-users
    (another user's batch names its owner)."""
    from rich.table import Table

    from gpuplan import team
    from gpuplan.run import batches
    from gpuplan.run import items as run_items
    from gpuplan.store import costs
    from gpuplan.store.state import State

    as_json = shapes.check_format(format)
    me = team.user()
    only = team.check_name(project, "--project") if project is not None else None
    if plot is not None and job is None:
        raise UsageError(f"--plot draws one batch against its plan: name it (gpuplan jobs {cluster} JOB --plot FILE.svg)")
    state = State.open_default()
    if job is not None:
        _job_of(state, cluster, job)
    err = _console(stderr=True)
    rows = []
    for v in batches.overview(state, cluster):
        if job is not None and v.row.id != job:
            continue
        if job is None and not team.visible(v.row.user, v.row.project, all_users, only, me):
            continue
        if v.not_refreshed:
            err.print(f"{v.row.id}: not refreshed ({v.not_refreshed})", markup=False)
        if v.calibration:
            err.print(f"{v.row.id}: {v.calibration}", markup=False)
        rows.append((v.row, v.counts))
    if plot is not None and job is not None:
        _plot_job(state, job, plot)
    if as_json:
        docs = [shapes.job(state, r, c) for r, c in rows]
        shapes.emit(docs[0] if job is not None else docs)
        return
    if not rows:
        _console().print(f"no jobs on {cluster}; start one with `gpuplan run {cluster} --items FILE -- CMD {{item}}`",
                         markup=False)
        return
    table = Table("job", "state", "ok", "failed", "running", "total", "started", "wall", "yen")
    for r, c in rows:
        failed = c.get("failed", 0) + c.get("bad input", 0) + c.get("timed out", 0)
        table.add_row(r.id + (f" ({r.user}'s)" if r.user not in (me, team.UNKNOWN_USER) else ""), r.state, str(c.get("ok", 0)), str(failed), str(c.get("running", 0)), str(r.total),
                      f"{r.started_at:%Y-%m-%d %H:%M:%S}" if r.started_at else "-", fmt.duration(run_items.job_seconds(r)),
                      fmt.yen(backends.yen(state, r)))
    out = _console()
    out.print(table)
    for r, _c in rows:
        if job is not None:
            for q in state.job_quarantines(r.id):
                out.print(f"set aside {q.node}: {q.reason}", markup=False)
        cost = costs.interruptions(state, r)
        if cost is not None:
            out.print(f"{r.id} interrupted: {interruption_words(cost)}", markup=False)


def _plot_job(state, job: str, path: Path) -> None:
    """`jobs CLUSTER JOB --plot FILE`: the batch drawn against its plan (run/against_plan.py)."""
    from gpuplan.planning import plot as plotting
    from gpuplan.run import against_plan

    plotting.run_chart(path, against_plan.picture(state, job))
    _console(stderr=True).print(f"plot written to {path}", markup=False)


def interruption_words(cost) -> str:
    """What the cloud taking nodes back cost a batch (costs.Interruptions), in words."""
    from decimal import ROUND_HALF_UP

    seconds = int(cost.redone_s.quantize(Decimal(1), rounding=ROUND_HALF_UP))
    spent = ("their machine time's yen unknown (no price recorded)" if cost.yen is None else
             f"{fmt.yen(cost.yen, 2)} of machine time spent on work done twice (part of the yen above, not added to it)")
    return (f"{fmt.plural(cost.nodes, 'node')} taken back by the cloud, {fmt.plural(cost.attempts, 'attempt')} stopped;"
            f" {fmt.count(seconds)} item-seconds redone, {spent}")


def logs(
    cluster: Annotated[str, typer.Argument(help="Cluster name, or dok for 高火力 DOK batches.")],
    job: Annotated[str, typer.Argument(help="Job id (see `gpuplan jobs CLUSTER`).")],
    item: Annotated[Optional[str], typer.Argument(help="The item (its text, or its line number from 0); without it, the driver's log.")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing as the log grows, until the item ends.")] = False,
    fetch: Annotated[Optional[Path], typer.Option("--fetch", help="Copy back what the item (or every ended item) wrote in its output dir ($GPUPLAN_OUTPUT_DIR, {out}) into DIR/<n>-<item>/.", metavar="DIR")] = None,
) -> None:
    """Print an item's log from the node it ran on (or the batch driver's log); --fetch copies its outputs back."""
    from gpuplan.store.state import State

    state = State.open_default()
    row = _job_of(state, cluster, job)
    if fetch is not None:
        if follow:
            raise UsageError("--fetch copies what has ended; leave out --follow")
        if fetch.exists() and not fetch.is_dir():
            raise UsageError(f"--fetch {fetch}: not a folder; give the folder to copy the outputs into")
        got = backends.outputs(state, job, fetch, item)
        _console().print(f"{fmt.plural(got.files, 'file')} of {fmt.plural(got.items, 'item')} copied into {fetch}",
                         markup=False)
        return

    def write(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    backends.of(row).logs(state, job, item, follow, write, lambda line: _console(stderr=True).print(line, markup=False))


def cancel(
    cluster: Annotated[str, typer.Argument(help="Cluster name, or dok for 高火力 DOK batches.")],
    job: Annotated[str, typer.Argument(help="Job id (see `gpuplan jobs CLUSTER`).")],
) -> None:
    """Stop a batch on every node: its driver, its tasks and every process its items started."""
    from gpuplan.run import items as run_items
    from gpuplan.store.state import State

    state = State.open_default()
    _job_of(state, cluster, job)
    row = backends.refresh(state, job)
    if row.state in run_items.JOB_STATES_OVER and row.state != "lost":
        _console().print(f"job {job} is already {row.state}; nothing to stop", markup=False)
        return
    stopped = backends.cancel(state, job)
    run_items.record_finished(state, job)
    counts = state.job_counts(job)
    noun, verb = backends.of(state.job(job)).stopped
    _console().print(f"job {job} cancelled: {fmt.plural(counts.get('ok', 0), 'item')} had succeeded;"
                     f" {fmt.plural(stopped, noun)} {verb}", markup=False)


def dashboard(
    cluster: Annotated[str, typer.Argument(help="Cluster name.")],
    port: Annotated[int, typer.Option("--port", help="Local port (0: any free one).")] = 8265,
) -> None:
    """Ray's dashboard of the cluster on http://127.0.0.1:PORT, through SSH, until Ctrl-C."""
    from gpuplan.store.state import State

    if not 0 <= port <= 65535:
        raise UsageError(f"bad --port {port}: a TCP port from 0 to 65535")
    state = State.open_default()
    if backends.for_target(cluster).has_cluster and state.cluster(cluster) is None:
        raise UsageError(f"no cluster named {cluster!r}; `gpuplan status` lists them")
    say = lambda p: (_console().print(f"Ray dashboard of {cluster}: http://127.0.0.1:{p} (Ctrl-C to stop)", markup=False),  # noqa: E731
                     sys.stdout.flush())
    try:
        backends.dashboard(state, cluster, port, say, lambda: False)
    except OSError as exc:
        raise UsageError(f"cannot listen on 127.0.0.1:{port} ({exc.strerror}); choose another --port") from None
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
    app.command("run", context_settings={"allow_extra_args": False})(run)
    app.command("jobs")(jobs)
    app.command("logs")(logs)
    app.command("cancel")(cancel)
    app.command("dashboard")(dashboard)
