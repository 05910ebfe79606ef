"""The AWS provider against moto in server mode (tests/support/aws_moto.py), plus Stubber for
the Service Quotas API moto does not implement."""

from __future__ import annotations

import base64
from dataclasses import replace
from datetime import datetime, timezone

import pytest
import yaml

from gpuplan.errors import AuthMissing, CapacityUnavailable, ProviderError, QuotaExceeded, UsageError
from gpuplan.fleet.provider import HostKey, NodeSpec, Resource
from support.aws_moto import CONSOLE_HOST_KEYS, REGION, fail_nth_call

TAGS = {"gpuplan-cluster": "demo", "gpuplan-owner": "tester"}
NAMES = ["demo-0", "demo-1", "demo-2", "demo-3"]
PRIVATE = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
LOGIN = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBu7cm5mXsN0MhGm2oJqkT8bYb5tQ0T3Ck0lF3o9v2Jt gpuplan-demo"


def spec(names=NAMES, size="g4dn.xlarge", image=None, ttl_s=None, tags=TAGS, spot=False, ssh_cidr="203.0.113.5/32"):
    # host keys as a core that did not know better would pass them: AWS must not put them anywhere
    keys = {n: HostKey(PRIVATE, f"ssh-ed25519 AAAAhost{n}") for n in names}
    return NodeSpec(cluster=tags["gpuplan-cluster"], size=size, region=REGION, ssh_user="ubuntu",
                    ssh_public_key=LOGIN, host_keys=keys, image=image, ttl_s=ttl_s, tags=tags, spot=spot,
                    ssh_cidr=ssh_cidr)


def kinds(resources):
    out: dict[str, int] = {}
    for r in resources:
        out[r.kind] = out.get(r.kind, 0) + 1
    return out


def user_data_of(ec2, instance_id):
    raw = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")["UserData"]["Value"]
    text = base64.b64decode(raw).decode()
    assert text.startswith("#cloud-config\n")
    return yaml.safe_load(text)


def test_create_four_then_list_finds_them_and_their_resources(moto_aws):
    prov = moto_aws.provider({"ssh_cidr": "198.51.100.99"})  # the spec's source (the caller's) wins
    made = prov.create(spec(), NAMES)
    assert [i.name for i in made] == NAMES
    assert len({i.id for i in made}) == 4

    found = prov.list(REGION, {"gpuplan-cluster": "demo"})
    assert kinds(found) == {"instance": 4, "disk": 4, "security-group": 1, "key-pair": 1}
    assert sorted(r.name for r in found if r.kind == "instance") == NAMES
    assert sorted(r.id for r in found if r.kind == "instance") == sorted(i.id for i in made)
    assert sorted(r.tags["gpuplan-node"] for r in found if r.kind == "disk") == NAMES
    assert all(r.tags["gpuplan-owner"] == "tester" and r.region == REGION for r in found)
    assert [r.name for r in found if r.kind in ("security-group", "key-pair")] == ["gpuplan-demo", "gpuplan-demo"]

    ec2 = moto_aws.ec2()
    inst = ec2.describe_instances(InstanceIds=[made[0].id])["Reservations"][0]["Instances"][0]
    assert inst["InstanceType"] == "g4dn.xlarge" and inst["ImageId"] == moto_aws.ami
    assert inst["KeyName"] == "gpuplan-demo"
    [vol] = ec2.describe_volumes(VolumeIds=[inst["BlockDeviceMappings"][0]["Ebs"]["VolumeId"]])["Volumes"]
    assert vol["Size"] == 128 and vol["VolumeType"] == "gp3"
    [group] = ec2.describe_security_groups(GroupNames=["gpuplan-demo"])["SecurityGroups"]
    ssh = next(p for p in group["IpPermissions"] if p.get("FromPort") == 22)
    assert [r["CidrIp"] for r in ssh["IpRanges"]] == ["203.0.113.5/32"]
    assert any(pair["GroupId"] == group["GroupId"] for p in group["IpPermissions"] for pair in p.get("UserIdGroupPairs", []))
    assert inst["MetadataOptions"]["HttpTokens"] == "required"  # IMDSv2 only
    assert inst["MetadataOptions"]["HttpEndpoint"] == "enabled"
    for i in made:  # nothing secret in user data: DescribeInstanceAttribute and the IMDS hand it to anyone
        raw = ec2.describe_instance_attribute(InstanceId=i.id, Attribute="userData")["UserData"]["Value"]
        text = base64.b64decode(raw).decode()
        assert "PRIVATE KEY" not in text and "b3BlbnNzaC1rZXktdjEAAAAA" not in text and "ssh_keys" not in text


def test_no_ssh_source_refuses_to_open_ssh(moto_aws):
    prov = moto_aws.provider()
    with pytest.raises(UsageError, match="providers.aws.ssh_cidr.*--ssh-from"):
        prov.create(spec(ssh_cidr=None), NAMES)
    assert moto_aws.held().get("instances") is None


def test_resumed_create_adds_the_ingress_rule_a_killed_run_never_authorized(moto_aws):
    """A run killed between CreateSecurityGroup and AuthorizeSecurityGroupIngress left a group
    with no rules; the next create must not reuse it as it is."""
    ec2 = moto_aws.ec2()
    ec2.create_security_group(GroupName="gpuplan-demo", Description="gpuplan cluster demo", TagSpecifications=[
        {"ResourceType": "security-group", "Tags": [{"Key": k, "Value": v} for k, v in TAGS.items()]}])
    prov = moto_aws.provider()
    prov.create(spec(["demo-0"]), ["demo-0"])
    [group] = ec2.describe_security_groups(GroupNames=["gpuplan-demo"])["SecurityGroups"]
    ssh = [p for p in group["IpPermissions"] if p.get("FromPort") == 22]
    assert [r["CidrIp"] for p in ssh for r in p["IpRanges"]] == ["203.0.113.5/32"]
    assert any(pair["GroupId"] == group["GroupId"] for p in group["IpPermissions"] for pair in p.get("UserIdGroupPairs", []))
    prov.create(spec(["demo-0"]), ["demo-0"])  # and a group that has both rules is left as it is
    [again] = ec2.describe_security_groups(GroupNames=["gpuplan-demo"])["SecurityGroups"]
    assert again["IpPermissions"] == group["IpPermissions"]


def test_wait_ready_reports_addresses(moto_aws):
    prov = moto_aws.provider()
    made = prov.create(spec(), NAMES)
    ready = prov.wait_ready(REGION, [i.id for i in made], timeout_s=5)
    assert [i.id for i in ready] == [i.id for i in made]
    assert all(i.status == "running" and i.public_ip and i.private_ip and i.ssh_port == 22 for i in ready)
    assert len({i.public_ip for i in ready}) == 4
    # each node's own host key, as cloud-init printed it to the console (no key was injected)
    assert [i.extra["host_key"] for i in ready] == [CONSOLE_HOST_KEYS[i.id] for i in ready]
    assert len({i.extra["host_key"] for i in ready}) == 4


def test_delete_twice_leaves_nothing_in_the_emulator(moto_aws):
    prov = moto_aws.provider()
    prov.create(spec(), NAMES)
    found = prov.list(REGION, {"gpuplan-cluster": "demo"})
    # as teardown does it: machines first, then the rest
    prov.delete(REGION, [r for r in found if r.kind == "instance"])
    prov.delete(REGION, [r for r in found if r.kind != "instance"])
    assert moto_aws.held() == {}
    prov.delete(REGION, found)  # everything already gone: not found is success
    assert prov.list(REGION, {"gpuplan-cluster": "demo"}) == []
    assert moto_aws.held() == {}


def test_ttl_terminates_on_guest_shutdown_and_rearms_on_every_boot(moto_aws):
    at = datetime(2026, 11, 22, 12, 0, 0, tzinfo=timezone.utc)
    prov = moto_aws.provider(clock=lambda: at)
    [inst] = prov.create(spec(["demo-0"], ttl_s=4 * 3600), ["demo-0"])
    ec2 = moto_aws.ec2()
    behaviour = ec2.describe_instance_attribute(InstanceId=inst.id, Attribute="instanceInitiatedShutdownBehavior")
    assert behaviour["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
    files = {f["path"]: f for f in user_data_of(ec2, inst.id)["write_files"]}
    assert files["/etc/gpuplan/expires-at"]["content"] == "2026-11-22T16:00:00Z\n"
    script = files["/var/lib/cloud/scripts/per-boot/gpuplan-ttl.sh"]
    assert script["permissions"] == "0755"
    assert f"({int(at.timestamp()) + 4 * 3600} - $(date +%s) + 59) / 60" in script["content"]
    assert 'shutdown -h +"$left"' in script["content"]


def test_no_ttl_means_no_self_termination(moto_aws):
    prov = moto_aws.provider()
    [inst] = prov.create(spec(["demo-0"]), ["demo-0"])
    ec2 = moto_aws.ec2()
    behaviour = ec2.describe_instance_attribute(InstanceId=inst.id, Attribute="instanceInitiatedShutdownBehavior")
    assert behaviour["InstanceInitiatedShutdownBehavior"]["Value"] == "stop"
    assert "write_files" not in user_data_of(ec2, inst.id)


def test_idle_stop_makes_a_guest_shutdown_terminate_without_a_ttl(moto_aws):
    from dataclasses import replace

    prov = moto_aws.provider()
    [inst] = prov.create(replace(spec(["demo-0"]), self_stop=True), ["demo-0"])  # provision --idle 30m
    ec2 = moto_aws.ec2()
    behaviour = ec2.describe_instance_attribute(InstanceId=inst.id, Attribute="instanceInitiatedShutdownBehavior")
    assert behaviour["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
    assert "write_files" not in user_data_of(ec2, inst.id)  # no TTL was asked for


def test_third_of_four_launches_failing_leaves_three_found_and_removed(moto_aws):
    prov = moto_aws.provider({"max_workers": "1"})  # one at a time, so "the 3rd" is demo-2
    calls = fail_nth_call(prov, "RunInstances", n=3)
    with pytest.raises(CapacityUnavailable) as err:  # a pinned zone is asked once (no next zone: test_zone_failover)
        prov.create(replace(spec(), zone="us-east-1a"), NAMES)
    assert "InsufficientInstanceCapacity" in str(err.value) and "\n" not in str(err.value)
    assert len(calls) == 4
    found = prov.list(REGION, {"gpuplan-cluster": "demo"})
    assert sorted(r.name for r in found if r.kind == "instance") == ["demo-0", "demo-1", "demo-3"]
    prov.delete(REGION, found)
    assert moto_aws.held() == {}


def test_concurrent_launch_failure_still_reports_the_others(moto_aws):
    prov = moto_aws.provider()
    fail_nth_call(prov, "RunInstances", n=3)
    with pytest.raises(CapacityUnavailable):
        prov.create(replace(spec(), zone="us-east-1a"), NAMES)  # pinned: no next zone
    found = prov.list(REGION, {"gpuplan-cluster": "demo"})
    assert kinds(found)["instance"] == 3
    # resuming creates only the missing one
    made = prov.create(spec(), NAMES)
    assert [i.name for i in made] == NAMES
    assert kinds(prov.list(REGION, {"gpuplan-cluster": "demo"}))["instance"] == 4


@pytest.mark.parametrize("code, error, words", [
    ("VcpuLimitExceeded", QuotaExceeded, ["VcpuLimitExceeded", "L-DB2E81BA", "request-service-quota-increase"]),
    ("InsufficientInstanceCapacity", CapacityUnavailable, ["no capacity", "another region"]),
    ("InvalidInstanceType", UsageError, ["g4dn.xlarge", "InvalidInstanceType"]),
    ("Unsupported", UsageError, ["g4dn.xlarge", "Unsupported"]),
    ("AuthFailure", AuthMissing, ["AWS_ACCESS_KEY_ID", "AuthFailure"]),
    ("UnrecognizedClientException", AuthMissing, ["aws configure"]),
    ("InternalError", ProviderError, ["InternalError: boom"]),
])
def test_aws_errors_become_gpuplan_errors(moto_aws, code, error, words):
    prov = moto_aws.provider()
    fail_nth_call(prov, "RunInstances", n=1, code=code, message="boom")
    with pytest.raises(error) as err:
        prov.create(replace(spec(["demo-0"]), zone="us-east-1a"), ["demo-0"])  # pinned: no next zone
    assert type(err.value) is error
    text = str(err.value)
    assert all(w in text for w in words) and "\n" not in text


def test_capture_image_then_create_two_from_it(moto_aws):
    prov = moto_aws.provider()
    [builder] = prov.create(spec(["demo-0"]), ["demo-0"])
    image = prov.capture_image(REGION, builder.id, "cuda-base", {**TAGS, "gpuplan-node": "demo-0"})
    assert image.name == "cuda-base" and image.id.startswith("ami-")
    assert prov.capture_image(REGION, builder.id, "cuda-base", TAGS).id == image.id  # idempotent by name

    ec2 = moto_aws.ec2()
    [img] = ec2.describe_images(ImageIds=[image.id])["Images"]
    img_tags = {t["Key"]: t["Value"] for t in img["Tags"]}
    assert img_tags == {"gpuplan-image": "cuda-base", "gpuplan-owner": "tester"}  # no cluster tag: teardown keeps it
    snap = img["BlockDeviceMappings"][0]["Ebs"]["SnapshotId"]
    [s] = ec2.describe_snapshots(SnapshotIds=[snap])["Snapshots"]
    assert {t["Key"]: t["Value"] for t in s["Tags"]} == img_tags

    workers = prov.create(spec(["w-0", "w-1"], image=image.id, tags={**TAGS, "gpuplan-cluster": "w"}), ["w-0", "w-1"])
    reservations = ec2.describe_instances(InstanceIds=[i.id for i in workers])["Reservations"]
    assert [i["ImageId"] for r in reservations for i in r["Instances"]] == [image.id, image.id]

    by_owner = prov.list(REGION, {"gpuplan-owner": "tester"})
    assert kinds(by_owner) == {"instance": 3, "disk": 3, "security-group": 2, "key-pair": 2, "image": 1}
    assert [r.name for r in by_owner if r.kind == "image"] == ["cuda-base"]

    for cluster in ("demo", "w"):
        prov.delete(REGION, [r for r in prov.list(REGION, {"gpuplan-cluster": cluster})])
    assert moto_aws.held() == {"images": [image.id], "snapshots": [snap]}
    prov.delete(REGION, [r for r in prov.list(REGION, {"gpuplan-owner": "tester"}) if r.kind == "image"])
    assert moto_aws.held() == {}


def test_orphan_snapshot_is_listed_and_deleted(moto_aws):
    ec2 = moto_aws.ec2()
    vol = ec2.create_volume(AvailabilityZone=f"{REGION}a", Size=8)["VolumeId"]
    snap = ec2.create_snapshot(VolumeId=vol, TagSpecifications=[{"ResourceType": "snapshot", "Tags": [
        {"Key": "gpuplan-owner", "Value": "tester"}, {"Key": "gpuplan-image", "Value": "lost"}]}])["SnapshotId"]
    ec2.delete_volume(VolumeId=vol)
    prov = moto_aws.provider()
    found = prov.list(REGION, {"gpuplan-owner": "tester"})
    assert [(r.kind, r.id) for r in found] == [("snapshot", snap)]
    prov.delete(REGION, found)
    assert moto_aws.held() == {}


def test_quota_exceeded_names_the_quota_and_how_to_raise_it_and_creates_nothing(moto_aws):
    prov = moto_aws.provider({"quota_vcpus": "12"})  # 4x g4dn.xlarge needs 16
    [tier] = prov.quota(REGION, "g4dn.xlarge")
    assert (tier.name, tier.limit, tier.used, tier.free) == ("L-DB2E81BA", 12, 0, 12)
    assert "Running On-Demand G and VT instances" in tier.description
    assert "providers.aws.quota_vcpus" in tier.description and "NoSuchResourceException" in tier.description
    with pytest.raises(QuotaExceeded) as err:
        prov.create(spec(), NAMES)
    text = str(err.value)
    assert "L-DB2E81BA" in text and "16 vCPUs" in text and "only 12 are free" in text
    assert ("aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-DB2E81BA "
            "--desired-value 16 --region us-east-1") in text
    assert moto_aws.held() == {}


def test_quota_counts_running_on_demand_vcpus_of_the_same_family(moto_aws):
    prov = moto_aws.provider({"quota_vcpus": "100"})
    prov.create(spec(["demo-0", "demo-1"]), ["demo-0", "demo-1"])  # 2x g4dn.xlarge = 8 vCPUs
    prov.create(spec(["s-0"], size="g4dn.2xlarge", spot=True, tags={**TAGS, "gpuplan-cluster": "s"}), ["s-0"])
    prov.create(spec(["m-0"], size="m5.large", tags={**TAGS, "gpuplan-cluster": "m"}), ["m-0"])
    [g] = prov.quota(REGION, "g5.xlarge")
    assert (g.name, g.used) == ("L-DB2E81BA", 8)  # spot and the standard m5 are not counted
    [std] = prov.quota(REGION, "m5.xlarge")
    assert (std.name, std.used) == ("L-1216C47A", 2)
    [p] = prov.quota(REGION, "p4d.24xlarge")
    assert (p.name, p.used) == ("L-417A185B", 0)


def test_quota_from_service_quotas_when_it_answers(moto_aws):
    from botocore.stub import Stubber

    moto_aws.provider().create(spec(["demo-0"]), ["demo-0"])
    prov = moto_aws.provider({"quota_vcpus": ""})
    sq = prov.client("service-quotas", REGION)
    with Stubber(sq) as stub:
        stub.add_response("get_service_quota", {"Quota": {"QuotaCode": "L-417A185B", "Value": 96.0}},
                          {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"})
        stub.add_client_error("get_service_quota", "NoSuchResourceException", "no applied value",
                              expected_params={"ServiceCode": "ec2", "QuotaCode": "L-DB2E81BA"})
        stub.add_response("get_aws_default_service_quota", {"Quota": {"QuotaCode": "L-DB2E81BA", "Value": 8.0}},
                          {"ServiceCode": "ec2", "QuotaCode": "L-DB2E81BA"})
        [p] = prov.quota(REGION, "p4d.24xlarge")
        [g] = prov.quota(REGION, "g4dn.xlarge")
        stub.assert_no_pending_responses()
    assert (p.name, p.limit, p.used, p.description) == ("L-417A185B", 96, 0, "Running On-Demand P instances in us-east-1")
    assert (g.name, g.limit, g.used, g.free) == ("L-DB2E81BA", 8, 4, 4)
    assert g.how_to_raise.startswith("aws service-quotas request-service-quota-increase --service-code ec2 "
                                     "--quota-code L-DB2E81BA")


def test_quota_unknown_without_config_is_a_usage_error(moto_aws):
    prov = moto_aws.provider({"quota_vcpus": ""})
    with pytest.raises(UsageError, match="set providers.aws.quota_vcpus"):
        prov.quota(REGION, "g4dn.xlarge")
    with pytest.raises(UsageError, match="providers.aws.quota_code"):
        prov.quota(REGION, "inf2.xlarge")


def test_missing_credentials_name_the_variables(moto_aws, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    prov = moto_aws.provider()
    with pytest.raises(AuthMissing) as err:
        prov.check_credentials()
    assert str(err.value) == (
        "no AWS credentials: set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or run `aws configure`")
    with pytest.raises(AuthMissing):
        prov.create(spec(), NAMES)
    monkeypatch.setenv("AWS_PROFILE", "nosuch")
    with pytest.raises(AuthMissing, match="'nosuch'.*aws configure --profile"):
        moto_aws.provider().check_credentials()


def test_credentials_from_a_profile_file(moto_aws, monkeypatch, tmp_path):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    creds = tmp_path / "credentials"
    creds.write_text("[work]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_PROFILE", "work")
    prov = moto_aws.provider()
    prov.check_credentials()
    assert [i.name for i in prov.create(spec(["demo-0"]), ["demo-0"])] == ["demo-0"]


def test_unknown_size_is_a_usage_error_and_creates_nothing(moto_aws):
    prov = moto_aws.provider()
    assert prov.vcpus(REGION, "p9.bogus") is None
    with pytest.raises(UsageError, match="'p9.bogus' is unknown in us-east-1"):
        prov.create(spec(size="p9.bogus"), NAMES)
    assert moto_aws.held() == {}


def test_vcpus_from_ec2_and_from_the_request_where_moto_lacks_the_type(moto_aws):
    prov = moto_aws.provider()
    assert prov.vcpus(REGION, "g4dn.xlarge") == 4
    assert prov.vcpus(REGION, "g5.12xlarge") == 48
    assert prov.vcpus(REGION, "p3.2xlarge") is None  # not in moto's describe_instance_types
    need, [tier] = prov.check_quota(REGION, "p3.2xlarge", 2, vcpus=8)  # the catalog row's 8, as NodeSpec.vcpus
    assert (need, tier.name) == (16, "L-417A185B")
    assert prov.check_quota(REGION, "g4dn.xlarge", 2, vcpus=99)[0] == 8  # EC2's own figure wins


def test_refused_credentials_while_sizing_are_not_mistaken_for_an_unknown_size(moto_aws):
    prov = moto_aws.provider()
    fail_nth_call(prov, "DescribeInstanceTypes", n=1, code="AuthFailure", message="AWS was not able to validate")
    with pytest.raises(AuthMissing, match="AuthFailure"):
        prov.vcpus(REGION, "g4dn.xlarge")


def test_spot_instances_terminate_on_shutdown(moto_aws):
    prov = moto_aws.provider()
    [inst] = prov.create(spec(["demo-0"], spot=True), ["demo-0"])
    ec2 = moto_aws.ec2()
    [i] = ec2.describe_instances(InstanceIds=[inst.id])["Reservations"][0]["Instances"]
    assert i["InstanceLifecycle"] == "spot"
    behaviour = ec2.describe_instance_attribute(InstanceId=inst.id, Attribute="instanceInitiatedShutdownBehavior")
    assert behaviour["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"


def test_missing_ami_says_to_set_ami(moto_aws):
    prov = moto_aws.provider({"ami": ""})
    with pytest.raises(UsageError) as err:
        prov.create(spec(), NAMES)
    assert "ParameterNotFound" in str(err.value) and "set providers.aws.ami" in str(err.value)
    with pytest.raises(UsageError, match="ami-0123456789abcdef0.*set providers.aws.ami"):
        moto_aws.provider({"ami": "ami-0123456789abcdef0"}).create(spec(), NAMES)
    assert moto_aws.held() == {}


def test_default_ubuntu_ami_from_the_ssm_parameter(moto_aws):
    from botocore.stub import Stubber

    prov = moto_aws.provider({"ami": ""})
    # moto refuses to hold a parameter under the reserved /aws/ prefix
    with Stubber(prov.client("ssm", REGION)) as stub:
        stub.add_response("get_parameter", {"Parameter": {"Value": moto_aws.ami}}, {
            "Name": "/aws/service/canonical/ubuntu/server/24.04/stable/current/amd64/hvm/ebs-gp3/ami-id"})
        [inst] = prov.create(spec(["demo-0"]), ["demo-0"])
    assert inst.extra["image"] == moto_aws.ami


def test_unknown_resource_kind_is_refused(moto_aws):
    prov = moto_aws.provider()
    with pytest.raises(ProviderError, match="resource-group"):
        prov.delete(REGION, [Resource("resource-group", "rg-1", REGION)])


def test_default_regions(moto_aws, monkeypatch):
    from gpuplan.providers.aws import AwsProvider

    assert AwsProvider({"regions": "eu-west-1, us-west-2"}).default_regions() == ["eu-west-1", "us-west-2"]
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    assert AwsProvider({}).default_regions() == ["eu-central-1", "us-east-1", "ap-northeast-1"]


def test_the_emulator_refuses_what_aws_would_refuse(moto_aws):
    from botocore.exceptions import ClientError

    ec2 = moto_aws.ec2()
    for kwargs, code in (({"ImageId": "ami-12345678", "InstanceType": "g4dn.xlarge"}, "InvalidAMIID.NotFound"),
                         ({"ImageId": moto_aws.ami, "InstanceType": "p9.bogus"}, "InvalidInstanceType.NotFound"),
                         ({"ImageId": moto_aws.ami, "InstanceType": "g4dn.xlarge", "KeyName": "nope"},
                          "InvalidKeyPair.NotFound")):
        with pytest.raises(ClientError) as err:
            ec2.run_instances(MinCount=1, MaxCount=1, **kwargs)
        assert err.value.response["Error"]["Code"] == code
