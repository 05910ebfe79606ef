"""Workloads: built-in profiles (catalog/workloads/*.yaml) and a user's YAML file, as `Workload`.

The file format is documented in docs/workloads.md. Every problem with a file is one
UsageError line naming the file and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gpuplan.errors import UsageError
from gpuplan.planning.evidence import SpeedKind
from gpuplan.planning.plan_types import DataParallel, Job, MemoryFraction, Packing, ShardedMemory, Streams, Workload
from gpuplan.units import MAX_YEN

VIDEOS_WORKLOAD = "colorize-hd"

# Limits on what one estimate plans (docs/workloads.md, "Limits"). Past them input is refused with
# one line, never planned for minutes or hours.
# The planner's time grows with the jobs: under 10 s at 20,000 on 2 CPUs, a tight deadline too
# (benchmarks/limits_bench.py).
MAX_JOBS = 20_000
MAX_FILE_BYTES = 2**20  # 20,000 one-line jobs take about 400 KiB; libyaml reads a MiB of jobs in a few seconds
MAX_JOB_SECONDS = 100 * 365 * 86400  # one job's work alone on the reference GPU; beyond 100 GPU-years is a typo
MAX_SETUP_SECONDS = 366 * 86400  # setup or staging on one machine
RATIOS = (Decimal("0.001"), Decimal(1000))  # speeds, slowdowns, efficiencies and factors: all within 1000x of 1
MAX_KEY = 1024  # GPUs of one machine (colocation) or jobs sharing one GPU (packing)
_TOP = {
    "name", "description", "unit", "seconds_per_unit", "reference_gpu", "reference_speed", "kind",
    "memory_gib", "jobs", "speed", "max_speed", "colocation", "packing", "parallel", "scaling",
    "staging", "setup_minutes", "owned", "source", "assumptions",
    "memory_peak_gib", "job_start", "data_parallel", "streams", "feed", "memory_fraction", "checkpoint", "command",
}


# `gpuplan bench` names its reference jobs after their code, `estimate` after the workload they
# model: either spelling is accepted by both (and - for _).
BENCH_JOBS = {"colorize": "colorize-hd", "resnet50": "resnet50", "vgg_cifar": "vgg-cifar10", "detect_streams": "yolo-fhd"}


def _spelling(text: str) -> str:
    return text.strip().lower().replace("_", "-")


def builtin_name(text: str) -> str | None:
    """The built-in workload `text` names, in its own spelling or its bench job's ("colorize")."""
    t = _spelling(text)
    if t in builtin_names():
        return t
    return next((w for job, w in BENCH_JOBS.items() if _spelling(job) == t), None)


def bench_job(text: str) -> str | None:
    """The bench reference job `text` names, in its own spelling or its workload's ("colorize-hd")."""
    t = _spelling(text)
    return next((job for job, w in BENCH_JOBS.items() if t in (_spelling(job), w)), None)


def builtin_names() -> list[str]:
    root = _root()
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".yaml"))


def load(name_or_file: str) -> Workload:
    """A built-in workload by name, or a user's YAML file by path."""
    text = name_or_file.strip()
    builtin = builtin_name(text) if not text.endswith((".yaml", ".yml", ".json")) else None
    if builtin is not None and not Path(text).exists():
        entry = _root() / f"{builtin}.yaml"
        return parse(entry.read_text(encoding="utf-8"), f"built-in workload {builtin}")
    from gpuplan.userfiles import expand

    path = expand(text, "workload file")
    if path.suffix in (".yaml", ".yml", ".json") or path.exists():
        if not path.exists():
            raise UsageError(f"workload file {path} not found; give a built-in name ({', '.join(builtin_names())}) or a YAML "
                             f"file")
        from gpuplan.userfiles import read_text

        text = read_text(path, "workload file", f"give a YAML file of at most {MAX_JOBS:,} jobs (docs/workloads.md)",
                         max_bytes=MAX_FILE_BYTES)
        return parse(text, str(path))
    raise UsageError(f"unknown workload {text!r}; built-ins: {', '.join(builtin_names())}, or give a YAML file "
                     f"(docs/workloads.md)")


def with_catalog_gpus(work: Workload, cat) -> Workload:
    """The workload with its GPU names as the catalog spells them ("t4" is T4), or one line naming
    the field when its reference GPU is not a GPU the catalog knows (every plan would otherwise
    be excluded for a figure missing on some unrelated machine)."""
    def known(text: str, field: str) -> str:
        hits = cat.match_gpus(text)
        exact = [g for g in hits if g.lower().replace(" ", "") == text.lower().replace(" ", "")]
        if not exact and work.reference_speed is not None and text == work.reference_gpu:
            return text  # a GPU the workload says is not in the table ("GTX 1080" is not the GTX 1080 Ti)
        if len(exact) == 1 or len(hits) == 1:
            return (exact or hits)[0]
        if field == "reference_gpu" and work.reference_speed is None:
            listed = f"it could be {', '.join(hits)}" if hits else f"known GPUs: {', '.join(sorted(cat.gpus))}"
            raise UsageError(f"workload {work.name}: reference_gpu {text!r} is not a GPU of the catalog ({listed}); "
                             "name one, or give reference_speed (docs/workloads.md)")
        return text

    classes = sorted({k for g in cat.gpus.values() for k in g.rel_speed})
    if work.kind not in classes:
        raise UsageError(f"workload {work.name}: kind {work.kind!r} is not a speed class of catalog/gpus.csv; use one of"
                         f" {', '.join(classes)} (docs/workloads.md)")
    reference = known(work.reference_gpu, "reference_gpu")
    speed = {known(g, f"speed.{g}"): v for g, v in work.speed.items()}
    if reference == work.reference_gpu and list(speed) == list(work.speed):
        return work
    return replace(work, reference_gpu=reference, speed=MappingProxyType(speed))


def videos(n: int) -> Workload:
    """`--videos N`: N colorize-hd jobs of 1000 epochs each."""
    if n < 1:
        raise UsageError(f"--videos must be at least 1, not {n}")
    if n > MAX_JOBS:
        raise UsageError(f"--videos {n}: gpuplan plans at most {MAX_JOBS:,} jobs at once; plan a part of the batch")
    base = load(VIDEOS_WORKLOAD)
    job = base.jobs[0]
    return replace(base, jobs=tuple(Job(f"video-{i + 1}", job.units) for i in range(n)))


def parse(text: str, where: str) -> Workload:
    import yaml

    from gpuplan.collector import collector_paused
    from gpuplan.userfiles import load_yaml

    try:
        with collector_paused():  # 20,000 jobs are some 100,000 parser events and values, none in a cycle
            data = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" line {mark.line + 1}" if mark is not None else ""
        raise UsageError(f"{where}{at}: not valid YAML ({getattr(exc, 'problem', None) or type(exc).__name__})") from None
    with collector_paused():
        return from_dict(data, where)


def from_dict(data: Any, where: str) -> Workload:
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a mapping with name, unit, seconds_per_unit, reference_gpu and jobs")
    unknown = set(map(str, data)) - _TOP
    if unknown:
        raise UsageError(f"{where}: unknown field {sorted(unknown)[0]!r}; see docs/workloads.md")
    streams = _streams(where, data)
    for key in ("name", "reference_gpu") + (() if streams else ("jobs",)):
        if data.get(key) in (None, ""):
            raise UsageError(f"{where}: field '{key}' is missing; see docs/workloads.md")
    if data.get("seconds_per_unit") in (None, ""):
        # optional where every job gives its time (seconds, minutes, hours): the unit is then a second
        counted = streams or any(isinstance(e, dict) and e.get("units") is not None for e in data.get("jobs") or [])
        if counted or data.get("unit") not in (None, "", "second"):
            raise UsageError(f"{where}: field 'seconds_per_unit' is missing: jobs counted in units (or streams) need"
                             f" the seconds one {data.get('unit') or 'unit'} takes alone; see docs/workloads.md")
        data = {**data, "unit": "second", "seconds_per_unit": 1}
    spu = _dec(where, "seconds_per_unit", data["seconds_per_unit"], positive=True)
    if streams:
        if data.get("jobs") is not None:
            raise UsageError(f"{where}: give either streams (real-time work) or jobs (a batch), not both")
        frames = streams.fps * streams.duration_s
        jobs = tuple(Job(f"stream-{i + 1}", frames) for i in range(streams.count))
    else:
        jobs = _jobs(where, data["jobs"], spu)

    speed = {str(k): _ratio(where, f"speed.{k}", v) for k, v in _map(where, "speed", data.get("speed")).items()}
    col = _map(where, "colocation", data.get("colocation"))
    _only(where, "colocation", col, {"slowdown", "default", "source"})
    slowdown = {}
    for g, v in _map(where, "colocation.slowdown", col.get("slowdown")).items():
        f = _ratio(where, f"colocation.slowdown.{g}", v)
        if f < 1:
            raise UsageError(f"{where}: colocation.slowdown.{g} = {v} is below 1; it is time shared / time alone")
        slowdown[_key(where, "colocation.slowdown", g)] = f
    default = _ratio(where, "colocation.default", col.get("default", "1.10"))
    if default < 1:
        raise UsageError(f"{where}: colocation.default = {default} is below 1; it is time shared / time alone")

    pk = _map(where, "packing", data.get("packing"))
    _only(where, "packing", pk, {"efficiency", "startup_factor", "by_gpu"})
    packing = _packing(where, "packing.efficiency", pk.get("efficiency"))
    by_gpu = {str(g): MappingProxyType(_packing(where, f"packing.by_gpu.{g}", table))
              for g, table in _map(where, "packing.by_gpu", pk.get("by_gpu")).items()}
    startup = _ratio(where, "packing.startup_factor", pk.get("startup_factor", "1.2"))

    parallel = str(data.get("parallel") or "none")
    if parallel not in ("none", "data"):
        raise UsageError(f"{where}: parallel must be 'none' (one job per GPU) or 'data' (data-parallel), not {parallel!r}")
    sc = _map(where, "scaling", data.get("scaling"))
    _only(where, "scaling", sc, {"intra_node_eff_per_doubling", "inter_node_speedup_per_doubling", "measured", "source"})
    dp_eff = _dp_points(where, sc.get("measured"))

    dp = _map(where, "data_parallel", data.get("data_parallel"))
    _only(where, "data_parallel", dp, {"gradient_bytes", "batch_per_gpu", "samples_per_unit", "overlap",
                                       "validated_global_batch", "source", "memory", "input_step_s",
                                       "compute_seconds_per_unit", "shared_batch"})
    if (dp.get("input_step_s") is not None or dp.get("shared_batch")) and dp.get("gradient_bytes") is None:
        raise UsageError(f"{where}: data_parallel.input_step_s and shared_batch need data_parallel.gradient_bytes,"
                         " batch_per_gpu and samples_per_unit (a step's compute and averaging come from them)")
    if not isinstance(dp.get("shared_batch", False), bool):
        raise UsageError(f"{where}: data_parallel.shared_batch must be true or false, not {dp['shared_batch']!r}")
    sharded = _sharded(where, dp.get("memory"))
    if dp.get("gradient_bytes") is not None:
        for needed in ("batch_per_gpu", "samples_per_unit"):
            if dp.get(needed) is None:
                raise UsageError(f"{where}: data_parallel.gradient_bytes needs data_parallel.{needed} too"
                                 " (a step's compute time comes from them)")
    overlap = _dec(where, "data_parallel.overlap", dp.get("overlap", 0))
    data_parallel = DataParallel(
        efficiency=MappingProxyType(dp_eff),
        source=str(sc.get("source") or where) if dp_eff else "",
        gradient_bytes=_whole(where, "data_parallel.gradient_bytes", dp.get("gradient_bytes")),
        batch_per_gpu=_whole(where, "data_parallel.batch_per_gpu", dp.get("batch_per_gpu")),
        samples_per_unit=_dec(where, "data_parallel.samples_per_unit", dp["samples_per_unit"], positive=True)
        if dp.get("samples_per_unit") is not None else None,
        overlap=overlap,
        validated_global_batch=_whole(where, "data_parallel.validated_global_batch", dp.get("validated_global_batch")),
        comm_source=str(dp.get("source") or where) if dp else "",
        intra_node_eff_per_doubling=_ratio(where, "scaling.intra_node_eff_per_doubling",
                                           sc.get("intra_node_eff_per_doubling", "0.985")),
        inter_node_speedup_per_doubling=_ratio(where, "scaling.inter_node_speedup_per_doubling",
                                               sc.get("inter_node_speedup_per_doubling", "1.5")),
        memory=sharded,
        input_step_s=_dec(where, "data_parallel.input_step_s", dp["input_step_s"], positive=True)
        if dp.get("input_step_s") is not None else None,
        compute_seconds_per_unit=_dec(where, "data_parallel.compute_seconds_per_unit", dp["compute_seconds_per_unit"],
                                      positive=True) if dp.get("compute_seconds_per_unit") is not None else None,
        shared_batch=bool(dp.get("shared_batch", False)),
    )
    if overlap > 1:
        raise UsageError(f"{where}: data_parallel.overlap = {overlap} is above 1; it is the share of a step's compute"
                         " the allreduce can hide behind")

    fraction = _fraction(where, data.get("memory_fraction"))
    if fraction is not None and data.get("memory_gib") is not None:
        raise UsageError(f"{where}: give memory_gib or memory_fraction, not both (with a fixed fraction the need"
                         " follows from the card: the fraction x its memory + the context)")
    memory_gib = (_dec(where, "memory_gib", data["memory_gib"], positive=True) if data.get("memory_gib") is not None
                  else fraction.inside_gib + fraction.context_gib if fraction is not None else None)

    js = _map(where, "job_start", data.get("job_start"))
    _only(where, "job_start", js, {"seconds", "source"})
    job_start_s = _dec(where, "job_start.seconds", js["seconds"]) if js.get("seconds") is not None else Decimal(0)

    fd = _map(where, "feed", data.get("feed"))
    _only(where, "feed", fd, {"cpu_seconds_per_unit", "bytes_per_unit", "reads_from", "source"})
    feed_cpu = (_dec(where, "feed.cpu_seconds_per_unit", fd["cpu_seconds_per_unit"], positive=True)
                if fd.get("cpu_seconds_per_unit") is not None else None)
    feed_bytes = (_dec(where, "feed.bytes_per_unit", fd["bytes_per_unit"], positive=True)
                  if fd.get("bytes_per_unit") is not None else None)
    reads_from = fd.get("reads_from") or "network"
    if reads_from not in ("network", "disk"):
        raise UsageError(f"{where}: feed.reads_from = {reads_from!r}: give network (object storage, the default) or disk")
    st = _map(where, "staging", data.get("staging"))
    _only(where, "staging", st, {"minutes", "size_gb", "bandwidth_mbps", "jpy"})
    staging_s = 0
    if st.get("minutes") is not None:
        staging_s = int(_dec(where, "staging.minutes", st["minutes"], most=MAX_SETUP_SECONDS // 60) * 60)
    elif st.get("size_gb") is not None:
        if st.get("bandwidth_mbps") is None:
            raise UsageError(f"{where}: staging.size_gb needs staging.bandwidth_mbps (or give staging.minutes)")
        size = _dec(where, "staging.size_gb", st["size_gb"])
        bw = _dec(where, "staging.bandwidth_mbps", st["bandwidth_mbps"], positive=True)
        staging_s = int((size * 8000 / bw).to_integral_value(rounding=ROUND_CEILING))  # GB -> megabits
        if staging_s > MAX_SETUP_SECONDS:
            raise UsageError(f"{where}: staging.size_gb / staging.bandwidth_mbps gives {staging_s:,} s of staging, over the"
                             f" limit of {MAX_SETUP_SECONDS // 86400} days; check both figures")

    checkpoint_s, checkpoint_path = checkpoint(f"{where}: checkpoint", data.get("checkpoint"))

    owned = data.get("owned") or []
    if isinstance(owned, str):
        owned = [owned]
    if not isinstance(owned, list) or not all(map(_scalar, owned)):
        raise UsageError(f"{where}: owned must be a list of offer names")
    assumptions = data.get("assumptions") or []
    if not isinstance(assumptions, list):
        raise UsageError(f"{where}: assumptions must be a list of lines")

    return Workload(
        name=_text(where, "name", data["name"]),
        description=_text(where, "description", data.get("description") or ""),
        jobs=jobs,
        unit=_text(where, "unit", data.get("unit") or "second"),
        seconds_per_unit=spu,
        reference_gpu=_text(where, "reference_gpu", data["reference_gpu"]),
        kind=_text(where, "kind", data.get("kind") or "cnn-train"),
        memory_gib=memory_gib,
        memory_peak_gib=_dec(where, "memory_peak_gib", data["memory_peak_gib"], positive=True)
        if data.get("memory_peak_gib") is not None else None,
        memory_source=(fraction.source if fraction is not None else where) if memory_gib is not None else "",
        memory_fraction=fraction,
        job_start_s=job_start_s,
        job_start_source=str(js.get("source") or where) if job_start_s else "",
        speed=MappingProxyType(speed),
        reference_speed=_ratio(where, "reference_speed", data["reference_speed"])
        if data.get("reference_speed") is not None else None,
        max_speed=_ratio(where, "max_speed", data["max_speed"]) if data.get("max_speed") is not None else None,
        colocation_slowdown=MappingProxyType(slowdown),
        colocation_default=default,
        colocation_source=str(col.get("source") or "ESTIMATE (not measured for this workload)"),
        packing=Packing(MappingProxyType(packing), MappingProxyType(by_gpu), startup),
        data_parallel=data_parallel if parallel == "data" else None,
        feed_cpu_seconds_per_unit=feed_cpu,
        feed_bytes_per_unit=feed_bytes,
        feed_reads_from=reads_from,
        feed_source=str(fd.get("source") or where) if feed_cpu is not None or feed_bytes is not None else "",
        streams=streams,
        staging_s=staging_s,
        staging_jpy=_dec(where, "staging.jpy", st.get("jpy", 0), most=MAX_YEN),
        setup_s=int(_dec(where, "setup_minutes", data["setup_minutes"], most=MAX_SETUP_SECONDS // 60) * 60)
        if data.get("setup_minutes") is not None else None,
        owned=tuple(str(o) for o in owned),
        source=str(data.get("source") or where),
        assumptions=tuple(str(a) for a in assumptions),
        checkpoint_s=checkpoint_s,
        checkpoint_path=checkpoint_path,
        commands=_commands(where, data.get("command")),
    )


def _commands(where: str, value: Any) -> tuple[str, ...]:
    """`command:` of a workload file: the command (or a list of them) that runs its job. A batch
    calibrates the workload's speed only when its command begins with one of them."""
    if value is None:
        return ()
    listed = [value] if isinstance(value, str) else value
    if not isinstance(listed, list) or not all(isinstance(c, str) and c.strip() for c in listed):
        raise UsageError(f"{where}: command must be a command line or a list of them (the commands that run this"
                         f" workload's job), not {value!r}")
    from gpuplan.userfiles import check_plain

    for c in listed:
        check_plain(c, f"{where}: command")
    return tuple(c.strip() for c in listed)


def checkpoint(at: str, value: Any) -> tuple[int | None, str]:
    """`checkpoint: {every: 10m, path: DIR}` of a workload or batch file (a duration alone is
    `every`): seconds between the job's checkpoints (None: not given) and where it writes them
    ("": not said). The model prices an interrupted spot machine's redone work with it
    (market/spot_risk.py); the path is the run engine's."""
    from gpuplan.units import parse_duration

    if value in (None, ""):
        return None, ""
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        value = {"every": value}
    if not isinstance(value, dict):
        raise UsageError(f"{at}: a mapping such as {{every: 10m, path: /data/ckpt}}")
    unknown = sorted(set(map(str, value)) - {"every", "path"})
    if unknown:
        raise UsageError(f"{at}: unknown field {unknown[0]!r}; use every (how often: 10m) and path")
    every = value.get("every")
    if every in (None, ""):
        raise UsageError(f"{at}: say how often the job checkpoints: every: 10m")
    if isinstance(every, bool) or not isinstance(every, (str, int)):
        raise UsageError(f"{at}.every {every!r}: a duration such as 10m, 1h or 90s")
    seconds = parse_duration(str(every), f"{at}.every")
    path = value.get("path")
    if path is not None and (isinstance(path, bool) or not isinstance(path, (str, int))):
        raise UsageError(f"{at}.path {path!r}: a folder path")
    return seconds, "" if path is None else str(path)


def with_measured_speeds(workload: Workload, speeds: Mapping[str, Decimal], why: list[str],
                         kind: SpeedKind = SpeedKind.MEASURED) -> Workload:
    """The workload with these per-GPU speeds (relative to its reference GPU), of this kind, and why."""
    kinds = {g: k for g, k in workload.speed_kinds.items() if g not in speeds}
    if kind is not SpeedKind.MEASURED:
        kinds.update(dict.fromkeys(speeds, kind))
    return replace(workload, speed=MappingProxyType({**workload.speed, **speeds}), speed_kinds=MappingProxyType(kinds),
                   assumptions=workload.assumptions + tuple(why))


def apply_profile(workload: Workload, profile_path: str | Path) -> Workload:
    """The workload with every figure a measured profile gives (gpuplan.planning.profiles format):
    seconds per unit, job start cost, memory need, co-location slowdown, packing efficiency per
    k, data-parallel efficiency per (GPUs, nodes). What the profile does not measure keeps the
    workload's own figure, and the plan's assumptions say which."""
    from gpuplan.planning.profiles import load_profile

    prof = load_profile(profile_path)
    o = prof.to_workload_overrides()
    if o["unit"] != workload.unit:
        raise UsageError(
            f"profile {profile_path}: unit {o['unit']!r} does not match workload {workload.name}'s unit {workload.unit!r}"
        )
    source = f"{o['profile_source']} (file {profile_path})"
    if o["reference_gpu"] == "cpu":
        # a CPU run times tiny shapes on no GPU: its GPU figures mean nothing for a GPU plan, but CPU
        # seconds spent feeding are CPU seconds on any machine, so that one figure is taken
        if o["feed_cpu_seconds_per_unit"] is None:
            raise UsageError(f"profile {profile_path} was measured on a CPU (no GPU) and gives no CPU need to feed:"
                             " nothing in it applies to a GPU plan; run `gpuplan bench` on a machine with the GPU")
        workload = replace(workload, assumptions=workload.assumptions + (
            f"GPU figures of {source} not used: measured on a CPU, not a GPU",))
        return replace(workload, **_feed_changes(workload, o, source))
    longest = max(j.units for j in workload.jobs) * o["seconds_per_unit"]
    if longest > MAX_JOB_SECONDS:
        raise UsageError(f"profile {profile_path}: seconds_per_unit {o['seconds_per_unit']} makes a job of {workload.name}"
                         f" {longest:.3g} s alone, over the limit of 100 years ({MAX_JOB_SECONDS:,} s); check the profile")
    kept = [name for name in o["unmeasured"]]
    packing_changes: dict[str, Any] = {}
    changes: dict[str, Any] = {
        "seconds_per_unit": o["seconds_per_unit"],
        "reference_gpu": o["reference_gpu"],
        "source": f"{workload.source}; figures from {o['profile_source']}",
        "assumptions": workload.assumptions + (f"measured {source}",) + (
            (f"not measured by that profile: {', '.join(kept)} (the workload's own figures are used)",) if kept else ()),
    }
    if o["reference_gpu"] != workload.reference_gpu:
        # speeds relative to the old reference GPU no longer apply; the profile's GPU is 1 by definition
        changes["speed"] = MappingProxyType({o["reference_gpu"]: Decimal(1)})
        changes["reference_speed"] = None
    if o["fixed_seconds_per_job"] is not None:
        changes["job_start_s"] = o["fixed_seconds_per_job"]
        changes["job_start_source"] = source
        packing_changes["startup_factor"] = Decimal(1)  # start-up is now counted per job start, not as report C's factor
    if o["memory_need_gib"] is not None:
        changes["memory_gib"] = o["memory_need_gib"]
        changes["memory_source"] = f"smallest cap at full speed, {source}"
    elif o["memory_peak_gib"] is not None:
        changes["memory_gib"] = o["memory_peak_gib"]
        changes["memory_source"] = f"uncapped peak, need not measured: overstates it ({source})"
    if "memory_gib" in changes:
        changes["memory_fraction"] = None  # the profile's memory figure replaces the workload's fixed fraction
    if o["memory_peak_gib"] is not None:
        changes["memory_peak_gib"] = o["memory_peak_gib"]
    if len(o["colocation_slowdown"]) > 1:
        changes["colocation_slowdown"] = MappingProxyType({g: f for g, f in o["colocation_slowdown"].items() if g > 1})
        changes["colocation_source"] = source
    if len(o["packing_efficiency"]) > 1 or o["packing_no_fit"]:
        packing: dict[int, Decimal | None] = {k: e for k, e in o["packing_efficiency"].items() if k <= o["max_per_gpu"]}
        packing.update({k: None for k in o["packing_no_fit"]})
        packing[1] = Decimal(1)
        packing_changes["efficiency"] = MappingProxyType(packing)
    pk = workload.packing
    if o["reference_gpu"] != workload.reference_gpu and len(pk.efficiency) > 1:
        # the workload's own packing figures were measured on its old reference GPU: they stay that GPU's
        packing_changes["by_gpu"] = MappingProxyType({workload.reference_gpu: pk.efficiency, **pk.by_gpu})
        packing_changes.setdefault("efficiency", MappingProxyType({1: Decimal(1)}))
    if packing_changes:
        changes["packing"] = replace(pk, **packing_changes)
    if o["feed_cpu_seconds_per_unit"] is not None:
        changes.update(_feed_changes(replace(workload, assumptions=changes["assumptions"]), o, source))
    if any(g > 1 for g, _ in o["dp_efficiency"]) and workload.data_parallel is not None:
        changes["data_parallel"] = replace(workload.data_parallel, efficiency=MappingProxyType(dict(o["dp_efficiency"])),
                                           source=source)
    return replace(workload, **changes)


def _feed_changes(workload: Workload, o: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The feed limits from a profile's measured CPU need and bytes read, and the assumption line
    that names them."""
    from gpuplan.planning.model import number_text

    how = f"{o['feed_how'] or 'the input pipeline'}, {source}"
    line = (f"feed limit: {number_text(o['feed_cpu_seconds_per_unit'])} CPU s per {o['unit']} to feed one job, measured"
            f" ({how}): a job runs no faster than its share of the machine's vCPUs (vCPUs / GPUs) feeds it")
    changes: dict[str, Any] = {"feed_cpu_seconds_per_unit": o["feed_cpu_seconds_per_unit"],
                               "feed_source": f"CPU need measured: {how}"}
    read = o.get("feed_bytes_per_unit")
    if read is not None:
        where = "the machine's disk" if workload.feed_reads_from == "disk" else "object storage over the machine's network"
        line += (f"; and {number_text(read / 10**6)} MB read per {o['unit']}, measured the same way: no faster than its"
                 f" share of {where} (sustained rate / GPUs) feeds it")
        changes.update(feed_bytes_per_unit=read, feed_source=f"CPU need and bytes read measured: {how}")
    changes["assumptions"] = workload.assumptions + (line,)
    return changes


# ---------------------------------------------------------------------------------------------


def _root():
    from importlib import resources

    return resources.files("gpuplan.catalog_data") / "workloads"


def _jobs(where: str, raw: Any, spu: Decimal) -> tuple[Job, ...]:
    if not isinstance(raw, list) or not raw:
        raise UsageError(f"{where}: jobs must be a non-empty list of entries like {{count: 4, units: 1000}}")
    out: list[Job] = []
    for i, entry in enumerate(raw):
        # the common entry of a big batch, {units: N} with N a whole number that passes every check
        # below: the same Job those make, without them (20,000 entries, issue 47)
        if (type(entry) is dict and len(entry) == 1 and type(n := entry.get("units")) is int and n > 0
                and (units := Decimal(n)) * spu <= MAX_JOB_SECONDS and len(out) < MAX_JOBS):
            out.append(Job(f"job{i + 1}", units))
            continue
        w = f"jobs[{i}]"
        if not isinstance(entry, dict):
            raise UsageError(f"{where}: {w} must be a mapping with units, seconds, minutes or hours")
        _only(where, w, entry, {"name", "count", "units", "seconds", "minutes", "hours"})
        given = [k for k in ("units", "seconds", "minutes", "hours") if entry.get(k) is not None]
        if len(given) != 1:
            raise UsageError(f"{where}: {w} needs exactly one of units, seconds, minutes or hours")
        value = _dec(where, f"{w}.{given[0]}", entry[given[0]], positive=True)
        units = value if given[0] == "units" else value * {"seconds": 1, "minutes": 60, "hours": 3600}[given[0]] / spu
        if units * spu > MAX_JOB_SECONDS:
            times = f" x seconds_per_unit {spu}" if given[0] == "units" else ""
            raise UsageError(f"{where}: {w}.{given[0]} = {entry[given[0]]}{times} is one job of {units * spu:.3g} s alone on"
                             f" the reference GPU, over the limit of 100 years ({MAX_JOB_SECONDS:,} s); check the figures")
        count = entry.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise UsageError(f"{where}: {w}.count must be a whole number of at least 1, not {count!r}")
        if len(out) + count > MAX_JOBS:
            raise UsageError(f"{where}: {w} brings the batch to {len(out) + count:,} jobs; gpuplan plans at most"
                             f" {MAX_JOBS:,} at once; plan a part of the batch")
        given_name = entry.get("name")  # the default name is ours, plain: checked only where the file gives one
        name = _text(f"{where}: jobs[{i}]", "name", given_name) if given_name else f"job{i + 1}"
        out.extend(Job(name if count == 1 else f"{name}-{j + 1}", units) for j in range(count))
    seen: set[str] = set()
    for job in out:  # a plan's schedule, a run's order and its outputs find each job by its name
        if job.name in seen:
            raise UsageError(f"{where}: two jobs are named {job.name!r}; give each jobs entry a name of its own")
        seen.add(job.name)
    return tuple(out)


def _streams(where: str, data: dict) -> Streams | None:
    """streams: {count: 8, fps: 30, hours: 720} (or days / minutes): unit must be frame."""
    st = _map(where, "streams", data.get("streams"))
    if not st:
        return None
    _only(where, "streams", st, {"count", "fps", "hours", "days", "minutes"})
    if str(data.get("unit") or "") != "frame":
        raise UsageError(f"{where}: streams need unit: frame (seconds_per_unit = seconds per frame of one stream alone)")
    count = st.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise UsageError(f"{where}: streams.count must be a whole number of at least 1, not {count!r}")
    if count > MAX_JOBS:
        raise UsageError(f"{where}: streams.count {count:,}: gpuplan plans at most {MAX_JOBS:,} streams at once; plan a part "
                         f"of them")
    if st.get("fps") is None:
        raise UsageError(f"{where}: streams.fps is missing (frames per second of each stream)")
    given = [k for k in ("hours", "days", "minutes") if st.get(k) is not None]
    if len(given) != 1:
        raise UsageError(f"{where}: streams need exactly one of hours, days or minutes (how long they run)")
    length = _dec(where, f"streams.{given[0]}", st[given[0]], positive=True,
                  most=Decimal(MAX_SETUP_SECONDS) / {"minutes": 60, "hours": 3600, "days": 86400}[given[0]])
    seconds = int((length * {"minutes": 60, "hours": 3600, "days": 86400}[given[0]]).to_integral_value(rounding=ROUND_CEILING))
    return Streams(count, _dec(where, "streams.fps", st["fps"], positive=True, most=1000), seconds)


def _sharded(where: str, raw: Any) -> ShardedMemory | None:
    """data_parallel.memory: the parts of a replica's memory and what is sharded."""
    if raw is None:
        return None
    m = _map(where, "data_parallel.memory", raw)
    _only(where, "data_parallel.memory", m, {"parameters_gib", "gradients_gib", "optimizer_gib", "activations_gib",
                                             "zero_stage", "degree", "source"})
    if m.get("parameters_gib") is None:
        raise UsageError(f"{where}: data_parallel.memory needs parameters_gib (the model's weights, GiB)")
    params = _dec(where, "data_parallel.memory.parameters_gib", m["parameters_gib"], positive=True)
    stage = m.get("zero_stage", 0)
    if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
        raise UsageError(f"{where}: data_parallel.memory.zero_stage = {stage!r}: give 0, 1, 2 or 3 (FSDP full sharding is 3)")
    degree = _whole(where, "data_parallel.memory.degree", m.get("degree"))
    return ShardedMemory(
        parameters_gib=params,
        gradients_gib=_dec(where, "data_parallel.memory.gradients_gib", m.get("gradients_gib", params)),
        optimizer_gib=_dec(where, "data_parallel.memory.optimizer_gib", m.get("optimizer_gib", 0)),
        activations_gib=_dec(where, "data_parallel.memory.activations_gib", m.get("activations_gib", 0)),
        stage=stage, degree=degree, source=str(m.get("source") or where))


def _fraction(where: str, raw: Any) -> MemoryFraction | None:
    """memory_fraction: the fixed share of the card a job runs in, and the context outside it."""
    if raw is None:
        return None
    m = _map(where, "memory_fraction", raw)
    _only(where, "memory_fraction", m, {"min", "card_gib", "context_gib", "source"})
    for needed in ("min", "card_gib", "context_gib"):
        if m.get(needed) is None:
            raise UsageError(f"{where}: memory_fraction needs {needed} (min: the smallest share of the card that ran as"
                             " fast as all of it; card_gib: that card's memory; context_gib: memory outside the share)")
    share = _dec(where, "memory_fraction.min", m["min"], positive=True)
    if share > 1:
        raise UsageError(f"{where}: memory_fraction.min = {m['min']} is above 1; it is a share of the card's memory")
    return MemoryFraction(minimum=share, card_gib=_dec(where, "memory_fraction.card_gib", m["card_gib"], positive=True),
                          context_gib=_dec(where, "memory_fraction.context_gib", m["context_gib"]),
                          source=str(m.get("source") or where))


def _packing(where: str, name: str, raw: Any) -> dict[int, Decimal | None]:
    """{k: per-stream efficiency} (null: measured not to fit); 1 is always 1."""
    packing: dict[int, Decimal | None] = {1: Decimal(1)}
    for k, v in _map(where, name, raw).items():
        kk = _key(where, name, k)
        packing[kk] = None if v is None else _ratio(where, f"{name}.{k}", v)
        # above 1 is possible: small inputs leave a GPU idle, so packed streams can each run faster (H100, 416x416)
    return packing


def _dp_points(where: str, raw: Any) -> dict[tuple[int, int], Decimal]:
    """scaling.measured: [{gpus: 8, nodes: 1, efficiency: 0.95}, ...] -> {(8, 1): 0.95}."""
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise UsageError(f"{where}: scaling.measured must be a list of entries like {{gpus: 8, nodes: 1, efficiency: 0.95}}")
    out = {}
    for i, entry in enumerate(raw):
        w = f"scaling.measured[{i}]"
        if not isinstance(entry, dict):
            raise UsageError(f"{where}: {w} must be a mapping with gpus, nodes and efficiency")
        _only(where, w, entry, {"gpus", "nodes", "efficiency"})
        if entry.get("gpus") is None or entry.get("efficiency") is None:
            raise UsageError(f"{where}: {w} needs gpus and efficiency")
        gpus, nodes = _key(where, f"{w}.gpus", entry["gpus"]), _key(where, f"{w}.nodes", entry.get("nodes", 1))
        if gpus % nodes:
            raise UsageError(f"{where}: {w}: {gpus} GPUs do not split evenly over {nodes} nodes")
        out[(gpus, nodes)] = _dec(where, f"{w}.efficiency", entry["efficiency"], positive=True)
    return out


def _whole(where: str, name: str, value: Any) -> int | None:
    """An optional whole number of at least 1."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{where}: {name} must be a whole number of at least 1, not {value!r}")
    return value


def _map(where: str, name: str, value: Any) -> Mapping:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UsageError(f"{where}: {name} must be a mapping")
    return value


def _only(where: str, name: str, value: Mapping, allowed: set[str]) -> None:
    unknown = set(map(str, value)) - allowed
    if unknown:
        raise UsageError(f"{where}: unknown field {name}.{sorted(unknown)[0]}; allowed: {', '.join(sorted(allowed))}")


def _key(where: str, name: str, key: Any) -> int:
    try:
        k = int(str(key))
    except ValueError:
        raise UsageError(f"{where}: {name} key {key!r} must be a whole number") from None
    if not 1 <= k <= MAX_KEY:
        raise UsageError(f"{where}: {name} key {key!r} must be between 1 and {MAX_KEY}")
    return k


def _dec(where: str, name: str, value: Any, positive: bool = False, most: int | Decimal | None = None) -> Decimal:
    if isinstance(value, bool):
        raise UsageError(f"{where}: {name} must be a number, not {value!r}")
    try:
        d = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        raise UsageError(f"{where}: {name} must be a number, not {value!r}") from None
    if not d.is_finite() or d < 0 or (positive and d == 0):
        raise UsageError(f"{where}: {name} must be a {'positive ' if positive else ''}number, not {value!r}")
    if most is not None and d > most:
        raise UsageError(f"{where}: {name} = {value} is over the limit of {most:,}; check the figure (docs/workloads.md)")
    return d


def _ratio(where: str, name: str, value: Any) -> Decimal:
    """A speed, slowdown, efficiency or factor: a positive number within 1000x of 1."""
    d = _dec(where, name, value, positive=True)
    if not RATIOS[0] <= d <= RATIOS[1]:
        raise UsageError(f"{where}: {name} = {value} is outside {RATIOS[0]}..{RATIOS[1]}, the range of a speed or"
                         " factor relative to 1; check the figure (docs/workloads.md)")
    return d


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _text(where: str, name: str, value: Any) -> str:
    if not _scalar(value):
        raise UsageError(f"{where}: {name} must be text, not {type(value).__name__} {value!r:.40}")
    from gpuplan.userfiles import check_plain

    return check_plain(str(value), f"{where}: {name}")  # it is printed: no escape codes, no newlines
