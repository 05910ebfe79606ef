"""`gpuplan run slurm:CLUSTER[/PARTITION]`: a batch of items as one Slurm job array on a cluster
of slurm.yaml (providers/slurm.py, docs/slurm.md), reached through its login host over SSH
(paramiko, the login's host key pinned).

Submit: the batch's folder on the login host, `<workdir>/<job>/` (a shared file system, as on
every Slurm cluster: the nodes read it), holds items.txt (array index i is line i + 1) and
batch.sh; `sbatch --array=0-(N-1)%K --gres=gpu:1 --ntasks=1 --partition=P --time=T` runs it, one
GPU per array task, at most K (the partition's GPUs) at once. Each task reads its item from
items.txt by $SLURM_ARRAY_TASK_ID and runs the command as every backend does (command_line.py:
{item}, {out} and $NAME), with $GPUPLAN_ITEM and $GPUPLAN_OUTPUT_DIR (`out/<i>/` of the folder)
set; its output is `logs/<i>.log`. Nothing of gpuplan runs on the cluster: the job is Slurm's.

Follow: whenever someone looks (`run` following, `jobs`, `logs`, `cancel`) `squeue -r` says which
tasks run and `sacct -X` how each ended (State, ExitCode, Start, End, ElapsedRaw, AllocTRES), and
that is written into the state as the engine's batches are (jobs, job_items), under the
pseudo-cluster "slurm". Where the cluster keeps no accounting (sacct answers nothing), `scontrol
show job` is read instead, which knows an ended task only for MinJobAge (300 s by default): a
follower that looks more often than that sees every one.

Measured yen: each task billed on its own for the GPU-seconds Slurm reports (ElapsedRaw x the
gres/gpu of AllocTRES), at the partition's price per GPU-hour, through the one billing rule
(billing.charge_tasks); an item's started_at is its end minus ElapsedRaw, so the state's item
times are the billed ones.

Cancel: `scancel` of the array, then squeue is asked until none of its tasks is left (pending or
running) and each is recorded cancelled.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuplan.errors import RemoteError, UsageError
from gpuplan.planning import fmt
from gpuplan.run import items as run_items
from gpuplan.run import task_batches
from gpuplan.run.task_batches import iso

if TYPE_CHECKING:
    from gpuplan.market.billing import Terms
    from gpuplan.store.state import JobRow, State

CLUSTER = "slurm"  # the pseudo-cluster its batches are recorded under
OVER = ("succeeded", "failed", "cancelled", "lost", "capped")
# sacct / scontrol states of a task that has ended, and what the item becomes
_ENDED = {"COMPLETED": "ok", "FAILED": "failed", "CANCELLED": "cancelled", "TIMEOUT": "failed", "OUT_OF_MEMORY": "failed",
          "NODE_FAIL": "failed", "PREEMPTED": "failed", "BOOT_FAIL": "failed", "DEADLINE": "failed", "REVOKED": "failed"}
CANCEL_WAIT_S = 120  # how long cancel waits for squeue to hold none of the array's tasks
RECORD_WAIT_S = 30  # then how long it waits for sacct to record the end of each task that started


def is_slurm(target: str) -> bool:
    return target == CLUSTER or target.startswith(CLUSTER + ":")


def _cluster(row_or_target):
    from gpuplan.providers import slurm

    if isinstance(row_or_target, str):
        return slurm.find(row_or_target)
    o = row_or_target.options
    return slurm.find(f"slurm:{o['slurm_cluster']}/{o['partition']}")


def _offer(cluster, partition):
    from gpuplan.market import catalog
    from gpuplan.providers import slurm

    offers, _ = slurm.partition_offers(catalog.load(), [cluster])
    return next(o for o, _ in offers if o.name == slurm.offer_name(cluster.name, partition.name))


def terms_of(cluster, partition) -> Terms:
    from gpuplan.market import billing

    offer = _offer(cluster, partition)
    if offer.price_jpy_per_hour is None:
        raise UsageError(f"Slurm {cluster.name}/{partition.name}: {offer.notes.split('; ')[-1]}; give the catalog a"
                         " baremetal power price (prices.yaml) or another cost")
    return billing.terms_for(offer)


def _sh(cluster, cmd: str) -> str:
    """`cmd` on the login host with the cluster's own variables (slurm.yaml `env`)."""
    env = "".join(f"export {k}={shlex.quote(v)}; " for k, v in (cluster.env or {}).items())
    return env + cmd


def _run(cluster, cmd: str, what: str, conn=None, stdin: str | None = None, timeout: float = 120):
    from gpuplan.hosts import remote

    r = (conn.run(_sh(cluster, cmd), timeout=timeout, stdin=stdin) if conn is not None
         else remote.run(cluster.host(), _sh(cluster, cmd), timeout=timeout, stdin=stdin))
    if not r.ok:
        raise RemoteError(f"Slurm {cluster.name}: {what} failed on the login host: {r.why()}")
    return r


def env_file(env: dict[str, str]) -> str:
    """env.sh: the batch's `env:` as sh exports, written (mode 0600, from stdin) beside batch.sh,
    which is world-readable on the shared file system and so holds no value."""
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())


def script(folder: str, command: Sequence[str], env: dict[str, str]) -> str:
    """batch.sh: one array task, its item read from items.txt by $SLURM_ARRAY_TASK_ID; the
    command as on every backend (command_line.py: {item}, {out} and $NAME)."""
    from gpuplan.run import command_line

    q = shlex.quote(folder)
    exports = f". {q}/env.sh\n" if env else ""  # the values: env_file, readable by the batch's user only
    return (
        "#!/bin/bash\n"
        "# gpuplan: one item of a batch, as one task of a Slurm job array\n"
        f"i=\"$SLURM_ARRAY_TASK_ID\"\n"
        f"GPUPLAN_ITEM=\"$(sed -n \"$((i + 1))p\" {q}/items.txt)\"\n"
        f"GPUPLAN_OUTPUT_DIR={q}/out/\"$i\"\n"
        "export GPUPLAN_ITEM GPUPLAN_OUTPUT_DIR\n"
        f"{exports}"
        "mkdir -p \"$GPUPLAN_OUTPUT_DIR\"\n"
        f"cd {q}/work 2>/dev/null || cd {q}\n"
        f"{command_line.exec_line(command)}\n"
    )


def submit(state: State, target: str, items: Sequence[tuple[int, str]], command: Sequence[str], *,
           env: dict[str, str] | None = None, timeout_s: int = 24 * 3600, image: str = "", options: dict | None = None,
           resumes: str | None = None, progress: Callable[[str], None] = lambda _m: None) -> str:
    """Record the batch and submit it as one job array; the job id."""
    if image:
        raise UsageError("a Slurm batch runs on the cluster's nodes as they are: containers (image:) are not supported"
                         " there yet; leave out the image, or load your environment in the command")
    run_items.check_items_command(list(command))
    if any("\n" in item for _, item in items):
        raise UsageError("an item holds a line break: one item per line")
    if not items:
        raise UsageError("no items to run")
    cluster, part = _cluster(target)
    terms = terms_of(cluster, part)
    host = cluster.host()
    opts = {"slurm_cluster": cluster.name, "partition": part.name, "array_items": [idx for idx, _ in items],
            "terms": task_batches.terms_json(terms), "timeout_s": timeout_s, **(options or {})}
    env = dict(env or {})
    if env:  # the names only: the values are in no state row (a resume without --env reuses env.sh)
        opts["env_names"] = sorted(env)
    elif resumes is not None:
        resumed = state.job(resumes)
        if resumed is not None and resumed.options.get("env_names"):
            opts["env_names"] = resumed.options["env_names"]
        if resumed is not None and resumed.options.get("secret_env"):  # which of them are secret_env, kept for the next resume
            opts["secret_env"] = resumed.options["secret_env"]
    job = state.add_numbered_job(CLUSTER, list(command), opts, list(items), 1, resumes, backend="slurm")
    from gpuplan.hosts import remote

    progress(f"submitting {fmt.plural(len(items), 'item')} as a job array on Slurm {cluster.name}/{part.name}"
             f" (one GPU a task, at most {part.gpus} at once)")
    try:
        with remote.connect(host) as conn:
            folder = _run(cluster, f"mkdir -p {shlex.quote(cluster.workdir)}/{job} && cd {shlex.quote(cluster.workdir)}/{job}"
                                   " && mkdir -p out logs && pwd", "making the batch's folder", conn).stdout.strip()
            q = shlex.quote(folder)
            _run(cluster, f"cat > {q}/items.txt", "writing items.txt", conn,
                 stdin="".join(item + "\n" for _, item in items))
            if env:
                _run(cluster, f"(umask 077 && cat > {q}/env.sh)", "writing env.sh", conn, stdin=env_file(env))
            elif opts.get("env_names"):  # a resume: the env.sh of the job it resumes, kept on the login host
                resumed = state.job(resumes) if resumes else None
                old = _array_of(state, resumed)[1] if resumed is not None else ""
                _run(cluster, f"cp -p {shlex.quote(old)}/env.sh {q}/env.sh", "copying env.sh of job " + str(resumes), conn)
            _run(cluster, f"cat > {q}/batch.sh && chmod +x {q}/batch.sh", "writing batch.sh", conn,
                 stdin=script(folder, command, {k: "" for k in opts.get("env_names") or ()}))
            minutes = max(1, -(-timeout_s // 60))
            sbatch = (f"sbatch --parsable --job-name=gpuplan-{job} --array=0-{len(items) - 1}%{part.gpus} --gres=gpu:1"
                      f" --ntasks=1 --partition={shlex.quote(part.name)} --time={minutes} --chdir={q}"
                      f" --output={q}/logs/%a.log {q}/batch.sh")
            # journaled before sbatch is asked; its outcome keeps the array's id and folder (_array_of)
            entry = state.journal_intent(JOURNAL_OP, job, CLUSTER, f"{cluster.name}/{part.name} {len(items)} tasks")
            try:
                out = _run(cluster, sbatch, "sbatch", conn).stdout.strip()
                array = out.split(";")[0].strip()
                if not array.isdigit():
                    raise RemoteError(f"Slurm {cluster.name}: sbatch answered {out[:200]!r}, not a job id")
            except BaseException as exc:
                state.journal_outcome(entry, False, f"{type(exc).__name__}: {exc}"[:500])
                raise
            state.journal_outcome(entry, True, f"array {array} folder {folder}")
    except BaseException:
        task_batches.not_submitted(state, job, items, CLUSTER)
        state.set_job_state(job, "failed")
        raise
    return job


JOURNAL_OP = "slurm-array"


def _array_of(state: State, row: JobRow) -> tuple[str, str]:
    """The job's Slurm array id and its folder on the login host, as its journal entry keeps them
    ("", "" where sbatch never answered)."""
    for e in reversed(state.journal(CLUSTER)):
        if e.op == JOURNAL_OP and e.target == row.id and e.phase == "ok":
            m = re.fullmatch(r"array (\d+) folder (.+)", e.detail)
            if m:
                return m.group(1), m.group(2)
    return "", ""


def _time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text).astimezone(timezone.utc)
    except ValueError:
        return None  # Unknown / None


def _gpus(tres: str) -> int:
    """The GPUs of a task's AllocTRES: none where nothing was allocated (a task cancelled while
    pending); 1, what every task asks (--gres=gpu:1), where the cluster does not account gres/gpu."""
    if not tres.strip():
        return 0
    m = re.search(r"gres/gpu(?::[^=,]+)?=(\d+)", tres)
    return int(m.group(1)) if m else 1


def _ended_sacct(cluster, array: str, conn) -> dict[int, dict] | None:
    """Each ended task of the array as sacct says (None: the cluster keeps no accounting)."""
    from gpuplan.hosts import remote

    cmd = _sh(cluster, f"sacct -j {array} -X -P -n --format=JobID,State,ExitCode,Start,End,ElapsedRaw,AllocTRES")
    r = conn.run(cmd, timeout=120) if conn is not None else remote.run(cluster.host(), cmd, timeout=120)
    if not r.ok:
        if "accounting storage is disabled" in (r.stderr + r.stdout).lower():
            return None
        raise RemoteError(f"Slurm {cluster.name}: sacct failed on the login host: {r.why()}")
    out = {}
    for line in r.stdout.splitlines():
        f = line.split("|")
        if len(f) < 7 or "_" not in f[0]:
            continue
        task = f[0].split("_", 1)[1]
        state = f[1].split()[0] if f[1] else ""
        if not task.isdigit() or state not in _ENDED:
            continue
        out[int(task)] = {"state": state, "exit": f[2], "start": _time(f[3]), "end": _time(f[4]),
                          "elapsed": int(f[5] or 0), "gpus": _gpus(f[6])}
    return out


def _ended_scontrol(cluster, array: str, conn) -> dict[int, dict]:
    """The same from `scontrol show job` (no accounting): tasks slurmctld still remembers."""
    r = _run(cluster, f"scontrol -o show job {array} 2>/dev/null || true", "scontrol show job", conn)
    out = {}
    for line in r.stdout.splitlines():
        kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
        task, state = kv.get("ArrayTaskId", ""), kv.get("JobState", "")
        if not task.isdigit() or state not in _ENDED:
            continue
        start, end = _time(kv.get("StartTime", "")), _time(kv.get("EndTime", ""))
        elapsed = int((end - start).total_seconds()) if start and end else 0
        out[int(task)] = {"state": state, "exit": kv.get("ExitCode", ""), "start": start, "end": end,
                          "elapsed": elapsed, "gpus": _gpus(kv.get("TRES", ""))}
    return out


def _queued(cluster, array: str, conn) -> dict[int, tuple[str, datetime | None]]:
    """Each task squeue still holds (pending or running), by array index: its state and when it
    started (None while pending), as Slurm says: a follower that looks late still has the start."""
    r = _run(cluster, f"squeue -h -r -j {array} -o '%i %T %S' 2>/dev/null || true", "squeue", conn)
    out = {}
    for line in r.stdout.splitlines():
        words = line.split()
        if len(words) == 3 and "_" in words[0] and words[0].split("_", 1)[1].isdigit():
            out[int(words[0].split("_", 1)[1])] = (words[1], _time(words[2]))
    return out


def refresh(state: State, job: str, conn=None) -> JobRow:
    """Read the array's tasks from squeue and sacct and write what changed into the state."""
    from gpuplan.store.state import now

    row = run_items.job_row(state, job, CLUSTER)
    array, folder = _array_of(state, row)
    if row.state in OVER or not array:
        return row
    cluster, _ = _cluster(row)
    queued = _queued(cluster, array, conn)
    ended = _ended_sacct(cluster, array, conn)
    if ended is None:
        ended = _ended_scontrol(cluster, array, conn)
    index = {i: idx for i, idx in enumerate(row.options["array_items"])}
    at = now()
    events: list[dict] = []
    first = None
    for it in state.job_items(job):
        task = next((i for i, idx in index.items() if idx == it.idx), None)
        if task is None or it.status in ("ok", "failed", "bad input", "cancelled"):
            continue
        e = ended.get(task)
        if e is not None:
            end = e["end"] or at
            start = end - timedelta(seconds=e["elapsed"])  # the billed seconds, as Slurm counts them
            first = start if first is None else min(first, start)
            status = _ENDED[e["state"]]
            if status == "ok" and e["exit"] not in ("0:0", ""):
                status = "failed"
            events.append({"t": "end", "i": it.idx, "status": status, "attempt": 1, "node": CLUSTER,
                           "slot": f"{array}_{task} gres/gpu={e['gpus']}", "start": iso(start), "end": iso(end),
                           "exit": _exit(e["exit"]), "timed_out": e["state"] == "TIMEOUT",
                           "log": f"{folder}/logs/{task}.log"})
        elif task in queued and queued[task][0] in ("RUNNING", "COMPLETING") and it.status != "running":
            began = min(queued[task][1] or at, at)  # squeue's StartTime: the task may have run long before we looked
            first = began if first is None else min(first, began)
            events.append({"t": "start", "i": it.idx, "attempt": 1, "node": CLUSTER,
                           "slot": f"{array}_{task} gres/gpu=1", "at": iso(began)})
    if row.state == "submitted" and first is not None:
        events.insert(0, {"t": "begin", "at": iso(first)})
    if events:
        state.record_job_events(job, events, row.events_read)
        _bill(state, row, [e for e in events if e["t"] == "end"])
    # the job's wall is its tasks' as Slurm timed them (first start to last end), not when someone
    # looked: a detached batch read once after it ended is as long as it ran
    starts = [it.started_at for it in state.job_items(job) if it.started_at and not (it.slot or "").startswith("not ")]
    ends = [it.ended_at for it in state.job_items(job) if it.ended_at and not (it.slot or "").startswith("not ")]
    task_batches.settle(state, job, iso(max(ends)) if ends else iso(at), OVER,
                   started_iso=iso(min(starts)) if starts else None)
    return run_items.job_row(state, job, CLUSTER)


def _bill(state: State, row: JobRow, ended: Sequence[dict]) -> None:
    """Each ended task that held a GPU as one row of the cost ledger (what `cost-report` reads):
    from its start to its end as Slurm counts them, by the partition's terms per GPU, x its GPUs;
    the same seconds and rule as the backend's yen, each task billed on its own."""
    from dataclasses import replace

    from gpuplan.providers import slurm

    terms = task_batches.job_terms(row)
    size = slurm.offer_name(row.options["slurm_cluster"], row.options["partition"])
    for e in ended:
        held = re.fullmatch(r"(\S+) (gres/gpu\S*)", e.get("slot") or "")  # "ARRAY_TASK gres/gpu=N"; else never started
        gpus = _gpus(held.group(2)) if held else 0
        if held is None or gpus <= 0 or not e.get("start") or not e.get("end"):
            continue  # never held a GPU: nothing billed
        t = replace(terms, price_jpy=terms.price_jpy * gpus)
        state.ledger_add(row.cluster, f"{row.id}/{held.group(1)}", slurm.PROVIDER, size, t.price_jpy * 3600 / t.period_s,
                         t, "included",  # the partition's price, as its offer says (providers/slurm.py)
                         datetime.fromisoformat(e["start"]), datetime.fromisoformat(e["end"]))


def _exit(text: str) -> int | None:
    code = text.split(":")[0]
    return int(code) if code.isdigit() else None


def cancel(state: State, job: str) -> int:
    """scancel the array; wait until squeue holds none of its tasks, then (up to RECORD_WAIT_S) until
    sacct has recorded the end of each task that started; returns how many squeue held."""
    from gpuplan.hosts import remote

    row = run_items.job_row(state, job, CLUSTER)
    array, _ = _array_of(state, row)
    if not array:
        state.set_job_state(job, "cancelled")
        return 0
    cluster, _ = _cluster(row)
    with remote.connect(cluster.host()) as conn:
        held = _queued(cluster, array, conn)
        _run(cluster, f"scancel {array}", "scancel", conn)
        end = time.monotonic() + CANCEL_WAIT_S
        while _queued(cluster, array, conn):
            if time.monotonic() > end:
                raise RemoteError(f"Slurm {cluster.name}: tasks of array {array} are still in squeue"
                                  f" {CANCEL_WAIT_S} s after scancel; look with `squeue -j {array}` on the login host")
            time.sleep(1)
        refresh(state, job, conn)
        # slurmdbd records a cancelled task's end a moment after squeue lets it go; until then sacct
        # still says RUNNING, and the fallback below would bill it up to now, the seconds spent
        # waiting here included (a busy machine: 5 GPU-seconds billed where sacct then said 4)
        end = time.monotonic() + RECORD_WAIT_S
        while time.monotonic() < end and any(it.status in ("queued", "running") and it.started_at
                                             for it in state.job_items(job)):
            time.sleep(1)
            refresh(state, job, conn)
    now = iso()
    open_items = [it for it in state.job_items(job) if it.status in ("queued", "running")]
    if open_items:  # cancelled before sacct recorded them (a pending task never started)
        ends = [{"t": "end", "i": it.idx, "status": "cancelled", "attempt": it.attempts, "node": CLUSTER,
                 "slot": it.slot or "not started", "start": iso(it.started_at) if it.started_at else now, "end": now,
                 "exit": None, "timed_out": False, "log": it.log_path} for it in open_items]
        state.record_job_events(job, ends, run_items.job_row(state, job, CLUSTER).events_read)
        _bill(state, run_items.job_row(state, job, CLUSTER), ends)
    state.set_job_state(job, "cancelled")
    return len(held)


def task_seconds(state: State, job: str, at=None) -> list[int]:
    """Each started task's GPU-seconds: ElapsedRaw x its GPUs once it ended, the time so far while it runs."""
    from gpuplan.store.state import now

    return [task_batches.seconds_billed(it.started_at, it.ended_at or at or now(), _gpus(it.slot or ""))
            for it in state.job_items(job) if it.started_at is not None and not (it.slot or "").startswith("not ")]


def gpus_at_once(state: State, job: str) -> int:
    """The most GPUs the batch's tasks held at one time (each task its own GPU, as timed by
    Slurm): what it ran on, as "N x CLUSTER.PARTITION" says of a plan; 1 where none ran."""
    edges = []
    for it in state.job_items(job):
        if it.started_at is None or it.ended_at is None or (it.slot or "").startswith("not "):
            continue
        gpus = _gpus((it.slot or "").split(" ", 1)[1] if " " in (it.slot or "") else "gres/gpu=1")
        edges += [(it.started_at, gpus), (it.ended_at, -gpus)]  # an end before a start at the same second
    peak = held = 0
    for _, change in sorted(edges, key=lambda e: (e[0], e[1])):
        held += change
        peak = max(peak, held)
    return max(1, peak)


def summary(state: State, job: str):
    from gpuplan.providers import slurm

    row = run_items.job_row(state, job, CLUSTER)
    return task_batches.summary(state, row, gpus_at_once(state, job),
                                f"{_array_of(state, row)[1] or '?'} on Slurm {row.options['slurm_cluster']}",
                                slurm.PROVIDER, slurm.offer_name(row.options["slurm_cluster"], row.options["partition"]),
                                task_seconds(state, job))


def fetch_outputs(state: State, job: str, into: Path, item: str | None = None) -> tuple[int, int]:
    """What each ended item (or one) wrote in $GPUPLAN_OUTPUT_DIR, from the login host into
    `into`/<index>-<item>/ (never over a folder that exists); (items, files)."""
    from gpuplan.hosts import remote

    row = refresh(state, job)
    rows = state.job_items(job) if item is None else [x for x in [state.job_item(job, item)] if x is not None]
    if item is not None and not rows:
        raise UsageError(f"job {job} has no item {item!r}; give its text or its line number")
    ended = [it for it in rows if it.status not in ("queued", "running") and not (it.slot or "").startswith("not ")]
    names = {it.idx: run_items.job_name(it.idx, it.item) for it in ended}
    taken = [n for n in names.values() if (into / n).exists()]
    if taken:
        raise UsageError(f"{into / taken[0]} exists already: fetch into another folder, or move it away first")
    if not ended:
        return 0, 0
    cluster, _ = _cluster(row)
    folder = _array_of(state, row)[1]
    tasks = {idx: i for i, idx in enumerate(row.options["array_items"])}
    got = files = 0
    into.mkdir(parents=True, exist_ok=True)
    with remote.connect(cluster.host()) as conn:
        for it in ended:
            base = f"{folder}/out/{tasks[it.idx]}"
            listed = _run(cluster, f"cd {shlex.quote(base)} 2>/dev/null && find . -type f -print0 || true",
                          "listing outputs", conn).stdout
            paths = [p.removeprefix("./") for p in listed.split("\0") if p]
            if not paths:
                continue
            for rel in paths:
                if rel.startswith("/") or ".." in Path(rel).parts:
                    continue
                local = into / names[it.idx] / rel
                local.parent.mkdir(parents=True, exist_ok=True)
                conn.get(f"{base}/{rel}", local)
                files += 1
            got += 1
    return got, files


def item_logs(state: State, job: str, item: str | None, follow: bool, write: Callable[[str], None],
              note: Callable[[str], None]) -> None:
    """An item's log (its array task's output), read from the login host."""
    if item is None:
        raise UsageError(f"a Slurm batch keeps one log per item: `gpuplan logs slurm {job} ITEM`")
    row = refresh(state, job)
    it = state.job_item(job, item)
    if it is None:
        raise UsageError(f"job {job} has no item {item!r}; give its text or its line number")
    if follow:
        note("the log as it is now (Slurm logs are read from the login host; --follow is not kept up here)")
    cluster, _ = _cluster(row)
    task = row.options["array_items"].index(it.idx)
    r = _run(cluster, f"cat {shlex.quote(_array_of(state, row)[1])}/logs/{task}.log 2>/dev/null || true",
             "reading the log", None)
    write(r.stdout)


def session(state: State, job: str) -> Any:
    from contextlib import nullcontext

    from gpuplan.hosts import remote

    row = run_items.job_row(state, job, CLUSTER)
    if row.state in OVER or not _array_of(state, row)[0]:
        return nullcontext()
    cluster, _ = _cluster(row)
    return remote.connect(cluster.host())
