"""Ray for the run-engine tests: one venv on this machine that every loopback "node" uses.

scripts/test.sh builds it (`pip install ray[default]==<RAY_VERSION>` into VENV); a test that
needs it calls `ray_venv()`, which skips with the reason when it is missing. Each test cluster's
Ray nodes get their own ports (a free range per cluster) and temp dirs (engine.Layout), and a
small object store; `stop_ray(tag)` kills by pid every process started under that cluster's Ray.
"""

from __future__ import annotations

import os
import random
import signal
import socket
from contextlib import contextmanager
from pathlib import Path

from gpuplan.run.ray.engine import PORTS_PER_NODE, RAY_VERSION

VENV = Path(os.environ.get("GPUPLAN_TEST_RAY_VENV") or f"/tmp/gpuplan-test-ray-{RAY_VERSION}")


def ray_venv() -> Path:
    """VENV, when it holds the pinned Ray: its `ray` script and pip's record of that version (as
    the engine's warm check reads it; `ray --version` imports Ray, over a second of CPU a call,
    and the fixtures called this 35 times a run). Skips the test with what to do otherwise."""
    import pytest

    if not (os.access(VENV / "bin" / "ray", os.X_OK) and any(VENV.glob(f"lib/python3*/site-packages/ray-{RAY_VERSION}.dist-info"))):
        pytest.skip(f"Ray {RAY_VERSION} for the tests is not installed at {VENV}: scripts/test.sh builds it"
                    f" (python3 -m venv {VENV} && {VENV}/bin/pip install 'ray[default]=={RAY_VERSION}')")
    return VENV


def port_band() -> tuple[int, int]:
    """Where this test process picks its Ray clusters' ports: below the kernel's ephemeral ports
    (an outgoing connection's source port, or a loopback sshd's port 0, taken in a Ray range makes
    its server fail to bind), one band per pytest-xdist worker, so that tests run at once never
    pick overlapping ranges and each worker's checks see only its own clusters (ours)."""
    lo, hi = 20000, 32700
    try:
        hi = min(hi, int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0]) - 1)
    except (OSError, ValueError, IndexError):
        pass
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if worker[2:].isdigit() and count > 1:
        width = (hi - lo) // count
        lo, hi = lo + int(worker[2:]) * width, lo + (int(worker[2:]) + 1) * width
    return lo, hi


def ours(environ: bytes) -> bool:
    """Is a process with this /proc environ none of another pytest-xdist worker's? Everything
    started through a loopback host carries the worker that started the host
    (GPUPLAN_TEST_WORKER, support/sshd.py); a Ray node's processes also carry their tag,
    CLUSTER-BASEPORT, whose port is in the band of the worker that picked it."""
    me = (os.environ.get("PYTEST_XDIST_WORKER") or "main").encode()
    lo, hi = port_band()
    fields = environ.split(b"\0")
    for v in fields:
        if v.startswith(b"GPUPLAN_TEST_WORKER="):
            return v.split(b"=", 1)[1] == me
    for v in fields:
        if v.startswith(b"GPUPLAN_RAY_TAG="):
            tail = v.rsplit(b"-", 1)[-1]
            return not tail.isdigit() or lo <= int(tail) < hi
    return True


def free_port_range(nodes: int) -> int:
    """A base port whose PORTS_PER_NODE x nodes ports are all free on loopback now, in this
    process's band."""
    lo, hi = port_band()
    for _ in range(200):
        base = random.randrange(lo, hi - PORTS_PER_NODE * nodes, 100)
        try:
            for p in range(base, base + PORTS_PER_NODE * nodes):
                with socket.socket() as s:
                    s.bind(("0.0.0.0", p))
            return base
        except OSError:
            continue
    raise RuntimeError("no free range of ports for Ray")


def tagged_pids(tag_prefix: str) -> list[int]:
    """Processes whose environment has GPUPLAN_RAY_TAG starting with `tag_prefix`."""
    want = f"GPUPLAN_RAY_TAG={tag_prefix}".encode()
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            env = (d / "environ").read_bytes()
        except OSError:
            continue
        if any(v.startswith(want) for v in env.split(b"\0")) and ours(env):
            pids.append(int(d.name))
    return pids


def stop_ray(tag_prefix: str, port: int | None = None, nodes: int = 0) -> None:
    """Kill every process started under these Ray nodes; with the layout's port and node count,
    also those holding a file in their temp dirs (the agents Ray renames lose their tag, as
    engine.stop_script knows), then remove the temp dirs (/tmp/gpuplan-ray-<port>)."""
    import shutil

    from gpuplan.run.ray.engine import Layout

    dirs = [Layout("", port).temp_dir(i) for i in range(nodes)] if port is not None else []
    doomed = set(tagged_pids(tag_prefix))
    doomed |= {pid for pid, targets in _open_files() if pid != os.getpid()
               and any(t.startswith(d + "/") for t in targets for d in dirs)}
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


def processes_running(argv: list[str]) -> list[int]:
    """Pids whose command line is exactly `argv` (zombies, and another worker's Ray items, left out)."""
    want = "\0".join(argv).encode() + b"\0"
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if (d / "cmdline").read_bytes() == want and (d / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z" \
                    and ours((d / "environ").read_bytes()):
                found.append(int(d.name))
        except OSError:
            continue
    return found


@contextmanager
def loopback_ray_cluster(home: Path, cluster: str, price_jpy_per_hour, gpus: int = 2, provider: str = "baremetal",
                         host_env: list[dict[str, str]] | None = None):
    """Two loopback sshd hosts recorded as the ready cluster `cluster` (each node `gpus` GPUs,
    priced per hour; recorded as made by `provider`, whose machines the engine treats as such)
    under a GPUPLAN_HOME in `home`, its Ray started by the engine itself; yields (state, hosts,
    home). `host_env`: more variables each host's logins (and so its Ray) get. Ray and the hosts
    are stopped on the way out; nothing is asked of `provider` itself."""
    import pytest

    from support.sshd import start_hosts, stop_hosts

    venv = ray_venv()
    hosts = start_hosts(2, home, host_env=host_env)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPUPLAN_HOME", str(home / "gpuplan-home"))
        mp.setenv("GPUPLAN_RAY_VENV", str(venv))
        port = free_port_range(2)
        mp.setenv("GPUPLAN_RAY_PORT", str(port))
        mp.setenv("GPUPLAN_RAY_OBJECT_STORE_MB", "80")
        mp.setenv("GPUPLAN_POLL_S", "0.3")
        from gpuplan import paths
        from gpuplan.run.ray import engine
        from gpuplan.store.state import State

        state = State(paths.state_db())
        state.add_cluster(cluster, provider, "loopback", "Standard_NC24", 2, ssh_user="root",
                          price_jpy_per_hour=price_jpy_per_hour)
        state.save_ssh_key(cluster, hosts[0].client_key_path, "")
        for i, h in enumerate(hosts):
            state.add_node(cluster, f"{cluster}-{i}", gpus=gpus)
            state.update_node(cluster, f"{cluster}-{i}", status="running", public_ip=h.host, private_ip=h.host,
                              ssh_port=h.port, provider_id=f"bm-{i}")
            state.pin_host_key(h.host, h.port, h.host_public_key, cluster=cluster, node=f"{cluster}-{i}")
        state.set_cluster_status(cluster, "ready")
        try:
            engine.ensure_up(state, cluster)
            yield state, hosts, home
        finally:
            stop_ray(f"{cluster}-", port, 2)
            state.close()
            stop_hosts(hosts)


def engine_remains(port: int, nodes: int) -> list[str]:
    """What is left of a cluster's Ray nodes on this machine (the tests' loopback hosts), found by
    what survives Ray renaming its agents: a process holding a file open in a node's temp dir,
    a TCP port of a node's range still listening, the temp dir itself. Empty: nothing."""
    from gpuplan.run.ray.engine import Layout

    lay = Layout("", port)
    dirs = [lay.temp_dir(i) for i in range(nodes)]
    ranges = [(lay.base(i), lay.base(i) + PORTS_PER_NODE - 1) for i in range(nodes)]
    left = [f"temp dir {d}" for d in dirs if Path(d).exists()]
    for pid, targets in _open_files():
        if pid != os.getpid() and any(t.startswith(d + "/") for t in targets for d in dirs):
            left.append(f"process {pid} holding a file in a temp dir")
    left += [f"a listener on port {port}" for port, _, _ in _listening() if any(lo <= port <= hi for lo, hi in ranges)]
    return left


def _open_files():
    """(pid, what each of its file descriptors points at) for every process that can be read."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            yield int(proc.name), [os.readlink(fd) for fd in (proc / "fd").iterdir()]
        except OSError:
            continue


def _listening():
    """(port, address, socket inode) of every TCP socket listening on this machine."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A":
                address, hex_port = fields[1].rsplit(":", 1)
                yield int(hex_port, 16), address, fields[9]


def engine_listening(port: int, nodes: int, tag_prefix: str) -> dict[int, str]:
    """The TCP ports the cluster's Ray processes listen on (port -> address), on this machine:
    processes tagged `tag_prefix` or holding a file in a node's temp dir."""
    from gpuplan.run.ray.engine import Layout

    lay = Layout("", port)
    dirs = [lay.temp_dir(i) for i in range(nodes)]
    ours = set(tagged_pids(tag_prefix))
    inodes: set[str] = set()
    for pid, targets in _open_files():
        if pid in ours or any(t.startswith(d + "/") for t in targets for d in dirs):
            inodes.update(t[len("socket:["):-1] for t in targets if t.startswith("socket:["))
    return {port: address for port, address, inode in _listening() if inode in inodes}
