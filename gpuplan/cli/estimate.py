"""`gpuplan estimate`: plan a batch of GPU work in yen, setup time counted, over every offer."""

from __future__ import annotations

import json
import operator
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from gpuplan.cli import shapes
from gpuplan.errors import UsageError
from gpuplan.planning import fmt, outcomes
from gpuplan.planning.outcomes import Code

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


def parse_owned(values: list[str]) -> tuple[list[str], dict[str, int]]:
    """--owned NAME or NAME=N (you have N of them): the names, and the counts by lower-case name."""
    from gpuplan.units import parse_count

    names, counts = [], {}
    for text in values:
        name, sep, num = text.partition("=")
        name = name.strip()
        if not name:
            raise UsageError(f"bad --owned {text!r}: name the offer, as onprem-1080ti or onprem-1080ti=4")
        if sep:
            try:
                counts[name.lower()] = parse_count(num.strip())
            except UsageError:
                raise UsageError(f"bad --owned {text!r}: after = give how many you have, 1 to 1,000"
                                 " (onprem-1080ti=4)") from None
        names.append(name)
    return names, counts


def parse_slack(text: str) -> Decimal:
    """--cost-slack: "3%", "3" or "0.5 %" -> Decimal("0.03"); 0 to 100 %."""
    raw = text.strip().removesuffix("%").strip()
    try:
        value = Decimal(raw)
    except ArithmeticError:
        value = Decimal(-1)
    if not value.is_finite() or not 0 <= value <= 100:
        raise UsageError(f"bad --cost-slack {text!r}: give a percentage from 0 to 100, such as 3%")
    return value / 100


def parse_budget(text: str | None) -> Decimal | None:
    """--budget: "5000", "¥5,000" or "5000 JPY" -> Decimal yen (more than 0)."""
    from gpuplan.units import yen

    if text is None:
        return None
    value = yen(text)
    if value is None:
        raise UsageError(f"bad --budget {text!r}: give the most yen the batch may cost, such as 5000 or ¥5,000"
                         " (at most ¥1,000,000,000,000)")
    return value


def check_quotas(quotas, cat) -> None:
    """Every --quota names a provider (and quota family) of the catalog: a typo would otherwise
    be a quota that silently limits nothing."""
    if not quotas.total and not quotas.family:
        return
    from gpuplan.fleet import provider
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
    from gpuplan.store.state import State

    return State.open_existing()


def _measured_setup(state, cat) -> dict[tuple[str, str], tuple[int, str]]:
    """Latest measured setup seconds per offer from the user's state DB."""
    out: dict[tuple[str, str], tuple[int, str]] = {}
    if state is None:
        return out
    for o in cat.offers:
        if (o.provider, o.name) in out:
            continue
        hit = state.setup_time(o.provider, o.name)
        if hit is not None:
            out[(o.provider, o.name)] = (int(hit[0]), f"gpuplan state {state.where}, {hit[1].date().isoformat()}")
    return out


def _measured_engine(state, cat) -> dict[tuple[str, str], tuple[int, str]]:
    """Latest measured `ray` playbook seconds (the run engine's install) per offer."""
    out = {}
    if state is None:
        return out
    for o in cat.offers:
        hit = state.setup_time(o.provider, o.name, "ray") if (o.provider, o.name) not in out else None
        if hit is not None:
            out[(o.provider, o.name)] = (int(hit[0]), f"gpuplan state {state.where}, {hit[1].date().isoformat()}")
    return out


def _calibrate(state, work, cat):
    """The workload with the speeds measured by `gpuplan run --plan` batches of it (state DB),
    and one line per calibration saying what was predicted, what was measured, what changed."""
    if state is None:
        return work, []
    from gpuplan.planning import model, workloads
    from gpuplan.planning.evidence import SpeedKind

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
        batch = f"batch {r['batch']}, " if r.get("batch") else ""
        lines.append(
            f"{r['jobs']} jobs on {r['cluster']} ({batch}{r['provider']} {r['size']}, {r['measured_at'].date().isoformat()}; "
            f"{r.get('clock') or 'batch wall'}): predicted {fmt.duration(predicted)}, measured {fmt.duration(measured)}"
            f" ({(measured - predicted) / predicted * 100:+.1f} %); "
            f"{offer.gpu} now {model.factor_text(speeds[offer.gpu])}x {work.reference_gpu} (was {model.factor_text(before)}x),"
            f" applied to every {offer.gpu} offer: a speed is the GPU model's, whoever rents it out (field report D"
            " docs/model.md#calibration); `gpuplan profiles rm` removes it")
    if speeds:
        work = workloads.with_measured_speeds(work, speeds, [f"calibrated by gpuplan run: {line}" for line in lines],
                                              SpeedKind.CALIBRATED)
    return work, lines


def _measured(work, cat):
    """The workload with the speeds `gpuplan bench --on` measured (one profile per offer, in the
    state's profiles/measured/), each keyed on its offer's GPU, and one line per offer saying so."""
    from gpuplan.planning import model, profiles, workloads
    from gpuplan.planning.probing import SOURCE as PROBED

    job = workloads.bench_job(work.name)
    found, problems = profiles.measured_profiles(job) if job else ([], [])
    if work.name != job:  # the user's own job, timed by `gpuplan probe` under its workload's name
        probed, unread = profiles.measured_profiles(work.name)
        found = sorted([*found, *probed], key=lambda pair: (pair[1].provenance.date, pair[0].stat().st_mtime))
        problems = problems + unread
    speeds, lines = {}, {}
    for path, prof in found:  # oldest first: a later measurement of the same GPU wins
        p = prof.provenance
        offer = next((o for o in cat.offers if o.key == p.offer), None)
        if offer is None or prof.unit != work.unit:
            continue
        speeds[offer.gpu] = work.seconds_per_unit / prof.seconds_per_unit
        was = ""
        try:
            was = f" (was {model.factor_text(model.speed(work, offer, cat.gpus)[0])}x)"
        except model.Infeasible:
            pass
        how = ("measured (probe)", "`gpuplan probe`") if p.source == PROBED else ("measured", "`gpuplan bench --on`")
        start = (f", start {prof.fixed_seconds_per_job:.0f} s" if p.source == PROBED and prof.fixed_seconds_per_job
                 is not None else "")
        lines[offer.gpu] = (f"{how[0]}: {work.name} on {offer.provider}:{offer.name} ({offer.gpu}, {p.gpu or '?'}) by"
                            f" {how[1]}, {p.date}: {prof.seconds_per_unit:.6g} s per {prof.unit}{start},"
                            f" {model.factor_text(speeds[offer.gpu])}x {work.reference_gpu}{was}"
                            + (" [quick run: tiny shapes, not real speed]" if p.quick else "") + f" (profile {path})")
    if speeds:
        work = workloads.with_measured_speeds(work, speeds, list(lines.values()))
    return work, list(lines.values()) + [f"measured: {line}" for line in problems]


def _minutes(seconds: int) -> int | float:
    """Minutes for JSON and CSV: exact (whole, or to 1/100 min)."""
    return seconds // 60 if seconds % 60 == 0 else round(seconds / 60, 2)


def _yen2(value: Decimal) -> str:
    """Yen for JSON: an exact string to the sen."""
    return str(value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def _whole_yen(value: Decimal) -> int:
    return int(value.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _market(offers) -> str:
    return "spot" if any(o.market == "spot" for o in offers) else "on-demand"


def _machine_dicts(plan) -> list[dict[str, Any]]:
    """One object per machine, built from the plan's columns (plans of 20,000 jobs hold
    thousands of machines: no VmUse objects in between)."""
    out: list[dict[str, Any]] = []
    for m in plan.machines:
        for i, n in enumerate(m.counts):
            jobs_s, billed = m.jobs_s[i], m.billed_s[i]
            base = {"instance_type": m.offer.name, "role": m.role, "setup_s": m.setup_s, "capture_s": m.capture_s,
                    "staging_s": m.staging_s, "jobs_s": jobs_s,
                    "job_starts_s": _yen2(m.job_starts_s[i] if m.job_starts_s else Decimal(0)),
                    "idle_tail_s": m.idle_s[i] if m.idle_s else 0, "billed_s": billed,
                    "cost_jpy": _yen2(m.cost_of(i))}
            names = m.names[i] if m.names else ()
            out.extend({**base, "jobs": list(names[k]) if k < len(names) else []} for k in range(n))
    return out


GROUPS_PER_COLUMN = 4  # a column of more kinds of machine (mixed job lengths) is one group with its range


def _machine_groups(plan) -> list[dict[str, Any]]:
    """The plan's machines grouped by schedule shape: machines of one size, role and start, each
    kind of them (same busy and billed seconds) a group of its own where they are few, else one
    group giving the range of busy seconds. Totals per group: billed seconds, idle tail, job
    starts and yen; `machines` says how many."""
    out = []
    for m in plan.machines:
        base = {"instance_type": m.offer.name, "role": m.role, "start_s": m.start_s, "setup_s": m.setup_s,
                "capture_s": m.capture_s, "staging_s": m.staging_s}
        kinds = len(m.counts)
        runs = [(i, i + 1) for i in range(kinds)] if kinds <= GROUPS_PER_COLUMN else [(0, kinds)]
        yen, per = m.rate
        for lo, hi in runs:
            n = m.counts[lo:hi]
            billed = sum(map(operator.mul, m.billed_s[lo:hi], n))
            cost = sum(map(operator.mul, m.costs[lo:hi], n), Decimal(0)) if m.costs else billed * yen / per
            jobs = m.jobs_s[lo:hi]
            out.append({**base, "machines": sum(n), "jobs_s_min": min(jobs), "jobs_s_max": max(jobs),
                        "job_starts_s": _yen2(sum(map(operator.mul, m.job_starts_s[lo:hi], n), Decimal(0))
                                              if m.job_starts_s else Decimal(0)),
                        "idle_tail_s": sum(map(operator.mul, m.idle_s[lo:hi], n)) if m.idle_s else 0,
                        "billed_s": billed, "cost_jpy": _yen2(cost)})
    return out


def _terms_dict(plan, offer) -> dict[str, Any] | None:
    """How the offer's machines are billed in this plan (planning/billing.Terms); None where the
    plan has no machines (excluded before it was scheduled)."""
    t = next((m.terms for m in plan.machines if m.offer is offer), None)
    if t is None:
        return None
    return {"price_jpy": _yen2(t.price_jpy), "period_s": t.period_s, "granularity_s": t.granularity_s,
            "minimum_s": t.minimum_s, "daily_cap_jpy": None if t.daily_cap_jpy is None else _yen2(t.daily_cap_jpy),
            "monthly_cap_jpy": None if t.monthly_cap_jpy is None else _yen2(t.monthly_cap_jpy)}


def plan_dict(plan, workload_name: str = "", schedule: bool = True, streams: bool = False,
              memo: dict | None = None) -> dict[str, Any]:
    """A plan as data: fleet, figures, codes (excluded_by, warned_by) and its machines grouped by
    schedule shape; with `schedule`, every machine on its own with its jobs too. `speeds`: each
    GPU's speed with its kind and band; the ranges: wall and yen at the bands' ends (null where
    there is none: excluded plans, real-time streams). `memo`: evidence.plan_range's, one for
    every plan of an estimate."""
    from gpuplan.market import spot_risk
    from gpuplan.planning import evidence

    first, count = plan.fleet[0]
    span = evidence.plan_range(plan, streams, memo)
    return {
        "instance_type": first.name,
        "provider": plan.provider,
        "region": plan.region,
        "market": _market(o for o, _ in plan.fleet),
        "count": count if len(plan.fleet) == 1 else plan.count,
        "fleet": [{"instance_type": o.name, "count": n, "gpu": o.gpu, "gpus_per_machine": o.gpu_count,
                   "market": o.market, "billing": _terms_dict(plan, o), "listed_tax": o.listed_tax or o.tax}
                  for o, n in plan.fleet],
        "setup": plan.setup,
        "per_gpu": plan.per_gpu,
        "wall_minutes": _minutes(plan.wall_s),
        "billed_minutes": _minutes(plan.billed_s),
        "cost_jpy": plan.cost_jpy,
        "cost_exact_jpy": _yen2(plan.cost) if plan.feasible or plan.machines else None,
        "breakdown": {k: _yen2(v) for k, v in plan.breakdown.items()},
        "speeds": [e.as_dict() for e in plan.speeds],
        "speed_kind": getattr(evidence.weakest(plan.speeds), "value", None),
        "wall_minutes_range": None if span is None else [_minutes(t) for t in span.wall_s],
        "cost_jpy_range": None if span is None else [_whole_yen(c) for c in span.cost],
        "range_shown": False if span is None else span.shown,
        # a spot plan's expected interruptions (docs/model.md, "Spot interruptions"): null without spot machines
        "spot_risk": None if plan.risk is None else spot_risk.as_dict(plan.risk, plan.cost, plan.wall_s),
        "machine_groups": _machine_groups(plan),
        **({"machines": _machine_dicts(plan)} if schedule else {}),
        "peak_vcpus": plan.peak_vcpus,
        "feasible": plan.feasible,
        "recommendable": plan.recommendable,
        "reason": plan.reason,
        "excluded_by": [o.as_dict() for o in plan.excluded_by],
        "warnings": list(plan.warnings),
        "warned_by": [o.as_dict() for o in plan.warned_by],
        "note": plan.note,
        "optimal": plan.optimal,
        "assumptions": list(plan.assumptions),
    }


def _visible(est, show_all: bool) -> tuple[list, dict[int, int]]:
    """Every plan with --all. Else the short view: the pick, the cost / wall-time frontier, the
    best plan of each provider, the plans the why and faster lines name; the excluded plans are
    folded into one line per reason (_excluded_line)."""
    alike: dict[int, int] = {}
    if show_all:
        return list(est.plans), alike
    if est.recommended is None:
        return _folded(est, alike)
    from gpuplan.planning import ranking

    eligible = [p for p in est.plans if p.feasible and p.recommendable]
    keep = {id(p) for p in est.pareto}
    best_of: dict[str, Any] = {}
    for p in eligible:  # est.plans is in rank order
        best_of.setdefault(p.provider, p)
    keep.update(id(p) for p in best_of.values())
    named = [est.recommended, ranking.faster_plan(est.recommended, eligible), *est.named]
    keep.update(id(p) for p in named if p is not None)
    return [p for p in est.plans if id(p) in keep], alike


def _folded(est, alike: dict[int, int]) -> tuple[list, dict[int, int]]:
    """Where nothing can be recommended the excluded plans are the answer: the best two per
    offer, the best three mixes, and each kind of exclusion once (`alike` counts the rest)."""
    seen: dict[Any, int] = {}
    reasons: set[tuple] = set()
    first_of: dict[tuple, object] = {}
    out = []
    for p in est.plans:
        if p.feasible:
            key = (p.fleet[0][0].name, p.fleet[0][0].market) if len(p.fleet) == 1 else "mix"
            seen[key] = seen.get(key, 0) + 1
            if seen[key] <= (2 if len(p.fleet) == 1 else 3):
                out.append(p)
        else:
            kind = tuple(outcomes.shown(x).without("offer") for x in p.excluded_by)  # read alike but for the offer's name
            if kind not in reasons:
                reasons.add(kind)
                out.append(p)
                alike[id(p)] = 0
                first_of[kind] = p
            else:
                alike[id(first_of[kind])] += 1
    return out, alike


# What an excluded plan's reason word means where the word alone does not say it (issue 46:
# "priced later 4" read as nothing); --all gives each plan's own sentence.
_EXCLUDED_WORDS = {"priced later": " (their price rows are dated after the --as-of month)",
                   "not available": " (sold only after the --as-of month)",
                   "unpriced": " (no price row: prices.yaml can give one)"}


def _excluded_line(est) -> str:
    """The excluded plans folded: "52 plans excluded: packing 20, image 6, retired 8; --all lists them"."""
    counts: dict[str, int] = {}
    for p in est.plans:
        if not p.feasible and p.excluded_by:
            word = p.excluded_by[0].code.value.replace("_", " ")
            counts[word] = counts.get(word, 0) + 1
    if not counts:
        return ""
    parts = ", ".join(f"{word} {n}{_EXCLUDED_WORDS.get(word, '')}"
                      for word, n in sorted(counts.items(), key=lambda x: (-x[1], x[0])))
    return f"{fmt.plural(sum(counts.values()), 'plan')} excluded: {parts}; --all lists them with their reasons"


_HEADER = ("", "fleet", "where", "setup", "wall", "billed", "yen", "speed evidence", "yen range", "wall range",
           "feasible / why excluded")
_RIGHT = {"wall", "billed", "yen", "yen range", "wall range"}
_STATUS = "feasible / why excluded"


def _rows(est, show_all: bool) -> list[tuple[str, ...]]:
    """The table's rows, one cell per _HEADER column, as plain text. Every duration of the table
    (wall, billed, wall range) reads in one unit, the one its longest figure needs (fmt.durations):
    a row never reads "74 min" beside "1:02 h". The yen and wall ranges are the plan's at its
    speeds' band ends (evidence.plan_range), shown where either end is more than 10 % off."""
    from gpuplan.planning import evidence

    rows, alike = _visible(est, show_all)
    pareto = {id(p) for p in est.pareto}
    spans, ranged = _spans(est, rows)
    scale = _table_scale(est, show_all)
    out: list[tuple[str, ...]] = []
    for p in rows:
        mark = "→" if p is est.recommended else ("·" if id(p) in pareto else "")
        fleet = p.label + (f" ({p.per_gpu}/GPU)" if p.per_gpu > 1 else "")
        where = f"{p.provider} {p.region}"
        if p.feasible:
            span = spans[id(p)]
            late = est.deadline_s is not None and not est.strict and span is not None and span.wall_s[1] > est.deadline_s
            said = ([f"warning: {', '.join(_warning_kinds(p.warned_by))}"] if p.warned_by else []) + (
                ["wall range passes the deadline"] if late else [])
            status = "yes" + (f" ({'; '.join(said)})" if said else "")
            if any(w.code is Code.RETIRES for w in p.warned_by):
                status = "ends sale before it could end: not recommended"
            elif not p.recommendable:
                status = ("spot: not recommended without --spot" if _market(o for o, _ in p.fleet) == "spot"
                          else "owned: not recommended without --owned")
            if not p.optimal:
                status += " (schedule not proven optimal)"
            kind = evidence.weakest(p.speeds)
            wide = ranged.get(id(p))
            yen_range = _yen_span(*wide.cost) if wide is not None else ""
            wall_range = _span(wide.wall_s[0], wide.wall_s[1], scale) if wide is not None else ""
            out.append((mark, fleet, where, p.setup, fmt.duration(p.wall_s, scale), fmt.duration(p.billed_s, scale),
                        fmt.yen(p.cost), kind.value if kind is not None else "-", yen_range, wall_range, status))
        else:
            n = alike.get(id(p), 0)
            more = f" (and {n} more offer{'s' if n > 1 else ''} alike)" if n else ""
            out.append((mark, fleet, where, "-", "-", "-", "-", "-", "-", "-", f"no: {p.reason}{more}"))
    return out


def _spans(est, rows) -> tuple[dict, dict]:
    """Each shown feasible plan's range (evidence.plan_range), and those worth a figure in the table."""
    from gpuplan.planning import evidence

    streams = est.workload.streams is not None
    spans = {id(p): evidence.plan_range(p, streams) for p in rows if p.feasible}
    return spans, {i: sp for i, sp in spans.items() if sp is not None and sp.shown}


def _table_scale(est, show_all: bool) -> str | None:
    """The one unit of every duration the table shows (wall, billed, wall range), which the
    Recommended line's wall and billed share: the row and the line never read "0 d 2 h" and
    "1:57 h", or "1:14 h" and "74 min", for one figure (issue 42)."""
    rows = [p for p in _visible(est, show_all)[0] if p.feasible]
    ranged = _spans(est, rows)[1]
    return fmt.scale_of([p.wall_s for p in rows] + [p.billed_s for p in rows]
                        + [t for sp in ranged.values() for t in sp.wall_s])


def _billed_words(plan) -> str:
    """Why a plan's billed time differs from its wall (issue 46: "billed 1:02 h" under "wall
    1:14 h" read as a mistake): what is billed and what of the wall is not."""
    first = plan.fleet[0][0]
    machines = sum(n for _, n in plan.fleet)
    if plan.billed_s == plan.wall_s:
        return ""
    if first.kind == "task":
        return " (each task's run time; its image pull and start are wall time, not billed)"
    if getattr(first, "queue_wait_s", 0):  # a shared cluster's queue (planning/candidates.py)
        return " (GPU time from each job's start; the queue's wait is wall time, not billed)"
    if plan.billed_s > plan.wall_s and machines > 1:
        return f" (the time of {fmt.plural(machines, 'machine')}, summed)"
    return " (the machines' billed time; the rest of the wall, no machine bills)"


def _summary(est, show_all: bool) -> list[tuple[str, str]]:
    """The lines after the table as (kind, text): kind "head", "line", "warning" or "assumption".
    Every note once: plans that share hardware share its note."""
    rec = est.recommended
    if rec is None:  # the FX age, tax basis and regions still said (issue 22)
        return [("head", f"No recommendation: {est.reason}")] + [
            ("line", f"note: {est.extra[k]}") for k in ("fx", "tax", "regions") if k in est.extra]
    scale = _table_scale(est, show_all)  # the table's unit: the pick's row reads the same
    wall, billed = fmt.duration(rec.wall_s, scale), fmt.duration(rec.billed_s, scale)
    out = [("head", f"Recommended: {rec.label} {rec.provider} {rec.region}, "
                    f"{'from an image' if rec.setup == 'image' else 'from scratch'}: "
                    f"{fmt.yen(rec.cost)}, wall {wall}, billed {billed}{_billed_words(rec)}")]
    parts = ", ".join(f"{k} {fmt.yen(v, 2)}" for k, v in rec.breakdown.items() if v)
    out.append(("line", f"breakdown: {parts} (total {fmt.yen(rec.cost, 2)} → {fmt.yen(rec.cost)})" if parts
                else "breakdown: nothing more to pay for this batch (hardware you already have)"))
    out.append(("line", f"why: {est.reason}"))
    if est.faster:
        out.append(("line", f"faster: {est.faster}"))
    out.append(("line", f"optimal: {_proof(est)}"))
    settle = _settle_line(est)
    for line in (_speed_line(est, settled=bool(settle)), _range_line(est), settle):
        if line:
            out.append(("line", line))
    out.extend(("line", line) for line in _risk_lines(est, show_all))
    notes = [f"note: {line}" for key, line in est.extra.items() if show_all or key != "skipped_mixes"]  # routine: --all, JSON
    shown = {id(p) for p in _visible(est, show_all)[0]}
    notes += [f"{p.label}: {p.note}" for p in est.plans if p.note and p.feasible and id(p) in shown]
    out.extend(("line", line) for line in dict.fromkeys(notes))
    out.extend(("warning", w) for w in dict.fromkeys(rec.warnings))
    raise_it: dict[str, str] = {}
    for w in rec.warned_by:  # the provider's how-to, its blanks filled with what this plan needs
        if w.code in _QUOTA_CODES and w.get("how_to_raise") and w.get("provider") not in raise_it:
            need = w.get("vcpus", w.get("need"))
            raise_it[w.get("provider")] = (w.get("how_to_raise").replace("<vCPUs>", str(need))
                                           .replace("<region>", rec.region).replace("<family>", w.get("family", "<family>")))
    out.extend(("line", f"to raise a quota on {prov}: {how}") for prov, how in raise_it.items())
    if not show_all:
        excluded = _excluded_line(est)
        if excluded:
            out.append(("line", excluded))
    out.append(("line", "→ recommended, · on the cost / wall-time Pareto frontier"
                + ("" if show_all else "; --all lists every candidate")))
    assumptions = list(dict.fromkeys(est.assumptions))
    if show_all:
        out.append(("head", "Assumptions:"))
        out.extend(("assumption", line) for line in assumptions)
    else:  # the workload, the speeds and the exchange rate the pick rests on; --all shows the rest
        speeds = [line for line in assumptions if line.startswith(("workload ", "speed on ", "FX "))]
        out.append(("head", f"Assumptions ({len(assumptions)}; --all lists every one):"))
        out.extend(("assumption", line) for line in speeds)
    return out


def _risk_lines(est, show_all: bool) -> list[str]:
    """One line per shown spot plan: what its expected interruptions add to its uninterrupted yen
    and wall (the point, and the range's ends at each figure's low and high end), and the
    interruption figure each of its offers is planned on, with its source (market/spot_risk.py)."""
    from gpuplan.market import spot_risk

    out = []
    for p in _visible(est, show_all)[0]:
        risk = p.risk
        if risk is None or not p.feasible:
            continue
        base = p.cost - risk.yen[1]
        extra = "".join(f"; {o.name} {o.region} {spot_risk.cited(fig)}" for o, fig in risk.figures)
        out.append(f"spot risk: {p.label} {p.provider} {p.region} {'from an image' if p.setup == 'image' else 'from scratch'}:"
                   f" {fmt.yen(base, 2)} uninterrupted + {fmt.yen(risk.yen[1], 2)} expected"
                   f" ({fmt.yen(risk.yen[0], 2)}–{fmt.yen(risk.yen[2], 2).removeprefix('¥')}),"
                   f" wall +{fmt.duration(risk.wall_s[1])} ({_span(risk.wall_s[0], risk.wall_s[2])}),"
                   f" {risk.interruptions[1].quantize(Decimal('0.001'))} interruptions expected{extra}")
    return out


def _span(low: int, high: int, scale: str | None = None) -> str:
    """A wall-time range in one unit: `scale` (a table column's), else the longer end's: "60
    min-4:19 h" reads as "1:00–4:19 h", "8:25 h-2 d 11 h" as "8:25–59:00 h" (fmt.scale_of: days
    only where both ends are two days or more, each end written whole: "2 d 3 h–3 d 9 h")."""
    scale = scale or fmt.scale_of([low, high])
    a, b = fmt.duration(low, scale), fmt.duration(high, scale)
    if scale == "d":
        return f"{a}–{b}"
    unit = b.rsplit(" ", 1)[-1]
    return f"{a.removesuffix(' ' + unit)}–{b}"


def _yen_span(low: Decimal, high: Decimal) -> str:
    return f"{fmt.yen(low)}–{fmt.yen(high).removeprefix('¥')}"


def _range_line(est) -> str:
    """The pick's speeds, their kind and band, and its yen and wall at the bands' ends."""
    from gpuplan.planning import evidence

    rec = est.recommended
    span = evidence.plan_range(rec, est.workload.streams is not None)
    if span is None:
        return ""
    kinds = ", ".join(f"{e.gpu} {e.kind.value} x{b.low}-{b.high}"
                      for e in rec.speeds for b in [evidence.band_of(e.kind, e.speed_class)])
    if not span.shown:  # the table's kind says it
        return ""
    return (f"range: speeds {kinds} (docs/model.md): {_yen_span(*span.cost)}, wall {_span(*span.wall_s)}")


SETTLE_OFFERS = 3  # offers one measurement campaign names at most


def _settle_line(est) -> str:
    """Where the pick's yen range (wall range with --objective time) overlaps another shown plan's
    on GPUs whose speeds are not measured, the measurement that would settle which is better:
    `gpuplan bench WORKLOAD --on OFFER,OFFER` over the unmeasured offers of both."""
    from gpuplan.planning import evidence, probing, workloads
    from gpuplan.run import backends

    rec = est.recommended
    streams = est.workload.streams is not None
    if rec is None or streams:
        return ""
    by_time = est.ranked_on == "time"
    sure = probing.SURE
    rivals = probing.rivals(rec, _visible(est, False)[0], by_time)
    if not rivals:
        return ""
    offers: dict[str, str] = {}
    for p in (rec, *rivals):
        unsure = {e.gpu for e in p.speeds if e.kind not in sure}
        for o, _ in p.fleet:
            if (o.gpu in unsure and o.gpu not in offers and o.market != "spot"
                    and backends.for_offer(o).bench_hint(o, "", "") is None):  # `bench --on` can take it
                offers[o.gpu] = f"{o.provider}:{o.name}" + ("" if o.provider == "baremetal" else f"@{o.region}")
    rival = rivals[0]
    span = evidence.plan_range(rival)
    assert span is not None
    what = "wall" if by_time else "yen"
    job = workloads.bench_job(est.workload.name)
    named = list(offers.values())[:SETTLE_OFFERS]
    guessed = sorted({e.gpu for p in (rec, *rivals) for e in p.speeds if e.kind not in sure})
    if job and named:
        how = f"`gpuplan bench {job} --on {','.join(named)}` would settle it"
    elif job:
        how = f"measuring {', '.join(guessed)} would settle it (a task or spot offer: see the speed line)"
    else:  # bench runs its reference jobs only
        how = f"timing one job on {' and '.join(guessed)} (`speed:` in the workload) would settle it"
    more = f" (and {fmt.plural(len(rivals) - 1, 'other plan')})" if len(rivals) > 1 else ""
    return (f"settle: the pick's {what} range overlaps {rival.label} {rival.provider} {rival.region}'s"
            f" ({_yen_span(*span.cost)}, {_span(*span.wall_s)}){more}; {how}")


def _speed_line(est, settled: bool = False) -> str:
    """Where the pick's speed is the generic table's, not measured for this workload: which GPU,
    what such figures have been off by, and the measurement that would settle it (`settled`: the
    settle line names that campaign, over the plans whose ranges overlap the pick's; one command
    is shown, not two)."""
    from gpuplan.planning import workloads
    from gpuplan.run import backends

    w, rec = est.workload, est.recommended
    generic = [o for o, _ in rec.fleet if o.gpu not in w.speed and o.gpu != w.reference_gpu]
    if not generic or w.streams is not None:
        return ""
    o = generic[0]
    job = workloads.bench_job(w.name)
    slug = o.name.lower().replace(".", "-").replace("_", "-")
    probe = "`gpuplan probe BATCH.yaml` times your own job on it and its rivals (a batch file with `probe:`, docs/batch.md)"
    if not job:
        how = f"{probe}, or time one job on one {o.gpu} and give it as `speed:` in the workload"
    elif (hint := backends.for_offer(o).bench_hint(o, job, f"{slug}.yaml")) is not None:  # no machine to provision
        how = f"{probe}; or {hint}" if o.kind == "task" else hint  # a task can be probed; a shared partition not
    elif settled:
        how = "the campaign on the settle line below"
    else:  # issue 19: one campaign measures the pick's GPU and its rivals', then every estimate reads them
        how = (f"`gpuplan bench {job} --on {','.join(_bench_offers(est))}` (one machine per offer, benched and torn down;"
               " it says the yen first)")
    return (f"speed: {o.gpu} from the generic {w.kind} table, not measured for {w.name} (field report A: such a figure"
            f" put a GTX 1080 Ti {_report_a_ratio()} ahead of a K80 half it only matched); measure it: {how}")


def _report_a_ratio() -> str:
    """How far ahead of a K80 half the cnn-train table puts a GTX 1080 Ti (0.533 / 0.13 = 4.1x),
    computed from the table rather than written down."""
    from gpuplan.market import catalog

    gpus = catalog._gpus()
    try:
        return f"{gpus['GTX 1080 Ti'].rel_speed['cnn-train'] / gpus['K80'].rel_speed['cnn-train']:.1f}x"
    except (KeyError, ArithmeticError):
        return "far"


BENCH_RIVALS = 2  # besides the pick's offer
RIVAL_COST = 2  # a rival costs at most this many times the pick: the generic table has been off by 3-4x (report A)


def _bench_offers(est) -> list[str]:
    """The offers whose measurement could change the pick, as `bench --on` takes them: the
    pick's, then up to BENCH_RIVALS rivals (the faster line's plan, the cost / wall-time frontier,
    the next plans in rank order) costing at most RIVAL_COST times the pick or on the user's own
    hosts, each on a GPU whose
    speed is the generic table's and not yet named (one measurement settles a GPU for every offer
    that has it). DOK tasks and spot rows are left out: they are benched otherwise."""
    from gpuplan.planning import ranking
    from gpuplan.run import backends

    w, rec = est.workload, est.recommended
    eligible = [p for p in est.plans if p.feasible and p.recommendable]
    rivals = [ranking.faster_plan(rec, eligible), *est.pareto, *eligible]
    named: dict[str, str] = {}
    close = [p for p in rivals if p is not None and (p.cost <= rec.cost * RIVAL_COST or all(
        o.kind == "owned" for o, _ in p.fleet))]  # your own hosts: measuring them costs their power
    for p in [rec, *close]:
        for o, _ in p.fleet:
            if (o.gpu in named or o.gpu in w.speed or o.gpu == w.reference_gpu or o.market == "spot"
                    or backends.for_offer(o).bench_hint(o, "", "") is not None):
                continue
            if len(named) > BENCH_RIVALS:
                return list(named.values())
            named[o.gpu] = f"{o.provider}:{o.name}" + ("" if o.provider == "baremetal" else f"@{o.region}")
    return list(named.values())


def work_size(work) -> str:
    """"4 jobs", "1 job", "32 streams": what the batch is made of, counted as it is."""
    if work.streams is not None:
        return fmt.plural(work.streams.count, "stream")
    return fmt.plural(len(work.jobs), "job")


def _render_table(est, show_all: bool) -> None:
    """On a terminal, a rich table: a column per fact where it is 120 columns wide or more, else
    the fleet cell carries provider, region and setup on a second line. Piped, plain text: one
    line per row, columns padded with spaces, no colour, no width limit, no trailing spaces."""
    from rich.console import Console

    from gpuplan.market import tax as taxes

    title = (f"gpuplan estimate: {est.workload.name} ({work_size(est.workload)}), catalog {est.snapshot};"
             f" {taxes.said(est.tax, taxes.rate_of_snapshot(est.snapshot))}")
    rows = _rows(est, show_all)
    summary = _summary(est, show_all)
    console = Console(highlight=False)  # on a terminal every line is wrapped to its width
    if not console.is_terminal:
        sys.stdout.write(_plain(title, rows, summary, None if show_all else SHORT_WIDTH))
        return
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    wide = console.width >= 120
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for col in _HEADER if wide else ("", "fleet", "wall", "billed", "yen", _STATUS):
        kw: dict[str, Any] = {"justify": "right", "no_wrap": True} if col in _RIGHT else {}
        if col in ("fleet", "where"):
            kw = {"no_wrap": True} if wide else {"min_width": 22, "overflow": "fold"}
        if col == _STATUS and not wide:
            kw = {"ratio": 1}
        table.add_column(col, **kw)
    for mark, fleet, where, setup, *figures in rows:
        cells = [escape(c) for c in figures]
        if wide:
            table.add_row(mark, escape(fleet), where, setup, *cells)
        else:  # the speed evidence and the ranges under the status
            *figures_, kind, yen_range, wall_range, status = cells
            span = ", ".join(x for x in (yen_range, wall_range) if x)
            table.add_row(mark, f"{escape(fleet)}\n[dim]{where}, {setup}[/dim]", *figures_,
                          status + (f"\n[dim]{kind} speed{': ' + span if span else ''}[/dim]" if kind != "-" else ""))
    console.print(table, soft_wrap=False)
    for kind, text in summary:
        if kind == "head":
            head, sep, rest = text.partition(":")
            console.print(f"[bold]{escape(head)}{sep}[/bold]{escape(rest)}")
        elif kind == "warning":
            console.print(f"  [yellow]warning:[/yellow] {escape(text)}")
        else:
            console.print(("  - " if kind == "assumption" else "  ") + escape(text))


SHORT_WIDTH = 160  # the default view's lines fit a screen; --all prints every line whole


def _plain(title: str, rows: list[tuple[str, ...]], summary: list[tuple[str, str]], width: int | None = None) -> str:
    import textwrap

    from gpuplan.cli import tables

    columns = [tables.Column(h, right=h in _RIGHT) for h in _HEADER]
    out = [tables.plain(columns, [list(r) for r in rows], title).rstrip("\n")]
    for kind, text in summary:
        prefix = {"head": "", "warning": "  warning: ", "assumption": "  - "}.get(kind, "  ")
        line = (prefix + text).rstrip()
        if width is None or len(line) <= width:
            out.append(line)
        else:
            out.extend(textwrap.wrap(line, width, subsequent_indent="    ", break_on_hyphens=False))
    return "\n".join(out) + "\n"


_QUOTA_CODES = (Code.DEFAULT_QUOTA, Code.DEFAULT_FAMILY_QUOTA, Code.QUOTA_UNKNOWN)
_WARNING_WORD = {Code.DEFAULT_QUOTA: "quota", Code.DEFAULT_FAMILY_QUOTA: "quota", Code.QUOTA_UNKNOWN: "quota", Code.SPOT: "spot",
                 Code.GLOBAL_BATCH: "global batch", Code.RETIRES: "end of sale",
                 Code.TASK_LIMIT: "task limit"}


def _warning_kinds(warned_by) -> list[str]:
    """One word per kind of warning for the table's narrow column (the lines follow the table)."""
    kinds = []
    for w in warned_by:
        kind = _WARNING_WORD.get(w.code, "see below")
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
            "feasible", "recommended", "pareto", "reason", "warnings", "codes"]
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(cols)
    pareto = {id(p) for p in est.pareto}
    for p in est.plans:
        writer.writerow([p.provider, p.region, p.label, p.setup, p.per_gpu, p.count,
                         _minutes(p.wall_s) if p.feasible else "", _minutes(p.billed_s) if p.feasible else "",
                         p.cost_jpy if p.feasible else "", str(p.feasible).lower(), str(p is est.recommended).lower(),
                         str(id(p) in pareto).lower(), p.reason, " | ".join(p.warnings),
                         " ".join(o.code.value for o in (*p.excluded_by, *p.warned_by))])


def write_json(est, out, schedules: bool = False) -> None:
    """The estimate as indented JSON, written plan by plan: every plan with its fleet, figures,
    codes and machines grouped by schedule shape; every machine with its jobs for the
    recommendation, and for every plan only with `schedules` (a 20,000-job estimate lists
    millions of machines: gigabytes). Machine lists are one line each, written by the json
    module's C encoder (the indenting one takes minutes over them)."""
    name = est.workload.name
    head = {
        "snapshot": est.snapshot,
        "workload": name,
        "tax": est.tax,  # the basis every yen below is on: included / excluded (market/tax.py)
        "jobs": len(est.workload.jobs),
        "recommended": _SLOT,
        "reason": est.reason,
        "faster": est.faster,
        "settle": _settle_line(est),
        "plans": _SLOT,
        "pareto": _SLOT,
        "recommendation_proven_optimal": est.proven,
        # at most this much better is possible: yen (objective cost) or seconds (objective time)
        "optimality_gap": _yen2(est.gap) if isinstance(est.gap, Decimal) else est.gap,
        "notes": dict(est.extra),
    }
    start, after_rec, after_plans, end = json.dumps(head, indent=2, ensure_ascii=False).split(json.dumps(_SLOT))
    out.write(start)
    streams = est.workload.streams is not None
    memo: dict = {}  # every plan's range worked out once, its machines' stretched seconds shared (evidence.plan_range)
    out.write(_plan_json(est.recommended, name, 2, True, streams, memo) if est.recommended else "null")
    for text, listed in ((after_rec, est.plans), (after_plans, est.pareto)):
        out.write(text + ("[" if listed else "[]"))
        for i, plan in enumerate(listed):
            out.write(("\n    " if i == 0 else ",\n    ") + _plan_json(plan, name, 4, schedules, streams, memo))
        out.write("\n  ]" if listed else "")
    out.write(end + "\n")


_SLOT = "\0"  # where a part written on its own goes (no name or figure holds a NUL: files with one are refused)


def _plan_json(plan, workload_name: str, indent: int, schedule: bool, streams: bool = False,
               memo: dict | None = None) -> str:
    data = plan_dict(plan, workload_name, schedule, streams, memo)
    lists = {}
    for key in ("machine_groups", "machines"):
        if key in data:
            lists[key] = json.dumps(data[key], ensure_ascii=False)
            data[key] = f"{_SLOT}{key}"
    text = json.dumps(data, indent=2, ensure_ascii=False)
    for key, listed in lists.items():
        text = text.replace(json.dumps(f"{_SLOT}{key}"), listed)
    return text.replace("\n", "\n" + " " * indent)


def save_plan(est, path: Path, command: str = "", planned: dict | None = None) -> None:
    """The recommendation as a saved plan (planning/saved_plan.py) for `provision --plan` and `run --plan`;
    `command`: the job its speeds were measured with (a probe's: calibration.measured_job), which a
    later batch's calibration accepts as the workload's own job; `planned`: what it was planned with
    (saved_plan.planned_with: a refusal of its pick then plans again from it)."""
    from gpuplan.planning import saved_plan

    if est.recommended is None:
        raise UsageError(f"nothing to save to {path}: {est.reason}")
    content = saved_plan.data(est, plan_dict(est.recommended, est.workload.name), planned)
    if command:
        content["command"] = command
    saved_plan.dump(content, path)


def _inventory(cat):
    """The catalog with the user's own hosts (the bare-metal inventory, where there is one) as
    owned offers, one per kind of host; {offer name: how many hosts} for the planner (they are
    yours: recommended, and planned several at once); notes on what was left out; and, where
    the inventory could not be read, the note that says why none of its hosts is planned."""
    from dataclasses import replace
    from importlib import import_module

    from gpuplan import config

    # Slurm partitions (providers/slurm.py, docs/slurm.md) join as the inventory's hosts do
    cat, parts, part_notes = import_module("gpuplan.providers.slurm").with_partitions(cat)
    prov = import_module("gpuplan.providers.baremetal").BaremetalProvider(config.provider_config("baremetal"))
    path = prov.inventory_path()
    if not path.is_file():
        if prov.config.get("inventory"):  # named in config.yaml but not there: said, not silently dropped
            unread = f"inventory: its hosts are not planned: {path} (providers.baremetal.inventory in config.yaml) is not a file"
            return cat, parts, [*part_notes, unread], unread
        return cat, parts, part_notes, None
    try:
        pairs, notes = prov.owned_offers(cat)
    except UsageError as exc:  # the estimate still plans the rest; provision says the same in one line
        unread = f"inventory: its hosts are not planned: {exc}"
        return cat, parts, [*part_notes, unread], unread
    taken = {(o.provider, o.name.lower()) for o in cat.offers}
    pairs = [(o, n) for o, n in pairs if (o.provider, o.name.lower()) not in taken]
    cat = replace(cat, offers=cat.offers + tuple(o for o, _ in pairs))
    return cat, {**parts, **{o.name.lower(): n for o, n in pairs}}, part_notes + notes, None


def _japan(cat, region: str | None, as_of: str | None, basis: str, unknown_as: str):
    """The catalog on one tax basis (market/tax.py: "included", what a Japanese company pays,
    or "excluded") and in the user's preferred regions (config.yaml `preferred_regions:`, unless
    --region names one), and the notes that say so; plus one line when an exchange rate the
    offers use is older than 90 days."""
    from datetime import date

    from gpuplan import config
    from gpuplan.market import catalog, regions

    notes: dict[str, str] = {"tax": _tax_note(cat, basis, unknown_as)}
    cat = catalog.with_tax(cat, basis, unknown_as)
    preferred = [] if region else config.preferred_regions()
    if preferred:
        mine = catalog.in_regions(cat, preferred)
        have = {o.region.lower() for o in mine.offers}
        empty = [r for r in preferred if r.lower() not in have]
        if not mine.offers:
            hint = regions.no_offers(preferred, cat.snapshot)
            raise UsageError(f"no offers in preferred_regions {', '.join(preferred)} (config.yaml) in catalog "
                             f"{cat.snapshot}; add a region there or give --region ({hint})")
        notes["regions"] = (f"regions: only preferred_regions {', '.join(preferred)} (config.yaml; --region overrides)"
                            + (f"; no offers in {', '.join(empty)}: {regions.no_offers(empty, cat.snapshot)}"
                               if empty else ""))
        cat = mine
    stale = catalog.stale_fx(cat, None if as_of is None else cat.date)
    if stale:
        old = "; ".join(f"{r.currency} ¥{r.jpy_per_unit} is from {r.date}, "
                        f"{((cat.date if as_of else date.today()) - date.fromisoformat(r.date)).days} days old"
                        for r in stale)
        notes["fx"] = (f"FX: {old} (over {catalog.FX_STALE_DAYS} days): run `gpuplan catalog refresh` for today's "
                       "ECB rate, or set fx in prices.yaml")
    return cat, notes


def _tax_note(cat, basis: str, unknown_as: str) -> str:
    """The note that says the basis every yen is on, at which rate (the one in force on the
    catalog's date), which providers' rows it moved and how rows whose source does not say were
    planned."""
    from gpuplan.market import tax as taxes

    rate = taxes.rate_on(cat.date)
    up = (1 + rate).normalize()
    moved = sorted({o.provider for o in cat.offers if o.tax == ("excluded" if basis == "included" else "included")})
    unknown = sorted({o.provider for o in cat.offers if o.tax == "unknown" and o.price is not None})
    how = [f"{', '.join(moved)} listed {'without' if basis == 'included' else 'with'} it:"
           f" {'x' if basis == 'included' else '/'} {up}" if moved else "no listed price moved"]
    how += [f"{', '.join(unknown)}: some rows' sources do not say, planned as listed {unknown_as} it"
            .replace("listed excluded it", "listed without it").replace("listed included it", "listed with it")] if unknown else []
    other = "--tax excluded shows them without it" if basis == "included" else "--tax included (the default) with it"
    when = f"{taxes.percent(rate)} is the rate in force on {cat.date.isoformat()}, the catalog's date ({taxes.SOURCE})"
    return f"tax: {taxes.said(basis, rate)} ({'; '.join(how)}); {other}; {when}"


def _basis_note(est, other, cat) -> str:
    """Whether the pick depends on how rows whose source does not say their tax basis are read:
    `est` planned them as listed without the tax (tax.ASSUMED_UNKNOWN), `other` with it."""
    rows = sorted({f"{o.provider}:{o.name}" for o in cat.offers if o.tax_assumed and o.price is not None})
    head = (f"tax basis unknown for {fmt.plural(len(rows), 'row')} ({', '.join(rows[:4])}{', ...' if len(rows) > 4 else ''}):"
            " planned as listed without the tax")
    a, b = est.recommended, other.recommended
    if a is None or b is None:
        return head
    if (a.provider, a.region, a.label, a.count, a.setup) == (b.provider, b.region, b.label, b.count, b.setup):
        return f"{head}; if their prices include it, the pick is the same ({fmt.yen(b.cost)})"
    return (f"{head}; if their prices include it, the pick would be {b.label} {b.provider} {b.region} at {fmt.yen(b.cost)}"
            f" instead of {fmt.yen(a.cost)}: the pick depends on it")


def next_step(plan, path: Path) -> str:
    """What to run with a saved plan, for every kind of pick: `launch` builds and runs any of
    them; a pick of machines can also be provisioned alone (a DOK task plan has none)."""
    from gpuplan.run import backends

    launch = f"`gpuplan launch --plan {path} --items FILE -- CMD {{item}}` runs a batch on it"
    if not backends.for_offer(plan.fleet[0][0]).has_cluster:
        return launch + " (each item a 高火力 DOK task: add --image IMAGE)"
    return launch + f", or `gpuplan provision --plan {path}` creates its machines"


def plan_estimate(work, *, as_of: str | None = None, provider: str | None = None, region: str | None = None,
                  deadline: str | None = None, objective: str = "balanced", cost_slack: str = "3%",
                  budget: str | None = None, quota: list[str] | None = None, owned: list[str] | None = None,
                  release: str = "when-done", spot: bool = False, tax: str = "included", providers: tuple[str, ...] = (),
                  offers: tuple[str, ...] = (), strict: bool = False, unknown_as: str = "",
                  max_yen_per_hour: str | Decimal | None = None, without: tuple[str, ...] = (), gpus: str = "",
                  gpus_said: str = "--gpus"):
    """Every plan for `work` on the catalog (as of a month, or today's with the inventory's hosts,
    the quotas `gpuplan check` read, measured setup and calibrations) and the recommendation:
    what `gpuplan estimate` shows and `gpuplan launch` acts on. `providers`: only these (empty: all);
    `offers`: only these offer keys (a probe's plan of one offer). Every yen is on the `tax` basis
    (market/tax.py: "included" by default, what a Japanese company pays; "excluded"). `strict`:
    the deadline is met only where a plan's wall range's slow end meets it. `unknown_as`: how rows
    whose source does not say their tax basis are read ("": tax.ASSUMED_UNKNOWN, then planned on
    the other reading too, and a note says whether the pick depends on it). `max_yen_per_hour`:
    plans whose fleet costs more an hour (on the `tax` basis) are left out (MAX_YEN_PER_HOUR).
    `without`: offers ("provider:name@region", either market) left out: a launch's next plan
    after every zone refused them (run/failover.py). `gpus`: only offers with these GPUs per machine
    (market/gpus.py: "V100:4", "A100", "24GB")."""
    from gpuplan.market import catalog
    from gpuplan.market import tax as taxes
    from gpuplan.planning import optimizer, workloads
    from gpuplan.planning.model import Setting
    from gpuplan.units import parse_duration

    deadline_s = parse_duration(deadline, "--deadline") if deadline else None
    from gpuplan.run.failover import parse_rate_cap

    rate_cap = parse_rate_cap(max_yen_per_hour)
    if strict and deadline_s is None:
        raise UsageError("--strict judges --deadline on each plan's wall range's slow end: give --deadline too")
    quotas = parse_quotas(quota or [])
    cat = catalog.load(as_of)

    note = as_of_note(as_of, cat)
    if note and not unknown_as:
        print(note, file=sys.stderr)
    check_quotas(quotas, cat)
    basis = taxes.parse(tax)
    again = dict(work=work, as_of=as_of, provider=provider, region=region, deadline=deadline, objective=objective,
                 cost_slack=cost_slack, budget=budget, quota=quota, owned=owned, release=release, spot=spot, tax=tax,
                 providers=providers, offers=offers, strict=strict, max_yen_per_hour=max_yen_per_hour, without=without,
                 gpus=gpus, gpus_said=gpus_said)
    first = not unknown_as
    unknown_as = unknown_as or taxes.ASSUMED_UNKNOWN
    cat, japan_notes = _japan(cat, region, as_of, basis, unknown_as)
    owned, owned_count = parse_owned(owned or [])
    hosts: dict[str, int] = {}
    unread = None
    if not as_of:  # the inventory's hosts are today's machines (issue 19)
        cat, hosts, host_notes, unread = _inventory(cat)
        cat = catalog.with_tax(cat, basis, unknown_as)  # the inventory's hosts on the same basis
        japan_notes.update({f"inventory {i + 1}": line for i, line in enumerate(host_notes)})
        owned = owned + [name for name in hosts if name not in {n.lower() for n in owned}]
        owned_count = {**hosts, **owned_count}  # --owned NAME=N says how many of them to plan on
    if providers:  # a batch file's `infra:` (owned hosts are the baremetal provider)
        from dataclasses import replace as with_offers

        allowed = {p.lower() for p in providers}
        cat = with_offers(cat, offers=tuple(o for o in cat.offers if o.provider.lower() in allowed))
        if not cat.offers:  # a run backend's own offers (a Slurm cluster's partitions) come from its file
            from gpuplan.run import backends

            own = [name for name in allowed if name in backends.registered() and name != backends.CLUSTERS]
            if own:
                from importlib import import_module

                try:  # where its file is looked for (providers/slurm.py: config.yaml may name another)
                    where = getattr(import_module(f"gpuplan.providers.{own[0]}"), "clusters_path", lambda: None)()
                except ImportError:
                    where = None
                raise UsageError(f"infra {', '.join(providers)}: no {own[0]} offers: none described in"
                                 f" {where or own[0] + '.yaml'}; docs/{own[0]}.md says how to describe yours")
        if not cat.offers:
            raise UsageError(f"infra {', '.join(providers)}: no offers of {'it' if len(providers) == 1 else 'them'} in"
                             f" catalog {cat.snapshot}; see `gpuplan catalog`")
    if gpus:  # --gpus V100:4 (a batch's gpus:, a SkyPilot task's accelerators): only machines with them
        from dataclasses import replace as with_offers

        from gpuplan.market import gpus as gpu_asks

        ask = gpu_asks.parse(gpus, gpus_said)
        cat = with_offers(cat, offers=gpu_asks.offers_for(ask, cat.offers, gpus_said))
    if without:  # issue 44: offers every zone of their region refused, for a launch's next plan
        from dataclasses import replace as with_offers

        from gpuplan.run.failover import on_demand_key

        # an offer's key leaves out both its rows (both markets refused); its on_demand_key only the on-demand one
        cat = with_offers(cat, offers=tuple(o for o in cat.offers if o.key.split("#")[0] not in without
                                            and (o.market == "spot" or on_demand_key(o) not in without)))
    if offers:  # one offer alone (a probe's plan); the inventory's other hosts are not planned
        from dataclasses import replace as with_offers

        cat = with_offers(cat, offers=tuple(o for o in cat.offers if o.key in offers))
        kept = {n.lower() for o in cat.offers for n in (o.name, *o.aliases)}
        owned = [n for n in owned if n.split("=")[0].lower() in kept]
        owned_count = {n: c for n, c in owned_count.items() if n.lower() in kept}
    work = workloads.with_catalog_gpus(work, cat)
    state = _user_state()
    if state is not None and not as_of:  # today's quotas, as `gpuplan check` read them (not for a past month)
        from dataclasses import replace as with_fields

        quotas = with_fields(quotas, read={(q["provider"], q["region"], q["name"]): (int(q["limit"]), q["read_at"])
                                           for q in state.quotas()})
    setting = Setting(
        catalog=cat, as_of_month=(as_of or "").strip(), quotas=quotas, deadline_s=deadline_s, strict_deadline=strict,
        release=release, measured_setup=_measured_setup(state, cat), measured_engine=_measured_engine(state, cat),
        owned=tuple(owned), owned_count=owned_count, spot=spot, max_yen_per_hour=rate_cap,
    )
    if owned:
        known = {n.lower() for o in cat.offers if o.kind in ("owned", "monthly") for n in (o.name, *o.aliases)}
        for name in owned:
            if name.lower() not in known:
                raise UsageError(f"--owned {name!r} is not an owned offer (nor a monthly-rented one) in catalog"
                                 f" {cat.snapshot}; those are: {', '.join(sorted(known)) or 'none'}")
    work, measured = _measured(work, cat)
    work, calibrations = _calibrate(state, work, cat)
    est = optimizer.estimate(work, setting, provider=provider, region=region, objective=objective,
                             cost_slack=parse_slack(cost_slack), budget=parse_budget(budget))
    if calibrations:
        from dataclasses import replace

        est = replace(est, extra={**est.extra, **{f"calibration {i + 1}": f"calibration: {line}"
                                                  for i, line in enumerate(calibrations)}})
    if measured:
        from dataclasses import replace

        est = replace(est, extra={**est.extra, **{f"measured {i + 1}": line for i, line in enumerate(measured)}})
    from dataclasses import replace

    if first and any(o.tax_assumed and o.price is not None for o in cat.offers):
        other_reading = "included" if unknown_as == "excluded" else "excluded"
        japan_notes["tax basis"] = _basis_note(est, plan_estimate(**again, unknown_as=other_reading), cat)
    from gpuplan.fleet import refusals

    refused = {f"refused {i + 1}": r.line() for i, r in enumerate(refusals.recent())} if not as_of else {}
    if est.recommended is None and unread:  # the hosts a user means may be the ones left out: said with the reason
        est = replace(est, reason=f"{est.reason} ({unread})")
    return replace(est, extra={**est.extra, **japan_notes, **refused}, tax=basis)


def tax_basis(value: str | None) -> str:
    """--tax's value checked as it is parsed (the bare flag of older gpuplan took the next option
    as its value: this says so before the rest is read)."""
    from gpuplan.market import tax as taxes

    return taxes.parse(value)


def register(app: typer.Typer) -> None:
    @app.command()
    def estimate(
        videos: Annotated[Optional[int], typer.Option(metavar="N", help="Plan N colorize-hd jobs, one model per video (field report A).")] = None,
        workload: Annotated[Optional[str], typer.Option(metavar="NAME|FILE", help="Built-in workload name or a YAML file (docs/workloads.md).")] = None,
        as_of: Annotated[Optional[str], typer.Option("--as-of", help="Plan with the catalog as of YYYY-MM.", metavar="YYYY-MM")] = None,
        provider: Annotated[Optional[str], typer.Option(metavar="NAME", help="Only this provider's offers: {providers}.")] = None,
        region: Annotated[Optional[str], typer.Option(metavar="NAME", help="Only this region's offers.")] = None,
        deadline: Annotated[Optional[str], typer.Option(metavar="DURATION", help="The latest acceptable wall time, such as 90m, 3h, 1h30m or 2d.")] = None,
        strict: Annotated[bool, typer.Option("--strict", help="With --deadline: a plan meets it only if its wall range's slow end does (every GPU at the low end of its speed's band), not its estimate alone.")] = False,
        objective: Annotated[str, typer.Option(metavar="balanced|cost|time", help="How to pick: balanced (the default: the fastest plan within --cost-slack of the cheapest), cost (strictly the cheapest) or time (the fastest).")] = "balanced",
        cost_slack: Annotated[str, typer.Option("--cost-slack", metavar="PERCENT", help="With the balanced pick: how much dearer than the cheapest a faster plan may be, such as 3% (the default) or 0.")] = "3%",
        budget: Annotated[Optional[str], typer.Option(metavar="YEN", help="Pick the fastest plan costing at most this many yen, such as 5000 or ¥5,000.")] = None,
        quota: Annotated[Optional[list[str]], typer.Option(metavar="PROVIDER=VCPUS", help="A vCPU quota to plan within: azure=20 for the whole provider, azure:NC=24 for one family; repeat for several.")] = None,
        out_format: Annotated[str, shapes.format_option(csv=True)] = "table",
        save: Annotated[Optional[Path], typer.Option(metavar="FILE", help="Write the recommended plan (for `gpuplan provision --plan`).")] = None,
        profile: Annotated[Optional[Path], typer.Option(metavar="FILE", help="A measured profile (YAML/JSON) replacing the workload's figures.")] = None,
        owned: Annotated[Optional[list[str]], typer.Option(metavar="OFFER[=N]", help="Hardware you already own or rent by the month (offer name; =N: you have N of them, planned at once); it may then be recommended.")] = None,
        show_all: Annotated[bool, typer.Option("--all", help="List every candidate plan.")] = False,
        release: Annotated[str, typer.Option(metavar="when-done|at-end", help="Release each machine when its own jobs end (when-done), or every machine when the last job ends (at-end).")] = "when-done",
        plot: Annotated[Optional[Path], typer.Option(metavar="FILE.svg|png", help="Draw cost against wall time for every plan and the pick's timeline into an .svg or .png (needs gpuplan[plot]).")] = None,
        spot: Annotated[bool, typer.Option("--spot", help="Also plan on spot capacity at the catalog's spot prices (interruptible: each such plan says how); spot plans may then be recommended.")] = False,
        schedules: Annotated[bool, typer.Option("--schedules", help="With --format json, list every plan's machines with their jobs (by default only the recommendation's).")] = False,
        max_yen_per_hour: Annotated[Optional[str], typer.Option("--max-yen-per-hour", metavar="YEN", help="Leave out plans whose fleet costs more than this many yen an hour (on the --tax basis), such as 1500.")] = None,
        gpus: Annotated[Optional[str], typer.Option("--gpus", metavar="MODEL[:N]", help="Only machines with these GPUs: V100:4 (four V100s in each machine), A100 (any count), 24GB (at least 24 GB each), A100:40GB:2.")] = None,
        tax: Annotated[str, typer.Option("--tax", metavar="included|excluded", callback=tax_basis, help="The one tax basis every yen is compared and shown on: included (the default: Japan's 10 % consumption tax on every provider, what a Japanese company pays; prices listed without it x 1.1) or excluded (prices listed with it / 1.1).")] = "included",
    ) -> None:
        """Plan a batch of GPU work: every fleet, its wall time and yen, and the recommendation."""
        from gpuplan import cli
        from gpuplan.collector import collector_paused
        from gpuplan.planning import workloads

        # Python's cyclic collector paused for the whole command, the table written included: resumed
        # after planning, its first passes walked every value the estimate keeps (0.2 s of 20,000 jobs,
        # issue 47). The gpuplan process itself ends with the command: there it is not resumed; an
        # in-process caller gets it back as it was.
        if cli.process_ends_with_command():
            import gc

            gc.disable()
        with collector_paused():
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
            settings: dict[str, Any] = dict(provider=provider, region=region, deadline=deadline, objective=objective,
                            cost_slack=cost_slack, budget=budget, quota=quota, owned=owned, release=release, spot=spot,
                            tax=tax, strict=strict, max_yen_per_hour=max_yen_per_hour, gpus=gpus or "")
            est = plan_estimate(work, as_of=as_of, **settings)
            if save is not None and est.recommended is not None:
                from gpuplan.planning import saved_plan

                # a refusal of the pick (`provision --plan`) plans again from these, on today's catalog
                recipe = {"videos": videos, "name": workload, "profile": profile}
                save_plan(est, save, planned=saved_plan.planned_with(work, recipe, settings))
                print(f"plan saved to {save}: {next_step(est.recommended, save)}", file=sys.stderr)
            if plot is not None:
                from gpuplan.planning import plot as plotting
                from gpuplan.units import parse_duration

                plotting.write(est, plot, parse_duration(deadline, "--deadline") if deadline else None, parse_budget(budget))
                print(f"plot written to {plot}", file=sys.stderr)
            if out_format == "json":
                write_json(est, sys.stdout, schedules)
            elif out_format == "csv":
                _render_csv(est)
            else:
                _render_table(est, show_all)
            if est.recommended is None:  # the plans are shown, then one line and exit 2: nothing to act on
                sys.stdout.flush()
                raise UsageError(est.reason + (f"; nothing saved to {save}" if save is not None else ""))


def as_of_note(as_of: str | None, cat) -> str | None:
    """One line when --as-of asks for a month past the newest snapshot: it silently meant that
    snapshot's month before, as if prices of the future were known."""
    if not as_of:
        return None
    text = as_of.strip()
    if text[:7] <= cat.snapshot[:7]:
        return None
    from gpuplan.market import catalog

    newest = max(catalog.snapshots(), default=cat.snapshot)
    if newest[:7] > cat.snapshot[:7]:  # a later snapshot exists: this one is the last before the month asked
        return (f"note: --as-of {text} has no snapshot of its own: the last one before it, {cat.snapshot}, is used"
                f" (the newest is {newest})")
    return (f"note: --as-of {text} is past the newest catalog snapshot, {cat.snapshot}: its prices are used "
            "(`gpuplan catalog refresh` fetches today's)")


def plan_batch(batch, work, without: tuple[str, ...] = ()):
    """The estimate for a batch: its workload on its infra, region, deadline, objective, spot and
    tax basis, as `estimate` plans it (`without`: offers left out, see plan_estimate)."""
    return plan_estimate(work, **batch_settings(batch), without=without)


def batch_settings(batch) -> dict:
    """plan_estimate's settings for a batch (plan_batch's; a launch's saved plan keeps them)."""
    from gpuplan.run import launcher

    return dict(region=batch.region or None, deadline=batch.deadline or None, objective=batch.objective,
                spot=batch.spot, tax=batch.tax, providers=launcher.infra_providers(batch.infra),
                max_yen_per_hour=batch.max_yen_per_hour, gpus=batch.gpus,
                gpus_said="gpus" if batch.source is not None else "--gpus")


def batch_planned_with(batch, work) -> dict:
    """What a launch's plan is planned with (saved_plan.planned_with): the batch's workload,
    settings, max_yen and failover."""
    from gpuplan.planning import saved_plan

    return saved_plan.planned_with(work, {"name": batch.workload, "profile": batch.profile}, batch_settings(batch),
                                   batch.max_yen, batch.failover)


def show_plan(est, title: str = ""):
    """The estimate's short table (after `title`); one line and exit 2 where nothing can be picked."""
    if title:  # on stdout, as the table (cli.jobs' console is not imported here: provision plans again too)
        print(title, flush=True)
    _render_table(est, False)
    if est.recommended is None:
        raise UsageError(est.reason)
    return est
