"""`gpuplan catalog refresh` against recorded answers of the real public price sources
(tests/fixtures/price_sources/, served by support.price_sources_fake through a requests adapter)."""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal

import pytest

from gpuplan.market import catalog, catalog_refresh
from support.price_sources_fake import PriceSources

TODAY = date(2026, 11, 23)
ECB_USD_JPY = Decimal("154.4425")  # the recording's 162.35 JPY / 1.0512 USD per euro, to 4 places


@pytest.fixture
def sources(gpuplan_home, monkeypatch):
    fake = PriceSources()
    for var in ("SAKURACLOUD_ACCESS_TOKEN", "SAKURACLOUD_ACCESS_TOKEN_SECRET"):  # DOK is asked only with a key
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(catalog_refresh, "new_session", fake.session)
    monkeypatch.setattr(catalog_refresh, "today", lambda: TODAY)
    return fake


def _user_snapshots(home):
    folder = home / "data" / "snapshots"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def _table_row(out: str, offer: str, region: str) -> str:
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if offer in line and (region in line or region in lines[i + 1]):
            return line + " " + lines[i + 1]
    raise AssertionError(f"{offer} {region} not in the table:\n{out}")


def test_refresh_writes_a_dated_snapshot_with_each_sources_figure(sources, gpuplan_home):
    result = catalog_refresh.refresh()

    assert result.snapshot == "2026-11-23" and result.previous == "2026-11"
    assert result.path == gpuplan_home / "data" / "snapshots" / "2026-11-23"
    assert sorted(p.name for p in result.path.iterdir()) == ["fx.csv", "offers.csv", "providers.csv", "quotas.csv", "spot.csv"]
    assert sources.unknown == []
    cat = catalog.load()  # the newest snapshot is now the user's
    assert cat.snapshot == "2026-11-23" and cat.date == TODAY

    # Azure answers in yen: the Linux pay-as-you-go meter, not the Windows / Low Priority ones beside it
    a100 = cat.resolve("azure:Standard_NC24ads_A100_v4", region="eastus")
    assert (a100.price, a100.currency, a100.price_jpy_per_hour) == (Decimal("564.3932"), "JPY", Decimal("564.3932"))
    assert "prices.azure.com/api/retail/prices" in a100.source and "retrieved 2026-11-23" in a100.source
    assert a100.as_of == "2026-11-23"
    assert "earlier: 3.673 USD/h" in a100.notes
    # the H100 series' Windows meter is named "... Srs Win"; it must not win either
    assert cat.resolve("azure:Standard_NC40ads_H100_v5", region="eastus").price == Decimal("1072.5468")

    # AWS: the shared-tenancy on-demand Linux row; Windows, dedicated, reserved, SQL rows differ in price
    g4 = cat.resolve("aws:g4dn.xlarge", region="us-east-1")
    assert (g4.price, g4.currency) == (Decimal("0.4734"), "USD")
    assert g4.price_jpy_per_hour == Decimal("0.4734") * ECB_USD_JPY
    assert "/offers/v1.0/aws/AmazonEC2/20261120190512/us-east-1/index.csv" in g4.source
    assert cat.resolve("aws:p5.48xlarge", region="us-east-1").price == Decimal("55.04")  # not the capacity block

    # Sakura per zone, matched by the DisplayName tail; Daily and Monthly are the caps (issue 22)
    h100 = cat.resolve("sakura:24Core-240GB-H100x1", region="is1a")
    assert (h100.price, h100.currency) == (Decimal("990"), "JPY")
    assert (h100.daily_cap_jpy, h100.monthly_cap_jpy) == (Decimal(23100), Decimal(385000))
    assert "/cloud/zone/is1a/api/cloud/1.1/public/price" in h100.source
    # the price API lists an H100 class in is1b too; the VRT manual sells GPU plans in is1a only
    assert [o.region for o in cat.find(provider="sakura") if o.name == "24Core-240GB-H100x1"] == ["is1a"]
    assert cat.resolve("sakura:dok-h100-80gb").kind == "task"  # DOK rows are kept

    # the dated FX rate: the ECB cross rate, named
    usd = cat.fx["USD"]
    assert (usd.jpy_per_unit, usd.date) == (ECB_USD_JPY, "2026-11-20")
    assert "ECB" in usd.source and "eurofxref-daily.xml" in usd.source

    # rows no source covers are kept as they were: retired sizes, owned hardware
    nc6 = cat.resolve("azure:nc6")
    assert nc6.retired_on == date(2023, 9, 6) and nc6.price == Decimal("0.90") and nc6.currency == "USD"
    assert cat.resolve("baremetal:gtx1080ti-workstation").price == Decimal("350000")


def test_diff_names_changed_added_and_removed_rows_with_percent(sources):
    result = catalog_refresh.refresh()
    by_key = {c.key: c for c in result.changes}

    g4 = by_key["aws:g4dn.xlarge@us-east-1"]
    assert g4.change == "changed"
    # 0.526 USD x 158.19 (the 2026-11 FX row) -> 0.4734 USD x 154.4425 (ECB): -12.1 % in yen
    assert g4.before.price_jpy_per_hour == Decimal("83.20794")
    assert g4.percent == Decimal("-12.1")
    assert by_key["azure:Standard_NV36ads_A10_v5@eastus"].percent == Decimal("-7.7")
    assert by_key["azure:Standard_NC40ads_H100_v5@westus2"].change == "added"  # a known size, a known region
    assert by_key["azure:Standard_NV12s_v3@eastus"].change == "removed"  # the source no longer lists it
    assert by_key["aws:p3dn.24xlarge@ap-northeast-1"].change == "removed"
    # the same USD price, only converted at the new rate
    p5 = by_key["aws:p5.48xlarge@us-east-1"]
    assert (p5.change, p5.before.price, p5.after.price, p5.percent) == ("fx", Decimal("55.04"), Decimal("55.04"), Decimal("-2.4"))
    assert result.unchanged == 2  # the two Sakura VRT rows (is1a only since issue 22)
    # 9 retired Azure rows, 2 owned machines, 3 DOK task plans, 3 PHY servers, and GCP's 10 rows (no refresh
    # source for GCP yet: issue 34)
    assert result.kept == 27


def test_azure_next_page_link_is_followed(sources):
    result = catalog_refresh.refresh(["azure"])
    eastus = [u for u in sources.requests if "prices.azure.com" in u and "eastus" in u]
    assert len(eastus) == 2 and "$skip=100" in eastus[1]
    # these sizes are only on the second page
    for name in ("Standard_NC80adis_H100_v5", "Standard_ND96isr_H100_v5"):
        offer = result.catalog.resolve(f"azure:{name}", region="eastus")
        assert offer.currency == "JPY" and "retrieved 2026-11-23" in offer.source
    assert not any("amazonaws" in u or "sakura" in u for u in sources.requests)


def test_cli_refresh_prints_the_diff_table(sources, cli, gpuplan_home):
    r = cli("catalog", "refresh")
    assert r.code == 0, r.err
    assert "catalog 2026-11 -> 2026-11-23" in r.out
    row = _table_row(r.out, "aws:g4dn.xlarge", "us-east-1")  # one line on wide terminals, two on narrow ones
    assert "changed" in row and "USD 0.526/h" in row and "USD 0.4734/h" in row and "-12.1%" in row
    assert "¥83.21" in row and "¥73.11" in row
    assert "removed" in _table_row(r.out, "azure:Standard_NV12s_v3", "eastus")
    assert "added" in _table_row(r.out, "azure:Standard_NC40ads_H100_v5", "westus2")
    flat = " ".join(r.out.split())  # rich wraps long lines at the terminal's width
    assert "USD = ¥154.4425 (2026-11-20; ECB" in flat and "was ¥158.19 (2026-03-11)" in flat
    # 43 on-demand rows (the 2 Osaka g4dn rows of issue 22 among them) and the 27 spot rows carried over from 2026-11,
    # and GCP's 8 priced USD rows (issue 34: no refresh source for GCP yet; its 2 unpriced A3 rows have nothing to move)
    assert "78 offers keep their own price and move -2.4% in yen with the USD rate only" in flat
    assert "17 changed, 1 added, 2 removed, 2 refreshed and unchanged, 27 kept as they were" in flat
    assert _user_snapshots(gpuplan_home) == ["2026-11-23"]


@pytest.mark.parametrize("failure", ["http500", "timeout"])
def test_a_failing_source_exits_3_with_one_line_and_writes_nothing(sources, cli, gpuplan_home, failure):
    # Azure and the ECB answer; the AWS price list (fetched in between) fails
    if failure == "http500":
        sources.status["pricing.us-east-1.amazonaws.com"] = 500
    else:
        sources.timeout.add("pricing.us-east-1.amazonaws.com")
    r = cli("catalog", "refresh")
    assert r.code == 3
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.err
    expected = "answered HTTP 500" if failure == "http500" else "did not answer within"
    assert lines[0].startswith("gpuplan: error: catalog refresh: pricing.us-east-1.amazonaws.com " + expected)
    assert "nothing was written" in lines[0]
    assert any("prices.azure.com" in u for u in sources.requests)  # it failed part way, not at once
    assert _user_snapshots(gpuplan_home) == []
    assert catalog.snapshots() == ["2017-08", "2026-11"]


def test_an_azure_500_stops_before_anything_is_written(sources, cli, gpuplan_home):
    sources.status["prices.azure.com"] = 500
    r = cli("catalog", "refresh", "--provider", "azure")
    assert r.code == 3 and "prices.azure.com answered HTTP 500" in r.err
    assert not (gpuplan_home / "data").exists()


def test_estimate_plans_on_the_refreshed_snapshot(sources, cli):
    assert cli("catalog", "refresh").code == 0
    # on AWS (priced in USD): since issue 22 a DOK task in yen is the cheapest of all providers
    r = cli("estimate", "--videos", "4", "--format", "json", "--provider", "aws")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["snapshot"] == "2026-11-23"
    rec = doc["recommended"]
    assert any("ECB euro foreign exchange reference rates of 2026-11-20" in a for a in rec["assumptions"])
    assert any("retrieved 2026-11-23" in a for a in rec["assumptions"])
    # the shipped snapshot stays reachable by date
    before = json.loads(cli("estimate", "--videos", "4", "--format", "json", "--as-of", "2026-11-01").out)
    assert before["snapshot"] == "2026-11"


def test_dry_run_shows_the_diff_and_writes_nothing(sources, cli, gpuplan_home):
    r = cli("catalog", "refresh", "--dry-run", "--provider", "sakura")
    assert r.code == 0, r.err
    flat = " ".join(r.out.split())
    assert "dry run: nothing written" in flat
    assert "0 changed, 0 added, 0 removed, 2 refreshed and unchanged" in flat  # VRT in is1a only (issue 22)
    assert _user_snapshots(gpuplan_home) == []  # not even a temporary folder is left
    assert catalog.load().snapshot == "2026-11"


def test_out_dir_and_a_same_day_rerun_replaces_the_snapshot(sources, cli, tmp_path):
    out = tmp_path / "snaps"
    assert cli("catalog", "refresh", "--provider", "sakura", "--out", str(out)).code == 0
    first = (out / "2026-11-23" / "offers.csv").read_text(encoding="utf-8")
    assert cli("catalog", "refresh", "--provider", "aws", "--out", str(out)).code == 0
    assert sorted(p.name for p in out.iterdir()) == ["2026-11-23"]
    second = catalog.load_snapshot_dir(out / "2026-11-23", "2026-11-23")
    assert second.resolve("aws:g4dn.xlarge", region="us-east-1").price == Decimal("0.4734")
    assert first != (out / "2026-11-23" / "offers.csv").read_text(encoding="utf-8")
    assert catalog.load().snapshot == "2026-11"  # --out elsewhere: the loader does not see it


def test_unknown_provider_is_a_usage_error(sources, cli):
    r = cli("catalog", "refresh", "--provider", "baremetal")
    assert r.code == 2
    assert "unknown --provider 'baremetal'; use azure, aws or sakura" in r.err
    assert sources.requests == []


def test_refresh_is_not_imported_by_planning(gpuplan_home):
    import os
    import subprocess
    import sys

    code = ("import sys; from gpuplan.cli import main\n"
            "try: main(['estimate', '--videos', '4'])\n"
            "except SystemExit: pass\n"
            "print('gpuplan.market.catalog_refresh' in sys.modules, 'requests' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "GPUPLAN_HOME": str(gpuplan_home)}).stdout
    assert out.strip().splitlines()[-1] == "False False"


def test_dok_unit_prices_are_refreshed_with_the_api_key_and_kept_without_it(sources, cli, monkeypatch):
    # without the key: the DOK rows stay, and the report says why
    r = cli("catalog", "refresh", "--dry-run", "--provider", "sakura")
    assert r.code == 0, r.err
    assert "高火力 DOK rows kept as they were: its unit prices need the API key" in " ".join(r.out.split())
    assert not any("managed-container" in u for u in sources.requests)
    # with it: GET unit_prices (Basic auth), yen a second -> an hourly price
    monkeypatch.setenv("SAKURACLOUD_ACCESS_TOKEN", "t")
    monkeypatch.setenv("SAKURACLOUD_ACCESS_TOKEN_SECRET", "s")
    result = catalog_refresh.refresh(["sakura"])
    asked = [u for u in sources.requests if "unit_prices" in u]
    assert asked and "year=2026&month=11&day=23" in asked[0]
    h100 = result.catalog.resolve("sakura:dok-h100-80gb")
    assert (h100.price, h100.price_jpy_per_hour, h100.kind) == (Decimal("936"), Decimal("936"), "task")
    assert "managed-container/1.0/unit_prices/" in h100.source and "0.26 JPY a second" in h100.source
    by_key = {c.key: c for c in result.changes}
    assert by_key["sakura:dok-h100-80gb@is1a"].change == "changed"
    assert by_key["sakura:dok-h100-80gb@is1a"].percent == Decimal("-7.1")  # 1,008 -> 936 yen an hour
    assert result.catalog.resolve("sakura:dok-v100-32gb").price == Decimal("57.6")
    assert result.notes == ()


# --- regions the catalog has no rows in: Japan (issue 22) ------------------------------------------

JAPAN_CONFIG = "preferred_regions: [ap-northeast-1, japaneast, is1a]\n"


def _config(home, text: str) -> None:
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "config.yaml").write_text(text, encoding="utf-8")


def test_refresh_region_adds_azure_japan_rows_with_the_apis_yen_source_and_date(sources, cli, gpuplan_home):
    assert catalog.load().find(provider="azure", region="japaneast") == []  # nothing embedded
    r = cli("catalog", "refresh", "--provider", "azure", "--region", "japaneast,japanwest")
    assert r.code == 0, r.err
    asked = [u for u in sources.requests if "prices.azure.com" in u]
    assert any("armRegionName%20eq%20%27japaneast%27" in u for u in asked)
    assert any("armRegionName%20eq%20%27japanwest%27" in u for u in asked)
    assert sources.unknown == []

    cat = catalog.load()
    assert cat.snapshot == "2026-11-23"
    east = {o.name: o for o in cat.find(provider="azure", region="japaneast")}
    # every known size the recording lists there; the Windows (136.3732) and Spot (12.0429) meters dropped
    assert sorted(east) == ["Standard_NC16as_T4_v3", "Standard_NC24ads_A100_v4", "Standard_NC4as_T4_v3",
                            "Standard_NC64as_T4_v3", "Standard_NC8as_T4_v3", "Standard_NV36ads_A10_v5"]
    t4 = east["Standard_NC4as_T4_v3"]
    assert (t4.price, t4.currency, t4.price_jpy_per_hour) == (Decimal("101.0315"), "JPY", Decimal("101.0315"))
    assert t4.as_of == "2026-11-23"
    assert "Azure Retail Prices API" in t4.source and "(japaneast, Virtual Machines NCasT4 v3 Series" in t4.source
    assert "retrieved 2026-11-23" in t4.source
    assert "added by catalog refresh 2026-11-23: Standard_NC4as_T4_v3 is listed in japaneast" in t4.notes
    assert (t4.gpu, t4.gpu_count, t4.vcpus) == ("T4", 1, 4)  # copied from its known row
    assert east["Standard_NC24ads_A100_v4"].price == Decimal("705.4915")  # not the Windows meter's 917.5422
    west = {o.name: o.price for o in cat.find(provider="azure", region="japanwest")}
    assert west == {"Standard_NC4as_T4_v3": Decimal("105.0728"), "Standard_NC64as_T4_v3": Decimal("869.3468")}

    # the report says what each region got
    flat = " ".join(r.out.split())
    assert ("japaneast (azure): 6 rows added (Standard_NC16as_T4_v3, Standard_NC24ads_A100_v4, Standard_NC4as_T4_v3, "
            "Standard_NC64as_T4_v3, Standard_NC8as_T4_v3, Standard_NV36ads_A10_v5); 6 offers there now") in flat
    assert "japanwest (azure): 2 rows added (Standard_NC4as_T4_v3, Standard_NC64as_T4_v3); 2 offers there now" in flat
    assert "added" in _table_row(r.out, "azure:Standard_NC4as_T4_v3", "japaneast")
    assert "16 changed, 9 added, 1 removed" in flat  # westus2's H100 besides the eight Japan rows

    # a later refresh asks for them again without --region: they are the catalog's own regions now
    sources.requests.clear()
    again = catalog_refresh.refresh(["azure"])
    assert any("japanwest" in u for u in sources.requests)
    assert again.catalog.resolve("azure:Standard_NC64as_T4_v3", region="japanwest").price == Decimal("869.3468")


def test_estimate_plans_japaneast_after_the_refresh(sources, cli, gpuplan_home):
    r = cli("estimate", "--videos", "4", "--region", "japaneast")
    assert r.code == 2
    assert "`gpuplan catalog refresh --provider azure --region japaneast`" in r.err
    assert cli("catalog", "refresh", "--provider", "azure", "--region", "japaneast,japanwest").code == 0

    r = cli("estimate", "--videos", "4", "--region", "japaneast", "--format", "json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["snapshot"] == "2026-11-23"
    assert {p["region"] for p in doc["plans"]} == {"japaneast"}
    rec = doc["recommended"]
    assert rec["provider"] == "azure" and rec["region"] == "japaneast"
    assert any("(japaneast, Virtual Machines" in a and "retrieved 2026-11-23" in a for a in rec["assumptions"])

    _config(gpuplan_home, JAPAN_CONFIG)
    doc = json.loads(cli("estimate", "--videos", "4", "--all", "--format", "json").out)
    regions = {p["region"] for p in doc["plans"]}
    assert regions == {"ap-northeast-1", "japaneast", "is1a"}
    assert "no offers in" not in doc["notes"]["regions"]


def test_refresh_without_region_asks_for_the_preferred_regions_of_each_provider(sources, cli, gpuplan_home):
    _config(gpuplan_home, JAPAN_CONFIG)
    r = cli("catalog", "refresh")
    assert r.code == 0, r.err
    flat = " ".join(r.out.split())
    assert "japaneast (azure): 6 rows added" in flat
    assert "ap-northeast-1 (aws): no row added; its 15 offers were in the catalog already" in flat
    assert "is1a (sakura): no row added" in flat
    assert not any("japanwest" in u for u in sources.requests)  # not preferred, not asked
    assert not any("zone/is1b" in u for u in sources.requests)
    cat = catalog.load()
    assert len(cat.find(provider="azure", region="japaneast")) == 6
    # the estimate then plans in all three preferred regions
    doc = json.loads(cli("estimate", "--videos", "4", "--all", "--format", "json").out)
    assert "japaneast" in {p["region"] for p in doc["plans"]}
    # --provider aws: the Azure region of the preference is passed over, not an error
    sources.requests.clear()
    assert cli("catalog", "refresh", "--provider", "aws", "--dry-run").code == 0
    assert not any("prices.azure.com" in u for u in sources.requests)


@pytest.mark.parametrize(("args", "expected"), [
    (["--provider", "aws", "--region", "japaneast"],
     "--region japaneast is azure's, and --provider asks only aws: add --provider azure"),
    (["--region", "nowhere"], "--region 'nowhere' is not an Azure, AWS or Sakura region gpuplan knows"),
    (["--provider", "sakura", "--region", "is1a,ap-northeast-3"],
     "--region ap-northeast-3 is aws's, and --provider asks only sakura: add --provider aws"),
])
def test_a_region_no_selected_provider_has_is_one_line_and_exit_2(sources, cli, gpuplan_home, args, expected):
    r = cli("catalog", "refresh", *args)
    assert r.code == 2
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0] and "Traceback" not in r.err
    assert sources.requests == [] and _user_snapshots(gpuplan_home) == []


def test_a_region_refresh_whose_source_fails_writes_nothing(sources, cli, gpuplan_home):
    sources.status["prices.azure.com"] = 500
    r = cli("catalog", "refresh", "--provider", "azure", "--region", "japaneast")
    assert r.code == 3 and "prices.azure.com answered HTTP 500" in r.err and "nothing was written" in r.err
    assert _user_snapshots(gpuplan_home) == []
    assert catalog.load().find(provider="azure", region="japaneast") == []


def test_an_aws_region_missing_from_the_price_list_is_said(sources, cli):
    r = cli("catalog", "refresh", "--provider", "aws", "--region", "ap-east-2", "--dry-run")
    assert r.code == 0, r.err
    flat = " ".join(r.out.split())
    assert "ap-east-2: not in the AWS price list's region index, nothing priced there" in flat
    assert "ap-east-2 (aws): no row added: the source lists none of the catalog's sizes there" in flat


def test_refresh_of_gcp_says_it_has_no_source_yet(cli):
    r = cli("catalog", "refresh", "--provider", "gcp")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1
    assert "GCP prices have no refresh source yet" in r.err and "unknown" not in r.err
