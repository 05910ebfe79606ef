"""The JSON every `--format json` prints: one shape per noun (a cluster, a node, an order, a job,
an image, a resource, a DOK task, a PHY server, a profile), each built here once and reused by
every command that shows that noun (docs/json.md describes them all).

Rules: JSON goes to stdout only (progress and questions stay on stderr); money is integer yen
(rounded once, half up) or a string Decimal, never a float; times are ISO 8601 in UTC; durations
are whole seconds unless the field name says otherwise.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import typer

from gpuplan.errors import UsageError

FORMAT_HELP = "Print a table (for people) or JSON (for programs); -o json and --json are --format json."
FORMAT_CSV_HELP = "Print a table (for people), JSON or CSV (for programs); -o json and --json are --format json."


OWNED = frozenset({"baremetal"})  # providers whose machines are the user's own: charged their power, never rented


def owned(provider: str) -> bool:
    """Owned hosts (the inventory): no hourly rental bill, only their power; released by teardown."""
    return provider in OWNED


def format_option(csv: bool = False) -> Any:
    """The one --format option: `table|json` (or `table|json|csv` where CSV exists)."""
    return typer.Option("--format", help=FORMAT_CSV_HELP if csv else FORMAT_HELP,
                        metavar="table|json|csv" if csv else "table|json")


def json_alias(root: Any, args: list[str]) -> list[str]:
    """The command line with `--json` read as `--format json` and `-o FORMAT` as `--format FORMAT`
    where the command it runs has the one --format option (format_option), as SkyPilot's and
    dstack's users type them. Words after `--` (a batch's command) are left as they are. (`-o` is
    not declared as the option's short name: its column narrowed every help page's sentences.)"""
    if "--json" not in args and "-o" not in args:
        return args
    command, i = root, 0
    while hasattr(command, "commands") and i < len(args):  # the group's subcommand, past its own options
        word = args[i]
        if word == "--":
            return args
        if not word.startswith("-"):
            nxt = command.commands.get(word)
            if nxt is None:
                return args
            command = nxt
        i += 1
    if not any("--format" in getattr(p, "opts", ()) for p in getattr(command, "params", ())):
        return args
    end = args.index("--", i) if "--" in args[i:] else len(args)
    words = ["--format=json" if w == "--json" else "--format" if w == "-o" else w for w in args[i:end]]
    return [*args[:i], *words, *args[end:]]


def check_format(value: str, csv: bool = False) -> bool:
    """A --format value checked (bad: one line, exit 2); True for json."""
    choices = ("table", "json", "csv") if csv else ("table", "json")
    if value not in choices:
        raise UsageError(f"bad --format {value!r}: use {', '.join(choices[:-1])} or {choices[-1]}")
    return value == "json"


def emit(data: Any) -> None:
    """The command's JSON, on stdout, one document: indented for a terminal, one line for a
    program (a pipe or a file). Python's indenting encoder is pure Python; without an indent the
    C encoder writes it, 0.15 s less for `status --format json` on 1,000 clusters (issue 47)."""
    indent = 2 if sys.stdout.isatty() else None
    sys.stdout.write(json.dumps(data, indent=indent, ensure_ascii=False) + "\n")
    sys.stdout.flush()


# --- the pieces ---------------------------------------------------------------------------------


def iso(t: datetime | None) -> str | None:
    """A time in ISO 8601, UTC (milliseconds where the time has them)."""
    if t is None:
        return None
    t = t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)
    return t.isoformat(timespec="milliseconds" if t.microsecond else "seconds")


def whole_yen(amount: Decimal | int | None) -> int | None:
    """Integer yen, rounded once, half up."""
    if amount is None:
        return None
    return int(Decimal(amount).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def exact(amount: Decimal | int | None, places: str | None = None) -> str | None:
    """A yen amount as a string Decimal (to `places`, e.g. "0.01", where given)."""
    if amount is None:
        return None
    d = Decimal(amount)
    return str(d.quantize(Decimal(places), rounding=ROUND_HALF_UP) if places else d)


# --- nouns --------------------------------------------------------------------------------------


def node(n) -> dict:
    """A machine of a cluster (state.NodeRow)."""
    return {"name": n.name, "status": n.status, "public_ip": n.public_ip, "private_ip": n.private_ip,
            "ssh_port": n.ssh_port, "gpus": n.gpus, "id": n.provider_id, "created_at": iso(n.created_at)}


def cluster(s) -> dict:
    """A cluster as `status` shows it (lifecycle.ClusterStatus): `status` and `provision` print it."""
    c = s.cluster
    return {
        "name": c.name, "provider": c.provider, "region": c.region, "instance_type": c.size, "count": c.count,
        "status": c.status, "owned": owned(c.provider), "image": c.image, "created_at": iso(c.created_at),
        "uptime_s": s.uptime_s, "machine_seconds": s.machine_seconds, "yen_so_far": whole_yen(s.yen_so_far),
        "price_jpy_per_hour": exact(c.price_jpy_per_hour),
        "ttl_left_s": s.ttl_left_s, "ttl_expires_at": iso(c.ttl_expires_at),
        "nodes": [node(n) for n in s.nodes],
        "user": c.user, "project": c.project,  # whose, for which project ("unknown": made before gpuplan kept it)
    }


def order(o, dry_run: bool, lines: list[str]) -> dict:
    """What a provision creates (preflight's order): sizes, yen an hour, lifetime; `says` in words."""
    offer, req = o.offer, o.request

    from gpuplan.market import tax

    def part(of, count: int) -> dict:
        per = of.price_jpy_per_hour
        on_basis = tax.on_basis(per, of.tax, tax.DEFAULT) if per is not None else None
        return {"provider": of.provider, "instance_type": of.name, "count": count, "gpu": of.gpu,
                "gpus_per_machine": of.gpu_count, "vcpus_per_machine": of.vcpus or None,
                "price_jpy_per_hour": exact(per), "fleet_jpy_per_hour": exact(per * count if per is not None else None),
                "listed_tax": of.tax, "price_jpy_per_hour_on_basis": exact(on_basis)}

    parts = [part(offer, req.count)] + [part(of, p.count) for of, p in zip(getattr(o, "more", ()), req.more)]
    prices = [p["fleet_jpy_per_hour"] for p in parts]
    return {
        "dry_run": dry_run, "name": req.name, "provider": offer.provider, "region": req.region, "tax_basis": tax.DEFAULT,
        "owned": owned(offer.provider), "machines": parts,
        "cluster_jpy_per_hour": None if None in prices else str(sum(Decimal(x) for x in prices if x is not None)),
        "ttl_s": req.ttl_s or None, "idle_s": req.idle_s or None, "spot": bool(req.spot), "ssh_cidr": req.ssh_cidr,
        "image": req.image, "catalog_as_of": offer.as_of or None, "source": offer.source or None,
        "says": [line.strip() for line in lines],
    }


def job(state, row, counts: dict[str, int]) -> dict:
    """A batch (state.JobRow) with its items' counts: `jobs` lists them, `run` prints its own."""
    from dataclasses import asdict

    from gpuplan.run import backends
    from gpuplan.run import items as run_items
    from gpuplan.store import costs

    interrupted = costs.interruptions(state, row)
    return {"id": row.id, "cluster": row.cluster, "state": row.state, "total": row.total,
            "succeeded": counts.get("ok", 0), "failed": counts.get("failed", 0),
            "bad_input": counts.get("bad input", 0), "timed_out": counts.get("timed out", 0),
            "running": counts.get("running", 0), "queued": counts.get("queued", 0),
            "cancelled": counts.get("cancelled", 0), "resumes": row.resumes,
            "submitted_at": iso(row.submitted_at), "started_at": iso(row.started_at), "ended_at": iso(row.ended_at),
            "wall_s": round(run_items.job_seconds(row), 3), "yen": exact(backends.yen(state, row), "0.01"),
            "command": list(row.command), "quarantined": [asdict(q) for q in state.job_quarantines(row.id)],
            "interruptions": None if interrupted is None else interruptions(interrupted),
            "user": row.user, "project": row.project}


def interruptions(cost) -> dict:
    """What the cloud taking nodes back cost a batch (costs.Interruptions)."""
    return {"interrupted_attempts": cost.attempts, "nodes_taken_back": cost.nodes,
            "redone_s": round(float(cost.redone_s), 3), "redone_jpy": exact(cost.yen, "0.01")}


def outcome(summary, cmp, predicted: dict | None, how: str) -> dict:
    """A followed run's end (run_items.RunSummary and its comparison with the plan)."""
    return {
        "measured": {"wall_s": round(cmp.measured_wall_s, 3), "yen": exact(cmp.measured_yen, "0.01"), "how": how},
        "plan": None if predicted is None else {
            "wall_s": None if cmp.predicted_wall_s is None else int(round(cmp.predicted_wall_s)), "yen": exact(cmp.predicted_yen, "0.01"), "basis": predicted.get("basis"),
            "wall_error_pct": exact(cmp.wall_error_pct, "0.1"), "yen_error_pct": exact(cmp.yen_error_pct, "0.1")},
        "not_ok": [{"item": j.item or j.job, "status": j.status, "node": j.node, "attempts": j.attempts,
                    "seconds": round(j.seconds, 3)} for j in summary.failed],
        "set_aside": [{"node": q.node, "reason": q.reason} for q in summary.quarantined],
    }


def image(r) -> dict:
    """A captured machine image (state.ImageRow)."""
    return {"name": r.name, "provider": r.provider, "region": r.region, "built_on": r.size, "status": r.status,
            "id": r.provider_id, "playbooks": [p for p in r.playbooks.split(",") if p] if r.playbooks else [],
            "created_at": iso(r.created_at)}


def resource(r, deleted: bool) -> dict:
    """Something a provider made (provider.Resource), deleted or (dry run) to be deleted."""
    from gpuplan.fleet.tags import TAG_CLUSTER

    return {"kind": r.kind, "id": r.id, "region": r.region, "cluster": r.tags.get(TAG_CLUSTER) or None,
            "name": r.name or None, "deleted": deleted}


def dok_task(t) -> dict:
    """A 高火力 DOK task as the API reports it (sakura_dok.DokTask)."""
    return {"id": t.id, "name": t.name, "plan": t.plan, "status": t.status, "finished": t.finished,
            "artifact": bool(t.artifact_id), "artifact_id": t.artifact_id, "execution_s": t.execution_s,
            "exit_code": t.exit_code, "tags": list(t.tags)}


def phy_server(s) -> dict:
    """A 高火力 PHY server the account rents (sakura_phy.PhyServer)."""
    return {"id": s.id, "nickname": s.nickname, "plan": s.plan, "address": s.address,
            "instance_type": s.catalog_name or None, "gpu": s.gpu_model or None, "gpu_count": s.gpu_count,
            "state": s.locked or "ready"}


def profile(p, path) -> dict:
    """A measured profile (planning.profiles.Profile) and the file it was written to."""
    return {"path": str(path), **p.to_dict()}


def campaign_target(t, workload: str) -> dict:
    """One offer of `bench --on`: the machine made for it, how long, what it costs (an estimate)."""
    o = t.offer
    return {"offer": f"{o.provider}:{o.name}", "region": o.region, "gpu": o.gpu, "gpu_count": o.gpu_count,
            "cluster": t.cluster, "owned": bool(t.owned), "setup_s": t.setup_s, "runs": t.runs, "seconds": t.seconds,
            "yen": exact(t.yen, "0.01"), "price": t.price_line, "workload": workload}
