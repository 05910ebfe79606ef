"""`gpuplan profiles`: every measured speed the planner applies on its own, with where it came
from, and `gpuplan profiles rm ID` to remove one.

Two kinds are applied to every estimate without a flag: calibrations (a `gpuplan run --plan` or
`launch` batch of the workload's own job on the planned fleet: measuring/calibration.py) and the
per-offer profiles `gpuplan bench --on` and `gpuplan probe` save. A workload file's own `speed:`
figures are part of the workload (docs/workloads.md), and `--profile FILE` is given per estimate:
neither is listed here.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Optional

import typer

from gpuplan.cli import shapes

profiles_app = typer.Typer(help="The measured speeds every estimate applies (calibrations, bench and probe profiles), with"
                                " their provenance; `gpuplan profiles rm ID` removes one.",
                           invoke_without_command=True, no_args_is_help=False)


def _rows(workload: str | None) -> list[dict]:
    """Every speed an estimate applies on its own, oldest kinds first: calibrations, then profiles."""
    from gpuplan.planning import fmt, profiles, workloads
    from gpuplan.store.state import State

    out = []
    state = State.open_default()
    try:
        for r in state.calibrations(workloads.builtin_name(workload) or workload if workload else None):
            ratio = Decimal(str(r["predicted_s"])) / Decimal(str(r["measured_s"])) if r["measured_s"] else None
            out.append({
                "id": f"cal-{r['id']}", "kind": "calibration", "workload": r["workload"], "gpu": r.get("gpu") or "",
                "machine": f"{r['provider']} {r['size']}",
                "speed": None if ratio is None else f"{ratio:.3f}x the plan's",
                "date": r["measured_at"].date().isoformat(),
                "provenance": (f"batch {r.get('batch') or '(not recorded)'} of {fmt.plural(r['jobs'], 'item')} on cluster"
                               f" {r['cluster']}; mean item {fmt.duration(Decimal(str(r['measured_s'])))} against"
                               f" {fmt.duration(Decimal(str(r['predicted_s'])))} planned; clock:"
                               f" {r.get('clock') or 'the batch wall (recorded before gpuplan said)'}; command:"
                               f" {r.get('command') or '(not recorded)'}"),
            })
    finally:
        state.close()
    folder = profiles.measured_dir()
    if folder.is_dir():
        for path in sorted(folder.glob("*.yaml")):
            try:
                prof = profiles.load_profile(path)
            except Exception as exc:  # noqa: BLE001 - an unreadable file is listed with why, so it can be removed
                out.append({"id": path.stem, "kind": "profile", "workload": "?", "gpu": "", "machine": "",
                            "speed": None, "date": "", "provenance": f"unreadable: {exc}"})
                continue
            if workload and prof.workload not in (workload, workloads.bench_job(workload)):
                continue
            p = prof.provenance
            out.append({
                "id": path.stem, "kind": "probe" if "probe" in p.source else "bench", "workload": prof.workload,
                "gpu": p.gpu or prof.reference_gpu, "machine": p.offer,
                "speed": f"{fmt.duration(prof.seconds_per_unit)} per {prof.unit}", "date": p.date,
                "provenance": "; ".join(x for x in (p.source, p.host and f"host {p.host}",
                                                    p.command and f"command: {p.command}") if x),
            })
    return out


@profiles_app.callback()
def profiles(
    ctx: typer.Context,
    workload: Annotated[Optional[str], typer.Option("--workload", "-w", help="Only this workload's speeds.")] = None,
    format: Annotated[str, shapes.format_option()] = "table",
) -> None:
    """List every measured speed the planner applies on its own, with its provenance."""
    if ctx.invoked_subcommand is not None:
        return
    import json

    from gpuplan.errors import UsageError

    if format not in ("table", "json"):
        raise UsageError(f"bad --format {format!r}: use table or json")
    rows = _rows(workload)
    if format == "json":
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    if not rows:
        print("no measured speeds: every estimate plans with the workloads' own figures and the catalog's GPU table"
              " (a `gpuplan run --plan` batch of the workload's job, `gpuplan bench --on` or `gpuplan probe` adds one)")
        return
    from gpuplan.cli import tables

    columns = [tables.Column(n) for n in ("id", "kind", "workload", "gpu", "machine", "speed", "date")]
    tables.render(tables.console(), columns + [tables.Column("provenance", wrap=True)],
                  [[r["id"], r["kind"], r["workload"], r["gpu"], r["machine"], r["speed"] or "-", r["date"],
                    r["provenance"]] for r in rows])


@profiles_app.command("rm")
def remove(
    ids: Annotated[list[str], typer.Argument(help="The ids `gpuplan profiles` lists (cal-N for a calibration, a"
                                                   " profile's file name for bench and probe).", metavar="ID...")],
    yes: Annotated[bool, typer.Option("-y", "--yes", help="Remove without asking.")] = False,
) -> None:
    """Remove measured speeds: the next estimate plans without them."""
    from gpuplan.errors import UsageError
    from gpuplan.planning import profiles
    from gpuplan.store.state import State

    rows = {r["id"]: r for r in _rows(None)}
    unknown = [i for i in ids if i not in rows]
    if unknown:
        raise UsageError(f"no measured speed {unknown[0]!r}; `gpuplan profiles` lists their ids")
    for i in ids:
        r = rows[i]
        print(f"{i}: {r['kind']} of {r['workload']} on {r['machine'] or r['gpu']}, {r['date']}")
    if not yes and not typer.confirm(f"Remove {'these' if len(ids) > 1 else 'it'}? The next estimate plans without"
                                     f" {'them' if len(ids) > 1 else 'it'}", default=False, err=True):
        raise typer.Abort()
    state = State.open_default()
    try:
        for i in ids:
            if i.startswith("cal-"):
                state.remove_calibration(int(i[4:]))
            else:
                (profiles.measured_dir() / f"{i}.yaml").unlink(missing_ok=True)
            print(f"removed {i}")
    finally:
        state.close()


def register(app: typer.Typer) -> None:
    app.add_typer(profiles_app, name="profiles")
