"""The bare-metal provider against real sshd hosts on loopback: claims are files on the hosts."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
import yaml

from gpuplan.errors import ProviderError, QuotaExceeded, UsageError
from gpuplan.fleet import lifecycle
from gpuplan.fleet.provider import TAG_CLUSTER, TAG_NODE, TAG_OWNER, NodeSpec
from gpuplan.hosts import playbook, remote
from gpuplan.providers.baremetal import BaremetalProvider
from gpuplan.store.state import State
from support.sshd import start_hosts, stop_hosts

pytestmark = pytest.mark.sshd


@pytest.fixture
def hosts(tmp_path):
    hs = start_hosts(5, tmp_path)
    yield hs
    stop_hosts(hs)


def write_inventory(path, hosts, gpus=1, with_keys=True, model="Tesla T4", group="t4"):
    entries = []
    for i, h in enumerate(hosts):
        e = {"name": h.name, "address": h.host, "port": h.port, "private_address": f"192.168.0.{i + 1}",
             "gpus": {"model": model, "count": gpus}, "group": group}
        if with_keys:
            e["host_key"] = h.host_public_key
        entries.append(e)
    path.write_text(yaml.safe_dump({"defaults": {"user": "root", "key": str(hosts[0].client_key_path)}, "hosts": entries}))
    return path


@pytest.fixture
def provider(tmp_path, hosts):
    return BaremetalProvider({"inventory": str(write_inventory(tmp_path / "inventory.yaml", hosts))})


def claim_of(h):
    f = h.fake_root / "root/.gpuplan/claim"
    return json.loads(f.read_text()) if f.exists() else None


def spec(cluster, key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDx0fXeaGZ1m6Pi1B6MvVlFrO6k4Ch4qsrmMuTzpPZNT gpuplan-x"):
    return NodeSpec(cluster=cluster, size="t4", region="local", ssh_user="root", ssh_public_key=key,
                    tags={TAG_CLUSTER: cluster, TAG_OWNER: "tester"})


def test_provision_list_bootstrap_and_teardown_through_the_lifecycle(gpuplan_home, hosts, provider, tmp_path):
    state = State(tmp_path / "state.db")
    req = lifecycle.ProvisionRequest(provider="baremetal", size="t4", region="local", count=4, name="bm",
                                     gpus_per_node=1, price_jpy_per_hour=Decimal(0))
    lifecycle.provision(state, provider, req)

    nodes = state.nodes("bm")
    assert [n.status for n in nodes] == ["running"] * 4
    claimed = [h for h in hosts if claim_of(h)]
    assert len(claimed) == 4 and claim_of(hosts[4]) is None
    by_host = {h.name: h for h in hosts}
    for n in nodes:
        h = by_host[n.provider_id]
        assert (n.public_ip, n.ssh_port, n.private_ip) == (h.host, h.port, f"192.168.0.{hosts.index(h) + 1}")
        assert state.host_key(h.host, h.port) == h.host_public_key  # pinned from the inventory, not a generated key
        tags = claim_of(h)["tags"]
        assert tags[TAG_CLUSTER] == "bm" and tags[TAG_NODE] == n.name and TAG_OWNER in tags
    login_key = state.ssh_key("bm")[1]
    for h in claimed:
        assert login_key in (h.fake_root / "root/.ssh/authorized_keys").read_text().splitlines()

    found = provider.list("local", {TAG_CLUSTER: "bm"})
    assert sorted((r.kind, r.name) for r in found if r.kind == "instance") == [("instance", f"bm-{i}") for i in range(4)]
    assert sum(r.kind == "host-claim" for r in found) == 4
    q = provider.quota("local", "t4")[0]
    assert (q.name, q.limit, q.used, q.free, q.unit) == ("hosts:t4", 5, 4, 1, "hosts")

    # bootstrap logs in with the cluster's own key, which create() installed
    report = playbook.bootstrap_cluster(state, "bm", ["cudnn"], {"root": "$GPUPLAN_FAKE_ROOT"})
    assert report.ok and all(h.installed("cudnn9-cuda-12") for h in claimed)
    assert not hosts[4].installed("cudnn9-cuda-12")
    (claimed[0].fake_root / "root/.gpuplan/hostfile").write_text("bm-0 slots=1\n")

    lifecycle.teardown(state, provider, "bm")
    for h in hosts:
        assert not (h.fake_root / "root/.gpuplan").exists()
        keys = h.fake_root / "root/.ssh/authorized_keys"
        assert not keys.exists() or login_key not in keys.read_text()
    assert provider.list("local", {TAG_CLUSTER: "bm"}) == []
    assert state.cluster("bm").status == "gone"
    assert provider.quota("local", "t4")[0].used == 0
    state.close()


def test_teardown_keeps_the_software_bootstrap_installed_and_removes_the_clusters_files(gpuplan_home, hosts, provider,
                                                                                        tmp_path):
    """Issue 41: a release ran `rm -rf ~/.gpuplan`, deleting Ray's venv (~380 MB) that
    docs/inventory.md says stays, so every launch installed it again."""
    state = State(tmp_path / "state.db")
    req = lifecycle.ProvisionRequest(provider="baremetal", size="t4", region="local", count=2, name="keep",
                                     gpus_per_node=1, price_jpy_per_hour=Decimal(0))
    lifecycle.provision(state, provider, req)
    claimed = [h for h in hosts if claim_of(h)]
    assert len(claimed) == 2
    for h in claimed:
        g = h.fake_root / "root/.gpuplan"
        for f in ("ray-2.60.0/bin/python", "bench/venv/bin/python", "jobs/keep-1/events.jsonl", "code/abc/ray_driver.py",
                  "idle/log", "hostfile", "torchrun_hosts"):
            (g / f).parent.mkdir(parents=True, exist_ok=True)
            (g / f).write_text("x\n")
    lifecycle.teardown(state, provider, "keep")
    for h in claimed:
        g = h.fake_root / "root/.gpuplan"
        assert sorted(p.name for p in g.iterdir()) == ["bench", "ray-2.60.0"]
        assert (g / "ray-2.60.0/bin/python").read_text() == "x\n" and (g / "bench/venv/bin/python").is_file()
        assert claim_of(h) is None
    assert provider.list("local", {TAG_CLUSTER: "keep"}) == [] and provider.quota("local", "t4")[0].used == 0
    # the host is free again and the next cluster finds Ray where it was
    lifecycle.provision(state, provider, lifecycle.ProvisionRequest(
        provider="baremetal", size="t4", region="local", count=5, name="next", gpus_per_node=1,
        price_jpy_per_hour=Decimal(0)))
    assert all(claim_of(h)["tags"][TAG_CLUSTER] == "next" for h in hosts)
    assert all((h.fake_root / "root/.gpuplan/ray-2.60.0/bin/python").is_file() for h in claimed)
    state.close()


def test_quota_exceeded_names_the_quota_and_claims_nothing(gpuplan_home, hosts, provider, tmp_path):
    state = State(tmp_path / "state.db")
    req = lifecycle.ProvisionRequest("baremetal", "t4", "local", 6, "big", 1, Decimal(0))
    with pytest.raises(QuotaExceeded) as info:
        lifecycle.provision(state, provider, req)
    msg = str(info.value)
    assert "6x t4 needs 6 hosts of quota 'hosts:t4'" in msg and "only 5 are free" in msg
    assert "add hosts to the inventory" in msg
    assert all(claim_of(h) is None for h in hosts)
    state.close()


def test_another_clusters_hosts_are_neither_claimed_nor_released(hosts, provider):
    provider.create(spec("a"), [f"a-{i}" for i in range(4)])
    with pytest.raises(QuotaExceeded, match="2x t4 needs 2 hosts of quota 'hosts:t4'.*only 1 are free"):
        provider.create(spec("b"), ["b-0", "b-1"])
    # b's failed create claimed nothing; a's claims are intact
    assert sorted(claim_of(h)["tags"][TAG_CLUSTER] for h in hosts if claim_of(h)) == ["a"] * 4
    # a forged delete for b naming a's host leaves a's claim alone
    from gpuplan.fleet.provider import Resource

    a_host = next(h for h in hosts if claim_of(h))
    provider.delete("local", [Resource("host-claim", f"{a_host.name}:claim", "local", {TAG_CLUSTER: "b"}, "b-0")])
    assert claim_of(a_host)["tags"][TAG_CLUSTER] == "a"


def test_unknown_size_and_bad_inventory_are_usage_errors(tmp_path, hosts, provider):
    with pytest.raises(UsageError, match="no host in .* matches size 'a100'; use a group or GPU model: Tesla T4, t4, or 'any'"):
        provider.quota("local", "a100")
    assert len(provider.matching("tesla-t4")) == 5 and len(provider.matching("any")) == 5
    with pytest.raises(UsageError, match="inventory .*nope.yaml not found"):
        BaremetalProvider({"inventory": str(tmp_path / "nope.yaml")}).quota("local", "t4")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"hosts": [{"name": "x", "address": "127.0.0.1"}]}))
    with pytest.raises(UsageError, match=r"bad.yaml: hosts\[0\]: gpus is missing"):  # from the inventory's schema
        BaremetalProvider({"inventory": str(bad)}).inventory()


def test_host_without_a_key_needs_its_fingerprint_accepted(tmp_path, hosts):
    inv = write_inventory(tmp_path / "inv.yaml", hosts[:1], with_keys=False)
    fp = remote.fingerprint(hosts[0].host_public_key)
    with pytest.raises(UsageError) as info:
        BaremetalProvider({"inventory": str(inv)}).create(spec("k"), ["k-0"])
    assert f"it offers {fp}" in str(info.value) and f"--accept-host-key {fp}" in str(info.value)
    assert claim_of(hosts[0]) is None
    made = BaremetalProvider({"inventory": str(inv), "accept_host_keys": f"SHA256:other,{fp}"}).create(spec("k"), ["k-0"])
    assert made[0].extra["host_key"].split()[:2] == hosts[0].host_public_key.split()[:2]
    assert claim_of(hosts[0])["tags"][TAG_NODE] == "k-0"
    # pins handed in from the state work too
    pinned = BaremetalProvider({"inventory": str(inv)})
    pinned.use_known_hosts({f"127.0.0.1:{hosts[0].port}": hosts[0].host_public_key})
    assert [r.name for r in pinned.list("local", {TAG_CLUSTER: "k"}) if r.kind == "instance"] == ["k-0"]


def test_gpu_count_mismatch_fails_and_the_partial_claims_can_be_removed(tmp_path, hosts):
    inv = write_inventory(tmp_path / "inv.yaml", hosts[:3], gpus=4)
    (hosts[1].fake_root / "proc/modules").write_text("nvidia 1 0 - Live 0x0\n")  # driver up, 1 GPU seen
    p = BaremetalProvider({"inventory": str(inv)})
    with pytest.raises(ProviderError, match="nvidia-smi sees 1 GPU\\(s\\) but the inventory says 4"):
        p.create(spec("g"), ["g-0", "g-1", "g-2"])
    left = p.list("local", {TAG_CLUSTER: "g"})
    assert len([r for r in left if r.kind == "instance"]) == 3  # all three claims were written, tagged
    p.delete("local", left)
    assert p.list("local", {TAG_CLUSTER: "g"}) == [] and all(claim_of(h) is None for h in hosts)


def test_unreachable_host_counts_as_used_and_is_named_by_list(tmp_path, hosts, provider):
    hosts[2].stop()
    q = provider.quota("local", "t4")[0]
    assert (q.limit, q.used) == (5, 1) and hosts[2].name in q.description
    # a listing goes on without it and names it: a teardown keeps what it holds, a sweep says so
    assert provider.list("local", {TAG_CLUSTER: "x"}) == []
    assert list(provider.unreached) == [hosts[2].name]
    assert provider.unreached[hosts[2].name].startswith(f"bare-metal host {hosts[2].name} (127.0.0.1): ")


def test_images_are_refused_with_advice(provider):
    with pytest.raises(UsageError, match="cannot be captured as images"):
        provider.capture_image("local", "h0", "img", {})


def test_offer_from_the_inventory_for_provision(provider):
    o = provider.offer("Tesla T4")
    assert (o.provider, o.name, o.region, o.gpu, o.gpu_count, o.kind) == ("baremetal", "Tesla T4", "local", "Tesla T4", 1, "owned")
    assert o.price_jpy_per_hour is None and "5 owned host(s)" in o.notes


def test_provision_status_teardown_through_the_cli(cli, gpuplan_home, hosts, tmp_path):
    inventory = write_inventory(tmp_path / "inventory.yaml", hosts)
    (gpuplan_home / "config").mkdir(parents=True)
    (gpuplan_home / "config" / "config.yaml").write_text(yaml.safe_dump({"providers": {"baremetal": {"inventory": str(inventory)}}}))
    r = cli("provision", "--yes", "baremetal:t4", "x2", "--name", "bm", "--no-bootstrap")
    assert r.code == 0, r.err
    assert sum(claim_of(h) is not None for h in hosts) == 2
    r = cli("status", "bm", "--format", "json")
    [c] = json.loads(r.out)
    assert [n["status"] for n in c["nodes"]] == ["running", "running"]
    assert {f"{n['public_ip']}:{n['ssh_port']}" for n in c["nodes"]} <= {f"{h.host}:{h.port}" for h in hosts}
    assert cli("teardown", "--yes", "bm").code == 0
    assert all(claim_of(h) is None for h in hosts)


def test_a_host_that_is_down_keeps_its_claim_and_does_not_block_the_rest(cli, gpuplan_home, hosts, tmp_path):
    from gpuplan import paths
    from gpuplan.store.state import State

    inventory = write_inventory(tmp_path / "inventory.yaml", hosts)
    (gpuplan_home / "config").mkdir(parents=True)
    (gpuplan_home / "config" / "config.yaml").write_text(yaml.safe_dump({"providers": {"baremetal": {"inventory": str(inventory)}}}))
    assert cli("provision", "--yes", "baremetal:t4", "x2", "--name", "bm", "--no-bootstrap").code == 0
    claimed = [h for h in hosts if claim_of(h) is not None]
    down, up = sorted(claimed, key=lambda h: claim_of(h)["tags"][TAG_NODE])
    down.stop()
    r = cli("teardown", "--yes", "bm")
    # the host that answered is released; the one that did not keeps its claim, named, exit 3
    assert r.code == 3, r.err
    assert "bm-0 was not reached (bare-metal host" in r.err and "its claim stays" in r.err
    assert "run `gpuplan teardown bm` again once it is back" in r.err
    assert claim_of(up) is None
    state = State(paths.state_db())
    assert state.cluster("bm").status == "tearing-down"
    assert {n.name: n.status for n in state.nodes("bm")} == {"bm-0": "lost"}  # bm-1's row is deleted
    state.close()
    down.start()
    assert claim_of(down)["tags"][TAG_NODE] == "bm-0"
    r = cli("teardown", "--yes", "bm")
    assert r.code == 0, r.err
    assert claim_of(down) is None
    state = State(paths.state_db())
    assert state.cluster("bm").status == "gone"
    state.close()
