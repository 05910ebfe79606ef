"""Shared fixtures. Test support modules live in tests/support/ and import as `support.<name>`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

# Three workers share two cores (scripts/test.sh). A torch process (the reference jobs on CPU) that
# starts one thread a core spins against the other worker's work: a tiny colorize step took 35 ms
# with one thread and 70-1,800 ms with two on a loaded machine. Every process a test starts takes
# one thread, the loopback hosts' too (support/sshd.py passes the setting on). Set before torch loads.
os.environ.setdefault("OMP_NUM_THREADS", "1")

pytest_plugins = ["support.aws_moto", "support.postgres"]  # the moto_aws and the PostgreSQL (store) fixtures


# scripts/test.sh runs the suite on three pytest-xdist workers, a test file to a worker (--dist
# loadfile: a module's shared fixtures start once). Nothing machine-wide is shared by tests run at
# once: a daemon that holds machine-wide names (Slurm's munge and node, dockerd's /etc/docker)
# starts under a machine lock (support/machine_lock), and each worker picks its Ray clusters'
# ports in a band of its own and sees only its own clusters' processes (support/ray_env.port_band).
# No two of the files holding the costliest tests run at once (support/schedule.py).


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from support.schedule import ApartFileScheduling

    return ApartFileScheduling(config, log)


@pytest.fixture(autouse=True)
def _no_outside_calls(monkeypatch):
    """No test asks the internet for its public address (a closed local port answers at once,
    so a test that forgot its SSH source fails fast), and a busy lock refuses after 2 s."""
    monkeypatch.setenv("GPUPLAN_CHECKIP_URL", "http://127.0.0.1:9/")
    monkeypatch.setenv("GPUPLAN_LOCK_WAIT", "2")
    # a developer's team state (GPUPLAN_STATE_URL) is never written by a test: the `store`
    # fixture (support/postgres.py) gives a test a database of its own
    monkeypatch.delenv("GPUPLAN_STATE_URL", raising=False)


# What the playbooks write on a machine, each with a mark of what they write there. The loopback
# sshd hosts are this machine, so a test that runs a playbook without `root=$GPUPLAN_FAKE_ROOT`
# would change the developer's own system. Only a change that carries the playbooks' mark is the
# suite's: another process on a shared machine may touch these files too (issue 32: an
# unrelated write to /etc/modprobe.d failed a chaos test).
SYSTEM_FILES = {
    "/etc/modprobe.d/blacklist-nouveau.conf": "lbm-nouveau",
    "/etc/profile.d/gpuplan-cuda.sh": "LD_LIBRARY_PATH",
    "/etc/hosts": "# >>> gpuplan cluster >>>",
    "/etc/docker/daemon.json": '"nvidia"',
    "/etc/apt/sources.list.d/docker.list": "download.docker.com",
    "/etc/apt/sources.list.d/nvidia-container-toolkit.list": "nvidia-container-toolkit-keyring",
}


def _stat(path: str):
    try:
        st = Path(path).stat()
        return st.st_mtime_ns, st.st_size
    except OSError:
        return None


def _marked(path: str) -> bool:
    try:
        return SYSTEM_FILES[path] in Path(path).read_text(errors="replace")
    except OSError:
        return False


@pytest.fixture(autouse=True)
def _system_files_untouched():
    before = {f: _stat(f) for f in SYSTEM_FILES}
    yield
    changed = [f for f in SYSTEM_FILES if _stat(f) != before[f] and _marked(f)]
    assert not changed, (f"this test changed {', '.join(changed)} on the machine running the tests: run playbooks "
                         "against loopback hosts with --param root=$GPUPLAN_FAKE_ROOT")


@pytest.fixture
def gpuplan_home(tmp_path, monkeypatch) -> Path:
    """A private GPUPLAN_HOME (state + config) for one test."""
    home = tmp_path / "gpuplan-home"
    monkeypatch.setenv("GPUPLAN_HOME", str(home))
    return home


@pytest.fixture
def cli(gpuplan_home):
    """Run the gpuplan CLI in-process: cli("estimate", "--videos", "4") -> Result(code, out, err)."""
    from support.cli import run_cli

    return run_cli


@pytest.fixture
def issue_19_regions(gpuplan_home):
    """Issue 19's cases were measured on the AWS and Azure regions and owned hardware of the
    catalog before Sakura 高火力 DOK joined it (issue 22): a DOK task queue, one machine per
    project, is now the cheapest plan for several of them. Plan them where the issue did."""
    (gpuplan_home / "config").mkdir(parents=True, exist_ok=True)
    from support.issue_cases import ISSUE_19_REGIONS

    (gpuplan_home / "config" / "config.yaml").write_text(f"preferred_regions: [{', '.join(ISSUE_19_REGIONS)}]\n")


@pytest.fixture
def dok_env(monkeypatch):
    """The Sakura 高火力 DOK fake (support/sakura_dok_fake.py) started, gpuplan's DOK settings
    pointing at it; stopped after, and no request it did not know."""
    from support.sakura_dok_fake import serving

    with serving(monkeypatch) as fake:
        yield fake


@pytest.fixture
def mem(monkeypatch):
    """An in-memory provider registered as "memory", every size resolving to test_lifecycle's
    offer (m1.gpu at ¥100/h): provision, status and teardown through the CLI without a cloud."""
    from test_lifecycle import offer

    from gpuplan.fleet import provider, provision
    from support.memory_provider import MemoryProvider

    prov = MemoryProvider()
    provider.override("memory", lambda config: prov)
    monkeypatch.setattr(provision, "_resolve", lambda target, region, as_of=None: (offer(), ""))
    yield prov
    provider.override("memory", None)
