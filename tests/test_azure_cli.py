"""End to end through the CLI: provision / status / teardown on Azure, against the in-process fake ARM."""

from __future__ import annotations

import json

import pytest
import yaml

from gpuplan.fleet import provider as registry
from support.azure_fake import FakeARM, make_provider

OWNER = "e2e-owner"
# A test-only offer, so the test does not depend on which Azure rows the shipped snapshot has.
PRICES = {"offers": [{
    "provider": "azure", "name": "Standard_NC4as_T4_v3", "aliases": ["e2e-t4"], "region": "westus2",
    "gpu": "T4", "gpu_count": 1, "vcpus": 4, "ram_gib": 28, "price": 100, "currency": "JPY", "price_unit": "hour",
}]}


@pytest.fixture
def fake(gpuplan_home, monkeypatch):
    f = FakeARM()
    cfg = gpuplan_home / "config"
    cfg.mkdir(parents=True)
    (cfg / "config.yaml").write_text(yaml.safe_dump({"owner": OWNER, "providers": {"azure": {"ssh_source": "198.51.100.7"}}}))
    (cfg / "prices.yaml").write_text(yaml.safe_dump(PRICES))
    registry.override("azure", lambda conf: make_provider(f, conf))
    yield f
    registry.override("azure", None)


def test_provision_status_teardown(fake, cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    r = cli("provision", "--yes", "azure:e2e-t4", "x4", "--name", "e2e", "--no-bootstrap", "--ttl", "4h")
    assert r.code == 0, r.err

    vms = fake.held_of("Microsoft.Compute/virtualMachines")
    assert sorted(v["name"] for v in vms) == ["e2e-0", "e2e-1", "e2e-2", "e2e-3"]
    assert all(v["tags"]["gpuplan-owner"] == OWNER and v["tags"]["gpuplan-cluster"] == "e2e" for v in vms)
    keys = {yaml.safe_load(ud)["ssh_keys"]["ed25519_public"] for ud in fake.custom_data.values()}
    assert len(keys) == 4  # each VM booted with its own host key, generated and pinned locally
    assert len(fake.held_of("Microsoft.DevTestLab/schedules")) == 4
    rule = fake.held_of("Microsoft.Network/networkSecurityGroups")[0]["properties"]["securityRules"][0]
    assert rule["properties"]["sourceAddressPrefix"] == "198.51.100.7/32"

    addresses = {p["properties"]["ipAddress"] for p in fake.held_of("Microsoft.Network/publicIPAddresses")}
    r = cli("status", "e2e")
    assert r.code == 0, r.err
    assert all(a in r.out for a in addresses) and r.out.count("running") == 4
    r = cli("status", "e2e", "--format", "json")
    [cluster] = json.loads(r.out)
    assert {n["public_ip"] for n in cluster["nodes"]} == addresses
    assert {n["id"] for n in cluster["nodes"]} == {v["id"] for v in vms}

    r = cli("teardown", "--yes", "e2e")
    assert r.code == 0, r.err
    assert fake.held() == []


def test_failed_create_is_rolled_back(fake, cli):
    fake.fail_vm_put_at = 3  # zone 1 grants two, then no capacity; zones 2 and 3 have none (issue 44)
    fake.stockouts = {("standard_nc4as_t4_v3", "2"): 0, ("standard_nc4as_t4_v3", "3"): 0}
    r = cli("provision", "--yes", "azure:e2e-t4", "x4", "--name", "e2e", "--no-bootstrap")
    assert r.code == 3
    assert "AllocationFailed" in r.err and "Traceback" not in r.err
    assert "every zone of westus2 refused: 1, 2, 3" in r.err
    assert fake.held() == []


def test_a_size_refused_in_two_zones_is_bought_in_the_third_each_refusal_one_line(fake, cli):
    fake.stockouts = {("standard_nc4as_t4_v3", "1"): 0, ("standard_nc4as_t4_v3", "2"): 0}
    r = cli("provision", "--yes", "azure:e2e-t4", "x2", "--name", "e2e", "--no-bootstrap")
    assert r.code == 0, r.err
    assert "1: no Standard_NC4as_T4_v3 capacity (ZonalAllocationFailed); trying 2" in r.err
    assert "2: no Standard_NC4as_T4_v3 capacity (ZonalAllocationFailed); trying 3" in r.err
    assert {vm.get("zones", [None])[0] for vm in fake.held_of("Microsoft.Compute/virtualMachines")} == {"3"}
    r = cli("teardown", "--yes", "e2e")
    assert r.code == 0, r.err
    assert fake.held() == []


def test_quota_exceeded_is_one_line_exit_2_and_creates_nothing(fake, cli):
    r = cli("provision", "--yes", "azure:e2e-t4", "x6", "--name", "e2e", "--no-bootstrap")
    assert r.code == 2
    assert "standardNCASv3_T4Family" in r.err and "24" in r.err and "Usage + quotas" in r.err
    assert "Traceback" not in r.err
    assert fake.held() == []


def test_sweep_removes_an_orphan_cluster_and_keeps_its_image_until_asked(fake, cli):
    from gpuplan.fleet.provider import NodeSpec

    prov = make_provider(fake)
    spec = NodeSpec(cluster="orphan", size="Standard_NC4as_T4_v3", region="westus2", ssh_user="azureuser",
                    ssh_public_key="ssh-ed25519 AAAA", tags={"gpuplan-cluster": "orphan", "gpuplan-owner": OWNER},
                    ssh_cidr="198.51.100.7/32")
    [vm] = prov.create(spec, ["orphan-0"])
    image = prov.capture_image("westus2", vm.id, "lost-image", {"gpuplan-owner": OWNER})

    r = cli("teardown", "--yes", "--sweep", "--provider", "azure")
    assert r.code == 0, r.err
    assert "deleted 7 stray resources" in r.out  # group, VM, disk, NIC, IP, NSG, VNet; not the image
    assert fake.held() == [image.id.rsplit("/providers/", 1)[0], image.id]

    r = cli("teardown", "--yes", "--sweep", "--images", "--provider", "azure")
    assert r.code == 0, r.err
    assert fake.held() == []
