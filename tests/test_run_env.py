"""Issue 43 on Ray for real (two loopback sshd hosts, their Ray started once for the module):
the README's batch line runs as written (its outputs come back), and an `env:` value reaches the
item without being in any process's argv, the state, the spec on the head, the JSON, a log or a
file another user may read."""

from __future__ import annotations

import hashlib
import json
import secrets
import stat
import threading
import time
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from support.cli import run_cli
from support.waiting import wait_for

pytestmark = pytest.mark.sshd
CLUSTER = "envdemo"
README_LINE = "python colorize.py {item} --out $GPUPLAN_OUTPUT_DIR"  # README.md and docs/batch.md, as written
COLORIZE = """import os, sys
item, out = sys.argv[1], sys.argv[sys.argv.index("--out") + 1]
with open(os.path.join(out, "result.txt"), "w") as fh:
    fh.write(f"colorized {item}\\n")
"""


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    from support.ray_env import loopback_ray_cluster

    with loopback_ray_cluster(tmp_path_factory.mktemp("ray-home"), CLUSTER, Decimal("367.20")) as running:
        yield running


def _batch(tmp_path: Path, command: str, env: dict, items: list[str], **more):
    """A batch file as a user writes it (with `more` fields), read as `launch` reads it; a
    `python` on the env's PATH (the loopback hosts have python3 only)."""
    from gpuplan import batchfile

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to("/usr/bin/python3")
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "colorize.py").write_text(COLORIZE)
    (tmp_path / "videos.txt").write_text("".join(f"{i}\n" for i in items))
    (tmp_path / "batch.yaml").write_text(yaml.safe_dump({
        "workload": "colorize-hd", "items": "videos.txt", "command": command, "workdir": "code",
        "env": {"PATH": f"{bin_dir}:/usr/bin:/bin", **env}, **more}))
    return batchfile.read(tmp_path / "batch.yaml", {})


def _submit_and_wait(state, batch, items: list[str], during=None, options=None) -> str:
    """The batch submitted to the cluster as `launch` submits it (backends.Submission; its env
    with secret_env's values read now, as launcher.submission does), followed to its end."""
    from gpuplan import batchfile
    from gpuplan.run import backends

    sub = backends.Submission(target=CLUSTER, items=tuple(enumerate(items)), command=batch.command,
                              env=batchfile.item_env(batch), workdir=batch.workdir, timeout_s=300,
                              options=options or {})
    job = backends.get("ray").submit(state, sub, lambda _m: None)
    wait_for(lambda: (during and during()) or backends.refresh(state, job).state in ("succeeded", "failed", "lost"),
             timeout=240, every=0.3)
    while backends.refresh(state, job).state not in ("succeeded", "failed", "lost"):
        time.sleep(0.3)
    return job


def test_the_readmes_batch_line_runs_as_written_and_its_outputs_come_back(ray_cluster, tmp_path):
    state, hosts, _ = ray_cluster
    items = ["clip 1.mp4", "$(touch PWNED)", "{out}"]  # an item is data: never run, never substituted
    batch = _batch(tmp_path, README_LINE, {}, items)
    assert batch.command == ("python", "colorize.py", "{item}", "--out", "$GPUPLAN_OUTPUT_DIR")
    job = _submit_and_wait(state, batch, items)
    assert state.job(job).state == "succeeded", state.job_items(job)
    r = run_cli("logs", CLUSTER, job, "--fetch", str(tmp_path / "back"))
    assert r.code == 0, r.err
    got = {p.parent.name: p.read_text() for p in (tmp_path / "back").glob("*/result.txt")}
    assert got == {"0000-clip_1.mp4": "colorized clip 1.mp4\n", "0001-touch_PWNED": "colorized $(touch PWNED)\n",
                   "0002-out": "colorized {out}\n"}
    for h in hosts:  # no folder named after the variable's text, nothing an item ran
        assert not list(h.fake_root.rglob("$GPUPLAN_OUTPUT_DIR")) and not list(h.fake_root.rglob("PWNED"))


def _cmdlines() -> list[bytes]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                out.append((d / "cmdline").read_bytes())
            except OSError:
                pass
    return out


def test_an_env_value_reaches_the_item_and_nowhere_else(ray_cluster, tmp_path):
    state, hosts, home = ray_cluster
    secret = "hf_" + secrets.token_hex(16)
    command = "sh -c 'printf %s \"$HF_TOKEN\" | sha256sum > $GPUPLAN_OUTPUT_DIR/h; sleep 2' {item}"
    batch = _batch(tmp_path, command, {"HF_TOKEN": secret}, ["a", "b", "c"])
    seen, stop = [], threading.Event()

    def sample() -> None:  # every process on this machine (the client, both nodes, Ray, the items), all along
        while not stop.is_set():
            seen.extend(c for c in _cmdlines() if secret.encode() in c)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        job = _submit_and_wait(state, batch, ["a", "b", "c"])
    finally:
        stop.set()
        sampler.join(5)
    assert state.job(job).state == "succeeded", state.job_items(job)
    assert seen == []
    # the item got it: the hash of what it read from its environment
    r = run_cli("logs", CLUSTER, job, "--fetch", str(tmp_path / "back"))
    assert r.code == 0, r.err
    want = hashlib.sha256(secret.encode()).hexdigest()
    assert [p.read_text().split()[0] for p in sorted((tmp_path / "back").glob("*/h"))] == [want] * 3
    # not in the state, the JSON, the logs
    from gpuplan import paths

    assert secret.encode() not in paths.state_db().read_bytes()
    assert state.job(job).options["env_names"] == ["HF_TOKEN", "PATH"]
    for args in (("jobs", CLUSTER, "--format", "json"), ("logs", CLUSTER, job), ("logs", CLUSTER, job, "b")):
        r = run_cli(*args)
        assert r.code == 0, r.err
        assert secret not in r.out + r.err
    assert json.loads(run_cli("jobs", CLUSTER, "--format", "json").out)
    # on the nodes: only env.json holds it, the SSH user's alone; not the spec, the logs, Ray's own logs
    holders = []
    roots = [h.fake_root for h in hosts] + [Path(f"/tmp/gpuplan-ray-{int(p)}") for p in _ray_bases()]
    for root in roots:
        for f in root.rglob("*"):
            try:
                if f.is_file() and not f.is_symlink() and secret.encode() in f.read_bytes():
                    holders.append(f)
            except OSError:
                pass
    assert [f.name for f in holders] == ["env.json"] and holders[0].parent.name == job
    assert stat.S_IMODE(holders[0].stat().st_mode) == 0o600 and stat.S_IMODE(holders[0].parent.stat().st_mode) == 0o700
    assert b'"HF_TOKEN"' not in (holders[0].parent / "spec.json").read_bytes()


def test_a_secret_env_value_reaches_the_item_and_nowhere_else(ray_cluster, tmp_path, monkeypatch):
    """`secret_env: [HF_TOKEN]`: the value is not in the batch file; it is read from the caller's
    environment when the batch is submitted and travels as an `env:` value does: the item gets it,
    no process list sampled during the run shows it, nor the state database file, the spec on the
    head, the JSON or the logs; on the nodes only the job's env.json (0600) holds it."""
    from gpuplan import paths
    from gpuplan.run import launcher

    state, hosts, _ = ray_cluster
    secret = "hf_" + secrets.token_hex(16)
    monkeypatch.setenv("HF_TOKEN", secret)  # the caller's environment; the cluster's Ray was started before it
    command = "sh -c 'printf %s \"$HF_TOKEN\" | sha256sum > $GPUPLAN_OUTPUT_DIR/h; sleep 2' {item}"
    batch = _batch(tmp_path, command, {}, ["a", "b", "c"], secret_env=["HF_TOKEN"])
    assert batch.secret_env == ("HF_TOKEN",) and "HF_TOKEN" not in batch.env
    assert secret.encode() not in (tmp_path / "batch.yaml").read_bytes()
    seen, stop = [], threading.Event()

    def sample() -> None:  # every process on this machine (the client, both nodes, Ray, the items), all along
        while not stop.is_set():
            seen.extend(c for c in _cmdlines() if secret.encode() in c)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:  # the names as launch_options records them
        job = _submit_and_wait(state, batch, ["a", "b", "c"],
                               options={"secret_env": launcher.launch_options(
                                   batch, SimpleNamespace(plan_path=tmp_path / "plan.json", backend="ray"), CLUSTER,
                                   tmp_path / "out")["secret_env"]})
    finally:
        stop.set()
        sampler.join(5)
    assert state.job(job).state == "succeeded", state.job_items(job)
    assert seen == []
    # the item got it: the hash of what it read from its environment
    r = run_cli("logs", CLUSTER, job, "--fetch", str(tmp_path / "back"))
    assert r.code == 0, r.err
    want = hashlib.sha256(secret.encode()).hexdigest()
    assert [p.read_text().split()[0] for p in sorted((tmp_path / "back").glob("*/h"))] == [want] * 3
    # the state keeps the names only: not in the database file's bytes, the JSON, the logs
    assert secret.encode() not in paths.state_db().read_bytes()
    opts = state.job(job).options
    assert opts["env_names"] == ["HF_TOKEN", "PATH"] and opts["secret_env"] == ["HF_TOKEN"]
    for args in (("jobs", CLUSTER, "--format", "json"), ("logs", CLUSTER, job), ("logs", CLUSTER, job, "b")):
        r = run_cli(*args)
        assert r.code == 0, r.err
        assert secret not in r.out + r.err
    # on the nodes: only env.json holds it, the SSH user's alone; not the spec, the logs, Ray's own logs
    holders = []
    roots = [h.fake_root for h in hosts] + [Path(f"/tmp/gpuplan-ray-{int(p)}") for p in _ray_bases()]
    for root in roots:
        for f in root.rglob("*"):
            try:
                if f.is_file() and not f.is_symlink() and secret.encode() in f.read_bytes():
                    holders.append(f)
            except OSError:
                pass
    assert [f.name for f in holders] == ["env.json"] and holders[0].parent.name == job
    assert stat.S_IMODE(holders[0].stat().st_mode) == 0o600 and stat.S_IMODE(holders[0].parent.stat().st_mode) == 0o700
    assert b'"HF_TOKEN"' not in (holders[0].parent / "spec.json").read_bytes()


def _ray_bases() -> list[int]:
    import os

    base = int(os.environ["GPUPLAN_RAY_PORT"])
    return [base, base + 100]


def test_a_container_gets_the_env_by_name_only():
    """`docker run -e NAME`: docker takes the value from its client's environment, not its argv."""
    from gpuplan.run.ray import ray_driver

    argv = ray_driver.container_argv(["docker"], "n", "img", "exec x", [], "/o", "", {"GPUPLAN_ITEM": "a"}, ["HF_TOKEN"])
    assert argv[argv.index("HF_TOKEN") - 1] == "-e" and not any(w.startswith("HF_TOKEN=") for w in argv)


def test_a_resumed_batch_gets_the_env_of_the_job_it_resumes(ray_cluster, tmp_path):
    """`run --resume JOB`: the state has only the names; the new job takes the old one's env.json on the head."""
    from gpuplan import paths
    from support.cli import submitted_job

    state, _, _ = ray_cluster
    secret = "hf_" + secrets.token_hex(16)
    flag = tmp_path / "second-time"
    command = f"sh -c 'printf %s \"$HF_TOKEN\" | sha256sum > $GPUPLAN_OUTPUT_DIR/h; [ {{item}} != bad ] || [ -e {flag} ]'"
    batch = _batch(tmp_path, command, {"HF_TOKEN": secret}, ["ok", "bad"])
    job = _submit_and_wait(state, batch, ["ok", "bad"])
    assert state.job(job).state == "failed" and state.job_counts(job).get("ok") == 1  # "bad" failed (on both nodes)
    flag.touch()
    r = run_cli("run", CLUSTER, "--resume", job)
    assert r.code == 0, r.out + r.err
    again = submitted_job(r.out)
    assert state.job(again).options["env_names"] == ["HF_TOKEN", "PATH"] and state.job_counts(again) == {"ok": 1}
    r = run_cli("logs", CLUSTER, again, "--fetch", str(tmp_path / "back"))
    assert r.code == 0, r.err
    [h] = (tmp_path / "back").glob("*/h")
    assert h.read_text().split()[0] == hashlib.sha256(secret.encode()).hexdigest()
    assert secret.encode() not in paths.state_db().read_bytes()
