"""`gpuplan run`: a batch of items on a cluster's engine, or one data-parallel job.

Item mode: the batch is a Ray Job whose driver lives on the cluster's head node (engine.py,
ray_driver.py, batch_rules.py): one task per item on a GPU slot (`--per-gpu k`: 1/k of a GPU
each), in the plan's order (longest first), with retries, per-item timeouts that kill the
item's process group, and nodes that fail items which then succeed elsewhere set aside. The
client submits it and goes away or follows it; whenever it looks (`follow`, `refresh`) it
reads what the driver recorded on the head and writes it into the state (jobs, job_items).
The SSH fan-out that ran each item from a client thread is gone.

torchrun mode: the same command on every node through `python -m torch.distributed.run` (the
engine behind `torchrun`), one process per GPU, started as a Ray gang by the same kind of
driver: a placement group with one bundle per node (STRICT_SPREAD), node ranks 0..N-1 in the
nodes' order, the rendezvous on the first node's private address.

Measured yen: every node of the cluster billed for the batch's wall time under the one billing
rule (gpuplan.market.billing.charge), next to what a saved plan predicted.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuplan.errors import GpuplanError, NotFound, RemoteError, UsageError
from gpuplan.planning import fmt
from gpuplan.run.items import (
    JOB_STATES_OVER,
    Quarantine,
    RunSummary,
    check_items_command,
    held_yen,
    item_results,
    job_name,
    job_row,
    job_seconds,
    yen_for,
)

if TYPE_CHECKING:
    from gpuplan.market.billing import Terms
    from gpuplan.run.caps import Cap
    from gpuplan.store.state import JobRow, State


@dataclass(frozen=True)
class Target:
    """One node of a cluster, reachable over SSH."""

    node: str
    host: Any  # gpuplan.hosts.remote.Host
    private_ip: str
    gpus: int


def cap_stop_at(state: State, cluster: str, cap: Cap, now: datetime | None = None) -> datetime:
    """`run --max-yen`: the moment the batch must stop so that the cluster's nodes, billed from
    `now` each by its own ledger terms, stay within the cap (Cap.stop_moment, in ledger yen);
    refused where the cluster has no price, or its nodes' first billed second is over the cap."""
    from datetime import timedelta

    from gpuplan.run import caps
    from gpuplan.units import MAX_DURATION_S

    row = state.cluster(cluster)
    if row is None:
        raise NotFound(f"no cluster named {cluster!r}; see `gpuplan status`")
    if state.ledger_terms(cluster) is None and row.price_jpy_per_hour is None:
        raise UsageError(f"cluster {cluster} has no price in the state: --max-yen cannot say when to stop")
    now = now or datetime.now(timezone.utc)
    stop = cap.stop_moment(state, cluster, now=now, since=now)
    if stop is None:  # nothing of it bills: the cap never stops it
        return now + timedelta(seconds=MAX_DURATION_S)
    if stop <= now:
        nodes = sum(1 for n in state.nodes(cluster) if n.status not in (*caps.GONE, "lost"))
        raise UsageError(f"--max-yen {fmt.yen(cap.yen)}: {fmt.plural(nodes, 'node')} of {cluster} cost more than that"
                         " for their first billed second already; raise the cap")
    return stop


# --- inputs --------------------------------------------------------------------------------


def torchrun_argv(python: str, *, nodes: int | str, nproc_per_node: int | str, node_rank: int | str, master_addr: str,
                  master_port: int, program: Sequence[str]) -> list[str]:
    """`python -m torch.distributed.run` (torchrun) with a static rendezvous on master_addr (the
    gang's driver fills in words such as "{node_rank}" on the cluster)."""
    return [python, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--nproc-per-node", str(nproc_per_node),
            "--node-rank", str(node_rank), "--master-addr", master_addr, "--master-port", str(master_port), *program]


def torchrun_program(command: Sequence[str]) -> list[str]:
    """What torchrun runs: `python -m mod ...` -> `-m mod ...`, `python x.py` -> `x.py`,
    anything else -> `--no-python cmd ...`."""
    cmd = list(command)
    if not cmd:
        raise UsageError("give the command after --")
    head = Path(cmd[0]).name
    if head in ("torchrun",) or cmd[:3] == [cmd[0], "-m", "torch.distributed.run"]:
        raise UsageError("give the training command itself after --; gpuplan adds torchrun and its rendezvous")
    if re.fullmatch(r"python(\d(\.\d+)?)?", head):
        rest = cmd[1:]
        if not rest:
            raise UsageError("the command runs python with nothing to run; add -m MODULE or a script")
        return rest
    return ["--no-python", *cmd]


# --- the cluster --------------------------------------------------------------------------


def cluster_targets(state: State, cluster: str) -> list[Target]:
    """The cluster's live nodes as SSH targets, each with its host key pinned in the state store."""
    from gpuplan.hosts import remote

    nodes = {n.name: n for n in state.nodes(cluster)}
    return [Target(h.name, h, nodes[h.name].private_ip or h.address, nodes[h.name].gpus)
            for h in remote.cluster_hosts(state, cluster)]


def _ssh_run(target: Target, command: str, timeout: int):
    from gpuplan.hosts import remote

    return remote.run(target.host, command, timeout=timeout)


def detect_gpus(targets: Sequence[Target], timeout: int = 60) -> list[int]:
    """GPUs per node: the state's count, or `nvidia-smi -L` where the state says 0."""
    counts = []
    for t in targets:
        if t.gpus > 0:
            counts.append(t.gpus)
            continue
        r = _ssh_run(t, "nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true", timeout)
        text = r.stdout.strip()
        counts.append(int(text) if text.isdigit() else 0)
    return counts


# --- item mode: a batch on the cluster's engine ---------------------------------------------


# Clouds whose machines say, on their instance metadata, that they are about to be taken back (AWS
# spot: two minutes before): the driver watches every node there and drains the one announced.
NOTICE_PROVIDERS = ("aws",)


def submit(state: State, cluster: str, items: Sequence[tuple[int, str]], command: Sequence[str], *, per_gpu: int = 1,
           retries: int = 0, timeout: int = 86400, options: dict | None = None, resumes: str | None = None,
           workdir: str = "", local_workdir: Path | None = None, recover: bool = False,
           progress: Callable[[str], None] = lambda _m: None, image: str | None = None, registry: Any = None,
           stop_at: datetime | None = None, checkpoint_every_s: int = 0, env: Mapping[str, str] | None = None) -> str:
    """Start Ray where it is not running, copy `local_workdir` to every node (the items run in
    it; or in `workdir`, already on the nodes), submit the batch as a Ray Job and record it;
    returns the job id.

    `image`: each attempt runs in a container of it (`docker run --gpus device=N`, ray_driver.py);
    docker is checked and the image pulled on every node first (containers.prepare), and a node
    that cannot makes the submit fail. `registry`: the private registry's login (a
    containers.Login, or anything with username, server and password() / password_env, such as
    batchfile.Registry); its secret reaches the nodes only on `docker login`'s standard input.
    `stop_at` (UTC): the yen cap's time; the driver on the cluster stops the batch then ("capped").
    `checkpoint_every_s`: each item's $GPUPLAN_CHECKPOINT_DIR is kept on the head this often
    (ray_driver.run_item); 0: items get none. `env`: the batch's `env:`, in every item's
    environment; its values reach the head only as a 0600 file (engine.submit), the state keeps
    the names (a resumed job without its own takes the one it resumes)."""
    from gpuplan.run import command_line

    check_items_command(command)
    # every item runs this one line: {item}, {out} and $NAME as on every backend (command_line.py)
    spec = {"command": list(command), "shell": command_line.exec_line(command), "per_gpu": per_gpu, "retries": retries,
            "recover": recover}
    opts = {"per_gpu": per_gpu, "retries": retries, **(options or {})}
    if checkpoint_every_s:
        spec["checkpoint_every_s"] = opts["checkpoint_every_s"] = checkpoint_every_s
    if env:
        opts["env_names"] = sorted(env)
    elif resumes:  # the resumed job's env.json is lent (engine.submit)
        resumed = state.job(resumes)
        if resumed is not None and resumed.options.get("env_names"):
            opts["env_names"] = resumed.options["env_names"]
        if resumed is not None and resumed.options.get("secret_env"):  # which of them are secret_env, kept for the next resume
            opts["secret_env"] = resumed.options["secret_env"]
    row = state.cluster(cluster)
    if row is not None and row.provider in NOTICE_PROVIDERS:  # each node watches for the cloud's notice
        spec["notice"] = True
    if image:
        from gpuplan.run.ray import containers

        containers.check_image(image)
        opts["image"] = image
    if stop_at is not None:
        if stop_at.tzinfo is None:
            raise UsageError("stop_at must be a UTC-aware time")
        spec["stop_at"] = stop_at.astimezone(timezone.utc).isoformat(timespec="milliseconds")
        opts["stop_at"] = spec["stop_at"]
    return _submit(state, cluster, lambda _up: list(items), command, spec, opts, timeout, resumes, workdir, local_workdir,
                   progress, image=image or "", registry=registry, env=env)


def submit_torchrun(state: State, cluster: str, command: Sequence[str], *, python: str = "python3", master_port: int = 29500,
                    timeout: int = 86400, options: dict | None = None, local_workdir: Path | None = None,
                    progress: Callable[[str], None] = lambda _m: None) -> str:
    """One data-parallel job over every node as a Ray gang: one rank per node, started together
    (a placement group, one bundle per node, STRICT_SPREAD), torchrun's rendezvous on the first
    node's private address. Recorded as a job with one item per rank ("rank0", "rank1", ...), so
    `jobs`, `logs`, `cancel` and `--detach` work as for a batch."""
    program = torchrun_program(command)
    check_torch(state, cluster, python, progress)
    argv = torchrun_argv(python, nodes="{nnodes}", nproc_per_node="{nproc}", node_rank="{node_rank}",
                         master_addr="{master_addr}", master_port=master_port, program=program)
    spec = {"mode": "gang", "argv": argv}
    return _submit(state, cluster, lambda up: [(r, f"rank{r}") for r in range(up)], list(command), spec,
                   {"torchrun": True, "python": python, "master_port": master_port, **(options or {})}, timeout, None, "",
                   local_workdir, progress)


def check_torch(state: State, cluster: str, python: str, progress: Callable[[str], None] = lambda _m: None) -> None:
    """Before a --torchrun job is submitted: `python` imports torch's launcher on every node (else
    every rank would start, then fail). Bad input, naming the nodes and how to provide it."""
    from gpuplan.errors import RemoteError
    from gpuplan.hosts import remote

    hosts = remote.cluster_hosts(state, cluster)
    progress(f"checking that {python} imports torch on {fmt.plural(len(hosts), 'node')}")
    check = f"{shlex.quote(python)} -c 'import torch.distributed.run'"
    results = remote.run_many(hosts, lambda h: remote.run(h, check, timeout=300))
    for h, r in zip(hosts, results):
        if isinstance(r, BaseException):
            raise RemoteError(f"--torchrun: could not check torch on {h.name}: {r}")
    missing = [h.name for h, r in zip(hosts, results) if not isinstance(r, BaseException) and not r.ok]
    if missing:
        raise UsageError(f"--torchrun: {python} cannot import torch on {', '.join(missing)}: install it there (a venv"
                         " and --python /path/to/venv/bin/python, or `pip install torch` in a bootstrap playbook;"
                         " docs/run-engine.md#--torchrun-one-data-parallel-job-as-a-ray-gang)")


def _submit(state: State, cluster: str, items_for: Callable[[int], list[tuple[int, str]]], command: Sequence[str],
            spec: dict, opts: dict, timeout: int, resumes: str | None, workdir: str, local_workdir: Path | None,
            progress: Callable[[str], None], image: str = "", registry: Any = None,
            env: Mapping[str, str] | None = None) -> str:
    from gpuplan.run.ray import engine

    if state.cluster(cluster) is None:
        raise NotFound(f"no cluster named {cluster!r}; see `gpuplan status`")
    login = None
    if image:
        from gpuplan.run.ray import containers

        login = containers.login_of(registry, image)  # a missing secret is bad input before anything starts
    eng, left_out = engine.ensure_up(state, cluster, progress)
    if image:
        try:
            docker = containers.prepare(eng, image, login, skip=list(left_out), progress=progress)
        except containers.ContainerError as exc:  # say what stays up and bills: the caller may not tear it down
            raise containers.ContainerError(f"{exc.nodes}; nothing was submitted: {left_up(state, cluster, len(eng.nodes))}",
                                            exc.nodes) from None
        spec = {**spec, "image": image, "docker": docker}
    job = f"{cluster}-{state.next_job_number(cluster)}"
    if local_workdir is not None:
        progress(f"copying {local_workdir} to {fmt.plural(len(eng.nodes), 'node')}")
        workdir = engine.push_workdir(eng, job, local_workdir)
    items = items_for(len(eng.nodes) - len(left_out))
    spec = {**spec, "job": job, "items": [[i, it] for i, it in items], "timeout_s": timeout,
            "nodes": {n.name: n.gpus for n in eng.nodes}, "addresses": {n.name: n.private_ip for n in eng.nodes},
            "workdir": workdir, "code_tag": engine.driver_tag(),
            "left_out": left_out}
    state.add_job(job, cluster, list(command), {**opts, "timeout_s": timeout, "workdir": workdir}, items, len(eng.nodes),
                  resumes, backend="ray")
    try:
        engine.submit(eng, job, spec, env, resumes)
    except BaseException:
        state.set_job_state(job, "lost")
        raise
    return job


def left_up(state: State, cluster: str, nodes: int) -> str:
    """What a submit that failed before the batch leaves behind: the cluster, Ray on it, and what it bills."""
    row = state.cluster(cluster)
    price = row.price_jpy_per_hour if row is not None else None
    bills = "as its provider bills it" if price is None else f"about {fmt.rate(price * nodes)}/h"
    return (f"the cluster {cluster} ({fmt.plural(nodes, 'node')}) is still up with Ray running, billing {bills};"
            f" fix the nodes and run again, or `gpuplan teardown {cluster}`")


def refresh_engine(state: State, job: str, conn=None) -> JobRow:
    """Read what the job's driver recorded since we last looked and write it into the state.
    A driver that ended without saying how (killed, its head node gone) leaves the job "lost".
    (The Ray backend's refresh: callers go through run/backends.py.)"""
    from gpuplan.run.ray import engine

    row = job_row(state, job)
    if row.state in JOB_STATES_OVER:
        return row
    eng = engine.engine_of(state, row.cluster)
    while True:
        p = engine.poll(eng.head.host, job, row.events_read, conn)
        if p.events or p.offset != row.events_read:
            state.record_job_events(job, p.events, p.offset)
        row = job_row(state, job)
        if not p.events or row.state in JOB_STATES_OVER:
            break
    if row.state not in JOB_STATES_OVER and not p.driver_alive and (
            row.state != "submitted" or job_age_s(row) > DRIVER_START_S):
        state.set_job_state(job, "lost")  # `gpuplan logs CLUSTER JOB` shows the driver's own log
        row = job_row(state, job)
    return row


DRIVER_START_S = 300  # a submitted driver that has not started by then never will


def job_age_s(row: JobRow) -> float:
    from gpuplan.store.state import now

    return (now() - row.submitted_at).total_seconds()


def engine_job_yen(state: State, row: JobRow, at=None) -> Decimal | None:
    """Every machine the ledger billed while the batch ran, each by its own terms for its seconds
    in the batch (node_seconds); a cluster without ledger rows: its nodes at its price for the
    batch's wall time (the Ray backend's yen)."""
    held = node_seconds(state, row, at)
    if held:
        return held_yen(held)
    cluster = state.cluster(row.cluster)
    return yen_for(state.ledger_terms(row.cluster), cluster.price_jpy_per_hour if cluster else None, row.nodes,
                   job_seconds(row, at))


def node_seconds(state: State, row: JobRow, at=None) -> tuple[tuple[Terms, float], ...]:
    """Each ledger row of the batch's cluster that was held while the batch ran (from its driver's
    start to its end, or `at`, or now): its terms and those seconds. A node that joined later
    counts from its start, one stopped from the ledger's stop; a node the batch lost stays billed
    while the ledger holds it, as the cloud bills it."""
    from gpuplan.store.state import now

    if row.started_at is None:
        return ()
    start, end = row.started_at, row.ended_at or at or now()
    out = []
    for r in state.ledger_rows():
        if r["cluster"] != row.cluster:
            continue
        held = (min(end, r["stopped_at"] or end) - max(start, r["started_at"])).total_seconds()
        if held > 0:
            out.append((r["terms"], held))
    return tuple(out)


def engine_summary(state: State, job: str) -> RunSummary:
    """A finished (or current) batch on a cluster as a RunSummary: one JobResult per item,
    quarantined nodes, wall and yen, and what interruptions cost it (the Ray backend's summary)."""
    from gpuplan.store import costs

    row = job_row(state, job)
    cluster = state.cluster(row.cluster)
    results = item_results(state, job)
    quarantined = tuple(Quarantine(q.node, q.code, q.reason) for q in state.job_quarantines(job))
    return RunSummary(row.cluster, tuple(results), job_seconds(row), row.nodes,
                      cluster.price_jpy_per_hour if cluster else None, Path(f"~/{_jobs_dir()}/{job}/logs"), quarantined,
                      cluster.provider if cluster else "", cluster.size if cluster else "", state.ledger_terms(row.cluster),
                      interruptions=costs.interruptions(state, row), node_seconds=node_seconds(state, row))


def _jobs_dir() -> str:
    from gpuplan.run.ray.engine import JOBS_DIR

    return JOBS_DIR


class OutputsNotFetched(RemoteError):
    """Some nodes' outputs could not be fetched; what the others held came back (`got`, `files`)."""

    def __init__(self, message: str, got: int, files: int) -> None:
        super().__init__(message)
        self.got, self.files = got, files


FAILED_LOGS = "logs"  # `into`/logs/<index>-<item>.log: a failed item's last log, fetched with the outputs


def fetch_outputs(state: State, job: str, item: str | None, into: Path,
                  skipped: list[str] | None = None) -> tuple[int, int]:
    """Copy back what the job's items (or one item) wrote in their output dir on the node each
    last ran on, into `into`/<index>-<item>/ (an item's folder is never written over: one that
    exists already is bad input), and each failed item's last log into `into`/logs/, so why it
    failed is kept once the cluster is torn down. Returns (items with outputs, files). Links an
    item left are not followed: their paths go into `skipped`. A node that cannot be read does
    not stop the others: OutputsNotFetched, once every other node's outputs are in, names it."""
    import shutil
    import tempfile

    from gpuplan.hosts import remote
    from gpuplan.run.ray import engine

    row = refresh_engine(state, job)
    if item is None:
        rows = state.job_items(job)
    else:
        one = state.job_item(job, item)
        if one is None:
            raise UsageError(f"job {job} has no item {item!r}; give its text or its line number")
        rows = [one]
    ended = [it for it in rows if it.node and it.node != "-" and it.status not in ("queued", "running")]
    if item is not None and not ended:
        raise UsageError(f"item {item!r} of job {job} has not ended ({rows[0].status}); fetch its outputs when it has")
    names = {it.idx: job_name(it.idx, it.item) for it in ended}
    failed = [it for it in ended if it.status in ("failed", "bad input") and it.log_path]
    taken = [into / n for n in names.values() if (into / n).exists()]
    taken += [into / FAILED_LOGS / f"{names[it.idx]}.log" for it in failed
              if (into / FAILED_LOGS / f"{names[it.idx]}.log").exists()]
    if taken:
        raise UsageError(f"{taken[0]} exists already: fetch into another folder, or move it away first")
    eng = engine.engine_of(state, row.cluster)
    hosts = engine.node_hosts(eng)
    # an item that ended on a node lost since (its engine stopped, the machine perhaps still up) has
    # its outputs there: that node is asked too, and where it cannot be, the item is named below
    hosts.update({h.name: h for h in remote.hosts_to_stop(state, row.cluster) if h.name not in hosts})
    if failed:
        _fetch_logs(hosts, failed, {it.idx: into / FAILED_LOGS / f"{names[it.idx]}.log" for it in failed})
    by_node: dict[str, list[int]] = {}
    unread: dict[str, str] = {}  # node -> why its outputs could not be fetched
    for it in ended:
        if it.node in hosts:
            by_node.setdefault(it.node, []).append(it.idx)
        elif it.status == "ok":  # its outputs are on a machine gpuplan can no longer reach
            unread[str(it.node)] = "no address or pinned key is left to reach it"
    into.mkdir(parents=True, exist_ok=True)
    got, files = 0, 0
    links: list[str] = []
    with tempfile.TemporaryDirectory(dir=into, prefix=".gpuplan-fetch-") as tmp:
        for node, indexes in by_node.items():
            try:
                fetched = engine.fetch_outputs(hosts[node], job, indexes, Path(tmp), links)
            except Exception as exc:  # noqa: BLE001 - one node's failure, said below once the others are in
                unread[node] = str(exc) or type(exc).__name__
                continue
            for idx in fetched:
                shutil.move(str(Path(tmp) / str(idx)), into / names[idx])
                got += 1
                files += sum(1 for f in (into / names[idx]).rglob("*") if f.is_file() and not f.is_symlink())
    if skipped is not None:  # named as they lie in `into`: <index>-<item>/path rather than <index>/path
        for link in links:
            head, _, rest = link.partition("/")
            skipped.append(f"{names[int(head)]}/{rest}" if head.isdigit() and int(head) in names else link)
    if unread:
        raise OutputsNotFetched(f"the outputs on {', '.join(f'{n} ({w})' for n, w in unread.items())} could not be"
                                f" fetched; {got} item(s) of the other nodes were", got, files)
    return got, files


def _fetch_logs(hosts: dict, items: Sequence, local: dict[int, Path]) -> None:
    """Each item's log (its last attempt's, on the node it ran on) to local[idx]; a log that is
    not there any more is skipped."""
    from gpuplan.hosts import remote

    by_node: dict[str, list] = {}
    for it in items:
        if it.node in hosts:
            by_node.setdefault(it.node, []).append(it)
    for node, its in by_node.items():
        try:
            with remote.connect(hosts[node]) as conn:
                for it in its:
                    local[it.idx].parent.mkdir(parents=True, exist_ok=True)
                    try:
                        conn.get(it.log_path, local[it.idx])
                    except (OSError, GpuplanError):
                        local[it.idx].unlink(missing_ok=True)
        except (OSError, GpuplanError):  # a node that cannot be reached: fetch_outputs names it with its outputs
            continue


def cancel_engine(state: State, job: str) -> int:
    """Stop the job on every node (driver, tasks, every item's process group); returns the groups
    killed (the Ray backend's cancel)."""
    from gpuplan.run.ray import engine

    row = refresh_engine(state, job)
    eng = engine.engine_of(state, row.cluster)
    killed = engine.cancel(eng, job)
    refresh_engine(state, job)
    # the driver was stopped before it could record how its attempts ended: what was running is
    # cancelled now, so `jobs` does not show a cancelled job with items running (those never
    # started stay queued, as a capped batch leaves them: `run --resume` runs both)
    at = _iso_now()
    open_items = state.job_items(job, statuses=("running",))
    if open_items:
        state.record_job_events(job, [{"t": "end", "i": it.idx, "status": "cancelled", "attempt": it.attempts,
                                       "node": it.node or "-", "slot": it.slot or "-",
                                       "start": it.started_at.isoformat(timespec="seconds") if it.started_at else at,
                                       "end": at, "exit": None, "timed_out": False, "log": it.log_path}
                                      for it in open_items], job_row(state, job).events_read)
    state.set_job_state(job, "cancelled")
    return killed


def _iso_now() -> str:
    from gpuplan.store.state import now

    return now().isoformat(timespec="seconds")


# --- measured vs predicted ----------------------------------------------------------------


def engine_logs(state: State, job: str, item: str | None, follow: bool, write: Callable[[str], None]) -> None:
    """The batch driver's log, or an item's log from the node it ran on (`follow`: as it grows,
    until the item ends); the Ray backend's logs."""
    from gpuplan.run.ray import engine

    row = refresh_engine(state, job)
    eng = engine.engine_of(state, row.cluster)
    if item is None:
        write(engine.driver_logs(eng, job))
        return
    it = state.job_item(job, item)
    if it is None:
        raise UsageError(f"job {job} has no item {item!r}; give its text or its line number")
    if not it.node or it.node not in engine.node_hosts(eng):
        raise UsageError(f"item {item!r} of job {job} has not started yet ({it.status})")
    host = engine.node_hosts(eng)[it.node]
    path = it.log_path or f"$HOME/{engine.JOBS_DIR}/{job}/logs/{it.idx}.{it.attempts}.log"
    if not follow:
        from gpuplan.hosts import remote

        r = remote.run(host, f"cat {path}", timeout=120)
        if not r.ok:
            raise UsageError(f"no log for item {item!r} on {it.node}: {r.why()}")
        write(r.stdout)
        return

    def item_over() -> bool:
        refresh_engine(state, job)
        latest = state.job_item(job, item)
        return latest is None or latest.status not in ("running", "queued")

    engine.stream(host, path, write, item_over)
