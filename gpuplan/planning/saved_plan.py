"""The saved plan: what `gpuplan estimate --save` writes and `provision --plan` and `run --plan`
read. One type, one writer (`dump`), one reader (`load`), a schema version in the file.

Version 2 (this one) is the recommended plan's JSON (as `estimate --format json` lists it) with
`schema_version`, the catalog snapshot, the workload and `order`: every job's name, longest
first (the order `run --plan` hands them out in; each machine's `jobs` are listed so too),
`planned_with`: what it was planned with (its workload, settings, max_yen and failover: a
refusal of its pick is planned again from them; absent in older files), and `tax`: the basis
its yen are on ("included": Japan's 10 % consumption tax on every provider, or "excluded"; each fleet
entry's `listed_tax` says its row's own basis, so the yen can be put on another; a file without
`tax` is read as its rows list their prices, as gpuplan planned then). Version 1 files (no `schema_version`:
written before it, or by hand; possibly wrapped as {"recommended": {...}}) load the same way;
a file from a newer gpuplan is refused in one line saying how to make one this version reads.
Each reader checks what it needs: provision a provider, size and count; run the figures it
compares with (`prediction`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from gpuplan.errors import UsageError

SCHEMA_VERSION = 2
FIX = "write it with `gpuplan estimate ... --save`"


@dataclass(frozen=True)
class SavedPlan:
    """A recommended plan as a file holds it: each field as written, unchecked (a version-1 file
    may lack any of them: they are then `missing`); target() and prediction() check what their
    reader needs and say in one line what is wrong."""

    path: Path
    schema_version: int
    provider: Any
    instance_type: Any
    region: Any
    count: Any  # workers of the first (or only) offer type
    setup: Any  # "scratch" | "image"
    market: str  # "on-demand" | "spot"
    wall_minutes: Any
    cost_jpy: Any  # exact to the sen where known
    machines: Any  # one object per machine (jobs_s, idle_tail_s, billed_s, cost_jpy, jobs)
    workload: str = ""
    snapshot: str = ""
    fleet: Any = None  # [{"instance_type", "count", ...}] for every offer type (a mixed fleet lists two)
    order: Any = None  # every job's name, longest first (None in files written before it)
    tax: str = "as-listed"  # the basis its yen are on: included / excluded (market/tax.py); older files: as listed
    speeds: Any = None  # each GPU's speed with its kind and band (evidence.SpeedEvidence.as_dict); None in older files
    per_gpu: Any = None  # jobs sharing one GPU
    command: str = ""  # the command the plan's speeds were measured with, where it says (calibration accepts it)
    workload_commands: Any = None  # the commands the workload named when the plan was made (None: older files)
    cost_range: Any = None  # [low, high] yen of the plan's cost range, where the estimate showed one
    planned_with: Any = None  # what it was planned with (planned_with()); None in files written before it

    def replan_inputs(self):
        """What the plan was planned with, for its next plan where its pick is refused (issue 44):
        (the workload, rebuilt as it was planned, plan_estimate's settings, the max_yen, the
        failover policy's fields: batchfile.Failover's, {} for its defaults). One line where the
        file does not say, or its workload is no longer what was planned (a workload or profile
        file changed since)."""
        import contextlib
        from dataclasses import replace

        from gpuplan.planning import workloads
        from gpuplan.planning.plan_types import Job

        pw = self.planned_with
        if not isinstance(pw, dict):
            raise UsageError(f"plan file {self.path} does not say what it was planned with (written by an older"
                             f" gpuplan, or by hand), so no next plan can be made from it; {FIX}")
        try:
            recipe, settings = pw["workload"], dict(pw["settings"])
            # its files' paths read as they were, from the folder the plan was made in
            with contextlib.chdir(recipe["cwd"]):
                if recipe.get("videos") is not None:
                    base = workloads.videos(int(recipe["videos"]))
                else:
                    base = workloads.load(str(recipe["name"]))
                if recipe.get("profile"):
                    base = workloads.apply_profile(base, str(recipe["profile"]))
            work = replace(base, jobs=tuple(Job(str(n), Decimal(str(u))) for n, u in recipe["jobs"]),
                           checkpoint_s=recipe.get("checkpoint_s"),
                           checkpoint_path=recipe.get("checkpoint_path") or base.checkpoint_path)
            policy = dict(pw["failover"]) if isinstance(pw.get("failover"), dict) else {}
            max_yen = None if pw.get("max_yen") is None else _figure(pw["max_yen"])
            settings["providers"] = tuple(settings.get("providers") or ())
        except UsageError as exc:
            raise UsageError(f"plan file {self.path}: its workload cannot be read again ({exc}); {FIX}") from None
        except OSError as exc:
            raise UsageError(f"plan file {self.path}: the folder it was planned in, {recipe.get('cwd')}, is gone"
                             f" ({exc.strerror}); {FIX}") from None
        except (KeyError, TypeError, ValueError, ArithmeticError, AttributeError) as exc:
            raise UsageError(f"plan file {self.path}: planned_with is unreadable ({exc}); {FIX}") from None
        if fingerprint(work) != pw.get("fingerprint"):
            raise UsageError(f"plan file {self.path}: its workload ({recipe.get('name') or 'colorize-hd'}) is no longer"
                             f" what was planned (its file or profile changed since), so no next plan can be made"
                             f" from it honestly; {FIX}")
        return work, settings, max_yen, policy

    def upper_yen(self) -> Decimal | None:
        """The top of the plan's cost range (its yen basis is the plan's); None where it has none."""
        span = self.cost_range
        if not isinstance(span, list) or len(span) != 2:
            return None
        try:
            return _figure(span[1])
        except (TypeError, ValueError, ArithmeticError):
            return None

    def more(self) -> list[tuple[str, int]]:
        """The offer types after the first of a mixed fleet, as (instance type, count), checked."""
        if not isinstance(self.fleet, list) or len(self.fleet) < 2:
            return []
        out = []
        for part in self.fleet[1:]:
            size = part.get("instance_type") if isinstance(part, dict) else None
            count = part.get("count") if isinstance(part, dict) else None
            if not (isinstance(size, str) and size.strip()) or isinstance(count, bool) or not isinstance(count, int) \
                    or count < 1:
                raise UsageError(f"plan file {self.path}: each fleet entry needs an instance_type and a count of"
                                 f" machines, not {part!r}; {FIX}")
            out.append((size, count))
        return out

    def target(self) -> tuple[str, str, str | None, int, str]:
        """What provision creates: (provider, instance type, region or None, count, setup), checked."""
        from gpuplan.units import parse_count

        path = self.path
        missing = [k for k in ("provider", "instance_type", "count") if getattr(self, k) is _MISSING]
        if missing:
            raise UsageError(f"plan file {path} lacks {', '.join(missing)}; {FIX}")
        for key in ("provider", "instance_type", "region"):
            value = getattr(self, key)
            if key == "region" and value in (None, _MISSING):
                continue
            if not (isinstance(value, str) and value.strip()):
                raise UsageError(f"plan file {path}: {key} must be a name, not {value!r}; {FIX}")
        count = self.count
        if isinstance(count, bool) or not isinstance(count, int):
            raise UsageError(f"plan file {path}: count must be a whole number of machines, not {count!r}; {FIX}")
        try:
            parse_count(str(count))
        except UsageError as exc:
            raise UsageError(f"plan file {path}: {exc}") from None
        if self.setup not in (_MISSING, None, "scratch", "image"):
            raise UsageError(f"plan file {path}: setup must be scratch or image, not {self.setup!r}; {FIX}")
        region = None if self.region is _MISSING else self.region
        return self.provider, self.instance_type, region, count, "scratch" if self.setup in (_MISSING, None) else self.setup

    def prediction(self) -> dict:
        """What the plan predicts for the part `gpuplan run` measures.

        A run starts on machines that are already set up, so the prediction it is compared with is
        the plan's jobs phase: wall = the longest machine's jobs_s; yen = each machine's cost times
        the share of its billed time spent on jobs and idle tail (setup, capture and staging left
        out). The whole plan's wall and yen are kept beside it. Returns {"wall_s", "yen", "basis",
        "plan_wall_s", "plan_yen"} with Decimal figures, and where the plan lists its machines, the
        "workload", "provider", "instance_type" and number of "jobs" it planned (for calibration); always
        "tax", the basis the yen are on, and "listed_tax", the first offer's own (a measured yen is put
        on the plan's basis before it is compared)."""
        path = self.path
        try:
            wall = _figure(self.wall_minutes) * 60 if self.wall_minutes not in (None, _MISSING) else None
            yen = _figure(self.cost_jpy) if self.cost_jpy not in (None, _MISSING) else None
            machines = [] if self.machines in (None, _MISSING) else self.machines
            if not isinstance(machines, list) or not all(isinstance(m, dict) for m in machines):
                raise ValueError("machines must be a list of objects")
            if machines:
                jobs_wall = Decimal(max(int(_figure(m["jobs_s"])) for m in machines))
                jobs_yen = sum(
                    (_figure(m["cost_jpy"]) * (int(_figure(m["jobs_s"])) + int(_figure(m.get("idle_tail_s") or 0)))
                     / int(_figure(m["billed_s"])) for m in machines if int(_figure(m["billed_s"])) > 0),
                    Decimal(0),
                )
                # the plan's job order: longest first; from a file without it, machine by machine in
                # turn (each machine's jobs are listed longest first)
                lists = [list(m.get("jobs") or ()) for m in machines]
                order = ([str(x) for x in self.order] if isinstance(self.order, list) else
                         [str(q[k]) for k in range(max(map(len, lists), default=0)) for q in lists if k < len(q)])
                fleet: list[Any] = self.fleet if isinstance(self.fleet, list) and self.fleet else [
                    {"instance_type": _text(self.instance_type), "count": len(machines)}]
                return {"wall_s": jobs_wall, "yen": jobs_yen, "basis": "the plan's jobs phase (setup excluded)",
                        "tax": self.tax, "listed_tax": self.listed_tax(),
                        "plan_wall_s": wall, "plan_yen": yen, "workload": self.workload,
                        "provider": _text(self.provider), "instance_type": _text(self.instance_type),
                        "jobs": sum(len(m.get("jobs") or ()) for m in machines), "order": order,
                        "fleet": [(str(f.get("instance_type") or ""), int(f.get("count") or 0))
                                  for f in fleet if isinstance(f, dict)],
                        "command": self.command,
                        "workload_commands": [c for c in self.workload_commands or () if isinstance(c, str)]
                        if isinstance(self.workload_commands, list) else None,
                        **self._item_band(machines, fleet)}
        except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
            why = f"{exc} is missing" if isinstance(exc, KeyError) else str(exc)
            raise UsageError(f"plan file {path}: unreadable figure ({why}); {FIX}") from None
        if wall is None or yen is None:
            raise UsageError(f"plan file {path} has no wall time or cost; {FIX}")
        return {"wall_s": wall, "yen": yen, "basis": "the whole plan", "plan_wall_s": wall, "plan_yen": yen,
                "tax": self.tax, "listed_tax": self.listed_tax()}

    def _item_band(self, machines: list, fleet: list) -> dict:
        """For calibration (measuring/calibration.py): the plan's mean time per item ("item_s": each
        machine's jobs phase over its items, its slots running side by side), the first GPU
        ("gpu") and the band a batch's speed must fall in to calibrate it ("band_low",
        "band_high": factors of the planned speed); {} where the file does not say."""
        first = fleet[0] if fleet and isinstance(fleet[0], dict) else {}
        gpus = first.get("gpus_per_machine")
        per_gpu = self.per_gpu if isinstance(self.per_gpu, int) and not isinstance(self.per_gpu, bool) else 1
        out: dict = {}
        items = sum(len(m.get("jobs") or ()) for m in machines)
        if isinstance(gpus, int) and not isinstance(gpus, bool) and gpus > 0 and items:
            slots = gpus * max(1, per_gpu)
            busy = sum(Decimal(int(_figure(m["jobs_s"]))) * min(slots, len(m.get("jobs") or ())) for m in machines)
            out["item_s"] = busy / items
        gpu = first.get("gpu")
        band = next((e for e in self.speeds or () if isinstance(e, dict) and e.get("gpu") == gpu), None)
        if isinstance(gpu, str):
            out["gpu"] = gpu
        if band is not None and _figure(band.get("speed")) > 0:
            # the speed's band as factors of the speed, widened to its class's generic band: a batch
            # of the job may correct a measured figure by more than that figure's own band
            from gpuplan.planning import evidence

            speed = _figure(band.get("speed"))
            low, high = _figure(band.get("low")) / speed, _figure(band.get("high")) / speed
            generic = evidence.BANDS.get(str(band.get("class") or ""), {}).get(evidence.SpeedKind.GENERIC)
            if generic is not None:
                low, high = min(low, generic.low), max(high, generic.high)
            out["band_low"], out["band_high"] = low, high
            out["speed_kind"] = str(band.get("kind") or "")
        return out

    def listed_tax(self) -> str:
        """The tax basis the first offer's row lists its price on ("unknown" where the file does not say)."""
        first = self.fleet[0] if isinstance(self.fleet, list) and self.fleet and isinstance(self.fleet[0], dict) else {}
        listed = first.get("listed_tax")
        return listed if listed in ("included", "excluded", "unknown") else "unknown"


class _Missing:
    def __repr__(self) -> str:
        return "missing"


_MISSING: Any = _Missing()


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _figure(value: Any) -> Decimal:
    """A plan's number: finite, not negative, at most 10^15 (yen or seconds)."""
    try:
        d = Decimal(str(value))
    except ArithmeticError:
        d = Decimal("NaN")
    if isinstance(value, bool) or not d.is_finite() or not 0 <= d <= 10**15:
        raise ValueError(f"{value!r} is not a number from 0 to 10^15")
    return d


def fingerprint(work) -> str:
    """The workload as planned, in one figure: a rebuilt one that differs was not what was planned."""
    import hashlib

    return hashlib.sha256(repr(work).encode()).hexdigest()


def planned_with(work, recipe: dict[str, Any], settings: dict[str, Any], max_yen=None, failover=None) -> dict[str, Any]:
    """What a plan is planned with, as the file keeps it (SavedPlan.replan_inputs reads it back):
    the workload's `recipe` ({"videos": N} or {"name": a built-in name or a file's path}, and
    "profile": a profile's path, where one was applied), its jobs and checkpoint as planned, and
    their fingerprint; plan_estimate's `settings` (region, deadline, objective, tax, providers,
    max_yen_per_hour, gpus, ...); the batch's max_yen and `failover:` where a launch planned it."""
    from dataclasses import asdict

    def plain(value):
        if isinstance(value, Decimal):
            return str(value)
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        if isinstance(value, Path):
            return str(value)
        return value

    import os

    return {
        "workload": {**{k: plain(v) for k, v in recipe.items() if v is not None}, "cwd": os.getcwd(),
                     "jobs": [[j.name, str(j.units)] for j in work.jobs],
                     "checkpoint_s": work.checkpoint_s, "checkpoint_path": plain(work.checkpoint_path)},
        "fingerprint": fingerprint(work),
        "settings": {k: plain(v) for k, v in settings.items()},
        "max_yen": plain(max_yen),
        "failover": asdict(failover) if failover is not None else None,
    }


def data(est, plan_json: dict[str, Any], planned: dict[str, Any] | None = None) -> dict[str, Any]:
    """The file's content for the estimate's recommendation, given its JSON object (the CLI's
    plan_dict: the same fields `estimate --format json` lists) and what it was `planned` with
    (planned_with(); None: not said, and no next plan can be made from the file)."""
    rec = est.recommended
    work = est.workload
    return {
        **({"planned_with": planned} if planned is not None else {}),
        "schema_version": SCHEMA_VERSION,
        **plan_json,
        "snapshot": est.snapshot,
        "tax": est.tax,
        "workload": work.name,
        "workload_commands": list(work.commands),  # the commands that run its job: only their batches calibrate it
        "order": longest_first(work),
        "setup_mode": rec.setup,
        "count": rec.fleet[0][1],  # workers of the first (or only) type; `fleet` lists a mix in full
    }


def longest_first(workload) -> list[str]:
    """The workload's job names, longest first; ties in the workload's order (as the planner
    lists each machine's jobs: scheduling.longest_first)."""
    jobs = list(workload.jobs)
    seconds = [workload.job_seconds(j) for j in jobs]
    return [jobs[i].name for i in sorted(range(len(jobs)), key=lambda i: -seconds[i])]


def dump(content: dict[str, Any], path: Path) -> None:
    try:
        Path(path).write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write the plan to {path} ({exc.strerror})") from None


def load(path: Path) -> SavedPlan:
    """The plan in `path`, of this schema version or an older one; one line where it is not one."""
    from gpuplan.userfiles import load_json, read_text

    try:  # load_json: no duplicate keys, NaN or runaway nesting (what json.loads lets through)
        raw = load_json(read_text(path, "plan file", FIX))
    except json.JSONDecodeError as exc:
        raise UsageError(f"plan file {path} is not valid JSON ({exc.msg}, line {exc.lineno}); {FIX}") from None
    plan = raw.get("recommended", raw) if isinstance(raw, dict) else None
    if not isinstance(plan, dict):
        raise UsageError(f"plan file {path}: expected a JSON object with provider, instance_type and count; {FIX}")
    if plan.get("market") not in (None, "on-demand", "spot"):
        raise UsageError(f"plan file {path}: market must be on-demand or spot, not {plan['market']!r}; {FIX}")
    version = plan.get("schema_version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise UsageError(f"plan file {path}: schema_version must be a whole number, not {version!r}; {FIX}")
    if version > SCHEMA_VERSION:
        raise UsageError(f"plan file {path} has schema version {version}, newer than this gpuplan reads"
                         f" ({SCHEMA_VERSION}); make a new one with `gpuplan estimate ... --save {path}`"
                         " or upgrade gpuplan")
    top = raw if isinstance(raw, dict) else {}

    def get(key: str) -> Any:
        return plan.get(key, _MISSING)

    return SavedPlan(
        path=Path(path), schema_version=version, provider=get("provider"), instance_type=get("instance_type"),
        region=get("region"), count=get("count"), setup=plan.get("setup", plan.get("setup_mode", _MISSING)),
        market="spot" if plan.get("market") == "spot" else "on-demand",
        wall_minutes=get("wall_minutes"), cost_jpy=plan.get("cost_exact_jpy", plan.get("cost_jpy", _MISSING)),
        machines=get("machines"), fleet=plan.get("fleet"), order=plan.get("order", top.get("order")),
        workload=_text(plan.get("workload", top.get("workload"))),
        snapshot=_text(plan.get("snapshot", top.get("snapshot"))),
        tax=_basis(path, plan.get("tax", top.get("tax"))),
        speeds=plan.get("speeds"), per_gpu=plan.get("per_gpu"),
        command=_text(plan.get("command", top.get("command"))),
        workload_commands=plan.get("workload_commands", top.get("workload_commands")),
        cost_range=plan.get("cost_jpy_range"), planned_with=plan.get("planned_with", top.get("planned_with")),
    )


def _basis(path: Path, value: Any) -> str:
    """A plan file's `tax`: included or excluded; as-listed (an estimate made on the catalog as it
    lists its prices) or absent (older files): as its rows list them."""
    if value is None:
        return "as-listed"
    if value not in ("included", "excluded", "as-listed"):
        raise UsageError(f"plan file {path}: tax must be included, excluded or as-listed, not {value!r}; {FIX}")
    return value
