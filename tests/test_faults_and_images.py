"""Faults injected on purpose, and the image flow, against the clouds' stand-ins.

Kills use gpuplan's failpoints (GPUPLAN_FAILPOINT=after:<op>): the CLI process SIGKILLs itself
right after a cloud call returned and before its outcome reached the journal, the worst moment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import yaml

from gpuplan.fleet import provider as registry
from gpuplan.hosts import remote
from gpuplan.store.state import State
from support.azure_fake import FakeARM, make_provider

OWNER = "fault-owner"


@pytest.fixture
def aws(moto_aws, gpuplan_home, monkeypatch):  # noqa: F811
    monkeypatch.setenv("COLUMNS", "250")
    cfg = gpuplan_home / "config"
    cfg.mkdir(parents=True)
    (cfg / "config.yaml").write_text(yaml.safe_dump({"owner": OWNER, "providers": {"aws": {
        "ami": moto_aws.ami, "quota_vcpus": "64", "ssh_cidr": "198.51.100.7", "poll_s": "0.01"}}}))
    yield moto_aws


def gpuplan_killed_at(point: str, *args: str) -> int:
    env = {**os.environ, "GPUPLAN_FAILPOINT": point}
    r = subprocess.run([sys.executable, "-m", "gpuplan", *args], env=env, capture_output=True, text=True, timeout=120)
    return r.returncode


def gpuplan(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GPUPLAN_FAILPOINT"}
    return subprocess.run([sys.executable, "-m", "gpuplan", *args], env=env, capture_output=True, text=True, timeout=120)


def journal(gpuplan_home, cluster):
    s = State(gpuplan_home / "state" / "state.db")
    try:
        return [(j.op, j.phase) for j in s.journal(cluster)], s.cluster(cluster), s.nodes(cluster, include_deleted=True)
    finally:
        s.close()


def test_kill_9_between_create_and_its_outcome_then_teardown_leaves_nothing(aws, gpuplan_home):
    code = gpuplan_killed_at("after:create-nodes", "provision", "--yes", "aws:g4dn.xlarge", "x4", "--name", "k9",
                             "--no-bootstrap")
    assert code == -signal.SIGKILL
    held = aws.held()
    assert len(held["instances"]) == 4  # the machines exist and bill...
    ops, cluster, nodes = journal(gpuplan_home, "k9")
    assert ops == [("create-nodes", "intent")]  # ...but their outcome never reached the state
    assert cluster.status == "provisioning"
    assert [n.provider_id for n in nodes] == [None] * 4

    r = gpuplan("teardown", "--yes", "k9")
    assert r.returncode == 0, r.stderr
    assert aws.held() == {}
    ops, cluster, nodes = journal(gpuplan_home, "k9")
    assert ops[0] == ("create-nodes", "intent")
    assert ("delete-instances", "ok") in ops and ops[-1] == ("verify-gone", "ok")
    assert cluster.status == "gone" and {n.status for n in nodes} == {"deleted"}


def test_teardown_killed_half_way_is_finished_by_the_next_teardown(aws, gpuplan_home):
    r = gpuplan("provision", "--yes", "aws:g4dn.xlarge", "x4", "--name", "half", "--no-bootstrap")
    assert r.returncode == 0, r.stderr
    assert gpuplan_killed_at("after:delete-instances", "teardown", "--yes", "half") == -signal.SIGKILL
    held = aws.held()
    assert "instances" not in held  # the meter stopped first
    # named gpuplan-<cluster>-<installation> (unique per account)
    [group], [key] = held["security-groups"], held["key-pairs"]
    assert group.startswith("gpuplan-half-") and key == group
    ops, cluster, _ = journal(gpuplan_home, "half")
    assert ops[-1] == ("delete-instances", "intent") and cluster.status == "tearing-down"

    r = gpuplan("teardown", "--yes", "half")
    assert r.returncode == 0, r.stderr
    assert aws.held() == {}
    assert journal(gpuplan_home, "half")[1].status == "gone"


@pytest.fixture
def no_ssh(monkeypatch):
    """The builder's bootstrap runs against real sshd in its own tests; here the machines are
    emulated, so the SSH side is recorded instead of performed."""
    calls = []
    monkeypatch.setattr("gpuplan.hosts.playbook.bootstrap_cluster",
                        lambda state, cluster, playbooks, params, progress=None, **kw: calls.append(("bootstrap", cluster)))
    monkeypatch.setattr(remote, "cluster_hosts", lambda state, cluster, *a: [remote.Host(cluster + "-0", "192.0.2.1")])
    monkeypatch.setattr(remote, "run", lambda host, cmd, **kw: calls.append(("run", cmd)) or remote.Result(0, "", "", 0.0))
    return calls


def test_image_flow_on_aws_build_provision_four_teardown_images(aws, cli, no_ssh):
    r = cli("image", "build", "--yes", "aws:g4dn.xlarge", "--name", "t4img")
    assert r.code == 0, r.err
    assert no_ssh == [("bootstrap", "t4img-b")]
    ec2 = aws.ec2()
    [ami] = [i for i in ec2.describe_images(Owners=["self"])["Images"] if i["ImageId"] != aws.ami]
    assert {t["Key"]: t["Value"] for t in ami["Tags"]}["gpuplan-image"] == "t4img"
    assert "instances" not in aws.held()  # the builder is gone

    r = cli("provision", "--yes", "aws:g4dn.xlarge", "x4", "--name", "fromimg", "--image", "t4img")
    assert r.code == 0, r.err
    assert no_ssh == [("bootstrap", "t4img-b")]  # no bootstrap when starting from an image
    running = [i for res in ec2.describe_instances()["Reservations"] for i in res["Instances"]
               if i["State"]["Name"] != "terminated"]
    assert [i["ImageId"] for i in running] == [ami["ImageId"]] * 4

    assert cli("teardown", "--yes", "fromimg").code == 0
    assert set(aws.held()) == {"images", "snapshots"}  # a cluster teardown keeps the image
    r = cli("teardown", "--yes", "--images")
    assert r.code == 0, r.err
    assert aws.held() == {}


AZ_PRICES = {"offers": [{
    "provider": "azure", "name": "Standard_NC4as_T4_v3", "aliases": ["img-t4"], "region": "westus2",
    "gpu": "T4", "gpu_count": 1, "vcpus": 4, "ram_gib": 28, "price": 100, "currency": "JPY", "price_unit": "hour",
}]}


def test_image_flow_on_azure_build_provision_four_teardown_images(gpuplan_home, cli, no_ssh):
    fake = FakeARM()
    cfg = gpuplan_home / "config"
    cfg.mkdir(parents=True)
    (cfg / "config.yaml").write_text(yaml.safe_dump({"owner": OWNER, "providers": {"azure": {"ssh_source": "198.51.100.7"}}}))
    (cfg / "prices.yaml").write_text(yaml.safe_dump(AZ_PRICES))
    registry.override("azure", lambda conf: make_provider(fake, conf))
    try:
        r = cli("image", "build", "--yes", "azure:img-t4", "--name", "azimg")
        assert r.code == 0, r.err
        # the agent's user is deprovisioned over SSH before the VM is generalized and captured
        assert no_ssh == [("bootstrap", "azimg-b"), ("run", "waagent -deprovision+user -force")]
        [image] = fake.held_of("Microsoft.Compute/images")
        assert fake.held_of("Microsoft.Compute/virtualMachines") == []  # the generalized builder is deleted

        r = cli("provision", "--yes", "azure:img-t4", "x4", "--name", "fromimg", "--image", "azimg")
        assert r.code == 0, r.err
        vms = fake.held_of("Microsoft.Compute/virtualMachines")
        assert len(vms) == 4
        assert {vm["properties"]["storageProfile"]["imageReference"]["id"].lower() for vm in vms} == {image["id"].lower()}

        assert cli("teardown", "--yes", "fromimg").code == 0
        assert [r["type"] for r in fake.held_of("Microsoft.Compute/images")] == ["Microsoft.Compute/images"]
        assert cli("teardown", "--yes", "--images").code == 0
        assert fake.held() == []
    finally:
        registry.override("azure", None)
