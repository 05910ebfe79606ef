"""`gpuplan run dok:PLAN`: a batch of items as Sakura 高火力 DOK container tasks, one task per
item, from a container image the user names.

DOK runs one task at a time per project and queues the rest, so the batch is the serial queue the
planner plans for a DOK offer: every task is submitted at once (DOK keeps them waiting) and this
client goes away or follows. Nothing runs on the user's side: whenever someone looks (`run`
following, `jobs`, `logs`, `cancel`) the tasks are read back from the API and written into the
state as the engine's batches are (jobs, job_items), under the pseudo-cluster "dok", so `jobs dok`,
`logs dok JOB ITEM`, `cancel dok JOB` and `run dok --resume JOB` work as for a cluster.

Each task carries the tags gpuplan-run=<job>, gpuplan-item=<index in the items file> and
gpuplan-installation=<this installation> (two homes sharing a project both have a "dok-1"), and is
journaled before the API is asked. Its artifact (SAKURA_ARTIFACT_DIR) comes back with
`gpuplan dok artifacts --run JOB`.

Measured yen: each task billed on its own for the seconds the API reports it ran
(`execution_seconds`), with the plan's per-task minimum, through the one billing rule
(billing.charge_tasks); the planner prices a DOK queue the same way. An item's started_at is its
end minus those seconds, so the state's item times are the billed ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from gpuplan.errors import NotFound, UsageError
from gpuplan.planning import fmt

if TYPE_CHECKING:
    from gpuplan.operating.state import State
    from gpuplan.planning.billing import Terms

CLUSTER = "dok"  # the pseudo-cluster DOK batches are recorded under (no cluster may take the name)
TAG_RUN, TAG_ITEM, TAG_INSTALLATION = "gpuplan-run", "gpuplan-item", "gpuplan-installation"
OVER = ("succeeded", "failed", "cancelled", "lost")


def is_dok(cluster: str) -> bool:
    return cluster == CLUSTER or cluster.startswith(CLUSTER + ":")


def plan_of(target: str, predicted: Mapping | None) -> str:
    """The DOK plan a run names (`dok:h100-80gb`), else the one its saved plan picked."""
    from gpuplan.providers.sakura_dok import PLANS

    plan = target.partition(":")[2]
    if not plan and predicted and predicted.get("provider") == "sakura":
        plan = str(predicted.get("instance_type") or "").removeprefix("dok-")
    if not plan:
        raise UsageError(f"name the DOK plan: gpuplan run dok:PLAN (one of {', '.join(PLANS)}), or --plan a saved DOK plan")
    if plan not in PLANS:
        raise UsageError(f"unknown DOK plan {plan!r}: one of {', '.join(PLANS)}")
    if plan == "h100-8gpu-80gb":
        raise UsageError("gpuplan run submits one task per item; the 8-GPU plan runs one task that holds all 8 GPUs:"
                         " submit it with `gpuplan dok submit --plan h100-8gpu-80gb` and a command that runs 8 items at once")
    return plan


def terms_of(plan: str) -> Terms:
    """The billing terms of a DOK plan, from the catalog row "sakura dok-<plan>" (with the user's prices.yaml)."""
    from gpuplan.planning import billing, catalog

    offer = next((o for o in catalog.load().find(provider="sakura") if o.name == f"dok-{plan}"), None)
    if offer is None or offer.price_jpy_per_hour is None:
        raise UsageError(f"the catalog has no price for sakura dok-{plan}; `gpuplan catalog refresh` reads DOK's unit prices")
    return billing.terms_for(offer)


def _terms_json(t: Terms) -> dict:
    return {"price_jpy": str(t.price_jpy), "period_s": t.period_s, "granularity_s": t.granularity_s,
            "minimum_s": t.minimum_s}


def job_terms(row: Mapping) -> Terms:
    from gpuplan.planning.billing import Terms

    t = (row["options"] or {})["terms"]
    return Terms(Decimal(t["price_jpy"]), int(t["period_s"]), int(t["granularity_s"]), int(t["minimum_s"]))


def submit(state: State, client, plan: str, image: str, items: Sequence[tuple[int, str]], command: Sequence[str], *,
           environment: Mapping[str, str] | None = None, registry: str | None = None, time_limit_s: int | None = None,
           options: Mapping | None = None, resumes: str | None = None,
           progress: Callable[[str], None] = lambda _m: None) -> str:
    """Record the batch, then queue one task per item; returns the job id. A submission that
    fails part way leaves the items not submitted "failed" (`--resume` submits them later) and
    raises."""
    from gpuplan.operating import engine

    engine.check_items_command(command)
    terms = terms_of(plan)
    client.check_credentials()
    job = f"{CLUSTER}-{state.next_job_number(CLUSTER)}"
    opts = {"dok_plan": plan, "image": image, "environment": dict(environment or {}), "registry": registry,
            "time_limit_s": time_limit_s, "terms": _terms_json(terms), **(options or {})}
    state.add_job(job, CLUSTER, list(command), opts, items, 1, resumes)
    installation = state.installation_id()
    progress(f"queueing {fmt.plural(len(items), 'DOK task')} on {plan}")
    done = 0
    try:
        for idx, item in items:
            name = f"{job}-{idx}"
            with state.journaled("dok-task", name, CLUSTER, f"{plan} {image}"):
                client.submit(name, image, plan, [w.replace("{item}", item) for w in command], environment=environment,
                              tags=[f"{TAG_RUN}={job}", f"{TAG_ITEM}={idx}", f"{TAG_INSTALLATION}={installation}"],
                              time_limit_s=time_limit_s, registry=registry)
            done += 1
    except BaseException:
        now = _iso()
        left = [{"t": "end", "i": idx, "status": "failed", "attempt": 0, "node": CLUSTER, "slot": "not submitted",
                 "start": now, "end": now, "exit": None, "timed_out": False, "log": None} for idx, _ in items[done:]]
        state.record_job_events(job, left, 0)
        if not done:
            state.set_job_state(job, "failed")
        raise
    return job


def _iso(t=None) -> str:
    from gpuplan.operating.state import now

    return (t or now()).isoformat(timespec="seconds")  # as the state writes its times


def tasks_of(state: State, client, job: str) -> dict[int, Any]:
    """The job's tasks (providers/sakura_dok.py DokTask, this installation's), by item index."""
    installation = f"{TAG_INSTALLATION}={state.installation_id()}"
    out: dict[int, Any] = {}
    for t in client.tasks(f"{TAG_RUN}={job}"):
        if installation not in t.tags:
            continue
        idx = next((x.partition("=")[2] for x in t.tags if x.startswith(TAG_ITEM + "=")), "")
        if idx.isdigit():
            out[int(idx)] = t
    return out


def refresh(state: State, job: str, client=None) -> dict:
    """Read the job's tasks from the API and write what changed into the state."""
    from gpuplan.operating.state import now, parse_time

    row = state.job(job)
    if row is None:
        raise NotFound(f"no job {job!r}; `gpuplan jobs dok` lists them")
    if row["state"] in OVER:
        return row
    client = client or default_client()
    tasks = tasks_of(state, client, job)
    at = now()
    events: list[dict] = []
    first = at  # the batch began when its first task did (as far as the API says)
    for it in state.job_items(job):
        t = tasks.get(it["idx"])
        if t is None or it["status"] in ("ok", "failed", "bad input"):
            continue
        if t.status == "running" and it["status"] != "running":
            events.append({"t": "start", "i": it["idx"], "attempt": 1, "node": CLUSTER, "at": _iso(at)})
        elif t.finished:
            seen = parse_time(it["started_at"])
            started = at - timedelta(seconds=t.execution_s) if t.execution_s is not None else (seen or at)
            first = min(first, started)
            events.append({"t": "end", "i": it["idx"], "status": "ok" if t.status == "done" else "failed", "attempt": 1,
                           "node": CLUSTER, "slot": f"task {t.id}", "start": _iso(started), "end": _iso(at),
                           "exit": t.exit_code, "timed_out": t.status == "aborted", "log": f"dok task {t.id} ({t.status})"})
    if row["state"] == "submitted" and any(t.status != "waiting" for t in tasks.values()):
        events.insert(0, {"t": "begin", "at": _iso(first)})
    if events:
        state.record_job_events(job, events, row["events_read"])
    counts = state.job_counts(job)
    if not counts.get("queued") and not counts.get("running") and _row(state, job)["state"] not in OVER:
        ok = counts.get("ok", 0) == row["total"]
        state.record_job_events(job, [{"t": "done", "state": "succeeded" if ok else "failed", "at": _iso(at)}],
                                row["events_read"])
    return _row(state, job)


def _row(state: State, job: str) -> dict:
    row = state.job(job)
    if row is None:
        raise NotFound(f"no job {job!r}; `gpuplan jobs dok` lists them")
    return row


def default_client():
    from gpuplan import config
    from gpuplan.providers.sakura_dok import DokClient

    return DokClient(config.provider_config("sakura"))


def task_seconds(state: State, job: str, at=None) -> list[int]:
    """Each started item's seconds: its billed run time when it ended, the time so far while it runs."""
    from decimal import ROUND_CEILING

    from gpuplan.operating.state import now, parse_time

    out = []
    for it in state.job_items(job):
        start = parse_time(it["started_at"])
        if start is None or it["slot"] == "not submitted":
            continue
        end = parse_time(it["ended_at"]) or at or now()
        out.append(int(Decimal(str(max(0.0, (end - start).total_seconds()))).to_integral_value(rounding=ROUND_CEILING)))
    return out


def job_yen(state: State, row: Mapping, at=None) -> Decimal:
    from gpuplan.planning import billing

    return billing.charge_tasks(task_seconds(state, row["id"], at), job_terms(row))


def cancel(state: State, job: str, client=None) -> int:
    """Cancel the job's waiting and running tasks; returns how many were stopped."""
    client = client or default_client()
    refresh(state, job, client)
    stopped = 0
    for t in tasks_of(state, client, job).values():
        if not t.finished:
            client.cancel(t.id)
            stopped += 1
    refresh(state, job, client)
    state.set_job_state(job, "cancelled")
    return stopped


def item_task(state: State, job: str, item: str, client=None):
    """The task that runs one item of the job (by its text or its line number)."""
    it = state.job_item(job, item)
    if it is None:
        raise UsageError(f"job {job} has no item {item!r}; give its text or its line number")
    task = tasks_of(state, client or default_client(), job).get(it["idx"])
    if task is None:
        raise UsageError(f"item {item!r} of job {job} has no DOK task (it was not submitted)")
    return task
