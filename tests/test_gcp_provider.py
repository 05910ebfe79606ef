"""What the GCP provider sends for Spot and TTL, read from the instance insert bodies the loopback
Compute fake received through the real google-cloud-compute client (tests/support/gcp_fake.py).

Compute Engine documents: a Spot VM is `scheduling.provisioningModel: SPOT` with an
instanceTerminationAction (STOP or DELETE) for when it is preempted ("Create and use Spot VMs");
a time limit is `scheduling.maxRunDuration` after which the instanceTerminationAction runs, 30 s
to 120 days ("Limit the run time of a VM"); a preemptible machine's only onHostMaintenance is
TERMINATE (Scheduling.OnHostMaintenance)."""

from __future__ import annotations

import pytest

from gpuplan.errors import UsageError
from gpuplan.fleet.provider import NodeSpec
from gpuplan.fleet.tags import TAG_CLUSTER, TAG_OWNER
from support.gcp_fake import GceFake

T4 = "n1-standard-4+nvidia-tesla-t4"


@pytest.fixture
def fake():
    f = GceFake()
    f.start()
    yield f
    f.stop()
    assert f.unknown == []


def spec(cluster: str, size: str = T4, **kw) -> NodeSpec:
    return NodeSpec(cluster=cluster, size=size, region="asia-northeast1", ssh_user="ubuntu",
                    ssh_public_key="ssh-ed25519 AAAA test", tags={TAG_CLUSTER: cluster, TAG_OWNER: "tester"},
                    ssh_cidr="198.51.100.7/32", **kw)


def sent_scheduling(fake: GceFake) -> list[dict]:
    return [body["scheduling"] for body in fake.insert_bodies]


def test_a_spot_machine_is_provisioning_model_spot_deleted_when_reclaimed(fake):
    fake.quotas["asia-northeast1"]["PREEMPTIBLE_CPUS"] = 8
    fake.provider().create(spec("spot", spot=True), ["spot-0", "spot-1"])
    for scheduling in sent_scheduling(fake):
        assert scheduling["provisioningModel"] == "SPOT"
        assert scheduling["instanceTerminationAction"] == "DELETE"
        assert scheduling["automaticRestart"] is False
        assert scheduling["onHostMaintenance"] == "TERMINATE"
        assert "maxRunDuration" not in scheduling  # no TTL asked
    assert len(fake.insert_bodies) == 2
    # the Spot vCPUs counted against the PREEMPTIBLE_ tier the project has
    assert fake._usage("asia-northeast1")["PREEMPTIBLE_CPUS"] == 8


def test_a_spot_machine_with_a_ttl_also_carries_max_run_duration(fake):
    fake.provider().create(spec("spotttl", spot=True, ttl_s=4 * 3600), ["spotttl-0"])
    [scheduling] = sent_scheduling(fake)
    assert scheduling["provisioningModel"] == "SPOT"
    assert scheduling["instanceTerminationAction"] == "DELETE"
    assert scheduling["maxRunDuration"] == {"seconds": str(4 * 3600)}


def test_an_on_demand_machine_carries_no_spot_fields(fake):
    fake.provider().create(spec("std"), ["std-0"])
    [scheduling] = sent_scheduling(fake)
    assert scheduling.get("provisioningModel", "STANDARD") == "STANDARD"
    assert "instanceTerminationAction" not in scheduling and "maxRunDuration" not in scheduling
    assert scheduling["automaticRestart"] is True and scheduling["onHostMaintenance"] == "TERMINATE"  # a GPU


def test_an_on_demand_machine_with_a_ttl_is_deleted_at_expiry_and_is_not_spot(fake):
    fake.provider().create(spec("ttl", ttl_s=90 * 60), ["ttl-0"])
    [scheduling] = sent_scheduling(fake)
    assert scheduling.get("provisioningModel", "STANDARD") == "STANDARD"
    assert scheduling["maxRunDuration"] == {"seconds": "5400"}
    assert scheduling["instanceTerminationAction"] == "DELETE"


def test_spot_without_a_gpu_is_still_terminated_on_host_maintenance(fake):
    fake.provider().create(spec("cpu", size="n1-standard-4", spot=True), ["cpu-0"])
    [scheduling] = sent_scheduling(fake)
    assert scheduling["provisioningModel"] == "SPOT" and scheduling["onHostMaintenance"] == "TERMINATE"


@pytest.mark.parametrize("ttl_s", [10, 121 * 24 * 3600])
def test_a_ttl_gce_cannot_keep_is_refused_before_anything_is_made(fake, ttl_s):
    with pytest.raises(UsageError) as refused:
        fake.provider().create(spec("bad", ttl_s=ttl_s), ["bad-0"])
    assert "between 30 s and 120 days" in str(refused.value) and "\n" not in str(refused.value)
    assert fake.insert_bodies == [] and fake.held() == []
