"""The Azure provider against the in-process fake ARM (tests/support/azure_fake.py): real SDK
clients, real serializers and pollers, a stateful fake behind the HTTP transport."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from datetime import datetime, timezone

import pytest
import requests

from gpuplan.errors import AuthMissing, CapacityUnavailable, ProviderError, QuotaExceeded, UsageError
from gpuplan.fleet.provider import HostKey, NodeSpec
from support.azure_fake import SUBSCRIPTION, FakeARM, make_provider

T4 = "Standard_NC4as_T4_v3"
REGION = "westus2"
OWNER = "alice-laptop"


def spec(cluster="demo", count=4, size=T4, **kw) -> NodeSpec:
    kw.setdefault("ssh_cidr", "198.51.100.7/32")  # the caller's address, as gpuplan resolves it
    names = [f"{cluster}-{i}" for i in range(count)]
    keys = {n: HostKey(f"-----BEGIN OPENSSH PRIVATE KEY-----\nkey-of-{n}\n-----END OPENSSH PRIVATE KEY-----\n",
                       f"ssh-ed25519 AAAAhost{n}") for n in names}
    return NodeSpec(cluster=cluster, size=size, region=REGION, ssh_user="azureuser",
                    ssh_public_key="ssh-ed25519 AAAAlogin gpuplan-demo", host_keys=keys,
                    tags={"gpuplan-cluster": cluster, "gpuplan-owner": OWNER}, **kw)


def names(cluster="demo", count=4) -> list[str]:
    return [f"{cluster}-{i}" for i in range(count)]


@pytest.fixture
def fake() -> FakeARM:
    return FakeARM()


@pytest.fixture
def prov(fake):
    return make_provider(fake)


def kinds(resources) -> Counter:
    return Counter(r.kind for r in resources)


def vm_json(fake, name, group="gpuplan-demo"):
    return fake.get(f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{group}/providers/Microsoft.Compute/virtualMachines/{name}")


def test_create_four_then_list_finds_them_and_everything_they_own(fake, prov):
    made = prov.create(spec(), names())

    assert [i.name for i in made] == names()
    assert len({i.public_ip for i in made}) == 4 and all(i.public_ip and i.private_ip for i in made)
    found = prov.list(REGION, {"gpuplan-cluster": "demo"})
    assert sorted(r.name for r in found if r.kind == "instance") == names()
    assert kinds(found) == Counter({"instance": 4, "disk": 4, "nic": 4, "public-ip": 4, "security-group": 1,
                                    "network": 1, "resource-group": 1})
    assert all(r.tags["gpuplan-cluster"] == "demo" and r.tags["gpuplan-owner"] == OWNER for r in found)
    assert {r.id for r in found} == {rid for rid in fake.held() if "/subnets/" not in rid}
    # The SDK really polled the VM creations (201 Creating + Azure-AsyncOperation).
    assert sum(1 for m, p in fake.calls if m == "GET" and "/operations/" in p) >= 4


def test_vm_body_is_ssh_key_only_with_cascading_deletes_and_host_key(fake, prov):
    prov.create(spec(), names())

    props = vm_json(fake, "demo-2")["properties"]
    assert vm_json(fake, "demo-2")["tags"] == {"gpuplan-cluster": "demo", "gpuplan-owner": OWNER, "gpuplan-node": "demo-2"}
    assert props["hardwareProfile"]["vmSize"] == T4
    assert props["storageProfile"]["osDisk"]["deleteOption"] == "Delete"
    assert props["storageProfile"]["osDisk"]["diskSizeGB"] == 128
    assert props["storageProfile"]["imageReference"]["offer"] == "ubuntu-24_04-lts"
    assert props["networkProfile"]["networkInterfaces"][0]["properties"]["deleteOption"] == "Delete"
    linux = props["osProfile"]["linuxConfiguration"]
    assert linux["disablePasswordAuthentication"] is True
    assert linux["ssh"]["publicKeys"][0]["keyData"] == "ssh-ed25519 AAAAlogin gpuplan-demo"
    import yaml

    cloud = fake.custom_data[vm_json(fake, "demo-2")["id"].lower()]
    assert cloud.startswith("#cloud-config\n")
    doc = yaml.safe_load(cloud)
    assert doc["ssh_deletekeys"] is True
    assert doc["ssh_keys"]["ed25519_public"] == "ssh-ed25519 AAAAhostdemo-2"
    assert "key-of-demo-2" in doc["ssh_keys"]["ed25519_private"]
    nsg = fake.held_of("Microsoft.Network/networkSecurityGroups")[0]["properties"]["securityRules"][0]["properties"]
    assert (nsg["destinationPortRange"], nsg["sourceAddressPrefix"], nsg["access"]) == ("22", "198.51.100.7/32", "Allow")
    assert "customData" not in props["osProfile"]  # the one-time host key is not readable back through ARM


def test_ssh_source_from_config_narrows_the_nsg(fake):
    prov = make_provider(fake, {"ssh_source": "203.0.113.5"})
    made = prov.create(spec(count=1, ssh_cidr=None), names(count=1))

    rule = fake.held_of("Microsoft.Network/networkSecurityGroups")[0]["properties"]["securityRules"][0]["properties"]
    assert rule["sourceAddressPrefix"] == "203.0.113.5/32"
    assert "note" not in made[0].extra


def test_delete_twice_leaves_nothing_in_the_fake(fake, prov):
    prov.create(spec(ttl_s=3600), names())
    found = prov.list(REGION, {"gpuplan-cluster": "demo"})

    prov.delete(REGION, found)
    prov.delete(REGION, found)

    assert fake.held() == []
    assert prov.list(REGION, {"gpuplan-cluster": "demo"}) == []


def test_delete_without_the_resource_group_orders_dependents_first(fake, prov):
    prov.create(spec(count=2, ttl_s=600), names(count=2))
    found = prov.list(REGION, {"gpuplan-cluster": "demo"})

    # The fake refuses a NIC still used by a VM, a public IP still on a NIC, an NSG or subnet in use.
    prov.delete(REGION, [r for r in found if r.kind != "resource-group"])

    assert fake.held() == [f"/subscriptions/{SUBSCRIPTION}/resourceGroups/gpuplan-demo"]


def test_wait_ready_returns_running_vms_with_addresses(fake, prov):
    made = prov.create(spec(count=2), names(count=2))

    ready = prov.wait_ready(REGION, [i.id for i in made], timeout_s=5)

    assert [(i.name, i.status) for i in ready] == [("demo-0", "running"), ("demo-1", "running")]
    pips = {p["name"]: p["properties"]["ipAddress"] for p in fake.held_of("Microsoft.Network/publicIPAddresses")}
    assert [i.public_ip for i in ready] == [pips["demo-0-ip"], pips["demo-1-ip"]]


def test_wait_ready_on_a_deallocated_vm_says_so(fake, prov):
    made = prov.create(spec(count=1), names(count=1))
    fake.power[made[0].id.lower()] = "deallocated"

    with pytest.raises(ProviderError, match="demo-0 is deallocated"):
        prov.wait_ready(REGION, [made[0].id], timeout_s=5)


def test_ttl_becomes_an_auto_shutdown_schedule_at_the_utc_minute(fake):
    clock = lambda: datetime(2026, 11, 22, 10, 15, 30, tzinfo=timezone.utc)  # noqa: E731
    prov = make_provider(fake, clock=clock)

    prov.create(spec(count=2, ttl_s=4 * 3600), names(count=2))

    schedules = sorted(fake.held_of("Microsoft.DevTestLab/schedules"), key=lambda s: s["name"])
    assert [s["name"] for s in schedules] == ["shutdown-computevm-demo-0", "shutdown-computevm-demo-1"]
    p = schedules[0]["properties"]
    assert (p["dailyRecurrence"]["time"], p["timeZoneId"], p["status"]) == ("1416", "UTC", "Enabled")
    assert p["targetResourceId"] == vm_json(fake, "demo-0")["id"]
    assert "2026-11-22T14:15:30Z" in fake.custom_data[vm_json(fake, "demo-0")["id"].lower()]


def test_no_ttl_no_schedule(fake, prov):
    prov.create(spec(count=1), names(count=1))
    assert fake.held_of("Microsoft.DevTestLab/schedules") == []


def test_capture_image_then_create_two_from_it_and_teardown_keeps_the_image(fake, prov):
    builder = prov.create(spec("build", count=1), names("build", 1))[0]

    image = prov.capture_image(REGION, builder.id, "cuda-base", {"gpuplan-owner": OWNER, "gpuplan-cluster": "build"})

    assert image.id.startswith(f"/subscriptions/{SUBSCRIPTION}/resourceGroups/gpuplan-images-westus2/")
    assert builder.id.lower() in fake.generalized and fake.power[builder.id.lower()] == "deallocated"
    assert prov.capture_image(REGION, builder.id, "cuda-base", {"gpuplan-owner": OWNER}).id == image.id
    # A deallocated, generalized VM still counts against quota.
    assert {q.name: q.used for q in prov.quota(REGION, T4)} == {"standardNCASv3_T4Family": 4, "cores": 4}

    workers = prov.create(spec("work", count=2, image=image.id), names("work", 2))

    assert [w.name for w in workers] == ["work-0", "work-1"]
    ref = vm_json(fake, "work-1", "gpuplan-work")["properties"]["storageProfile"]["imageReference"]
    assert ref == {"id": image.id}
    images = [r for r in prov.list(REGION, {"gpuplan-owner": OWNER}) if r.kind == "image"]
    assert [(r.name, r.tags.get("gpuplan-image"), "gpuplan-cluster" in r.tags) for r in images] == [("cuda-base", "cuda-base", False)]

    for cluster in ("build", "work"):
        prov.delete(REGION, prov.list(REGION, {"gpuplan-cluster": cluster}))
    assert [r.id for r in prov.list(REGION, {"gpuplan-owner": OWNER})] == [image.id]

    prov.delete(REGION, images)
    assert fake.held() == []


def test_owner_listing_never_offers_the_images_group_for_deletion(fake, prov):
    vm = prov.create(spec(count=1), names(count=1))[0]
    prov.capture_image(REGION, vm.id, "img", {"gpuplan-owner": OWNER})

    found = prov.list(REGION, {"gpuplan-owner": OWNER})

    assert [r.name for r in found if r.kind == "resource-group"] == ["gpuplan-demo"]


def test_quota_reports_family_and_regional_tiers_with_how_to_raise(fake, prov):
    fake.limits["standardNCASv3_T4Family"] = 8
    prov.create(spec(count=1), names(count=1))

    tiers = {q.name: q for q in prov.quota(REGION, T4)}

    assert (tiers["standardNCASv3_T4Family"].limit, tiers["standardNCASv3_T4Family"].used) == (8, 4)
    assert (tiers["cores"].limit, tiers["cores"].used, tiers["cores"].free) == (20, 4, 16)
    assert "Usage + quotas" in tiers["cores"].how_to_raise and "az quota create --resource-name cores" in tiers["cores"].how_to_raise
    assert prov.vcpus(REGION, T4) == 4 and prov.vcpus(REGION, "Standard_NC24ads_A100_v4") == 24


def test_family_quota_exceeded_names_it_and_creates_nothing(fake, prov):
    with pytest.raises(QuotaExceeded) as exc:
        prov.create(spec(count=6), names(count=6))

    assert str(exc.value).startswith(
        "6x Standard_NC4as_T4_v3 needs 24 vCPUs of quota 'standardNCASv3_T4Family' (Standard NCASv3_T4 Family vCPUs in "
        "westus2) in westus2, but only 20 are free (limit 20, used 0); "
        "raise it: Azure portal > Subscriptions > Usage + quotas, or `az quota create --resource-name standardNCASv3_T4Family")
    assert "value=24" in str(exc.value)
    assert fake.held() == [] and fake.vm_puts == 0


def test_regional_quota_exceeded_names_cores(fake, prov):
    fake.limits.update({"standardNCADSA100v4Family": 100, "cores": 20})

    with pytest.raises(QuotaExceeded, match=r"needs 24 vCPUs of quota 'cores' .* in westus2, but only 20 are free \(limit 20, used 0\)"):
        prov.create(spec(count=1, size="Standard_NC24ads_A100_v4"), names(count=1))
    assert fake.held() == []


def test_arm_409_quota_error_during_create_becomes_quota_exceeded(fake, prov, monkeypatch):
    # Quota consumed by someone else between the preflight and the PUT: ARM answers 409 OperationNotAllowed.
    monkeypatch.setattr(prov, "check_quota", lambda *a, **k: (0, []))

    with pytest.raises(QuotaExceeded, match="exceeding approved standardNCASv3_T4Family Cores quota.*Usage \\+ quotas"):
        prov.create(spec(count=6), names(count=6))
    assert sorted(r.name for r in prov.list(REGION, {"gpuplan-cluster": "demo"}) if r.kind == "instance") == names(count=5)


def test_unknown_size_is_a_usage_error_naming_it(fake, prov):
    with pytest.raises(UsageError, match="Standard_NC999") as exc:
        prov.create(spec(size="Standard_NC999"), names())
    assert type(exc.value) is UsageError
    assert fake.held() == []


def test_retired_size_is_refused_before_anything_is_made(fake, prov):
    with pytest.raises(UsageError, match="Standard_NC6 is not available to this subscription in westus2 \\(NotAvailableForSubscription\\)"):
        prov.quota(REGION, "Standard_NC6")
    with pytest.raises(UsageError, match="Standard_NC6"):
        prov.create(spec(size="Standard_NC6"), names())
    assert fake.held() == []


def test_arm_sku_not_available_at_put_names_the_size(fake, prov):
    from gpuplan.providers.azure import _Sku

    # A stale SKU cache says NC6 is fine; ARM itself answers 409 SkuNotAvailable at the VM PUT.
    prov.quota(REGION, T4)
    prov._skus[REGION]["standard_nc6"] = _Sku("Standard_NC6", "standardNCFamily", 6, "")

    with pytest.raises(UsageError, match="Azure size Standard_NC6 is not available in westus2 \\(SkuNotAvailable\\)"):
        prov.create(spec(count=1, size="Standard_NC6"), names(count=1))
    assert not fake.held_of("Microsoft.Compute/virtualMachines")


def test_third_of_four_failing_raises_and_the_rest_are_listed_and_deleted(fake, prov):
    fake.fail_vm_put_at = 3

    # a pinned zone is asked once (a next zone: tests/test_zone_failover.py)
    with pytest.raises(CapacityUnavailable, match="no capacity for Standard_NC4as_T4_v3 in westus2 zone 1 right now \\(AllocationFailed\\)"):
        prov.create(spec(zone="1"), names())

    found = prov.list(REGION, {"gpuplan-cluster": "demo"})
    assert sorted(r.name for r in found if r.kind == "instance") == ["demo-0", "demo-1", "demo-3"]
    prov.delete(REGION, found)
    assert fake.held() == []


def test_resume_after_a_partial_failure_creates_only_the_missing_vm(fake, prov):
    fake.fail_vm_put_at = 3
    with pytest.raises(CapacityUnavailable):
        prov.create(spec(zone="1"), names())  # pinned: no next zone
    puts = fake.vm_puts

    made = prov.create(spec(zone="1"), names())

    assert [i.name for i in made] == names()
    assert fake.vm_puts == puts + 1


def test_missing_subscription_names_the_variable_without_a_network_call(fake, monkeypatch):
    monkeypatch.delenv("AZURE_SUBSCRIPTION_ID", raising=False)
    prov = make_provider(fake, {"subscription_id": ""})

    with pytest.raises(AuthMissing, match="AZURE_SUBSCRIPTION_ID"):
        prov.check_credentials()
    with pytest.raises(AuthMissing, match="AZURE_SUBSCRIPTION_ID"):
        prov.create(spec(), names())
    assert fake.calls == []


def test_missing_credentials_names_the_service_principal_variables(tmp_path, monkeypatch):
    from gpuplan.providers.azure import AzureProvider

    for var in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_CLIENT_CERTIFICATE_PATH",
                "AZURE_FEDERATED_TOKEN_FILE", "IDENTITY_ENDPOINT", "MSI_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AZURE_SUBSCRIPTION_ID", SUBSCRIPTION)
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path / "azure"))

    with pytest.raises(AuthMissing, match="set AZURE_CLIENT_ID, AZURE_TENANT_ID and AZURE_CLIENT_SECRET, or run `az login`"):
        AzureProvider({}).check_credentials()

    (tmp_path / "azure").mkdir()
    (tmp_path / "azure" / "azureProfile.json").write_text("{}")
    AzureProvider({}).check_credentials()  # an `az login` profile is enough
    assert AzureProvider({}).default_regions() == ["japaneast", "eastus", "westus2"]
    assert AzureProvider({"regions": "japaneast, eastus"}).default_regions() == ["japaneast", "eastus"]


def test_the_fake_fails_closed_on_what_it_does_not_know(fake):
    session = requests.Session()
    session.mount("https://", fake)
    base = f"https://management.azure.com/subscriptions/{SUBSCRIPTION}"

    unknown = session.get(f"{base}/providers/Microsoft.Storage/storageAccounts?api-version=2025-01-01")
    no_version = session.get(f"{base}/resourcegroups")

    assert (unknown.status_code, unknown.json()["error"]["code"]) == (400, "FakeUnsupported")
    assert (no_version.status_code, no_version.json()["error"]["code"]) == (400, "MissingApiVersionParameter")


def test_importing_the_provider_loads_no_azure_sdk():
    code = "import sys, gpuplan.providers.azure; print(sorted(m for m in sys.modules if m.startswith('azure')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
