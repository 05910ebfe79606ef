"""The Sakura provider against the HTTP fake of the Sakura Cloud API (tests/support/sakura_fake.py)."""

import json

import pytest
import yaml

from gpuplan.errors import AuthMissing, CapacityUnavailable, ProviderError, QuotaExceeded, UsageError
from gpuplan.fleet import lifecycle
from gpuplan.fleet.provider import HostKey, NodeSpec, Resource
from gpuplan.providers.sakura import SakuraProvider
from support.sakura_fake import SakuraFake, provider_for

TAGS = {"gpuplan-cluster": "demo", "gpuplan-owner": "tester"}
NAMES = ["demo-0", "demo-1", "demo-2", "demo-3"]
H100 = "高火力 VRT 24Core-240GB-H100x1"
PRIVATE = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"


@pytest.fixture
def fake():
    f = SakuraFake()
    f.root = f.start()
    yield f
    f.stop()
    assert f.unknown == [], "the provider called paths the fake does not implement"


@pytest.fixture
def prov(fake):
    return provider_for(fake, fake.root)


def spec(names=NAMES, size=H100, region="is1a", image=None, ttl_s=None, tags=TAGS, ssh_cidr="203.0.113.5/32"):
    keys = {n: HostKey(PRIVATE, f"ssh-ed25519 AAAAhost{n}") for n in names}
    return NodeSpec(cluster=tags.get("gpuplan-cluster", "x"), size=size, region=region, ssh_user="ubuntu",
                    ssh_public_key="ssh-ed25519 AAAAlogin gpuplan-demo", host_keys=keys, image=image,
                    ttl_s=ttl_s, tags=tags, ssh_cidr=ssh_cidr)


def owned(fake, tag="gpuplan-cluster=demo"):
    return {k: len(v) for k, v in fake.user_resources(tag).items()}


def test_create_four_then_list_finds_four_servers_and_their_disks(fake, prov):
    made = prov.create(spec(), NAMES)
    assert sorted(i.name for i in made) == NAMES
    found = prov.list("is1a", {"gpuplan-cluster": "demo"})
    instances = sorted((r for r in found if r.kind == "instance"), key=lambda r: r.name)
    disks = [r for r in found if r.kind == "disk"]
    assert [r.name for r in instances] == NAMES
    assert sorted(r.id for r in instances) == sorted(i.id for i in made)
    assert sorted(r.tags["gpuplan-node"] for r in disks) == NAMES
    assert len(found) == 10  # 4 servers, 4 disks, the cluster's switch and packet filter
    assert sorted(r.kind for r in found if r.kind not in ("instance", "disk")) == ["packet-filter", "switch"]
    for r in found:
        assert r.tags["gpuplan-owner"] == "tester" and r.region == "is1a"
    # what the fake holds: the H100 plan, tags as "k=v" strings, a 250 GB SSD (128 rounded up) from Ubuntu
    server = fake.servers[made[0].id]
    assert server["ServerPlan"]["Name"] == "GPUプラン/24Core-240GB-1GPU"
    assert "gpuplan-node=demo-0" in server["Tags"] and "gpuplan-cluster=demo" in server["Tags"]
    disk = fake.disks[server["_disks"][0]]
    assert disk["SizeMB"] == 250 * 1024 and disk["Plan"] == {"ID": 4}
    assert fake.archives[disk["SourceArchive"]["ID"]]["Name"].startswith("Ubuntu")
    config = fake.disk_config[disk["ID"]]
    assert config["SSHKeys"] == [{"PublicKey": "ssh-ed25519 AAAAlogin gpuplan-demo"}]
    assert config["HostName"] == "demo-0"


def test_tag_filter_goes_as_json_in_the_query_string(fake, prov):
    prov.list("is1a", {"gpuplan-cluster": "demo"})
    gets = [q for m, _, p, q in fake.requests if m == "GET" and p == "server"]
    assert gets and gets[0]["Filter"] == {"Tags": ["gpuplan-cluster=demo"]}


def test_wait_ready_gives_each_node_its_address(fake, prov):
    made = prov.create(spec(), NAMES)
    ready = prov.wait_ready("is1a", [i.id for i in made])
    assert [i.status for i in ready] == ["running"] * 4
    assert len({i.public_ip for i in ready}) == 4
    assert all(i.public_ip.startswith("203.0.113.") for i in ready)
    assert all(fake.servers[i.id]["Instance"]["Status"] == "up" for i in ready)


def test_create_again_with_the_same_names_returns_the_same_servers_and_makes_nothing(fake, prov):
    first = prov.create(spec(), NAMES)
    prov.wait_ready("is1a", [i.id for i in first])
    posts = fake.count("POST", "server"), fake.count("POST", "disk"), fake.count("PUT", "server/")
    again = prov.create(spec(), NAMES)
    assert [i.id for i in again] == [i.id for i in first]
    assert (fake.count("POST", "server"), fake.count("POST", "disk"), fake.count("PUT", "server/")) == posts
    assert owned(fake) == {"servers": 4, "disks": 4, "archives": 0, "switches": 1, "packet_filters": 1}


def test_delete_twice_leaves_nothing_in_the_fake(fake, prov):
    made = prov.create(spec(), NAMES)
    prov.wait_ready("is1a", [i.id for i in made])
    found = prov.list("is1a", {"gpuplan-cluster": "demo"})
    prov.delete("is1a", found)
    prov.delete("is1a", found)  # everything is 404 now: still no error
    assert owned(fake) == {"servers": 0, "disks": 0, "archives": 0, "switches": 0, "packet_filters": 0}
    assert prov.list("is1a", {"gpuplan-cluster": "demo"}) == []
    # running servers were hard-stopped before deletion (the API refuses to delete a running one)
    assert fake.count("DELETE", "server/") >= 8


def test_ttl_and_host_key_go_into_cloud_init_user_data(fake):
    prov = provider_for(fake, fake.root, wall_clock=lambda: 1_800_000_000.0)
    made = prov.create(spec(["demo-0"], ttl_s=4 * 3600), ["demo-0"])
    data = yaml.safe_load(fake.boot_user_data[made[0].id])
    assert data["ssh_deletekeys"] is True
    assert data["ssh_keys"]["ed25519_private"] == PRIVATE
    assert data["ssh_keys"]["ed25519_public"] == "ssh-ed25519 AAAAhostdemo-0"
    assert data["ssh_authorized_keys"] == ["ssh-ed25519 AAAAlogin gpuplan-demo"]
    script = data["bootcmd"][0][2]
    assert f"{1_800_000_000 + 4 * 3600} - $(date +%s)" in script and "systemctl poweroff" in script


def test_capture_image_then_create_two_from_it(fake, prov):
    builder = prov.create(spec(["demo-0"]), ["demo-0"])[0]
    prov.wait_ready("is1a", [builder.id])
    image = prov.capture_image("is1a", builder.id, "cuda-img", {"gpuplan-image": "cuda-img", "gpuplan-owner": "tester"})
    archive = fake.archives[image.id]
    assert archive["Availability"] == "available" and archive["Scope"] == "user"
    assert archive["SourceDisk"]["ID"] == fake.servers[builder.id]["_disks"][0]
    assert fake.servers[builder.id]["Instance"]["Status"] == "down"  # stopped for a consistent copy

    workers = {"gpuplan-cluster": "w", "gpuplan-owner": "tester"}
    made = prov.create(spec(["w-0", "w-1"], image=image.id, tags=workers), ["w-0", "w-1"])
    prov.wait_ready("is1a", [i.id for i in made])
    for i in made:
        assert fake.disks[fake.servers[i.id]["_disks"][0]]["SourceArchive"]["ID"] == image.id
    # the image has no cluster tag: a cluster teardown keeps it, an owner listing finds it as kind "image"
    assert [r for r in prov.list("is1a", {"gpuplan-cluster": "w"}) if r.kind == "image"] == []
    images = [r for r in prov.list("is1a", {"gpuplan-owner": "tester"}) if r.kind == "image"]
    assert [(r.id, r.name) for r in images] == [(image.id, "cuda-img")]
    prov.delete("is1a", prov.list("is1a", {"gpuplan-owner": "tester"}))
    assert owned(fake, "gpuplan-owner=tester") == {"servers": 0, "disks": 0, "archives": 0, "switches": 0, "packet_filters": 0}


def test_third_of_four_creates_failing_raises_and_the_rest_are_found_and_removed(fake, prov):
    fake.fail_server_create_at = 3
    with pytest.raises(ProviderError) as exc:
        prov.create(spec(), NAMES)
    assert "HTTP 500" in str(exc.value) and "injected failure" in str(exc.value) and "\n" not in str(exc.value)
    found = prov.list("is1a", {"gpuplan-cluster": "demo"})
    assert len([r for r in found if r.kind == "instance"]) == 3
    assert owned(fake) == {"servers": 3, "disks": 3, "archives": 0, "switches": 1, "packet_filters": 1}
    prov.delete("is1a", found)
    assert owned(fake) == {"servers": 0, "disks": 0, "archives": 0, "switches": 0, "packet_filters": 0}


def test_a_half_made_node_is_completed_on_the_next_create(fake):
    prov = provider_for(fake, fake.root, config={"retries": "0"})
    fake.fail_503(1, "POST", "disk")
    with pytest.raises(CapacityUnavailable):
        prov.create(spec(["demo-0", "demo-1"]), ["demo-0", "demo-1"])
    assert owned(fake) == {"servers": 2, "disks": 1, "archives": 0, "switches": 1, "packet_filters": 1}
    made = prov.create(spec(["demo-0", "demo-1"]), ["demo-0", "demo-1"])
    assert fake.count("POST", "server") == 2  # no duplicate server
    ready = prov.wait_ready("is1a", [i.id for i in made])
    assert owned(fake) == {"servers": 2, "disks": 2, "archives": 0, "switches": 1, "packet_filters": 1}
    assert all(i.public_ip for i in ready)


def test_503_is_retried_with_backoff_then_reported_as_capacity(fake):
    sleeps = []
    prov = provider_for(fake, fake.root, sleep=sleeps.append)
    fake.fail_503(2, "POST", "server")
    prov.create(spec(["demo-0"]), ["demo-0"])
    assert owned(fake)["servers"] == 1
    assert sleeps[:2] == [0.001, 0.002]  # exponential backoff on the two 503s
    fake.fail_503(2, "PUT", None, status=423)  # locked while another operation runs: retried too
    prov.create(spec(["demo-2"]), ["demo-2"])
    assert owned(fake)["servers"] == 2 and len(fake.boot_user_data) == 2
    fake.fail_503(100, "POST", "server")
    with pytest.raises(CapacityUnavailable, match="HTTP 503.*another zone"):
        prov.create(spec(["demo-1"]), ["demo-1"])
    assert owned(fake)["servers"] == 2


def test_account_limit_409_is_quota_exceeded_and_what_was_made_can_be_removed(fake, prov):
    fake.server_limit = 2
    with pytest.raises(QuotaExceeded) as exc:
        prov.create(spec(), NAMES)
    assert "limit_count_in_account" in str(exc.value) and "Sakura support" in str(exc.value)
    found = prov.list("is1a", {"gpuplan-cluster": "demo"})
    assert len([r for r in found if r.kind == "instance"]) == 2
    prov.delete("is1a", found)
    assert owned(fake) == {"servers": 0, "disks": 0, "archives": 0, "switches": 0, "packet_filters": 0}


def test_configured_server_quota_blocks_preflight_naming_it_and_how_to_raise(fake):
    prov = provider_for(fake, fake.root, config={"quota_servers": "5"})
    prov.create(spec(["old-0", "old-1"], tags={"gpuplan-cluster": "old", "gpuplan-owner": "x"}), ["old-0", "old-1"])
    [tier] = prov.quota("is1a", H100)
    assert (tier.name, tier.unit, tier.limit, tier.used, tier.free) == ("servers", "servers", 5, 2, 3)
    req = lifecycle.ProvisionRequest("sakura", H100, "is1a", 4, "demo", 1, None)
    with pytest.raises(QuotaExceeded) as exc:
        lifecycle.preflight(prov, req)
    assert "'servers'" in str(exc.value) and "quota_servers" in str(exc.value) and "サーバ数" in str(exc.value)
    assert owned(fake) == {"servers": 0, "disks": 0, "archives": 0, "switches": 0, "packet_filters": 0}
    lifecycle.preflight(prov, lifecycle.ProvisionRequest("sakura", H100, "is1a", 3, "demo", 1, None))


def test_without_quota_config_there_is_no_tier(prov):
    assert prov.quota("is1a", "h100x1") == []


def test_missing_credentials_name_both_variables(tmp_path):
    prov = SakuraProvider({}, env={}, home=tmp_path)
    with pytest.raises(AuthMissing) as exc:
        prov.check_credentials()
    assert "SAKURACLOUD_ACCESS_TOKEN and SAKURACLOUD_ACCESS_TOKEN_SECRET" in str(exc.value)
    with pytest.raises(AuthMissing):
        prov.create(spec(["demo-0"]), ["demo-0"])


def test_usacloud_profile_supplies_key_and_zone(fake, tmp_path):
    prof = tmp_path / ".usacloud" / "work"
    prof.mkdir(parents=True)
    (prof / "config.json").write_text(json.dumps({"AccessToken": fake.token, "AccessTokenSecret": fake.secret,
                                                  "Zone": "is1b"}))
    (tmp_path / ".usacloud" / "current").write_text("work\n")
    prov = SakuraProvider({}, env={"SAKURACLOUD_API_ROOT_URL": fake.root}, home=tmp_path, poll_s=0.005)
    prov.check_credentials()
    made = prov.create(spec(["demo-0"], region=""), ["demo-0"])
    assert fake.servers[made[0].id]["Zone"]["Name"] == "is1b"


def test_rejected_key_is_auth_missing(fake):
    prov = provider_for(fake, fake.root)
    prov._env = {**fake.env(fake.root), "SAKURACLOUD_ACCESS_TOKEN_SECRET": "wrong"}
    with pytest.raises(AuthMissing, match="HTTP 401 unauthorized.*SAKURACLOUD_ACCESS_TOKEN"):
        prov.list("is1a", TAGS)


def test_unknown_size_lists_the_gpu_plans(fake, prov):
    with pytest.raises(UsageError) as exc:
        prov.create(spec(size="a100x8"), NAMES)
    msg = str(exc.value)
    assert "'a100x8'" in msg and "GPUプラン/4Core-56GB-1GPU" in msg and "GPUプラン/24Core-240GB-1GPU" in msg
    assert "プラン/2Core-4GB" not in msg.replace("GPUプラン", "")
    assert owned(fake, None)["servers"] == 0


def test_gpu_sizes_outside_ishikari_say_where_they_are(fake, prov):
    with pytest.raises(UsageError, match="only in is1a"):
        prov.create(spec(size="v100x1", region="tk1a"), ["demo-0"])


@pytest.mark.parametrize("size,plan,vcpus", [
    ("h100x1", "GPUプラン/24Core-240GB-1GPU", 24),
    ("高火力 VRT 24Core-240GB-H100x1", "GPUプラン/24Core-240GB-1GPU", 24),
    ("24Core-240GB-H100x1", "GPUプラン/24Core-240GB-1GPU", 24),
    ("v100x1", "GPUプラン/4Core-56GB-1GPU", 4),
    ("高火力 VRT 4Core-56GB-V100x1", "GPUプラン/4Core-56GB-1GPU", 4),
    ("GPUプラン/4Core-56GB-1GPU", "GPUプラン/4Core-56GB-1GPU", 4),
])
def test_size_names_resolve_to_the_right_plan(fake, prov, size, plan, vcpus):
    assert prov.vcpus("is1a", size) == vcpus
    made = prov.create(spec(["demo-0"], size=size), ["demo-0"])
    assert fake.servers[made[0].id]["ServerPlan"]["Name"] == plan


def test_other_api_errors_are_one_line_with_status_code_and_message(fake, prov):
    with pytest.raises(ProviderError) as exc:
        prov.create(spec(["demo-0"], image="999999999999"), ["demo-0"])
    msg = str(exc.value)
    assert "POST disk" in msg and "HTTP 404" in msg and "not_found" in msg and "source archive" in msg
    assert "\n" not in msg


def test_wait_ready_times_out_with_a_clear_line(fake):
    ticks = iter(range(0, 10_000, 100))
    prov = provider_for(fake, fake.root, clock=lambda: float(next(ticks)))
    made = prov.create(spec(["demo-0"]), ["demo-0"])
    fake.delay_s = 3600  # never boots
    fake.servers[made[0].id]["Instance"] = {"Status": "down"}
    fake._due.clear()
    with pytest.raises(ProviderError, match=r"sakura: machine\(s\) \d+ not ready after 300s \(booting: check the control panel\)"):
        prov.wait_ready("is1a", [made[0].id], timeout_s=300)


def test_delete_refuses_kinds_it_does_not_own(prov):
    with pytest.raises(ProviderError, match="kind nic"):
        prov.delete("is1a", [Resource("nic", "1", "is1a")])


def test_bad_config_number_is_a_usage_error():
    with pytest.raises(UsageError, match="providers.sakura.poll_s .* must be a number"):
        SakuraProvider({"poll_s": "soon"}, env={})


def test_disk_size_from_config_rounds_up_to_an_offered_size(fake):
    prov = provider_for(fake, fake.root, config={"disk_gb": "300"})
    made = prov.create(spec(["demo-0"]), ["demo-0"])
    assert fake.disks[fake.servers[made[0].id]["_disks"][0]]["SizeMB"] == 500 * 1024


# --- issue 22: the cluster's network (packet filter, switch) and scratch ---------------------------

def test_two_node_cluster_gets_a_switch_and_a_packet_filter_and_teardown_removes_both(fake, prov):
    made = prov.create(spec(NAMES[:2]), NAMES[:2])
    ready = {i.name: i for i in prov.wait_ready("is1a", [i.id for i in made])}
    (switch,) = fake.switches.values()
    (pf,) = fake.packet_filters.values()
    assert "gpuplan-cluster=demo" in switch["Tags"] and "gpuplan-owner=tester" in switch["Tags"]
    assert pf["Description"].split()[1:] == ["gpuplan-cluster=demo", "gpuplan-owner=tester"]
    # SSH only from the caller, then replies and ICMP; everything else dropped
    assert pf["Expression"][0] == {"Protocol": "tcp", "SourceNetwork": "203.0.113.5/32", "DestinationPort": "22",
                                   "Action": "allow", "Description": "SSH from gpuplan's caller"}
    assert pf["Expression"][-1]["Protocol"] == "ip" and pf["Expression"][-1]["Action"] == "deny"
    assert not [r for r in pf["Expression"] if r.get("DestinationPort") == "22" and r.get("SourceNetwork") != "203.0.113.5/32"]
    for inst in made:
        shared, private = fake.nics(inst.id)
        assert shared["Switch"] == {"Scope": "shared"} and shared["PacketFilter"]["ID"] == pf["ID"]
        assert private["Switch"]["ID"] == switch["ID"] and private["PacketFilter"] is None
    # the private LAN addresses are what torchrun and the batch engine use
    assert (ready["demo-0"].private_ip, ready["demo-1"].private_ip) == ("192.168.100.11", "192.168.100.12")
    user_data = yaml.safe_load(fake.boot_user_data[ready["demo-1"].id])
    netplan = yaml.safe_load(user_data["write_files"][0]["content"])
    assert netplan["network"]["ethernets"]["eth1"]["addresses"] == ["192.168.100.12/24"]
    found = prov.list("is1a", {"gpuplan-cluster": "demo"})
    assert sorted(r.kind for r in found) == ["disk", "disk", "instance", "instance", "packet-filter", "switch"]
    # teardown's order: machines first, then the rest (the switch and filter refuse while servers use them)
    prov.delete("is1a", [r for r in found if r.kind == "instance"])
    prov.delete("is1a", [r for r in found if r.kind != "instance"])
    assert fake.switches == {} and fake.packet_filters == {}
    assert prov.list("is1a", {"gpuplan-cluster": "demo"}) == []


def test_one_node_has_a_packet_filter_but_no_switch(fake, prov):
    made = prov.create(spec(NAMES[:1]), NAMES[:1])
    assert fake.switches == {} and len(fake.packet_filters) == 1
    assert [n["Switch"] for n in fake.nics(made[0].id)] == [{"Scope": "shared"}]
    assert prov.wait_ready("is1a", [made[0].id])[0].private_ip is None


def test_no_ssh_source_refuses_before_anything_is_made(fake, prov):
    with pytest.raises(UsageError, match="providers.sakura.ssh_cidr.*--ssh-from"):
        prov.create(spec(ssh_cidr=None), NAMES)
    assert fake.servers == {} and fake.packet_filters == {}
    # config ssh_cidr is the fallback
    provider_for(fake, fake.root, {"ssh_cidr": "198.51.100.7"}).create(spec(NAMES[:1], ssh_cidr=None), NAMES[:1])
    (pf,) = fake.packet_filters.values()
    assert pf["Expression"][0]["SourceNetwork"] == "198.51.100.7/32"


def test_a_rerun_from_a_new_address_updates_the_filter_and_makes_nothing_twice(fake, prov):
    prov.create(spec(NAMES[:2]), NAMES[:2])
    prov.create(spec(NAMES[:2], ssh_cidr="198.51.100.9/32"), NAMES[:2])
    (pf,) = fake.packet_filters.values()
    assert pf["Expression"][0]["SourceNetwork"] == "198.51.100.9/32"
    assert (len(fake.servers), len(fake.switches), fake.count("POST", "packetfilter")) == (2, 1, 1)


def test_the_local_nvme_is_mounted_at_scratch_on_every_boot(fake, prov):
    made = prov.create(spec(NAMES[:1]), NAMES[:1])
    data = yaml.safe_load(fake.boot_user_data[made[0].id])
    script = data["bootcmd"][-1][2]
    assert "/dev/nvme*n1" in script and "mkfs.ext4" in script and "mount" in script and "/scratch" in script
    assert "lost at power-off" in prov.wait_ready("is1a", [made[0].id])[0].extra["scratch"]
