"""Where SSH may come from: a detected source is one address, never a range, and a resumed
provision leaves the security group admitting exactly what this run asked for."""

from __future__ import annotations

import pytest
import yaml

from support import checkip as checkip_server
from support.aws_moto import REGION
from support.checkip import ssh_ranges


@pytest.fixture
def aws(moto_aws, gpuplan_home):
    cfg = gpuplan_home / "config"
    cfg.mkdir(parents=True)
    (cfg / "config.yaml").write_text(yaml.safe_dump({"providers": {"aws": {
        "ami": moto_aws.ami, "quota_vcpus": "64", "poll_s": "0.01"}}}))
    return moto_aws


@pytest.fixture
def checkip(monkeypatch):
    """A stand-in for checkip.amazonaws.com; set `answer[0]` to what it says."""
    answer = ["203.0.113.77\n"]
    with checkip_server.serve(answer, monkeypatch):
        yield answer


@pytest.mark.parametrize("answer", ["0.0.0.0/0", "203.0.113.0/24", "0.0.0.0", "203.0.113.77 198.51.100.1",
                                    "<html>203.0.113.77</html>"])
def test_a_detected_source_that_is_not_one_address_is_refused(aws, cli, checkip, answer):
    checkip[0] = answer
    r = cli("provision", "--yes", "aws:g4dn.xlarge", "x1", "--name", "mine", "--no-bootstrap")
    assert r.code == 2, r.err
    assert len(r.err.strip().splitlines()) == 1 and "cannot find your public address" in r.err
    assert aws.held() == {}


def test_a_detected_address_becomes_a_host_route(aws, cli, checkip):
    r = cli("provision", "--yes", "aws:g4dn.xlarge", "x1", "--name", "mine", "--no-bootstrap")
    assert r.code == 0, r.err
    assert ssh_ranges(aws, "mine") == ["203.0.113.77/32"]
    assert cli("teardown", "--yes", "mine").code == 0


def test_a_resumed_provision_admits_exactly_what_it_asks(aws, cli):
    """A provision killed after making the group open to everyone, then rerun with a /32:
    the group ends with the /32 alone."""
    from gpuplan.fleet import lifecycle
    from gpuplan.fleet.provider import NodeSpec
    from gpuplan.fleet.tags import TAG_CREATED
    from gpuplan.store.state import State

    identity = lifecycle.cluster_identity(State.open_default(), "mine")
    prov = lifecycle.get_provider("aws")
    prov._security_group(NodeSpec(cluster="mine", size="g4dn.xlarge", region=REGION, ssh_user="ubuntu",
                                  ssh_public_key="", tags={**identity, TAG_CREATED: "1"}, ssh_cidr="0.0.0.0/0"))
    assert ssh_ranges(aws, "mine") == ["0.0.0.0/0"]
    r = cli("provision", "--yes", "aws:g4dn.xlarge", "x1", "--name", "mine", "--no-bootstrap",
            "--ssh-from", "198.51.100.7/32")
    assert r.code == 0, r.err
    assert ssh_ranges(aws, "mine") == ["198.51.100.7/32"]
    assert cli("teardown", "--yes", "mine").code == 0
    assert aws.held() == {}


def test_a_resumed_azure_provision_replaces_the_nsg_rule(gpuplan_home, cli):
    from gpuplan.fleet import lifecycle
    from gpuplan.fleet import provider as registry
    from gpuplan.fleet.provider import NodeSpec
    from gpuplan.fleet.tags import TAG_CREATED
    from gpuplan.providers.azure import cluster_group
    from gpuplan.store.state import State
    from support.azure_fake import FakeARM, make_provider

    fake = FakeARM()
    cfg = gpuplan_home / "config"
    cfg.mkdir(parents=True)
    (cfg / "prices.yaml").write_text(yaml.safe_dump({"offers": [{
        "provider": "azure", "name": "Standard_NC4as_T4_v3", "aliases": ["safe-t4"], "region": "westus2", "gpu": "T4",
        "gpu_count": 1, "vcpus": 4, "ram_gib": 28, "price": 100, "currency": "JPY", "price_unit": "hour"}]}))
    registry.override("azure", lambda conf: make_provider(fake, conf))
    try:
        from azure.mgmt.resource.resources.models import ResourceGroup

        identity = lifecycle.cluster_identity(State.open_default(), "az")
        prov = make_provider(fake)
        spec = NodeSpec(cluster="az", size="Standard_NC4as_T4_v3", region="westus2", ssh_user="azureuser",
                        ssh_public_key="", tags={**identity, TAG_CREATED: "1"}, ssh_cidr="0.0.0.0/0")
        group = cluster_group(spec.tags)
        prov._sdk()[0].resource_groups.create_or_update(group, ResourceGroup(location="westus2", tags=dict(spec.tags)))
        prov._network(spec, group)  # what a killed run with --ssh-from 0.0.0.0/0 left
        r = cli("provision", "--yes", "azure:safe-t4", "x1", "--name", "az", "--no-bootstrap",
                "--ssh-from", "198.51.100.7")
        assert r.code == 0, r.err
        [nsg] = fake.held_of("Microsoft.Network/networkSecurityGroups")
        assert [rule["properties"]["sourceAddressPrefix"] for rule in nsg["properties"]["securityRules"]] == [
            "198.51.100.7/32"]
        assert cli("teardown", "--yes", "az").code == 0
        assert fake.held() == []
    finally:
        registry.override("azure", None)
