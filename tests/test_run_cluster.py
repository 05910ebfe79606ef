"""`gpuplan run` over two real loopback sshd hosts: the queue, retries, logs, state rows, yen,
and a torchrun data-parallel job with gloo across the two "nodes"."""

from __future__ import annotations

import json
import math
import socket
import sys
from decimal import Decimal

import pytest

from gpuplan import paths
from gpuplan.operating import runner
from gpuplan.operating.state import State

pytestmark = pytest.mark.sshd
PRICE = Decimal("367.20")  # NC24 per hour, report A


@pytest.fixture
def cluster(gpuplan_home, tmp_path):
    from support.sshd import start_hosts, stop_hosts

    hosts = start_hosts(2, tmp_path)
    state = State(paths.state_db())
    state.add_cluster("demo", "baremetal", "loopback", "loopback", 2, ssh_user="root", price_jpy_per_hour=PRICE)
    state.save_ssh_key("demo", hosts[0].client_key_path, "")
    for i, (h, gpus) in enumerate(zip(hosts, (2, 0))):  # node 0: two GPUs; node 1: a CPU-only machine
        state.add_node("demo", f"demo-{i}", gpus=gpus)
        state.update_node("demo", f"demo-{i}", status="running", public_ip=h.host, private_ip=h.host,
                          ssh_port=h.port, provider_id=f"bm-{i}")
        state.pin_host_key(h.host, h.port, h.host_public_key, cluster="demo", node=f"demo-{i}")
    state.set_cluster_status("demo", "ready")
    yield state, hosts
    state.close()
    stop_hosts(hosts)


def test_make_slots_spreads_over_nodes_then_gpus():
    slots = runner.make_slots([2, 0], per_gpu=2)
    assert [(s.target, s.gpu, s.k) for s in slots] == [
        (0, 0, 0), (1, None, 0), (0, 1, 0), (1, None, 1), (0, 0, 1), (0, 1, 1)]


def test_torchrun_program_strips_python_and_refuses_a_second_torchrun():
    assert runner.torchrun_program(["python3", "-m", "gpuplan.jobs.resnet50", "--json"]) == [
        "-m", "gpuplan.jobs.resnet50", "--json"]
    assert runner.torchrun_program(["./train.sh", "x"]) == ["--no-python", "./train.sh", "x"]
    with pytest.raises(Exception, match="gpuplan adds torchrun"):
        runner.torchrun_program(["torchrun", "train.py"])


def test_run_fans_items_over_every_slot_with_retries_logs_and_state(cluster, cli, tmp_path, gpuplan_home):
    state, hosts = cluster
    marker = tmp_path / "flaky.seen"
    items = tmp_path / "videos.txt"
    items.write_text("# four clips\nclip-a.mp4\nflaky.mp4\n\nclip-c.mp4\nbroken.mp4\n")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"provider": "baremetal", "instance_type": "x", "count": 2, "wall_minutes": 61,
                                "cost_jpy": 3, "machines": [
                                    {"setup_s": 3600, "jobs_s": 2, "idle_tail_s": 0, "billed_s": 3602, "cost_jpy": "1.80"},
                                    {"setup_s": 3600, "jobs_s": 1, "idle_tail_s": 1, "billed_s": 3602, "cost_jpy": "1.80"}]}))
    script = (
        "echo item={item} gpu=${CUDA_VISIBLE_DEVICES:-none} job=$GPUPLAN_JOB; sleep 0.5; "
        f"if [ {{item}} = flaky.mp4 ] && [ ! -e {marker} ]; then touch {marker}; exit 7; fi; "
        "[ {item} != broken.mp4 ] || exit 3"
    )
    r = cli("run", "demo", "--items", str(items), "--retries", "1", "--plan", str(plan), "--", "sh", "-c", script)
    assert r.code == 5, r.err  # the run finished; one job did not
    assert "1 of 4 job(s) failed" in r.err and "0003-broken.mp4" in r.err

    rows = {row["job"]: row for row in state.runs("demo")}
    assert set(rows) == {"0000-clip-a.mp4", "0001-flaky.mp4", "0002-clip-c.mp4", "0003-broken.mp4"}
    assert (rows["0001-flaky.mp4"]["status"], rows["0001-flaky.mp4"]["attempts"]) == ("ok", 2)
    assert (rows["0003-broken.mp4"]["status"], rows["0003-broken.mp4"]["attempts"]) == ("failed", 2)
    assert rows["0000-clip-a.mp4"]["attempts"] == 1 and rows["0000-clip-a.mp4"]["seconds"] >= 0.5
    assert {row["node"] for row in rows.values()} == {"demo-0", "demo-1"}  # both machines worked
    assert "quarantined" not in r.out  # a job failing wherever it runs is the job's fault, not a node's

    log_dir = gpuplan_home / "state" / "runs" / "demo"
    a = (log_dir / "0000-clip-a.mp4.log").read_text()
    slot = rows["0000-clip-a.mp4"]["slot"]
    gpu = slot.split(":")[1].split("/")[0]
    assert f"item=clip-a.mp4 gpu={'none' if gpu == 'cpu' else gpu} job=0000-clip-a.mp4" in a
    flaky = (log_dir / "0001-flaky.mp4.log").read_text()
    assert "attempt 1" in flaky and "exit 7" in flaky and "attempt 2" in flaky and "exit 0" in flaky
    out = " ".join(r.out.split())  # rich wraps lines at the terminal width
    assert "plan: wall 2 s" in out and "jobs phase (setup excluded)" in out and "error wall +" in out
    assert "yen n/a" in out  # the plan's jobs phase is a fraction of a yen


def test_run_items_measures_wall_time_and_yen_from_the_cluster_price(cluster, tmp_path):
    state, _ = cluster
    summary = runner.run_items(state, "demo", ["1", "2", "3"], ["sh", "-c", "sleep 0.3; echo {item}"])
    assert [j.status for j in summary.jobs] == ["ok"] * 3 and len({j.slot for j in summary.jobs}) == 3
    assert summary.nodes == 2 and summary.price_jpy_per_hour == PRICE
    # by the one billing rule: a cluster whose terms were never recorded is billed its hourly price
    # by the started second (was: price x unrounded seconds, which no provider bills)
    assert summary.yen == PRICE * 2 * math.ceil(summary.wall_seconds) / 3600
    cmp = runner.compare(summary, {"wall_s": Decimal(10), "yen": Decimal("2.04")})
    assert cmp.wall_error_pct == (Decimal(str(summary.wall_seconds)) - 10) / 10 * 100
    assert cmp.yen_error_pct == (summary.yen - Decimal("2.04")) / Decimal("2.04") * 100


def test_run_refuses_an_unpinned_host_and_a_command_without_item(cluster, cli, tmp_path):
    state, hosts = cluster
    items = tmp_path / "items.txt"
    items.write_text("x\n")
    r = cli("run", "demo", "--items", str(items), "--", "echo", "hello")
    assert r.code == 2 and "has no {item}" in r.err
    state.unpin_cluster_host_keys("demo")
    r = cli("run", "demo", "--items", str(items), "--", "echo", "{item}")
    assert r.code == 2 and "no pinned host key" in r.err and "--accept-host-key" in r.err
    r = cli("run", "nope", "--items", str(items), "--", "echo", "{item}")
    assert r.code == 2 and "no cluster named 'nope'" in r.err


@pytest.mark.torch
def test_torchrun_trains_resnet50_with_gloo_across_both_hosts(cluster, cli, gpuplan_home):
    pytest.importorskip("torch")
    state, _ = cluster
    state.update_node("demo", "demo-0", gpus=0)  # these loopback "nodes" have no GPU: one gloo rank each
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = cli("run", "demo", "--torchrun", "--python", sys.executable, "--master-port", str(port), "--",
            "python", "-m", "gpuplan.jobs.resnet50", "--json", "--device", "cpu", "--quick", "--threads", "1",
            "--steps", "2", "--warmup", "1")
    assert r.code == 0, r.err + r.out
    log = (gpuplan_home / "state" / "runs" / "demo" / "torchrun-demo-0.log").read_text()
    rec = json.loads(next(line for line in log.splitlines() if line.startswith("{")))
    assert rec["world_size"] == 2 and rec["nodes"] == 2  # one rank per host, rendezvous on node 0
    assert rec["units"] == 2 * 2 * 2  # 2 ranks x batch 2 x 2 steps
    assert sorted((row["job"], row["status"]) for row in state.runs("demo")) == [
        ("torchrun-demo-0", "ok"), ("torchrun-demo-1", "ok")]


def test_per_gpu_k_gives_each_job_a_fixed_memory_share(cluster, gpuplan_home):
    state, _ = cluster
    summary = runner.run_items(state, "demo", ["a"], ["sh", "-c", "echo item={item} share=$GPUPLAN_MEMORY_FRACTION"],
                               per_gpu=2)
    assert summary.jobs[0].status == "ok"
    assert "item=a share=0.500000" in summary.jobs[0].log_path.read_text()


@pytest.mark.torch
def test_bench_on_the_cluster_measures_two_node_data_parallel_scaling(cluster, cli, gpuplan_home):
    pytest.importorskip("torch")
    state, _ = cluster
    state.update_node("demo", "demo-0", gpus=0)  # CPU-only loopback nodes: --quick, one gloo rank per node
    out = gpuplan_home / "rn50.yaml"
    r = cli("bench", "resnet50", "--cluster", "demo", "--quick", "--gpus", "1", "--max-pack", "1",
            "--python", sys.executable, "--out", str(out))
    assert r.code == 0, r.err
    from gpuplan.planning.profiles import load_profile

    prof = load_profile(out)
    assert prof.provenance.host == "demo-0" and "--cluster demo" in prof.provenance.command
    assert [(s.gpus, s.nodes) for s in prof.dp_scaling] == [(1, 1), (2, 2)]  # torchrun over both hosts
    assert prof.dp_scaling[1].efficiency > 0 and prof.dp_scaling[1].throughput > 0


# --- a failing node is quarantined; its jobs go to the healthy slots -------------------------


def _eight_items(tmp_path):
    items = tmp_path / "eight.txt"
    items.write_text("".join(f"clip-{i}.mp4\n" for i in range(8)))
    return items


def test_a_node_whose_host_key_changed_is_quarantined_and_the_other_runs_all_eight_jobs(cluster, cli, tmp_path):
    state, hosts = cluster
    hosts[0].restart(new_host_key=True)  # demo-0 (two GPU slots) was rebuilt: its pinned key no longer matches
    r = cli("run", "demo", "--items", str(_eight_items(tmp_path)), "--", "sh", "-c", "echo done {item}")
    assert r.code == 0, r.err  # every job ran: nothing failed, so no exit 5
    rows = state.runs("demo")
    assert len(rows) == 8 and {(row["status"], row["node"]) for row in rows} == {("ok", "demo-1")}
    # the two jobs demo-0's slots took first could not start there; that attempt did not count
    assert sorted(row["attempts"] for row in rows) == [1] * 6 + [2] * 2
    out = " ".join(r.out.split())
    assert "quarantined demo-0: host key refused: host key for 127.0.0.1:" in out and "--accept-host-key" in out
    assert "quarantined demo-1" not in out

    hosts[1].restart(new_host_key=True)  # now no node is usable: the jobs really fail
    r = cli("run", "demo", "--items", str(_eight_items(tmp_path)), "--", "sh", "-c", "echo done {item}")
    assert r.code == 5 and "8 of 8 job(s) failed" in r.err
    out = " ".join(r.out.split())
    assert "quarantined demo-0: host key refused" in out and "quarantined demo-1: host key refused" in out


def test_an_unreachable_node_is_quarantined_after_two_tries_and_the_other_runs_all_jobs(cluster):
    state, hosts = cluster
    hosts[0].stop()
    summary = runner.run_items(state, "demo", [f"c{i}" for i in range(8)], ["sh", "-c", "echo {item}"])
    assert [(j.status, j.node) for j in summary.jobs] == [("ok", "demo-1")] * 8
    assert [q.node for q in summary.quarantined] == ["demo-0"]
    assert summary.quarantined[0].reason.startswith("unreachable: ") and "cannot connect" in summary.quarantined[0].reason


def test_a_node_that_fails_every_job_at_once_is_quarantined_and_its_failures_do_not_count(cluster):
    state, hosts = cluster
    (hosts[1].fake_root / "broken").touch()  # demo-1: every job dies at once (a broken driver, say)
    job = '[ ! -e "$GPUPLAN_FAKE_ROOT/broken" ] || exit 9; sleep 1.5; echo {item}'
    summary = runner.run_items(state, "demo", [f"c{i}" for i in range(8)], ["sh", "-c", job], retries=0)
    assert [(j.status, j.node) for j in summary.jobs] == [("ok", "demo-0")] * 8  # --retries 0, yet none lost
    assert [q.node for q in summary.quarantined] == ["demo-1"]
    assert "jobs in a row failed within" in summary.quarantined[0].reason and "(exit 9)" in summary.quarantined[0].reason
    moved = [j for j in summary.jobs if j.attempts == 2]
    assert moved and all("exit 9" in j.log_path.read_text() for j in moved)  # the failed attempt is in the log
    assert {row["status"] for row in state.runs("demo")} == {"ok"}


class _Refused(Exception):
    pass


@pytest.mark.parametrize("events, out", [
    # (node, what, job, seconds): what is ok, fail or nossh; the nodes quarantined at the end
    ([("a", "fail", "j1", 0.2), ("a", "fail", "j2", 0.2), ("b", "ok", "j3", 2.0)], ["a"]),
    ([("b", "ok", "j3", 2.0), ("a", "fail", "j1", 0.2), ("a", "fail", "j2", 0.2)], ["a"]),
    ([("a", "fail", "j1", 0.2), ("a", "fail", "j1", 0.2), ("b", "ok", "j3", 2.0)], []),  # one job failing twice
    ([("a", "fail", "j1", 0.9), ("a", "fail", "j2", 0.9), ("b", "ok", "j3", 1.0)], []),  # as fast as successes
    ([("a", "fail", "j1", 0.2), ("a", "fail", "j2", 0.2), ("b", "fail", "j3", 0.2)], []),  # failing everywhere
    ([("a", "fail", "j1", 0.2), ("a", "fail", "j2", 30), ("a", "fail", "j3", 0.2), ("b", "ok", "j4", 60)], []),
    ([("a", "nossh", "j1", 0), ("b", "ok", "j2", 1.0), ("a", "nossh", "j3", 0)], ["a"]),  # unreachable twice
    ([("a", "nossh", "j1", 0), ("a", "ok", "j2", 1.0), ("a", "nossh", "j3", 0)], []),  # not twice in a row
])
def test_quarantine_rules(events, out):
    pool = runner._Pool(["a", "b"])
    for node, what, job, seconds in events:
        if what == "ok":
            pool.succeeded(node, seconds)
        elif what == "fail":
            pool.failed(node, job, seconds, 1)
        else:
            pool.could_not_start(node, _Refused("connection refused"))
    assert list(pool.out) == out


def test_a_refused_host_key_or_login_quarantines_at_once():
    from gpuplan.operating.remote import HostKeyChanged, LoginRefused

    pool = runner._Pool(["a", "b", "c"])
    assert pool.could_not_start("a", HostKeyChanged("host key for 10.0.0.1:22 changed")) == ["a"]
    assert pool.could_not_start("b", LoginRefused("login as ubuntu was refused")) == ["b"]
    assert pool.out == {"a": "host key refused: host key for 10.0.0.1:22 changed",
                        "b": "login refused: login as ubuntu was refused"}
    assert pool.quarantine("c", "x") == ["c"] and pool.quarantine("c", "again") == [] and pool.out["c"] == "x"
