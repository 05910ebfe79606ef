"""Nothing of the run engine is left on owned hosts after a teardown (issue 32): real sshd, real
Ray on two loopback hosts. The client killed with SIGKILL while the engine starts, then a
teardown from a shell without the run's GPUPLAN_RAY_PORT: within 5 s no process of the cluster's
Ray (its renamed agents included), no firewall chain, no temp dir, no port of its range
listening. The same after a clean batch, with one of its nodes marked lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.sshd


@pytest.fixture
def hosts(tmp_path, gpuplan_home, monkeypatch):
    from test_baremetal_provider import write_inventory

    from gpuplan import paths
    from support.ray_env import free_port_range, ray_venv, stop_ray
    from support.sshd import start_hosts, stop_hosts

    monkeypatch.setenv("GPUPLAN_RAY_VENV", str(ray_venv()))
    monkeypatch.setenv("GPUPLAN_RAY_OBJECT_STORE_MB", "80")
    monkeypatch.setenv("GPUPLAN_POLL_S", "0.3")
    started = start_hosts(2, tmp_path)
    port = free_port_range(2)  # after the hosts: an sshd port inside the range would look like Ray's
    paths.config_dir().mkdir(parents=True, exist_ok=True)
    inventory = write_inventory(paths.config_dir() / "inventory.yaml", started)
    inventory.write_text(inventory.read_text().replace("192.168.0.", "127.0.0."))  # Ray binds the private address
    try:
        yield started, port
    finally:
        stop_ray("gone-", port, 2)
        stop_hosts(started)


def _nothing_left(port: int, hosts, within_s: float = 5) -> list[str]:
    from support.ray_env import engine_remains, tagged_pids

    deadline = time.monotonic() + within_s
    while True:
        left = engine_remains(port, 2) + [f"tagged process {p}" for p in tagged_pids("gone-")]
        left += [f"{h.name}: firewall chain" for h in hosts
                 if "GPUPLAN-RAY" in ((h.fake_root / "iptables.rules").read_text()
                                      if (h.fake_root / "iptables.rules").exists() else "")]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _run(cli, tmp_path, port: int, items: str):
    """Cluster `gone` claimed from the two hosts, then `gpuplan run gone` over `items` as its own
    process, with the run's GPUPLAN_RAY_PORT."""
    assert cli("provision", "baremetal:t4", "x2", "--name", "gone", "--no-bootstrap", "--yes").code == 0
    (tmp_path / "items.txt").write_text(items)
    env = {**os.environ, "GPUPLAN_RAY_PORT": str(port)}
    return subprocess.Popen([sys.executable, "-m", "gpuplan", "run", "gone", "--items", str(tmp_path / "items.txt"), "--", "sh", "-c",
                             "sleep 1; : {item}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_client_killed_while_the_engine_starts_leaves_nothing_after_teardown(hosts, cli, tmp_path, monkeypatch):
    from gpuplan import paths
    from gpuplan.store.state import State

    started, port = hosts
    client = _run(cli, tmp_path, port, "a\nb\n")
    for line in client.stderr:  # the engine's settings are saved, then `ray start` begins on the head
        if "starting Ray" in line:
            break
    time.sleep(2)
    client.send_signal(signal.SIGKILL)
    client.wait(30)
    # a fresh shell: no GPUPLAN_RAY_PORT; the state says where the engine was
    monkeypatch.delenv("GPUPLAN_RAY_PORT", raising=False)
    r = cli("teardown", "gone", "--yes")
    assert r.code == 0, r.err + r.out
    assert _nothing_left(port, started) == []
    state = State(paths.state_db())
    assert state.cluster("gone").status == "gone"
    state.close()


def test_a_clean_batch_leaves_nothing_after_teardown(hosts, cli, tmp_path, monkeypatch):
    started, port = hosts
    client = _run(cli, tmp_path, port, "a\nb\nc\n")
    out, err = client.communicate(timeout=600)
    assert client.returncode == 0, out + err
    assert "3 ok of 3 items" in " ".join(out.split())
    # every port the running engine listens on is inside its nodes' firewalled ranges (the
    # autoscaler's and the dashboard's metrics ports were at 44217 / 44227 on all interfaces)
    from support.ray_env import engine_listening

    listening = engine_listening(port, 2, "gone-")
    assert listening and [p for p in listening if not port <= p < port + 200] == []
    # the batch lost gone-1 (as `run --recover` would have replaced it) and it came back: its Ray
    # and firewall chain go with the teardown too
    from gpuplan import paths
    from gpuplan.store.state import State

    state = State(paths.state_db())
    state.update_node("gone", "gone-1", status="lost")
    state.close()
    monkeypatch.delenv("GPUPLAN_RAY_PORT", raising=False)
    r = cli("teardown", "gone", "--yes")
    assert r.code == 0, r.err + r.out
    assert _nothing_left(port, started) == []


def test_a_ray_start_that_fails_is_tried_once_more_and_leaves_nothing(hosts, cli, tmp_path, monkeypatch):
    """`ray start` fails on the head (an object store below Ray's minimum: refused at once; a GCS
    port in use fails the same way after Ray's 40 s wait): what it left goes, it is tried once
    more (as on a busy machine, where a second start usually makes it), then the run fails in one
    line naming the start's error, not its whole output flattened into one line."""
    started, port = hosts
    monkeypatch.setenv("GPUPLAN_RAY_OBJECT_STORE_MB", "1")
    client = _run(cli, tmp_path, port, "a\n")
    out, err = client.communicate(timeout=600)
    assert client.returncode != 0, out + err
    tried = [ln for ln in err.splitlines() if "`ray start` failed" in ln]
    assert len(tried) == 2 and "starting it once more" in tried[0], err
    last = err.strip().splitlines()[-1]
    assert last.startswith("gpuplan: error: gone-0: `ray start` failed (exit 1): ") and "object store" in last, err
    assert "\\x0a" not in last and "Traceback" not in err, err
    assert _nothing_left(port, started) == []


def test_a_worker_whose_ray_start_hangs_is_set_aside_at_its_limit_and_the_head_runs_the_batch(hosts, cli, tmp_path,
                                                                                               monkeypatch):
    """A worker's `ray start` that cannot reach the head's GCS hangs rather than fails (seen on a
    loaded machine: the whole 300 s, twice). Now a worker's start has a limit of its own: stopped
    there, cleaned up, tried once more, then its node is set aside and the head runs the batch."""
    from gpuplan import paths
    from gpuplan.run.ray import engine
    from gpuplan.store.state import State
    from support.ray_env import processes_running, ray_venv

    started, port = hosts
    real = ray_venv()
    fake = tmp_path / "ray-venv"  # the tests' Ray, but a worker's `ray start` (the one given --address) hangs
    (fake / "bin").mkdir(parents=True)
    for name, body in (("ray", f'case " $* " in *" --address "*) exec sleep 607;; esac\nexec "{real}/bin/ray" "$@"\n'),
                       ("python", f'exec "{real}/bin/python" "$@"\n')):
        (fake / "bin" / name).write_text("#!/bin/sh\n" + body)
        (fake / "bin" / name).chmod(0o755)
    [record] = real.glob("lib/python3*/site-packages/ray-*.dist-info")
    (fake / record.relative_to(real)).parent.mkdir(parents=True)
    (fake / record.relative_to(real)).symlink_to(record)
    monkeypatch.setenv("GPUPLAN_RAY_VENV", str(fake))
    monkeypatch.setenv("GPUPLAN_RAY_PORT", str(port))
    monkeypatch.setattr(engine, "WORKER_START_TIMEOUT_S", 3)
    assert cli("provision", "baremetal:t4", "x2", "--name", "gone", "--no-bootstrap", "--yes").code == 0
    (tmp_path / "items.txt").write_text("a\nb\n")
    r = cli("run", "gone", "--items", str(tmp_path / "items.txt"), "--", "sh", "-c", ": {item}")
    assert r.code == 0, r.out + r.err
    err = " ".join(r.err.split())
    assert "gone-1: `ray start` failed (exit 124)" in err and "timed out after 3 s" in err and "starting it once more" in err
    assert "gone-1 set aside: Ray could not be installed or started: gone-1: `ray start` failed (exit 124)" in err, err
    state = State(paths.state_db())
    [job] = state.jobs("gone")
    assert {(it.node, it.status) for it in state.job_items(job.id)} == {("gone-0", "ok")}
    assert [(q.node, q.code) for q in state.job_quarantines(job.id)] == [("gone-1", "left_out")]
    state.close()
    assert processes_running(["sleep", "607"]) == []  # the hung starts were stopped on the node
    r = cli("teardown", "gone", "--yes")
    assert r.code == 0, r.err + r.out
    assert _nothing_left(port, started) == []
