"""The run engine: Ray on the cluster, driven from the client over SSH only.

`ensure_up` installs Ray on every node (the `ray` playbook: a pinned Ray in its own venv) and
starts it: the head on node 0, the other nodes joining it over their private addresses. Ray's
ports listen on the nodes' private addresses (the dashboard and its Jobs API on the head's
loopback only) and are never opened to the outside: the client reaches the head through SSH.

A batch is a Ray Job whose driver (ray_driver.py, with batch_rules.py) lives on the head node,
so killing the client, or its laptop sleeping, does not stop it. `submit` sends it over one SSH
connection to the head: the spec on a command's stdin, the driver's code once per version (kept
in ~/.gpuplan/code/<tag>), and the job to Ray's Jobs REST API on the head's loopback through an
SSH tunnel (what `ray job submit` does, without starting Ray's CLI: over a second of CPU). The
driver appends what happens to events.jsonl in the job's folder on the head; `poll` reads it
from where the state says it stopped.

Each node's Ray uses its own range of ports (`Layout`): node i the 100 ports from
port + 100 x i, and its own temp dir, so several nodes can share one machine (the tests'
loopback hosts) as well as one each. Settings (environment): GPUPLAN_RAY_VENV (where nodes keep
Ray; default ~/.gpuplan/ray-<version>), GPUPLAN_RAY_PORT (the head's port, default 6380, as
SkyPilot's Ray: it keeps clear of a user's own Ray on 6379), GPUPLAN_RAY_OBJECT_STORE_MB
(Ray's default where unset; gpuplan moves no data through it).
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from gpuplan.errors import GpuplanError, RemoteError, UsageError
from gpuplan.hosts import remote

if TYPE_CHECKING:
    from gpuplan.store.state import State

RAY_VERSION = "2.60.0"
DEFAULT_PORT = 6380
PORTS_PER_NODE = 100
JOBS_DIR = ".gpuplan/jobs"  # under the SSH user's home on every node
CODE_DIR = ".gpuplan/code"  # on the head: the driver's code, one folder per version (code_tag)
CODE_FILES = ("ray_driver.py", "batch_rules.py")  # what the driver runs, beside each other
START_TIMEOUT_S = 300  # the head's `ray start`: its first on a new machine reads all of Ray from a cold disk
# A worker's `ray start` joins a head that is up (5 s on an idle 2-core machine, 2026-11-29). One that
# cannot reach the head's GCS does not fail: it waited out the whole 300 s, twice, before its node was
# set aside (seen on a loaded machine).
WORKER_START_TIMEOUT_S = 120
DASHBOARD_WAIT_S = 90  # how long a submit waits for the head's Jobs API to come up
HERE = Path(__file__).parent
# The head's `ray start` leaves out Ray's Client server: gpuplan never uses it (the driver joins
# through the GCS, the client reaches the head over SSH and the Jobs API), and it is one more port
# that runs whatever code it is sent, and one more Python process on every start (1.1 s of CPU on
# an idle 2-core machine, about 2 s on a busy one, 2026-11-29). Ray 2.60's `ray start` has no flag
# for that: it starts one wherever grpc imports (scripts.py asks get_ray_client_dependency_error),
# so the head runs Ray's CLI with that question answered "not installed". A Ray that no longer asks
# it starts its Client server as before (tests/test_run_closed.py says so).
NO_CLIENT_SERVER = ("import sys; from ray.scripts import scripts; "
                    "scripts.get_ray_client_dependency_error = lambda: ImportError('left out by gpuplan'); "
                    "sys.argv[0] = 'ray'; sys.exit(scripts.main())")

Progress = Callable[[str], None]


class EngineError(RemoteError):
    """Ray could not be started or reached on the cluster (exit 4, as other remote failures)."""


@dataclass(frozen=True)
class Layout:
    venv: str  # on every node; "$HOME/..." expands there
    port: int  # the head's GCS port
    object_store_mb: int | None = None

    def ray(self) -> str:
        return f'"{self.venv}/bin/ray"'

    def ray_without_client_server(self) -> str:
        """Ray's CLI as `ray`, but a head it starts runs no Ray Client server (NO_CLIENT_SERVER)."""
        return f'"{self.venv}/bin/python" -c {shlex.quote(NO_CLIENT_SERVER)}'

    def base(self, i: int) -> int:
        return self.port + PORTS_PER_NODE * i

    def dashboard_port(self) -> int:
        return self.port + 8

    def temp_dir(self, i: int) -> str:
        return f"/tmp/gpuplan-ray-{self.base(i)}"  # short: Ray's socket paths must fit in 107 bytes

    def address(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port()}"


def layout_of(state: State, cluster: str) -> Layout:
    """The layout the cluster's engine was started with (saved with the cluster before its first
    process started), else this shell's (`layout()`): a teardown from another shell, without the
    run's GPUPLAN_RAY_PORT, still finds every port and temp dir."""
    row = state.cluster(cluster)
    saved = (row.spec.get("engine") if row is not None else None) or {}
    if not saved:
        return layout()
    return Layout(str(saved["venv"]), int(saved["port"]), saved.get("object_store_mb"))


def was_started(state: State, cluster: str) -> bool:
    """Did the engine ever start (or begin to) on this cluster? Its settings were saved first."""
    row = state.cluster(cluster)
    return row is not None and bool(row.spec.get("engine"))


def layout() -> Layout:
    venv = os.environ.get("GPUPLAN_RAY_VENV") or f"$HOME/.gpuplan/ray-{RAY_VERSION}"
    try:
        port = int(os.environ.get("GPUPLAN_RAY_PORT") or DEFAULT_PORT)
        store = int(os.environ["GPUPLAN_RAY_OBJECT_STORE_MB"]) if os.environ.get("GPUPLAN_RAY_OBJECT_STORE_MB") else None
    except ValueError:
        raise UsageError("GPUPLAN_RAY_PORT and GPUPLAN_RAY_OBJECT_STORE_MB must be whole numbers") from None
    if not 1024 <= port <= 65535 - 50 * PORTS_PER_NODE:
        raise UsageError(f"GPUPLAN_RAY_PORT {port}: choose a port from 1024 to {65535 - 50 * PORTS_PER_NODE}")
    return Layout(venv, port, store)


@dataclass(frozen=True)
class Node:
    name: str
    host: remote.Host
    private_ip: str
    gpus: int  # 0: count them on the node (nvidia-smi)
    index: int


@dataclass(frozen=True)
class Engine:
    cluster: str
    nodes: tuple[Node, ...]
    layout: Layout
    # hosts no cloud firewall guards (owned, 高火力 PHY): Ray 2.60.0 listens on all interfaces for
    # some of its servers whatever --node-ip-address says, so each node's own iptables closes
    # its Ray ports to all but the cluster's members (firewall_script)
    host_firewall: bool = False

    @property
    def head(self) -> Node:
        return self.nodes[0]


def engine_of(state: State, cluster: str, hosts: list[remote.Host] | None = None) -> Engine:
    """The cluster's nodes in a fixed order (node 0 is the head), from the state: its live nodes,
    or `hosts`. A node's index (its Ray ports and temp dir) is the number in its name, so it stays
    put when another node is lost or a replacement joins (`run --recover`)."""
    rows = {n.name: n for n in state.nodes(cluster)}
    hosts = remote.cluster_hosts(state, cluster) if hosts is None else hosts

    def number(name: str, position: int) -> int:
        tail = name.rsplit("-", 1)[-1]
        return int(tail) if name.startswith(f"{cluster}-") and tail.isdigit() else position

    ordered = sorted(hosts, key=lambda h: (number(h.name, 0), h.name))
    nodes = tuple(Node(h.name, h, rows[h.name].private_ip or h.address, rows[h.name].gpus, number(h.name, i))
                  for i, h in enumerate(ordered))
    row = state.cluster(cluster)
    return Engine(cluster, nodes, layout_of(state, cluster),
                  host_firewall=row is not None and row.provider in HOST_FIREWALL_PROVIDERS)


# machines whose Ray ports only the node's own iptables can close: owned hosts and 高火力 PHY have
# no cloud firewall, and Sakura VRT's stateless packet filter admits TCP 32768-61000 from anywhere
# (the replies to the servers' own connections), which any port there would be open through
HOST_FIREWALL_PROVIDERS = ("baremetal", "sakura-phy", "sakura")


def _chain(eng: Engine, node: Node, legacy: bool = False) -> str:
    """The node's iptables chain for its Ray ports: per cluster and node's port range (several
    clusters may share one machine, two of one name among them: two users' homes, or tests run at
    once); iptables allows 28 characters. `legacy`: the name before the port range was in it
    (cluster name only), which a teardown removes too."""
    import hashlib

    key = eng.cluster if legacy else f"{eng.cluster}@{eng.layout.base(node.index)}"
    return f"GPUPLAN-RAY-{hashlib.sha1(key.encode()).hexdigest()[:8]}-{node.index}"


def firewall_script(eng: Engine, node: Node) -> str:
    """As root: the node's Ray ports (its 100 from Layout.base) admit only the cluster's members,
    over IPv4 and IPv6 (Ray's servers listen dual-stack: iptables alone leaves them open over
    IPv6), and, on the node itself, only the SSH user's processes (and root's): the Jobs API has
    no authentication, and another local user reaching it would run code as the SSH user. INPUT:
    a member's address or loopback (IPv4; ::1 only where a member has an IPv6 address) passes,
    everything else is dropped; OUTPUT (where the owner of a local connection is known): a
    connection to the range from any other user is refused.
    Idempotent: the chains are rebuilt with today's members and hooked in once. Exits 3 without
    iptables, or without ip6tables on a node with IPv6 (the node is then left out)."""
    b = eng.layout.base(node.index)
    chain, ports = _chain(eng, node), f"{b}:{b + PORTS_PER_NODE - 1}"
    out = _out_chain(eng, node)
    members = sorted({n.private_ip for n in eng.nodes})
    v4 = [ip for ip in members if ":" not in ip]
    v6 = [ip for ip in members if ":" in ip]
    lines = ["command -v iptables >/dev/null || { echo 'iptables not found: Ray ports cannot be closed to the outside;"
             " install iptables'; exit 3; }",
             "v6=ip6tables; command -v ip6tables >/dev/null || { [ -s /proc/net/if_inet6 ] && { echo 'ip6tables not found"
             " on a host with IPv6: Ray ports cannot be closed to it; install ip6tables (the iptables package)'; exit 3; };"
             " v6=:; }",
             # the SSH user, whose processes (Ray's, the driver, gpuplan's tunnel) may reach the ports
             'uid="${SUDO_UID:-$(id -u)}"']
    # IPv6: only the members' IPv6 addresses (and ::1 where there are any): a cluster of IPv4
    # addresses uses none, so Ray's dual-stack ports are closed over IPv6 altogether
    for tool, loop, addrs in (("iptables", ["127.0.0.0/8"], v4), ("$v6", ["::1"] if v6 else [], v6)):
        lines += [f"{tool} -w -N {chain} 2>/dev/null || {tool} -w -F {chain}",
                  *[f"{tool} -w -A {chain} -s {x} -j RETURN" for x in loop],
                  *[f"{tool} -w -A {chain} -s {shlex.quote(ip)} -j RETURN" for ip in addrs],
                  f"{tool} -w -A {chain} -j DROP",
                  f"{tool} -w -C INPUT -p tcp --dport {ports} -j {chain} 2>/dev/null ||"
                  f" {tool} -w -I INPUT -p tcp --dport {ports} -j {chain}",
                  f"{tool} -w -N {out} 2>/dev/null || {tool} -w -F {out}",
                  f'{tool} -w -A {out} -m owner --uid-owner "$uid" -j RETURN',
                  f"{tool} -w -A {out} -m owner --uid-owner 0 -j RETURN",
                  f"{tool} -w -A {out} -p tcp -j REJECT --reject-with tcp-reset",
                  f"{tool} -w -C OUTPUT -o lo -p tcp --dport {ports} -j {out} 2>/dev/null ||"
                  f" {tool} -w -I OUTPUT -o lo -p tcp --dport {ports} -j {out}"]
    return "set -e\n" + "\n".join(lines) + "\n"


def _out_chain(eng: Engine, node: Node, legacy: bool = False) -> str:
    """The node's chain for local connections to its Ray ports (OUTPUT: their owner is known)."""
    return _chain(eng, node, legacy).replace("GPUPLAN-RAY-", "GPUPLAN-RAYO-")


def unfirewall_script(eng: Engine, node: Node) -> str:
    """As root: the node's chains and their hooks removed (after Ray stopped there), IPv4 and IPv6.
    Chains of the legacy name (a cluster started before chains named its port range) lose this
    range's hooks, and go only where no other range still jumps to them."""
    b = eng.layout.base(node.index)
    chain, out, ports = _chain(eng, node), _out_chain(eng, node), f"{b}:{b + PORTS_PER_NODE - 1}"
    old, old_out = _chain(eng, node, legacy=True), _out_chain(eng, node, legacy=True)
    return " ".join(f"command -v {t} >/dev/null && {{ {t} -w -D INPUT -p tcp --dport {ports} -j {chain} 2>/dev/null;"
                    f" {t} -w -F {chain} 2>/dev/null; {t} -w -X {chain} 2>/dev/null;"
                    f" {t} -w -D OUTPUT -o lo -p tcp --dport {ports} -j {out} 2>/dev/null; {t} -w -F {out} 2>/dev/null;"
                    f" {t} -w -X {out} 2>/dev/null;"
                    f" {t} -w -D INPUT -p tcp --dport {ports} -j {old} 2>/dev/null;"
                    f" {t} -w -D OUTPUT -o lo -p tcp --dport {ports} -j {old_out} 2>/dev/null;"
                    f" {t} -w -S 2>/dev/null | grep -q -- '-j {old}$' || {{ {t} -w -F {old} 2>/dev/null;"
                    f" {t} -w -X {old} 2>/dev/null; }};"
                    f" {t} -w -S 2>/dev/null | grep -q -- '-j {old_out}$' || {{ {t} -w -F {old_out} 2>/dev/null;"
                    f" {t} -w -X {old_out} 2>/dev/null; }}; }};" for t in ("iptables", "ip6tables")) + " true"


def _env(eng: Engine, node: Node) -> str:
    # Ray 2.60 opens the autoscaler's and the dashboard's metrics ports on every interface at
    # fixed defaults (44217, 44227) unless told: inside the node's range, they are firewalled too.
    # No workers prestarted for the batch's driver: by default the raylet starts one Python worker
    # per CPU when the first driver registers, for tasks; the driver's items run in its slot
    # actors, one per GPU slot, so on a 96-vCPU machine that was up to 96 idle Ray workers (here,
    # on 2 cores, one idle worker a batch, about 1 s of CPU)
    b = eng.layout.base(node.index)
    return (f"export RAY_USAGE_STATS_ENABLED=0 RAY_prestart_worker_first_driver=0 GPUPLAN_NODE={shlex.quote(node.name)}"
            f" GPUPLAN_RAY_TAG={shlex.quote(eng.cluster)}-{b}"
            f" AUTOSCALER_METRIC_PORT={b + 7} DASHBOARD_METRIC_PORT={b + 10}")


def _start_script(eng: Engine, node: Node) -> str:
    lay, b = eng.layout, eng.layout.base(node.index)
    gpus = str(node.gpus) if node.gpus else "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
    args = [f"--node-ip-address {shlex.quote(node.private_ip)}", f"--temp-dir {lay.temp_dir(node.index)}",
            f"--node-manager-port {b + 1}", f"--object-manager-port {b + 2}",
            f"--dashboard-agent-listen-port {b + 3}", f"--dashboard-agent-grpc-port {b + 4}",
            f"--metrics-export-port {b + 5}", f"--runtime-env-agent-port {b + 6}",
            f"--min-worker-port {b + 20}", f"--max-worker-port {b + 99}",
            "--num-gpus \"$gpus\"", f"--resources '{json.dumps({'gpuplan_node_' + node.name: 1})}'",
            # no log monitor: it tails every worker's log for drivers, and the batch's driver takes none
            # (log_to_driver=False; items log to their own files): one Python process a node for nothing
            "--disable-usage-stats", "--include-log-monitor false"]
    if lay.object_store_mb:
        args.append(f"--object-store-memory {lay.object_store_mb * 2**20}")
    if node.index == 0:
        # no autoscaler monitor: gpuplan sizes the cluster itself, so it would be one more process
        # (and a metrics port) for nothing
        args += ["--head", f"--port {lay.port}", f"--dashboard-port {lay.dashboard_port()}", "--dashboard-host 127.0.0.1",
                 "--no-monitor"]
        ray = lay.ray_without_client_server()
    else:
        args.append(f"--address {shlex.quote(eng.head.private_ip)}:{lay.port}")
        ray = lay.ray()  # a worker node starts no Client server
    return f"{_env(eng, node)}\ngpus={gpus}\n{ray} start {' '.join(args)}\n"


def _running_check(eng: Engine, node: Node) -> str:
    """Exit 0 when this node's raylet (of this layout) is running."""
    return f"pgrep -f -- '[r]aylet/raylet .*{eng.layout.temp_dir(node.index)}/' >/dev/null"


def _warm_check(eng: Engine, node: Node) -> str:
    """Exit 0 when this node has the pinned Ray in its venv (the `ray` playbook's check, read
    from pip's record instead of starting Ray's CLI) and its raylet running."""
    return (f'[ -x "{eng.layout.venv}/bin/python" ] && for d in "{eng.layout.venv}"/lib/python3*/site-packages/'
            f'ray-{RAY_VERSION}.dist-info; do [ -d "$d" ]; done && {_running_check(eng, node)}')


def warm(eng: Engine) -> bool:
    """Every node up as the last start left it: the pinned Ray installed and its raylet running.
    One command per node, all at once (about 0.2 s for 4 nodes): a submission to a warm cluster
    skips the `ray` playbook, whose check starts Ray's CLI on every node (1.3 s of CPU each).
    Anything else (a node unreachable, its host key changed, Ray missing or stopped) is False:
    `ensure_up` then takes its full path, which starts what is missing and says why a node is out.
    The head's connection is kept for the submission that follows (`_head_connection`)."""
    def check(h: remote.Host) -> bool:
        conn = remote.connect(h)
        ok = False
        try:
            ok = conn.run(_warm_check(eng, _node(eng, h)), timeout=30).ok
        finally:
            if ok and h == eng.head.host:
                _keep(h, conn)
            else:
                conn.close()
        return ok

    got = remote.run_many([n.host for n in eng.nodes], check)
    return all(ok is True for ok in got)


KEEP_S = 30  # how long the head's connection from `warm` waits for the submission
_kept: dict[remote.Host, tuple[remote.Connection, float]] = {}


def _keep(host: remote.Host, conn: remote.Connection) -> None:
    old = _kept.pop(host, None)
    if old is not None:
        old[0].close()
    _kept[host] = (conn, time.monotonic())


def _head_connection(host: remote.Host) -> tuple[remote.Connection, bool]:
    """The connection `warm` kept to the head, if fresh (saves an SSH handshake per submission),
    else a new one; and whether it was kept (a kept one that has dropped is replaced once)."""
    kept = _kept.pop(host, None)
    if kept is not None and time.monotonic() - kept[1] < KEEP_S:
        return kept[0], True
    if kept is not None:
        kept[0].close()
    return remote.connect(host), False


STOP_WAIT_S = 20  # how long stop_script keeps finding and killing before it says what is left


def stop_script(eng: Engine, node: Node) -> str:
    """Stop this node's Ray and everything started under it, and say what could not be stopped.
    A process is the node's Ray's when its environment carries GPUPLAN_RAY_TAG, or when it holds
    a file open in the node's temp dir: Ray rewrites the environment of the agents it renames
    (ray::DashboardAgent, ray::RuntimeEnvAgent), but their logs stay open there. Found and killed
    again until none is left (STOP_WAIT_S at most); then the temp dir goes. Prints one line
    `left PID NAME` per process still there and `listening PORT` per TCP port of the node's range
    still listening (whoever holds it: nothing outside the two marks is killed); none when clean."""
    b = eng.layout.base(node.index)
    tag, temp = f"GPUPLAN_RAY_TAG={eng.cluster}-{b}", eng.layout.temp_dir(node.index)
    return f"""set +e
tag={shlex.quote(tag)}; temp={shlex.quote(temp)}; lo={b}; hi={b + PORTS_PER_NODE - 1}
# one grep and one find over all of /proc (a process or two per process listed cost seconds of
# CPU per pass on a node running hundreds)
ours() {{
  {{ grep -lzxF -- "$tag" /proc/[0-9]*/environ; find /proc/[0-9]*/fd -maxdepth 1 -lname "$temp/*"; }} 2>/dev/null |
    cut -d/ -f3 | sort -un | grep -vxF "$$"
}}
# done when two passes 0.3 s apart find nothing: a process mid-fork or mid-exec as a pass reads
# /proc (its environment unreadable for that moment) is found by the next one
end=$((SECONDS + {STOP_WAIT_S})); empty=0
while :; do
  pids=$(ours)
  if [ -n "$pids" ]; then empty=0; kill -9 $pids 2>/dev/null; else empty=$((empty + 1)); fi
  [ "$empty" -lt 2 ] && [ $SECONDS -lt $end ] || break
  sleep 0.3
done
for p in $(ours); do echo "left $p $(tr -d '\\n' 2>/dev/null < /proc/$p/comm)"; done
for f in /proc/net/tcp /proc/net/tcp6; do
  [ -r "$f" ] || continue
  while read -r _ local _ st _; do
    [ "$st" = 0A ] || continue
    port=$((16#${{local##*:}}))
    [ "$port" -ge "$lo" ] && [ "$port" -le "$hi" ] && echo "listening $port"
  done < <(tail -n +2 "$f")
done
rm -rf "$temp"
exit 0
"""


def _leftovers(text: str) -> list[str]:
    """stop_script's own report lines (`left PID NAME`, `listening PORT`), in words."""
    out = []
    for line in text.splitlines():
        word, _, rest = line.partition(" ")
        if word == "left":
            out.append(f"process {rest.strip()}")
        elif word == "listening":
            out.append(f"a listener on port {rest.strip()}")
    return out


def ensure_up(state: State, cluster: str, progress: Progress = lambda _m: None) -> tuple[Engine, dict[str, str]]:
    """Ray installed and running on every node it can be: installs with the `ray` playbook
    (skipped where the pinned version is there), then starts the head if it is not running
    (restarting every node) and any worker that is not. Returns the engine and the nodes left
    out, each with why (host key refused, unreachable, install or start failed): the batch sets
    them aside and their items go to the others. The head must be usable."""
    from gpuplan.hosts import playbook

    if not was_started(state, cluster):  # saved before anything of it runs: teardown finds it by these
        lay = layout()
        state.record_engine(cluster, {"venv": lay.venv, "port": lay.port, "object_store_mb": lay.object_store_mb})
    eng = engine_of(state, cluster)
    if warm(eng):
        return eng, {}
    report = playbook.bootstrap_cluster(state, cluster, ["ray"], {"ray_venv": eng.layout.venv, "ray_version": RAY_VERSION},
                                        progress=lambda m: progress(m) if "already done" not in m else None,
                                        raise_on_failure=False)
    out = {h.host: _why(h.error) for h in report.hosts if not h.ok}
    up = remote.run_many([n.host for n in eng.nodes if n.name not in out],
                         lambda h: remote.run(h, _running_check(eng, _node(eng, h)), timeout=30).ok)
    running = set()
    for n, ok in zip([n for n in eng.nodes if n.name not in out], up):
        if isinstance(ok, BaseException):
            out[n.name] = _why(str(ok), ok)
        elif ok:
            running.add(n.name)
    if eng.head.name in out:
        raise EngineError(f"the head node {eng.head.name} cannot run Ray: {out[eng.head.name]}")
    started = eng.head.name not in running
    if started:
        running = set()
        remote.run_many([n.host for n in eng.nodes[1:] if n.name not in out], lambda h: _stop_node(eng, _node(eng, h)))
        progress(f"starting Ray {RAY_VERSION} head on {eng.head.name}")
        _start(eng, eng.head, progress)
    todo = [n for n in eng.nodes[1:] if n.name not in running and n.name not in out]
    if todo and running and eng.host_firewall:  # a node joins running ones (run --recover): they admit it first
        remote.run_many([n.host for n in eng.nodes if n.name in running], lambda h: _close_ports(eng, _node(eng, h)))
    if todo:
        progress(f"starting Ray on {', '.join(n.name for n in todo)}")
        for n, o in zip(todo, remote.run_many([n.host for n in todo], lambda h: _start(eng, _node(eng, h), progress))):
            if isinstance(o, BaseException):
                out[n.name] = _why(str(o), o)
    for name, why in out.items():
        progress(f"{name} set aside: {why}")
    return eng, out


NOT_STARTED = "Ray could not be installed or started"  # a node left out for its own Ray, not for SSH


def _why(text: str | None, exc: BaseException | None = None) -> str:
    """A node left out, in one line that starts with what kind of failure it was."""
    kind = ("host key refused" if isinstance(exc, remote.HostKeyChanged) else "login refused"
            if isinstance(exc, remote.LoginRefused) else NOT_STARTED
            if isinstance(exc, EngineError) else "unreachable" if isinstance(exc, RemoteError) else "")
    line = " ".join((text or "").split())
    if not kind:
        kind = ("host key refused" if "host key" in line and "changed" in line else "unreachable" if "cannot connect" in line
                else NOT_STARTED)
    return f"{kind}: {line}"[:400]


def _node(eng: Engine, host: remote.Host) -> Node:
    return next(n for n in eng.nodes if n.name == host.name)


def _close_ports(eng: Engine, node: Node) -> None:
    """The node's Ray ports closed to all but loopback and today's members (firewall_script)."""
    r = remote.run(node.host, "bash -c " + shlex.quote(firewall_script(eng, node)), timeout=60, sudo=True)
    if not r.ok:
        raise EngineError(f"{node.name}: Ray's ports could not be closed to all but the cluster (exit {r.exit_code}):"
                          f" {r.why()}")


def _start(eng: Engine, node: Node, progress: Progress = lambda _m: None) -> None:
    """`ray start` on the node, tried a second time after a failure: on a busy machine Ray's own
    waits for its processes (GCS, raylet) run out now and then, and a second start after the
    cleanup usually makes it. What a failed start left (processes, temp dir, chain) goes first."""
    for attempt in (1, 2):
        if eng.host_firewall:  # before Ray listens: closed to the outside from its first second
            _close_ports(eng, node)
        r = remote.run(node.host, "bash -s", timeout=START_TIMEOUT_S if node.index == 0 else WORKER_START_TIMEOUT_S,
                       stdin=_start_script(eng, node))
        if r.ok:
            return
        why = f"{node.name}: `ray start` failed (exit {r.exit_code}): {r.why()}"
        try:
            _stop_node(eng, node)
            if eng.host_firewall:
                remote.run(node.host, unfirewall_script(eng, node), timeout=60, sudo=True)
        except GpuplanError:
            pass
        if attempt == 1:
            progress(f"{why}; cleaned up, starting it once more")
    error = EngineError(why)
    error.detail = r.tail(40)  # what --debug shows besides
    raise error


def _stop_node(eng: Engine, node: Node) -> list[str]:
    """stop_script on one node; what it could not stop, in words (empty: all gone)."""
    r = remote.run(node.host, "bash -c " + shlex.quote(stop_script(eng, node)), timeout=STOP_WAIT_S + 60)
    return _leftovers(r.stdout)


@dataclass(frozen=True)
class Stopped:
    """What stopping the engine left: per node, what could not be stopped there, and the nodes
    that could not be reached (with why)."""

    left: dict[str, str]
    unreachable: dict[str, str]


def stop(eng: Engine) -> Stopped:
    """Stop Ray on every node, then drop each node's firewall chain where nothing of it is left."""
    results = remote.run_many([n.host for n in eng.nodes], lambda h: _stop_node(eng, _node(eng, h)))
    left: dict[str, str] = {}
    unreachable: dict[str, str] = {}
    for n, r in zip(eng.nodes, results):
        if isinstance(r, BaseException):
            unreachable[n.name] = " ".join(str(r).split())
        elif r:
            left[n.name] = "; ".join(r)
    if eng.host_firewall:
        clean = [n.host for n in eng.nodes if n.name not in left and n.name not in unreachable]
        remote.run_many(clean, lambda h: remote.run(h, unfirewall_script(eng, _node(eng, h)), timeout=60, sudo=True))
    return Stopped(left, unreachable)


def stop_all(state: State, cluster: str) -> Stopped:
    """Before a teardown: stop Ray and every process started under it on every node that may
    still run it (lost ones too), as far as they can be reached."""
    hosts = remote.hosts_to_stop(state, cluster)
    if not hosts:  # no node with an address, a key and a pinned host key: nothing was started
        return Stopped({}, {})
    return stop(engine_of(state, cluster, hosts))


# --- jobs ---------------------------------------------------------------------------------


def _jobdir(job: str) -> str:
    return f"$HOME/{JOBS_DIR}/{job}"


def driver_tag() -> str:
    """Names the driver's code: slots kept from a batch run by other code are made again."""
    import hashlib

    return hashlib.sha256((HERE / "ray_driver.py").read_bytes()).hexdigest()[:10]


def code_tag() -> str:
    """Names one version of the driver's code (CODE_FILES): its folder on the head, which a
    submission uploads only when it is missing or differs (`cat CODE_FILES | sha256sum` there)."""
    import hashlib

    h = hashlib.sha256()
    for f in CODE_FILES:
        h.update((HERE / f).read_bytes())
    return h.hexdigest()[:16]


def submit(eng: Engine, job: str, spec: dict, env: Mapping[str, str] | None = None, env_of: str | None = None) -> None:
    """Put the batch's spec (and the driver's code, where the head lacks this version) on the
    head and start the driver there as a Ray Job, over one SSH connection: one command writes the
    spec from its stdin and says whether the code is there, then the job goes to Ray's Jobs REST
    API on the head's loopback through an SSH tunnel (`POST /api/jobs/`, as `ray job submit
    --no-wait` sends it).

    `env`: the batch's `env:`, written from stdin into env.json in the job's folder (mode 0600,
    the folder 0700), where the driver reads it: its values are in no argv, spec or state. Without
    one, `env_of` (the job this one resumes) lends its env.json, kept on the head."""
    import secrets

    d, tag = _jobdir(job), code_tag()
    code = f"$HOME/{CODE_DIR}/{tag}"
    first = (f"mkdir -p {d} {code} && chmod 700 {d} && cat > {d}/spec.json && echo \"$HOME\" && cd {code} &&"
             f" {{ cat {' '.join(CODE_FILES)} 2>/dev/null | sha256sum; }}")
    conn, kept = _head_connection(eng.head.host)
    try:
        try:
            r = conn.run(first, timeout=120, stdin=json.dumps(spec))
        except RemoteError:
            if not kept:
                raise
            conn.close()  # the kept connection dropped: the command never started
            conn = remote.connect(eng.head.host)
            r = conn.run(first, timeout=120, stdin=json.dumps(spec))
        lines = r.stdout.split("\n")
        if not r.ok or len(lines) < 2:
            raise EngineError(f"{eng.head.name}: cannot write the job's spec: {r.why()}")
        if env or env_of:
            put = (f"(umask 077 && cat > {d}/env.json)" if env else
                   f"if [ -f {_jobdir(env_of or '')}/env.json ]; then cp -p {_jobdir(env_of or '')}/env.json {d}/env.json; fi")
            r = conn.run(put, timeout=60, stdin=json.dumps(dict(env)) if env else None)
            if not r.ok:
                raise EngineError(f"{eng.head.name}: cannot write the job's environment: {r.why()}")
        home = lines[0].strip()
        where, code = f"{home}/{JOBS_DIR}/{job}", f"{home}/{CODE_DIR}/{tag}"
        if lines[1][:16] != tag:  # this version of the driver is not on the head (or not whole): upload it
            part = secrets.token_hex(4)
            for f in CODE_FILES:
                conn.put(HERE / f, f"{code}/{f}.{part}")
            r = conn.run(" && ".join(f"mv -f {shlex.quote(f'{code}/{f}.{part}')} {shlex.quote(f'{code}/{f}')}"
                                     for f in CODE_FILES), timeout=60)
            if not r.ok:
                raise EngineError(f"{eng.head.name}: cannot put the driver's code in place: {r.why()}")
        entrypoint = (f'"{eng.layout.venv}/bin/python" {shlex.quote(f"{code}/ray_driver.py")}'
                      f" {shlex.quote(f'{where}/spec.json')}")
        _submit_job(conn, eng, job, entrypoint)
    finally:
        conn.close()


def _submit_job(conn: remote.Connection, eng: Engine, job: str, entrypoint: str) -> None:
    """POST the job to the Jobs API. It comes up seconds after `ray start` returns (later on a
    busy head): a tunnel it refuses, or its "no available agent" answer, is tried again for
    DASHBOARD_WAIT_S (nothing was created); a job that exists already on a try after the first
    was made by an earlier try whose answer was lost."""
    body = json.dumps({"entrypoint": entrypoint, "submission_id": job, "runtime_env": {}, "metadata": {}})
    deadline = time.monotonic() + DASHBOARD_WAIT_S
    tries = 0
    while True:
        tries += 1
        try:
            status, text = _http(conn, eng.layout.dashboard_port(), "POST", "/api/jobs/", body)
        except Exception as exc:  # the tunnel refused (nothing listens yet) or broke off
            status, text = 0, f"the Jobs API on {eng.head.name}'s loopback cannot be reached: {exc}"
        if status == 200:
            return
        if "already exists" in text:
            if tries > 1:
                return
            raise EngineError(f"{eng.head.name}: Ray already has a job {job}: {text.strip()[-300:]}")
        again = status == 0 or status in (502, 503, 504) or "No available agent" in text
        if not again or time.monotonic() > deadline:
            raise EngineError(f"{eng.head.name}: the Ray job was not submitted ({status or 'no answer'}):"
                              f" {' '.join(text.split())[-600:]}")
        time.sleep(1)


def _http(conn: remote.Connection, port: int, method: str, path: str, body: str = "",
          timeout: float = 60) -> tuple[int, str]:
    """One HTTP request to 127.0.0.1:port on the host, through an SSH tunnel: (status, body)."""
    import http.client

    chan = conn.open_tunnel("127.0.0.1", port)
    try:
        chan.settimeout(timeout)
        data = body.encode()
        chan.sendall(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
        resp = http.client.HTTPResponse(chan)  # reads through the channel's makefile, as a socket's
        resp.begin()
        return resp.status, resp.read().decode(errors="replace")
    finally:
        chan.close()


def push_workdir(eng: Engine, job: str, local_dir: Path) -> str:
    """Copy a local folder to every node (as SkyPilot's workdir) into the job's folder there;
    returns its path on the nodes ("~/..."), where the items run."""
    import tarfile
    import tempfile

    where = f"{JOBS_DIR}/{job}/workdir"
    with tempfile.TemporaryDirectory() as tmp:
        bundle = Path(tmp) / "workdir.tar.gz"
        with tarfile.open(bundle, "w:gz") as tar:
            tar.add(local_dir, arcname=".")

        def push(host: remote.Host) -> None:
            with remote.connect(host) as conn:
                home = conn.run(f"mkdir -p $HOME/{where} && echo $HOME", timeout=60).stdout.strip()
                conn.put(bundle, f"{home}/{JOBS_DIR}/{job}/workdir.tar.gz")
                r = conn.run(f"tar xzf $HOME/{JOBS_DIR}/{job}/workdir.tar.gz -C $HOME/{where}"
                             f" && rm $HOME/{JOBS_DIR}/{job}/workdir.tar.gz", timeout=600)
                if not r.ok:
                    raise EngineError(f"{host.name}: could not unpack the workdir: {r.why()}")

        errors = [str(o) for o in remote.run_many([n.host for n in eng.nodes], push) if isinstance(o, BaseException)]
    if errors:
        raise EngineError("; ".join(errors))
    return f"~/{where}"


def fetch_outputs(host: remote.Host, job: str, indexes: Sequence[int], into: Path,
                  skipped: list[str] | None = None) -> list[int]:
    """Copy the output dirs of these items (~/.gpuplan/jobs/<job>/out/<index>, where an item
    writes through $GPUPLAN_OUTPUT_DIR or {out}) from one node into `into`/<index>; returns the
    indexes that had one there. Only folders and regular files come back: a link (to
    /etc/passwd, say) or a device an item left is skipped, its path added to `skipped`."""
    import secrets
    import tarfile
    import tempfile

    out = f"$HOME/{JOBS_DIR}/{job}/out"
    bundle = f"{JOBS_DIR}/{job}/fetch-{secrets.token_hex(4)}.tar.gz"
    with remote.connect(host) as conn:
        r = conn.run(f"cd {out} 2>/dev/null || exit 0; found=''; for i in {' '.join(str(int(i)) for i in indexes)}; do"
                     f' [ -d "$i" ] && found="$found $i"; done; [ -n "$found" ] || exit 0;'
                     f" tar czf $HOME/{bundle} $found && echo $HOME && echo $found", timeout=600)
        if not r.ok:
            raise EngineError(f"{host.name}: cannot pack the outputs of job {job}: {r.why()}")
        lines = r.stdout.split("\n")
        if len(lines) < 2 or not lines[0].strip():
            return []
        home, found = lines[0].strip(), [int(i) for i in lines[1].split()]
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / "out.tar.gz"
            try:
                conn.get(f"{home}/{bundle}", local)
            finally:
                conn.run(f"rm -f $HOME/{bundle}", timeout=60)
            with tarfile.open(local) as tar:
                tar.extractall(into, filter=_regular_only(skipped if skipped is not None else []))
    return found


def _regular_only(skipped: list[str]):
    """A tar filter for fetched outputs: folders and regular files as the "data" filter passes
    them (no path leaving the folder); links, devices and what that filter refuses are left out
    and named in `skipped`, so one bad entry costs only itself, not the whole fetch."""
    import tarfile

    def keep(member, dest):
        if not (member.isfile() or member.isdir()):
            skipped.append(member.name)
            return None
        try:
            return tarfile.data_filter(member, dest)
        except tarfile.FilterError:
            skipped.append(member.name)
            return None

    return keep


@dataclass(frozen=True)
class Poll:
    events: list[dict]
    offset: int  # bytes of events.jsonl read, up to the last whole line
    driver_alive: bool


def poll(host: remote.Host, job: str, offset: int, conn: remote.Connection | None = None,
         max_bytes: int = 8 * 2**20) -> Poll:
    """The events the driver wrote after `offset` (at most max_bytes at a time), and whether it still runs."""
    d = _jobdir(job)
    cmd = (f"if [ -f {d}/driver.pid ] && kill -0 $(cat {d}/driver.pid) 2>/dev/null; then echo alive; else echo ended; fi;"
           f" tail -c +{offset + 1} {d}/events.jsonl 2>/dev/null | head -c {max_bytes}")
    r = conn.run(cmd, timeout=60) if conn else remote.run(host, cmd, timeout=60)
    if r.exit_code != 0:
        raise EngineError(f"{host.name}: cannot read the job's events: {r.why()}")
    status, _, body = r.stdout.partition("\n")
    whole = body[: body.rfind("\n") + 1] if "\n" in body else ""
    events = [json.loads(line) for line in whole.splitlines() if line.strip()]
    return Poll(events, offset + len(whole.encode()), status.strip() == "alive")


def cancel(eng: Engine, job: str, wait_s: float = 15) -> int:
    """Stop the job: the driver hands out nothing more and ends (a `cancel` file it looks for
    twice a second; `ray job stop` if it has not ended within wait_s), then the process group of
    every item it started is killed on every node. Returns how many groups were still there."""
    d = _jobdir(job)
    lay = eng.layout
    wait = (f"mkdir -p {d} && touch {d}/cancel; for i in $(seq {int(wait_s * 5)}); do"
            f" [ -f {d}/driver.pid ] && kill -0 $(cat {d}/driver.pid) 2>/dev/null || exit 0; sleep 0.2; done;"
            f" {_env(eng, eng.head)}; {lay.ray()} job stop --address {lay.address()} --no-wait {shlex.quote(job)}"
            " >/dev/null 2>&1;"
            f" [ -f {d}/driver.pid ] && kill -9 $(cat {d}/driver.pid) 2>/dev/null; true")
    remote.run(eng.head.host, wait, timeout=wait_s + 120)
    kill = (f"n=0; for round in 1 2; do for f in {d}/pids/*; do [ -f \"$f\" ] || continue; p=$(cat \"$f\");"
            " kill -TERM -- -$p 2>/dev/null && n=$((n+1)); sleep 0.2; kill -KILL -- -$p 2>/dev/null; rm -f \"$f\"; done;"
            " sleep 1; done; echo $n")
    counts = remote.run_many([n.host for n in eng.nodes], lambda h: remote.run(h, kill, timeout=120))
    return sum(int(c.stdout.strip() or 0) for c in counts if isinstance(c, remote.Result) and c.stdout.strip().isdigit())


def move_cap(eng: Engine, job: str, stop_at: datetime) -> None:
    """Tell the job's driver its yen cap is now `stop_at` (earlier than it was: ray_driver reads
    the file every 2 s and only ever moves the cap earlier)."""
    d = _jobdir(job)
    at = shlex.quote(stop_at.astimezone(timezone.utc).isoformat())
    r = remote.run(eng.head.host, f"mkdir -p {d} && printf %s {at} > {d}/stop_at.new && mv {d}/stop_at.new {d}/stop_at",
                   timeout=60)
    if not r.ok:
        raise RemoteError(f"could not move job {job}'s yen cap on {eng.head.name}: {r.why()}")


def driver_logs(eng: Engine, job: str) -> str:
    lay = eng.layout
    r = remote.run(eng.head.host, f"{_env(eng, eng.head)}; {lay.ray()} job logs --address {lay.address()} {shlex.quote(job)}",
                   timeout=120)
    return r.stdout + r.stderr


def stream(host: remote.Host, cmd: str, out: Callable[[str], None], until: Callable[[], bool], every_s: float = 1.0) -> None:
    """Print a log as it grows (`logs -f`): re-read the new bytes every second until `until()`."""
    offset = 0
    with remote.connect(host) as conn:
        while True:
            r = conn.run(f"tail -c +{offset + 1} {cmd}", timeout=60)
            if r.stdout:
                out(r.stdout)
                offset += len(r.stdout.encode())
            if until():
                r = conn.run(f"tail -c +{offset + 1} {cmd}", timeout=60)
                if r.stdout:
                    out(r.stdout)
                return
            time.sleep(every_s)


def serve_dashboard(eng: Engine, local_port: int, ready: Callable[[int], None], stop: Callable[[], bool]) -> None:
    """Forward 127.0.0.1:local_port on this machine to Ray's dashboard on the head's loopback,
    through one SSH connection, until stop() (Ray's ports stay closed to the outside)."""
    import select
    import socket
    import threading

    def pump(a, b) -> None:
        try:
            while True:
                r, _, _ = select.select([a, b], [], [], 1.0)
                for src in r:
                    data = src.recv(65536)
                    if not data:
                        return
                    (b if src is a else a).sendall(data)
        except OSError:
            return
        finally:
            a.close()
            b.close()

    with remote.connect(eng.head.host) as conn, socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", local_port))
        server.listen(16)
        server.settimeout(0.5)
        ready(server.getsockname()[1])
        while not stop():
            try:
                client, _ = server.accept()
            except TimeoutError:
                continue
            try:
                chan = conn.open_tunnel("127.0.0.1", eng.layout.dashboard_port())
            except Exception:  # the dashboard is not up: drop this request, keep serving
                client.close()
                continue
            threading.Thread(target=pump, args=(client, chan), daemon=True).start()


def node_hosts(eng: Engine) -> dict[str, remote.Host]:
    return {n.name: n.host for n in eng.nodes}


__all__ = ["Engine", "EngineError", "GpuplanError", "ensure_up", "submit", "poll", "cancel"]
