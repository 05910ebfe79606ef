"""`gpuplan bootstrap` and `gpuplan ssh` through the in-process CLI, against loopback sshd hosts."""

from __future__ import annotations

import pytest

from gpuplan.hosts import remote
from gpuplan.store.state import State
from support.sshd import register_cluster, start_hosts, stop_hosts

pytestmark = pytest.mark.sshd
FAKE = "root=$GPUPLAN_FAKE_ROOT"


@pytest.fixture
def hosts(tmp_path):
    hs = start_hosts(2, tmp_path)
    yield hs
    stop_hosts(hs)


@pytest.fixture
def demo(gpuplan_home, hosts):
    state = State.open_default()
    register_cluster(state, "demo", hosts, provider="sakura", size="h100x1")
    yield state
    state.close()


def test_bootstrap_runs_shows_a_table_and_records_setup_time(cli, demo, hosts):
    r = cli("bootstrap", "demo", "--playbook", "cuda", "--playbook", "cudnn", "--param", FAKE, "--param", "cuda_version=12.8")
    assert r.code == 0, r.err
    assert "demo-0" in r.out and "demo-1" in r.out and "cuda/toolkit" in r.out and "ran" in r.out
    assert "demo-0 cuda/toolkit: running" in r.err  # progress per host
    assert all(h.installed("cuda-toolkit-12-8") and h.installed("cudnn9-cuda-12") for h in hosts)
    assert demo.setup_time("sakura", "h100x1", "cuda,cudnn") is not None
    again = cli("bootstrap", "demo", "-p", "cuda", "-p", "cudnn", "--param", FAKE, "--param", "cuda_version=12.8")
    assert again.code == 0 and "ran " not in again.out and again.out.count("skipped") == 2 * 6


def test_bootstrap_failure_is_one_line_and_exit_4(cli, demo, hosts):
    (hosts[1].fake_root / "etc/fake-apt-fail").write_text("libnccl-dev\n")
    r = cli("bootstrap", "demo", "-p", "nccl", "--param", FAKE)
    assert r.code == 4
    assert r.err.strip().splitlines()[-1] == (
        "gpuplan: error: demo-1: step nccl/nccl failed with exit code 100: "
        "E: Unable to locate package libnccl-dev"  # the output's error line, not its last lines joined
    )
    shown = cli("--debug", "bootstrap", "demo", "-p", "nccl", "--param", FAKE)  # and the rest with --debug
    assert shown.code == 4 and "gpuplan: the remote output:\n" in shown.err and "Setting up libnccl2 (1.0)" in shown.err
    assert "FAILED (100)" in r.out  # the summary table is still shown


def test_bootstrap_bad_input_exits_2_with_one_line(cli, demo):
    r = cli("bootstrap", "demo", "-p", "cuda", "--param", "cuda_verison=12.8")
    assert r.code == 2 and r.err.count("\n") == 1 and "unknown parameter(s) cuda_verison" in r.err
    r = cli("bootstrap", "nosuch")
    assert r.code == 2 and "no cluster named 'nosuch'" in r.err
    r = cli("bootstrap", "demo", "-p", "cudaa")
    assert r.code == 2 and "no playbook named 'cudaa'" in r.err


def test_bootstrap_dry_run_prints_commands_and_touches_nothing(cli, demo, hosts):
    r = cli("bootstrap", "demo", "--dry-run")
    assert r.code == 0
    assert "# gpu-driver/blacklist-nouveau action" in r.out and "'options nouveau modeset=0'" in r.out
    assert "cuda_version='12.6'" in r.out
    assert not (hosts[0].fake_root / "apt.log").exists()


def test_bootstrap_changed_host_key_exits_4_and_accepting_it_repins(cli, demo, hosts):
    hosts[0].restart(new_host_key=True)
    r = cli("bootstrap", "demo", "-p", "cudnn", "--param", FAKE)
    assert r.code == 4 and "changed" in r.err
    assert not hosts[0].installed("cudnn9-cuda-12")
    fp = remote.fingerprint(hosts[0].host_public_key)
    r = cli("bootstrap", "demo", "-p", "cudnn", "--param", FAKE, "--accept-host-key", fp)
    assert r.code == 0, r.err
    assert demo.host_key(hosts[0].host, hosts[0].port) == hosts[0].host_public_key


def test_ssh_runs_a_command_with_pinned_keys(cli, demo, hosts, capfd):
    r = cli("ssh", "demo", "demo-1", "--", "cat", "$GPUPLAN_FAKE_ROOT/gpus;", "exit", "3")
    captured = capfd.readouterr()
    assert r.code == 3 and captured.out.strip() == "1"
    r = cli("ssh", "demo", "--", "echo", "first")  # no node: the first one
    assert r.code == 0 and capfd.readouterr().out.strip() == "first"
    hosts[0].restart(new_host_key=True)
    r = cli("ssh", "demo", "demo-0", "--", "touch", "$GPUPLAN_FAKE_ROOT/ran")
    assert r.code == 255 and "REMOTE HOST IDENTIFICATION HAS CHANGED" in capfd.readouterr().err
    assert not (hosts[0].fake_root / "ran").exists()


def test_ssh_trusts_the_pinned_key_alone_unless_asked_for_the_users_config(demo):
    """No ssh config of the user's (a `Host *` block could turn checking off or rewrite the
    host) and no system-wide known hosts (a key there for the address would be accepted too)."""
    from gpuplan.cli.remote import ssh_argv

    argv, _ = ssh_argv(demo, "demo", "demo-0", ["true"])
    assert argv[argv.index("-F") + 1] == "/dev/null"
    options = [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]
    assert "GlobalKnownHostsFile=/dev/null" in options and "StrictHostKeyChecking=yes" in options
    known = next(o for o in options if o.startswith("UserKnownHostsFile="))
    assert known.split("=", 1)[1] != "/dev/null"  # gpuplan's own pinned keys
    argv, _ = ssh_argv(demo, "demo", "demo-0", ["true"], user_config=True)
    assert "-F" not in argv and "GlobalKnownHostsFile=/dev/null" in argv
