"""The contract every provider keeps, checked against each provider's stand-in: AWS against
moto in server mode, Azure against the in-process ARM fake, GCP against its loopback Compute
REST fake (tests/support/gcp_fake.py) through the real google-cloud-compute clients, Sakura against its HTTP fake, bare
metal against loopback sshd hosts. Each case runs once per provider; what only one cloud does
stays in that provider's own test module."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from gpuplan.errors import QuotaExceeded, UsageError
from gpuplan.fleet import lifecycle
from gpuplan.fleet.provider import Feature, NodeSpec, Provider
from gpuplan.fleet.tags import TAG_CLUSTER, TAG_CREATED, TAG_NODE, TAG_OWNER
from gpuplan.store.state import State
from support.aws_moto import REGION as AWS_REGION
from support.azure_fake import FakeARM, make_provider
from support.gcp_fake import GceFake
from support.sakura_fake import SakuraFake, provider_for

OWNER = "contract-tester"
LOGIN = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDx0fXeaGZ1m6Pi1B6MvVlFrO6k4Ch4qsrmMuTzpPZNT gpuplan-contract"


@dataclass
class Stand:
    """One provider wired to its stand-in, and what a test needs to ask the stand-in itself."""

    provider: Provider
    region: str
    size: str
    ssh_user: str
    held: Callable[[], int]  # how many billable or blocking things the stand-in holds
    unsupported: set[Feature]  # what this provider is expected to refuse
    limit_machines: Callable[[int], None]  # make the quota allow exactly this many machines
    spec_extra: dict = field(default_factory=dict)

    def spec(self, cluster: str, **kw) -> NodeSpec:
        return NodeSpec(cluster=cluster, size=self.size, region=self.region, ssh_user=self.ssh_user,
                        ssh_public_key=LOGIN, tags={TAG_CLUSTER: cluster, TAG_OWNER: OWNER, TAG_CREATED: "1"},
                        **{**self.spec_extra, **kw})


def _aws(request) -> Stand:
    moto = request.getfixturevalue("moto_aws")
    config = {"quota_vcpus": "64"}
    stand = Stand(moto.provider(config), AWS_REGION, "g4dn.xlarge", "ubuntu",
                  lambda: sum(len(v) for v in moto.held().values()), set(), lambda n: None,
                  {"ssh_cidr": "203.0.113.5/32"})

    def limit(n: int) -> None:  # g4dn.xlarge has 4 vCPUs
        stand.provider = moto.provider({"quota_vcpus": str(4 * n)})

    stand.limit_machines = limit
    return stand


def _azure(request) -> Stand:
    fake = FakeARM()

    def limit(n: int) -> None:  # Standard_NC4as_T4_v3 has 4 vCPUs
        fake.limits.update({"standardNCASv3_T4Family": 4 * n, "lowPriorityCores": 4 * n})

    # A subnet is part of its VNet: ARM lists and deletes it with the VNet, never on its own.
    held = lambda: sum(1 for rid in fake.held() if "/subnets/" not in rid)  # noqa: E731
    return Stand(make_provider(fake), "westus2", "Standard_NC4as_T4_v3", "azureuser", held, set(), limit,
                 {"ssh_cidr": "198.51.100.7/32"})


def _gcp(request) -> Stand:
    fake = GceFake()
    fake.start()
    request.addfinalizer(fake.stop)

    def limit(n: int) -> None:  # n1-standard-4 with one T4: 1 GPU of each GPU tier, 4 vCPUs
        fake.quotas["global"]["GPUS_ALL_REGIONS"] = n
        fake.quotas["asia-northeast1"].update({"NVIDIA_T4_GPUS": n, "CPUS": 4 * n})

    return Stand(fake.provider(), "asia-northeast1", "n1-standard-4+nvidia-tesla-t4", "ubuntu",
                 lambda: len(fake.held()), set(), limit, {"ssh_cidr": "203.0.113.5/32"})


def _sakura(request) -> Stand:
    fake = SakuraFake()
    root = fake.start()
    request.addfinalizer(fake.stop)
    stand = Stand(provider_for(fake, root), "is1a", "高火力 VRT 24Core-240GB-H100x1", "ubuntu",
                  lambda: sum(len(v) for v in fake.user_resources().values()), {Feature.SPOT}, lambda n: None,
                  {"ssh_cidr": "203.0.113.5/32"})

    def limit(n: int) -> None:
        stand.provider = provider_for(fake, root, config={"quota_servers": str(n)})

    stand.limit_machines = limit
    return stand


def _baremetal(request) -> Stand:
    import yaml

    from gpuplan.providers.baremetal import BaremetalProvider
    from support.sshd import start_hosts, stop_hosts

    tmp = request.getfixturevalue("tmp_path")
    hosts = start_hosts(3, tmp)
    request.addfinalizer(lambda: stop_hosts(hosts))

    def inventory(n: int):
        path = tmp / f"inventory-{n}.yaml"
        path.write_text(yaml.safe_dump({"defaults": {"user": "root", "key": str(hosts[0].client_key_path)}, "hosts": [
            {"name": h.name, "address": h.host, "port": h.port, "gpus": {"model": "Tesla T4", "count": 1},
             "group": "t4", "host_key": h.host_public_key} for h in hosts[:n]]}))
        return BaremetalProvider({"inventory": str(path)})

    # A claimed host is listed twice: the machine (login key, cluster files) and its claim file.
    claims = lambda: 2 * sum(1 for h in hosts if (h.fake_root / "root/.gpuplan/claim").exists())  # noqa: E731
    stand = Stand(inventory(3), "local", "t4", "root", claims, {Feature.SPOT, Feature.TTL, Feature.IMAGE_CAPTURE},
                  lambda n: None)

    def limit(n: int) -> None:  # one host per machine: an inventory of n hosts
        stand.provider = inventory(n)

    stand.limit_machines = limit
    return stand


STANDS = {"aws": _aws, "azure": _azure, "gcp": _gcp, "sakura": _sakura,
          "baremetal": pytest.param(_baremetal, marks=pytest.mark.sshd)}


@pytest.fixture(params=list(STANDS.values()), ids=list(STANDS))
def stand(request) -> Stand:
    return request.param(request)


def _instances(stand: Stand, cluster: str) -> dict[str, str]:
    """Node name -> id of the cluster's machines, as list-by-tag finds them."""
    return {r.name: r.id for r in stand.provider.list(stand.region, {TAG_CLUSTER: cluster}) if r.kind == "instance"}


def test_create_again_resumes_with_the_same_ids_and_makes_nothing_twice(stand):
    first = stand.provider.create(stand.spec("c1"), ["c1-0"])
    held_one = stand.held()
    both = stand.provider.create(stand.spec("c1"), ["c1-0", "c1-1"])  # a resumed create: only c1-1 is new
    assert [i.name for i in both] == ["c1-0", "c1-1"]
    assert both[0].id == first[0].id and both[1].id != first[0].id
    held_two = stand.held()
    assert held_two > held_one
    again = stand.provider.create(stand.spec("c1"), ["c1-0", "c1-1"])
    assert [i.id for i in again] == [i.id for i in both]
    assert stand.held() == held_two
    assert _instances(stand, "c1") == {i.name: i.id for i in both}


def test_wait_ready_returns_every_machine_with_an_address(stand):
    made = stand.provider.create(stand.spec("w1"), ["w1-0", "w1-1"])
    ready = stand.provider.wait_ready(stand.region, [i.id for i in made], timeout_s=60)
    assert [i.id for i in ready] == [i.id for i in made]
    assert all(i.status == "running" and (i.public_ip or i.private_ip) for i in ready)


def test_teardown_leaves_nothing_in_the_stand_in_and_a_second_one_is_fine(stand):
    before = stand.held()
    stand.provider.create(stand.spec("t1"), ["t1-0", "t1-1"])
    found = stand.provider.list(stand.region, {TAG_CLUSTER: "t1", TAG_OWNER: OWNER})
    assert stand.held() > before
    stand.provider.delete(stand.region, found)
    assert stand.held() == before
    assert stand.provider.list(stand.region, {TAG_CLUSTER: "t1"}) == []
    stand.provider.delete(stand.region, found)  # everything is gone already: not found counts as deleted
    assert stand.held() == before


def test_tags_on_everything_it_made(stand):
    before = stand.held()
    stand.provider.create(stand.spec("g1"), ["g1-0", "g1-1"])
    found = stand.provider.list(stand.region, {TAG_OWNER: OWNER})
    assert len(found) == stand.held() - before  # nothing it made is missing from the list by tag
    for r in found:
        assert (r.tags[TAG_CLUSTER], r.tags[TAG_OWNER], r.tags[TAG_CREATED]) == ("g1", OWNER, "1"), r
    assert sorted(r.tags[TAG_NODE] for r in found if r.kind == "instance") == ["g1-0", "g1-1"]


def test_sweep_by_tag_finds_and_removes_what_the_state_lost(stand, gpuplan_home):
    before = stand.held()
    made = stand.provider.create(stand.spec("s1"), ["s1-0"])
    state = State(gpuplan_home / "state.db")  # knows no cluster: the state that made s1 is lost
    try:
        plan = lifecycle.sweep_find(state, stand.provider, [stand.region], [OWNER], grace_s=0)
        assert made[0].id in {r.id for r in plan.strays if r.kind == "instance"} and plan.spared == []
        result = lifecycle.sweep_delete(state, stand.provider, plan.strays)
    finally:
        state.close()
    assert {r.id for r in result.deleted} == {r.id for r in plan.strays}
    assert stand.held() == before


def test_quota_refusal_comes_before_anything_is_created(stand):
    stand.limit_machines(1)
    before = stand.held()
    with pytest.raises(QuotaExceeded) as refused:
        stand.provider.create(stand.spec("q1"), ["q1-0", "q1-1"])
    assert "\n" not in str(refused.value) and "2x" in str(refused.value)
    assert stand.held() == before
    # The one rule counts only the shortfall: one made, then the same two asked again is one short.
    stand.limit_machines(2)
    stand.provider.create(stand.spec("q1"), ["q1-0"])
    stand.limit_machines(2)
    assert [i.name for i in stand.provider.create(stand.spec("q1"), ["q1-0", "q1-1"])] == ["q1-0", "q1-1"]


@pytest.mark.parametrize("feature", list(Feature), ids=[f.name.lower() for f in Feature])
def test_a_feature_it_lacks_is_refused_in_one_line_before_anything_is_made(stand, feature):
    assert set(stand.provider.unsupported) == stand.unsupported
    before = stand.held()
    if feature not in stand.unsupported:
        stand.provider.check_features(spot=feature is Feature.SPOT, ttl_s=3600 if feature is Feature.TTL else None,
                                      capture=feature is Feature.IMAGE_CAPTURE)
        return
    with pytest.raises(UsageError) as refused:
        if feature is Feature.IMAGE_CAPTURE:
            stand.provider.capture_image(stand.region, "any-id", "img", {TAG_OWNER: OWNER})
        else:
            stand.provider.create(stand.spec("f1", spot=feature is Feature.SPOT,
                                             ttl_s=3600 if feature is Feature.TTL else None), ["f1-0"])
    text = str(refused.value)
    assert text.startswith(f"{stand.provider.name} does not offer ") and "\n" not in text
    assert stand.held() == before


def test_one_cluster_name_from_two_installations_stays_apart(stand):
    """Each installation's create, machines() and list() see only its own machines, and
    deleting one's leaves the other's running."""
    from gpuplan.fleet.tags import TAG_INSTALLATION

    def spec(installation: str):
        s = stand.spec("same")
        return NodeSpec(**{**s.__dict__, "tags": {**s.tags, TAG_INSTALLATION: installation}})

    ids = {}
    for inst in ("aaaaaaaaaaaa", "bbbbbbbbbbbb"):
        made = stand.provider.create(spec(inst), ["same-0"])
        ids[inst] = made[0].id
        match = {TAG_CLUSTER: "same", TAG_OWNER: OWNER, TAG_INSTALLATION: inst}
        assert {n: i.id for n, i in stand.provider.machines(stand.region, match).items()} == {"same-0": made[0].id}
    assert ids["aaaaaaaaaaaa"] != ids["bbbbbbbbbbbb"]  # B made its own, not adopting A's
    mine = stand.provider.list(stand.region, {TAG_CLUSTER: "same", TAG_INSTALLATION: "aaaaaaaaaaaa"})
    stand.provider.delete(stand.region, mine)
    left = stand.provider.machines(stand.region, {TAG_CLUSTER: "same", TAG_OWNER: OWNER,
                                                  TAG_INSTALLATION: "bbbbbbbbbbbb"})
    assert [i.id for i in left.values()] == [ids["bbbbbbbbbbbb"]]
    stand.provider.delete(stand.region, stand.provider.list(stand.region, {TAG_CLUSTER: "same"}))
