"""高火力 PHY against the fake of its API (tests/support/sakura_phy_fake.py): servers discovered (no
create), claimed like owned hosts over SSH (a loopback sshd), OS reinstalled on request, and the
account's 300-requests-an-hour limit kept by a client-side budget."""

from __future__ import annotations

import pytest

from gpuplan.errors import ProviderError, UsageError
from gpuplan.fleet.provider import NodeSpec
from gpuplan.hosts import remote
from gpuplan.providers.sakura_phy import RequestBudget, SakuraPhyProvider
from support.sakura_phy_fake import PhyFake


@pytest.fixture
def fake():
    f = PhyFake()
    f.root = f.start()
    f.add_server("100000000001", "gpu-a", "高火力 PHY H100 80GB x8 (SYS-821GE-TNHR)", "198.51.100.11")
    f.add_server("100000000002", "gpu-b", "高火力 PHY H200 141GB x8", "198.51.100.12")
    f.add_server("100000000003", "web", "専用サーバ PHY Standard", "198.51.100.13")
    yield f
    f.stop()
    assert f.unknown == []


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make(fake, tmp_path, config=None, limit=300, clock=None):
    budget = RequestBudget(tmp_path / "budget.json", limit=limit, clock=clock or Clock())
    return SakuraPhyProvider(config or {}, env=fake.env(fake.root), budget=budget)


def test_servers_are_discovered_through_the_api_and_only_gpu_plans_become_hosts(fake, tmp_path):
    phy = make(fake, tmp_path, {"user": "ubuntu", "key": "~/.ssh/id_ed25519"})
    servers = {s.id: s for s in phy.servers()}
    assert set(servers) == {"100000000001", "100000000002", "100000000003"}
    assert (servers["100000000001"].catalog_name, servers["100000000001"].gpu_model) == ("phy-h100x8", "H100 SXM")
    hosts = {h.name: h for h in phy.inventory()}
    assert set(hosts) == {"100000000001", "100000000002"}  # the non-GPU server is not a GPU host
    h = hosts["100000000002"]
    assert (h.address, h.group, h.gpu_model, h.gpu_count, h.user) == ("198.51.100.12", "phy-h200x8", "H200", 8, "ubuntu")
    assert [p for m, p in fake.requests if m == "POST"] == []  # discovery changes nothing
    with pytest.raises(UsageError, match="no host in the 高火力 PHY server list matches size 'phy-b200x8'"):
        phy.matching("phy-b200x8")


def test_there_is_no_create_call_a_size_the_account_does_not_rent_is_refused(fake, tmp_path):
    phy = make(fake, tmp_path)
    spec = NodeSpec(cluster="c", size="phy-b200x8", region="jp", ssh_user="root", ssh_public_key="ssh-ed25519 AAAA k",
                    tags={"gpuplan-cluster": "c", "gpuplan-owner": "o"})
    with pytest.raises(UsageError, match="matches size 'phy-b200x8'"):
        phy.create(spec, ["c-0"])
    assert not any(m == "POST" for m, _ in fake.requests)


@pytest.mark.sshd
def test_a_discovered_server_is_claimed_over_ssh_and_released(fake, tmp_path):
    from support.sshd import start_hosts, stop_hosts

    hosts = start_hosts(1, tmp_path)
    try:
        h = hosts[0]
        fake.servers.clear()
        fake.add_server("100000000009", "gpu-z", "高火力 PHY H100 80GB x8", h.host)
        phy = make(fake, tmp_path, {"user": h.user, "key": str(h.client_key_path), "ssh_port": str(h.port),
                                    "accept_host_keys": remote.fingerprint(h.host_public_key)})
        tags = {"gpuplan-cluster": "phy1", "gpuplan-owner": "tester"}
        spec = NodeSpec(cluster="phy1", size="phy-h100x8", region="jp", ssh_user=h.user,
                        ssh_public_key="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPhy gpuplan-phy1", tags=tags)
        made = phy.create(spec, ["phy1-0"])
        assert [(i.id, i.name, i.public_ip) for i in made] == [("100000000009", "phy1-0", h.host)]
        claim = (h.fake_root / "root/.gpuplan/claim").read_text()
        assert '"gpuplan-cluster": "phy1"' in claim
        found = phy.list("jp", {"gpuplan-cluster": "phy1"})
        assert sorted(r.kind for r in found) == ["host-claim", "instance"]
        # claimed: a reinstall would wipe a cluster's machine, so it is refused
        with pytest.raises(UsageError, match="belongs to cluster phy1"):
            phy.reinstall("100000000009", "ubuntu2404", "s3cret-pass")
        phy.delete("jp", [r for r in found if r.kind == "instance"])
        phy.delete("jp", [r for r in found if r.kind != "instance"])
        assert not (h.fake_root / "root/.gpuplan").exists()
        assert phy.list("jp", {"gpuplan-cluster": "phy1"}) == []
        assert fake.installs == []  # nothing was reinstalled, nothing deleted at Sakura
    finally:
        stop_hosts(hosts)


def test_reinstall_on_request_posts_the_image_and_the_server_leaves_the_pool_until_done(fake, tmp_path):
    phy = make(fake, tmp_path)
    phy._claims_of = lambda hosts: [None for _ in hosts]  # no SSH here: the servers are free
    phy.reinstall("100000000001", "Ubuntu 24", "s3cret-pass")
    assert fake.installs == [("100000000001", {"os_image_id": "ubuntu2404", "password": "s3cret-pass"})]
    # being installed: not a host to claim now
    assert [h.name for h in make(fake, tmp_path).inventory()] == ["100000000002"]
    fake.finish_installs()
    assert len(make(fake, tmp_path).inventory()) == 2
    with pytest.raises(UsageError, match="no single OS image 'windows'"):
        phy.reinstall("100000000001", "windows", "s3cret-pass")
    with pytest.raises(UsageError, match="at least 8 characters"):
        phy.reinstall("100000000001", "ubuntu2204", "short")


def test_power_control_needs_a_known_operation(fake, tmp_path):
    phy = make(fake, tmp_path)
    phy.power("100000000002", "soft")
    assert fake.power_calls == [("100000000002", "soft")]
    with pytest.raises(UsageError, match="use on, soft, reset, off"):
        phy.power("100000000002", "hibernate")


def test_the_hourly_request_budget_refuses_before_sending_and_refills_after_an_hour(fake, tmp_path):
    clock = Clock()
    phy = make(fake, tmp_path, limit=3, clock=clock)
    for _ in range(3):
        phy.server("100000000001")
    sent = len(fake.requests)
    with pytest.raises(ProviderError, match=r"3 API requests in the last hour.*next is allowed in 60 min 1 s"):
        phy.server("100000000001")
    assert len(fake.requests) == sent  # nothing was sent
    # another gpuplan process shares the budget (the file)
    other = make(fake, tmp_path, limit=3, clock=clock)
    with pytest.raises(ProviderError, match="the account's limit"):
        other.servers()
    clock.now += 3600
    assert phy.server("100000000001").nickname == "gpu-a"
    assert phy.budget.left() == 2


def test_the_default_budget_is_the_accounts_300_an_hour(fake, tmp_path):
    phy = make(fake, tmp_path)
    assert phy.budget.limit == 300 and phy.budget.window_s == 3600
    for _ in range(300):
        phy.budget.take()
    with pytest.raises(ProviderError, match="300 API requests in the last hour"):
        phy.servers()
    assert fake.requests == []


def test_cli_lists_the_accounts_servers_and_reinstalls_one_on_request(fake, cli, monkeypatch, gpuplan_home):
    for k, v in fake.env(fake.root).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("COLUMNS", "200")
    r = cli("phy", "list")
    assert r.code == 0, r.err
    assert "100000000001" in r.out and "phy-h100x8" in r.out and "phy-h200x8" in r.out
    # no password and no terminal to ask it on (the tests' stdin): one line, nothing sent
    r = cli("phy", "reinstall", "100000000002", "--os", "ubuntu2204", "--yes")
    assert r.code == 2 and "set GPUPLAN_PHY_PASSWORD" in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert fake.installs == []
    monkeypatch.setenv("GPUPLAN_PHY_PASSWORD", "s3cret-pass")
    r = cli("phy", "reinstall", "100000000002", "--os", "ubuntu2204")  # no --yes, no terminal
    assert r.code == 2 and "rerun with --yes" in r.err and fake.installs == [], r.err
    from gpuplan.providers import sakura_phy

    monkeypatch.setattr(sakura_phy.SakuraPhyProvider, "_claims_of", lambda self, hosts: [None for _ in hosts])
    r = cli("phy", "reinstall", "100000000002", "--os", "ubuntu2204", "--yes")
    assert r.code == 0, r.err
    assert fake.installs == [("100000000002", {"os_image_id": "ubuntu2204", "password": "s3cret-pass"})]
    # the budget file lives in the gpuplan data dir
    assert (gpuplan_home / "data" / "sakura-phy-requests.json").is_file()


@pytest.mark.sshd
def test_cli_provision_claims_a_phy_server_and_teardown_releases_it(fake, cli, monkeypatch, gpuplan_home, tmp_path):
    import yaml

    from support.sshd import start_hosts, stop_hosts

    hosts = start_hosts(1, tmp_path)
    try:
        h = hosts[0]
        fake.servers.clear()
        fake.add_server("100000000009", "gpu-z", "高火力 PHY H100 80GB x8", h.host)
        for k, v in fake.env(fake.root).items():
            monkeypatch.setenv(k, v)
        (gpuplan_home / "config").mkdir(parents=True, exist_ok=True)
        (gpuplan_home / "config" / "config.yaml").write_text(yaml.safe_dump({"providers": {"sakura-phy": {
            "user": h.user, "key": str(h.client_key_path), "ssh_port": str(h.port),
            "accept_host_keys": remote.fingerprint(h.host_public_key)}}}))
        r = cli("provision", "sakura-phy:phy-h100x8", "x1", "--name", "bm", "--no-bootstrap", "--yes")
        assert r.code == 0, r.err
        assert '"gpuplan-cluster": "bm"' in (h.fake_root / "root/.gpuplan/claim").read_text()
        # over SSH, as on any owned host (playbook files aimed at the loopback host's fake root)
        r = cli("bootstrap", "bm", "--playbook", "cudnn", "--param", "root=$GPUPLAN_FAKE_ROOT")
        assert r.code == 0, r.err
        assert h.installed("cudnn9-cuda-12")
        r = cli("teardown", "bm", "--yes")
        assert r.code == 0, r.err
        assert not (h.fake_root / "root/.gpuplan").exists()
        assert not any(m == "POST" for m, _ in fake.requests)  # nothing ordered, installed or powered
    finally:
        stop_hosts(hosts)
