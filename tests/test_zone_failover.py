"""Zones first (issue 44 item 1-2): a provider asked for N machines in a region tries the
region's zones in turn; a zone's capacity refusal is a typed ZoneRefusal and the machines it did
not grant go to the next zone; what it granted is kept. A quota refusal is not retried there.
Against moto (refusals injected at RunInstances, worded as EC2 words them), the Azure fake and
the GCP fake."""

from __future__ import annotations

import pytest

from gpuplan.errors import CapacityUnavailable, QuotaExceeded
from gpuplan.fleet import refusals
from gpuplan.fleet.provider import NodeSpec, ZoneRefusal
from support.aws_moto import REGION, refuse_in_zones

TAGS = {"gpuplan-cluster": "demo", "gpuplan-owner": "tester"}
NAMES = ["demo-0", "demo-1", "demo-2", "demo-3"]
LOGIN = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBu7cm5mXsN0MhGm2oJqkT8bYb5tQ0T3Ck0lF3o9v2Jt gpuplan-demo"


def aws_spec(size="g4dn.xlarge"):
    return NodeSpec(cluster="demo", size=size, region=REGION, ssh_user="ubuntu", ssh_public_key=LOGIN, tags=TAGS,
                    ssh_cidr="203.0.113.5/32")


def zone_of(ec2, instance_id):
    [r] = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    return r["Instances"][0]["Placement"]["AvailabilityZone"]


def test_aws_zones_are_those_offering_the_type(moto_aws):
    prov = moto_aws.provider()
    zones = prov.zones(REGION, "g4dn.xlarge")
    assert zones[:2] == ["us-east-1a", "us-east-1b"] and len(zones) >= 3
    assert prov.zones(REGION, "g4dn.xlarge") == sorted(zones)
    assert moto_aws.provider({"subnet_id": "subnet-x"}).zones(REGION, "g4dn.xlarge") == []  # pinned: asked once


def test_aws_type_refused_in_two_zones_is_bought_in_the_third(moto_aws):
    prov = moto_aws.provider()
    calls = refuse_in_zones(prov, "g4dn.xlarge", {"us-east-1a": 0, "us-east-1b": 0})
    seen: list[ZoneRefusal] = []
    made = prov.create(aws_spec(), NAMES[:2], on_refusal=seen.append)
    assert [i.name for i in made] == NAMES[:2]
    ec2 = moto_aws.ec2()
    assert {zone_of(ec2, i.id) for i in made} == {"us-east-1c"}
    assert calls == {"us-east-1a": 2, "us-east-1b": 2, "us-east-1c": 2}
    assert [(r.zone, r.asked, r.granted, r.code, r.next_zone) for r in seen] == [
        ("us-east-1a", 2, 0, "InsufficientInstanceCapacity", "us-east-1b"),
        ("us-east-1b", 2, 0, "InsufficientInstanceCapacity", "us-east-1c")]
    assert refusals.render(seen[0]) == ("us-east-1a: no g4dn.xlarge capacity (InsufficientInstanceCapacity); "
                                        "trying us-east-1b")
    prov.delete(REGION, prov.list(REGION, TAGS))
    assert moto_aws.held() == {}


def test_aws_partial_grant_keeps_two_and_asks_the_next_zone_for_two(moto_aws):
    prov = moto_aws.provider({"max_workers": "1"})
    calls = refuse_in_zones(prov, "g4dn.xlarge", {"us-east-1a": 2})
    seen: list[ZoneRefusal] = []
    made = prov.create(aws_spec(), NAMES, on_refusal=seen.append)
    assert [i.name for i in made] == NAMES
    ec2 = moto_aws.ec2()
    where = {i.name: zone_of(ec2, i.id) for i in made}
    assert sorted(where.values()) == ["us-east-1a", "us-east-1a", "us-east-1b", "us-east-1b"]
    assert calls == {"us-east-1a": 4, "us-east-1b": 2}
    [r] = seen
    assert (r.asked, r.granted, r.next_zone) == (4, 2, "us-east-1b")
    assert refusals.render(r) == ("us-east-1a: 2 of 4 g4dn.xlarge granted, no capacity for 2 more "
                                  "(InsufficientInstanceCapacity); trying us-east-1b for 2")
    found = prov.list(REGION, TAGS)
    assert sorted(x.tags["gpuplan-node"] for x in found if x.kind == "instance") == NAMES  # each tagged as its node
    assert sum(1 for x in found if x.kind == "instance") == 4
    prov.delete(REGION, found)
    assert moto_aws.held() == {}


def test_aws_refused_in_every_zone_raises_with_every_refusal_and_keeps_the_grants(moto_aws):
    prov = moto_aws.provider({"max_workers": "1"})
    zones = prov.zones(REGION, "g4dn.xlarge")
    refuse_in_zones(prov, "g4dn.xlarge", {z: (1 if z == zones[0] else 0) for z in zones})
    seen: list[ZoneRefusal] = []
    with pytest.raises(CapacityUnavailable) as err:
        prov.create(aws_spec(), NAMES[:2], on_refusal=seen.append)
    assert [r.zone for r in err.value.refusals] == zones == [r.zone for r in seen]
    assert seen[-1].next_zone is None and refusals.render(seen[-1]).endswith("no zone of us-east-1 left to try")
    assert f"every zone of {REGION} refused" in str(err.value) and "1 of 2 machines were granted" in str(err.value)
    assert "\n" not in str(err.value)
    found = prov.list(REGION, TAGS)
    assert sum(1 for x in found if x.kind == "instance") == 1  # the grant stays, tagged, for teardown
    prov.delete(REGION, found)
    assert moto_aws.held() == {}


def test_aws_quota_refusal_is_not_retried_in_the_next_zone(moto_aws):
    prov = moto_aws.provider()
    calls = refuse_in_zones(prov, "g4dn.xlarge", {"us-east-1a": 0}, code="VcpuLimitExceeded")
    seen: list[ZoneRefusal] = []
    with pytest.raises(QuotaExceeded) as err:
        prov.create(aws_spec(), NAMES[:1], on_refusal=seen.append)
    assert type(err.value) is QuotaExceeded and not isinstance(err.value, CapacityUnavailable)
    assert calls == {"us-east-1a": 1} and seen == []
    assert err.value.quota == "L-DB2E81BA"
    text = str(err.value)
    assert "Running On-Demand G and VT instances" in text
    assert "request-service-quota-increase --service-code ec2 --quota-code L-DB2E81BA" in text
    assert "--region us-east-1 " in text + " " and "--region us-east-1a" not in text
    prov.delete(REGION, prov.list(REGION, TAGS))
    assert moto_aws.held() == {}


# --- Azure: zones "1", "2", "3" of the region (resource SKUs' locationInfo) ---------------------

T4_AZ = "Standard_NC4as_T4_v3"


def az_spec(count=4):
    return NodeSpec(cluster="demo", size=T4_AZ, region="westus2", ssh_user="azureuser",
                    ssh_public_key="ssh-ed25519 AAAAlogin gpuplan-demo", tags=TAGS, ssh_cidr="198.51.100.7/32")


@pytest.fixture
def arm():
    from support.azure_fake import FakeARM

    return FakeARM(limits={"cores": 100}, default_family_limit=100)


def az_vm_zones(arm):
    return {vm["tags"]["gpuplan-node"]: vm.get("zones", [None])[0]
            for vm in arm.held_of("Microsoft.Compute/virtualMachines")}


def test_azure_type_refused_in_two_zones_is_bought_in_the_third(arm):
    from support.azure_fake import make_provider

    prov = make_provider(arm)
    assert prov.zones("westus2", T4_AZ) == ["1", "2", "3"]
    arm.stockouts = {(T4_AZ.lower(), "1"): 0, (T4_AZ.lower(), "2"): 0}
    seen: list[ZoneRefusal] = []
    made = prov.create(az_spec(), NAMES[:2], on_refusal=seen.append)
    assert [i.name for i in made] == NAMES[:2]
    assert az_vm_zones(arm) == {"demo-0": "3", "demo-1": "3"}
    assert [(r.zone, r.granted, r.code, r.next_zone) for r in seen] == [
        ("1", 0, "ZonalAllocationFailed", "2"), ("2", 0, "ZonalAllocationFailed", "3")]
    assert refusals.render(seen[1]) == "2: no Standard_NC4as_T4_v3 capacity (ZonalAllocationFailed); trying 3"
    prov.delete("westus2", prov.list("westus2", TAGS))
    assert arm.held() == []


def test_azure_partial_grant_keeps_two_and_ends_with_four_and_nothing_left_after_teardown(arm):
    from support.azure_fake import make_provider

    prov = make_provider(arm)
    arm.stockouts = {(T4_AZ.lower(), "1"): 2}
    seen: list[ZoneRefusal] = []
    made = prov.create(az_spec(), NAMES, on_refusal=seen.append)
    assert [i.name for i in made] == NAMES
    zones = az_vm_zones(arm)
    assert sorted(zones.values()) == ["1", "1", "2", "2"]
    [r] = seen
    assert (r.zone, r.asked, r.granted, r.next_zone) == ("1", 4, 2, "2")
    # the refused VMs' NICs and public IPs were made before the refusal: reused in zone 2, not doubled
    assert len(arm.held_of("Microsoft.Network/networkInterfaces")) == 4
    assert len(arm.held_of("Microsoft.Network/publicIPAddresses")) == 4
    prov.delete("westus2", prov.list("westus2", TAGS))
    assert arm.held() == []


def test_azure_quota_refusal_is_not_retried_in_the_next_zone_and_names_the_quota(arm):
    from support.azure_fake import make_provider

    arm.limits = {"cores": 100, "standardNCASv3_T4Family": 4}
    prov = make_provider(arm)
    with pytest.raises(QuotaExceeded) as err:  # the preflight: 2 VMs need 8 of 4
        prov.create(az_spec(), NAMES[:2])
    assert "standardNCASv3_T4Family" in str(err.value)
    # at PUT time (another client used the quota meanwhile): ARM's 409 OperationNotAllowed
    prov.check_quota = lambda *a, **k: (0, [])
    seen: list[ZoneRefusal] = []
    with pytest.raises(QuotaExceeded) as err:
        prov.create(az_spec(), NAMES[:2], on_refusal=seen.append)
    assert seen == [] and err.value.quota == "standardNCASv3_T4Family"
    assert "az quota create --resource-name standardNCASv3_T4Family" in str(err.value)
    assert {z for z in az_vm_zones(arm).values()} == {"1"}  # zone 2 was never asked
    prov.delete("westus2", prov.list("westus2", TAGS))
    assert arm.held() == []


# --- GCP: the region's zones that offer the machine type and its GPU ---------------------------

T4_GCP = "n1-standard-4+nvidia-tesla-t4"


@pytest.fixture
def gce():
    from support.gcp_fake import GceFake

    f = GceFake()
    f.start()
    yield f
    f.stop()
    assert f.unknown == []


def gcp_spec(region="us-central1"):
    return NodeSpec(cluster="demo", size=T4_GCP, region=region, ssh_user="ubuntu", ssh_public_key="ssh-ed25519 AAAA t",
                    tags=TAGS, ssh_cidr="198.51.100.7/32")


def gce_zones(gce):
    return sorted(z for z, _ in gce.instances)


def test_gcp_type_refused_in_two_zones_is_bought_in_the_third(gce):
    prov = gce.provider()
    assert prov.zones("us-central1", T4_GCP) == ["us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"]
    assert prov.zones("asia-northeast1", T4_GCP) == ["asia-northeast1-a", "asia-northeast1-c"]  # no T4 in -b
    gce.stockouts = {"us-central1-a": 0, "us-central1-b": 0}
    seen: list[ZoneRefusal] = []
    made = prov.create(gcp_spec(), NAMES[:2], on_refusal=seen.append)
    assert [i.name for i in made] == NAMES[:2]
    assert gce_zones(gce) == ["us-central1-c", "us-central1-c"]
    assert [(r.zone, r.granted, r.code, r.next_zone) for r in seen] == [
        ("us-central1-a", 0, "ZONE_RESOURCE_POOL_EXHAUSTED", "us-central1-b"),
        ("us-central1-b", 0, "ZONE_RESOURCE_POOL_EXHAUSTED", "us-central1-c")]
    prov.delete("us-central1", prov.list("us-central1", TAGS))
    assert gce.held() == []


def test_gcp_partial_grant_keeps_two_and_ends_with_four(gce):
    prov = gce.provider()
    gce.stockouts = {"us-central1-a": 2}
    seen: list[ZoneRefusal] = []
    made = prov.create(gcp_spec(), NAMES, on_refusal=seen.append)
    assert sorted(i.name for i in made) == NAMES
    assert gce_zones(gce) == ["us-central1-a", "us-central1-a", "us-central1-b", "us-central1-b"]
    [r] = seen
    assert (r.asked, r.granted, r.next_zone) == (4, 2, "us-central1-b")
    found = prov.list("us-central1", TAGS)
    assert sorted(x.tags["gpuplan-node"] for x in found if x.kind == "instance") == NAMES
    prov.delete("us-central1", found)
    assert gce.held() == []


def test_gcp_quota_refusal_is_not_retried_and_names_the_metric(gce):
    prov = gce.provider()
    prov.check_quota = lambda *a, **k: (0, [])  # the quota was free at the preflight, gone at the insert
    gce.quotas["us-central1"]["NVIDIA_T4_GPUS"] = 0
    seen: list[ZoneRefusal] = []
    with pytest.raises(QuotaExceeded) as err:
        prov.create(gcp_spec(), NAMES[:1], on_refusal=seen.append)
    assert seen == [] and err.value.quota == "NVIDIA_T4_GPUS"
    assert "filter metric NVIDIA_T4_GPUS in us-central1" in str(err.value)
    inserts = [p for m, p in gce.requests if m == "POST" and p.endswith("/instances")]
    assert len(inserts) == 1 and "/zones/us-central1-a/" in inserts[0]  # one insert, in one zone
    prov.delete("us-central1", prov.list("us-central1", TAGS))
    assert gce.held() == []


# --- nothing left from a refused attempt: refusals at each step of a 4-machine fleet -----------

@pytest.mark.parametrize("granted", [0, 1, 2, 3])
def test_refused_everywhere_at_each_step_of_four_leaves_only_what_the_tags_find(granted, moto_aws, arm, gce):
    from support.azure_fake import make_provider

    # AWS: the first zone grants `granted`, every other zone none
    prov = moto_aws.provider({"max_workers": "1"})
    zones = prov.zones(REGION, "g4dn.xlarge")
    refuse_in_zones(prov, "g4dn.xlarge", {z: granted if z == zones[0] else 0 for z in zones})
    with pytest.raises(CapacityUnavailable) as err:
        prov.create(aws_spec(), NAMES)
    assert sum(r.granted for r in err.value.refusals) == granted
    found = prov.list(REGION, TAGS)
    assert sum(1 for x in found if x.kind == "instance") == granted
    prov.delete(REGION, found)
    assert moto_aws.held() == {}

    # Azure: half-made VMs leave NICs and public IPs: all tagged, all found, all removed
    az = make_provider(arm)
    arm.stockouts = {(T4_AZ.lower(), "1"): granted, (T4_AZ.lower(), "2"): 0, (T4_AZ.lower(), "3"): 0}
    with pytest.raises(CapacityUnavailable):
        az.create(az_spec(), NAMES)
    found = az.list("westus2", TAGS)
    assert sum(1 for x in found if x.kind == "instance") == granted
    az.delete("westus2", found)
    assert arm.held() == []

    # GCP: a refused insert leaves no instance and no disk
    gcp = gce.provider()
    gce.stockouts = {"us-central1-a": granted, "us-central1-b": 0, "us-central1-c": 0, "us-central1-f": 0}
    with pytest.raises(CapacityUnavailable):
        gcp.create(gcp_spec(), NAMES)
    assert len(gce.instances) == granted
    found = gcp.list("us-central1", TAGS)
    gcp.delete("us-central1", found)
    assert gce.held() == []
