"""Items in containers of a real Docker daemon (issue 41): dockerd started in a scratch folder
(tests/support/docker_daemon.py; skipped, with why, where it cannot start), an image built here
FROM scratch (busybox and its applets: no bash, and nothing can be pulled: no registry is
reachable), and `gpuplan launch` on two loopback owned hosts whose `docker` is the real CLI
talking to that daemon (tests/support/fakebin/docker hands every call over to it).

No GPU here: the daemon's `nvidia` runtime is runc under that name, and `--gpus device=N` reaches
the container as NVIDIA_VISIBLE_DEVICES=N: the NVIDIA runtime's own device injection is the one
thing these tests leave unproven.
"""

from __future__ import annotations

import shlex

import pytest
import yaml

pytestmark = pytest.mark.sshd
IMAGE = "gpuplan-test/busybox:1"
ITEMS = ("clip-a.mp4", "clip-b.mp4", "clip-c.mp4", "clip-d.mp4")


@pytest.fixture(scope="module")
def daemon():
    from support.docker_daemon import start_daemon

    d = start_daemon()
    try:
        d.import_busybox(IMAGE)
        yield d
    finally:
        d.stop()


@pytest.fixture
def owned_hosts(daemon, tmp_path, gpuplan_home, monkeypatch):
    """Two loopback hosts as the inventory's `t4` group whose docker is the real one; Ray from the tests' venv."""
    from support.docker_daemon import docker_cli
    from support.ray_env import free_port_range, ray_venv, stop_ray
    from support.sshd import start_hosts, stop_hosts

    venv = ray_venv()
    real = {"GPUPLAN_REAL_DOCKER": docker_cli(), **daemon.env}
    hosts = start_hosts(2, tmp_path, host_env=[real, real])
    entries = [{"name": h.name, "address": h.host, "port": h.port, "private_address": h.host,
                "gpus": {"model": "Tesla T4", "count": 1}, "group": "t4", "power_watts": 70,
                "host_key": h.host_public_key} for h in hosts]
    (gpuplan_home / "config").mkdir(parents=True, exist_ok=True)
    (gpuplan_home / "config" / "inventory.yaml").write_text(yaml.safe_dump(
        {"defaults": {"user": "root", "key": str(hosts[0].client_key_path)}, "hosts": entries}))
    port = free_port_range(2)
    monkeypatch.setenv("GPUPLAN_RAY_VENV", str(venv))
    monkeypatch.setenv("GPUPLAN_RAY_PORT", str(port))
    monkeypatch.setenv("GPUPLAN_RAY_OBJECT_STORE_MB", "80")
    monkeypatch.setenv("GPUPLAN_POLL_S", "0.3")
    monkeypatch.chdir(tmp_path)
    try:
        yield hosts
    finally:
        stop_ray("batch-", port, 2)
        stop_hosts(hosts)


def _calls(hosts) -> list[list[str]]:
    """Every docker call on the hosts, as argv (what gpuplan ran, before the hand-over)."""
    return [shlex.split(line) for h in hosts if (h.fake_root / "docker.log").exists()
            for line in (h.fake_root / "docker.log").read_text().splitlines() if line.startswith("docker ")]


def test_the_image_is_built_here_from_scratch_and_has_no_bash(daemon):
    r = daemon.docker("run", "--rm", "--network", "none", IMAGE, "sh", "-c", "echo in $0; ls /bin | grep -c bash")
    assert r.stdout.split() == ["in", "sh", "0"], r.stderr
    r = daemon.docker("run", "--rm", "--network", "none", IMAGE, "bash", "-c", "true")
    assert r.returncode != 0 and "bash" in r.stderr  # what every item did before issue 41 (`IMAGE bash -c CMD`)


def test_a_launch_runs_its_items_in_real_containers_and_a_failed_items_log_outlives_the_teardown(daemon, owned_hosts,
                                                                                                cli, tmp_path):
    (tmp_path / "videos.txt").write_text("".join(f"{i}\n" for i in ITEMS))
    command = ("sh -c 'echo in-container {item} gpu=$NVIDIA_VISIBLE_DEVICES > $GPUPLAN_OUTPUT_DIR/result.txt;"
               " test {item} != clip-c.mp4 || { echo cannot colorize {item} >&2; exit 3; }'")
    (tmp_path / "batch.yaml").write_text(yaml.safe_dump({
        "workload": "colorize-hd", "items": "videos.txt", "infra": ["owned"], "image": IMAGE, "command": command,
        "params": {"root": "$GPUPLAN_FAKE_ROOT"}, "outputs": "results"}, sort_keys=False))
    r = cli("launch", str(tmp_path / "batch.yaml"), "-y")
    assert r.code == 5, r.out + r.err  # one item failed
    assert "3 ok of 4 items" in " ".join(r.out.split()) and "cluster batch torn down" in r.out
    results = tmp_path / "results"
    for i, item in enumerate(ITEMS):
        if item != "clip-c.mp4":
            assert (results / f"{i:04d}-{item}" / "result.txt").read_text() == f"in-container {item} gpu=0\n"
    # the failed item's reason, fetched before the teardown
    assert sorted(p.name for p in (results / "logs").iterdir()) == ["0002-clip-c.mp4.log"]
    assert "cannot colorize clip-c.mp4" in (results / "logs/0002-clip-c.mp4.log").read_text()
    calls = _calls(owned_hosts)
    runs = [c for c in calls if c[1] == "run"]
    assert len(runs) >= 4 and all(c[c.index(IMAGE) + 1:c.index(IMAGE) + 3] == ["sh", "-c"] for c in runs)
    # the nodes had the image (no registry is reachable: a pull would have failed the launch)
    assert [c for c in calls if c[1] == "pull"] == []
    assert [c for c in calls if c[1:3] == ["image", "inspect"]]
    left = daemon.docker("ps", "-a", "--format", "{{.Names}}")
    assert left.returncode == 0 and left.stdout.split() == []  # every container removed


def test_a_pull_that_fails_for_dns_is_said_so_not_private(daemon):
    """The real daemon's words when it cannot reach a registry, read as containers.pull does."""
    from gpuplan.run.ray.containers import pull_cause

    r = daemon.docker("pull", "gpuplan-test/absent:1", timeout=120)
    assert r.returncode != 0
    said = r.stderr.strip().splitlines()[-1]
    cause = pull_cause(said, "gpuplan-test/absent:1", None)
    assert cause.startswith((" (the node cannot resolve the name of Docker Hub", " (the node cannot reach Docker Hub")), said
    assert "private" not in cause
