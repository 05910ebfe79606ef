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

The 8-GPU plan (h100-8gpu-80gb) is planned as ONE task that holds all 8 GPUs and runs the items
in its 8 slots, billed once: so the batch is one task (tag gpuplan-item=all) whose command is the
runner of run/dok/dok_batch.py. While it waits its items are queued, while it runs they are
running (slot "task <id>"); once it has ended its artifact is downloaded (kept in the state
folder, dok/<job>.tar.gz) and each item's status file read: ok or failed with its exit code, GPU
(slot "task <id> gpu <g>") and times; an item without one failed, the log field saying why. The
job's own start and end are the task's (end minus its execution_seconds): its one billed figure.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from gpuplan.errors import UsageError
from gpuplan.planning import fmt
from gpuplan.run import items as run_items
from gpuplan.run import task_batches
from gpuplan.run.task_batches import iso
from gpuplan.units import DOK_TASK_LIMIT_S

if TYPE_CHECKING:
    from gpuplan.market.billing import Terms
    from gpuplan.store.state import JobRow, State

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
    return plan


def is_batch(row: JobRow) -> bool:
    """A job run as one 8-GPU task (every item in it) rather than one task per item."""
    from gpuplan.run.dok import dok_batch

    return row.options.get("dok_plan") == dok_batch.PLAN


def terms_of(plan: str) -> Terms:
    """The billing terms of a DOK plan, from the catalog row "sakura dok-<plan>" (with the user's prices.yaml)."""
    from gpuplan.market import billing, catalog

    offer = next((o for o in catalog.load().find(provider="sakura") if o.name == f"dok-{plan}"), None)
    if offer is None or offer.price_jpy_per_hour is None:
        raise UsageError(f"the catalog has no price for sakura dok-{plan}; `gpuplan catalog refresh` reads DOK's unit prices")
    return billing.terms_for(offer)


@dataclass(frozen=True)
class Spend:
    """What a DOK submission can be billed, known before anything is sent: `tasks` tasks on
    `plan` (for `items` items), each billed by `terms` for the seconds it runs and stopped by DOK
    at `time_limit_s`. The CLI shows it and asks before the tasks are sent."""

    plan: str
    tasks: int
    items: int
    terms: Terms
    time_limit_s: int

    def least_jpy(self) -> Decimal:
        """Every task billed its minimum (a task that runs at all)."""
        from gpuplan.market import billing

        return billing.charge_tasks([self.terms.minimum_s] * self.tasks, self.terms)

    def most_jpy_a_task(self) -> Decimal:
        """One task that runs until DOK stops it at its time limit."""
        from gpuplan.market import billing

        return billing.charge(self.time_limit_s, self.terms)


def spend(plan: str, tasks: int, items: int, task_limit_s: int | None, terms: Terms | None = None) -> Spend:
    """The Spend of `tasks` tasks on `plan` for `items` items, each stopped at `task_limit_s`
    (None: DOK's default)."""
    return Spend(plan, tasks, items, terms or terms_of(plan), task_limit_s or MAX_TIME_LIMIT_S)


def submit(state: State, client, plan: str, image: str, items: Sequence[tuple[int, str]], command: Sequence[str], *,
           environment: Mapping[str, str] | None = None, registry: str | None = None, time_limit_s: int | None = None,
           options: Mapping | None = None, resumes: str | None = None,
           progress: Callable[[str], None] = lambda _m: None,
           confirm: Callable[[Spend], None] = lambda _s: None) -> str:
    """Check the input, let `confirm` see what it can cost (it raises to stop), then record the
    batch and queue one task per item (on the 8-GPU plan, one task for them all); returns the
    job id. A submission that fails part way leaves the items not submitted "failed" (`--resume`
    submits them later) and raises."""
    from gpuplan.providers.sakura_dok import check_task_input
    from gpuplan.run.dok import dok_batch
    run_items.check_items_command(command)
    resumed = state.job(resumes) if resumes else None
    secret = sorted(set(resumed.options.get("secret_env") or ()) | set((options or {}).get("secret_env") or ())
                    ) if resumed else []
    if secret:  # the resumed job's secret_env: read again from this environment (the state kept no value)
        from gpuplan.batchfile import secret_env_values

        environment = {**secret_env_values([n for n in secret if n not in (environment or {})],
                                           f"job {resumes}'s secret_env", may_leave_out=False), **(environment or {})}
        options = {**(options or {}), "secret_env": secret}
    lacking = sorted(set(resumed.options.get("env_names") or ()) - set(environment or {})) if resumed else []
    if lacking:  # bad input before anything is sent: the state never kept their values
        raise UsageError(f"job {resumes} ran with --env {', '.join(lacking)}: give {'it' if len(lacking) == 1 else 'them'}"
                         " again (--env KEY=VALUE); gpuplan keeps no value of an environment variable")
    batch = plan == dok_batch.PLAN
    # the 8-GPU task's own limit is its items' (time_limit_s is one item's)
    task_limit_s = _batch_limit(time_limit_s, len(items)) if batch else time_limit_s
    # before the job is recorded, so that nothing is left behind
    check_task_input(plan, image, environment, task_limit_s)
    runner_script = dok_batch.script(items, command, time_limit_s) if batch else None
    terms = terms_of(plan)
    client.check_credentials()
    confirm(spend(plan, 1 if batch else len(items), len(items), task_limit_s, terms))
    # the environment's names only: its values go to DOK with each task, never into the state
    opts = {"dok_plan": plan, "image": image, "env_names": sorted(environment or {}), "registry": registry,
            "time_limit_s": time_limit_s, "terms": task_batches.terms_json(terms), **(options or {})}
    job = state.add_numbered_job(CLUSTER, list(command), opts, items, 1, resumes, backend="dok")
    installation = state.installation_id()
    if runner_script is not None:
        _submit_batch(state, client, job, plan, image, items, runner_script, environment, registry, task_limit_s,
                      installation, progress)
        return job
    progress(f"queueing {fmt.plural(len(items), 'DOK task')} on {plan}")
    done = 0
    try:
        for idx, item in items:
            name = f"{job}-{idx}"
            with state.journaled("dok-task", name, CLUSTER, f"{plan} {image}"):
                client.submit(name, image, plan, task_command(command, item), environment=environment,
                              tags=[f"{TAG_RUN}={job}", f"{TAG_ITEM}={idx}", f"{TAG_INSTALLATION}={installation}"],
                              time_limit_s=time_limit_s, registry=registry)
            done += 1
    except BaseException:
        task_batches.not_submitted(state, job, items[done:], CLUSTER)
        if not done:
            state.set_job_state(job, "failed")
        raise
    return job


def task_command(command: Sequence[str], item: str) -> list[str]:
    """One item's task command, meaning what it means on every backend (command_line.py): an argv
    with {item} put in where no shell is needed (the image's ENTRYPOINT, if any, gets it as
    before); else `sh -c` of command_line's line, with GPUPLAN_ITEM and GPUPLAN_OUTPUT_DIR (the
    task's artifact folder) set first."""
    from gpuplan.run import command_line

    if not command_line.needs_shell(command):
        return [w.replace("{item}", item) for w in command]
    return ["sh", "-c", f"GPUPLAN_ITEM={shlex.quote(item)} GPUPLAN_OUTPUT_DIR=\"${{SAKURA_ARTIFACT_DIR:-/tmp}}\";"
                        f" export GPUPLAN_ITEM GPUPLAN_OUTPUT_DIR; {command_line.exec_line(command)}"]


MAX_TIME_LIMIT_S = DOK_TASK_LIMIT_S  # the most gpuplan asks a DOK task's time limit to be (20 days)
RUNNER_MARGIN_S = 300  # the 8-GPU runner's own time (claims, status files) on top of its items


def _batch_limit(item_limit_s: int | None, items: int) -> int | None:
    """The 8-GPU task's time limit for items that each stop after `item_limit_s` (None: DOK's default)."""
    from gpuplan.run.dok import dok_batch

    if item_limit_s is None:
        return None
    return min(MAX_TIME_LIMIT_S, item_limit_s * -(-items // dok_batch.GPUS) + RUNNER_MARGIN_S)


def _submit_batch(state: State, client, job: str, plan: str, image: str, items: Sequence[tuple[int, str]], script: str,
                  environment, registry, task_limit_s: int | None, installation: str, progress) -> None:
    """The 8-GPU plan: one task runs every item, 8 at a time. The runner stops an item after
    --timeout; the task's own limit (_batch_limit) is that times the rounds of 8 the batch takes
    (the runner's workers take the next item as soon as they are free, so no worker is still busy
    after them), plus a margin for the runner itself."""
    from gpuplan.run.dok import dok_batch

    progress(f"submitting one {plan} task for {fmt.plural(len(items), 'item')}, {dok_batch.GPUS} at a time")
    try:
        with state.journaled("dok-task", job, CLUSTER, f"{plan} {image} {len(items)} items"):
            client.submit(job, image, plan, [script], entrypoint=list(dok_batch.ENTRYPOINT), environment=environment,
                          tags=[f"{TAG_RUN}={job}", f"{TAG_ITEM}={dok_batch.ITEM_TAG}", f"{TAG_INSTALLATION}={installation}"],
                          time_limit_s=task_limit_s, registry=registry)
    except BaseException:
        task_batches.not_submitted(state, job, items, CLUSTER)
        state.set_job_state(job, "failed")
        raise


def _tasks(state: State, client, job: str) -> list[Any]:
    """The job's tasks (providers/sakura_dok.py DokTask), this installation's."""
    installation = f"{TAG_INSTALLATION}={state.installation_id()}"
    return [t for t in client.tasks(f"{TAG_RUN}={job}") if installation in t.tags]


def _item_tag(task) -> str:
    return next((x.partition("=")[2] for x in task.tags if x.startswith(TAG_ITEM + "=")), "")


def tasks_of(state: State, client, job: str) -> dict[int, Any]:
    """The job's tasks, one per item, by item index."""
    return {int(_item_tag(t)): t for t in _tasks(state, client, job) if _item_tag(t).isdigit()}


def batch_task(state: State, client, job: str):
    """The one task that runs every item of an 8-GPU job (None if the API does not list it)."""
    from gpuplan.run.dok import dok_batch

    return next((t for t in _tasks(state, client, job) if _item_tag(t) == dok_batch.ITEM_TAG), None)


def refresh(state: State, job: str, client=None) -> JobRow:
    """Read the job's tasks from the API and write what changed into the state."""
    from gpuplan.store.state import now

    row = run_items.job_row(state, job, CLUSTER)
    if row.state in OVER:
        return row
    client = client or default_client()
    if is_batch(row):
        return _refresh_batch(state, row, client)
    tasks = tasks_of(state, client, job)
    at = now()
    events: list[dict] = []
    first = at  # the batch began when its first task did (as far as the API says)
    for it in state.job_items(job):
        t = tasks.get(it.idx)
        if t is None or it.status in ("ok", "failed", "bad input"):
            continue
        if t.status == "running" and it.status != "running":
            events.append({"t": "start", "i": it.idx, "attempt": 1, "node": CLUSTER, "at": iso(at)})
        elif t.finished:
            started = at - timedelta(seconds=t.execution_s) if t.execution_s is not None else (it.started_at or at)
            first = min(first, started)
            events.append({"t": "end", "i": it.idx, "status": "ok" if t.status == "done" else "failed", "attempt": 1,
                           "node": CLUSTER, "slot": f"task {t.id}", "start": iso(started), "end": iso(at),
                           "exit": t.exit_code, "timed_out": t.status == "aborted", "log": f"dok task {t.id} ({t.status})"})
    if row.state == "submitted" and any(t.status != "waiting" for t in tasks.values()):
        events.insert(0, {"t": "begin", "at": iso(first)})
    if events:
        state.record_job_events(job, events, row.events_read)
    task_batches.settle(state, job, iso(at), OVER)
    return run_items.job_row(state, job, CLUSTER)


# why an item of an 8-GPU task has no status file, by how the task ended
_NOT_RUN = {"canceled": "the task was cancelled before this item ended",
            "aborted": "the task reached its time limit before this item ended",
            "error": "the task ended (error) before this item ended", "done": "the task ended before this item ran"}


def _refresh_batch(state: State, row: JobRow, client) -> JobRow:
    """The 8-GPU job's one task, read back: its items queued, running, or (once it has ended)
    each one's outcome from the runner's status file in the artifact."""
    from datetime import datetime, timezone

    from gpuplan.run.dok import dok_batch
    from gpuplan.store.state import now

    job = row.id
    task = batch_task(state, client, job)
    if task is None or task.status == "waiting":
        return run_items.job_row(state, job, CLUSTER)
    at = now()
    events: list[dict] = []
    open_items = [it for it in state.job_items(job) if it.status in ("queued", "running")]
    if not task.finished:
        if row.state == "submitted":
            events.append({"t": "begin", "at": iso(at)})
        events += [{"t": "start", "i": it.idx, "attempt": 1, "node": CLUSTER, "slot": f"task {task.id}",
                    "at": iso(at)} for it in open_items if it.status == "queued"]
        if events:
            state.record_job_events(job, events, row.events_read)
        return run_items.job_row(state, job, CLUSTER)
    found = dok_batch.statuses(artifact(state, client, task, job)) if task.artifact_id else {}
    began = (at - timedelta(seconds=task.execution_s) if task.execution_s is not None
             else row.started_at or at)
    for it in open_items:
        s = found.get(it.idx)
        if s is None:
            why = _NOT_RUN.get(task.status, f"the task ended ({task.status})")
            if task.artifact_id is None and task.status in ("done", "error"):
                why = f"the task ended ({task.status}) and left no artifact to read this item's outcome from"
            events.append({"t": "end", "i": it.idx, "status": "failed", "attempt": 1, "node": CLUSTER,
                           "slot": f"task {task.id}", "start": iso(at), "end": iso(at), "exit": None,
                           "timed_out": task.status == "aborted", "log": f"not run: {why}"})
            continue
        events.append({"t": "end", "i": it.idx, "status": "ok" if s.exit_code == 0 else "failed", "attempt": 1,
                       "node": CLUSTER, "slot": f"task {task.id} gpu {s.gpu}",
                       "start": iso(datetime.fromtimestamp(s.start, timezone.utc)),
                       "end": iso(datetime.fromtimestamp(s.end, timezone.utc)), "exit": s.exit_code,
                       "timed_out": s.timed_out, "log": f"gpuplan/{it.idx}.log in the artifact of task {task.id}"})
    if row.state == "submitted":
        events.insert(0, {"t": "begin", "at": iso(began)})
    state.record_job_events(job, events, row.events_read)
    ok = state.job_counts(job).get("ok", 0) == row.total
    # the job's start and end are the task's: its wall is the one figure DOK bills
    state.record_job_events(job, [{"t": "done", "state": "succeeded" if ok else "failed", "at": iso(at),
                                   "started": iso(began) if task.execution_s is not None else None}],
                            row.events_read)
    return run_items.job_row(state, job, CLUSTER)


def artifact(state: State, client, task, job: str):
    """The task's artifact, downloaded once into the state folder (dok/<job>.tar.gz)."""
    from gpuplan import paths

    path = paths.state_dir() / "dok" / f"{job}.tar.gz"
    if not path.is_file():
        part = client.download_artifact(task, path.with_suffix(".part"))
        part.replace(path)
    return path


def default_client():
    from gpuplan import config
    from gpuplan.providers.sakura_dok import DokClient

    return DokClient(config.provider_config("sakura"))


def task_seconds(state: State, job: str, at=None) -> list[int]:
    """Each started item's seconds: its billed run time when it ended, the time so far while it
    runs. An 8-GPU job is one task: one figure, its run time (the job's wall)."""
    from gpuplan.store.state import now

    row = run_items.job_row(state, job, CLUSTER)
    if is_batch(row):
        if not row.started_at:
            return []
        return [task_batches.seconds_billed(row.started_at, row.ended_at or at or now())]
    return [task_batches.seconds_billed(it.started_at, it.ended_at or at or now()) for it in state.job_items(job)
            if it.started_at is not None and it.slot != "not submitted"]


def cancel(state: State, job: str, client=None) -> int:
    """Cancel the job's waiting and running tasks; returns how many were stopped."""
    client = client or default_client()
    refresh(state, job, client)
    stopped = 0
    for t in _tasks(state, client, job):
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
    client = client or default_client()
    batch = is_batch(run_items.job_row(state, job, CLUSTER))
    task = batch_task(state, client, job) if batch else tasks_of(state, client, job).get(it.idx)
    if task is None:
        raise UsageError(f"item {item!r} of job {job} has no DOK task (it was not submitted)")
    return task


def summary(state: State, job: str):
    """The batch as a RunSummary: each task billed on its own for its run time."""
    row = run_items.job_row(state, job, CLUSTER)
    return task_batches.summary(state, row, 1, f"dok artifacts of {job}", "sakura", f"dok-{row.options['dok_plan']}",
                         task_seconds(state, job))


def fetch_artifacts(state: State, job: str, into, client=None) -> tuple[int, int]:
    """Every finished task's artifact (SAKURA_ARTIFACT_DIR, a tar.gz) into `into`/<task name>.tar.gz;
    returns (items whose task left one, files written). A file already there is never written over."""
    from pathlib import Path

    client = client or default_client()
    into = Path(into)
    tasks = [t for t in _tasks(state, client, job) if t.finished and t.artifact_id]
    taken = [t.name for t in tasks if (into / f"{t.name}.tar.gz").exists()]
    if taken:
        raise UsageError(f"{into / (taken[0] + '.tar.gz')} exists already: fetch into another folder, or move it away first")
    into.mkdir(parents=True, exist_ok=True)
    for t in tasks:
        client.download_artifact(t, into / f"{t.name}.tar.gz")
    # the 8-GPU plan's one task holds every item that ran; otherwise a task is an item
    items = state.job_counts(job).get("ok", 0) if tasks and is_batch(run_items.job_row(state, job, CLUSTER)) else len(tasks)
    return items, len(tasks)


def item_logs(state: State, job: str, item: str | None, follow: bool, write: Callable[[str], None],
              note: Callable[[str], None]) -> None:
    """An item's output from its DOK task's log stream (streamed only while the task runs); an
    8-GPU task's items, each its own log from the artifact once the task has ended."""
    if item is None:
        raise UsageError(f"DOK keeps one log per task: give the item, `gpuplan logs dok {job} ITEM`")
    client = default_client()
    refresh(state, job, client)
    task = item_task(state, job, item, client)
    if is_batch(run_items.job_row(state, job, CLUSTER)):
        it = state.job_item(job, item)
        if it is None:
            raise UsageError(f"job {job} has no item {item!r}; give its text or its line number")
        if task.finished:  # each item's own log is in the task's artifact
            why = it.log_path or ""
            if why.startswith("not run: "):
                raise UsageError(f"item {item!r} of job {job} has no log: {why.removeprefix('not run: ')}")
            if follow:
                raise UsageError(f"job {job}'s task has ended; leave out --follow")
            from gpuplan.run.dok import dok_batch

            text = dok_batch.item_log(artifact(state, client, task, job), it.idx)
            if text is None:
                raise UsageError(f"the artifact of job {job} holds no log of item {item!r}")
            write(text.decode(errors="replace"))
            return
        if task.status == "running":
            note(f"job {job} runs in one 8-GPU task: this is its stream, every item interleaved;"
                 f" item {item!r}'s own log comes with the task's artifact once it ends")
    for text in client.logs(task.id, follow=follow):
        write(text if text.endswith("\n") else text + "\n")
