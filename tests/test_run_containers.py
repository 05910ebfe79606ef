"""Issue 30 on Ray for real: items in containers and the yen cap, on two loopback sshd hosts
each running its own Ray node (as tests/test_run_engine.py builds its cluster), with the
stand-in docker (tests/support/fakebin/docker: records every call in the host's fake root and
runs `sh -c CMD` as a "container" that only `docker kill` / `docker rm -f` stop).
tests/test_docker_daemon.py runs items in containers of a real Docker daemon.
"""

from __future__ import annotations

import base64
import json
import shlex
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from support.cli import items_file, submitted_job
from support.waiting import wait_for

pytestmark = pytest.mark.sshd
PRICE = Decimal("367.20")  # NC24 per hour, report A
CLUSTER = "boxes"
IMAGE = "example/colorize:1"


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """Two loopback sshd hosts as the cluster CLUSTER, 2 GPUs each, its Ray started once for the module."""
    from support.ray_env import loopback_ray_cluster

    with loopback_ray_cluster(tmp_path_factory.mktemp("ray-home"), CLUSTER, PRICE) as running:
        yield running


@pytest.fixture(scope="module")
def docker_ready(ray_cluster):
    """Docker and the NVIDIA container toolkit on both hosts, by the docker-gpu playbook (into the
    hosts' fake roots)."""
    r = _cli("bootstrap", CLUSTER, "--playbook", "docker-gpu", "--param", "root=$GPUPLAN_FAKE_ROOT")
    assert r.code == 0, r.err + r.out
    return ray_cluster


def _cli(*args):
    from support.cli import run_cli

    return run_cli(*args)


def _calls(host) -> list[list[str]]:
    """Every docker call on this host (the stand-in's log), as argv."""
    log = host.fake_root / "docker.log"
    return [shlex.split(line) for line in log.read_text().splitlines() if line.startswith("docker ")] if log.exists() else []


def _notes(host) -> list[str]:
    log = host.fake_root / "docker.log"
    return [line for line in log.read_text().splitlines() if not line.startswith("docker ")] if log.exists() else []


def _runs(hosts, job: str) -> list[list[str]]:
    return [c for h in hosts for c in _calls(h) if c[1] == "run" and any(w.startswith(f"gpuplan-{job}-") for w in c)]


def _containers_left(hosts) -> list[str]:
    return [p.name for h in hosts for p in (h.fake_root / "docker/containers").glob("*")]


def _opt(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, w in enumerate(argv[:-1]) if w == flag]


def test_a_node_without_docker_is_named_with_the_playbook_to_run(docker_ready, tmp_path):
    state, hosts, _ = docker_ready
    installed = hosts[1].fake_root / "var/lib/dpkg/fake/docker-ce"
    installed.rename(installed.with_suffix(".away"))
    jobs_before = len(state.jobs(CLUSTER))
    try:
        r = _cli("run", CLUSTER, "--items", items_file(tmp_path, ["a"]), "--image", IMAGE, "--", "echo", "{item}")
    finally:
        installed.with_suffix(".away").rename(installed)
    assert r.code == 4, r.err + r.out
    assert r.err.strip().splitlines()[-1] == (f"gpuplan: error: {CLUSTER}-1: docker is not installed: run `gpuplan"
                                              f" bootstrap {CLUSTER} --playbook docker-gpu`; nothing was submitted:"
                                              f" the cluster {CLUSTER} (2 nodes) is still up with Ray running, billing"
                                              f" about ¥734.40/h; fix the nodes and run again, or `gpuplan teardown"
                                              f" {CLUSTER}`")  # issue 41: what stays up and bills, said
    assert len(state.jobs(CLUSTER)) == jobs_before  # nothing was submitted


def test_items_run_in_containers_with_their_gpu_mounts_and_variables_and_outputs_come_back(docker_ready, tmp_path):
    state, hosts, _ = docker_ready
    code = tmp_path / "code"
    code.mkdir()
    (code / "show.sh").write_text('echo "item=$1 gpu=$NVIDIA_VISIBLE_DEVICES cuda=${CUDA_VISIBLE_DEVICES-none}'
                                  ' job=$GPUPLAN_JOB attempt=$GPUPLAN_ATTEMPT pwd=$PWD" > "$GPUPLAN_OUTPUT_DIR/r.txt"\n')
    names = ["a", "b", "c", "d"]
    r = _cli("run", CLUSTER, "--items", items_file(tmp_path, names), "--image", IMAGE, "--workdir", str(code), "--",
             "sh", "show.sh", "{item}")
    assert r.code == 0, r.err + r.out
    job = submitted_job(r.out)
    for h in hosts:  # pulled once per node, before any item ran there
        calls = [c for c in _calls(h) if c[1] in ("pull", "run")]
        pulls = [i for i, c in enumerate(calls) if c[1] == "pull" and c[-1] == IMAGE]
        assert pulls and all(i < j for i in pulls for j, c in enumerate(calls) if c[1] == "run" and job in " ".join(c))
    runs = _runs(hosts, job)
    assert len(runs) == 4
    for argv in runs:
        name = _opt(argv, "--name")[0]
        index, attempt = (int(x) for x in name.removeprefix(f"gpuplan-{job}-").split("-"))
        home = next(h.fake_root / "root" for h in hosts if argv in _calls(h))
        out = f"{home}/.gpuplan/jobs/{job}/out/{index}"
        wd = f"{home}/.gpuplan/jobs/{job}/workdir"
        # no bash needed; the item reaches the container as $GPUPLAN_ITEM (issue 43's one command line)
        assert argv[argv.index(IMAGE):] == [IMAGE, "sh", "-c", 'exec sh show.sh "$GPUPLAN_ITEM"']
        assert _opt(argv, "--gpus")[0] in ("device=0", "device=1") and "--rm" in argv
        assert _opt(argv, "-v") == [f"{out}:{out}", f"{wd}:{wd}"] and _opt(argv, "-w") == [wd]
        env = dict(e.split("=", 1) for e in _opt(argv, "-e"))
        assert env == {"GPUPLAN_ITEM": names[index], "GPUPLAN_JOB": job, "GPUPLAN_ATTEMPT": str(attempt),
                       "GPUPLAN_OUTPUT_DIR": out}
        # and the container is removed after, whatever ended it
        assert ["docker", "rm", "-f", name] in [c for h in hosts for c in _calls(h)]
    assert _containers_left(hosts) == []
    back = tmp_path / "back"
    r = _cli("logs", CLUSTER, job, "--fetch", str(back))
    assert r.code == 0, r.err
    for i, n in enumerate(names):
        got = (back / f"000{i}-{n}" / "r.txt").read_text().split()
        assert got[0] == f"item={n}" and got[1] in ("gpu=0", "gpu=1") and got[2:5] == ["cuda=none", f"job={job}", "attempt=1"]
        assert got[5].startswith("pwd=") and got[5].endswith(f"/.gpuplan/jobs/{job}/workdir")


def test_a_private_image_is_pulled_with_a_login_whose_secret_reaches_no_disk_and_no_process_list(docker_ready, tmp_path,
                                                                                                 monkeypatch):
    from gpuplan import paths

    state, hosts, home = docker_ready
    secret = "pw-" + base64.b32encode(__import__("os").urandom(10)).decode()
    monkeypatch.setenv("TEAM_REGISTRY_TOKEN", secret)
    image = "private.example/team/colorize:2"
    before = {h.name: len(_calls(h)) for h in hosts}
    r = _cli("run", CLUSTER, "--items", items_file(tmp_path, ["p"]), "--image", image, "--registry-user", "bob",
             "--registry-password-env", "TEAM_REGISTRY_TOKEN", "--", "sh", "-c", "echo {item}")
    assert r.code == 0, r.err + r.out
    job = submitted_job(r.out)
    for h in hosts:
        new = _calls(h)[before[h.name]:]
        logins = [c for c in new if c[1] == "login"]
        assert logins == [["docker", "login", "--username", "bob", "--password-stdin", "private.example"]]
        note = next(n for n in _notes(h) if n.startswith("login:") and "user=bob" in n)
        assert "got a password on stdin" in note and "in-process-list=0" in note
        config = note.split("DOCKER_CONFIG=")[1].split()[0]
        assert config.startswith("/dev/shm/gpuplan-docker-") and not Path(config).exists()  # removed after the pull
        assert f"pull: {image} DOCKER_CONFIG={config}" in _notes(h)
    # the secret (or docker's base64 of it) in no recorded argv and no file: fake roots, gpuplan's
    # state and the job's spec, /dev/shm
    hidden = [secret.encode(), base64.b64encode(f"bob:{secret}".encode())]
    places = [h.fake_root for h in hosts] + [paths.state_db().parent, Path("/dev/shm")]
    leaks = [str(f) for p in places for f in p.rglob("*") if f.is_file() and _holds(f, hidden)]
    assert leaks == []
    assert state.job(job).options["image"] == image and secret not in json.dumps(state.job(job).options)
    # a node that has the image does not pull it again, nor log in
    mid = {h.name: len(_calls(h)) for h in hosts}
    r = _cli("run", CLUSTER, "--items", items_file(tmp_path, ["p"]), "--image", image, "--registry-user", "bob",
             "--registry-password-env", "TEAM_REGISTRY_TOKEN", "--", "sh", "-c", "echo {item}")
    assert r.code == 0, r.err + r.out
    assert [c for h in hosts for c in _calls(h)[mid[h.name]:] if c[1] in ("login", "pull")] == []
    _forget_images(hosts)  # nodes without it, from here on
    # a refused login is one line, without the secret; and the job is not submitted
    monkeypatch.setenv("TEAM_REGISTRY_TOKEN", "wrong")
    jobs_before = len(state.jobs(CLUSTER))
    r = _cli("run", CLUSTER, "--items", items_file(tmp_path, ["p"]), "--image", image, "--registry-user", "bob",
             "--registry-password-env", "TEAM_REGISTRY_TOKEN", "--", "sh", "-c", "echo {item}")
    assert r.code == 4 and "the registry refused the login of bob at private.example" in r.err
    assert len(state.jobs(CLUSTER)) == jobs_before
    # without a login the private image cannot be pulled: one line naming the node and the image
    r = _cli("run", CLUSTER, "--items", items_file(tmp_path, ["p"]), "--image", image, "--", "sh", "-c", "echo {item}")
    assert r.code == 4 and f"{CLUSTER}-0 cannot pull {image}: Error response from daemon: pull access denied" in r.err


def _forget_images(hosts) -> None:
    """The stand-in's pulled images gone from every host (as `docker rmi` would)."""
    import shutil

    for h in hosts:
        shutil.rmtree(h.fake_root / "docker/images", ignore_errors=True)


def test_a_node_without_the_nvidia_runtime_says_what_stays_up_and_bills(docker_ready, tmp_path):
    """Issue 41: the runtime check failed with exit 4 and left the cluster and its Ray up without
    saying so."""
    from support.ray_env import tagged_pids

    state, hosts, _ = docker_ready
    broken = hosts[1].fake_root / "docker-no-nvidia"
    broken.touch()
    jobs_before = len(state.jobs(CLUSTER))
    try:
        r = _cli("run", CLUSTER, "--items", items_file(tmp_path, ["a"]), "--image", IMAGE, "--", "echo", "{item}")
    finally:
        broken.unlink()
    assert r.code == 4, r.err + r.out
    assert r.err.strip().splitlines()[-1] == (
        f"gpuplan: error: {CLUSTER}-1: docker has no NVIDIA runtime (containers would not see the GPUs): run `gpuplan"
        f" bootstrap {CLUSTER} --playbook docker-gpu`; nothing was submitted: the cluster {CLUSTER} (2 nodes) is still"
        f" up with Ray running, billing about ¥734.40/h; fix the nodes and run again, or `gpuplan teardown {CLUSTER}`")
    assert len(state.jobs(CLUSTER)) == jobs_before and tagged_pids(f"{CLUSTER}-")  # as it says: Ray still runs


def test_a_pull_is_said_by_its_cause_and_an_image_a_node_has_is_not_pulled(docker_ready, tmp_path):
    """Issue 41: an image already on the node was pulled anyway, and a pull that failed for DNS
    said "a private image?"."""
    state, hosts, _ = docker_ready
    image = "example/present:3"
    for h in hosts:  # on both nodes already (as `docker load` or an earlier batch leaves it)
        (h.fake_root / "docker/images").mkdir(parents=True, exist_ok=True)
        (h.fake_root / "docker/images/example_present_3").touch()
    before = {h.name: len(_calls(h)) for h in hosts}
    r = _cli("run", CLUSTER, "--items", items_file(tmp_path, ["a", "b"]), "--image", image, "--", "echo", "{item}")
    assert r.code == 0, r.err + r.out
    assert "example/present:3: on 2 nodes already (not pulled there)" in r.err
    new = [c for h in hosts for c in _calls(h)[before[h.name]:]]
    assert [c for c in new if c[1] == "pull"] == [] and sum(c[1] == "run" for c in new) == 2
    r = _cli("run", CLUSTER, "--items", items_file(tmp_path, ["a"]), "--image", "nodns.example/me/x:1", "--",
             "echo", "{item}")
    assert r.code == 4, r.err + r.out
    line = r.err.strip().splitlines()[-1]
    assert f"{CLUSTER}-0 cannot pull nodns.example/me/x:1: Error response from daemon:" in line
    assert "(the node cannot resolve the name of nodns.example: check its DNS and network" in line
    assert "private image" not in line


def _holds(path: Path, needles: list[bytes]) -> bool:
    try:
        data = path.read_bytes()
    except OSError:
        return False
    return any(n in data for n in needles)


def test_a_timed_out_and_a_cancelled_item_have_their_containers_killed(docker_ready, tmp_path):
    from support.ray_env import processes_running

    state, hosts, _ = docker_ready
    # the command ignores SIGTERM: killing the docker client's group leaves its container running,
    # and only `docker rm -f` stops it
    r = _cli("run", CLUSTER, "--items", items_file(tmp_path, ["slow"]), "--image", IMAGE, "--timeout", "2s", "--",
             "sh", "-c", "trap '' TERM; sleep 331; : {item}")
    assert r.code == 5, r.err + r.out
    job = submitted_job(r.out)
    assert state.job_items(job)[0].timed_out
    runs = _runs(hosts, job)
    assert len(runs) == 2  # a failure is tried once more on the other node
    for run in runs:
        assert ["docker", "rm", "-f", _opt(run, "--name")[0]] in [c for h in hosts for c in _calls(h)]
    wait_for(lambda: not processes_running(["sleep", "331"]), timeout=10)
    assert _containers_left(hosts) == []

    r = _cli("run", CLUSTER, "--items", items_file(tmp_path, ["x", "y"]), "--image", IMAGE, "--detach", "--",
             "sh", "-c", "trap '' TERM; sleep 632; : {item}")
    assert r.code == 0, r.err
    job = submitted_job(r.out)
    wait_for(lambda: len(processes_running(["sleep", "632"])) == 2)
    r = _cli("cancel", CLUSTER, job)
    assert r.code == 0, r.err
    # issue 41: the job said "cancelled" with its two items still "running"
    assert state.job(job).state == "cancelled" and state.job_counts(job) == {"cancelled": 2}
    wait_for(lambda: not processes_running(["sleep", "632"]), timeout=20)
    wait_for(lambda: not _containers_left(hosts), timeout=10)
    names = {_opt(a, "--name")[0] for a in _runs(hosts, job)}
    removed = {c[3] for h in hosts for c in _calls(h) if c[1:3] == ["rm", "-f"]}
    assert len(names) == 2 and names <= removed


def _pids_left(hosts, job: str) -> list[str]:
    return [p.name for h in hosts for p in (h.fake_root / f"root/.gpuplan/jobs/{job}/pids").glob("*")]


def test_the_yen_cap_stops_the_batch_on_the_cluster_with_no_client_following(docker_ready, tmp_path):
    """Submitted and left: nobody follows it. At stop_at the driver and each node stop it."""
    from gpuplan.run import backends
    from gpuplan.run import items as run_items
    from gpuplan.run.ray import runner
    from support.ray_env import processes_running

    state, hosts, _ = docker_ready
    stop_at = datetime.now(timezone.utc) + timedelta(seconds=20)
    items = [(i, f"v{i}") for i in range(6)]  # 4 slots: four run, two wait
    job = runner.submit(state, CLUSTER, items, ["sh", "-c", "sleep 37; : {item}"], image=IMAGE, stop_at=stop_at)
    assert state.job(job).options["stop_at"] == stop_at.isoformat(timespec="milliseconds")
    wait_for(lambda: len(processes_running(["sleep", "37"])) == 4, timeout=60)
    row = wait_for(lambda: (r := backends.refresh(state, job)).state in run_items.JOB_STATES_OVER and r, timeout=60)
    assert row.state == "capped"
    statuses = sorted(it.status for it in state.job_items(job))
    assert statuses == ["cancelled"] * 4 + ["queued"] * 2
    assert not processes_running(["sleep", "37"]) and _pids_left(hosts, job) == [] and _containers_left(hosts) == []
    for it in state.job_items(job, statuses=("cancelled",)):
        log = _cli("logs", CLUSTER, job, it.item)
        assert "stopped at the yen cap" in log.out
    # billed no later than the cap plus one increment (per second here: 2 nodes x ¥367.20/h)
    started = row.started_at
    terms, nodes = state.ledger_terms(CLUSTER), row.nodes
    at_cap = run_items.yen_for(terms, PRICE, nodes, (stop_at - started).total_seconds())
    assert backends.yen(state, row) <= at_cap + run_items.yen_for(terms, PRICE, nodes, 1)


def test_a_cap_moved_earlier_stops_the_attempts_already_running(ray_cluster):
    """`run --recover` with a dearer replacement moves the cap earlier (engine.move_cap): the
    driver stops at the new time, and the attempts it handed out before, which only know the old
    one, are told to stop then."""
    from gpuplan.run import backends
    from gpuplan.run import items as run_items
    from gpuplan.run.ray import engine, runner
    from support.ray_env import processes_running

    state, hosts, _ = ray_cluster
    far = datetime.now(timezone.utc) + timedelta(seconds=900)
    job = runner.submit(state, CLUSTER, [(i, f"w{i}") for i in range(6)], ["sh", "-c", "sleep 41; : {item}"],
                        stop_at=far)
    wait_for(lambda: len(processes_running(["sleep", "41"])) == 4, timeout=60)
    moved = datetime.now(timezone.utc) + timedelta(seconds=2)
    engine.move_cap(engine.engine_of(state, CLUSTER), job, moved)
    row = wait_for(lambda: (r := backends.refresh(state, job)).state in run_items.JOB_STATES_OVER and r, timeout=60)
    assert row.state == "capped" and row.ended_at < far - timedelta(seconds=800)
    assert sorted(it.status for it in state.job_items(job)) == ["cancelled"] * 4 + ["queued"] * 2
    assert not processes_running(["sleep", "41"]) and _pids_left(hosts, job) == []


def test_run_max_yen_stops_at_what_the_nodes_may_be_billed_and_exits_6(docker_ready, tmp_path):
    from gpuplan.run import backends
    from support.ray_env import processes_running

    state, hosts, _ = docker_ready
    # 2 nodes x ¥367.20/h = ¥0.204 a second: ¥4 buys 19 s
    r = _cli("run", CLUSTER, "--items", items_file(tmp_path, [f"m{i}" for i in range(5)]), "--max-yen", "4", "--",
             "sh", "-c", "sleep 38; : {item}")
    assert r.code == 6, r.err + r.out
    job = submitted_job(r.out)
    row = state.job(job)
    assert row.state == "capped" and row.options["max_yen"] == "4"
    assert f"capped at ¥4: {_yen(backends.yen(state, row))} spent" in " ".join(r.err.split())
    assert backends.yen(state, row) <= Decimal(4)
    assert not processes_running(["sleep", "38"]) and _pids_left(hosts, job) == []
    assert {it.status for it in state.job_items(job)} <= {"cancelled", "queued"}


def _yen(value: Decimal) -> str:
    from gpuplan.planning import fmt

    return fmt.yen(value)
