"""Issue 43: a cluster's engine is closed to all but its own members, over IPv6 too, and to the
node's other local users (Ray's Jobs API has no authentication: whoever reaches it runs code as
the SSH user). Shown for real: the loopback hosts and their Ray run in a private network
namespace (`unshare -n`), where the engine's own iptables/ip6tables rules are real netfilter rules
(the fakebin stand-ins pass through there, and only there); during a batch no engine port takes a
connection over ::1 or from uid 65534 on 127.0.0.1, while the batch runs on and succeeds."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest

pytestmark = pytest.mark.sshd
CLUSTER = "closed"
INNER = "GPUPLAN_TEST_IN_NETNS"  # set for the run inside the namespace
NOBODY = 65534


def _own_netns() -> str:
    return "".join(c for c in os.readlink("/proc/self/ns/net") if c.isdigit())


def test_no_engine_port_takes_a_connection_over_ipv6_or_from_another_local_user(tmp_path):
    """Runs the check below in a private network namespace (its loopback up), as root."""
    if os.environ.get(INNER):
        pytest.skip("the outer test of this module")
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip") or not Path("/usr/sbin/ip6tables").exists():
        pytest.skip("needs root, unshare, ip and iptables/ip6tables for a private network namespace")
    probe = subprocess.run(["unshare", "-n", "sh", "-c", "ip link set lo up && /usr/sbin/iptables -w -S >/dev/null &&"
                            " /usr/sbin/ip6tables -w -S >/dev/null"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"no private network namespace with netfilter here: {probe.stderr.strip()[-200:]}")
    env = dict(os.environ, **{INNER: _own_netns()})
    here = Path(__file__).resolve()
    r = subprocess.run(["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", sys.executable, "-m", "pytest",
                        f"{here}::test_check_in_netns", "-rA", "--basetemp", str(tmp_path / "inner")],
                       cwd=here.parent.parent, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and "PASSED tests/test_run_closed.py::test_check_in_netns" in r.stdout, \
        r.stdout[-6000:] + r.stderr[-3000:]


def _listening(lo: int, hi: int) -> dict[str, set[int]]:
    """TCP ports in [lo, hi) listening in this namespace, by family."""
    out: dict[str, set[int]] = {"4": set(), "6": set()}
    for fam, path in (("4", "/proc/net/tcp"), ("6", "/proc/net/tcp6")):
        for line in Path(path).read_text().splitlines()[1:]:
            f = line.split()
            port = int(f[1].rsplit(":", 1)[1], 16)
            if f[3] == "0A" and lo <= port < hi:
                out[fam].add(port)
    return out


# All ports tried at once: a port the rules drop answers nothing, so one at a time each waited out
# its timeout (about 20 ports, twice: over half a minute of this test).
CONNECT = """import errno, select, socket, sys, time
host, ports = sys.argv[1], [int(p) for p in sys.argv[2:]]
got, pending = [], {}
for p in ports:
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.setblocking(False)
    err = s.connect_ex((host, p))
    if err == errno.EINPROGRESS:
        pending[s] = p
        continue
    if err == 0:
        got.append(p)
    s.close()
deadline = time.monotonic() + 3
while pending and time.monotonic() < deadline:
    _, ready, _ = select.select([], list(pending), [], max(0.0, deadline - time.monotonic()))
    for s in ready:
        p = pending.pop(s)
        if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
            got.append(p)
        s.close()
for s in pending:
    s.close()
print(" ".join(map(str, sorted(got))))
"""


def _connects(host: str, ports: set[int], user: int | None = None) -> list[int]:
    """The ports a connection to `host` reaches, tried by a child process (as `user`, if given)."""
    r = subprocess.run(["/usr/bin/python3", "-c", CONNECT, host, *map(str, sorted(ports))], user=user, group=user,
                       capture_output=True, text=True, timeout=600, cwd="/")
    assert r.returncode == 0, r.stderr
    return [int(p) for p in r.stdout.split()]


def test_check_in_netns(tmp_path_factory, tmp_path):
    """Inside the namespace: the engine's rules are real; a batch runs while nothing but its own
    user (and root) reaches its ports, and nothing at all over IPv6."""
    if not os.environ.get(INNER):
        pytest.skip("runs inside the private network namespace of the test above")
    assert _own_netns() != os.environ[INNER]
    from gpuplan.run import backends
    from gpuplan.run.ray import engine
    from support.cli import items_file, run_cli, submitted_job
    from support.ray_env import loopback_ray_cluster
    from support.waiting import sleep_unless

    real = [{"GPUPLAN_TEST_REAL_FIREWALL": os.environ[INNER]}] * 2
    with loopback_ray_cluster(tmp_path_factory.mktemp("ray-home"), CLUSTER, Decimal("100"), host_env=real) as (state, hosts, _):
        eng = engine.engine_of(state, CLUSTER)
        base = eng.layout.base(0)
        items = items_file(tmp_path, [f"clip-{i}" for i in range(4)])
        # the items run until the checks below are done (the flag), then end at once
        checked = tmp_path / "checked"
        r = run_cli("run", CLUSTER, "--items", items, "--detach", "--", "sh", "-c",
                    f"{sleep_unless(checked, 120)}; echo {{item}} > {{out}}/r")
        assert r.code == 0, r.err
        job = submitted_job(r.out)
        deadline = time.monotonic() + 120
        while state.job_counts(job).get("running", 0) < 2:
            backends.refresh(state, job)
            assert time.monotonic() < deadline, state.job_counts(job)
            time.sleep(0.3)
        ports = _listening(base, base + 2 * engine.PORTS_PER_NODE)
        assert base in ports["4"] | ports["6"] and eng.layout.dashboard_port() in ports["4"] | ports["6"]
        both = ports["4"] | ports["6"]
        # no Ray Client server (engine.NO_CLIENT_SERVER): not on Ray's default port, nor on the one
        # gpuplan gave it before (the head's port + 9); nothing else listens in this namespace
        assert _listening(10001, 10002) == {"4": set(), "6": set()} and base + 9 not in both
        assert _connects("::1", both) == []  # nothing over IPv6
        assert _connects("127.0.0.1", both, user=NOBODY) == []  # nor from another local user
        assert base in _connects("127.0.0.1", {base})  # while the SSH user (root here) still reaches the GCS
        backends.refresh(state, job)
        assert state.job_counts(job).get("running", 0) >= 2  # the batch ran on all the while
        checked.touch()
        while backends.refresh(state, job).state not in ("succeeded", "failed", "lost"):
            assert time.monotonic() < deadline + 120
            time.sleep(0.5)
        assert state.job(job).state == "succeeded" and state.job_counts(job) == {"ok": 4}
