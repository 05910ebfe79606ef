"""Items in containers, without a cluster: the `docker run` an attempt makes (ray_driver), what
runs on a node to check docker and pull the image (containers.py), and one attempt run here
through the stand-in docker (tests/support/fakebin/docker) with a stub for Ray's GPU ids."""

from __future__ import annotations

import os
import shlex
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

FAKEBIN = Path(__file__).parent / "support" / "fakebin"


def test_docker_run_names_the_slots_gpu_mounts_the_output_and_workdir_and_passes_the_variables():
    from gpuplan.run.ray.ray_driver import container_argv, container_name

    name = container_name("demo-3", 7, 2)
    assert name == "gpuplan-demo-3-7-2"
    argv = container_argv(["docker"], name, "reg.example/me/x:1", "python run.py 'a b'", ["1"], "/h/out/7", "/h/wd",
                          {"GPUPLAN_ITEM": "a b", "GPUPLAN_JOB": "demo-3"})
    assert argv == ["docker", "run", "--rm", "--init", "--ipc", "host", "--name", "gpuplan-demo-3-7-2",
                    "--gpus", "device=1", "-v", "/h/out/7:/h/out/7", "-v", "/h/wd:/h/wd", "-w", "/h/wd",
                    "-e", "GPUPLAN_ITEM=a b", "-e", "GPUPLAN_JOB=demo-3",
                    "reg.example/me/x:1", "sh", "-c", "python run.py 'a b'"]  # sh: an image need not have bash
    # a gang rank holds every GPU of its node: docker reads the value as CSV, so it goes in quotes
    assert container_argv(["sudo", "-n", "docker"], name, "x", "c", ["0", "1"], "/o", "", {})[:10] == [
        "sudo", "-n", "docker", "run", "--rm", "--init", "--ipc", "host", "--name", name]
    assert '"device=0,1"' in container_argv(["docker"], name, "x", "c", ["0", "1"], "/o", "", {})
    cpu = container_argv(["docker"], name, "x", "c", [], "/o", "", {})  # a CPU-only node: no --gpus, no -w
    assert "--gpus" not in cpu and "-w" not in cpu
    assert container_name("a b/c", 0, 1) == "gpuplan-a_b_c-0-1"


def test_the_registry_is_read_from_the_image_name_as_docker_reads_it():
    from gpuplan.run.ray.containers import registry_of

    assert registry_of("ghcr.io/me/x:1") == "ghcr.io"
    assert registry_of("my.reg:5000/x") == "my.reg:5000"
    assert registry_of("localhost/x") == "localhost"
    assert registry_of("me/x:1") == "" and registry_of("ubuntu") == ""  # Docker Hub


@dataclass(frozen=True)
class BatchRegistry:  # the shape of batchfile.Registry: the secret read from password_env when asked
    server: str = ""
    username: str = ""
    password_env: str = ""

    def password(self) -> str:
        return os.environ[self.password_env]


def test_a_login_comes_from_a_registry_with_password_env_and_its_secret_is_never_in_a_script(monkeypatch):
    from gpuplan.errors import UsageError
    from gpuplan.run.ray import containers

    monkeypatch.setenv("REG_TOKEN", "tok-5ecret")
    login = containers.login_of(BatchRegistry(username="bob", password_env="REG_TOKEN"), "ghcr.io/me/x:1")
    assert login == containers.Login("bob", "tok-5ecret", "ghcr.io")
    assert "tok-5ecret" not in repr(login)
    assert containers.login_of(BatchRegistry(), "x") is None  # no user: a public image
    script = containers.pull_script("ghcr.io/me/x:1", login, "docker")
    assert "tok-5ecret" not in script and "--password-stdin" in script and "/dev/shm/" in script
    assert "trap 'rm -rf \"$d\"' EXIT" in script  # the login's folder goes however the pull ends
    assert containers.pull_script("x:1", None, "sudo -n docker") == (
        "if sudo -n docker image inspect x:1 >/dev/null 2>&1; then echo present; exit 0; fi;"
        " sudo -n docker pull -q x:1 >/dev/null")
    assert script.startswith("if docker image inspect ghcr.io/me/x:1 >/dev/null 2>&1; then echo present; exit 0; fi;")
    monkeypatch.delenv("REG_TOKEN")
    with pytest.raises(UsageError, match="REG_TOKEN is not set"):
        containers.secret_from_env("REG_TOKEN")
    with pytest.raises(UsageError, match="image reference"):
        containers.check_image("-v /:/host")


def test_an_image_on_the_node_is_not_pulled_unless_its_tag_moves(tmp_path):
    """Issue 41: an image already on the node was pulled anyway. Run here through bash with the
    stand-in docker: a fixed tag or a digest the node has is used as it is; no tag or :latest is
    pulled every time (the tag moves)."""
    import subprocess

    from gpuplan.run.ray import containers

    root = tmp_path / "root"
    (root / "var/lib/dpkg/fake").mkdir(parents=True)
    (root / "var/lib/dpkg/fake/docker-ce").touch()
    env = dict(os.environ, GPUPLAN_FAKE_ROOT=str(root), PATH=f"{FAKEBIN}:{os.environ['PATH']}")

    def pull(image: str) -> tuple[int, str]:
        r = subprocess.run(["bash", "-c", containers.pull_script(image, None, "docker")], env=env, capture_output=True,
                           text=True, timeout=30)
        return r.returncode, r.stdout.strip()

    def pulls() -> list[str]:
        return [c[-1] for c in _calls(root) if c[1] == "pull"]

    assert pull("me/x:1") == (0, "") and pulls() == ["me/x:1"]  # not there: pulled
    assert pull("me/x:1") == (0, "present") and pulls() == ["me/x:1"]  # there: not pulled again
    assert pull("me/x") == (0, "") and pull("me/x") == (0, "") and pulls() == ["me/x:1", "me/x", "me/x"]
    assert pull("me/x:latest") == (0, "") and pulls()[-1] == "me/x:latest"
    assert [containers.always_pulled(i) for i in ("ubuntu", "ubuntu:latest", "my.reg:5000/x", "my.reg:5000/x:2",
                                                  "x@sha256:" + "0" * 64, "nvcr.io/nvidia/pytorch:24.05-py3")] == [
        True, True, True, False, False, False]


def test_a_failed_pull_is_worded_by_its_cause():
    """Issue 41: a pull that failed for DNS said "a private image?"."""
    from gpuplan.run.ray.containers import Login, pull_cause

    dns = ('Error response from daemon: Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io'
           ' on 127.0.0.53:53: server misbehaving')
    assert pull_cause(dns, "me/x:1", None) == (
        " (the node cannot resolve the name of Docker Hub (registry-1.docker.io): check its DNS and network, or give an image"
        " the node has already or one from a registry it can reach)")
    assert "private" not in pull_cause(dns, "me/x:1", None)
    refused = 'Error response from daemon: Get "https://ghcr.io/v2/": dial tcp 1.2.3.4:443: connect: connection refused'
    assert pull_cause(refused, "ghcr.io/me/x:1", None) == " (the node cannot reach ghcr.io: check its network, proxy or firewall)"
    denied = ("Error response from daemon: pull access denied for me/x, repository does not exist or may require"
              " 'docker login': denied: requested access to the resource is denied")
    assert pull_cause(denied, "me/x:1", None) == (
        " (a private image? give the registry's user and the variable holding its token)")
    assert "may not read ghcr.io/me/x:1" in pull_cause(denied, "ghcr.io/me/x:1", Login("bob", "s", "ghcr.io"))
    unknown = "Error response from daemon: manifest for me/x:9 not found: manifest unknown: manifest unknown"
    assert pull_cause(unknown, "me/x:9", None) == (
        " (no such image or tag at Docker Hub (registry-1.docker.io): check the name and tag)")
    full = "failed to register layer: write /usr/lib/x.so: no space left on device"
    assert "disk is full" in pull_cause(full, "me/x:1", None)
    assert pull_cause("something else", "me/x:1", None) == ""


@pytest.fixture
def node_here(tmp_path, monkeypatch):
    """This machine as a node for one attempt: the stand-in docker installed in a fake root, a
    home for ~/.gpuplan/jobs, and a stub for Ray (the slot holds GPU 1)."""
    root = tmp_path / "root"
    (root / "var/lib/dpkg/fake").mkdir(parents=True)
    (root / "var/lib/dpkg/fake/docker-ce").touch()
    monkeypatch.setenv("GPUPLAN_FAKE_ROOT", str(root))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", f"{FAKEBIN}:{os.environ['PATH']}")
    monkeypatch.setenv("GPUPLAN_NODE", "n-0")
    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(get_gpu_ids=lambda: [1]))
    return root


def _calls(root: Path) -> list[list[str]]:
    return [shlex.split(line) for line in (root / "docker.log").read_text().splitlines() if line.startswith("docker ")]


def test_an_attempt_in_a_container_gets_its_gpu_output_dir_and_variables(node_here, tmp_path):
    from gpuplan.run.ray import ray_driver

    wd = tmp_path / "home/wd"
    wd.mkdir(parents=True)
    shell = 'echo "gpu=$NVIDIA_VISIBLE_DEVICES cuda=${CUDA_VISIBLE_DEVICES-none} item=$GPUPLAN_ITEM pwd=$PWD" > "$GPUPLAN_OUTPUT_DIR/r.txt"'  # as command_line renders {out}
    r = ray_driver.run_item("j-1", 3, "x.mp4", 1, shell, 30, "0.500000", "~/wd", image="img:1")
    assert (r["exit"], r["timed_out"], r["capped"], r["slot"]) == (0, False, False, "n-0:1")
    out = tmp_path / "home/.gpuplan/jobs/j-1/out/3"
    assert (out / "r.txt").read_text() == f"gpu=1 cuda=none item=x.mp4 pwd={wd}\n"
    run, rm = _calls(node_here)
    assert run[:10] == ["docker", "run", "--rm", "--init", "--ipc", "host", "--name", "gpuplan-j-1-3-1", "--gpus", "device=1"]
    assert f"GPUPLAN_OUTPUT_DIR={out}" in run and "GPUPLAN_MEMORY_FRACTION=0.500000" in run and "GPUPLAN_ATTEMPT=1" in run
    assert rm == ["docker", "rm", "-f", "gpuplan-j-1-3-1"]  # always, whatever ended the attempt
    assert not list((tmp_path / "home/.gpuplan/jobs/j-1/containers").iterdir())


def _running(argv: list[str]) -> bool:
    from support.ray_env import processes_running

    return bool(processes_running(argv))


def test_a_timed_out_container_that_ignores_sigterm_is_killed_with_docker_rm(node_here, tmp_path):
    from gpuplan.run.ray import ray_driver

    # killing the docker client's process group leaves the (stand-in) container running: only
    # `docker rm -f` stops it
    r = ray_driver.run_item("j-2", 0, "a", 1, "trap '' TERM; sleep 321", 1, "", "", image="img:1")
    assert r["timed_out"] and not r["capped"]
    assert "timed out after 1 s" in Path(r["log"]).read_text()
    assert ["docker", "rm", "-f", "gpuplan-j-2-0-1"] in _calls(node_here)
    deadline = time.monotonic() + 5
    while _running(["sleep", "321"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(["sleep", "321"])


def test_an_attempt_stops_itself_at_the_yen_cap(node_here, tmp_path):
    from gpuplan.run.ray import ray_driver

    stop_at = time.time() + 1.5
    t0 = time.monotonic()
    r = ray_driver.run_item("j-3", 0, "a", 1, "sleep 322", 600, "", "", image="img:1", stop_at=stop_at)
    assert r["capped"] and not r["timed_out"] and time.monotonic() - t0 < 30  # at the cap's 1.5 s, not the 600 s limit
    assert "stopped at the yen cap" in Path(r["log"]).read_text()
    assert not _running(["sleep", "322"])
    # handed out once the cap has passed: it never starts
    late = ray_driver.run_item("j-3", 1, "b", 1, "sleep 323", 600, "", "", stop_at=time.time() - 1)
    assert late["capped"] and late["started"] is False and late["log"] is None
