"""`gpuplan launch BATCH.yaml`: one file, one command, from nothing to a finished batch.

On owned hosts for real: two loopback OpenSSH hosts in the inventory (real sshd, real Ray from
the tests' Ray venv), claimed, the batch run on Ray, the outputs fetched, the hosts released and
no Ray process left. The batch file's reader and the launch's refusals are checked without
hosts. The DOK pick and containers: tests/test_launch_dok.py and tests/test_launch_containers.py.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from gpuplan import batchfile
from gpuplan.errors import UsageError

ITEMS = ["clip-a.mp4", "clip-b.mp4", "clip-c.mp4", "clip-d.mp4"]


def _write(folder: Path, batch: dict, items=ITEMS) -> Path:
    (folder / "videos.txt").write_text("".join(f"{i}\n" for i in items))
    path = folder / "batch.yaml"
    path.write_text(yaml.safe_dump(batch, sort_keys=False))
    return path


# --- the batch file ---------------------------------------------------------------------------


def test_the_batch_file_is_read_relative_to_itself_and_flags_win(tmp_path, monkeypatch):
    (tmp_path / "code").mkdir()
    path = _write(tmp_path, {"workload": "colorize-hd", "items": "videos.txt", "command": "python run.py {item} --out {out}",
                             "workdir": "code", "max_yen": "¥1,500", "env": {"MODE": "fast"}, "infra": "sakura, owned",
                             "registry": {"server": "ghcr.io", "username": "me", "password_env": "GH_TOKEN"}})
    monkeypatch.chdir("/")
    b = batchfile.read(path, {"image": "ghcr.io/me/run:1", "max_yen": None})
    assert b.items == tmp_path / "videos.txt" and b.workdir == tmp_path / "code"
    assert b.command == ("python", "run.py", "{item}", "--out", "{out}")
    assert (b.max_yen, b.image, b.infra, dict(b.env)) == (Decimal(1500), "ghcr.io/me/run:1", ("sakura", "owned"),
                                                          {"MODE": "fast"})
    monkeypatch.setenv("GH_TOKEN", "s3cret")
    assert b.registry.password() == "s3cret"
    assert batchfile.read(path, {"max_yen": "90"}).max_yen == Decimal(90)
    assert (b.recover, b.on_demand_fallback) == (False, False)
    flagged = batchfile.read(path, {"recover": True, "on_demand_fallback": True})
    assert (flagged.recover, flagged.on_demand_fallback) == (True, True)


def test_a_launch_with_recover_replaces_what_its_batch_loses_as_run_recover_does(tmp_path, gpuplan_home, monkeypatch):
    """The batch file's recover and on_demand_fallback go with the job (launch --resume keeps
    them) and its follower replaces the nodes the batch lost."""
    from gpuplan.cli import jobs, launch
    from gpuplan.run import launcher, recover
    from gpuplan.store.state import State

    path = _write(tmp_path, {"workload": "colorize-hd", "items": "videos.txt", "command": "echo {item}",
                             "recover": True, "on_demand_fallback": True, "spot": True})
    b = batchfile.read(path, {})
    pick = launcher.Pick(tmp_path / "plan.json", None, 2, "scratch", "spot", Decimal(1), Decimal(1), "ray")
    opts = launcher.launch_options(b, pick, "c", tmp_path / "out")
    assert (opts["launch"]["recover"], opts["launch"]["on_demand_fallback"]) == (True, True)
    gpuplan_home.mkdir(parents=True, exist_ok=True)
    state = State(gpuplan_home / "state.db")
    state.add_cluster("c", "aws", "us-east-1", "g4dn.xlarge", 2, price_jpy_per_hour=Decimal(33), spec={"spot": True})
    state.add_job("c-1", "c", ["echo", "{item}"], opts, [(0, "a")], 2, backend="ray")
    state.record_job_events("c-1", [{"t": "quarantine", "node": "c-1", "code": "interrupted", "reason": "notice"}], 1)
    asked = []
    monkeypatch.setattr(recover, "replace_node", lambda _s, _c, node, _p, market=None: asked.append((node, market)))

    class Followed(Exception):
        pass

    def follow(_state, _cluster, _job, on_look):
        on_look(state.job("c-1"))
        raise Followed

    monkeypatch.setattr(jobs, "_follow", follow)
    with pytest.raises(Followed):
        launch._finish(state, "c-1", keep=False, yes=True)
    assert asked == [("c-1", None)]
    state.close()


@pytest.mark.parametrize("fields, message", [
    ({"command": "echo hi"}, "has no {item}"),
    ({"colour": "blue"}, "unknown field 'colour'"),
    ({"max_yen": "lots"}, "a number of yen"),
    ({"max_yen": -5}, "above 0"),
    ({"objective": "cheap"}, "use balanced, cost or time"),
    ({"registry": {"server": "x", "username": "me", "password": "hunter2"}}, "unknown field 'password'"),
    ({"registry": {"server": "x", "username": "me"}}, "give both username and password_env"),
    ({"env": {"1BAD": "x"}}, "is not a variable name"),
    ({"per_gpu": 0}, "from 1 to 16"),
    ({"deadline": "soon"}, "deadline"),
    ({"recover": "yes"}, "recover 'yes': true or false"),
    ({"on_demand_fallback": True}, "give recover: true"),
])
def test_a_bad_batch_file_is_one_line(tmp_path, fields, message):
    path = _write(tmp_path, {"workload": "colorize-hd", "items": "videos.txt", "command": "echo {item}", **fields})
    with pytest.raises(UsageError, match=message):
        batchfile.read(path, {})


def test_launch_refuses_a_plan_over_its_cap_and_a_full_outputs_folder_before_anything(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, {"workload": "colorize-hd", "items": "videos.txt", "command": "echo {item}",
                             "image": "img:1", "max_yen": 10})
    r = cli("launch", str(path), "--dry-run")
    assert r.code == 2 and "over max_yen ¥10" in r.err and "Traceback" not in r.err
    (tmp_path / "outputs" / "batch").mkdir(parents=True)
    (tmp_path / "outputs" / "batch" / "old.txt").write_text("mine")
    r = cli("launch", str(path), "--max-yen", "5000", "--dry-run")
    assert r.code == 2 and "is not empty" in r.err
    assert (tmp_path / "outputs" / "batch" / "old.txt").read_text() == "mine"  # nothing the user had is lost


def test_a_batch_plans_and_caps_on_its_tax_basis(cli, tmp_path, monkeypatch):
    # issue 31: 4 colorize-hd items on AWS, 1x g5.xlarge: ¥228.01 as AWS lists it, ¥250.81 with Japan's
    # 10 % consumption tax (the default basis); a max_yen of 240 is on the batch's basis too
    monkeypatch.chdir(tmp_path)
    batch = {"workload": "colorize-hd", "items": "videos.txt", "command": "echo {item}", "infra": ["aws"], "max_yen": 240}
    r = cli("launch", str(_write(tmp_path, batch)), "--dry-run")
    assert r.out.startswith("gpuplan estimate: colorize-hd (4 jobs), catalog 2026-11; yen include Japan's 10 %")
    assert r.code == 2 and "is estimated at ¥251, over max_yen ¥240" in r.err
    r = cli("launch", str(_write(tmp_path, {**batch, "tax": "excluded"})), "--dry-run")
    assert r.code == 0, r.err
    assert r.out.startswith("gpuplan estimate: colorize-hd (4 jobs), catalog 2026-11; yen exclude consumption tax")
    assert "Recommended: 1x g5.xlarge aws us-east-1, from scratch: ¥228" in r.out and "max_yen ¥240" in r.out


def test_dry_run_prints_the_whole_sequence_with_yen_and_writes_nothing(cli, tmp_path, monkeypatch, gpuplan_home):
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, {"workload": "colorize-hd", "items": "videos.txt", "command": "echo {item}",
                             "infra": ["aws"], "max_yen": 5000})
    r = cli("launch", str(path), "--dry-run")
    assert r.code == 0, r.err
    seq = r.out[r.out.index("launch 4 items on"):]
    assert "1. provision" in seq and "aws:" in seq and "2. bootstrap: gpu-driver, cuda, cudnn, nccl" in seq
    assert "3. run 4 items on the cluster's Ray engine" in seq and "4. fetch the outputs into outputs/batch" in seq
    assert "plan: ¥" in seq and "max_yen ¥5,000" in seq and "dry run: nothing was created" in seq
    assert not (gpuplan_home / "state").exists() or not any((gpuplan_home / "state").rglob("*.plan.json"))
    r = cli("launch", str(path))  # no terminal, no -y: one line, exit 2
    assert r.code == 2 and "rerun with --yes" in r.err


# --- owned hosts, for real ----------------------------------------------------------------------


@pytest.fixture
def owned_hosts(tmp_path, gpuplan_home, monkeypatch):
    """Two loopback hosts as the inventory's `t4` group, their power priced; Ray from the tests' venv."""
    yield from _owned(2, tmp_path, gpuplan_home, monkeypatch)


@pytest.fixture
def owned_host(tmp_path, gpuplan_home, monkeypatch):
    """One such host: for a test that needs no second node (it saves starting Ray there, 5-10 s)."""
    yield from _owned(1, tmp_path, gpuplan_home, monkeypatch)


def _owned(n: int, tmp_path, gpuplan_home, monkeypatch):
    from support.ray_env import free_port_range, ray_venv, stop_ray
    from support.sshd import start_hosts, stop_hosts

    venv = ray_venv()
    hosts = start_hosts(n, tmp_path)
    entries = [{"name": h.name, "address": h.host, "port": h.port, "private_address": h.host,
                "gpus": {"model": "Tesla T4", "count": 1}, "group": "t4", "power_watts": 70,
                "host_key": h.host_public_key} for h in hosts]
    (gpuplan_home / "config").mkdir(parents=True, exist_ok=True)
    (gpuplan_home / "config" / "inventory.yaml").write_text(yaml.safe_dump(
        {"defaults": {"user": "root", "key": str(hosts[0].client_key_path)}, "hosts": entries}))
    port = free_port_range(n)
    monkeypatch.setenv("GPUPLAN_RAY_VENV", str(venv))
    monkeypatch.setenv("GPUPLAN_RAY_PORT", str(port))
    monkeypatch.setenv("GPUPLAN_RAY_OBJECT_STORE_MB", "80")
    monkeypatch.setenv("GPUPLAN_POLL_S", "0.3")
    monkeypatch.chdir(tmp_path)
    try:
        yield hosts
    finally:
        stop_ray("batch-", port, n)
        stop_hosts(hosts)


def test_launch_runs_a_batch_file_from_nothing_to_a_finished_batch_on_owned_hosts(owned_hosts, cli, tmp_path):
    from gpuplan import paths
    from gpuplan.store.state import State
    from support.ray_env import tagged_pids

    path = _write(tmp_path, {"workload": "colorize-hd", "items": "videos.txt", "infra": ["owned"],
                             "command": "sh -c 'echo done {item} > $GPUPLAN_OUTPUT_DIR/result.txt'",
                             "setup": ["mkdir -p $HOME/venv", "echo ready > $HOME/venv/setup-done"],
                             "outputs": "results"})
    r = cli("launch", str(path), "-y", "--plot", str(tmp_path / "run.svg"))
    assert r.code == 0, r.out + r.err
    assert all((h.fake_root / "root" / "venv" / "setup-done").read_text() == "ready\n" for h in owned_hosts)
    assert "2x t4" in r.out and "launch 4 items on 2x baremetal:t4" in r.err  # the estimate's pick, shown, then built
    assert "4 ok of 4 items" in " ".join(r.out.split())
    got = sorted(p.parent.name for p in (tmp_path / "results").glob("*/result.txt"))
    assert got == ["0000-clip-a.mp4", "0001-clip-b.mp4", "0002-clip-c.mp4", "0003-clip-d.mp4"]
    assert (tmp_path / "results" / "0002-clip-c.mp4" / "result.txt").read_text() == "done clip-c.mp4\n"
    assert "cluster batch torn down" in r.out
    state = State(paths.state_db())
    assert state.cluster("batch").status == "gone"  # released: the hosts can be claimed again
    assert not any((h.fake_root / "root" / ".gpuplan" / "claim").exists() for h in owned_hosts)
    assert tagged_pids("batch-") == []  # no Ray process of the cluster is left on the hosts
    job = state.jobs("batch")[-1]
    assert (job.backend, job.state, job.options["launch"]["cluster"]) == ("ray", "succeeded", "batch")
    state.close()
    # --plot: the batch drawn against its plan once torn down (tests/test_plot_run.py checks the drawing's figures)
    assert f"plot written to {tmp_path / 'run.svg'}" in r.err
    drawn = (tmp_path / "run.svg").read_text()
    assert len(re.findall(r"batch-[01]: \d items? \(planned 2 items\)", drawn)) == 2  # the driver deals items as slots free
    assert f"job {job.id} (succeeded) against " in drawn
    # the same batch file launched again once torn down takes its name again, claims the same hosts
    # and runs: tests/test_launch_unhappy.py's link test launches one batch file three times over


def test_estimate_and_launch_agree_on_the_pick(cli, tmp_path, monkeypatch):
    """The saved plan launch acts on is the estimate's recommendation for one job per item."""
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, {"workload": "colorize-hd", "items": "videos.txt", "command": "echo {item}", "image": "i:1"})
    shown = cli("estimate", "--videos", "4")
    launched = cli("launch", str(path), "--dry-run")
    pick = next(line for line in shown.out.splitlines() if line.startswith("Recommended:"))
    assert pick in launched.out


def test_the_same_batch_file_with_an_image_runs_each_item_in_a_container_on_owned_hosts(owned_hosts, cli, tmp_path):
    """The stand-in docker of tests/support/fakebin records each call and runs the command on the
    host (no Docker daemon here); the docker-gpu playbook runs against each host's fake root.
    tests/test_launch_dok.py launches this same file with infra: dok."""
    from support.batches import ITEMS, container_batch

    r = cli("launch", str(container_batch(tmp_path, "owned")), "-y")
    assert r.code == 0, r.out + r.err
    assert "bootstrap: docker-gpu" in r.err and "4 ok of 4 items" in " ".join(r.out.split())
    for i, item in enumerate(ITEMS):
        assert (tmp_path / "results" / f"{i:04d}-{item}" / "result.txt").read_text() == f"in-container {item}\n"
    runs = [line for h in owned_hosts for line in (h.fake_root / "docker.log").read_text().splitlines()
            if line.startswith("docker run ")]
    assert len(runs) == 4 and all("--gpus device=0" in line and "registry.example/me/colorize:1" in line for line in runs)
    pulls = [line for h in owned_hosts for line in (h.fake_root / "docker.log").read_text().splitlines()
             if line.startswith("docker pull ")]
    assert len(pulls) == 2  # the image pulled once per node
    assert all(h.installed("nvidia-container-toolkit") for h in owned_hosts)


def test_a_launch_whose_node_lacks_the_nvidia_runtime_tears_down_and_says_so(owned_hosts, cli, tmp_path):
    """Issue 41: the runtime check failed with exit 4 and left the claimed hosts and their Ray up,
    without saying so (on a cloud pick those machines would bill on)."""
    from gpuplan import paths
    from gpuplan.store.state import State
    from support.batches import container_batch
    from support.ray_env import tagged_pids

    (owned_hosts[1].fake_root / "docker-no-nvidia").touch()  # the stand-in lists no nvidia runtime there
    r = cli("launch", str(container_batch(tmp_path, "owned")), "-y")
    assert r.code == 4, r.out + r.err
    assert r.err.strip().splitlines()[-1] == (
        "gpuplan: error: batch-1: docker has no NVIDIA runtime (containers would not see the GPUs): run `gpuplan"
        " bootstrap batch --playbook docker-gpu`; nothing ran, and the cluster batch was torn down")
    state = State(paths.state_db())
    assert state.cluster("batch").status == "gone" and state.jobs("batch") == []
    assert not any((h.fake_root / "root/.gpuplan/claim").exists() for h in owned_hosts)
    assert tagged_pids("batch-") == []  # no Ray left on the hosts
    state.close()


def test_a_failed_items_log_is_in_the_outputs_after_teardown(owned_hosts, cli, tmp_path):
    """Issue 41: once launch had torn down, a failed item's reason was unreachable (`gpuplan logs`
    said the cluster was torn down). Its last log is fetched with the outputs, before teardown."""
    path = _write(tmp_path, {"workload": "colorize-hd", "items": "videos.txt", "infra": ["owned"],
                             "command": "sh -c 'echo why-{item}; test {item} != clip-b.mp4 && echo ok > $GPUPLAN_OUTPUT_DIR/r.txt'",
                             "outputs": "results"})
    r = cli("launch", str(path), "-y")
    assert r.code == 5, r.out + r.err
    assert "cluster batch torn down" in r.out
    results = tmp_path / "results"
    logs = sorted(p.name for p in (results / "logs").iterdir()) if (results / "logs").is_dir() else None
    assert logs == ["0001-clip-b.mp4.log"], _job_rows() + r.out + r.err  # the failed one only
    assert "why-clip-b.mp4" in (results / "logs/0001-clip-b.mp4.log").read_text()
    assert sorted(p.parent.name for p in results.glob("*/r.txt")) == ["0000-clip-a.mp4", "0002-clip-c.mp4",
                                                                      "0003-clip-d.mp4"]
    assert f"the failed items' logs are in {results / 'logs'}/" in " ".join(r.err.split())


def _job_rows() -> str:
    """The state's items and set-aside nodes of every job, for a failed assertion's message."""
    from gpuplan import paths
    from gpuplan.store.state import State

    state = State(paths.state_db())
    try:
        return "".join(f"{it}\n" for job in state.jobs("batch") for it in (*state.job_items(job.id), *state.job_quarantines(job.id)))
    finally:
        state.close()


def test_max_yen_stops_a_launched_batch_mid_way_and_nothing_is_left_running(owned_host, cli, tmp_path, gpuplan_home):
    """The host priced high (100 kW at ¥31/kWh: ¥3,100/h, ¥0.861 a second), the cluster kept up
    by a first launch; the second launch's cap leaves about 15 s of batch once the teardown
    allowance is set aside (on the warm cluster). Its one slot takes the items in turn: the fast
    ones finish (3 s after the submission on an idle machine), the first slow one is stopped on
    the cluster, the second never starts."""
    import yaml as yamlmod

    from gpuplan import paths
    from gpuplan.run import caps
    from gpuplan.store.state import State
    from support.ray_env import processes_running, tagged_pids

    inventory = gpuplan_home / "config" / "inventory.yaml"
    data = yamlmod.safe_load(inventory.read_text())
    for h in data["hosts"]:
        h["power_watts"] = 100_000
    inventory.write_text(yamlmod.safe_dump(data))
    (tmp_path / "tiny.yaml").write_text("name: tiny\nreference_gpu: T4\njobs: [{seconds: 10}]\n")
    path = _write(tmp_path, {"workload": "tiny.yaml", "items": "videos.txt", "infra": ["owned"],
                             "command": "sh -c 'case {item} in slow*) sleep 600;; esac; echo ok > $GPUPLAN_OUTPUT_DIR/r'"},
                  items=["fast-1", "fast-2"])
    r = cli("launch", str(path), "-y", "--keep", "--outputs", "first")
    assert r.code == 0 and "left up (--keep)" in r.out, r.out + r.err
    state = State(paths.state_db())
    per_second = Decimal(3100) / 3600
    spent = state.ledger_seconds_and_yen("batch")[1]
    cap = (spent + per_second * (caps.TEARDOWN_ALLOWANCE_S + 15)).quantize(Decimal(1))
    path = _write(tmp_path, {"workload": "tiny.yaml", "items": "videos.txt", "infra": ["owned"],
                             "command": "sh -c 'case {item} in slow*) sleep 600;; esac; echo ok > $GPUPLAN_OUTPUT_DIR/r'"},
                  items=["fast-3", "fast-4", "slow-1", "slow-2"])
    r = cli("launch", str(path), "-y", "--max-yen", str(cap), "--outputs", "second")
    assert r.code == 6, r.out + r.err
    assert f"stopped at max_yen {fmt_yen(cap)}" in r.err
    job = state.jobs("batch")[-1]
    counts = state.job_counts(job.id)
    assert job.state == "capped" and (counts.get("ok"), counts.get("cancelled"), counts.get("queued")) == (2, 1, 1)
    listed = cli("jobs", "batch", "--format", "json")
    assert listed.code == 0 and '"cancelled": 1' in listed.out and '"state": "capped"' in listed.out
    total = state.ledger_seconds_and_yen("batch")[1]  # every node from its claim to its release, teardown included
    assert total <= cap + per_second  # within the cap plus one billing increment (a second of the host)
    assert sorted(p.parent.name for p in (tmp_path / "second").glob("*/r")) == ["0000-fast-3", "0001-fast-4"]
    assert tagged_pids("batch-") == [] and state.cluster("batch").status == "gone"
    assert processes_running(["sleep", "600"]) == []  # the slow items' processes were killed on the hosts
    state.close()


def fmt_yen(value: Decimal) -> str:
    from gpuplan.planning import fmt

    return fmt.yen(value)


def test_killing_launch_changes_nothing_on_the_cluster_and_resume_finishes_it(owned_host, cli, tmp_path):
    """`launch` killed with SIGKILL once the batch is submitted: the batch runs on; `launch
    --resume JOB` follows it to its end, fetches its outputs and tears the cluster down."""
    import signal
    import subprocess
    import sys

    from gpuplan import paths
    from gpuplan.store.state import State
    from support.ray_env import tagged_pids

    path = _write(tmp_path, {"workload": "colorize-hd", "items": "videos.txt", "infra": ["owned"],
                             "command": "sh -c 'sleep 1; echo {item} > $GPUPLAN_OUTPUT_DIR/r'", "outputs": "out"})
    client = subprocess.Popen([sys.executable, "-m", "gpuplan", "launch", str(path), "-y"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, cwd=tmp_path)
    job = None
    for line in client.stdout:  # the estimate's table first, then the job id (flushed) once the batch is on the cluster
        if line.startswith("job ") and " submitted" in line:
            job = line.split()[1]
            break
    client.send_signal(signal.SIGKILL)
    client.communicate()
    assert job == "batch-1" and client.returncode == -signal.SIGKILL
    state = State(paths.state_db())
    assert state.cluster("batch").status == "ready"  # nothing was torn down by the kill
    r = cli("jobs", "batch", "--format", "json")
    assert r.code == 0 and ('"state": "running"' in r.out or '"state": "submitted"' in r.out), r.out + r.err
    r = cli("launch", "--resume", job)
    assert r.code == 0, r.out + r.err
    assert "4 ok of 4 items" in " ".join(r.out.split()) and "cluster batch torn down" in r.out
    assert sorted(p.read_text() for p in (tmp_path / "out").glob("*/r")) == [f"{i}\n" for i in ITEMS]
    assert state.cluster("batch").status == "gone" and tagged_pids("batch-") == []
    state.close()


def test_missing_credentials_are_said_before_the_question_and_nothing_is_made(cli, tmp_path, monkeypatch, gpuplan_home):
    from support.credentials import without_credentials

    without_credentials(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, {"workload": "colorize-hd", "items": "videos.txt", "command": "echo {item}", "infra": ["aws"]})
    r = cli("launch", str(path), "-y")
    assert r.code != 0 and "no AWS credentials: set AWS_PROFILE" in r.err and "Traceback" not in r.err
    assert "launch 4 items on" not in r.err  # said before the sequence is shown and asked about
    from gpuplan import paths
    from gpuplan.store.state import State

    state = State(paths.state_db())
    assert state.cluster("batch") is None and state.jobs("batch") == []
    state.close()


def test_piped_without_yes_and_credentials_both_are_said_at_once(cli, tmp_path, monkeypatch, gpuplan_home):
    """Issue 33: piped, `--yes` was asked for before credentials were checked: one at a time."""
    from support.credentials import without_credentials

    without_credentials(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, {"workload": "colorize-hd", "items": "videos.txt", "command": "echo {item}", "infra": ["aws"]})
    r = cli("launch", str(path))
    lines = r.err.strip().splitlines()
    assert r.code == 2 and "Traceback" not in r.err
    assert lines[-3:] == ["gpuplan: error: launch cannot start; fix these 2 first:",
                          "  - no AWS credentials: set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or run"
                          " `aws configure`",
                          "  - launch asks for confirmation, but stdin is not a terminal: rerun with --yes (-y) to proceed"]
