"""`gpuplan launch` with `recover: true`, for real (issue 41): loopback sshd hosts in an owned-host
inventory, Ray from the tests' venv, nothing monkeypatched. One host's Ray is stopped mid-batch;
the replacement (a third host, added to the inventory while the batch runs) is claimed, joined
and given items of the batch, which stays within its cap on one tax basis."""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest
import yaml

pytestmark = pytest.mark.sshd


def test_a_launch_with_recover_gets_a_replacement_that_runs_items_within_the_cap(tmp_path, gpuplan_home, monkeypatch,
                                                                                 cli):
    from gpuplan import paths
    from gpuplan.run import recover
    from gpuplan.run.ray import engine
    from gpuplan.store.state import State
    from support.ray_env import free_port_range, ray_venv, stop_ray, tagged_pids
    from support.sshd import start_hosts, stop_hosts
    from support.waiting import item_running_on, sleep_unless, wait_for

    hosts = start_hosts(3, tmp_path)
    port = free_port_range(3)
    monkeypatch.setenv("GPUPLAN_RAY_VENV", str(ray_venv()))
    monkeypatch.setenv("GPUPLAN_RAY_PORT", str(port))
    monkeypatch.setenv("GPUPLAN_RAY_OBJECT_STORE_MB", "80")
    monkeypatch.setenv("GPUPLAN_POLL_S", "0.3")
    monkeypatch.chdir(tmp_path)
    entries = [{"name": h.name, "address": h.host, "port": h.port, "private_address": h.host,
                "gpus": {"model": "Tesla T4", "count": 1}, "group": "t4", "power_watts": 1000,
                "host_key": h.host_public_key} for h in hosts]
    inventory = gpuplan_home / "config" / "inventory.yaml"
    inventory.parent.mkdir(parents=True, exist_ok=True)

    def write_inventory(n: int) -> None:
        inventory.write_text(yaml.safe_dump({"defaults": {"user": "root", "key": str(hosts[0].client_key_path)},
                                             "hosts": entries[:n]}))

    write_inventory(2)  # the plan is for the two hosts there are; the third comes as the replacement
    items = [f"v{k:02d}" for k in range(16)]
    (tmp_path / "videos.txt").write_text("".join(f"{i}\n" for i in items))
    # the batch counts yen without tax; owned hosts' power is listed with it (¥31/kWh): the cap the
    # ledger is held to is max_yen x 1.1 (hand arithmetic below), not max_yen as written
    (tmp_path / "tiny.yaml").write_text("name: tiny\nreference_gpu: T4\njobs: [{seconds: 10}]\n")
    hurry = tmp_path / "hurry"  # made once the replacement runs an item: the items left end at once
    (tmp_path / "batch.yaml").write_text(yaml.safe_dump({
        "workload": "tiny.yaml", "items": "videos.txt", "infra": ["owned"], "per_gpu": 2, "recover": True,
        "max_yen": 100, "tax": "excluded", "outputs": "out",
        "command": f"sh -c '{sleep_unless(hurry, 5)}; echo {{item}} > $GPUPLAN_OUTPUT_DIR/r'"}))
    lay = engine.layout()
    try:
        def lose_node_1() -> None:  # once the launch following the batch wrote an item running on batch-1
            wait_for(lambda: item_running_on(paths.state_db(), "batch", "batch-1"), timeout=180)
            write_inventory(3)
            stop_ray(f"batch-{lay.base(1)}")  # batch-1's Ray and everything under it: a host gone
            # everything the test looks at has happened once the replacement runs an item: the
            # items left end at once (their 5 s would add 15 s of waiting)
            wait_for(lambda: item_running_on(paths.state_db(), "batch", "batch-2"), timeout=240)
            hurry.touch()

        killer = threading.Thread(target=lose_node_1, daemon=True)
        killer.start()
        r = cli("launch", str(tmp_path / "batch.yaml"), "-y")
        killer.join(1)
        assert r.code == 0, r.out + r.err
        err = " ".join(r.err.split())
        assert "batch-1 was lost" in err and "batch-2 joined the batch in place of batch-1" in err
        state = State(paths.state_db())
        job = state.jobs("batch")[-1]
        rows = state.job_items(job.id)
        assert [it.status for it in rows] == ["ok"] * 16
        ran = sum(1 for it in rows if it.node == "batch-2")
        assert ran > 0, "the replacement joined but got no item"
        assert sorted(p.read_text() for p in (tmp_path / "out").glob("*/r")) == [f"{i}\n" for i in items]
        # the cap: ¥100 without tax is ¥110 on the basis the hosts' power is listed and the ledger counts
        cap = recover.job_cap(job)
        assert (cap.yen, cap.tax, cap.billed) == (Decimal(100), "excluded", Decimal(110))
        spent = state.ledger_seconds_and_yen("batch")[1]  # every host from its claim to its release
        assert Decimal(0) < spent <= cap.billed
        held = [r for r in state.ledger_rows() if r["cluster"] == "batch"]
        assert {r["node"] for r in held} == {"batch-0", "batch-1", "batch-2"} and all(r["stopped_at"] for r in held)
        assert {r["tax"] for r in held} == {cap.listed} == {"included"}  # the replacement too: one basis in the ledger
        assert state.cluster("batch").status == "gone" and tagged_pids("batch-") == []
        state.close()
    finally:
        stop_ray("batch-", port, 3)
        stop_hosts(hosts)
