"""End to end through the CLI: provision / status / teardown on Sakura, against the HTTP fake."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from support.sakura_fake import SakuraFake

OWNER = "e2e-owner"
# A test-only offer, so the test does not depend on which Sakura rows the shipped snapshot has.
PRICES = {"offers": [{
    "provider": "sakura", "name": "24Core-240GB-H100x1", "aliases": ["e2e-h100"], "region": "is1a",
    "gpu": "H100 SXM", "gpu_count": 1, "vcpus": 24, "ram_gib": 240, "price": 990, "currency": "JPY",
    "price_unit": "hour",
}]}


@pytest.fixture
def fake(gpuplan_home, monkeypatch):
    f = SakuraFake()
    root = f.start()
    for k, v in f.env(root).items():
        monkeypatch.setenv(k, v)
    cfg = gpuplan_home / "config"
    cfg.mkdir(parents=True)
    (cfg / "config.yaml").write_text(yaml.safe_dump(
        {"owner": OWNER, "providers": {"sakura": {"poll_s": "0.005", "retries": "2", "ssh_cidr": "198.51.100.7"}}}))
    (cfg / "prices.yaml").write_text(yaml.safe_dump(PRICES, allow_unicode=True))
    yield f
    f.stop()
    assert f.unknown == []


def test_provision_status_teardown(fake, cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich truncates the address column at 80
    r = cli("provision", "--yes", "sakura:e2e-h100", "x4", "--name", "e2e", "--no-bootstrap", "--ttl", "4h")
    assert r.code == 0, r.err
    said = " ".join((r.out + r.err).split())
    assert "billed at most ¥23,100 a day and ¥385,000 a month per machine" in said
    assert "mounted at /scratch and loses its contents whenever a server powers off" in said
    assert {k: len(v) for k, v in fake.user_resources("gpuplan-cluster=e2e").items()} == {
        "servers": 4, "disks": 4, "archives": 0, "switches": 1, "packet_filters": 1}
    # issue 22: SSH only from the configured source; the nodes on the cluster's private LAN
    (pf,) = fake.packet_filters.values()
    assert pf["Expression"][0]["SourceNetwork"] == "198.51.100.7/32"
    assert all(f"gpuplan-owner={OWNER}" in s["Tags"] for s in fake.servers.values())
    # every server booted with its own pinned host key in cloud-init
    keys = {yaml.safe_load(ud)["ssh_keys"]["ed25519_public"] for ud in fake.boot_user_data.values()}
    assert len(keys) == 4

    addresses = {s["Interfaces"][0]["IPAddress"] for s in fake.servers.values()}
    r = cli("status", "e2e")
    assert r.code == 0, r.err
    assert all(a in r.out for a in addresses) and r.out.count("running") == 4
    r = cli("status", "e2e", "--format", "json")
    assert r.code == 0, r.err
    [cluster] = json.loads(r.out)
    nodes = cluster["nodes"]
    assert sorted(n["name"] for n in nodes) == ["e2e-0", "e2e-1", "e2e-2", "e2e-3"]
    assert {n["public_ip"] for n in nodes} == addresses
    assert {n["id"] for n in nodes} == set(fake.servers)
    assert sorted(n["private_ip"] for n in nodes) == [f"192.168.100.{i}" for i in (11, 12, 13, 14)]
    assert cluster["price_jpy_per_hour"] == "990" and 4 * 3600 - 60 < cluster["ttl_left_s"] <= 4 * 3600

    r = cli("teardown", "--yes", "e2e")
    assert r.code == 0, r.err
    assert fake.user_resources() == {"servers": [], "disks": [], "archives": [], "switches": [], "packet_filters": []}


def test_failed_create_is_rolled_back(fake, cli):
    fake.fail_server_create_at = 3
    r = cli("provision", "--yes", "sakura:e2e-h100", "x4", "--name", "e2e", "--no-bootstrap")
    assert r.code == 3
    assert "injected failure" in r.err and "Traceback" not in r.err
    assert fake.user_resources() == {"servers": [], "disks": [], "archives": [], "switches": [], "packet_filters": []}


def test_missing_credentials_is_one_line_exit_2(fake, cli, monkeypatch):
    monkeypatch.delenv("SAKURACLOUD_ACCESS_TOKEN_SECRET")
    monkeypatch.setenv("HOME", str(fake_home := os.path.join(os.environ["GPUPLAN_HOME"], "home")))
    os.makedirs(fake_home)
    r = cli("provision", "--yes", "sakura:e2e-h100", "x1", "--name", "e2e", "--no-bootstrap")
    assert r.code == 2
    assert "SAKURACLOUD_ACCESS_TOKEN_SECRET" in r.err and "Traceback" not in r.err
    assert fake.servers == {}


def test_kill_9_during_create_then_teardown_removes_everything(fake, gpuplan_home):
    """A CLI process killed mid-create leaves tagged servers; `teardown` finds and removes them."""
    fake.delay_s = 0.5  # disks take long enough to copy that the kill lands mid-create
    env = {**os.environ}
    proc = subprocess.Popen([sys.executable, "-m", "gpuplan", "provision", "--yes", "sakura:e2e-h100", "x3",
                             "--name", "e2e", "--no-bootstrap"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while len(fake.disks) < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(fake.servers) == 3  # the kill landed after the servers were made
    r = subprocess.run([sys.executable, "-m", "gpuplan", "teardown", "--yes", "e2e"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert fake.user_resources() == {"servers": [], "disks": [], "archives": [], "switches": [], "packet_filters": []}


def test_sweep_after_state_loss_finds_servers_by_owner_tag(fake, cli, gpuplan_home):
    r = cli("provision", "--yes", "sakura:e2e-h100", "x2", "--name", "lost", "--no-bootstrap")
    assert r.code == 0, r.err
    (gpuplan_home / "state" / "state.db").unlink()  # the state is gone; the tags remain
    r = cli("teardown", "--yes", "--sweep", "--force", "--provider", "sakura")
    assert r.code == 0, r.err
    assert "deleted 6 stray resources" in r.out  # 2 servers + 2 disks + the switch + the packet filter
    assert fake.user_resources() == {"servers": [], "disks": [], "archives": [], "switches": [], "packet_filters": []}
