"""`gpuplan bench` (measure a reference job into a profile) and `gpuplan run` (fan jobs out
over a cluster's GPUs, or launch one data-parallel job through torchrun)."""

from __future__ import annotations

import shlex
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Optional

import typer

from gpuplan.errors import UsageError
from gpuplan.planning import fmt


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, markup=False, soft_wrap=True)  # paths and names as written


def _progress(console):
    from rich.text import Text

    return lambda message: console.print(Text.assemble(("… ", "dim"), message))



def bench(
    workload: Annotated[str, typer.Argument(help="The reference job: colorize, resnet50, vgg_cifar or detect_streams (or the workload it models: colorize-hd, vgg-cifar10, yolo-fhd).")],
    local: Annotated[bool, typer.Option("--local", help="Measure on this machine.")] = False,
    cluster: Annotated[Optional[str], typer.Option("--cluster", help="Measure on this cluster's nodes over SSH.", metavar="NAME")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Tiny shapes (CPU-only machines): proves the pipeline, not the speed.")] = False,
    gpus: Annotated[Optional[int], typer.Option("--gpus", help="Slots per node to use (default: all GPUs; 2 processes on a CPU).", metavar="N")] = None,
    max_pack: Annotated[int, typer.Option("--max-pack", help="Try up to this many jobs sharing one GPU.", metavar="N")] = 4,
    out: Annotated[Optional[Path], typer.Option("--out", help="Profile file to write (.yaml or .json).", metavar="FILE")] = None,
    python: Annotated[str, typer.Option("--python", help="Python on the cluster's nodes (with gpuplan[bench] installed).", metavar="PATH")] = "python3",
    timeout: Annotated[int, typer.Option("--timeout", help="Seconds each measurement may take.", metavar="SECONDS")] = 1800,
    job_args: Annotated[Optional[str], typer.Option("--job-args", help="Extra arguments for the job, quoted: '--height 360 --width 640'.", metavar="ARGS")] = None,
) -> None:
    """Measure a reference job (alone, co-located, packed, data-parallel) and save a profile."""
    from gpuplan.operating import bench as bench_mod

    if local == (cluster is not None):
        raise UsageError("say where to measure: --local or --cluster NAME (one of them)")
    from gpuplan.operating.runner import MAX_PER_GPU, MAX_SLOTS_PER_NODE
    from gpuplan.planning.units import MAX_DURATION_S

    if max_pack < 1 or (gpus is not None and gpus < 1) or timeout < 1:
        raise UsageError("--max-pack, --gpus and --timeout must be at least 1")
    if max_pack > MAX_PER_GPU or (gpus or 0) > MAX_SLOTS_PER_NODE or timeout > MAX_DURATION_S:
        raise UsageError(f"--max-pack is at most {MAX_PER_GPU}, --gpus at most {MAX_SLOTS_PER_NODE} and --timeout at most"
                         f" {MAX_DURATION_S:,} s (366 days)")
    if out is not None and out.suffix not in (".yaml", ".yml", ".json"):
        raise UsageError(f"--out {out}: the profile file must end in .yaml, .yml or .json")
    from gpuplan.planning import workloads

    workload = workloads.bench_job(workload) or workload
    if workload not in bench_mod.JOBS:
        raise UsageError(f"unknown workload {workload!r}: choose one of {', '.join(sorted(bench_mod.JOBS))}")
    err = _console(stderr=True)
    if local:
        executor = bench_mod.LocalExecutor()
    else:
        from gpuplan.operating.state import State

        executor = bench_mod.ClusterExecutor(State.open_default(), cluster, python=python)
    try:
        extra_args = tuple(shlex.split(job_args or ""))
    except ValueError as exc:
        raise UsageError(f"--job-args {job_args!r}: {exc}; quote it as one shell string: --job-args '--height 360'") from None
    opts = bench_mod.BenchOptions(
        workload=workload, quick=quick, gpus=gpus, max_pack=max_pack, timeout=timeout,
        job_args=extra_args,
        command=shlex.join(["gpuplan", "bench", workload, *(["--local"] if local else ["--cluster", cluster]),
                            *(["--quick"] if quick else []), *(["--gpus", str(gpus)] if gpus else []),
                            "--max-pack", str(max_pack), *(["--job-args", job_args] if job_args else [])]),
        progress=_progress(err),
    )
    profile, path = bench_mod.bench(opts, executor, out)
    _print_profile(profile, path)


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
    cluster: Annotated[str, typer.Argument(help="Cluster name (see `gpuplan status`).")],
    command: Annotated[list[str], typer.Argument(help="After --: the command; {item} is replaced by each item.")],
    items: Annotated[Optional[Path], typer.Option("--items", help="File with one item per line (# comments skipped).", metavar="FILE")] = None,
    per_gpu: Annotated[int, typer.Option("--per-gpu", help="Jobs sharing each GPU at once.", metavar="N")] = 1,
    retries: Annotated[int, typer.Option("--retries", help="Extra attempts for a failed job (on any free slot).", metavar="N")] = 0,
    plan: Annotated[Optional[Path], typer.Option("--plan", help="The plan saved by `gpuplan estimate --save`, to compare measured time and yen with predicted.", metavar="FILE")] = None,
    torchrun: Annotated[bool, typer.Option("--torchrun", help="One data-parallel job over all nodes' GPUs through torchrun.")] = False,
    python: Annotated[str, typer.Option("--python", help="Python on the nodes, for --torchrun.", metavar="PATH")] = "python3",
    master_port: Annotated[int, typer.Option("--master-port", help="The torchrun rendezvous port on the first node.", metavar="PORT")] = 29500,
    timeout: Annotated[int, typer.Option("--timeout", help="Seconds one job may run.", metavar="SECONDS")] = 24 * 3600,
) -> None:
    """Run jobs on every GPU slot of a cluster, fetch their logs, and compare time and yen with the plan."""
    from gpuplan.operating import locks, runner
    from gpuplan.operating.state import State

    if not command:
        raise UsageError("give the command after --, e.g. gpuplan run demo --items videos.txt -- python train.py {item}")
    from gpuplan.planning.units import MAX_DURATION_S

    if per_gpu < 1 or retries < 0 or timeout < 1:
        raise UsageError("--per-gpu and --timeout must be at least 1 and --retries at least 0")
    if per_gpu > runner.MAX_PER_GPU or retries > runner.MAX_RETRIES or timeout > MAX_DURATION_S:
        raise UsageError(f"--per-gpu is at most {runner.MAX_PER_GPU}, --retries at most {runner.MAX_RETRIES} and"
                         f" --timeout at most {MAX_DURATION_S:,} s (366 days)")
    if not 1 <= master_port <= 65535:
        raise UsageError(f"bad --master-port {master_port}: a TCP port from 1 to 65535")
    if torchrun == (items is not None):
        raise UsageError("give --items FILE (one job per item) or --torchrun (one job over all GPUs), not both or neither")
    predicted = runner.read_plan(plan) if plan else None
    state = State.open_default()
    err = _console(stderr=True)
    progress = _progress(err)
    with locks.cluster(cluster):  # no teardown or bootstrap under running jobs
        if torchrun:
            summary = runner.run_torchrun(state, cluster, command, python=python, master_port=master_port,
                                          timeout=timeout, progress=progress)
        else:
            summary = runner.run_items(state, cluster, runner.read_items(items), command, per_gpu=per_gpu,
                                       retries=retries, timeout=timeout, progress=progress)
    _print_summary(summary, predicted)
    line = runner.calibrate(state, summary, predicted)
    if line:
        _console().print(line)
    if summary.failed:
        raise runner.JobsFailed(f"{len(summary.failed)} of {len(summary.jobs)} job(s) failed after retries:"
                                f" {', '.join(j.job for j in summary.failed[:5])}; logs in {summary.log_dir}")


def _print_summary(summary, predicted) -> None:
    from rich.table import Table

    from gpuplan.operating import runner

    con = _console()
    table = Table("job", "slot", "status", "attempts", "seconds", "log")
    for j in summary.jobs:
        table.add_row(j.job, j.slot, j.status, str(j.attempts), fmt.duration(j.seconds), str(j.log_path))
    con.print(table)
    for q in summary.quarantined:
        con.print(f"quarantined {q.node}: {q.reason}", markup=False, soft_wrap=True)
    cmp = runner.compare(summary, predicted)
    con.print(f"measured: wall {fmt.duration(cmp.measured_wall_s)}, {fmt.yen(cmp.measured_yen)}"
              f" ({fmt.plural(summary.nodes, 'node')} x {fmt.yen(summary.price_jpy_per_hour)}/h)")
    if predicted is not None:
        con.print(f"plan:     wall {fmt.duration(cmp.predicted_wall_s)}, {fmt.yen(cmp.predicted_yen)} ({predicted['basis']})"
                  f"  -> error wall {_pct(cmp.wall_error_pct)}, yen {_pct(cmp.yen_error_pct)}")


def _pct(value: Decimal | None) -> str:
    return "n/a" if value is None else f"{value:+.1f}%"


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
    app.command("run", context_settings={"allow_extra_args": False})(run)
