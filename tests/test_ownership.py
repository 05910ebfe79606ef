"""Two installations (two gpuplan homes, two states) in one cloud account, both with a cluster
called `demo`: each sees, resumes and tears down only its own machines. Against moto (AWS), the
fake ARM API (Azure), the Compute REST fake (GCP) and the Sakura fake, through the CLI as a user
runs it."""

from __future__ import annotations

import pytest
import yaml

from gpuplan.fleet import provider as registry
from support.azure_fake import FakeARM, make_provider
from support.gcp_fake import GceFake
from support.sakura_fake import SakuraFake

AZURE_PRICES = {"offers": [{
    "provider": "azure", "name": "Standard_NC4as_T4_v3", "aliases": ["e2e-t4"], "region": "westus2",
    "gpu": "T4", "gpu_count": 1, "vcpus": 4, "ram_gib": 28, "price": 100, "currency": "JPY", "price_unit": "hour",
}]}
GCP_PRICES = {"offers": [{
    "provider": "gcp", "name": "n1-standard-4+nvidia-tesla-t4", "aliases": ["e2e-t4"], "region": "asia-northeast1",
    "gpu": "T4", "gpu_count": 1, "vcpus": 4, "ram_gib": 15, "price": 100, "currency": "JPY", "price_unit": "hour",
}]}
SAKURA_PRICES = {"offers": [{
    "provider": "sakura", "name": "24Core-240GB-H100x1", "aliases": ["e2e-h100"], "region": "is1a",
    "gpu": "H100 SXM", "gpu_count": 1, "vcpus": 24, "ram_gib": 240, "price": 990, "currency": "JPY",
    "price_unit": "hour",
}]}


def make_home(root, name: str, config: dict, prices: dict | None = None):
    home = root / name
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    if prices:
        (home / "config" / "prices.yaml").write_text(yaml.safe_dump(prices))
    return home


class Homes:
    """Home A and home B, used in turn: `homes.a("provision", ...)` runs the CLI as home A."""

    def __init__(self, tmp_path, monkeypatch, cli, config: dict, prices: dict | None = None):
        self.monkeypatch, self.cli = monkeypatch, cli
        self.home = {n: make_home(tmp_path, f"home-{n}", config, prices) for n in "ab"}

    def run(self, which: str, *args: str):
        self.monkeypatch.setenv("GPUPLAN_HOME", str(self.home[which]))
        r = self.cli(*args)
        assert r.code == 0, f"home {which}: gpuplan {' '.join(args)}: {r.err}"
        return r

    def a(self, *args: str):
        return self.run("a", *args)

    def b(self, *args: str):
        return self.run("b", *args)


def two_homes_one_name(homes: Homes, target: str, running, both_made=lambda: None) -> None:
    """The must-show sequence: A `demo` x2, B `demo` x3 -> 5 run; A's teardown -> 3; B's -> 0."""
    homes.a("provision", "--yes", target, "x2", "--name", "demo", "--no-bootstrap")
    homes.b("provision", "--yes", target, "x3", "--name", "demo", "--no-bootstrap")
    assert running() == 5
    both_made()
    # each lists its own machines only
    assert homes.b("status", "demo").out.count("running") == 3
    assert homes.a("status", "demo").out.count("running") == 2
    homes.a("teardown", "--yes", "demo")
    assert running() == 3
    assert homes.b("status", "demo").out.count("running") == 3
    homes.b("teardown", "--yes", "demo")
    assert running() == 0


def test_aws_two_installations_same_cluster_name(moto_aws, tmp_path, monkeypatch, cli):
    monkeypatch.setenv("COLUMNS", "250")
    homes = Homes(tmp_path, monkeypatch, cli, {"providers": {"aws": {
        "ami": moto_aws.ami, "quota_vcpus": "64", "ssh_cidr": "198.51.100.7", "poll_s": "0.01"}}})
    ec2 = moto_aws.ec2()

    def running() -> int:
        return sum(1 for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]
                   if i["State"]["Name"] in ("pending", "running"))

    def both_made() -> None:  # account-unique names carry the installation: two of each
        keys = {k["KeyName"] for k in ec2.describe_key_pairs()["KeyPairs"]}
        groups = {g["GroupName"] for g in ec2.describe_security_groups()["SecurityGroups"]} - {"default"}
        assert len(keys) == 2 and all(k.startswith("gpuplan-demo-") for k in keys)
        assert len(groups) == 2 and all(g.startswith("gpuplan-demo-") for g in groups)

    two_homes_one_name(homes, "aws:g4dn.xlarge", running, both_made)
    assert moto_aws.held() == {}


@pytest.fixture
def arm():
    f = FakeARM()
    registry.override("azure", lambda conf: make_provider(f, conf))
    yield f
    registry.override("azure", None)


def test_azure_two_installations_same_cluster_name(arm, tmp_path, monkeypatch, cli):
    monkeypatch.setenv("COLUMNS", "250")
    homes = Homes(tmp_path, monkeypatch, cli, {"providers": {"azure": {"ssh_source": "198.51.100.7"}}},
                  AZURE_PRICES)
    two_homes_one_name(homes, "azure:e2e-t4", lambda: len(arm.held_of("Microsoft.Compute/virtualMachines")))
    assert arm.held() == []


def test_azure_group_of_another_owner_is_never_retagged(arm, tmp_path, monkeypatch, cli):
    """A resource group with this cluster's name but another owner's tags (a name made by an
    older gpuplan, or by hand) is refused, not adopted and re-tagged."""
    from gpuplan.fleet import tags

    homes = Homes(tmp_path, monkeypatch, cli, {"providers": {"azure": {"ssh_source": "198.51.100.7"}}},
                  AZURE_PRICES)
    homes.a("provision", "--yes", "azure:e2e-t4", "x1", "--name", "demo", "--no-bootstrap")
    [group] = [g for g in arm.held_of("Microsoft.Resources/resourceGroups")]
    # home B is made to compute the same group name (same installation id), under another owner
    monkeypatch.setenv("GPUPLAN_HOME", str(homes.home["b"]))
    (homes.home["b"] / "state").mkdir(parents=True, exist_ok=True)
    installation = group["tags"][tags.TAG_INSTALLATION]
    (homes.home["b"] / "state" / "installation-id").write_text(installation + "\n")
    (homes.home["b"] / "config" / "config.yaml").write_text(yaml.safe_dump(
        {"owner": "someone-else", "providers": {"azure": {"ssh_source": "198.51.100.7"}}}))
    r = cli("provision", "--yes", "azure:e2e-t4", "x1", "--name", "demo", "--no-bootstrap")
    assert r.code == 2, r.err
    assert "belongs to another cluster" in r.err
    [after] = [g for g in arm.held_of("Microsoft.Resources/resourceGroups")]
    assert after["tags"] == group["tags"]
    assert len(arm.held_of("Microsoft.Compute/virtualMachines")) == 1
    homes.a("teardown", "--yes", "demo")
    assert arm.held() == []


@pytest.fixture
def gce():
    f = GceFake()
    f.start()
    registry.override("gcp", lambda conf: f.provider(conf))
    yield f
    registry.override("gcp", None)
    f.stop()
    assert f.unknown == []


def test_gcp_two_installations_same_cluster_name(gce, tmp_path, monkeypatch, cli):
    monkeypatch.setenv("COLUMNS", "250")
    homes = Homes(tmp_path, monkeypatch, cli, {"providers": {"gcp": {"ssh_source": "198.51.100.7"}}}, GCP_PRICES)

    def running() -> int:
        return sum(1 for vm in gce.instances.values() if vm["status"] == "RUNNING")

    def both_made() -> None:  # project-unique names carry the installation: two demo-0, two of each rule
        names = [vm["name"] for vm in gce.instances.values()]
        assert len(set(names)) == 5 and sum(n.startswith("demo-0-") for n in names) == 2
        installations = {vm["labels"]["gpuplan-installation"] for vm in gce.instances.values()}
        assert len(installations) == 2
        rules = sorted(gce.firewalls)
        assert len(rules) == 4 and all(r.startswith("gpuplan-demo-") for r in rules)
        assert {r.rsplit("-", 2)[1] for r in rules} == installations  # gpuplan-demo-<installation>-ssh
        network_tags = {tuple(vm["tags"]["items"]) for vm in gce.instances.values()}
        assert len(network_tags) == 2  # each installation's rules reach only its own machines

    two_homes_one_name(homes, "gcp:e2e-t4", running, both_made)
    assert gce.held() == []


@pytest.fixture
def sakura(monkeypatch):
    f = SakuraFake()
    root = f.start()
    for k, v in f.env(root).items():
        monkeypatch.setenv(k, v)
    yield f
    f.stop()
    assert f.unknown == []


def test_sakura_two_installations_same_cluster_name(sakura, tmp_path, monkeypatch, cli):
    monkeypatch.setenv("COLUMNS", "250")
    homes = Homes(tmp_path, monkeypatch, cli, {"providers": {"sakura": {"poll_s": "0.005", "retries": "2", "ssh_cidr": "203.0.113.5/32"}}},
                  SAKURA_PRICES)

    def running() -> int:
        return sum(1 for s in sakura.servers.values() if (s.get("Instance") or {}).get("Status") == "up")

    def both_made() -> None:  # server names carry the installation: two demo-0, named apart
        names = [s["Name"] for s in sakura.servers.values()]
        assert len(set(names)) == 5 and sum(n.startswith("demo-0-") for n in names) == 2

    two_homes_one_name(homes, "sakura:e2e-h100", running, both_made)
    assert all(not v for v in sakura.user_resources().values())


def test_a_shared_owner_is_said_and_another_installations_cluster_is_spared(moto_aws, tmp_path, monkeypatch, cli):
    """Two homes with the same `owner:`: B's forced sweep says the owner is shared and keeps A's
    live cluster; only `--sweep --force demo` (naming it) takes it."""
    from support.aws_moto import REGION

    homes = Homes(tmp_path, monkeypatch, cli, {"owner": "team", "providers": {"aws": {
        "ami": moto_aws.ami, "quota_vcpus": "64", "ssh_cidr": "198.51.100.7", "poll_s": "0.01"}}})
    ec2 = moto_aws.ec2()

    def running() -> int:
        return sum(1 for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]
                   if i["State"]["Name"] in ("pending", "running"))

    homes.a("provision", "--yes", "aws:g4dn.xlarge", "x2", "--name", "demo", "--no-bootstrap")
    sweep = ("teardown", "--yes", "--sweep", "--force", "--provider", "aws", "--region", REGION)
    r = homes.b(*sweep)
    assert "owner 'team' is shared" in r.out
    assert "made by another installation" in r.out and "--sweep --force demo" in r.out
    assert running() == 2
    r = homes.b(*sweep[:2], "demo", *sweep[2:])
    assert "deleted" in r.out
    assert running() == 0
    assert moto_aws.held() == {}
