"""The driver of one gpuplan batch: a Ray Job on the cluster's head node.

gpuplan uploads this file, batch_rules.py and the batch's spec.json to the head and submits
`python ray_driver.py spec.json` with `ray job submit --no-wait`, so the batch lives on the
cluster, not in the client. It runs in Ray's own environment on the head (gpuplan is not
installed there): standard library, Ray and batch_rules only.

The driver is the scheduler (which item next, on which node: batch_rules) and Ray is the
executor: every slot is a Ray actor pinned to its node (node affinity) holding 1/k of a GPU
(`--per-gpu k`), which Ray gives it as CUDA_VISIBLE_DEVICES; each attempt is a call on a free
slot of the node batch_rules chose. The slots are detached named actors: the next batch with
the same k (and the same driver code) finds them up instead of starting a worker per slot. The task runs the item's
command in its own process group, with the per-item timeout, and kills the whole group when
the command ends or times out, so nothing of an item outlives its attempt.

With an image (spec "image"), each attempt runs the command in a container instead:
`docker run --rm --init --gpus device=N` (N: the GPU(s) Ray gave the slot; no --gpus on a
CPU-only node), named gpuplan-<job>-<index>-<attempt>, its output dir (and the workdir) mounted
at the same path. Killing the docker client does not stop a container, so every attempt ends
with `docker rm -f NAME` whatever ended it (exit, timeout, cancel, the cap).

With a yen cap (spec "stop_at", an absolute UTC time), each attempt stops itself at that time on
its own node (its process group and container killed, as for a timeout), so the cap holds on every
node whatever happens to the client or the driver; the driver then hands out nothing more, records
the stopped items "cancelled", leaves the others queued and ends the job "capped". The client may
move the cap earlier while the batch runs (a file `stop_at` in the job's directory: `run --recover`
replaced a node by a dearer one); the attempts started before that are then told to stop (SIGTERM)
at the new time, and killed CAP_BACKSTOP_S later if they did not.

Everything the client needs is appended, one JSON object per line, to events.jsonl in the job's
directory on the head; the client reads it (over SSH, from where it stopped) whenever it looks:
  {"t": "begin", "at", "slots", "nodes"}
  {"t": "ready", "at"}                            every slot's worker is up; items are handed out from now
  {"t": "start", "i", "node", "attempt", "at"}
  {"t": "end", "i", "node", "slot", "attempt", "start", "end", "exit", "timed_out", "log", "status"[, "restored"]
   [, "saved"]}                                   restored: bytes of checkpoint the attempt started from; saved:
                                                  when it last sent a changed checkpoint to the head (absent: never)
  {"t": "lost", "i", "node", "reason"}            an attempt that died with its worker or node
  {"t": "notice", "node", "action", "time", "at"} the cloud announced it takes the node back: it is drained
  {"t": "quarantine", "node", "code", "reason"}   a node set aside: code from batch_rules (LOST, FAILURES, ...)
  {"t": "requeue", "i"}                           an ended item queued again (its node was set aside)
  {"t": "cap", "stop_at", "at"}                  the cap moved earlier (`run --recover` added a dearer node)
  {"t": "capped", "at", "stop_at", "running"}   the yen cap's time came: nothing more is handed out
  {"t": "done", "state", "at"}                    succeeded | failed | cancelled | capped
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone

SLOT_WAIT_S = 0.5
NODE_WAIT_S = 60
SLOTS_UP_S = 120
POOL_NAMESPACE = "gpuplan"
TERM_GRACE_S = 5  # a timed-out item: SIGTERM, then SIGKILL this much later
CAP_GRACE_S = 1  # the yen cap is a hard stop: SIGKILL 1 s after SIGTERM
ANSWER_S = 10  # a live slot worker answers `ready` in milliseconds; one that does not in this long is gone
CAP_BACKSTOP_S = 15  # attempts not back this long after the cap (a node's clock behind): killed from here
CAP_GIVE_UP_S = 60  # and not back this long after it: recorded stopped without their answer


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def container_name(job: str, index: int, attempt: int) -> str:
    """The attempt's container: one name per job, item and attempt (docker refuses a name in use)."""
    import re

    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"gpuplan-{job}-{index}-{attempt}")


def container_argv(docker: list[str], name: str, image: str, shell: str, gpus: list[str], out: str, workdir: str,
                   env: dict[str, str], passed: Sequence[str] = ()) -> list[str]:
    """`docker run` for one attempt: the GPU(s) Ray gave the slot (none on a CPU-only node), the
    output dir and the workdir mounted at the same paths (the workdir is the working dir), the
    GPUPLAN_* variables, the names in `passed` with their values from the docker client's own
    environment (`-e NAME`: the batch's `env:`, never on the command line), `sh -c SHELL` inside
    (after the image's entrypoint, as `docker run` passes it: an image needs a POSIX sh, not bash;
    a distroless one without sh cannot run items). --init: signals reach the command (a shell as
    PID 1 ignores SIGTERM); --ipc host: PyTorch's data loaders outgrow Docker's 64 MB /dev/shm."""
    argv = [*docker, "run", "--rm", "--init", "--ipc", "host", "--name", name]
    if gpus:  # two or more devices: docker reads the value as CSV, so the list goes in double quotes
        devices = ",".join(gpus)
        argv += ["--gpus", f"device={devices}" if len(gpus) == 1 else f'"device={devices}"']
    argv += ["-v", f"{out}:{out}"]
    if env.get("GPUPLAN_CHECKPOINT_DIR"):
        argv += ["-v", f"{env['GPUPLAN_CHECKPOINT_DIR']}:{env['GPUPLAN_CHECKPOINT_DIR']}"]
    if workdir:
        argv += ["-v", f"{workdir}:{workdir}", "-w", workdir]
    for key in passed:
        argv += ["-e", key]
    for key, value in env.items():
        argv += ["-e", f"{key}={value}"]
    return [*argv, image, "sh", "-c", shell]


def run_item(job: str, index: int, item: str, attempt: int, shell: str, timeout_s: float, memory_fraction: str,
             workdir: str, image: str = "", stop_at: float | None = None, docker: str = "docker",
             checkpoints=None, checkpoint_every_s: float = 0, env: dict | None = None, *, on_start=None) -> dict:
    """One attempt of one item, on the node Ray placed it on (runs in a Ray worker). With
    `image`, in a container (`docker`: how this node runs the docker CLI). At `stop_at` (epoch
    seconds: the yen cap) the attempt is stopped like a timed-out one and returns "capped".

    With `checkpoints` (the batch's CheckpointStore on the head), the item gets an empty
    $GPUPLAN_CHECKPOINT_DIR filled with what its last attempt anywhere left there, and what it
    writes there goes to the store every `checkpoint_every_s` while it runs (when it changed)
    and once more at its end: an attempt on another node (its node lost, a retry) starts from it.
    The result's "saved" is when it last sent a changed folder there (None: never): the work
    after it is what an interrupted attempt loses.

    `env`: the batch's `env:` (its values read by the driver from the job's env.json, mode 0600
    on the head): in the item's environment only, never in an argv (a container gets `-e NAME`,
    the docker client holding the value in its own environment, which only its user reads)."""
    import shutil
    import subprocess

    import ray

    home = os.path.expanduser(f"~/.gpuplan/jobs/{job}")
    gpus = [str(g) for g in ray.get_gpu_ids()]
    node = os.environ.get("GPUPLAN_NODE", "?")
    slot = f"{node}:{','.join(gpus) if gpus else 'cpu'}"
    if stop_at is not None and time.time() >= stop_at:  # handed out as the cap came: never started
        return {"node": node, "slot": slot, "start": None, "end": None, "exit": None, "timed_out": False, "log": None,
                "capped": True, "started": False}
    os.makedirs(f"{home}/logs", exist_ok=True)
    os.makedirs(f"{home}/pids", exist_ok=True)
    out = f"{home}/out/{index}"  # what `gpuplan logs CLUSTER JOB --fetch DIR` copies back; only the last attempt's
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    log = f"{home}/logs/{index}.{attempt}.log"
    extra = {"GPUPLAN_ITEM": item, "GPUPLAN_JOB": job, "GPUPLAN_ATTEMPT": str(attempt), "GPUPLAN_OUTPUT_DIR": out}
    send, restored = None, 0
    if checkpoints is not None:
        ckpt = f"{home}/checkpoints/{index}"
        shutil.rmtree(ckpt, ignore_errors=True)  # only what the store holds: never a stale copy on this node
        os.makedirs(ckpt)
        restored = unpack_checkpoint(ray.get(checkpoints.get.remote(index)), ckpt)
        extra["GPUPLAN_CHECKPOINT_DIR"] = ckpt
        send = checkpoint_sync(checkpoints, index, ckpt)
    saved: list[str] = []  # when a changed checkpoint went to the store

    def sync() -> None:
        at = send() if send is not None else None
        if at:
            saved.append(at)

    if memory_fraction:  # the reference jobs take this as their fixed GPU memory share
        extra["GPUPLAN_MEMORY_FRACTION"] = memory_fraction
    cwd = os.path.expanduser(workdir) if workdir else home
    name = ""
    if image:
        name = container_name(job, index, attempt)
        argv = container_argv(shlex.split(docker), name, image, shell, gpus, out, os.path.expanduser(workdir) if workdir
                              else "", extra, sorted(env or {}))
        env, cwd = dict(os.environ, **(env or {})), home
        os.makedirs(f"{home}/containers", exist_ok=True)
        with open(f"{home}/containers/{index}.{attempt}", "w") as fh:  # kill_job_groups removes it too
            fh.write(f"{docker}\t{name}\n")
    else:
        argv, env = ["bash", "-c", shell], dict(os.environ, **(env or {}), **extra)
    start = _now()
    with open(log, "wb") as log_fh:
        proc = subprocess.Popen(argv, stdout=log_fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                start_new_session=True)
    pid_file = f"{home}/pids/{index}.{attempt}"
    with open(pid_file, "w") as fh:  # `gpuplan cancel` kills this process group on every node
        fh.write(f"{proc.pid}\n")
    if on_start is not None:
        on_start(proc.pid)
    timed_out = capped = False
    by_cap = stop_at is not None and stop_at - time.time() < timeout_s  # which deadline comes first
    try:
        code = _wait(proc, max(0.0, stop_at - time.time()) if by_cap and stop_at is not None else timeout_s,
                     checkpoint_every_s if checkpoints is not None else 0, sync)
    except subprocess.TimeoutExpired:
        capped, timed_out = by_cap, not by_cap
        _kill_group(proc.pid, signal.SIGTERM)  # the docker client passes it on to the container
        try:
            code = proc.wait(timeout=CAP_GRACE_S if capped else TERM_GRACE_S)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid, signal.SIGKILL)
            code = proc.wait()
        cap = datetime.fromtimestamp(stop_at or 0, timezone.utc)
        with open(log, "a") as fh:
            fh.write(f"\n[gpuplan: stopped at the yen cap ({cap:%Y-%m-%d %H:%M:%S} UTC); its processes were killed]\n"
                     if capped
                     else f"\n[gpuplan: timed out after {timeout_s:g} s; its processes were killed]\n")
    finally:
        _kill_group(proc.pid, signal.SIGKILL)  # what the command left running in the background
        sync()  # what the attempt left, for the next one wherever it runs
        if name:  # killing the client leaves its container running: stop and remove it
            _remove_container(docker, name)
            try:
                os.unlink(f"{home}/containers/{index}.{attempt}")
            except OSError:
                pass
        try:
            os.unlink(pid_file)
        except OSError:
            pass
    return {"node": node, "slot": slot, "start": start, "end": _now(), "exit": code, "timed_out": timed_out, "log": log,
            "capped": capped, "restored": restored, "saved": saved[-1] if saved else None}


def _wait(proc, wait_s: float, every_s: float, sync) -> int:
    """proc.wait(wait_s), calling sync() every `every_s` seconds meanwhile (0: never)."""
    import subprocess

    if not every_s:
        return proc.wait(timeout=wait_s)
    end = time.monotonic() + wait_s
    while True:
        left = end - time.monotonic()
        try:
            return proc.wait(timeout=max(0.0, min(every_s, left)))
        except subprocess.TimeoutExpired:
            if left <= every_s:
                raise
            sync()


class CheckpointStore:
    """The batch's checkpoints on the head (a Ray actor pinned there): item index -> the tar.gz of
    its $GPUPLAN_CHECKPOINT_DIR as its last attempt last sent it."""

    def __init__(self) -> None:
        self._data: dict[int, bytes] = {}

    def put(self, index: int, data: bytes) -> None:
        self._data[index] = data

    def get(self, index: int) -> bytes | None:
        return self._data.get(index)


def checkpoint_sync(store, index: int, folder: str) -> Callable[[], str | None]:
    """A function that sends `folder` (tar.gz) to the store when it changed since the last send,
    and returns when it sent it (None: unchanged). The folder as it is now (what the store gave
    the attempt) counts as sent: sending it back would be no save of the attempt's own."""
    import io
    import tarfile

    import ray

    def listing() -> list:
        files = []
        for root, _dirs, names in os.walk(folder):
            for n in names:
                try:
                    st = os.stat(os.path.join(root, n))
                except OSError:
                    continue
                files.append((os.path.join(root, n), st.st_size, st.st_mtime_ns))
        return sorted(files)

    last = [listing()]

    def sync() -> str | None:
        seen = listing()
        if seen == last[0]:
            return None
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(folder, arcname=".")
        ray.get(store.put.remote(index, buf.getvalue()))
        last[0] = seen
        return _now()

    return sync


def unpack_checkpoint(data: bytes | None, folder: str) -> int:
    """Unpack a checkpoint into `folder`; its size in bytes (0: there was none)."""
    import io
    import tarfile

    if not data:
        return 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        if hasattr(tarfile, "data_filter"):  # no paths outside the folder, no devices
            tar.extractall(folder, filter="data")
        else:
            tar.extractall(folder)
    return len(data)


def _remove_container(docker: str, name: str) -> None:
    """`docker rm -f NAME` (kills it first); one already gone is fine."""
    import subprocess

    try:
        subprocess.run([*shlex.split(docker), "rm", "-f", name], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        pass


class SlotWorker:
    """One GPU slot (1/k of a GPU with --per-gpu k) on one node: runs the items handed to it.
    Two calls may run at once (max_concurrency 2): `drain` reaches the item `run` is running."""

    def __init__(self) -> None:
        self._group: int | None = None

    def ready(self) -> bool:
        return True

    def run(self, *args) -> dict:
        try:
            return run_item(*args, on_start=self._started)
        finally:
            self._group = None

    def _started(self, pid: int) -> None:
        self._group = pid

    def drain(self) -> bool:
        """SIGTERM to the running item's process group, so that it checkpoints and stops before
        the machine is taken back; whether one was running."""
        group = self._group
        if group is not None:
            _kill_group(group, signal.SIGTERM)
        return group is not None


NOTICE_PATH = "/latest/meta-data/spot/instance-action"  # 404 until the cloud announces it takes the machine
NOTICE_POLL_S = 5.0  # AWS gives two minutes' notice; it says to look every 5 s


def watch_notice(poll_s: float = NOTICE_POLL_S) -> dict:
    """On one node (a Ray task pinned there): ask its instance metadata (IMDSv2: a session
    token, then the spot instance-action) every `poll_s` until the cloud announces it takes the
    machine back; returns the notice's action and time. The metadata service is the node's
    AWS_EC2_METADATA_SERVICE_ENDPOINT where set (as the AWS SDKs read it), else 169.254.169.254."""
    import urllib.error
    import urllib.request

    base = (os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT") or "http://169.254.169.254").rstrip("/")
    while True:
        try:
            ask = urllib.request.Request(f"{base}/latest/api/token", method="PUT",
                                         headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"})
            with urllib.request.urlopen(ask, timeout=2) as r:
                token = r.read().decode()
            ask = urllib.request.Request(f"{base}{NOTICE_PATH}", headers={"X-aws-ec2-metadata-token": token})
            with urllib.request.urlopen(ask, timeout=2) as r:
                body = json.loads(r.read() or b"{}")
            return {"action": str(body.get("action", "")), "time": str(body.get("time", ""))}
        except urllib.error.HTTPError:
            pass  # 404: no notice (yet)
        except (OSError, ValueError):
            pass  # no metadata service answering (not an AWS machine, or it blinked): look again
        time.sleep(poll_s)


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Events:
    def __init__(self, path: str) -> None:
        self._fh = open(path, "a")

    def write(self, **event) -> None:
        self._fh.write(json.dumps(event, separators=(",", ":")) + "\n")
        self._fh.flush()


_SLOT_CLASS: list = []  # the slot actor class, made once per driver


def slot_name(node: str, per_gpu: int, i: int, tag: str) -> str:
    return f"slot-{node}-k{per_gpu}-{i}-{tag}"


def make_slot(ray, node: str, node_id: str, i: int, per_gpu: int, has_gpu: bool, tag: str):
    """The node's i-th slot: a detached actor kept for the next batches (starting a Ray worker
    costs a second or more of CPU; a batch of short items should not pay it every time)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not _SLOT_CLASS:
        _SLOT_CLASS.append(ray.remote(SlotWorker))
    return _SLOT_CLASS[0].options(name=slot_name(node, per_gpu, i, tag), namespace=POOL_NAMESPACE, lifetime="detached",
                                  get_if_exists=True, num_cpus=0, max_concurrency=2,
                                  num_gpus=(1 / per_gpu) if has_gpu else 0, max_restarts=0,
                                  scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote()


def _joined(ray, known: set[str]) -> dict[str, tuple[str, int]]:
    """gpuplan nodes alive in Ray that the batch does not know yet: name -> (Ray node id, GPUs)."""
    found = {}
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        for key in n.get("Resources", {}):
            name = key[len("gpuplan_node_"):]
            if key.startswith("gpuplan_node_") and name not in known:
                found[name] = (n["NodeID"], int(n["Resources"].get("GPU", 0)))
    return found


def _answers(ray, slots: list) -> bool:
    """Whether any of a node's slot workers answers within ANSWER_S."""
    refs = [a.ready.remote() for a in slots]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=ANSWER_S)
    for ref in ready:
        try:
            if ray.get(ref):
                return True
        except Exception:  # its worker died with the node
            pass
    return False


def _ray_nodes(ray, names: list[str]) -> dict[str, str]:
    """gpuplan node name -> Ray node id, for the nodes alive now (each carries a resource gpuplan_node_<name>)."""
    found = {}
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        for key in n.get("Resources", {}):
            if key.startswith("gpuplan_node_") and key[len("gpuplan_node_"):] in names:
                found[key[len("gpuplan_node_"):]] = n["NodeID"]
    return found


def _absent(rules, name: str, left_out: dict) -> tuple[str, str]:
    """The code and words of a node the batch begins without: left out by the client (its words
    say why), or not in the Ray cluster."""
    if name in left_out:
        return rules.LEFT_OUT, left_out[name] or "left out when the batch was submitted"
    return rules.NOT_IN_RAY, "not in the Ray cluster (its Ray node is not running)"


def _env_file(jobdir: str) -> dict[str, str]:
    """The batch's `env:` (names and values), from env.json beside the spec: written by the client
    over SSH's stdin, readable by the SSH user only; {} where the batch has none."""
    try:
        with open(f"{jobdir}/env.json") as fh:
            return {str(k): str(v) for k, v in json.load(fh).items()}
    except FileNotFoundError:
        return {}


def main(spec_path: str) -> int:
    import batch_rules as rules
    import ray

    with open(spec_path) as fh:
        spec = json.load(fh)
    job, jobdir = spec["job"], os.path.dirname(os.path.abspath(spec_path))
    with open(f"{jobdir}/driver.pid", "w") as fh:
        fh.write(f"{os.getpid()}\n")
    events = Events(f"{jobdir}/events.jsonl")
    cancelled = []

    def on_term(_sig, _frame):
        cancelled.append(True)

    signal.signal(signal.SIGTERM, on_term)
    ray.init(address="auto", logging_level="WARNING", log_to_driver=False)
    if spec.get("mode") == "gang":
        return gang(ray, spec, jobdir, events, lambda: bool(cancelled) or os.path.exists(f"{jobdir}/cancel"))
    gpus = {n: int(g) for n, g in spec["nodes"].items()}
    per_gpu = int(spec["per_gpu"])
    secrets = _env_file(jobdir)
    stop_at = datetime.fromisoformat(spec["stop_at"]).timestamp() if spec.get("stop_at") else None
    cap_t = stop_at if stop_at is not None else float("inf")
    left_out = spec.get("left_out") or {}  # nodes the client could not reach or start Ray on, with why
    ids: dict[str, str] = {}
    deadline = time.monotonic() + NODE_WAIT_S
    while time.monotonic() < deadline:
        ids = {n: i for n, i in _ray_nodes(ray, list(gpus)).items() if n not in left_out}
        if len(ids) + len(left_out) >= len(gpus):
            break
        time.sleep(1)
    batch = rules.Batch.of([(int(i), it) for i, it in spec["items"]], list(gpus), int(spec["retries"]))
    for name in gpus:
        if name not in ids:
            batch.quarantine(name, *_absent(rules, name, left_out))
            events.write(t="quarantine", node=name, code=batch.out[name].code, reason=batch.out[name].reason)
    tag = spec.get("code_tag", "")

    def new_slot(node: str, i: int):
        return make_slot(ray, node, ids[node], i, per_gpu, bool(gpus[node]), tag)

    wanted = {slot_name(n, per_gpu, i, tag) for n in ids for i in range(max(1, gpus[n]) * per_gpu)}
    for a in ray.util.list_named_actors(all_namespaces=True):  # slots of another --per-gpu or driver version
        if a["namespace"] == POOL_NAMESPACE and a["name"].startswith("slot-") and a["name"] not in wanted:
            try:
                ray.kill(ray.get_actor(a["name"], namespace=POOL_NAMESPACE))
            except ValueError:
                pass
    events.write(t="begin", at=_now(), slots=len(wanted), nodes=sorted(ids))
    free = {n: [new_slot(n, i) for i in range(max(1, gpus[n]) * per_gpu)] for n in ids}
    slot_of = {}  # actor -> its index on its node, to make it again if its worker dies
    for n in ids:
        for i, actor in enumerate(free[n]):
            slot_of[actor] = i
    # Hand out nothing before the slots are up: an item given to a worker still starting would
    # wait there while a slot that is up takes the items after it (the order would not hold).
    ray.wait([a.ready.remote() for actors in free.values() for a in actors],
             num_returns=sum(len(a) for a in free.values()),
             timeout=SLOTS_UP_S if stop_at is None else max(0.0, min(SLOTS_UP_S, stop_at - time.time())))
    events.write(t="ready", at=_now())
    fraction = f"{1 / per_gpu:.6f}" if per_gpu > 1 else ""
    inflight: dict = {}  # ref -> (index, node, attempt, actor)

    def set_aside(nodes: list[str]) -> None:
        if not nodes:
            return
        for node in nodes:
            events.write(t="quarantine", node=node, code=batch.out[node].code, reason=batch.out[node].reason)
        for index in sorted(requeue_watch):
            if batch.items[index].status == rules.QUEUED:
                requeue_watch.discard(index)
                events.write(t="requeue", i=index)

    requeue_watch: set[int] = set()  # ended items a quarantine may queue again
    recover = bool(spec.get("recover"))
    image, docker = spec.get("image") or "", spec.get("docker") or {}
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    checkpoints, every_s = None, float(spec.get("checkpoint_every_s") or 0)
    if every_s:  # on the head, with the driver: a lost node takes no checkpoint with it
        checkpoints = ray.remote(CheckpointStore).options(
            num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(),
                                                                           soft=False)).remote()
    notice = bool(spec.get("notice"))  # watch each node's instance metadata for the cloud's notice
    watchers: dict = {}  # ref -> node
    drained: set[str] = set()

    def watch(node: str) -> None:
        ref = ray.remote(watch_notice).options(num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
            ids[node], soft=False)).remote()
        watchers[ref] = node

    if notice:
        for n in ids:
            watch(n)
    looked_for_nodes = time.monotonic()
    capping, backstop = False, False
    cap_moved, cap_stopped = False, set()  # the cap moved earlier; the attempts told to stop at it
    while not batch.done() and not cancelled and not os.path.exists(f"{jobdir}/cancel"):
        noticed, _ = ray.wait(list(watchers), num_returns=len(watchers), timeout=0) if watchers else ([], [])
        for ref in noticed:
            node = watchers.pop(ref)
            try:
                said = ray.get(ref)
            except Exception:  # the node went before it was announced: the lost-node rules see to it
                continue
            drained.add(node)
            events.write(t="notice", node=node, action=said["action"], time=said["time"], at=_now())
            set_aside(batch.quarantine(node, rules.INTERRUPTED, f"the cloud takes it back ({said['action'] or 'notice'}"
                                                                f" at {said['time'] or 'soon'}): drained"))
            for _index, where, _attempt, actor in inflight.values():
                if where == node:
                    actor.drain.remote()  # SIGTERM: the item checkpoints and stops; it runs again elsewhere
        if not capping and time.time() >= cap_t:
            capping = True  # the yen cap: nothing more is handed out; the running attempts stop themselves
            if cap_moved:  # those started before it moved do not know the new time: told to stop now
                for index, _node, _attempt, actor in inflight.values():
                    actor.drain.remote()
                    cap_stopped.add(index)
            events.write(t="capped", at=_now(), stop_at=spec["stop_at"], running=len(inflight))
        if capping and inflight and time.time() >= cap_t + CAP_BACKSTOP_S and not backstop:
            backstop = True  # attempts that did not stop themselves (a node's clock behind the head's)
            _kill_on(ray, job, {ids[n] for _, n, _, _ in inflight.values() if n in ids})
        if capping and inflight and time.time() >= cap_t + CAP_GIVE_UP_S:
            for index, node, attempt, _ in inflight.values():
                events.write(t="end", i=index, node=node, slot="-", attempt=attempt, start=None, end=_now(), exit=None,
                             timed_out=False, log=None, status="cancelled",
                             reason="stopped at the yen cap; its node did not confirm it")
            inflight.clear()
            break
        look = time.monotonic() - looked_for_nodes > 2
        if look:
            looked_for_nodes = time.monotonic()
            moved = _moved_cap(jobdir)
            if moved is not None and moved < cap_t:
                cap_t = stop_at = moved
                spec["stop_at"] = datetime.fromtimestamp(moved, timezone.utc).isoformat()
                cap_moved = True
                events.write(t="cap", stop_at=spec["stop_at"], at=_now())
            # a node the engine no longer lists is lost, even where its killed items made it look
            # like failures first (they failed as it went)
            alive = _ray_nodes(ray, list(batch.nodes))
            for node in [n for n in batch.nodes if n not in alive and (n not in batch.out or batch.out[n].code
                                                                         == rules.FAILURES)]:
                set_aside(batch.gone(node, "its Ray node is no longer in the cluster"))
        if recover and not capping and look:  # `run --recover`: replacements join
            for node, (node_id, node_gpus) in _joined(ray, set(batch.nodes)).items():
                ids[node], gpus[node] = node_id, node_gpus
                batch.add_node(node)
                if notice:
                    watch(node)
                free[node] = [new_slot(node, i) for i in range(max(1, node_gpus) * per_gpu)]
                for i, actor in enumerate(free[node]):
                    slot_of[actor] = i
                events.write(t="joined", node=node, at=_now())
        for node in batch.live_nodes() if not capping else []:
            while free.get(node):
                index = batch.next_for(node)
                if index is None:
                    break
                s = batch.items[index]
                actor = free[node].pop()
                ref = actor.run.remote(job, index, s.item, s.attempts, spec["shell"],
                                       float(spec["timeout_s"]), fraction, spec.get("workdir") or "", image, stop_at,
                                       docker.get(node) or "docker", checkpoints, every_s, secrets)
                inflight[ref] = (index, node, s.attempts, actor)
                events.write(t="start", i=index, node=node, attempt=s.attempts, at=_now())
        if batch.stuck() or not inflight:
            break
        ready, _ = ray.wait(list(inflight), num_returns=1, timeout=SLOT_WAIT_S)
        if ready:
            more, _ = ray.wait([r for r in inflight if r not in ready], num_returns=len(inflight) - len(ready), timeout=0)
            ready += more
        for ref in ready:
            index, node, attempt, actor = inflight.pop(ref)
            try:
                r = ray.get(ref)
            except Exception as exc:  # the worker or its node died: no exit code to judge
                alive = _ray_nodes(ray, [node])
                reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
                gone = batch.lost(index, node, node_gone=node not in alive, reason=reason)
                events.write(t="lost", i=index, node=node, reason=reason)
                set_aside(gone)
                if node in alive and batch.live(node):
                    fresh = new_slot(node, slot_of[actor])  # its worker died, the node did not: a fresh one
                    slot_of[fresh] = slot_of[actor]
                    free[node].append(fresh)
                continue
            free[node].append(actor)
            if r.get("capped") or index in cap_stopped:  # stopped at the yen cap (or never started: it stays queued)
                cap_stopped.discard(index)
                if r.get("started") is False:
                    events.write(t="requeue", i=index)
                else:
                    events.write(t="end", i=index, node=node, slot=r["slot"], attempt=attempt, start=r["start"],
                                 end=r["end"], exit=r["exit"], timed_out=False, log=r["log"], status="cancelled",
                                 reason="stopped at the yen cap")
                continue
            gone = []
            if node in drained and (r["exit"] != 0 or r["timed_out"]):  # stopped by the drain: not its fault
                batch.interrupted(index, node)
                status = rules.INTERRUPTED
            elif r["exit"] == 0 and not r["timed_out"]:
                gone = batch.succeeded(index, node)
                status = rules.OK
            else:
                status = batch.failed(index, node, r["exit"] if not r["timed_out"] else 124)
                if status != rules.QUEUED:
                    requeue_watch.add(index)
            events.write(t="end", i=index, node=node, slot=r["slot"], attempt=attempt, start=r["start"], end=r["end"],
                         exit=r["exit"], timed_out=r["timed_out"], log=r["log"], status=status,
                         **({"restored": r["restored"]} if r.get("restored") else {}),
                         **({"saved": r["saved"]} if r.get("saved") else {}))
            if status == rules.INTERRUPTED:
                events.write(t="requeue", i=index)
            set_aside(gone)
    for ref in watchers:  # the nodes' metadata watchers end with the batch
        ray.cancel(ref, force=True)
    # A node set aside for failures may have gone with its items (they were killed as it went)
    # before the engine noticed: one whose slots do not answer now is lost, for `run --recover`.
    for node in [n for n, why in batch.out.items() if why.code == rules.FAILURES and free.get(n)]:
        if not _answers(ray, free[node]):
            set_aside(batch.gone(node, f"its slots did not answer within {ANSWER_S} s"))
    if cancelled or os.path.exists(f"{jobdir}/cancel"):
        # The slots stay for the next batch: `gpuplan cancel` kills the items' process groups, and
        # the calls running them then return to nobody.
        events.write(t="done", state="cancelled", at=_now())
        return 0
    if capping and not batch.done():  # the items never started stay queued: `run --resume JOB` runs them
        events.write(t="done", state="capped", at=_now())
        return 0
    for s in batch.items.values():
        if s.status == rules.QUEUED:
            events.write(t="end", i=s.index, node="-", slot="-", attempt=s.attempts, start=None, end=None, exit=None,
                         timed_out=False, log=None, status=rules.FAILED, reason="every node was set aside")
            s.status = rules.FAILED
    failed = any(s.status != rules.OK for s in batch.items.values())
    events.write(t="done", state="failed" if failed else "succeeded", at=_now())
    return 0


def _moved_cap(jobdir: str) -> float | None:
    """The cap's new time (epoch seconds) where the client moved it (engine.move_cap), else None."""
    try:
        with open(f"{jobdir}/stop_at") as fh:
            return datetime.fromisoformat(fh.read().strip()).timestamp()
    except (OSError, ValueError):
        return None


def warm(ray, nodes: dict[str, int], code_tag: str) -> None:
    """Start the slots of --per-gpu 1 again on `nodes` (name -> GPUs) after a gang, which took
    their GPUs whole, without waiting for them: the next batch then finds them up. (A batch makes
    any slot it lacks itself and hands nothing out before its slots are up; the engine's start
    makes none.)"""
    ids = _ray_nodes(ray, list(nodes))
    for n in ids:
        gpus = int(nodes[n])  # as the batches count them: the same slot names
        for i in range(max(1, gpus)):
            make_slot(ray, n, ids[n], i, 1, gpus > 0, code_tag)


def _free_pool(ray) -> None:
    """Kill every kept slot actor: they hold the nodes' GPUs, which a gang takes whole."""
    for a in ray.util.list_named_actors(all_namespaces=True):
        if a["namespace"] == POOL_NAMESPACE and a["name"].startswith("slot-"):
            try:
                ray.kill(ray.get_actor(a["name"], namespace=POOL_NAMESPACE))
            except ValueError:
                pass


def kill_job_groups(job: str) -> int:
    """Kill the process group and the container of every item of `job` still running on this
    node (a Ray task)."""
    home = os.path.expanduser(f"~/.gpuplan/jobs/{job}")
    pids = f"{home}/pids"
    killed = 0
    for name in os.listdir(pids) if os.path.isdir(pids) else []:
        try:
            with open(f"{pids}/{name}") as fh:
                pgid = int(fh.read().strip())
        except (OSError, ValueError):
            continue
        _kill_group(pgid, signal.SIGTERM)
        killed += 1
    time.sleep(2)
    for name in os.listdir(pids) if os.path.isdir(pids) else []:
        try:
            with open(f"{pids}/{name}") as fh:
                _kill_group(int(fh.read().strip()), signal.SIGKILL)
        except (OSError, ValueError):
            continue
    containers = f"{home}/containers"
    for name in os.listdir(containers) if os.path.isdir(containers) else []:
        try:
            with open(f"{containers}/{name}") as fh:
                docker, _, container = fh.read().strip().partition("\t")
        except OSError:
            continue
        if container:
            _remove_container(docker, container)
    return killed


def _kill_on(ray, job: str, node_ids: set[str], timeout_s: float = 60) -> None:
    """kill_job_groups on these Ray nodes (best effort: a node gone meanwhile takes its items with it)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    try:
        ray.get([ray.remote(kill_job_groups).options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
            node_id, soft=False)).remote(job) for node_id in node_ids], timeout=timeout_s)
    except Exception:
        pass


def gang(ray, spec: dict, jobdir: str, events: Events, stopped) -> int:
    """`gpuplan run --torchrun`: one rank per node, started together as a gang. A placement group
    with one bundle per node (STRICT_SPREAD) holds every node's GPUs; rank 0 goes to the first
    node in gpuplan's order (the head), and its private address (from gpuplan's state, as its Ray
    node was started with) hosts torchrun's rendezvous. When one rank fails the others are stopped: a
    data-parallel job without one of its ranks only waits."""
    import batch_rules as rules
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

    job, order = spec["job"], list(spec["nodes"])
    left_out = spec.get("left_out") or {}
    wanted = [n for n in order if n not in left_out]
    ids: dict[str, str] = {}
    deadline = time.monotonic() + NODE_WAIT_S
    while time.monotonic() < deadline:
        ids = _ray_nodes(ray, wanted)
        if len(ids) == len(wanted):
            break
        time.sleep(1)
    for name in order:
        if name not in ids:
            code, reason = _absent(rules, name, left_out)
            events.write(t="quarantine", node=name, code=code, reason=reason)
    ranks = [n for n in order if n in ids]
    for r in range(len(ranks), len(wanted)):  # the client counted a rank for a node that is not in Ray now
        events.write(t="end", i=r, node="-", slot="-", attempt=0, start=None, end=None, exit=None, timed_out=False,
                     log=None, status="failed", reason="its node is not in the Ray cluster")
    if not ranks:
        events.write(t="done", state="failed", at=_now())
        return 0
    _free_pool(ray)
    info = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}
    gpus = {name: int(info[ids[name]].get("Resources", {}).get("GPU", 0)) for name in ranks}
    bundles = [{"CPU": 1, **({"GPU": gpus[name]} if gpus[name] else {})} for name in ranks]
    pg = placement_group(bundles, strategy="STRICT_SPREAD", name=f"gang-{job}")
    events.write(t="begin", at=_now(), slots=len(ranks), nodes=ranks)
    if not ray.wait([pg.ready()], timeout=SLOTS_UP_S)[0]:
        remove_placement_group(pg)
        for r, name in enumerate(ranks):
            events.write(t="end", i=r, node=name, slot="-", attempt=1, start=None, end=None, exit=None, timed_out=False,
                         log=None, status="failed", reason="the gang could not be placed: one bundle per node")
        events.write(t="done", state="failed", at=_now())
        return 0
    events.write(t="ready", at=_now())
    where = {b: node_id for b, node_id in placement_group_table(pg)["bundles_to_node_id"].items()}
    name_of = {ids[n]: n for n in ranks}
    bundle_of = {name_of[node_id]: int(b) for b, node_id in where.items()}
    master = (spec.get("addresses") or {}).get(ranks[0]) or info[ids[ranks[0]]]["NodeManagerAddress"]
    task = ray.remote(run_item)
    inflight = {}
    for r, name in enumerate(ranks):
        words = {"{nnodes}": str(len(ranks)), "{node_rank}": str(r), "{nproc}": str(max(1, gpus[name])),
                 "{master_addr}": master}
        argv = [words.get(w, w) for w in spec["argv"]]
        ref = task.options(num_cpus=1, num_gpus=gpus[name], max_retries=0, scheduling_strategy=PlacementGroupSchedulingStrategy(
            pg, placement_group_bundle_index=bundle_of[name])).remote(
            job, r, f"rank{r}", 1, shlex.join(argv), float(spec["timeout_s"]), "", spec.get("workdir") or "")
        inflight[ref] = (r, name)
        events.write(t="start", i=r, node=name, attempt=1, at=_now())
    stopping, killed = "", False
    while inflight:
        ready, _ = ray.wait(list(inflight), num_returns=1, timeout=SLOT_WAIT_S)
        for ref in ready:
            r, name = inflight.pop(ref)
            try:
                res = ray.get(ref)
            except Exception as exc:  # its worker or its node died
                reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
                events.write(t="end", i=r, node=name, slot="-", attempt=1, start=None, end=_now(), exit=None,
                             timed_out=False, log=None, status="failed", reason=reason)
                stopping = stopping or f"rank {r} on {name} was lost"
                continue
            ok = res["exit"] == 0 and not res["timed_out"]
            events.write(t="end", i=r, node=name, slot=res["slot"], attempt=1, start=res["start"], end=res["end"],
                         exit=res["exit"], timed_out=res["timed_out"], log=res["log"], status="ok" if ok else "failed")
            if not ok and not stopping:
                stopping = f"rank {r} on {name} " + ("timed out" if res["timed_out"] else f"failed (exit {res['exit']})")
        if inflight and (stopping or stopped()) and not killed:
            # the other ranks would wait for the one that ended: kill their process groups on their nodes
            killed = True
            try:
                ray.get([ray.remote(kill_job_groups).options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
                    ids[name], soft=False)).remote(job) for _, name in inflight.values()], timeout=60)
            except Exception:  # a node gone meanwhile: its rank ends with it
                pass
        if stopped():
            break
    remove_placement_group(pg)
    # the slots the gang released, started again for the next batch (not waited for)
    warm(ray, {n: spec["nodes"][n] for n in ranks}, spec.get("code_tag", ""))
    if stopped():
        events.write(t="done", state="cancelled", at=_now())
        return 0
    events.write(t="done", state="failed" if stopping else "succeeded", at=_now())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
