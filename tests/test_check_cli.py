"""`gpuplan check`: credentials and GPU quota per provider, read from the stand-ins, nothing created."""

from __future__ import annotations

import json

import pytest
import yaml

from gpuplan.fleet import provider as registry
from support.azure_fake import SKUS, FakeARM, FakeSku, make_provider


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    from support.credentials import without_credentials

    without_credentials(monkeypatch, tmp_path)


def test_no_credentials_anywhere_says_what_to_set_and_exits_2(no_credentials, cli):
    r = cli("check")
    assert r.code == 2
    assert "aws: no AWS credentials: set AWS_PROFILE" in r.out
    assert "azure: AZURE_SUBSCRIPTION_ID is not set" in r.out
    assert "sakura: no Sakura API key" in r.out
    assert "ready: none" in r.out


def test_unknown_provider_is_a_usage_error(cli):
    r = cli("check", "nosuchcloud")
    assert r.code == 2 and "unknown provider 'nosuchcloud'" in r.err


def test_region_needs_one_provider(cli):
    r = cli("check", "--region", "eastus")
    assert r.code == 2 and "--region applies to one provider" in r.err


def test_missing_sdk_names_the_pip_extra(no_credentials, cli):
    def factory(conf):
        raise ImportError("No module named 'botocore'", name="botocore")

    registry.override("aws", factory)
    try:
        r = cli("check", "aws", "--format", "json")
    finally:
        registry.override("aws", None)
    assert r.code == 2
    [aws] = json.loads(r.out)
    assert aws["credentials"] == "botocore is not installed: pip install 'gpuplan[aws]'"


def test_aws_quota_per_gpu_family_counts_running_instances(moto_aws, gpuplan_home, cli):
    cfg = gpuplan_home / "config"
    cfg.mkdir(parents=True)
    # moto's Service Quotas does not know EC2: the provider then takes the limit from config
    (cfg / "config.yaml").write_text(yaml.safe_dump({"providers": {"aws": {"quota_vcpus": "64"}}}))
    ec2 = moto_aws.ec2()
    ec2.run_instances(ImageId=moto_aws.ami, InstanceType="g4dn.xlarge", MinCount=2, MaxCount=2)

    r = cli("check", "aws", "--format", "json")
    assert r.code == 0, r.err
    [aws] = json.loads(r.out)
    assert aws["ready"] and aws["credentials"] == "found" and aws["region"] == "us-east-1"
    quotas = {q["name"]: q for q in aws["quotas"]}
    assert set(quotas) == {"L-DB2E81BA", "L-417A185B"}  # G and VT; P: the GPU families of the us-east-1 rows
    assert (quotas["L-DB2E81BA"]["limit"], quotas["L-DB2E81BA"]["used"], quotas["L-DB2E81BA"]["free"]) == (64, 8, 56)
    assert quotas["L-417A185B"]["used"] == 0
    # read only: the two instances the test made are all there is
    live = [i for res in ec2.describe_instances()["Reservations"] for i in res["Instances"]]
    assert len(live) == 2


def test_azure_family_and_regional_tiers_from_the_usage_api(gpuplan_home, cli, monkeypatch):
    families = {
        "Standard_NC4as_T4_v3": ("standardNCASv3_T4Family", 4), "Standard_NC24ads_A100_v4": ("standardNCADSA100v4Family", 24),
        "Standard_NC40ads_H100_v5": ("standardNCadsH100v5Family", 40), "Standard_ND96isr_H100_v5": ("standardNDSH100v5Family", 96),
        "Standard_ND96asr_v4": ("standardNDASv4_A100Family", 96), "Standard_ND96amsr_A100_v4": ("standardNDAMSv4_A100Family", 96),
        "Standard_NV36ads_A10_v5": ("standardNVADSA10v5Family", 36), "Standard_NV12s_v3": ("standardNVSv3Family", 12),
    }
    skus = SKUS + tuple(FakeSku(n, f, v, 1) for n, (f, v) in families.items() if n not in {s.name for s in SKUS})
    fake = FakeARM(skus=skus, limits={"cores": 20, "standardNCASv3_T4Family": 8}, default_family_limit=0)
    registry.override("azure", lambda conf: make_provider(fake, conf))
    monkeypatch.setenv("COLUMNS", "200")
    try:
        r = cli("check", "azure", "--format", "json")
        table = cli("check", "azure")
    finally:
        registry.override("azure", None)
    assert r.code == 0, r.err
    [az] = json.loads(r.out)
    quotas = {q["name"]: q for q in az["quotas"]}
    assert quotas["standardNCASv3_T4Family"]["limit"] == 8
    assert quotas["cores"]["limit"] == 20 and list(quotas).count("cores") == 1
    assert quotas["standardNCADSA100v4Family"]["free"] == 0
    assert fake.held() == []  # nothing was created
    # a family with nothing free says how to raise it, once, under the table
    assert "azure standardNCADSA100v4Family: nothing free; raise it:" in table.out
    assert "ready: azure" in table.out
