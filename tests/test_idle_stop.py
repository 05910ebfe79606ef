"""`gpuplan provision --idle`: the idle-stop watchdog on a loopback sshd host, with a stand-in
shutdown (tests/support/fakebin/shutdown, named by its full path: nothing here can stop this
machine), and what --idle means per provider."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest

from gpuplan import paths
from gpuplan.store.state import State


def _wait(what, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if what():
            return True
        time.sleep(0.2)
    return bool(what())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = open(f"/proc/{pid}/stat").read()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.sshd
def test_the_watchdog_stops_the_node_after_the_idle_time_and_not_while_an_item_runs(gpuplan_home, tmp_path):
    from gpuplan.hosts.playbook import bootstrap_cluster
    from support.sshd import FAKEBIN, register_cluster, start_hosts, stop_hosts

    [host] = start_hosts(1, tmp_path)
    state = State(paths.state_db())
    watchdog = None
    item = subprocess.Popen(["sleep", "120"], start_new_session=True)  # a batch item: its own process group
    # another login's reference job on the same machine (this test's own worker runs them beside it):
    # its HOME is not the node's, so it keeps nothing up (before, any gpuplan.jobs process did)
    others = subprocess.Popen(["bash", "-c", "exec -a gpuplan.jobs.colorize sleep 120"], env={"HOME": str(tmp_path)})
    try:
        register_cluster(state, "idle", [host])
        home = host.fake_root / "root"
        pids = home / ".gpuplan/jobs/idle-1/pids"
        pids.mkdir(parents=True)
        (pids / "0.1").write_text(f"{item.pid}\n")  # where ray_driver.run_item records an item's group
        shutdown_log = host.fake_root / "shutdown.log"
        report = bootstrap_cluster(state, "idle", ["idle-stop"], {
            "idle_s": "3", "idle_check_s": "0.5", "idle_stop_command": f"{FAKEBIN}/shutdown -h now"})
        assert all(h.ok for h in report.hosts), report
        watchdog = int((home / ".gpuplan/idle/watchdog.pid").read_text())
        assert _alive(watchdog)
        time.sleep(5)  # longer than the idle time: the item keeps the node busy
        assert not shutdown_log.exists() and _alive(watchdog)
        item.send_signal(signal.SIGKILL)
        item.wait()
        t0 = time.monotonic()
        # the stand-in's `>>` creates the file before it writes its line: wait for the line
        assert _wait(lambda: shutdown_log.exists() and shutdown_log.read_text().strip(), 15)
        waited = time.monotonic() - t0
        assert shutdown_log.read_text().split()[1:] == ["shutdown", "-h", "now"]
        assert _wait(lambda: not _alive(watchdog), 5)
        # it waited more than the idle time (3 s) since it last saw the item, by its own clock. Not
        # timed from the kill here: the watchdog last saw the item up to one check (0.5 s, longer on
        # a busy machine) before the kill, and a 2 s floor from it failed once in the suite (1.8 s).
        log = (home / ".gpuplan/idle/log").read_text()
        idle = re.findall(r"no batch for (\d+) s", log)
        assert len(idle) == 1 and int(idle[0]) > 3, (log, waited)
    finally:
        others.kill()
        others.wait()
        if item.poll() is None:
            item.kill()
            item.wait()
        if watchdog is not None and _alive(watchdog):
            os.kill(watchdog, signal.SIGKILL)  # the test's own watchdog, by its pid
        state.close()
        stop_hosts([host])


def test_idle_is_offered_where_a_shutdown_from_inside_ends_the_bill(cli):
    r = cli("provision", "aws:g4dn.xlarge", "x2", "--idle", "30m", "--dry-run")
    assert r.code == 0, r.err
    out = " ".join(r.out.split())
    assert "idle stop: a machine with no batch for 30 min terminates itself" in out
    r = cli("provision", "azure:Standard_NC4as_T4_v3", "x1", "--idle", "30m", "--dry-run")
    assert r.code == 2 and "--idle is not offered on azure" in r.err and "deallocated" in r.err
    r = cli("provision", "aws:g4dn.xlarge", "x1", "--idle", "2m", "--dry-run")
    assert r.code == 2 and "--idle: at least 5m" in r.err
