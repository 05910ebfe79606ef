"""Batches on a real Slurm (issue 34): Debian's slurmctld + slurmd + slurmdbd with munge on this
machine (tests/support/slurm.py, two GPUs as GRES of stand-in device files), reached through a
loopback sshd login host (tests/support/sshd.py). `gpuplan run slurm:lab/gpu` and `gpuplan launch`
submit one job array, follow it with squeue/sacct, fetch its outputs; `cancel` leaves no task in
squeue; the yen are the GPU-seconds sacct reports x the partition's points price."""

from __future__ import annotations

import json
import time
from decimal import Decimal

import pytest
import yaml

from gpuplan import paths
from support.slurm import start_cluster
from support.sshd import start_hosts, stop_hosts

PRICE = Decimal(30)  # 2 points a GPU-hour x ¥15 a point


@pytest.fixture(scope="module")
def slurm():
    cluster = start_cluster(gpus=2)
    hosts = start_hosts(1)
    try:
        yield cluster, hosts[0]
    finally:
        stop_hosts(hosts)
        cluster.stop()


@pytest.fixture
def lab(slurm, gpuplan_home, monkeypatch):
    cluster, login = slurm
    monkeypatch.setenv("GPUPLAN_POLL_S", "1")
    config = paths.config_dir()
    config.mkdir(parents=True, exist_ok=True)
    doc = {"clusters": [{
        "name": "lab", "queue_wait": "1m", "env": cluster.env, "workdir": "gpuplan-batches",
        "login": {"address": login.host, "port": login.port, "user": login.user, "key": str(login.client_key_path),
                  "host_key": login.host_public_key},
        "cost": {"points_per_gpu_hour": 2, "yen_per_point": 15},
        "partitions": [{"name": cluster.partition, "gpu": "V100", "gpus_per_node": cluster.gpus, "nodes": 1}]}]}
    (config / "slurm.yaml").write_text(yaml.safe_dump(doc))
    yield cluster
    assert cluster.queue() == []  # every test leaves the queue empty


def sacct_gpu_seconds(cluster, array: str) -> list[int]:
    """The GPU-seconds of each task of the array, read from sacct by the test itself."""
    r = cluster.run("sacct", "-j", array, "-X", "-P", "-n", "--format=JobID,ElapsedRaw,AllocTRES")
    out = []
    for line in r.stdout.splitlines():
        _, elapsed, tres = line.split("|")
        gpus = int(next((t.split("=")[1] for t in tres.split(",") if t.startswith("gres/gpu")), 0))  # pending: none
        out.append(int(elapsed) * gpus)
    return out


def array_of(job: str) -> str:
    from gpuplan.run.slurm import slurm_runs
    from gpuplan.store.state import State

    state = State.open_default()
    return slurm_runs._array_of(state, state.job(job))[0]


def items_file(tmp_path, n: int):
    f = tmp_path / "items.txt"
    f.write_text("".join(f"clip {i}.mp4\n" for i in range(n)))  # a space in each: items are shell words
    return f


COMMAND = ["sh", "-c", 'echo "done $1 on gpu ${SLURM_JOB_GPUS:-?}" > {out}/result.txt; sleep 2', "item", "{item}"]


def test_a_batch_through_run_is_one_array_all_ok_billed_from_sacct_and_fetched(lab, cli, tmp_path):
    from gpuplan.run import backends
    from gpuplan.store.state import State

    r = cli("run", "slurm:lab/gpu", "--items", str(items_file(tmp_path, 3)), "--", *COMMAND)
    assert r.code == 0, r.out + r.err
    assert "as one Slurm job array" in r.out
    state = State.open_default()
    job = next(row.id for row in state.jobs("slurm"))
    assert state.job(job).state == "succeeded" and state.job_counts(job) == {"ok": 3}
    array = array_of(job)
    gpu_s = sacct_gpu_seconds(lab, array)
    assert len(gpu_s) == 3 and all(s >= 2 for s in gpu_s)  # each task slept 2 s on its one GPU
    # by hand: the GPU-seconds sacct reports x ¥30 a GPU-hour, each task on its own
    want = sum(Decimal(s) * PRICE / 3600 for s in gpu_s)
    assert backends.yen(state, state.job(job)) == want
    assert backends.summary(state, job).yen == want
    got = cli("logs", "slurm", job, "--fetch", str(tmp_path / "out"))
    assert got.code == 0, got.err
    results = sorted((tmp_path / "out").glob("*/result.txt"))
    assert [p.read_text().split(" on ")[0] for p in results] == [f"done clip {i}.mp4" for i in range(3)]
    log = cli("logs", "slurm", job, "clip 1.mp4")
    assert log.code == 0, log.err
    # issue 41: cost-report said "nothing in the cost ledger" after this spending
    report = cli("cost-report", "--format", "json")
    assert report.code == 0, report.err
    lines = [x for x in json.loads(report.out)["lines"] if x["provider"] == "slurm"]
    assert [(x["cluster"], x["instance_type"], x["machines"], x["machine_seconds"]) for x in lines] == [
        ("slurm", "lab.gpu", 3, sum(gpu_s))]
    assert Decimal(lines[0]["cost_jpy"]) == want.quantize(Decimal("0.01"))  # the price includes tax: as billed
    assert cli("cost-report").out.count("slurm:lab.gpu") == 1


def test_launch_picks_the_partition_and_runs_the_batch_there(lab, cli, tmp_path):
    from gpuplan.run import backends
    from gpuplan.store.state import State

    items_file(tmp_path, 4)
    (tmp_path / "batch.yaml").write_text(yaml.safe_dump({
        "workload": "colorize-hd", "items": "items.txt", "command": COMMAND, "infra": ["slurm"],
        "outputs": "results", "timeout": "10m"}))
    r = cli("launch", str(tmp_path / "batch.yaml"), "-y")
    assert r.code == 0, r.out + r.err
    state = State.open_default()
    job = next(row.id for row in state.jobs("slurm"))
    assert state.job_counts(job) == {"ok": 4}
    assert backends.yen(state, state.job(job)) == sum(Decimal(s) * PRICE / 3600 for s in sacct_gpu_seconds(lab, array_of(job)))
    results = sorted((tmp_path / "results").glob("*/result.txt"))
    assert [p.read_text().split(" on ")[0] for p in results] == [f"done clip {i}.mp4" for i in range(4)]
    assert "lab.gpu" in r.out and "slurm" in r.out  # the pick it showed: the partition
    assert "1. submit 4 items to Slurm partition lab.gpu as one job array" in r.err and "DOK" not in r.err
    # issue 41: "the plan is for 2 x lab.gpu, the batch ran on 1 x" when both GPUs ran
    assert backends.summary(state, job).nodes == 2
    assert "ran on 1 x" not in r.out + r.err


def test_a_detached_batch_has_the_wall_slurm_timed_however_late_it_is_read(lab, cli, tmp_path):
    """Issue 41: a detached job's wall was 1 s for 10 s tasks (from the first look that saw them
    running to the look after they ended)."""
    from gpuplan.run import items as run_items
    from gpuplan.store.state import State

    r = cli("run", "slurm:lab", "--items", str(items_file(tmp_path, 2)), "--detach", "--", "sh", "-c", "sleep 6",
            "x", "{item}")
    assert r.code == 0, r.out + r.err
    state = State.open_default()
    job = next(row.id for row in state.jobs("slurm"))
    end = time.monotonic() + 90
    while sum(1 for line in lab.queue() if line.endswith("RUNNING")) < 2:
        assert time.monotonic() < end, lab.queue()
        time.sleep(0.5)
    time.sleep(3)
    assert cli("jobs", "slurm").code == 0  # a look while they run
    while lab.queue():
        assert time.monotonic() < end, lab.queue()
        time.sleep(0.5)
    time.sleep(1)
    assert cli("jobs", "slurm").code == 0  # and one after they ended
    row = state.job(job)
    assert row.state == "succeeded"
    spans = [(it.ended_at - it.started_at).total_seconds() for it in state.job_items(job)]
    assert all(s >= 6 for s in spans), spans
    assert max(spans) <= run_items.job_seconds(row) <= max(spans) + 3


def test_cancel_leaves_no_task_in_squeue(lab, cli, tmp_path):
    from gpuplan.store.state import State

    r = cli("run", "slurm:lab", "--items", str(items_file(tmp_path, 4)), "--detach", "--format", "json", "--",
            "sh", "-c", "sleep 600", "x", "{item}")
    assert r.code == 0, r.out + r.err
    state = State.open_default()
    job = next(row.id for row in state.jobs("slurm"))
    array = array_of(job)
    end = time.monotonic() + 90
    while sum(1 for line in lab.queue() if line.endswith("RUNNING")) < 2:  # both GPUs busy, two tasks pending
        assert time.monotonic() < end, lab.queue()
        time.sleep(1)
    time.sleep(3)  # they have run some seconds: billed
    r = cli("cancel", "slurm", job)
    assert r.code == 0, r.out + r.err
    assert "4 Slurm array tasks cancelled" in r.out
    assert lab.queue() == []
    assert state.job(job).state == "cancelled"
    assert state.job_counts(job) == {"cancelled": 4}
    jobs = cli("jobs", "slurm", "--format", "json")
    assert jobs.code == 0 and job in jobs.out
    # the two tasks that ran until the cancel are billed for the GPU-seconds sacct reports; the others never ran
    from gpuplan.run import backends

    ran = [s for s in sacct_gpu_seconds(lab, array) if s > 0]
    assert len(ran) == 2, lab.run("sacct", "-j", array, "-X", "-P", "-n", "--format=JobID,State,ElapsedRaw,AllocTRES").stdout
    assert backends.yen(state, state.job(job)) == sum(Decimal(s) * PRICE / 3600 for s in ran)


COLORIZE = """import hashlib, os, sys
item, out = sys.argv[1], sys.argv[sys.argv.index("--out") + 1]
token = hashlib.sha256(os.environ["HF_TOKEN"].encode()).hexdigest()
with open(os.path.join(out, "result.txt"), "w") as fh:
    fh.write(f"colorized {item} {token}\\n")
"""


def test_the_readmes_batch_line_runs_as_written_and_its_env_stays_secret(lab, slurm, cli, tmp_path):
    """README.md's `command: python colorize.py {item} --out $GPUPLAN_OUTPUT_DIR` (issue 43: it
    reached the program as the literal text), launched on Slurm with an `env:` secret: outputs
    fetched, the item read the secret, which is in no state row, JSON, log or world-readable batch.sh."""
    import hashlib
    import secrets
    import shutil
    import stat

    from gpuplan.store.state import State

    _, login = slurm
    config = paths.config_dir() / "slurm.yaml"
    doc = yaml.safe_load(config.read_text())
    doc["clusters"][0]["workdir"] = "readme-batches"
    config.write_text(yaml.safe_dump(doc))
    shutil.rmtree(login.fake_root / "root" / "readme-batches", ignore_errors=True)
    folder = login.fake_root / "root" / "readme-batches" / "slurm-1"  # the batch's folder: colorize.py beside it
    folder.mkdir(parents=True)
    (folder / "colorize.py").write_text(COLORIZE)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to("/usr/bin/python3")  # the hosts have python3 only
    secret = "hf_" + secrets.token_hex(16)
    items_file(tmp_path, 2)
    (tmp_path / "batch.yaml").write_text(yaml.safe_dump({
        "workload": "colorize-hd", "items": "items.txt", "command": "python colorize.py {item} --out $GPUPLAN_OUTPUT_DIR",
        "infra": ["slurm"], "outputs": "results", "timeout": "10m",
        "env": {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "HF_TOKEN": secret}}))
    r = cli("launch", str(tmp_path / "batch.yaml"), "-y")
    assert r.code == 0, r.out + r.err
    state = State.open_default()
    [job] = [row.id for row in state.jobs("slurm")]
    assert job == "slurm-1" and state.job_counts(job) == {"ok": 2}
    token = hashlib.sha256(secret.encode()).hexdigest()
    got = sorted(p.read_text() for p in (tmp_path / "results").glob("*/result.txt"))
    assert got == [f"colorized clip {i}.mp4 {token}\n" for i in range(2)]
    assert not (folder / "$GPUPLAN_OUTPUT_DIR").exists()
    # the value: only in env.sh, the batch's user's alone; batch.sh (0755 on the shared file system) sources it
    assert stat.S_IMODE((folder / "env.sh").stat().st_mode) == 0o600 and secret in (folder / "env.sh").read_text()
    assert secret not in (folder / "batch.sh").read_text()
    assert secret.encode() not in paths.state_db().read_bytes()
    assert state.job(job).options["env_names"] == ["HF_TOKEN", "PATH"]
    for args in (("jobs", "slurm", "--format", "json"), ("logs", "slurm", job, "clip 0.mp4")):
        shown = cli(*args)
        assert shown.code == 0, shown.err
        assert secret not in shown.out + shown.err
    assert secret not in r.out + r.err
