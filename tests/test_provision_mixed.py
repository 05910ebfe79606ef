"""A mixed plan is provisioned as planned (issue 19): `provision --plan` of a plan that mixes two
instance types creates every machine of both, as one cluster, against the AWS stand-in (moto)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml

from gpuplan.cli.estimate import save_plan
from gpuplan.market import catalog
from gpuplan.planning import optimizer, workloads
from gpuplan.planning.model import Setting

OWNER = "mixed-owner"


@pytest.fixture
def aws(moto_aws, gpuplan_home, monkeypatch):
    cfg = gpuplan_home / "config"
    cfg.mkdir(parents=True)
    (cfg / "config.yaml").write_text(yaml.safe_dump({"owner": OWNER, "providers": {"aws": {
        "ami": moto_aws.ami, "quota_vcpus": "64", "ssh_cidr": "198.51.100.7", "poll_s": "0.01"}}}))
    yield moto_aws


def _mixed_plan_file(tmp_path):
    """The best mixed AWS plan of 4 videos, written by the writer `estimate --save` uses."""
    est = optimizer.estimate(workloads.videos(4), Setting(catalog=catalog.load()), provider="aws", region="us-east-1")
    mix = next(p for p in est.plans if p.feasible and len(p.fleet) == 2)
    path = tmp_path / "mixed.json"
    save_plan(replace(est, recommended=mix), path)
    return path, [(o.name, n) for o, n in mix.fleet]


def test_a_mixed_plan_provisions_both_types_as_one_cluster(aws, cli, tmp_path):
    path, fleet = _mixed_plan_file(tmp_path)
    saved = json.loads(path.read_text())
    assert [(f["instance_type"], f["count"]) for f in saved["fleet"]] == fleet and len(fleet) == 2
    r = cli("provision", "--yes", "--plan", str(path), "--name", "mix", "--no-bootstrap")
    assert r.code == 0, r.err
    ec2 = aws.ec2()
    live = [i for res in ec2.describe_instances()["Reservations"] for i in res["Instances"]
            if i["State"]["Name"] != "terminated"]
    by_type: dict[str, int] = {}
    for i in live:
        by_type[i["InstanceType"]] = by_type.get(i["InstanceType"], 0) + 1
    assert by_type == dict(fleet)
    tags = [{t["Key"]: t["Value"] for t in i["Tags"]} for i in live]
    total = sum(n for _, n in fleet)
    assert sorted(t["gpuplan-node"] for t in tags) == [f"mix-{i}" for i in range(total)]
    assert {t["gpuplan-cluster"] for t in tags} == {"mix"}
    r = cli("status", "mix", "--format", "json")
    [cluster] = json.loads(r.out)
    assert len(cluster["nodes"]) == total and all(n["status"] == "running" for n in cluster["nodes"])
    r = cli("teardown", "--yes", "mix")
    assert r.code == 0, r.err
    assert aws.held() == {}


def test_a_mixed_plan_dry_run_lists_both_types(aws, cli, tmp_path):
    path, fleet = _mixed_plan_file(tmp_path)
    r = cli("provision", "--dry-run", "--plan", str(path), "--name", "mix")
    assert r.code == 0, r.err
    (first, n1), (second, n2) = fleet
    assert f"would create cluster mix: {n1}x aws:{first} in us-east-1" in r.out
    assert f"  and {n2}x aws:{second}: GPUs" in r.out
