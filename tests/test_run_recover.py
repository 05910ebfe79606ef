"""`gpuplan run --recover` on Ray for real: three loopback sshd hosts in an owned-host
inventory, a cluster of two provisioned from it; one node is lost mid-batch and the third host
is claimed, joined to Ray and given items while the batch runs."""

from __future__ import annotations

import threading

import pytest

pytestmark = pytest.mark.sshd


def test_a_lost_node_is_replaced_by_one_of_the_same_kind_that_joins_the_batch(tmp_path, monkeypatch, cli, gpuplan_home):
    from test_baremetal_provider import write_inventory

    from gpuplan import paths
    from gpuplan.run.ray import engine
    from gpuplan.store.state import State
    from support.ray_env import free_port_range, ray_venv, stop_ray
    from support.sshd import start_hosts, stop_hosts
    from support.waiting import item_running_on, sleep_unless, wait_for

    monkeypatch.setenv("GPUPLAN_RAY_VENV", str(ray_venv()))
    port = free_port_range(3)
    monkeypatch.setenv("GPUPLAN_RAY_PORT", str(port))
    monkeypatch.setenv("GPUPLAN_RAY_OBJECT_STORE_MB", "80")
    monkeypatch.setenv("GPUPLAN_POLL_S", "0.3")
    hosts = start_hosts(3, tmp_path)
    try:
        paths.config_dir().mkdir(parents=True, exist_ok=True)
        inventory = write_inventory(paths.config_dir() / "inventory.yaml", hosts)
        inventory.write_text(inventory.read_text().replace("192.168.0.", "127.0.0."))  # Ray binds the private address
        r = cli("provision", "baremetal:t4", "x2", "--name", "rec", "--no-bootstrap", "--yes")
        assert r.code == 0, r.err
        # bootstrapped with parameters of its own: the replacement must get the same ones
        r = cli("bootstrap", "rec", "--playbook", "cuda", "--param", "root=$GPUPLAN_FAKE_ROOT",
                "--param", "cuda_version=12.8")
        assert r.code == 0, r.err
        items = tmp_path / "items.txt"
        items.write_text("".join(f"i{k}\n" for k in range(12)))
        lay = engine.layout()

        hurry = tmp_path / "hurry"

        def lose_node_1() -> None:  # once the run following the batch wrote an item running on rec-1
            wait_for(lambda: item_running_on(paths.state_db(), "rec", "rec-1"), timeout=120)
            stop_ray(f"rec-{lay.base(1)}")  # rec-1's Ray and everything under it: a host gone
            # everything the test looks at has happened once the replacement runs an item: the
            # items left end at once (their 5 s would add 10 s of waiting)
            wait_for(lambda: item_running_on(paths.state_db(), "rec", "rec-2"), timeout=240)
            hurry.touch()

        killer = threading.Thread(target=lose_node_1, daemon=True)
        killer.start()
        r = cli("run", "rec", "--items", str(items), "--per-gpu", "2", "--recover", "-y", "--", "sh", "-c",
                f"{sleep_unless(hurry, 5)}; : {{item}}")
        killer.join(1)
        assert r.code == 0, r.err + r.out
        err = " ".join(r.err.split())
        assert "rec-1 was lost" in err and "a replacement, 1x baremetal:t4, costs" in err
        assert "rec-2 joined the batch in place of rec-1" in err
        state = State(paths.state_db())
        job = next(j for j in state.jobs("rec"))
        rows = state.job_items(job.id)
        assert [it.status for it in rows] == ["ok"] * 12
        assert "rec-2" in {it.node for it in rows}  # the replacement ran items of this batch
        assert [(q.node, q.code) for q in state.job_quarantines(job.id)] == [("rec-1", "lost")]
        status = {n.name: n.status for n in state.nodes("rec")}
        assert status == {"rec-0": "running", "rec-1": "lost", "rec-2": "running"}
        assert any(j.op == "create-nodes" and j.target == "rec-2" for j in state.journal("rec"))
        # rec-2 got cuda with the cluster's recorded parameters, on its own fake root (root="" would
        # have been this machine's /etc) and CUDA 12.8 (not the default 12.6), as rec-0 has it
        profile = "etc/profile.d/gpuplan-cuda.sh"
        assert "/usr/local/cuda-12.8/bin" in (hosts[2].fake_root / profile).read_text()
        assert (hosts[2].fake_root / profile).read_text() == (hosts[0].fake_root / profile).read_text()
        state.close()
    finally:
        stop_ray("rec-", port, 3)
        stop_hosts(hosts)
