"""End to end through the CLI on GCP: provision / status / teardown, quota, sweep, check and estimate,
against the loopback Compute REST fake (tests/support/gcp_fake.py) through the real client."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from gpuplan.fleet import provider as registry
from support.gcp_fake import GceFake

OWNER = "e2e-owner"
# A test-only offer, so the test does not depend on which GCP rows the shipped snapshot has.
PRICES = {"offers": [{
    "provider": "gcp", "name": "n1-standard-4+nvidia-tesla-t4", "aliases": ["e2e-t4"], "region": "asia-northeast1",
    "gpu": "T4", "gpu_count": 1, "vcpus": 4, "ram_gib": 15, "price": 100, "currency": "JPY", "price_unit": "hour",
}]}


@pytest.fixture
def fake(gpuplan_home):
    f = GceFake()
    f.start()
    cfg = gpuplan_home / "config"
    cfg.mkdir(parents=True)
    (cfg / "config.yaml").write_text(yaml.safe_dump({"owner": OWNER, "providers": {"gcp": {"ssh_source": "198.51.100.7"}}}))
    (cfg / "prices.yaml").write_text(yaml.safe_dump(PRICES))
    registry.override("gcp", lambda conf: f.provider(conf))
    yield f
    registry.override("gcp", None)
    f.stop()


def test_provision_status_teardown(fake, cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    r = cli("provision", "--yes", "gcp:e2e-t4", "x2", "--name", "e2e", "--no-bootstrap", "--ttl", "4h")
    assert r.code == 0, r.err

    vms = list(fake.instances.values())
    assert sorted(v["labels"]["gpuplan-node"] for v in vms) == ["e2e-0", "e2e-1"]
    assert all(v["labels"]["gpuplan-owner"] == OWNER and v["labels"]["gpuplan-cluster"] == "e2e" for v in vms)
    assert all(v["scheduling"]["maxRunDuration"]["seconds"] == str(4 * 3600) for v in vms)
    assert all(v["scheduling"]["instanceTerminationAction"] == "DELETE" for v in vms)
    assert all(v["guestAccelerators"][0]["acceleratorType"].endswith("/nvidia-tesla-t4") for v in vms)
    metadata = {i["key"]: i["value"] for i in vms[0]["metadata"]["items"]}
    assert metadata["ssh-keys"].startswith("ubuntu:ssh-ed25519 ") and metadata["block-project-ssh-keys"] == "TRUE"
    assert "PRIVATE KEY" not in json.dumps(vms)  # nothing secret in what the API returns
    [ssh] = [f for f in fake.firewalls.values() if f["name"].endswith("-ssh")]
    assert ssh["sourceRanges"] == ["198.51.100.7/32"] and ssh["allowed"] == [{"IPProtocol": "tcp", "ports": ["22"]}]
    [internal] = [f for f in fake.firewalls.values() if f["name"].endswith("-internal")]
    assert internal["sourceTags"] == internal["targetTags"] == ssh["targetTags"] == vms[0]["tags"]["items"]

    addresses = {v["networkInterfaces"][0]["accessConfigs"][0]["natIP"] for v in vms}
    r = cli("status", "e2e")
    assert r.code == 0, r.err
    assert all(a in r.out for a in addresses) and r.out.count("running") == 2
    assert re.search(r", TTL: GCE deletes them in (3:59|4:00) h", r.out)  # issue 42: never "stops"/"released"
    r = cli("status", "e2e", "--format", "json")
    [cluster] = json.loads(r.out)
    assert {n["public_ip"] for n in cluster["nodes"]} == addresses

    r = cli("teardown", "--yes", "e2e")
    assert r.code == 0, r.err
    assert fake.held() == []


def test_failed_create_is_rolled_back(fake, cli):
    fake.fail_insert_at = 2  # -a grants one, then no capacity; -c (the other T4 zone) has none (issue 44)
    fake.stockouts = {"asia-northeast1-c": 0}
    r = cli("provision", "--yes", "gcp:e2e-t4", "x2", "--name", "e2e", "--no-bootstrap")
    assert r.code == 3, r.err
    assert "ZONE_RESOURCE_POOL_EXHAUSTED" in r.err and "Traceback" not in r.err
    assert "every zone of asia-northeast1 refused: asia-northeast1-a, asia-northeast1-c" in r.err
    assert fake.held() == []


def test_a_partial_grant_is_kept_and_the_rest_bought_in_the_next_zone(fake, cli):
    fake.stockouts = {"asia-northeast1-a": 1}
    r = cli("provision", "--yes", "gcp:e2e-t4", "x2", "--name", "e2e", "--no-bootstrap")
    assert r.code == 0, r.err
    assert ("asia-northeast1-a: 1 of 2 n1-standard-4+nvidia-tesla-t4 granted, no capacity for 1 more "
            "(ZONE_RESOURCE_POOL_EXHAUSTED); trying asia-northeast1-c for 1") in r.err
    assert sorted(z for z, _ in fake.instances) == ["asia-northeast1-a", "asia-northeast1-c"]
    r = cli("teardown", "--yes", "e2e")
    assert r.code == 0, r.err
    assert fake.held() == []


def test_a_new_project_s_zero_gpu_quota_is_one_line_exit_2_and_creates_nothing(fake, cli):
    fake.new_project()
    r = cli("provision", "--yes", "gcp:e2e-t4", "x2", "--name", "e2e", "--no-bootstrap")
    assert r.code == 2, r.err
    assert "GPUS_ALL_REGIONS" in r.err and "only 0 are free" in r.err and "Quotas" in r.err
    assert "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1
    assert fake.held() == []


def test_sweep_removes_an_orphan_cluster_and_keeps_its_image_until_asked(fake, cli):
    from gpuplan.fleet.provider import NodeSpec

    prov = fake.provider()
    spec = NodeSpec(cluster="orphan", size="g2-standard-4", region="asia-northeast1", ssh_user="ubuntu",
                    ssh_public_key="ssh-ed25519 AAAA", tags={"gpuplan-cluster": "orphan", "gpuplan-owner": OWNER},
                    ssh_cidr="198.51.100.7/32")
    [vm] = prov.create(spec, ["orphan-0"])
    image = prov.capture_image("asia-northeast1", vm.id, "lost-image", {"gpuplan-owner": OWNER})

    r = cli("teardown", "--yes", "--sweep", "--provider", "gcp")
    assert r.code == 0, r.err
    assert "deleted 4 stray resources" in r.out  # instance, disk, two firewall rules; not the image
    assert fake.held() == [image.id]

    r = cli("teardown", "--yes", "--sweep", "--images", "--provider", "gcp")
    assert r.code == 0, r.err
    assert fake.held() == []


def test_check_reads_the_gpu_quota_tiers(fake, cli):
    fake.new_project()
    r = cli("check", "gcp", "--region", "asia-northeast1", "--format", "json")
    [gcp] = json.loads(r.out)
    assert gcp["credentials"] == "found", gcp
    tiers = {q["name"]: q for q in gcp["quotas"]}
    assert tiers["GPUS_ALL_REGIONS"]["limit"] == 0 and tiers["GPUS_ALL_REGIONS"]["unit"] == "GPUs"
    assert "NVIDIA_T4_GPUS" in tiers and tiers["NVIDIA_T4_GPUS"]["free"] == 0


def test_missing_credentials_say_what_to_set(gpuplan_home, cli, monkeypatch, tmp_path):
    from support.credentials import without_credentials

    without_credentials(monkeypatch, tmp_path)
    for var in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CONFIG", "CLOUDSDK_CORE_PROJECT"):
        monkeypatch.delenv(var, raising=False)
    r = cli("check", "gcp", "--format", "json")
    assert r.code == 2
    [gcp] = json.loads(r.out)
    assert gcp["credentials"].startswith("no Google Cloud credentials found: run `gcloud auth application-default login`")
    r = cli("provision", "--yes", "gcp:n1-standard-4+nvidia-tesla-t4", "x1", "--region", "asia-northeast1",
            "--name", "nocreds", "--no-bootstrap")
    assert r.code == 2 and "GOOGLE_APPLICATION_CREDENTIALS" in r.err and "Traceback" not in r.err


def test_estimate_in_tokyo_lists_sourced_gcp_plans_and_the_zero_gpu_quota_line(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    r = cli("estimate", "--videos", "4", "--region", "asia-northeast1", "--all", "--format", "json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    text = json.dumps(doc)
    assert "a2-highgpu-1g" in text and "n1-standard-8+nvidia-tesla-t4" in text
    # every priced GCP plan says where its price comes from and when, and that it is billed per second
    priced = [p for p in doc["plans"] if p["provider"] == "gcp" and p["feasible"]]
    assert {p["instance_type"] for p in priced} >= {"a2-highgpu-1g", "n1-standard-8+nvidia-tesla-t4"}
    for plan in priced:
        for size in {f["instance_type"] for f in plan["fleet"]}:
            [line] = [a for a in plan["assumptions"] if a.startswith(f"{size} asia-northeast1: ") and "USD/hour" in a]
            assert "billed per second, minimum 1 min" in line, line
            assert ("(source: skypilot-org/skypilot-catalog catalogs/v8/gcp/vms.csv @" in line
                    or "(source: Cyclenerd/google-cloud-pricing-cost-calculator pricing.yml @082120d2" in line), line
            assert "; as of 20" in line, line
        assert all(f["billing"]["granularity_s"] == 1 and f["billing"]["minimum_s"] == 60 for f in plan["fleet"])
    r = cli("estimate", "--videos", "4", "--region", "asia-northeast1")
    assert r.code == 0, r.err
    assert "gcp asia-northeast1" in r.out
    assert "over gcp's default GPUS_ALL_REGIONS quota of 0: `gpuplan check gcp` reads yours" in r.out
    assert "Quotas & System Limits" in r.out
    # the tier counts GPUs, as the pick's machines hold them (4x a2-highgpu-1g: 4 A100s), not vCPUs
    pick = doc["recommended"]
    gpus = pick["count"] * {"a2-highgpu-1g": 1, "n1-standard-8+nvidia-tesla-t4": 1}[pick["instance_type"]]
    assert f"needs {gpus} GPUs, over gcp's default GPUS_ALL_REGIONS quota of 0" in r.out


def test_shipped_gcp_rows_are_sourced_dated_and_billed_per_second_after_a_minute():
    from gpuplan.market.catalog import load

    cat = load()
    rows = [o for o in cat.offers if o.provider == "gcp"]
    assert {o.region for o in rows} >= {"asia-northeast1", "us-central1"}
    for o in rows:
        assert o.source and o.as_of, o
        assert (o.billing_granularity_s, o.billing_minimum_s) == (1, 60), o


def test_each_quota_tier_says_its_need_in_its_own_unit(fake, cli, gpuplan_home):
    # issue 42: two 1-GPU T4 machines of 4 vCPUs said "NVIDIA_T4_GPUS ...: 8 GPUs needed" (the
    # vCPUs' count under every tier); each tier now counts in its own unit: 2 GPUs, 8 vCPUs
    r = cli("provision", "--yes", "gcp:e2e-t4", "x2", "--name", "e2e", "--no-bootstrap")
    assert r.code == 0, r.err
    assert "quota GPUS_ALL_REGIONS (GPUs in all regions of the project): 2 GPUs needed" in r.err
    assert "quota NVIDIA_T4_GPUS (nvidia-tesla-t4 GPUs in asia-northeast1): 2 GPUs needed" in r.err
    assert "quota CPUS (vCPUs (CPUS) in asia-northeast1): 8 vCPUs needed" in r.err
    assert "8 GPUs" not in r.err


def test_status_and_teardown_say_the_hourly_yen_on_provision_s_tax_basis(fake, cli, gpuplan_home, monkeypatch):
    # issue 42: provision said GCP's ¥/h with consumption tax, status and teardown the same row
    # without it. A row listed without tax (¥100/h): ¥110/h per machine in all three, basis said.
    monkeypatch.setenv("COLUMNS", "250")
    prices = {"offers": [{**PRICES["offers"][0], "tax": "excluded"}]}
    (gpuplan_home / "config" / "prices.yaml").write_text(yaml.safe_dump(prices))
    said = "yen include Japan's 10 % consumption tax"
    r = cli("provision", "--yes", "gcp:e2e-t4", "x2", "--name", "e2e", "--no-bootstrap")
    assert r.code == 0, r.err
    assert f"¥110/h per machine, ¥220/h for the cluster ({said}; listed ¥100/h without it)" in r.err
    r = cli("status", "e2e")
    assert r.code == 0, r.err
    assert f"(¥110/h per machine; {said})" in r.out and "¥100/h" not in r.out
    r = cli("teardown", "--yes", "e2e")
    assert r.code == 0, r.err
    assert f"delete cluster e2e (ready): 2 machines of gcp:n1-standard-4+nvidia-tesla-t4 in asia-northeast1 (¥220/h, {said})" in r.err
    assert fake.held() == []


def test_tokyo_s_a100_is_priced_from_a_source_that_explains_it_not_below_iowa_s():
    # issue 42: skypilot-catalog's Tokyo A100 part (1.70586 USD/h) put a2-highgpu-1g in Tokyo at
    # 2.65389 USD/h, below us-central1's 3.67339, "unexplained", and it made the GCP pick. The rows
    # now read Cyclenerd's pricing.yml @082120d2 (from the Cloud Billing Catalog API): 4.049590926
    # USD/h in Tokyo, whose us-central1 figure (3.673385) is the catalog's us-central1 row; the
    # 8-GPU size is 8x the 1-GPU one there (32.396727408).
    from decimal import Decimal

    from gpuplan.market.catalog import load

    rows = {(o.name, o.region): o for o in load().offers if o.provider == "gcp" and o.name.startswith("a2-highgpu")}
    tokyo, iowa = rows["a2-highgpu-1g", "asia-northeast1"], rows["a2-highgpu-1g", "us-central1"]
    tokyo8, iowa8 = rows["a2-highgpu-8g", "asia-northeast1"], rows["a2-highgpu-8g", "us-central1"]
    assert tokyo.price == Decimal("4.04959") and iowa.price == Decimal("3.67339")
    assert tokyo8.price == Decimal("32.39673") and iowa8.price == Decimal("29.38708")
    assert tokyo.price > iowa.price and tokyo8.price > iowa8.price
    assert abs(tokyo8.price - 8 * tokyo.price) < Decimal("0.0001")
    for o in (tokyo, tokyo8):
        assert o.source.startswith("Cyclenerd/google-cloud-pricing-cost-calculator pricing.yml @082120d2"), o.source
        assert "unexplained" not in o.notes and "is not used" in o.notes
