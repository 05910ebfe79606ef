"""`gpuplan probe` over two owned offers, for real: two loopback OpenSSH hosts in the inventory,
one a `t4` group and one an `a10` group (real sshd, real Ray from the tests' Ray venv), each
claimed, its probe run on Ray, released. The stand-in job sleeps a pace a step that each host
keeps in ~/pace: the T4 host five times as fast as the A10 host, the reverse of the generic
table, so the pick must follow what was measured."""

from __future__ import annotations

from decimal import Decimal

import pytest
import yaml

# the stand-in: `units` steps at the host's own pace (seconds a step, in ~/pace)
STAND_IN = ["python3", "-c", "import os, sys, time; time.sleep(float(open(os.path.expanduser('~/pace')).read())"
            " * int(sys.argv[1]))", "{units}"]
PACE = {"t4": "0.1", "a10": "0.5"}


@pytest.fixture
def two_offers(tmp_path, gpuplan_home, monkeypatch):
    from support.ray_env import free_port_range, ray_venv, stop_ray
    from support.sshd import start_hosts, stop_hosts

    venv = ray_venv()
    hosts = start_hosts(2, tmp_path)
    kinds = [("t4", "Tesla T4", 70), ("a10", "NVIDIA A10", 150)]
    entries = []
    for h, (group, model, watts) in zip(hosts, kinds):
        (h.fake_root / "root" / "pace").write_text(PACE[group])
        entries.append({"name": h.name, "address": h.host, "port": h.port, "private_address": h.host,
                        "gpus": {"model": model, "count": 1}, "group": group, "power_watts": watts,
                        "host_key": h.host_public_key})
    (gpuplan_home / "config").mkdir(parents=True, exist_ok=True)
    (gpuplan_home / "config" / "inventory.yaml").write_text(yaml.safe_dump(
        {"defaults": {"user": "root", "key": str(hosts[0].client_key_path)}, "hosts": entries}))
    port = free_port_range(1)
    monkeypatch.setenv("GPUPLAN_RAY_VENV", str(venv))
    monkeypatch.setenv("GPUPLAN_RAY_PORT", str(port))
    monkeypatch.setenv("GPUPLAN_RAY_OBJECT_STORE_MB", "80")
    monkeypatch.setenv("GPUPLAN_POLL_S", "0.3")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-job.yaml").write_text(yaml.safe_dump({
        "name": "my-job", "unit": "step", "seconds_per_unit": 1.0, "reference_gpu": "V100", "kind": "cnn-train",
        "memory_gib": 2, "jobs": [{"name": "clip", "count": 1, "units": 600}]}))
    (tmp_path / "clips.txt").write_text("".join(f"clip-{i}.mp4\n" for i in range(4)))
    (tmp_path / "batch.yaml").write_text(yaml.safe_dump({
        "workload": "my-job.yaml", "items": "clips.txt", "infra": ["owned"], "command": "python3 run.py {item}",
        "probe": {"command": STAND_IN, "units": [2, 10]}}))
    try:
        yield hosts
    finally:
        stop_ray("probe-", port, 1)
        stop_hosts(hosts)


def _pick(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("Recommended: "))


def test_a_probe_over_two_owned_offers_writes_two_profiles_and_the_pick_follows_them(two_offers, cli, gpuplan_home):
    from gpuplan import paths
    from gpuplan.store.state import State
    from support.ray_env import tagged_pids

    before = cli("estimate", "--workload", "my-job.yaml", "--provider", "baremetal")
    assert before.code == 0, before.err
    assert "a10" in _pick(before.out) and "t4" not in _pick(before.out)  # the generic table: A10 2.8x a T4
    r = cli("probe", "batch.yaml", "--probe-budget", "10", "-y")
    assert r.code == 0, r.out + r.err
    shown = [ln for ln in r.err.splitlines() if ln.startswith(("  baremetal:", "budget "))]
    assert len(shown) == 3 and all("skipped" not in ln for ln in shown)  # both offers' probes, with their yen, first
    at_most = Decimal(shown[-1].split("at most ¥")[1].split(" ")[0])
    lines = {ln.split()[1]: ln for ln in r.out.splitlines() if ln.startswith("probe baremetal:")}
    assert set(lines) == {"baremetal:t4", "baremetal:a10"}
    assert all(" s per step" in v for v in lines.values()), (lines, r.err)  # both measured; else why not
    per_step = {k: Decimal(v.split(": ")[2].split(" s per step")[0]) for k, v in lines.items()}
    # slept 0.1 s and 0.5 s a step; the start (python, Ray's worker) is fitted out by the two sizes
    assert Decimal("0.05") <= per_step["baremetal:t4"] <= Decimal("0.2")
    assert Decimal("0.4") <= per_step["baremetal:a10"] <= Decimal("0.7")
    spent = Decimal(r.out.split("measured, ¥")[1].split(" ")[0])
    assert "probes: 2 of 2 offers measured" in r.out and spent <= at_most <= Decimal(10)
    measured = sorted(p.name for p in (gpuplan_home / "state" / "profiles" / "measured").glob("*.yaml"))
    assert measured == ["my-job--baremetal-a10@local.yaml", "my-job--baremetal-t4@local.yaml"]
    after = cli("estimate", "--workload", "my-job.yaml", "--provider", "baremetal")
    said = after.out + after.err
    assert "measured (probe): my-job on baremetal:t4 (T4" in said and "measured (probe): my-job on baremetal:a10 (A10" in said
    assert "t4" in _pick(after.out) and "a10" not in _pick(after.out)  # measured five times as fast: the pick follows
    # nothing left: both probe clusters torn down, their hosts released, no Ray process of theirs
    state = State(paths.state_db())
    assert [c.status for c in state.clusters(include_gone=True) if c.name.startswith("probe-")] == ["gone", "gone"]
    state.close()
    assert not any((h.fake_root / "root" / ".gpuplan" / "claim").exists() for h in two_offers)
    assert tagged_pids("probe-") == []
