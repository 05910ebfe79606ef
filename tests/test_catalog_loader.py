"""The catalog loader: snapshot choice, resolve/find, FX conversion, user prices.yaml."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from gpuplan.errors import UsageError
from gpuplan.market import catalog


@pytest.fixture(autouse=True)
def _no_user_prices(gpuplan_home, monkeypatch):
    monkeypatch.delenv(catalog.PRICES_ENV, raising=False)


def test_snapshots_are_listed_oldest_first():
    names = catalog.snapshots()
    assert names[0] == "2017-08"
    assert names == sorted(names)


def test_2017_nc6_resolves_from_short_name_with_report_a_price():
    cat = catalog.load("2017-08")
    nc6 = cat.resolve("nc6")
    assert (nc6.provider, nc6.name, nc6.region) == ("azure", "Standard_NC6", "westus2")
    assert nc6.price_jpy_per_hour == Decimal("91.80")
    assert nc6.currency == "JPY"
    assert nc6.billing_granularity_s == 60
    assert nc6.billing_minimum_s == 60
    assert nc6.gpu == "K80" and nc6.gpu_count == 1 and nc6.gpu_memory_gib == Decimal(12)
    assert nc6.vcpus == 6 and nc6.ram_gib == Decimal(56)
    assert nc6.quota_family == "standardNCFamily"
    assert nc6.retired_on == date(2023, 9, 6)
    assert not nc6.retired(cat.date)  # still sold in August 2017
    assert cat.date == date(2017, 8, 31)


@pytest.mark.parametrize("text", ["nc24", "NC24", "Standard_NC24", "azure:Standard_NC24", "azure:nc24"])
def test_2017_nc24_resolves_every_spelling(text):
    nc24 = catalog.load("2017-08").resolve(text)
    assert nc24.name == "Standard_NC24"
    assert nc24.price_jpy_per_hour == Decimal("367.20")
    assert nc24.gpu_count == 4 and nc24.vcpus == 24


def test_nc24_costs_exactly_four_nc6_per_hour():
    cat = catalog.load("2017-08")
    assert cat.resolve("nc24").price_jpy_per_hour == 4 * cat.resolve("nc6").price_jpy_per_hour


def test_unknown_type_suggests_the_closest_name():
    with pytest.raises(UsageError) as exc:
        catalog.load("2017-08").resolve("nc7")
    assert str(exc.value) == "unknown instance type 'nc7'; did you mean nc6? (gpuplan catalog lists them)"


def test_unknown_provider_prefix_names_the_known_ones():
    with pytest.raises(UsageError, match=r"unknown provider 'gcp'.*azure"):
        catalog.load("2017-08").resolve("gcp:nc6")


def test_region_not_offered_lists_the_regions():
    with pytest.raises(UsageError, match=r"azure:Standard_NC6 is not offered in eastus .*regions: westus2"):
        catalog.load("2017-08").resolve("nc6", region="eastus")


def test_as_of_picks_newest_snapshot_not_after_it():
    assert catalog.load("2018-01").snapshot == "2017-08"
    assert catalog.load("2017-08").snapshot == "2017-08"
    assert catalog.load().snapshot == catalog.snapshots()[-1]


def test_as_of_before_every_snapshot_is_a_usage_error():
    with pytest.raises(UsageError, match=r"no catalog snapshot on or before 2016-01; snapshots: 2017-08"):
        catalog.load("2016-01")


@pytest.mark.parametrize("bad", ["2017", "2017-13", "17-08", "2017/08", "latest"])
def test_bad_as_of_format_is_a_usage_error(bad):
    with pytest.raises(UsageError, match="YYYY-MM"):
        catalog.load(bad)


def test_2017_providers_carry_quota_and_setup_facts():
    azure = catalog.load("2017-08").providers["azure"]
    assert azure.default_quota_vcpus == 20
    assert azure.family_quota_vcpus["standardNCFamily"] == 20
    assert azure.quota_name == "Total Regional vCPUs"
    assert azure.setup_s == 3600
    assert (azure.capture_s, azure.launch_s) == (0, 0)
    assert azure.builder_is_worker is False
    assert "Standard NC Family vCPUs" in azure.how_to_raise


def test_sakura_koukaryoku_2017_prices_are_hourly_yen():
    cat = catalog.load("2017-08")
    got = {o.gpu: (o.gpu_count, o.price_jpy_per_hour, o.billing_granularity_s) for o in cat.find(provider="sakura")}
    assert got == {
        "TITAN X (Maxwell)": (4, Decimal(288), 3600),
        "TITAN X (Pascal)": (4, Decimal(294), 3600),
        "P40": (1, Decimal(349), 3600),
        "P100": (1, Decimal(357), 3600),
    }


def test_owned_gtx_1080_ti_has_purchase_price_and_power_cost_per_hour():
    gtx = catalog.load("2017-08").resolve("onprem-1080ti")
    assert gtx.kind == "owned" and gtx.price_unit == "purchase"
    assert gtx.price == Decimal(350000)
    assert gtx.power_watts == 250
    # 0.25 kW x 27 JPY/kWh
    assert gtx.price_jpy_per_hour == Decimal("6.75")
    assert "300000-400000" in gtx.notes


def test_unpriced_monthly_server_says_so():
    bm = catalog.load("2017-08").resolve("bm-p100x2")
    assert bm.price is None and bm.price_jpy_per_hour is None
    assert bm.notes.startswith("price not sourced; set it in your config")
    assert catalog.load("2017-08").offer_status(bm) == "price not sourced"


def test_every_offer_gpu_is_in_the_gpu_table_and_every_row_is_sourced():
    for snap in catalog.snapshots():
        cat = catalog.load(snap)
        for o in cat.offers:
            assert o.gpu in cat.gpus, (snap, o.key, o.gpu)
            assert o.source and o.as_of, (snap, o.key)
            if o.price is None:
                assert "price not sourced" in o.notes
    assert catalog.load("2017-08").gpus["V100"].rel_speed["cnn-train"] == Decimal("1.0")


def test_aliases_are_unambiguous_within_a_snapshot():
    for snap in catalog.snapshots():
        seen: dict[str, tuple[str, str]] = {}
        for o in catalog.load(snap).offers:
            for a in o.aliases:
                key = a.lower()
                assert seen.setdefault(key, (o.provider, o.name)) == (o.provider, o.name), (snap, a)


def test_find_filters_by_gpu_and_rejects_unknown_provider():
    cat = catalog.load("2017-08")
    assert {o.name for o in cat.find(gpu="k80")} == {"Standard_NC6", "Standard_NC24"}
    with pytest.raises(UsageError, match="unknown provider 'nosuch'"):
        cat.find(provider="nosuch")


def test_current_snapshot_keeps_retired_types_with_successor():
    cat = catalog.load("2026-11")
    nc6 = cat.resolve("azure:nc6")
    assert nc6.retired_on == date(2023, 9, 6)
    assert nc6.successor == "Standard_NC4as_T4_v3"
    assert nc6.retired(cat.date)
    assert cat.offer_status(nc6) == "retired 2023-09-06 -> Standard_NC4as_T4_v3"
    ncv3 = cat.resolve("Standard_NC24s_v3")
    assert ncv3.retired_on == date(2025, 9, 30) and ncv3.successor == "Standard_NC96ads_A100_v4"
    # the successor itself resolves and is active
    assert cat.offer_status(cat.resolve(nc6.successor)) == "active"


def test_usd_offer_is_converted_with_the_snapshot_fx_row():
    cat = catalog.load("2026-11")
    usd = cat.fx["USD"]
    assert usd.jpy_per_unit == Decimal("158.19") and usd.date == "2026-03-11"
    assert "MINKABU" in usd.source
    g4 = cat.resolve("aws:g4dn.xlarge")
    assert (g4.region, g4.price, g4.currency) == ("us-east-1", Decimal("0.526"), "USD")
    assert g4.price_jpy_per_hour == Decimal("83.20794")  # 0.526 x 158.19, unrounded
    tokyo = cat.resolve("g4dn.xlarge", region="ap-northeast-1")
    assert tokyo.price_jpy_per_hour == Decimal("112.3149")  # 0.71 x 158.19
    assert (g4.billing_granularity_s, g4.billing_minimum_s) == (1, 60)
    assert g4.quota_family == "L-DB2E81BA"


def test_2017_snapshot_uses_the_2017_fx_row():
    assert catalog.load("2017-08").fx["USD"].jpy_per_unit == Decimal("109.26")


def test_aws_p5_uses_the_post_june_2025_price():
    p5 = catalog.load("2026-11").resolve("p5.48xlarge")
    assert p5.price == Decimal("55.04")
    assert p5.quota_family == "L-417A185B"
    assert p5.gpu == "H100 SXM" and p5.gpu_count == 8


def test_sakura_vrt_rows_as_sold_is1a_only_with_daily_and_monthly_caps_from_sakuras_price_api():
    # issue 22: the manual places the GPU plans in is1a only (the old is1b H100 row is gone), the
    # price API's Daily and Monthly figures are the caps, and the source is Sakura's own API
    cat = catalog.load("2026-11")
    h100 = cat.resolve("h100x1")
    assert (h100.provider, h100.region, h100.price_jpy_per_hour) == ("sakura", "is1a", Decimal(990))
    assert (h100.daily_cap_jpy, h100.monthly_cap_jpy, h100.tax) == (Decimal(23100), Decimal(385000), "included")
    with pytest.raises(UsageError, match="not offered in is1b"):
        cat.resolve("h100x1", region="is1b")
    assert "public/price" in h100.source and "third-party" not in h100.source
    v100 = cat.resolve("sakura:4Core-56GB-V100x1")
    assert (v100.price_jpy_per_hour, v100.daily_cap_jpy, v100.monthly_cap_jpy) == (Decimal(481), Decimal(11550),
                                                                                     Decimal(231000))
    assert v100.retired_on.isoformat() == "2027-03-31"
    assert cat.offer_status(v100) == "active" and "sale ends 2027-03-31" in v100.notes


def test_current_provider_facts():
    cat = catalog.load("2026-11")
    azure, aws = cat.providers["azure"], cat.providers["aws"]
    assert azure.family_quota_vcpus["standardNCASv3_T4Family"] == 0
    assert azure.default_quota_vcpus == 20
    assert azure.builder_is_worker is False and aws.builder_is_worker is True
    assert aws.capture_s == 5 * 60
    assert aws.default_quota_vcpus is None
    assert "L-DB2E81BA" in aws.how_to_raise
    assert cat.providers["baremetal"].power_price_jpy_per_kwh == Decimal(31)


def test_nc_a100_v4_and_nc_h100_v5_multi_gpu_sizes_are_linear_linux_list_prices():
    cat = catalog.load("2026-11")
    one_a100 = cat.resolve("azure:Standard_NC24ads_A100_v4", region="eastus").price
    assert one_a100 == Decimal("3.673")
    assert cat.resolve("azure:Standard_NC48ads_A100_v4").price == 2 * one_a100 == Decimal("7.346")
    assert cat.resolve("azure:Standard_NC96ads_A100_v4").price == 4 * one_a100 == Decimal("14.692")
    one_h100 = cat.resolve("azure:Standard_NC40ads_H100_v5").price
    assert cat.resolve("azure:Standard_NC80adis_H100_v5").price == 2 * one_h100 == Decimal("13.96")
    # the figures the rows had were Windows prices: Linux + USD 0.046 per vCPU-hour
    for name, vcpus, windows in (("Standard_NC48ads_A100_v4", 48, "9.554"), ("Standard_NC96ads_A100_v4", 96, "19.108"),
                                 ("Standard_NC80adis_H100_v5", 80, "17.64")):
        offer = cat.resolve(f"azure:{name}")
        assert offer.vcpus == vcpus
        assert offer.price + vcpus * Decimal("0.046") == Decimal(windows)
        assert f"the {windows} of datareceipts" in offer.notes and "Windows price" in offer.notes


def test_the_stale_fx_row_says_so_and_the_estimate_repeats_it(cli):
    usd = catalog.load("2026-11").fx["USD"]
    assert usd.date == "2026-03-11"
    assert "8 months older than the 2026-11 snapshot" in usd.notes
    assert "no newer dated USD/JPY figure was found" in usd.notes
    r = cli("estimate", "--videos", "4", "--provider", "aws")
    assert r.code == 0, r.err
    fx_line = next(ln for ln in r.out.splitlines() if "FX USD 1 = 158.19 JPY" in ln)
    assert "8 months older than the 2026-11 snapshot" in " ".join(r.out[r.out.index(fx_line):].split())


def _user_snapshot(home, name: str, price: str) -> None:
    """A copy of the shipped 2026-11 snapshot in the user's data dir, with one price changed."""
    src = catalog.snapshot_folder("2026-11")
    dst = home / "data" / "snapshots" / name
    dst.mkdir(parents=True)
    for f in ("offers.csv", "providers.csv", "quotas.csv"):
        (dst / f).write_text((src / f).read_text(encoding="utf-8"), encoding="utf-8")
    text = (dst / "offers.csv").read_text(encoding="utf-8")
    row = next(ln for ln in text.splitlines() if ln.startswith("aws,g4dn.xlarge,") and ",us-east-1," in ln)
    (dst / "offers.csv").write_text(text.replace(row, row.replace(",0.526,USD,", f",{price},USD,")), encoding="utf-8")


def test_user_snapshots_are_seen_and_the_newest_wins_unless_as_of(gpuplan_home):
    _user_snapshot(gpuplan_home, "2026-11-23", "0.5")
    assert catalog.snapshots() == ["2017-08", "2026-11", "2026-11-23"]
    newest = catalog.load()
    assert newest.snapshot == "2026-11-23" and newest.date == date(2026, 11, 23)
    assert newest.resolve("aws:g4dn.xlarge").price == Decimal("0.5")
    assert catalog.load("2026-11").snapshot == "2026-11-23"  # the month takes its dated snapshots
    assert catalog.load("2026-11-22").snapshot == "2026-11"  # a day before it does not
    assert catalog.load("2026-11-22").resolve("aws:g4dn.xlarge").price == Decimal("0.526")
    # a refreshed snapshot without its own fx.csv falls back to the shipped rows
    assert newest.fx["USD"].jpy_per_unit == Decimal("158.19")


def test_a_user_snapshot_that_changes_is_read_again(gpuplan_home):
    _user_snapshot(gpuplan_home, "2026-12-01", "0.5")
    assert catalog.load().resolve("aws:g4dn.xlarge").price == Decimal("0.5")
    offers = gpuplan_home / "data" / "snapshots" / "2026-12-01" / "offers.csv"
    import os

    text = offers.read_text(encoding="utf-8")
    offers.write_text(text.replace(",0.5,USD,", ",0.6,USD,"), encoding="utf-8")
    st = offers.stat()
    os.utime(offers, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert catalog.load().resolve("aws:g4dn.xlarge").price == Decimal("0.6")


@pytest.mark.parametrize("bad", ["2026-11-31", "2026-02-30"])
def test_bad_as_of_day_is_a_usage_error(bad):
    with pytest.raises(UsageError, match="YYYY-MM-DD"):
        catalog.load(bad)


def test_a_broken_user_snapshot_names_its_file(gpuplan_home):
    _user_snapshot(gpuplan_home, "2026-11-23", "lots")
    with pytest.raises(UsageError, match=r"data/snapshots/2026-11-23/offers.csv line \d+: bad price 'lots'"):
        catalog.load()
