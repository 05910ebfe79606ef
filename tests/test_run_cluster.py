"""`gpuplan run` over two real loopback sshd hosts: what it refuses before starting anything, and
`bench` measuring data-parallel scaling across the two "nodes". Batches of items and --torchrun
run on Ray: tests/test_run_engine.py; the queue's rules: tests/test_batch_rules.py."""

from __future__ import annotations

import sys
from decimal import Decimal

import pytest

from gpuplan import paths
from gpuplan.run.ray import runner
from gpuplan.store.state import State

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


def test_torchrun_program_strips_python_and_refuses_a_second_torchrun():
    assert runner.torchrun_program(["python3", "-m", "gpuplan.jobs.resnet50", "--json"]) == [
        "-m", "gpuplan.jobs.resnet50", "--json"]
    assert runner.torchrun_program(["./train.sh", "x"]) == ["--no-python", "./train.sh", "x"]
    with pytest.raises(Exception, match="gpuplan adds torchrun"):
        runner.torchrun_program(["torchrun", "train.py"])


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


def _fake_torch_wheel(folder) -> None:
    """A wheel named torch (version 0.0.1) that only imports: the package index stands in here."""
    import zipfile

    folder.mkdir()
    info = "torch-0.0.1.dist-info"
    files = {"torch/__init__.py": "__version__ = '0.0.1+stand-in'\n",
             f"{info}/METADATA": "Metadata-Version: 2.1\nName: torch\nVersion: 0.0.1\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(folder / "torch-0.0.1-py3-none-any.whl", "w") as z:
        for name, text in files.items():
            z.writestr(name, text)


def test_a_node_without_torch_gets_the_benchs_python_and_the_jobs_code(cluster, tmp_path):
    """`bench --cluster` / `--on` without --python: each node gets a venv with torch (from the
    index; here a folder of wheels) and the client's gpuplan/jobs code, and the jobs run with them."""
    import subprocess

    from gpuplan.measuring import bench

    if subprocess.run(["/usr/bin/python3", "-c", "import ensurepip, venv"], capture_output=True).returncode != 0:
        pytest.skip("the loopback hosts' /usr/bin/python3 cannot make a venv (python3-venv missing)")
    state, hosts = cluster
    wheels = tmp_path / "wheels"
    _fake_torch_wheel(wheels)
    executor = bench.ClusterExecutor(state, "demo")
    assert executor.prepare(find_links=str(wheels)) == "0.0.1+stand-in"
    assert executor.python.endswith("/.gpuplan/bench/venv/bin/python") and executor.workdir.endswith("/.gpuplan/bench/src")
    probe = ("import gpuplan.jobs._common as c, torch, os;"
             " print(torch.__version__, os.path.relpath(c.__file__, os.getcwd()))")
    outcomes = executor.run_all([bench.Launch((executor.python, "-c", probe), node=n) for n in (0, 1)], timeout=120)
    assert [(o.exit_code, o.stdout.strip()) for o in outcomes] == [(0, "0.0.1+stand-in gpuplan/jobs/_common.py")] * 2
    # made once: a second prepare finds the venv and torch and installs nothing
    assert executor.prepare(find_links=str(tmp_path / "no-such-folder")) == "0.0.1+stand-in"
