"""gpuplan.hosts.remote against real sshd processes on loopback."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from gpuplan.errors import RemoteError
from gpuplan.hosts import remote
from support.sshd import start_hosts, stop_hosts

pytestmark = pytest.mark.sshd


@pytest.fixture
def hosts(tmp_path):
    hs = start_hosts(3, tmp_path)
    yield hs
    stop_hosts(hs)


def as_host(h, name="n", key=None) -> remote.Host:
    return remote.Host(name, h.host, h.port, h.user, h.client_key_path, h.host_public_key if key is None else key, "demo")


def test_run_returns_exit_code_and_both_streams(hosts):
    r = remote.run(as_host(hosts[0]), "echo out; echo err >&2; exit 3")
    assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n")
    assert not r.ok and r.tail() == "out\nerr"


def test_output_that_comes_after_the_exit_status_is_read_to_its_end(hosts):
    # the shell exits at once (sshd sends its exit status) while a child it left still writes to
    # the same output: a loaded host does this to the last line of any command. Read to end of file.
    r = remote.run(as_host(hosts[0]), "echo first; (sleep 0.5; echo late; echo late-err >&2) &")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "first\nlate\n", "late-err\n")


def test_a_background_process_holding_the_output_open_does_not_hold_the_command(hosts):
    r = remote.run(as_host(hosts[0]), "echo started; sleep 60 &", timeout=30)
    # the exit status came, then nothing for DRAIN_S: done, long before the sleep or the timeout
    assert (r.exit_code, r.stdout) == (0, "started\n") and r.seconds < remote.DRAIN_S + 5


def test_stdin_reaches_the_command_and_env_is_per_host(hosts):
    r = remote.run(as_host(hosts[1]), "bash -s", stdin='echo "$GPUPLAN_FAKE_ROOT"\n')
    assert r.stdout.strip() == str(hosts[1].fake_root)


def test_a_command_that_exits_before_reading_its_stdin_is_judged_by_its_exit_status(hosts):
    # 4 MiB is more than the channel's window: the command has ended before the client has sent
    # it all, and the write finds the channel closed (a `run --resume` saw this as "could not start")
    r = remote.run(as_host(hosts[0]), "echo gone; exit 3", stdin="x" * (4 << 20))
    assert (r.exit_code, r.stdout) == (3, "gone\n")


def test_changed_host_key_is_refused_before_anything_runs(hosts):
    h = hosts[0]
    pinned = h.host_public_key
    h.restart(new_host_key=True)
    with pytest.raises(remote.HostKeyChanged) as info:
        remote.run(as_host(h, key=pinned), 'touch "$GPUPLAN_FAKE_ROOT/ran"')
    msg = str(info.value)
    assert f"host key for 127.0.0.1:{h.port} changed" in msg
    assert f"pinned {remote.fingerprint(pinned)}" in msg
    assert f"offered {remote.fingerprint(h.host_public_key)}" in msg
    assert f"--accept-host-key {remote.fingerprint(h.host_public_key)}" in msg
    assert info.value.exit_code == 4
    assert not (h.fake_root / "ran").exists()


def test_a_host_without_a_pinned_key_is_refused(hosts):
    with pytest.raises(RemoteError, match="no pinned host key"):
        remote.run(as_host(hosts[0], key=""), 'touch "$GPUPLAN_FAKE_ROOT/ran"')
    assert not (hosts[0].fake_root / "ran").exists()


def test_offered_key_and_fingerprint_match_openssh(hosts):
    h = hosts[2]
    offered = remote.offered_host_key(h.host, h.port)
    assert offered.split()[:2] == h.host_public_key.split()[:2]
    keygen = subprocess.run(["ssh-keygen", "-lf", str(h.dir / "ssh_host_ed25519_key.pub")], capture_output=True, text=True)
    assert keygen.stdout.split()[1] == remote.fingerprint(offered)


def test_run_many_keeps_order_and_reports_a_dead_host_without_hiding_others(hosts):
    hosts[1].stop()
    hs = [as_host(h, f"n{i}") for i, h in enumerate(hosts)]
    out = remote.run_many(hs, lambda host: remote.run(host, 'cat "$GPUPLAN_FAKE_ROOT/gpus"; echo ' + host.name).stdout)
    assert out[0] == "1\nn0\n" and out[2] == "1\nn2\n"
    assert isinstance(out[1], RemoteError) and "cannot connect" in str(out[1])


def test_transient_connect_failure_is_retried(hosts):
    h = hosts[0]
    h.stop()
    threading.Timer(0.6, h.start).start()
    t = time.monotonic()
    with remote.connect(as_host(h), attempts=5, backoff=0.3) as conn:
        assert conn.run("echo up").stdout == "up\n"
    assert time.monotonic() - t >= 0.5


def test_put_and_get_files(hosts, tmp_path):
    h = hosts[0]
    src = tmp_path / "a.txt"
    src.write_text("payload\n")
    host = as_host(h)
    remote.put(host, src, f"{h.fake_root}/tmp/a.txt", mode=0o600)
    assert (h.fake_root / "tmp/a.txt").read_text() == "payload\n"
    assert (h.fake_root / "tmp/a.txt").stat().st_mode & 0o777 == 0o600
    remote.get(host, f"{h.fake_root}/tmp/a.txt", tmp_path / "b.txt")
    assert (tmp_path / "b.txt").read_text() == "payload\n"


def test_command_timeout_gives_exit_124(hosts):
    r = remote.run(as_host(hosts[0]), "sleep 5", timeout=0.5)
    assert r.exit_code == 124 and "timed out after 0.5 s" in r.stderr
    assert r.seconds < 3


def test_wait_for_reboot_sees_a_new_boot_id(hosts):
    h = hosts[0]
    host = as_host(h)
    path = "$GPUPLAN_FAKE_ROOT/proc/sys/kernel/random/boot_id"
    with remote.connect(host) as conn:
        old = remote.boot_id(conn, path)
        assert old == h.boot_id()
        conn.run("reboot")
    waited = remote.wait_for_reboot(host, old, timeout_s=30, boot_id_path=path)
    assert waited >= 1.0
    assert h.boot_id() != old
    assert remote.run(host, "echo back").stdout == "back\n"


def test_wait_for_reboot_gives_up_at_the_deadline(hosts):
    h = hosts[0]
    h.stop()
    t = time.monotonic()
    with pytest.raises(RemoteError, match="did not come back from a reboot within 1 s"):
        remote.wait_for_reboot(as_host(h), "old", timeout_s=1)
    assert time.monotonic() - t < 30  # its 1 s deadline, with room for a busy machine


# --- a one-time injected host key is rotated at the first login ------------------------------


@pytest.fixture
def injected(hosts, gpuplan_home, monkeypatch):
    """A cluster whose pins are one-time keys gpuplan injected (here: the keys the hosts have),
    with the rotation pointed at the loopback sshd's own key file and pid."""
    from gpuplan.store.state import State
    from support.sshd import register_cluster

    monkeypatch.setattr(remote, "HOST_KEY_FILE", '"$GPUPLAN_SSHD_DIR/ssh_host_ed25519_key"')
    monkeypatch.setattr(remote, "SSHD_RELOAD", 'kill -HUP "$(cat "$GPUPLAN_SSHD_DIR/sshd.pid")"')
    state = State(gpuplan_home / "state" / "state.db")
    names = register_cluster(state, "demo", hosts, pin=False)
    for h, n in zip(hosts, names):
        state.pin_host_key(h.host, h.port, h.host_public_key, "demo", n, origin="injected")
    yield state
    state.close()


def test_an_injected_host_key_is_rotated_at_the_first_login(hosts, injected):
    state = injected
    first = remote.cluster_hosts(state, "demo")
    for h, got in zip(hosts, first):
        pin = state.host_pin(h.host, h.port)
        assert (pin.origin, pin.pending_key, pin.key) == ("node", None, got.host_key)
        assert pin.key.split()[:2] != h.host_public_key.split()[:2]
        assert remote.offered_host_key(h.host, h.port).split() == pin.key.split()[:2]  # sshd serves the new key
        assert (h.dir / "ssh_host_ed25519_key.pub").read_text().split()[:2] == pin.key.split()[:2]
        with pytest.raises(remote.HostKeyChanged):  # the injected key is worthless now
            remote.run(as_host(h, key=h.host_public_key), "true")
    assert remote.run(first[0], "echo ok").stdout == "ok\n"
    again = remote.cluster_hosts(state, "demo")  # the next login finds nothing to rotate
    assert [h.host_key for h in again] == [h.host_key for h in first]


def test_a_rotation_cut_off_after_the_node_switched_keys_is_finished_next_time(hosts, injected, monkeypatch):
    state = injected
    real_pin = state.pin_host_key

    def killed(host, port, key, cluster=None, node=None, origin="node"):
        raise RuntimeError("gpuplan killed before it pinned the new key")

    monkeypatch.setattr(state, "pin_host_key", killed)
    remote.cluster_hosts(state, "demo")
    h = hosts[0]
    pin = state.host_pin(h.host, h.port)
    assert pin.origin == "injected" and pin.key.split()[:2] == h.host_public_key.split()[:2]
    assert remote.offered_host_key(h.host, h.port).split() == pin.pending_key.split()[:2]  # the node switched
    monkeypatch.setattr(state, "pin_host_key", real_pin)
    [host, *_] = remote.cluster_hosts(state, "demo")
    pin = state.host_pin(h.host, h.port)
    assert (pin.origin, pin.pending_key) == ("node", None) and host.host_key == pin.key
    assert remote.run(host, "echo ok").stdout == "ok\n"
