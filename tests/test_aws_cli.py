"""End to end through the CLI: provision / status / teardown on AWS against moto in server mode.
The provider is loaded through its real entry point and configured by config.yaml alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from support.aws_moto import REGION

OWNER = "e2e-owner"


@pytest.fixture
def aws(moto_aws, gpuplan_home, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # rich truncates the address column at 80
    cfg = gpuplan_home / "config"
    cfg.mkdir(parents=True)
    (cfg / "config.yaml").write_text(yaml.safe_dump({"owner": OWNER, "providers": {"aws": {
        "ami": moto_aws.ami, "quota_vcpus": "64", "ssh_cidr": "198.51.100.7", "poll_s": "0.01"}}}))
    yield moto_aws


def instances(ec2):
    return [i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]
            if i["State"]["Name"] != "terminated"]


def test_provision_status_teardown(aws, cli):
    r = cli("provision", "--yes", "aws:g4dn.xlarge", "x4", "--name", "e2e", "--no-bootstrap", "--ttl", "4h")
    assert r.code == 0, r.err
    ec2 = aws.ec2()
    live = instances(ec2)
    tags = [{t["Key"]: t["Value"] for t in i["Tags"]} for i in live]
    assert sorted(t["gpuplan-node"] for t in tags) == ["e2e-0", "e2e-1", "e2e-2", "e2e-3"]
    assert all(t["gpuplan-owner"] == OWNER and t["gpuplan-cluster"] == "e2e" for t in tags)
    assert {i["InstanceType"] for i in live} == {"g4dn.xlarge"}
    # named per installation: two homes' clusters `e2e` in one account get two groups
    [group] = ec2.describe_security_groups(
        Filters=[{"Name": "tag:gpuplan-cluster", "Values": ["e2e"]}])["SecurityGroups"]
    assert group["GroupName"].startswith("gpuplan-e2e-")
    assert "198.51.100.7/32" in [rng["CidrIp"] for p in group["IpPermissions"] for rng in p.get("IpRanges", [])]

    addresses = {i["PublicIpAddress"] for i in live}
    r = cli("status", "e2e")
    assert r.code == 0, r.err
    assert all(a in r.out for a in addresses) and r.out.count("running") == 4
    r = cli("status", "e2e", "--format", "json")
    [cluster] = json.loads(r.out)
    assert {n["public_ip"] for n in cluster["nodes"]} == addresses
    assert {n["id"] for n in cluster["nodes"]} == {i["InstanceId"] for i in live}
    assert 4 * 3600 - 60 < cluster["ttl_left_s"] <= 4 * 3600

    r = cli("teardown", "--yes", "e2e")
    assert r.code == 0, r.err
    assert aws.held() == {}


def test_failed_create_is_rolled_back(aws, cli):
    from gpuplan.fleet import provider as registry
    from gpuplan.providers.aws import AwsProvider
    from support.aws_moto import refuse_in_zones

    def factory(conf):  # the first zone grants two of four, every other zone none (issue 44)
        prov = AwsProvider(conf)
        zones = prov.zones(REGION, "g4dn.xlarge")
        refuse_in_zones(prov, "g4dn.xlarge", {z: 2 if z == zones[0] else 0 for z in zones})
        return prov

    registry.override("aws", factory)
    try:
        r = cli("provision", "--yes", "aws:g4dn.xlarge", "x4", "--name", "e2e", "--no-bootstrap")
    finally:
        registry.override("aws", None)
    assert r.code == 3
    assert "InsufficientInstanceCapacity" in r.err and "Traceback" not in r.err
    assert "removed" in r.err and "every zone of us-east-1 refused" in r.err
    assert aws.held() == {}


def test_a_type_refused_in_two_zones_is_bought_in_a_third_journaled_and_torn_down(aws, cli, gpuplan_home):
    from gpuplan.fleet import provider as registry
    from gpuplan.providers.aws import AwsProvider
    from gpuplan.store.state import State
    from support.aws_moto import refuse_in_zones

    def factory(conf):
        prov = AwsProvider(conf)
        refuse_in_zones(prov, "g4dn.xlarge", {"us-east-1a": 0, "us-east-1b": 1})
        return prov

    registry.override("aws", factory)
    try:
        r = cli("provision", "--yes", "aws:g4dn.xlarge", "x4", "--name", "e2e", "--no-bootstrap")
    finally:
        registry.override("aws", None)
    assert r.code == 0, r.err
    assert "us-east-1a: no g4dn.xlarge capacity (InsufficientInstanceCapacity); trying us-east-1b" in r.err
    assert ("us-east-1b: 1 of 4 g4dn.xlarge granted, no capacity for 3 more (InsufficientInstanceCapacity); "
            "trying us-east-1c for 3") in r.err
    live = instances(aws.ec2())
    assert sorted(i["Placement"]["AvailabilityZone"] for i in live) == ["us-east-1b"] + ["us-east-1c"] * 3
    tags = [{t["Key"]: t["Value"] for t in i["Tags"]} for i in live]
    assert sorted(t["gpuplan-node"] for t in tags) == ["e2e-0", "e2e-1", "e2e-2", "e2e-3"]
    assert all(t["gpuplan-cluster"] == "e2e" and t["gpuplan-owner"] == OWNER for t in tags)
    state = State(gpuplan_home / "state" / "state.db")
    refused = [(j.target, j.phase) for j in state.journal("e2e") if j.op == "zone-refused"]
    assert refused == [("us-east-1a", "failed"), ("us-east-1b", "failed")]
    assert {n.provider_id for n in state.nodes("e2e")} == {i["InstanceId"] for i in live}
    r = cli("teardown", "--yes", "e2e")
    assert r.code == 0, r.err
    assert aws.held() == {}


def test_quota_exceeded_is_one_line_exit_2_and_creates_nothing(aws, cli):
    r = cli("provision", "--yes", "aws:g4dn.xlarge", "x17", "--name", "e2e", "--no-bootstrap")  # 68 vCPUs > 64
    assert r.code == 2
    assert "L-DB2E81BA" in r.err and "68" in r.err and "request-service-quota-increase" in r.err
    assert "Traceback" not in r.err and r.err.strip().count("\n") == 0
    assert aws.held() == {}


def test_missing_credentials_is_one_line_exit_2(aws, cli, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    r = cli("provision", "--yes", "aws:g4dn.xlarge", "x1", "--name", "e2e", "--no-bootstrap")
    assert r.code == 2
    assert "AWS_ACCESS_KEY_ID" in r.err and "Traceback" not in r.err
    assert aws.held() == {}


def test_sweep_after_state_loss_finds_everything_by_owner_tag(aws, cli, gpuplan_home):
    r = cli("provision", "--yes", "aws:g4dn.xlarge", "x2", "--name", "lost", "--no-bootstrap")
    assert r.code == 0, r.err
    (gpuplan_home / "state" / "state.db").unlink()  # the state is gone; the tags remain
    r = cli("teardown", "--yes", "--sweep", "--force", "--provider", "aws", "--region", REGION)
    assert r.code == 0, r.err + r.out
    assert "deleted 6 stray resources" in r.out  # 2 instances, 2 volumes, security group, key pair
    assert aws.held() == {}


def test_kill_9_during_provision_then_teardown_removes_everything(aws, gpuplan_home):
    """A CLI process killed once its first instance exists leaves tagged resources behind;
    `teardown` in a new process finds them by tag and removes them."""
    env = {**os.environ}
    cfg = gpuplan_home / "config" / "config.yaml"
    data = yaml.safe_load(cfg.read_text())
    data["providers"]["aws"]["max_workers"] = "1"  # one launch at a time widens the window
    cfg.write_text(yaml.safe_dump(data))
    ec2 = aws.ec2()
    proc = subprocess.Popen([sys.executable, "-m", "gpuplan", "provision", "--yes", "aws:g4dn.xlarge", "x3",
                             "--name", "e2e", "--no-bootstrap"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not instances(ec2) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(instances(ec2)) >= 1
    r = subprocess.run([sys.executable, "-m", "gpuplan", "teardown", "--yes", "e2e"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert aws.held() == {}


def test_two_homes_as_two_users_on_one_postgres_state_see_and_guard_each_other_s_aws_cluster(aws, cli, postgres_url,
                                                                                              gpuplan_home, tmp_path,
                                                                                              monkeypatch):
    """Issue 45: Alice and Bob, each with a home of their own, on one PostgreSQL state. Alice's
    cluster (on moto) is in Bob's `status --all-users` with her name, not in his own view; his
    teardown of it is refused naming her (-y does not skip it) and leaves her instance running;
    with --force it goes, gone from moto too."""
    from support.cli import Terminal

    monkeypatch.setenv("GPUPLAN_STATE_URL", postgres_url)
    bob_home = tmp_path / "bob-home"
    (bob_home / "config").mkdir(parents=True)
    (bob_home / "config" / "config.yaml").write_text((gpuplan_home / "config" / "config.yaml").read_text())
    monkeypatch.setenv("GPUPLAN_USER", "alice")
    r = cli("provision", "--yes", "aws:g4dn.xlarge", "x1", "--name", "vision", "--no-bootstrap", "--ttl", "1h",
            "--project", "vision")
    assert r.code == 0, r.err
    [mine] = instances(aws.ec2())
    monkeypatch.setenv("GPUPLAN_HOME", str(bob_home))
    monkeypatch.setenv("GPUPLAN_USER", "bob")
    assert json.loads(cli("status", "--format", "json").out) == []  # his own: none
    [theirs] = json.loads(cli("status", "--all-users", "--format", "json").out)
    assert (theirs["name"], theirs["user"], theirs["project"]) == ("vision", "alice", "vision")
    assert [n["id"] for n in theirs["nodes"]] == [mine["InstanceId"]]
    r = cli("teardown", "vision", "-y")  # no terminal: refused, naming her
    assert r.code == 2 and "alice's cluster vision is not yours" in r.err
    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    r = cli("teardown", "vision", "-y")  # a terminal: asked, naming her, even with -y; "n" keeps it
    assert "alice's cluster vision: tear it down? (it is not yours)" in r.err
    assert [i["InstanceId"] for i in instances(aws.ec2())] == [mine["InstanceId"]]
    r = cli("teardown", "vision", "-y", "--force")
    assert r.code == 0, r.err
    assert instances(aws.ec2()) == []
    monkeypatch.setenv("GPUPLAN_USER", "alice")
    assert json.loads(cli("status", "--format", "json").out) == []  # gone for her too: one state
