"""`gpuplan run` on Ray for real: two loopback sshd hosts as the cluster's nodes, each running
its own Ray node (own ports, temp dir, small object store) from one Ray venv built for the tests
(tests/support/ray_env.py). The Ray cluster is started once for the module, by the engine itself.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from decimal import Decimal

import pytest

from support.cli import items_file, submitted_job
from support.waiting import wait_for

pytestmark = pytest.mark.sshd
PRICE = Decimal("367.20")  # NC24 per hour, report A
CLUSTER = "raydemo"


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """Two loopback sshd hosts as the cluster CLUSTER, 2 GPUs each, its Ray started once for the module."""
    from support.ray_env import loopback_ray_cluster

    with loopback_ray_cluster(tmp_path_factory.mktemp("ray-home"), CLUSTER, PRICE) as running:
        yield running


def _cli(*args):
    from support.cli import run_cli

    return run_cli(*args)


def _jobs(state=None) -> dict:
    r = _cli("jobs", CLUSTER, "--format", "json")
    assert r.code == 0, r.err
    return {j["id"]: j for j in json.loads(r.out)}


def _plan(tmp_path, names, workload="w", item_s=20) -> str:
    """A saved plan for this cluster's fleet (2 x Standard_NC24, baremetal, 2 GPUs each), its jobs dealt over two
    machines, each item planned `item_s` seconds (4 items on 2 slots: 2 rounds a machine). It names the command its
    speed was measured with, `sh -c`, and a generic band (x0.243-1.316), so that a batch of it whose items take
    item_s / 1.316 to item_s / 0.243 calibrates it (issue 42: measuring/calibration.py)."""
    plan = tmp_path / "plan.json"
    machines = [{"jobs_s": 2 * item_s, "idle_tail_s": 0, "billed_s": 60, "cost_jpy": "1", "jobs": list(names[k::2])}
                for k in (0, 1)]
    plan.write_text(json.dumps({"workload": workload, "command": "sh -c", "recommended": {
        "provider": "baremetal", "instance_type": "Standard_NC24", "count": 2, "wall_minutes": 1, "cost_jpy": 1,
        "fleet": [{"instance_type": "Standard_NC24", "count": 2, "gpu": "K80", "gpus_per_machine": 2}],
        "speeds": [{"gpu": "K80", "kind": "generic", "speed": "1", "low": "0.243", "high": "1.316", "class": "cnn-train"}],
        "machines": machines}}))
    return str(plan)


def test_a_batch_outlives_its_client_killed_with_sigkill(ray_cluster, tmp_path):
    state, _, _ = ray_cluster
    names = [f"clip-{i}.mp4" for i in range(8)]
    items = items_file(tmp_path, names)
    client = subprocess.Popen([sys.executable, "-c", "from gpuplan.cli import main; main()", "run", CLUSTER, "--items", items,
                               "--plan", _plan(tmp_path, names, "killed", item_s=3.5), "--", "sh", "-c", "sleep 3; echo done {item}"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=dict(os.environ), text=True)
    job = submitted_job(client.stdout.readline())  # printed (and flushed) once the batch is on the cluster
    # killed once its items run (not after a fixed sleep: on a busy machine they may not have started)
    running = wait_for(lambda: (j := _jobs()[job])["state"] == "running" and j)
    client.send_signal(signal.SIGKILL)
    client.communicate()
    assert client.returncode == -signal.SIGKILL
    assert running["succeeded"] < 8  # killed mid-batch: 8 items of 3 s on 4 slots take two rounds
    done = wait_for(lambda: (j := _jobs()[job])["state"] in ("succeeded", "failed") and j)
    assert (done["state"], done["succeeded"], done["total"]) == ("succeeded", 8, 8)
    assert Decimal(done["yen"]) > 0 and done["wall_s"] >= 6
    # nobody followed it to the end: the `jobs` that saw it end recorded the plan's calibration
    assert [(c["jobs"], c["size"]) for c in state.calibrations("killed")] == [(8, "Standard_NC24")]


def test_detach_then_cancel_leaves_no_item_process(ray_cluster, tmp_path):
    from support.ray_env import processes_running

    items = items_file(tmp_path, ["a", "b", "c"])
    r = _cli("run", CLUSTER, "--items", items, "--detach", "--", "sh", "-c", "sleep 600; : {item}")
    assert r.code == 0, r.err
    job = submitted_job(r.out)
    assert f"gpuplan cancel {CLUSTER} {job}" in " ".join(r.out.split())
    wait_for(lambda: len(processes_running(["sleep", "600"])) == 3)
    assert _jobs()[job]["running"] == 3
    status = _cli("status", CLUSTER)
    assert status.code == 0 and f"batch {job} on {CLUSTER}: running, 0 of 3 items done" in " ".join(status.out.split())
    r = _cli("cancel", CLUSTER, job)
    assert r.code == 0, r.err
    assert "3 running items stopped" in r.out
    wait_for(lambda: not processes_running(["sleep", "600"]), timeout=10)
    assert _jobs()[job]["state"] == "cancelled"


def test_resume_runs_only_what_did_not_succeed_and_bad_input_sets_no_node_aside(ray_cluster, tmp_path):
    ran = tmp_path / "ran.txt"
    fixed = tmp_path / "fixed"
    items = items_file(tmp_path, ["a", "bad-b", "c", "bad-d"])
    script = f"echo {{item}} >> {ran}; case {{item}} in bad*) [ -e {fixed} ] || exit 3;; esac"
    r = _cli("run", CLUSTER, "--items", items, "--", "sh", "-c", script)
    assert r.code == 5, r.err + r.out
    job = submitted_job(r.out)
    first = _jobs()[job]
    # each bad item failed on both nodes: bad input; neither node was set aside for it
    assert (first["succeeded"], first["bad_input"], first["quarantined"]) == (2, 2, [])
    assert sorted(ran.read_text().split()) == ["a", "bad-b", "bad-b", "bad-d", "bad-d", "c"]
    fixed.touch()
    ran.write_text("")
    r = _cli("run", CLUSTER, "--resume", job)
    assert r.code == 0, r.err + r.out
    again = _jobs()[submitted_job(r.out)]
    assert (again["resumes"], again["total"], again["succeeded"]) == (job, 2, 2)
    assert sorted(ran.read_text().split()) == ["bad-b", "bad-d"]


def test_a_timed_out_item_has_its_processes_killed(ray_cluster, tmp_path):
    from support.ray_env import processes_running

    items = items_file(tmp_path, ["slow"])
    r = _cli("run", CLUSTER, "--items", items, "--timeout", "2s", "--", "sh", "-c", "sleep 301 & sleep 302; : {item}")
    assert r.code == 5, r.err + r.out
    assert "timed out" in r.out
    job = _jobs()[submitted_job(r.out)]
    assert job["timed_out"] == 1
    assert not processes_running(["sleep", "301"]) and not processes_running(["sleep", "302"])


def test_a_node_failing_every_item_is_set_aside_and_its_items_move_on(ray_cluster, tmp_path):
    state, hosts, _ = ray_cluster
    (hosts[1].fake_root / "broken").touch()  # raydemo-1: every item dies at once (a broken driver, say)
    try:
        items = items_file(tmp_path, [f"c{i}" for i in range(8)])
        job = '[ ! -e "$GPUPLAN_FAKE_ROOT/broken" ] || exit 9; sleep 0.5; echo {item}'
        r = _cli("run", CLUSTER, "--items", items, "--", "sh", "-c", job)
    finally:
        (hosts[1].fake_root / "broken").unlink()
    assert r.code == 0, r.err + r.out  # --retries 0, yet nothing lost
    j = _jobs()[submitted_job(r.out)]
    assert j["succeeded"] == 8
    assert [q["node"] for q in j["quarantined"]] == [f"{CLUSTER}-1"]
    assert "failed there (exit 9) and then succeeded on other nodes" in j["quarantined"][0]["reason"]
    assert j["quarantined"][0]["code"] == "failures"
    assert "set aside raydemo-1" in " ".join(r.out.split())


def test_items_run_in_the_plans_longest_first_order(ray_cluster, tmp_path):
    state, _, _ = ray_cluster
    plan = _plan(tmp_path, ["l1", "l2", "l3", "l4", "s1", "s2", "s3", "s4"], item_s=1.2)  # machine 1: l1 l3 s1 s3, machine 2: l2 l4 s2 s4
    items = items_file(tmp_path, ["s4", "s3", "s2", "s1", "l4", "l3", "l2", "l1"])  # file order: shortest first
    r = _cli("run", CLUSTER, "--items", items, "--plan", plan, "--", "sh", "-c", "sleep 1; : {item}")
    assert r.code == 0, r.err + r.out
    out = " ".join(r.out.split())
    assert "order: the plan's (longest first; 8 of 8 items named in it)" in out
    rows = state.job_items(submitted_job(r.out))
    assert [it.item for it in rows] == ["l1", "l2", "l3", "l4", "s1", "s2", "s3", "s4"]
    # 4 slots: the four long items start first, the short ones only as slots free up
    assert max(it.started_at for it in rows[:4]) < min(it.started_at for it in rows[4:])
    assert "calibration recorded" in out  # the whole batch, on the fleet the plan was for


def test_k_per_gpu_items_share_a_gpu_with_a_fixed_memory_share_in_the_workdir(ray_cluster, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "show.sh").write_text('echo "item=$1 gpu=$CUDA_VISIBLE_DEVICES share=$GPUPLAN_MEMORY_FRACTION"\n')
    items = items_file(tmp_path, ["x"])
    r = _cli("run", CLUSTER, "--items", items, "--per-gpu", "2", "--workdir", str(code), "--", "sh", "show.sh", "{item}")
    assert r.code == 0, r.err + r.out
    job = submitted_job(r.out)
    log = _cli("logs", CLUSTER, job, "x")
    assert log.code == 0, log.err
    driver = _cli("logs", CLUSTER, job)  # the driver's own log, through `ray job logs` on the head
    assert driver.code == 0, driver.err
    assert re.fullmatch(r"item=x gpu=[01] share=0\.500000\n", log.out)  # one of the node's two GPUs, half of it


def test_logs_fetch_copies_each_items_outputs_back_from_its_node(ray_cluster, tmp_path):
    state, _, _ = ray_cluster
    items = items_file(tmp_path, ["a", "b", "c", "d"])
    script = 'echo result-{item} > {out}/r.txt; mkdir "$GPUPLAN_OUTPUT_DIR/sub"; echo {item} > "$GPUPLAN_OUTPUT_DIR/sub/y"'
    r = _cli("run", CLUSTER, "--items", items, "--", "sh", "-c", script)
    assert r.code == 0, r.err + r.out
    job = submitted_job(r.out)
    assert len({it.node for it in state.job_items(job)}) == 2  # the outputs lie on both nodes
    back = tmp_path / "back"
    r = _cli("logs", CLUSTER, job, "--fetch", str(back))
    assert r.code == 0, r.err
    assert f"8 files of 4 items copied into {back}" in " ".join(r.out.split())
    assert sorted(p.name for p in back.iterdir()) == ["0000-a", "0001-b", "0002-c", "0003-d"]
    assert (back / "0002-c" / "r.txt").read_text() == "result-c\n" and (back / "0002-c/sub/y").read_text() == "c\n"
    one = tmp_path / "one"
    r = _cli("logs", CLUSTER, job, "b", "--fetch", str(one))
    assert r.code == 0 and [p.name for p in one.iterdir()] == ["0001-b"]
    r = _cli("logs", CLUSTER, job, "b", "--fetch", str(one))  # nothing the user has is written over
    assert r.code == 2 and "exists already" in r.err
    assert (one / "0001-b" / "r.txt").read_text() == "result-b\n"


# Counts to 3 in its checkpoint, then fails when it began from nothing; run again, it goes on
# from where the checkpoint says and counts to 5. Without the checkpoint kept, every attempt
# begins from nothing and fails.
CHECKPOINTED = ('f="$GPUPLAN_CHECKPOINT_DIR/step"; s=$(cat "$f" 2>/dev/null || echo 0); start=$s; '
                'while [ "$s" -lt 3 ]; do s=$((s+1)); echo $s > "$f"; sleep 0.3; done; '
                '[ "$start" = 0 ] && exit 1; '
                'while [ "$s" -lt 5 ]; do s=$((s+1)); echo $s > "$f"; done; echo "{item} from $start to $s" > {out}/result')


def test_an_item_run_again_starts_from_its_checkpoint(ray_cluster, tmp_path):
    """Issue 35 (was tests/test_checkpoints.py, on a Ray cluster of its own): each item's
    $GPUPLAN_CHECKPOINT_DIR is kept on the head; the attempt run again starts from what the
    first one left there, not from a copy on whichever node it lands on."""
    state, _, _ = ray_cluster
    r = _cli("run", CLUSTER, "--items", items_file(tmp_path, ["a", "b"]), "--retries", "1", "--checkpoint-every", "2s",
             "--", "sh", "-c", CHECKPOINTED)
    assert r.code == 0, r.err + r.out
    assert "2 ok of 2 items" in " ".join(r.out.split())
    job = next(j for j in state.jobs(CLUSTER) if j.id == submitted_job(r.out))
    assert _cli("logs", CLUSTER, job.id, "--fetch", str(tmp_path / "out")).code == 0
    results = sorted(p.read_text().strip() for p in (tmp_path / "out").glob("*/result"))
    assert results == ["a from 3 to 5", "b from 3 to 5"]
    assert json.loads(json.dumps(job.options)).get("checkpoint_every_s") == 2


def test_the_dashboard_is_reached_through_ssh(ray_cluster):
    import threading
    import urllib.request

    from gpuplan.run.ray import engine

    state, _, _ = ray_cluster
    eng = engine.engine_of(state, CLUSTER)
    got, done = [], threading.Event()
    t = threading.Thread(target=engine.serve_dashboard, args=(eng, 0, got.append, done.is_set), daemon=True)
    t.start()
    wait_for(lambda: got, timeout=30, every=0.1)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{got[0]}/api/version", timeout=30) as resp:
            version = json.loads(resp.read())
    finally:
        done.set()
        t.join(5)
    assert version["ray_version"] == "2.60.0"


STAND_IN_TORCHRUN = """#!/bin/sh
# Stands in for `python -m torch.distributed.run ARGS PROGRAM`: records what its node was given,
# then waits until every rank has started (a gang starts together, or this times out). Asked
# whether torch imports (`-c 'import torch...'`) it says yes.
[ "$1" = "-c" ] && exit 0
shift 2
while [ $# -gt 0 ]; do
  case $1 in
    --nnodes) n=$2; shift;; --node-rank) r=$2; shift;; --nproc-per-node) p=$2; shift;;
    --master-addr) a=$2; shift;; --master-port) port=$2; shift;; *) rest="$rest $1";;
  esac
  shift
done
echo "rank=$r nnodes=$n nproc=$p master=$a:$port node=$GPUPLAN_NODE gpus=$CUDA_VISIBLE_DEVICES prog=$rest" > {dir}/rank$r
i=0
while [ "$(ls {dir} | wc -l)" -lt "$n" ]; do sleep 0.2; i=$((i+1)); [ $i -lt 150 ] || exit 7; done
case "$rest" in *fail-rank-1*) [ "$r" != 1 ] || exit 3; exec sleep 303;; esac
"""


def test_torchrun_runs_as_a_ray_gang_one_rank_per_node(ray_cluster, tmp_path):
    from support.ray_env import processes_running

    state, _, _ = ray_cluster
    seen = tmp_path / "ranks"
    seen.mkdir()
    python = tmp_path / "python"
    python.write_text(STAND_IN_TORCHRUN.replace("{dir}", str(seen)))
    python.chmod(0o755)
    r = _cli("run", CLUSTER, "--torchrun", "--python", str(python), "--master-port", "29123", "--",
             "python", "train.py", "--epochs", "1")
    assert r.code == 0, r.err + r.out
    assert "2 ranks; order: one rank per node, started together (a Ray gang)" in " ".join(r.out.split())
    got = sorted(f.read_text().split() for f in seen.iterdir())
    # rank 0 on the head (node 0), whose private address hosts the rendezvous; every GPU of each node
    assert got == [[f"rank={k}", "nnodes=2", "nproc=2", "master=127.0.0.1:29123", f"node={CLUSTER}-{k}", "gpus=0,1",
                    "prog=", "train.py", "--epochs", "1"] for k in (0, 1)]
    job = _jobs()[submitted_job(r.out)]
    assert (job["state"], job["succeeded"], job["total"]) == ("succeeded", 2, 2)
    assert {(it.item, it.node) for it in state.job_items(job["id"])} == {("rank0", f"{CLUSTER}-0"),
                                                                                 ("rank1", f"{CLUSTER}-1")}
    # one rank fails: the other, waiting on it, is stopped rather than left hanging
    for f in seen.iterdir():
        f.unlink()
    r = _cli("run", CLUSTER, "--torchrun", "--python", str(python), "--", "python", "train.py", "fail-rank-1")
    assert r.code == 5, r.err + r.out
    job = _jobs()[submitted_job(r.out)]
    assert (job["state"], job["succeeded"], job["failed"]) == ("failed", 0, 2)
    assert not processes_running(["sleep", "303"])
    r = _cli("run", CLUSTER, "--resume", job["id"])
    assert r.code == 2 and "--torchrun job" in r.err
    # a Python without torch on the nodes: said before anything is submitted, naming the nodes
    bare = tmp_path / "bare-python"  # a Python with no torch: its import fails
    bare.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named torch' >&2\nexit 1\n")
    bare.chmod(0o755)
    r = _cli("run", CLUSTER, "--torchrun", "--python", str(bare), "--", "python", "train.py")
    assert r.code == 2 and f"{bare} cannot import torch on {CLUSTER}-0, {CLUSTER}-1" in r.err
    assert " submitted" not in r.out


# A real torchrun over both nodes, for the least CPU that shows it: each rank joins the rendezvous
# on the head and adds its number in one all-reduce over gloo. ResNet-50's data-parallel training
# over gloo under torchrun is test_jobs_reference's, on one machine; run here, over four ranks, it
# took 86 s of CPU and 77 s on the busy 2-core machine (2026-11-29), the suite's slowest test.
ALL_REDUCE = """import json, os
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
number = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(number)
# one write of the whole line: the node's two ranks share its log, and print() writes the text and
# its newline apart where stdout is unbuffered (the suite saw the two lines run together once)
os.write(1, (json.dumps({"rank": dist.get_rank(), "world_size": dist.get_world_size(),
                         "node": os.environ.get("GPUPLAN_NODE"), "sum": number.item()}) + "\\n").encode())
dist.destroy_process_group()
"""


@pytest.mark.torch
def test_torchrun_all_reduces_over_gloo_across_both_nodes(ray_cluster, tmp_path):
    pytest.importorskip("torch")
    job = tmp_path / "all_reduce.py"
    job.write_text(ALL_REDUCE)
    r = _cli("run", CLUSTER, "--torchrun", "--python", sys.executable, "--master-port", str(_free_port()), "--",
             "python", str(job))
    assert r.code == 0, r.err + r.out
    said = []
    for node_rank in ("rank0", "rank1"):  # one item per node: its torchrun and the node's two ranks
        log = _cli("logs", CLUSTER, submitted_job(r.out), node_rank)
        assert log.code == 0, log.err
        said += [json.loads(line) for line in log.out.splitlines() if line.startswith("{")]
    assert sorted(rec["rank"] for rec in said) == [0, 1, 2, 3]
    assert {(rec["world_size"], rec["sum"]) for rec in said} == {(4, 1.0 + 2 + 3 + 4)}  # every rank's number, everywhere
    # two ranks (the node's two GPU slots) on each node, node 0's first
    assert {(rec["rank"] // 2, rec["node"]) for rec in said} == {(0, f"{CLUSTER}-0"), (1, f"{CLUSTER}-1")}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_node_whose_host_key_changed_is_set_aside_and_the_others_run_its_items(ray_cluster, tmp_path):
    state, hosts, _ = ray_cluster
    hosts[1].restart(new_host_key=True)  # raydemo-1 was rebuilt: its pinned key no longer matches
    try:
        r = _cli("run", CLUSTER, "--items", items_file(tmp_path, [f"k{i}" for i in range(4)]), "--", "sh", "-c", "echo {item}")
    finally:
        state.pin_host_key(hosts[1].host, hosts[1].port, hosts[1].host_public_key, cluster=CLUSTER, node=f"{CLUSTER}-1")
    assert r.code == 0, r.err + r.out
    j = _jobs()[submitted_job(r.out)]
    assert j["succeeded"] == 4 and {it.node for it in state.job_items(j["id"])} == {f"{CLUSTER}-0"}
    [q] = j["quarantined"]
    assert q["node"] == f"{CLUSTER}-1" and q["reason"].startswith("host key refused: ") and "--accept-host-key" in q["reason"]
    assert q["code"] == "left_out"


def test_a_node_lost_mid_batch_has_its_items_requeued_on_the_others(ray_cluster, tmp_path):
    """Last on the module's cluster: raydemo-1's Ray (and everything under it) is killed, as a
    host that disappears."""
    import threading

    from gpuplan.run.ray import engine
    from support.ray_env import processes_running, stop_ray

    items = items_file(tmp_path, ["a", "b", "c", "d"])
    lay = engine.layout()

    def lose_node_1() -> None:
        wait_for(lambda: len(processes_running(["sleep", "6"])) == 4, timeout=60, every=0.1)
        stop_ray(f"{CLUSTER}-{lay.base(1)}")

    killer = threading.Thread(target=lose_node_1, daemon=True)
    killer.start()
    r = _cli("run", CLUSTER, "--items", items, "--", "sh", "-c", "sleep 6; : {item}")
    killer.join(1)
    assert r.code == 0, r.err + r.out
    j = _jobs()[submitted_job(r.out)]
    assert j["succeeded"] == 4
    assert [q["node"] for q in j["quarantined"]] == [f"{CLUSTER}-1"] and j["quarantined"][0]["reason"].startswith("lost: ")
    assert j["quarantined"][0]["code"] == "lost"

    state, _, _ = ray_cluster
    assert {it.node for it in state.job_items(j["id"])} == {f"{CLUSTER}-0"}


def test_owned_hosts_close_their_ray_ports_to_all_but_the_clusters_members(ray_cluster):
    """Ray 2.60.0 listens on all interfaces for some servers: on hosts no cloud firewall guards,
    each node's iptables (a stand-in here: the hosts are this machine) admits only loopback and
    the members to its 100 Ray ports, hooked into INPUT once however often Ray is started."""
    from gpuplan.run.ray import engine

    state, hosts, _ = ray_cluster
    eng = engine.engine_of(state, CLUSTER)
    assert eng.host_firewall  # a baremetal cluster
    for node, h in zip(eng.nodes, hosts):
        b = eng.layout.base(node.index)
        chain, out = engine._chain(eng, node), engine._out_chain(eng, node)
        for tool in ("iptables", "ip6tables"):  # IPv6 as IPv4 (issue 43)
            hooks = [line for line in (h.fake_root / f"{tool}.rules").read_text().splitlines() if line.startswith("I ")]
            assert hooks == [f"I INPUT -p tcp --dport {b}:{b + 99} -j {chain}",
                             f"I OUTPUT -o lo -p tcp --dport {b}:{b + 99} -j {out}"]
            log = (h.fake_root / f"{tool}.log").read_text().splitlines()
            last = log[len(log) - 1 - log[::-1].index(f"{tool} -w -N {chain}"):]
            # IPv4: loopback and the members' (private) address; IPv6, which no member uses: nothing
            admitted = ([f"{tool} -w -A {chain} -s 127.0.0.0/8 -j RETURN", f"{tool} -w -A {chain} -s 127.0.0.1 -j RETURN"]
                        if tool == "iptables" else [])
            body = [line for line in last[1:] if line != f"{tool} -w -F {chain}"]  # -N failed: then -F
            assert body[:len(admitted) + 1] == [*admitted, f"{tool} -w -A {chain} -j DROP"]
            # on the node itself, only the SSH user's (root here) and root's connections reach the ports
            assert [line for line in last if f" {out} " in line and " -A " in line] == [
                f"{tool} -w -A {out} -m owner --uid-owner 0 -j RETURN",
                f"{tool} -w -A {out} -m owner --uid-owner 0 -j RETURN",
                f"{tool} -w -A {out} -p tcp -j REJECT --reject-with tcp-reset"]


def test_run_down_tears_the_cluster_down_when_the_batch_ends(ray_cluster, tmp_path):
    """Last of all: the module's cluster goes."""
    from test_baremetal_provider import write_inventory

    from gpuplan import paths
    from support.ray_env import tagged_pids

    state, hosts, _ = ray_cluster
    paths.config_dir().mkdir(parents=True, exist_ok=True)
    write_inventory(paths.config_dir() / "inventory.yaml", hosts)  # the owned hosts, as teardown reads them
    r = _cli("run", CLUSTER, "--items", items_file(tmp_path, ["last"]), "--down", "--fetch", str(tmp_path / "got"), "--",
             "sh", "-c", "echo {item} > $GPUPLAN_OUTPUT_DIR/out.txt")
    assert r.code == 0, r.err + r.out
    assert "1 ok of 1 item" in r.out and f"cluster {CLUSTER} torn down" in " ".join(r.out.split())
    assert state.cluster(CLUSTER).status == "gone"
    # the outputs were fetched before the teardown; afterwards there is nothing to fetch, and it says why
    assert (tmp_path / "got" / "0000-last" / "out.txt").read_text() == "last\n"
    r = _cli("logs", CLUSTER, submitted_job(r.out), "--fetch", str(tmp_path / "again"))
    assert r.code == 2 and f"cluster {CLUSTER!r} was torn down" in r.err
    # Ray and everything under it stopped on the (owned) hosts: `ray stop` returns while the last
    # workers may still be exiting, so give them a few seconds
    deadline = time.monotonic() + 15
    while tagged_pids(f"{CLUSTER}-") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert tagged_pids(f"{CLUSTER}-") == []
    for h in hosts:  # and the firewall chains gpuplan added are gone with it
        for tool in ("iptables", "ip6tables"):
            assert "I INPUT" not in (h.fake_root / f"{tool}.rules").read_text()
            assert "I OUTPUT" not in (h.fake_root / f"{tool}.rules").read_text()
