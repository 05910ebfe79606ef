"""`gpuplan estimate`: plan a batch of GPU work in yen, setup time counted, over every offer."""

from __future__ import annotations

import json
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from gpuplan.errors import UsageError
from gpuplan.planning import fmt

_FORMATS = ("table", "json", "csv")


def parse_quotas(values: list[str]):
    """`azure=20` (total vCPUs) and `azure:NC=24` / `azure:standardNCFamily=24` (one family)."""
    from gpuplan.planning.model import Quotas

    total: dict[str, int] = {}
    family: dict[tuple[str, str], int] = {}
    for text in values:
        key, sep, num = text.partition("=")
        n = num.strip()
        if not sep or not key.strip() or not (n.isascii() and n.isdecimal()) or len(n) > 9:
            raise UsageError(f"bad --quota {text!r}: write PROVIDER=VCPUS (azure=20) or PROVIDER:FAMILY=VCPUS (azure:NC=24)")
        prov, colon, fam = key.strip().partition(":")
        if colon and not fam.strip():
            raise UsageError(f"bad --quota {text!r}: name the family after the colon (azure:NC=24) or drop the colon")
        if fam:
            family[(prov.lower(), fam.strip())] = int(n)
        else:
            total[prov.lower()] = int(n)
    return Quotas(total=total, family=family)


def check_quotas(quotas, cat) -> None:
    """Every --quota names a provider (and quota family) of the catalog: a typo would otherwise
    be a quota that silently limits nothing."""
    if not quotas.total and not quotas.family:
        return
    from gpuplan.operating import provider
    from gpuplan.planning.model import Quotas

    in_catalog = {o.provider for o in cat.offers}
    for prov in [*quotas.total, *(p for p, _ in quotas.family)]:
        if prov not in in_catalog and prov not in provider.available():
            known = sorted(in_catalog | set(provider.available()))
            raise UsageError(f"bad --quota: unknown provider {prov!r}; known providers: {', '.join(known)}")
    for (prov, fam), n in quotas.family.items():
        one = Quotas(family={(prov, fam): n})
        families = sorted({o.quota_family for o in cat.offers if o.provider == prov and o.quota_family})
        if prov in in_catalog and not any(one.family_limit(prov, f) for f in families):
            listed = ", ".join(families[:4]) + (f" and {len(families) - 4} more" if len(families) > 4 else "")
            raise UsageError(f"bad --quota {prov}:{fam}={n}: no {prov} quota family {fam!r} in catalog {cat.snapshot};"
                             f" families: {listed or 'none (give PROVIDER=VCPUS)'}")


def _user_state():
    """The user's state DB if it exists (an estimate never creates one), else None."""
    from gpuplan import paths

    db = paths.state_db()
    if not db.is_file():
        return None
    from gpuplan.operating.state import State

    return State(db)


def _measured_setup(state, cat) -> dict[tuple[str, str], tuple[int, str]]:
    """Latest measured setup seconds per offer from the user's state DB."""
    out = {}
    if state is None:
        return out
    for o in cat.offers:
        if (o.provider, o.name) in out:
            continue
        hit = state.setup_time(o.provider, o.name)
        if hit is not None:
            out[(o.provider, o.name)] = (int(hit[0]), f"gpuplan state {state.path}, {hit[1].date().isoformat()}")
    return out


def _calibrate(state, work, cat):
    """The workload with the speeds measured by `gpuplan run --plan` batches of it (state DB),
    and one line per calibration saying what was predicted, what was measured, what changed."""
    if state is None:
        return work, []
    from gpuplan.planning import model, workloads

    speeds, lines = {}, []
    for r in state.calibrations(work.name):
        offer = next((o for o in cat.offers if o.provider == r["provider"] and o.name == r["size"]), None)
        if offer is None or offer.gpu in speeds:
            continue
        try:
            before, _ = model.speed(work, offer, cat.gpus)
        except model.Infeasible:
            continue
        measured, predicted = Decimal(str(r["measured_s"])), Decimal(str(r["predicted_s"]))
        speeds[offer.gpu] = before * predicted / measured
        lines.append(
            f"{r['jobs']} jobs on {r['cluster']} ({r['provider']} {r['size']}, {r['measured_at'].date().isoformat()}): "
            f"predicted {fmt.duration(predicted)}, measured {fmt.duration(measured)} ({(measured - predicted) / predicted * 100:+.1f} %); "
            f"{offer.gpu} now {model.factor_text(speeds[offer.gpu])}x {work.reference_gpu} (was {model.factor_text(before)}x)")
    if speeds:
        work = workloads.with_measured_speeds(work, speeds, [f"calibrated by gpuplan run: {line}" for line in lines])
    return work, lines


def _minutes(seconds: int) -> int | float:
    """Minutes for JSON and CSV: exact (whole, or to 1/100 min)."""
    return seconds // 60 if seconds % 60 == 0 else round(seconds / 60, 2)


def _yen2(value: Decimal) -> str:
    """Yen for JSON: an exact string to the sen."""
    return str(value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def _market(offers) -> str:
    return "spot" if any(o.market == "spot" for o in offers) else "on-demand"


def _machine_dicts(plan) -> list[dict[str, Any]]:
    """One object per machine, built from the plan's columns (plans of 20,000 jobs hold
    thousands of machines: no VmUse objects in between)."""
    out = []
    for m in plan.machines:
        yen, per = m.rate
        for i, n in enumerate(m.counts):
            jobs_s, billed = m.jobs_s[i], m.billed_s[i]
            base = {"instance_type": m.offer.name, "role": m.role, "setup_s": m.setup_s, "capture_s": m.capture_s,
                    "staging_s": m.staging_s, "jobs_s": jobs_s,
                    "job_starts_s": _yen2(m.job_starts_s[i] if m.job_starts_s else Decimal(0)),
                    "idle_tail_s": m.idle_s[i] if m.idle_s else 0, "billed_s": billed,
                    "cost_jpy": _yen2(billed * yen / per)}
            names = m.names[i] if m.names else ()
            out.extend({**base, "jobs": list(names[k]) if k < len(names) else []} for k in range(n))
    return out


def plan_dict(plan, workload_name: str = "") -> dict[str, Any]:
    first, count = plan.fleet[0]
    return {
        "instance_type": first.name,
        "provider": plan.provider,
        "region": plan.region,
        "market": _market(o for o, _ in plan.fleet),
        "count": count if len(plan.fleet) == 1 else plan.count,
        "fleet": [{"instance_type": o.name, "count": n, "gpu": o.gpu, "gpus_per_machine": o.gpu_count,
                   "market": o.market} for o, n in plan.fleet],
        "setup": plan.setup,
        "per_gpu": plan.per_gpu,
        "wall_minutes": _minutes(plan.wall_s),
        "billed_minutes": _minutes(plan.billed_s),
        "cost_jpy": plan.cost_jpy,
        "cost_exact_jpy": _yen2(plan.cost) if plan.feasible or plan.machines else None,
        "breakdown": {k: _yen2(v) for k, v in plan.breakdown.items()},
        "machines": _machine_dicts(plan),
        "peak_vcpus": plan.peak_vcpus,
        "feasible": plan.feasible,
        "recommendable": plan.recommendable,
        "reason": plan.reason,
        "warnings": list(plan.warnings),
        "note": plan.note,
        "optimal": plan.optimal,
        "assumptions": list(plan.assumptions),
    }


def _visible(est, show_all: bool) -> list:
    """The best two per offer, the best three mixes, the frontier, and each kind of exclusion once."""
    alike: dict[int, int] = {}
    if show_all:
        return list(est.plans), alike
    seen: dict[tuple, int] = {}
    reasons: set[str] = set()
    first_of: dict[str, object] = {}
    pareto = {id(p) for p in est.pareto}
    out = []
    for p in est.plans:
        if p.feasible:
            # fleets of one offer type: the best 2 per size (on demand and spot apart); mixed fleets: the best 3
            key = (p.fleet[0][0].name, p.fleet[0][0].market) if len(p.fleet) == 1 else "mix"
            seen[key] = seen.get(key, 0) + 1
            if seen[key] <= (2 if len(p.fleet) == 1 else 3) or p is est.recommended or id(p) in pareto:
                out.append(p)
        else:
            o = p.fleet[0][0]
            kind = p.reason.replace(o.name, "*")
            if kind not in reasons:
                reasons.add(kind)
                out.append(p)
                alike[id(p)] = 0
                first_of[kind] = p
            else:
                alike[id(first_of[kind])] += 1
    return out, alike


_HEADER = ("", "fleet", "where", "setup", "wall", "billed", "yen", "feasible / why excluded")
_RIGHT = {"wall", "billed", "yen"}


def _rows(est, show_all: bool) -> list[tuple[str, ...]]:
    """The table's rows, one cell per _HEADER column, as plain text."""
    rows, alike = _visible(est, show_all)
    pareto = {id(p) for p in est.pareto}
    out = []
    for p in rows:
        mark = "→" if p is est.recommended else ("·" if id(p) in pareto else "")
        fleet = p.label + (f" ({p.per_gpu}/GPU)" if p.per_gpu > 1 else "")
        where = f"{p.provider} {p.region}"
        if p.feasible:
            status = "yes" + (f" (warning: {', '.join(_warning_kinds(p.warnings))})" if p.warnings else "")
            if not p.recommendable:
                status = ("spot: not recommended without --spot" if _market(o for o, _ in p.fleet) == "spot"
                          else "owned: not recommended without --owned")
            if not p.optimal:
                status += " (schedule not proven optimal)"
            out.append((mark, fleet, where, p.setup, fmt.duration(p.wall_s), fmt.duration(p.billed_s), fmt.yen(p.cost),
                        status))
        else:
            n = alike.get(id(p), 0)
            more = f" (and {n} more offer{'s' if n > 1 else ''} alike)" if n else ""
            out.append((mark, fleet, where, "-", "-", "-", "-", f"no: {p.reason}{more}"))
    return out


def _summary(est, show_all: bool) -> list[tuple[str, str]]:
    """The lines after the table as (kind, text): kind "head", "line", "warning" or "assumption".
    Every note once: plans that share hardware share its note."""
    rec = est.recommended
    if rec is None:
        return [("head", f"No recommendation: {est.reason}")]
    out = [("head", f"Recommended: {rec.label} {rec.provider} {rec.region}, "
                    f"{'from an image' if rec.setup == 'image' else 'from scratch'}: "
                    f"{fmt.yen(rec.cost)}, wall {fmt.duration(rec.wall_s)}, billed {fmt.duration(rec.billed_s)}")]
    parts = ", ".join(f"{k} {fmt.yen(v, 2)}" for k, v in rec.breakdown.items() if v)
    out.append(("line", f"breakdown: {parts} (total {fmt.yen(rec.cost, 2)} → {fmt.yen(rec.cost)})" if parts
                else "breakdown: nothing more to pay for this batch (hardware you already have)"))
    out.append(("line", f"why: {est.reason}"))
    out.append(("line", f"optimal: {_proof(est)}"))
    notes = [f"note: {line}" for key, line in est.extra.items() if show_all or key != "skipped_mixes"]  # routine: --all, JSON
    notes += [f"{p.label}: {p.note}" for p in est.plans if p.note and p.feasible]
    out.extend(("line", line) for line in dict.fromkeys(notes))
    out.extend(("warning", w) for w in dict.fromkeys(rec.warnings))
    out.append(("line", "→ recommended, · on the cost / wall-time Pareto frontier"
                + ("" if show_all else "; --all lists every candidate")))
    out.append(("head", "Assumptions:"))
    out.extend(("assumption", line) for line in dict.fromkeys(est.assumptions))
    return out


def _render_table(est, show_all: bool) -> None:
    """On a terminal, a rich table: a column per fact where it is 120 columns wide or more, else
    the fleet cell carries provider, region and setup on a second line. Piped, plain text: one
    line per row, columns padded with spaces, no colour, no width limit, no trailing spaces."""
    from rich.console import Console

    title = f"gpuplan estimate: {est.workload.name} ({fmt.count(len(est.workload.jobs))} jobs), catalog {est.snapshot}"
    rows = _rows(est, show_all)
    summary = _summary(est, show_all)
    console = Console(soft_wrap=True, highlight=False)
    if not console.is_terminal:
        sys.stdout.write(_plain(title, rows, summary))
        return
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    wide = console.width >= 120
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for col in _HEADER if wide else ("", "fleet", "wall", "billed", "yen", "feasible / why excluded"):
        kw: dict[str, Any] = {"justify": "right", "no_wrap": True} if col in _RIGHT else {}
        if col in ("fleet", "where"):
            kw = {"no_wrap": True} if wide else {"min_width": 22, "overflow": "fold"}
        if col == "feasible / why excluded" and not wide:
            kw = {"ratio": 1}
        table.add_column(col, **kw)
    for mark, fleet, where, setup, *figures in rows:
        cells = [escape(c) for c in figures]
        if wide:
            table.add_row(mark, escape(fleet), where, setup, *cells)
        else:
            table.add_row(mark, f"{escape(fleet)}\n[dim]{where}, {setup}[/dim]", *cells)
    console.print(table, soft_wrap=False)
    for kind, text in summary:
        if kind == "head":
            head, sep, rest = text.partition(":")
            console.print(f"[bold]{escape(head)}{sep}[/bold]{escape(rest)}")
        elif kind == "warning":
            console.print(f"  [yellow]warning:[/yellow] {escape(text)}")
        else:
            console.print(("  - " if kind == "assumption" else "  ") + escape(text))


def _plain(title: str, rows: list[tuple[str, ...]], summary: list[tuple[str, str]]) -> str:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(_HEADER)]

    def line(cells) -> str:
        return "  ".join(c.rjust(w) if h in _RIGHT else c.ljust(w) for c, w, h in zip(cells, widths, _HEADER)).rstrip()

    out = [title, line(_HEADER), line("-" * w for w in widths)]
    out += [line(r) for r in rows]
    for kind, text in summary:
        prefix = {"head": "", "warning": "  warning: ", "assumption": "  - "}.get(kind, "  ")
        out.append((prefix + text).rstrip())
    return "\n".join(out) + "\n"


def _warning_kinds(warnings) -> list[str]:
    """One word per kind of warning for the table's narrow column (the lines follow the table)."""
    kinds = []
    for w in warnings:
        kind = ("quota" if "quota" in w else "spot" if w.startswith("spot") else
                "global batch" if "global batch" in w else "see below")
        if kind not in kinds:
            kinds.append(kind)
    return kinds


def _proof(est) -> str:
    """One line on how sure the pick is: proven, or within what gap of the best possible."""
    cost = isinstance(est.gap, Decimal)
    if est.gap == 0:
        return "proven: no schedule of any candidate fleet beats it"
    amount = fmt.yen(est.gap, 2) if cost else f"{fmt.count(est.gap)} s"
    mine = est.recommended.cost if cost else est.recommended.wall_s
    share = f"{Decimal(est.gap) / mine * 100:.4f} %"
    if est.proven:
        return f"proven within {amount} ({share}, the MILP solvers' own tolerance): no schedule of any candidate beats it by more"
    return (f"not proven: some schedule might beat it by up to {amount} ({share}); the exact solver ran out of "
            "time or the batch is too large for it")


def _render_csv(est) -> None:
    import csv

    cols = ["provider", "region", "fleet", "setup", "per_gpu", "count", "wall_minutes", "billed_minutes", "cost_jpy",
            "feasible", "recommended", "pareto", "reason", "warnings"]
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(cols)
    pareto = {id(p) for p in est.pareto}
    for p in est.plans:
        writer.writerow([p.provider, p.region, p.label, p.setup, p.per_gpu, p.count,
                         _minutes(p.wall_s) if p.feasible else "", _minutes(p.billed_s) if p.feasible else "",
                         p.cost_jpy if p.feasible else "", str(p.feasible).lower(), str(p is est.recommended).lower(),
                         str(id(p) in pareto).lower(), p.reason, " | ".join(p.warnings)])


def write_json(est, out) -> None:
    """The estimate as indented JSON, written plan by plan: a 20,000-job estimate lists millions
    of machines (every machine of every candidate), which held at once took gigabytes. Each
    plan's machines are one line, written by the json module's C encoder (the indenting one
    takes minutes over them)."""
    name = est.workload.name
    head = {
        "snapshot": est.snapshot,
        "workload": name,
        "jobs": len(est.workload.jobs),
        "recommended": _SLOT,
        "reason": est.reason,
        "plans": _SLOT,
        "pareto": _SLOT,
        "recommendation_proven_optimal": est.proven,
        # at most this much better is possible: yen (objective cost) or seconds (objective time)
        "optimality_gap": _yen2(est.gap) if isinstance(est.gap, Decimal) else est.gap,
        "notes": dict(est.extra),
    }
    start, after_rec, after_plans, end = json.dumps(head, indent=2, ensure_ascii=False).split(json.dumps(_SLOT))
    out.write(start)
    out.write(_plan_json(est.recommended, name, 2) if est.recommended else "null")
    for text, listed in ((after_rec, est.plans), (after_plans, est.pareto)):
        out.write(text + ("[" if listed else "[]"))
        for i, plan in enumerate(listed):
            out.write(("\n    " if i == 0 else ",\n    ") + _plan_json(plan, name, 4))
        out.write("\n  ]" if listed else "")
    out.write(end + "\n")


_SLOT = "\0"  # where a part written on its own goes (no name or figure holds a NUL: files with one are refused)


def _plan_json(plan, workload_name: str, indent: int) -> str:
    data = plan_dict(plan, workload_name)
    machines = json.dumps(data["machines"], ensure_ascii=False)
    data["machines"] = _SLOT
    text = json.dumps(data, indent=2, ensure_ascii=False).replace(json.dumps(_SLOT), machines)
    return text.replace("\n", "\n" + " " * indent)


def save_plan(est, path: Path) -> None:
    rec = est.recommended
    if rec is None:
        raise UsageError(f"nothing to save to {path}: {est.reason}")
    data = plan_dict(rec, est.workload.name)
    data.update({
        "snapshot": est.snapshot,
        "workload": est.workload.name,
        "setup_mode": rec.setup,
        "count": rec.fleet[0][1],  # workers of the first (or only) type; `fleet` lists a mix in full
    })
    try:
        Path(path).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write the plan to {path} ({exc.strerror})") from None


def register(app: typer.Typer) -> None:
    @app.command()
    def estimate(
        videos: Annotated[Optional[int], typer.Option(help="N colorize-hd jobs (field report A: one model per video).")] = None,
        workload: Annotated[Optional[str], typer.Option(help="Built-in workload name or a YAML file (docs/workloads.md).")] = None,
        as_of: Annotated[Optional[str], typer.Option("--as-of", help="Plan with the catalog as of YYYY-MM.")] = None,
        provider: Annotated[Optional[str], typer.Option(help="Only this provider's offers.")] = None,
        region: Annotated[Optional[str], typer.Option(help="Only this region's offers.")] = None,
        deadline: Annotated[Optional[str], typer.Option(help="Latest wall time: 90m, 3h, 1h30m, 2d.")] = None,
        objective: Annotated[str, typer.Option(help="cost (default) or time.")] = "cost",
        quota: Annotated[Optional[list[str]], typer.Option(help="vCPU quota: azure=20 or azure:NC=24 (repeatable).")] = None,
        out_format: Annotated[str, typer.Option("--format", help="table, json or csv.")] = "table",
        save: Annotated[Optional[Path], typer.Option(help="Write the recommended plan (for `gpuplan provision --plan`).")] = None,
        profile: Annotated[Optional[Path], typer.Option(help="A measured profile (YAML/JSON) replacing the workload's figures.")] = None,
        owned: Annotated[Optional[list[str]], typer.Option(help="Hardware you already own or rent by the month (offer name); it may then be recommended.")] = None,
        show_all: Annotated[bool, typer.Option("--all", help="List every candidate plan.")] = False,
        release: Annotated[str, typer.Option(help="when-done (release each machine when its jobs end) or at-end.")] = "when-done",
        plot: Annotated[Optional[Path], typer.Option(help="Draw cost against wall time for every plan and the pick's timeline into an .svg or .png (needs gpuplan[plot]).")] = None,
        spot: Annotated[bool, typer.Option("--spot", help="Also plan on spot capacity at the catalog's spot prices (interruptible: each such plan says how); spot plans may then be recommended.")] = False,
    ) -> None:
        """Plan a batch of GPU work: every fleet, its wall time and yen, and the recommendation."""
        from gpuplan.planning import catalog, optimizer, workloads
        from gpuplan.planning.model import Setting
        from gpuplan.planning.units import parse_duration

        if out_format not in _FORMATS:
            raise UsageError(f"bad --format {out_format!r}: use table, json or csv")
        if release not in ("when-done", "at-end"):
            raise UsageError(f"bad --release {release!r}: use when-done or at-end")
        if videos is not None and workload is not None:
            raise UsageError("give either --videos N or --workload NAME, not both")
        if videos is not None:
            if videos < 1:
                raise UsageError(f"bad --videos {videos}: give the number of videos, at least 1")
            work = workloads.videos(videos)
        elif workload is not None:
            work = workloads.load(workload)
        else:
            raise UsageError(f"say what to plan: --videos N or --workload NAME ({', '.join(workloads.builtin_names())}) or FILE")
        if profile is not None:
            work = workloads.apply_profile(work, profile)
        deadline_s = parse_duration(deadline, "--deadline") if deadline else None
        quotas = parse_quotas(quota or [])
        cat = catalog.load(as_of)
        check_quotas(quotas, cat)
        state = _user_state()
        setting = Setting(
            catalog=cat, as_of_month=(as_of or "").strip(), quotas=quotas, deadline_s=deadline_s,
            release=release, measured_setup=_measured_setup(state, cat), owned=tuple(owned or ()), spot=spot,
        )
        if owned:
            known = {n.lower() for o in cat.offers if o.kind in ("owned", "monthly") for n in (o.name, *o.aliases)}
            for name in owned:
                if name.lower() not in known:
                    raise UsageError(f"--owned {name!r} is not an owned offer (nor a monthly-rented one) in catalog"
                                     f" {cat.snapshot}; those are: {', '.join(sorted(known)) or 'none'}")
        work, calibrations = _calibrate(state, work, cat)
        est = optimizer.estimate(work, setting, provider=provider, region=region, objective=objective)
        if calibrations:
            from dataclasses import replace

            est = replace(est, extra={**est.extra, **{f"calibration {i + 1}": f"calibration: {line}"
                                                      for i, line in enumerate(calibrations)}})
        if save is not None and est.recommended is not None:
            save_plan(est, save)
        if plot is not None:
            from gpuplan.planning import plot as plotting

            plotting.write(est, plot, deadline_s)
            print(f"plot written to {plot}", file=sys.stderr)
        if out_format == "json":
            write_json(est, sys.stdout)
        elif out_format == "csv":
            _render_csv(est)
        else:
            _render_table(est, show_all)
        if est.recommended is None:  # the plans are shown, then one line and exit 2: nothing to act on
            sys.stdout.flush()
            raise UsageError(est.reason + (f"; nothing saved to {save}" if save is not None else ""))
