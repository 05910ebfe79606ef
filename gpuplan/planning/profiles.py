"""Measured job profiles: one workload on one GPU type, in a YAML or JSON file with provenance.

A profile says how fast one job runs alone on a reference GPU and how that changes when jobs
share a machine or a GPU, or when one job spans several GPUs. `gpuplan bench` writes them to
`<state_dir>/profiles/`; committed ones under `catalog/profiles/` are catalog data. The
planner reads one with `load_profile(path)` and applies `Profile.to_workload_overrides()`.
The fields are documented in docs/profiles.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from gpuplan.errors import UsageError

SCHEMA = 1


@dataclass(frozen=True)
class Provenance:
    """Where the figures came from: the machine, the software, the day, the command."""

    source: str  # "gpuplan bench" or a field report, e.g. "field report A (2017-08)"
    date: str  # ISO date of the measurement
    host: str = ""
    gpu: str = ""  # as the driver names it: "NVIDIA H100 80GB HBM3"; "cpu" for a CPU run
    driver: str = ""
    cuda: str = ""
    torch: str = ""
    command: str = ""
    device: str = ""  # "cuda" | "cpu"
    quick: bool = False  # tiny shapes: proves the pipeline, says nothing about real speed
    notes: str = ""
    offer: str = ""  # the catalog offer measured, provider:name@region (`gpuplan bench --on`); "" elsewhere


@dataclass(frozen=True)
class ScalingPoint:
    """Data-parallel training of one job over `gpus` GPUs on `nodes` machines."""

    gpus: int
    nodes: int
    efficiency: Decimal  # throughput / (gpus x throughput on 1 GPU)
    throughput: Decimal | None = None  # units per second, all ranks together


@dataclass(frozen=True)
class Profile:
    """None in a measured field means "not measured"; `unmeasured()` names those fields."""

    workload: str  # "colorize", "resnet50", "vgg_cifar", "detect_streams" or a user's own name
    unit: str  # what seconds_per_unit counts: "epoch", "image", "frame"
    reference_gpu: str  # catalog GPU key ("K80", "H100 SXM") or "cpu"
    seconds_per_unit: Decimal  # one job alone on one reference GPU (timed steps only)
    provenance: Provenance
    memory_peak_gib: Decimal | None = None  # peak GPU memory of one job alone, uncapped (what the allocator took)
    gpu_memory_gib: Decimal | None = None  # the reference GPU's own memory
    memory_need_gib: Decimal | None = None  # the smallest memory cap at which the job still runs at full speed
    memory_need_fraction: Decimal | None = None  # that cap as a fraction of the reference GPU's memory
    fixed_seconds_per_job: Decimal | None = None  # process start to first timed step, warm-up and exit
    colocation_slowdown: Mapping[int, Decimal] = field(default_factory=dict)  # G jobs on a G-GPU machine -> factor >= 1
    packing_efficiency: Mapping[int, Decimal] = field(default_factory=dict)  # k per GPU -> per-job efficiency
    packing_fits: Mapping[int, bool] = field(default_factory=dict)  # k per GPU -> did all k start
    dp_scaling: tuple[ScalingPoint, ...] = ()
    feed_cpu_seconds_per_unit: Decimal | None = None  # CPU seconds the job's input pipeline spends per unit
    feed_how: str = ""  # what that pipeline did and how its CPU time was taken
    feed_bytes_per_unit: Decimal | None = None  # input bytes that pipeline read per unit (counted as it read)

    def unmeasured(self) -> tuple[str, ...]:
        """The planner's figures this profile does not give (the planner then says so)."""
        missing = [name for name in ("fixed_seconds_per_job", "memory_need_gib", "memory_peak_gib")
                   if getattr(self, name) is None]
        if not any(k > 1 for k in self.packing_fits):
            missing.append("packing")
        if len(self.colocation_slowdown) <= 1:
            missing.append("colocation_slowdown")
        if not any(p.gpus > 1 for p in self.dp_scaling):
            missing.append("dp_scaling")
        if self.feed_cpu_seconds_per_unit is None:
            missing.append("feed")
        return tuple(missing)

    def max_per_gpu(self) -> int:
        """The largest k measured to fit (1 when packing was not measured)."""
        fitting = [k for k, ok in self.packing_fits.items() if ok]
        return max(fitting, default=1)

    def to_workload_overrides(self) -> dict[str, Any]:
        """The figures the planner's Workload takes from a profile, in its own words:

        reference_gpu, unit, seconds_per_unit (Decimal),
        memory_need_gib, memory_peak_gib, fixed_seconds_per_job (Decimal | None: not measured),
        colocation_slowdown {G: Decimal}, packing_efficiency {k: Decimal} (fitting k only),
        packing_no_fit (k measured not to fit, sorted), max_per_gpu (int),
        dp_efficiency {(GPUs, nodes): Decimal} (every measured layout),
        feed_cpu_seconds_per_unit (Decimal | None), feed_how (str), feed_bytes_per_unit (Decimal | None),
        unmeasured (field names, see `unmeasured()`),
        profile_source (one line naming where the figures came from, for Plan.assumptions).
        """
        p = self.provenance
        where = f"{p.source} on {p.gpu or self.reference_gpu}" + (f" ({p.host})" if p.host else "") + f", {p.date}"
        return {
            "reference_gpu": self.reference_gpu,
            "unit": self.unit,
            "seconds_per_unit": self.seconds_per_unit,
            "memory_need_gib": self.memory_need_gib,
            "memory_peak_gib": self.memory_peak_gib,
            "fixed_seconds_per_job": self.fixed_seconds_per_job,
            "colocation_slowdown": dict(self.colocation_slowdown),
            "packing_efficiency": {k: e for k, e in self.packing_efficiency.items() if self.packing_fits.get(k, True)},
            "packing_no_fit": sorted(k for k, ok in self.packing_fits.items() if not ok),
            "max_per_gpu": self.max_per_gpu(),
            "dp_efficiency": {(s.gpus, s.nodes): s.efficiency for s in self.dp_scaling},
            "feed_cpu_seconds_per_unit": self.feed_cpu_seconds_per_unit,
            "feed_how": self.feed_how,
            "feed_bytes_per_unit": self.feed_bytes_per_unit,
            "unmeasured": self.unmeasured(),
            "profile_source": f"profile {self.workload}: {where}" + (" [quick CPU smoke run]" if p.quick else ""),
        }

    def to_dict(self) -> dict[str, Any]:
        """The file's content: numbers as plain YAML/JSON numbers, maps keyed by int."""
        p = self.provenance
        return {
            "schema": SCHEMA,
            "workload": self.workload,
            "unit": self.unit,
            "reference_gpu": self.reference_gpu,
            "gpu_memory_gib": _num(self.gpu_memory_gib),
            "seconds_per_unit": _num(self.seconds_per_unit),
            "fixed_seconds_per_job": _num(self.fixed_seconds_per_job),
            "memory_need_gib": _num(self.memory_need_gib),
            "memory_need_fraction": _num(self.memory_need_fraction),
            "memory_peak_gib": _num(self.memory_peak_gib),
            "colocation_slowdown": {int(g): _num(v) for g, v in sorted(self.colocation_slowdown.items())},
            "packing": {
                int(k): {"efficiency": _num(self.packing_efficiency.get(k)), "fits": bool(self.packing_fits.get(k, True))}
                for k in sorted(set(self.packing_efficiency) | set(self.packing_fits))
            },
            "dp_scaling": [
                {"gpus": s.gpus, "nodes": s.nodes, "efficiency": _num(s.efficiency), "throughput": _num(s.throughput)}
                for s in self.dp_scaling
            ],
            "feed": ({"cpu_seconds_per_unit": _num(self.feed_cpu_seconds_per_unit), "how": self.feed_how,
                      **({"bytes_per_unit": _num(self.feed_bytes_per_unit)} if self.feed_bytes_per_unit is not None else {})}
                     if self.feed_cpu_seconds_per_unit is not None else None),
            "provenance": {k: getattr(p, k) for k in Provenance.__dataclass_fields__},
        }


def _num(value: Decimal | None) -> float | int | None:
    if value is None:
        return None
    if value == value.to_integral_value():
        return int(value)
    return float(round(value, 6))


def save_profile(profile: Profile, path: Path) -> Path:
    """Write YAML (.yaml/.yml) or JSON (.json); the parent folder is created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = profile.to_dict()
    if path.suffix == ".json":
        path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    else:
        import yaml

        path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return path


def load_profile(path: str | Path) -> Profile:
    """Read and check a profile file; any problem is one UsageError line naming the field."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"profile {path} not found; run `gpuplan bench WORKLOAD --local` or give an existing file")
    from gpuplan.userfiles import read_text

    text = read_text(path, "profile", "run `gpuplan bench WORKLOAD --local` or give a profile file (docs/profiles.md)")
    try:
        if path.suffix == ".json":
            from gpuplan.userfiles import load_json

            data = load_json(text)
        else:
            from gpuplan.userfiles import load_yaml

            data = load_yaml(text)
    except (ValueError, Exception) as exc:  # yaml.YAMLError or json.JSONDecodeError
        from gpuplan.userfiles import yaml_problem

        problem = exc.msg if isinstance(exc, json.JSONDecodeError) else yaml_problem(exc)
        raise UsageError(f"profile {path}: not valid {path.suffix.lstrip('.') or 'YAML'} ({problem})") from None
    return profile_from_dict(data, str(path))


def profile_from_dict(data: Any, where: str = "profile") -> Profile:
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a mapping at the top level")
    if data.get("schema", SCHEMA) != SCHEMA:
        raise UsageError(f"{where}: schema {data.get('schema')!r} is not {SCHEMA}; re-run `gpuplan bench`")
    for key in ("workload", "unit", "reference_gpu", "seconds_per_unit", "provenance"):
        if data.get(key) in (None, ""):
            raise UsageError(f"{where}: field '{key}' is missing; see docs/profiles.md")
    from gpuplan.userfiles import check_plain, one_line

    for key in ("workload", "unit", "reference_gpu"):
        check_plain(str(data[key]), f"{where}: {key}")  # printed and matched: no control characters
    spu = _dec(where, "seconds_per_unit", data["seconds_per_unit"], positive=True)
    prov = data["provenance"]
    if not isinstance(prov, dict) or not prov.get("source") or not prov.get("date"):
        raise UsageError(f"{where}: provenance needs at least 'source' and 'date'")
    unknown = set(prov) - set(Provenance.__dataclass_fields__)
    if unknown:
        raise UsageError(f"{where}: unknown provenance field(s) {sorted(unknown)}")
    fields: dict[str, Any] = {k: (bool(v) if k == "quick" else one_line(str(v))) for k, v in prov.items() if v is not None}
    from datetime import date as calendar_date

    try:  # the day it was measured: compared, sorted and shown as a date
        calendar_date.fromisoformat(fields["date"])
    except ValueError:
        raise UsageError(f"{where}: provenance.date {fields['date']!r} is not a date: write it YYYY-MM-DD") from None
    provenance = Provenance(**fields)
    from gpuplan.errors import Mistakes
    from gpuplan.schemas.check import problems

    mistakes = problems(data, "profile")  # a field of the wrong shape: its path and what is allowed, never a TypeError
    if mistakes:
        raise Mistakes(where if where.startswith("profile") else f"profile {where}", mistakes)

    slowdown = {}
    for g, v in (data.get("colocation_slowdown") or {}).items():
        # time shared / time alone: normally >= 1, but a measured value below 1 (noise) is kept as measured
        slowdown[_int(where, "colocation_slowdown", g)] = _dec(where, f"colocation_slowdown.{g}", v, positive=True)
    eff, fits = {}, {}
    for k, v in (data.get("packing") or {}).items():
        kk = _int(where, "packing", k)
        if not isinstance(v, dict):
            raise UsageError(f"{where}: packing.{k} must be a mapping with 'efficiency' and 'fits'")
        fits[kk] = bool(v.get("fits", True))
        if v.get("efficiency") is not None:
            eff[kk] = _dec(where, f"packing.{k}.efficiency", v["efficiency"], positive=True)
    scaling = []
    for i, s in enumerate(data.get("dp_scaling") or []):
        if not isinstance(s, dict) or "gpus" not in s or "efficiency" not in s:
            raise UsageError(f"{where}: dp_scaling[{i}] needs 'gpus' and 'efficiency'")
        scaling.append(ScalingPoint(
            gpus=_int(where, f"dp_scaling[{i}].gpus", s["gpus"]),
            nodes=_int(where, f"dp_scaling[{i}].nodes", s.get("nodes", 1)),
            efficiency=_dec(where, f"dp_scaling[{i}].efficiency", s["efficiency"], positive=True),
            throughput=_dec(where, f"dp_scaling[{i}].throughput", s["throughput"]) if s.get("throughput") is not None else None,
        ))
    feed = data.get("feed")
    if feed is not None and (not isinstance(feed, dict) or feed.get("cpu_seconds_per_unit") is None):
        raise UsageError(f"{where}: feed must be a mapping with cpu_seconds_per_unit (CPU seconds per {data['unit']})")
    feed_cpu = _dec(where, "feed.cpu_seconds_per_unit", feed["cpu_seconds_per_unit"], positive=True) if feed else None
    feed_bytes = (_dec(where, "feed.bytes_per_unit", feed["bytes_per_unit"], positive=True)
                  if feed and feed.get("bytes_per_unit") is not None else None)
    # files written before the memory need was measured call the uncapped peak memory_per_job_gib
    peak_key = "memory_peak_gib" if "memory_peak_gib" in data else "memory_per_job_gib"
    fraction = _opt(where, data, "memory_need_fraction")
    if fraction is not None and fraction > 1:
        raise UsageError(f"{where}: memory_need_fraction {fraction} is above 1; it is a share of the GPU's memory")
    return Profile(
        workload=str(data["workload"]),
        unit=str(data["unit"]),
        reference_gpu=str(data["reference_gpu"]),
        seconds_per_unit=spu,
        provenance=provenance,
        memory_peak_gib=_opt(where, data, peak_key),
        gpu_memory_gib=_opt(where, data, "gpu_memory_gib"),
        memory_need_gib=_opt(where, data, "memory_need_gib"),
        memory_need_fraction=fraction,
        fixed_seconds_per_job=_opt(where, data, "fixed_seconds_per_job", positive=False),
        colocation_slowdown=slowdown,
        packing_efficiency=eff,
        packing_fits=fits,
        dp_scaling=tuple(scaling),
        feed_cpu_seconds_per_unit=feed_cpu,
        feed_how=str(feed.get("how") or "") if feed else "",
        feed_bytes_per_unit=feed_bytes,
    )


def _opt(where: str, data: dict, name: str, positive: bool = True) -> Decimal | None:
    """An optional number field: None when absent or null (not measured)."""
    if data.get(name) is None:
        return None
    value = _dec(where, name, data[name], positive=positive)
    if value < 0:
        raise UsageError(f"{where}: {name} must be zero or more, not {data[name]!r}")
    return value


def _dec(where: str, name: str, value: Any, positive: bool = False) -> Decimal:
    if isinstance(value, bool):
        raise UsageError(f"{where}: {name} must be a number, not {value!r}")
    try:
        d = Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise UsageError(f"{where}: {name} must be a number, not {value!r}") from None
    if not d.is_finite() or (positive and d <= 0):
        raise UsageError(f"{where}: {name} must be a positive number, not {value!r}")
    return d


def _int(where: str, name: str, value: Any) -> int:
    try:
        n = int(str(value))
    except ValueError:
        raise UsageError(f"{where}: {name} key {value!r} must be a whole number") from None
    if n < 1:
        raise UsageError(f"{where}: {name} key {value!r} must be at least 1")
    return n


def profiles_dir() -> Path:
    from gpuplan import paths

    return paths.state_dir() / "profiles"


def measured_dir() -> Path:
    """Where `gpuplan bench --on` saves one profile per offer, and every estimate reads them."""
    return profiles_dir() / "measured"


def measured_profiles(workload: str) -> tuple[list[tuple[Path, Profile]], list[str]]:
    """The profiles `gpuplan bench --on` saved for this bench job (each naming its offer),
    oldest first, and one line per file that could not be read (the estimate goes on without it)."""
    folder = measured_dir()
    if not folder.is_dir():
        return [], []
    found, problems = [], []
    for path in sorted(folder.glob(f"{workload}--*.yaml")):
        try:
            prof = load_profile(path)
        except UsageError as exc:
            problems.append(f"{exc}; remove the file or bench that offer again")
            continue
        if prof.workload == workload and prof.provenance.offer:
            found.append((path, prof))
    found.sort(key=lambda pair: (pair[1].provenance.date, pair[0].stat().st_mtime))
    return found, problems


def measured_path(workload: str, offer_key: str) -> Path:
    """The file `gpuplan bench --on` writes for one offer: <measured_dir>/<job>--<offer>.yaml."""
    import re

    return measured_dir() / f"{workload}--{re.sub(r'[^A-Za-z0-9_.@-]+', '-', offer_key)}.yaml"


def catalog_profiles() -> list[Path]:
    """Committed profiles shipped as catalog data (catalog/profiles/*.yaml|json)."""
    from importlib.resources import files

    root = files("gpuplan.catalog_data").joinpath("profiles")
    if not root.is_dir():
        return []
    return sorted(Path(str(p)) for p in root.iterdir() if p.name.endswith((".yaml", ".yml", ".json")))
