"""Playbooks run on real sshd hosts (loopback) whose stand-in commands write to per-host fake roots."""

from __future__ import annotations

import pytest

from gpuplan.errors import UsageError
from gpuplan.hosts import playbook, remote
from gpuplan.store.state import State
from support.sshd import register_cluster, start_hosts, stop_hosts

pytestmark = pytest.mark.sshd

FAKE = {"root": "$GPUPLAN_FAKE_ROOT"}
NOUVEAU = "blacklist nouveau\nblacklist lbm-nouveau\noptions nouveau modeset=0\nalias nouveau off\nalias lbm-nouveau off\n"


@pytest.fixture
def hosts(tmp_path, request):
    n = getattr(request, "param", 2)
    hs = start_hosts(n, tmp_path)
    yield hs
    stop_hosts(hs)


@pytest.fixture
def state(tmp_path):
    s = State(tmp_path / "state" / "state.db")
    yield s
    s.close()


def as_hosts(hs) -> list[remote.Host]:
    return [remote.Host(f"n{i}", h.host, h.port, h.user, h.client_key_path, h.host_public_key, "demo") for i, h in enumerate(hs)]


def default_books():
    return [playbook.load(n) for n in playbook.DEFAULT_PLAYBOOKS]


@pytest.mark.parametrize("hosts", [4], indirect=True)
def test_full_bootstrap_of_four_hosts_then_a_rerun_skips_everything(hosts):
    report = playbook.run_playbooks(as_hosts(hosts), default_books(), FAKE)
    assert report.ok, report.first_error()
    n_steps = sum(len(pb.steps) for pb in default_books())
    for h, hr in zip(hosts, report.hosts):
        statuses = [s.status for s in hr.steps]
        # cuda-keyring is a step of four playbooks; only the first one installs it
        assert statuses.count("skipped") == 3 and statuses.count("ran") == n_steps - 3, statuses
        for pkg in ("build-essential", "cuda-keyring", "cuda-drivers", "cuda-toolkit-12-6", "cudnn9-cuda-12", "libnccl2", "libnccl-dev"):
            assert h.installed(pkg), (h.name, pkg)
        assert (h.fake_root / "etc/modprobe.d/blacklist-nouveau.conf").read_text() == NOUVEAU
        assert (h.fake_root / "proc/modules").read_text().startswith("nvidia ")
        assert len((h.fake_root / "reboots.log").read_text().splitlines()) == 2  # nouveau out, driver in
        waited = [s.reboot_s for s in hr.steps if s.reboot_s is not None]
        assert len(waited) == 2 and all(w >= 1.0 for w in waited)
        assert (h.fake_root / "root/.bashrc").read_text().startswith("# >>> gpuplan cuda >>>\nexport PATH=/usr/local/cuda-12.6/bin:$PATH\n")
    # the four hosts ran in parallel: the whole took far less than the sum of the hosts
    assert report.seconds < 0.6 * sum(h.seconds for h in report.hosts)
    assert report.setup_seconds() == round(max(h.seconds for h in report.hosts))

    again = playbook.run_playbooks(as_hosts(hosts), default_books(), FAKE)
    assert again.ok
    assert {s.status for hr in again.hosts for s in hr.steps} == {"skipped"}
    assert all(len((h.fake_root / "reboots.log").read_text().splitlines()) == 2 for h in hosts)


def test_failing_step_names_host_step_exit_code_and_output(hosts):
    (hosts[1].fake_root / "etc/fake-apt-fail").write_text("cuda-toolkit-12-6\n")
    report = playbook.run_playbooks(as_hosts(hosts), [playbook.load("cuda"), playbook.load("nccl")], FAKE)
    assert not report.ok
    assert [h.host for h in report.failures] == ["n1"]
    assert report.first_error() == (
        "n1: step cuda/toolkit failed with exit code 100: E: Unable to locate package cuda-toolkit-12-6"
    )
    bad = {s.key: s for s in report.hosts[1].steps}
    assert bad["cuda/toolkit"].status == "failed" and bad["cuda/toolkit"].exit_code == 100
    assert "Unable to locate package cuda-toolkit-12-6" in bad["cuda/toolkit"].output
    assert bad["cuda/profile-env"].status == "not-run" and bad["nccl/nccl"].status == "not-run"
    assert not hosts[1].installed("libnccl2") and not (hosts[1].fake_root / "etc/profile.d/gpuplan-cuda.sh").exists()
    # the healthy host went all the way
    assert report.hosts[0].ok and hosts[0].installed("cuda-toolkit-12-6") and hosts[0].installed("libnccl2")


def test_an_action_whose_check_still_fails_is_a_failure(hosts, tmp_path):
    f = tmp_path / "liar.yaml"
    f.write_text("name: liar\ndescription: d\nsteps:\n  - {name: s, check: 'test -f \"$root/done\"', action: 'echo pretending'}\n")
    report = playbook.run_playbooks(as_hosts(hosts[:1]), [playbook.load(str(f))], FAKE)
    assert report.first_error() == "n0: step liar/s failed with exit code 1 (the action finished but its check still fails): pretending"


def test_changed_host_key_fails_that_host_and_runs_nothing_there(hosts):
    hs = as_hosts(hosts)
    hosts[0].restart(new_host_key=True)
    report = playbook.run_playbooks(hs, [playbook.load("cudnn")], FAKE)
    assert [h.host for h in report.failures] == ["n0"]
    assert "host key for 127.0.0.1:" in report.first_error() and "changed" in report.first_error()
    assert all(s.status == "not-run" for s in report.hosts[0].steps)
    assert not (hosts[0].fake_root / "apt.log").exists()
    assert hosts[1].installed("cudnn9-cuda-12")


def test_bootstrap_cluster_from_state_records_setup_time(hosts, state):
    register_cluster(state, "demo", hosts, provider="baremetal", size="t4x1")
    report = playbook.bootstrap_cluster(state, "demo", ["cuda", "nccl"], {**FAKE, "cuda_version": "12.8"})
    assert report.ok
    assert all(h.installed("cuda-toolkit-12-8") for h in hosts)
    recorded = state.setup_time("baremetal", "t4x1", "cuda,nccl")
    assert recorded is not None and recorded[0] == report.setup_seconds() and recorded[0] >= 1
    assert [j.phase for j in state.journal("demo") if j.op == "bootstrap"] == ["ok"]
    # the re-run skips everything and records nothing new
    again = playbook.bootstrap_cluster(state, "demo", ["cuda", "nccl"], {**FAKE, "cuda_version": "12.8"})
    assert {s.status for h in again.hosts for s in h.steps} == {"skipped"}
    assert state.setup_time("baremetal", "t4x1", "cuda,nccl") == recorded


def test_bootstrap_cluster_failure_raises_one_line_with_exit_4(hosts, state):
    register_cluster(state, "demo", hosts)
    (hosts[0].fake_root / "etc/fake-apt-fail").write_text("libnccl2\n")
    with pytest.raises(playbook.BootstrapFailed) as info:
        playbook.bootstrap_cluster(state, "demo", ["nccl"], FAKE)
    assert str(info.value) == "demo-0: step nccl/nccl failed with exit code 100: E: Unable to locate package libnccl2"
    assert info.value.exit_code == 4 and not info.value.report.ok
    assert [j.phase for j in state.journal("demo") if j.op == "bootstrap"] == ["failed"]
    # fixed and rerun: the host that failed now runs, but a second try is no fresh-machine sample
    (hosts[0].fake_root / "etc/fake-apt-fail").unlink()
    assert playbook.bootstrap_cluster(state, "demo", ["nccl"], FAKE).ok
    assert state.setup_time("baremetal", "t4x1", "nccl") is None


def test_unpinned_host_needs_the_offered_fingerprint_confirmed(hosts, state):
    register_cluster(state, "demo", hosts, pin=False)
    offered = remote.fingerprint(hosts[0].host_public_key)
    with pytest.raises(UsageError) as info:
        playbook.bootstrap_cluster(state, "demo", ["cudnn"], FAKE)
    assert f"demo-0 (127.0.0.1:{hosts[0].port}) has no pinned host key; it offers {offered}" in str(info.value)
    assert f"--accept-host-key {offered}" in str(info.value)
    assert not (hosts[0].fake_root / "apt.log").exists()
    # a wrong fingerprint pins nothing
    with pytest.raises(UsageError):
        playbook.bootstrap_cluster(state, "demo", ["cudnn"], FAKE, accept_host_keys=["SHA256:not-it"])
    assert state.host_key("127.0.0.1", hosts[0].port) is None
    accepted = [remote.fingerprint(h.host_public_key) for h in hosts]
    report = playbook.bootstrap_cluster(state, "demo", ["cudnn"], FAKE, accept_host_keys=accepted)
    assert report.ok
    assert state.host_key("127.0.0.1", hosts[1].port) == hosts[1].host_public_key


@pytest.mark.parametrize("hosts", [3], indirect=True)
def test_cluster_network_hostfile_known_hosts_and_intra_key(hosts, state):
    register_cluster(state, "mpi", hosts, gpus=4)
    report = playbook.bootstrap_cluster(state, "mpi", ["cluster-network"], FAKE)
    assert report.ok, report.first_error()
    for h in hosts:
        home = h.fake_root / "root"
        assert (home / ".gpuplan/hostfile").read_text() == "mpi-0 slots=4\nmpi-1 slots=4\nmpi-2 slots=4\n"
        assert (home / ".gpuplan/torchrun_hosts").read_text() == "mpi-0,mpi-1,mpi-2\n"
        hosts_block = (h.fake_root / "etc/hosts").read_text()
        assert "10.0.0.1 mpi-0\n10.0.0.2 mpi-1\n10.0.0.3 mpi-2\n" in hosts_block
        known = (home / ".ssh/known_hosts").read_text().splitlines()
        assert known[0] == "# >>> gpuplan cluster >>>"
        for j, other in enumerate(hosts):
            assert f"mpi-{j},10.0.0.{j + 1} {' '.join(other.host_public_key.split()[:2])}" in known
        key = (home / ".ssh/gpuplan_cluster").read_text()
        assert key.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
        assert (home / ".ssh/gpuplan_cluster").stat().st_mode & 0o777 == 0o600
        pub = (home / ".ssh/gpuplan_cluster.pub").read_text().strip()
        assert pub.endswith(" gpuplan-mpi-intra") and pub in (home / ".ssh/authorized_keys").read_text().splitlines()
        assert (home / ".ssh/config").read_text().splitlines()[:4] == [
            "# >>> gpuplan cluster >>>", "Host mpi-0 10.0.0.1 mpi-1 10.0.0.2 mpi-2 10.0.0.3",
            "  IdentityFile ~/.ssh/gpuplan_cluster", "  StrictHostKeyChecking yes"]
        assert not (home / ".ssh/id_ed25519").exists()  # the user's own key name is left alone
    # every node got the same intra-cluster key
    assert len({(h.fake_root / "root/.ssh/gpuplan_cluster").read_text() for h in hosts}) == 1
    again = playbook.bootstrap_cluster(state, "mpi", ["cluster-network"], FAKE)
    assert {s.status for h in again.hosts for s in h.steps} == {"skipped"}


def test_openmpi_replaces_distro_package_with_a_cuda_aware_build(hosts):
    h = hosts[0]
    (h.fake_root / "var/lib/dpkg/fake/openmpi-bin").write_text("4.1.6\n")
    report = playbook.run_playbooks(as_hosts(hosts[:1]), [playbook.load("openmpi-cuda")], FAKE)
    assert report.ok, report.first_error()
    assert not h.installed("openmpi-bin")
    assert "https://download.open-mpi.org/release/open-mpi/v5.0/openmpi-5.0.6.tar.bz2" in (h.fake_root / "downloads.log").read_text()
    import subprocess

    info = subprocess.run([str(h.fake_root / "usr/local/bin/ompi_info")], capture_output=True, text=True).stdout
    assert "mpi_built_with_cuda_support:value:true" in info
    assert [s.status for s in report.hosts[0].steps] == ["ran", "ran"]


def test_verify_reports_versions_and_skips_allreduce_on_one_gpu(hosts):
    root = hosts[0].fake_root
    for pkg in ("cuda-toolkit-12-6", "cudnn9-cuda-12", "libnccl2"):  # as the default playbooks leave it
        (root / "var/lib/dpkg/fake" / pkg).write_text("2.23.4-1+cuda12.6\n")
    (root / "proc/modules").write_text("nvidia 8617984 0 - Live 0x0\n")
    report = playbook.run_playbooks(as_hosts(hosts[:1]), [playbook.load("verify")], FAKE)
    assert report.ok, report.first_error()
    steps = {s.key: s for s in report.hosts[0].steps}
    assert steps["verify/nvidia-smi"].output == "Tesla T4, 580.65.06, 15360 MiB"
    assert "release 12.6" in steps["verify/nvcc"].output
    assert steps["verify/nccl-version"].output == "libnccl2 2.23.4-1+cuda12.6"
    assert steps["verify/nccl-allreduce"].status == "n/a"
