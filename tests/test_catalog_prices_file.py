"""User prices.yaml: overriding and adding offers, FX rates and power prices; errors name the file."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpuplan.errors import UsageError
from gpuplan.market import catalog


@pytest.fixture(autouse=True)
def _clean_env(gpuplan_home, monkeypatch):
    monkeypatch.delenv(catalog.PRICES_ENV, raising=False)


def write(tmp_path, text: str):
    path = tmp_path / "prices.yaml"
    path.write_text(text)
    return path


def test_override_price_and_add_fx_rate(tmp_path):
    path = write(tmp_path, """
fx:
  USD: {jpy_per_unit: 150.5, date: 2026-11-20, source: my bank}
  EUR: 170
offers:
  - {provider: azure, name: Standard_NC4as_T4_v3, region: eastus, price: 0.5}
  - provider: sakura
    name: my-l40s
    region: is1a
    gpu: L40S
    gpu_count: 2
    gpu_memory_gib: 48
    vcpus: 32
    price: 1.25
    currency: EUR
""")
    cat = catalog.load("2026-11", prices_file=path)
    assert cat.fx["USD"] == catalog.FxRate("USD", Decimal("150.5"), "2026-11-20", "my bank")
    t4 = cat.resolve("nc4t4")
    assert t4.price == Decimal("0.5")
    assert t4.price_jpy_per_hour == Decimal("75.25")  # 0.5 x 150.5
    assert str(path) in t4.source
    # the westus2 row was not named, so only its FX changed
    assert cat.resolve("nc4t4", region="westus2").price_jpy_per_hour == Decimal("0.526") * Decimal("150.5")
    mine = cat.resolve("my-l40s")
    assert (mine.provider, mine.gpu_count, mine.price_jpy_per_hour) == ("sakura", 2, Decimal("212.50"))
    assert mine.as_of == "user"
    assert cat.prices_file == path


def test_override_without_region_applies_to_every_region_and_clears_unsourced_note(tmp_path):
    path = write(tmp_path, """
offers:
  - {provider: baremetal, name: p100x2-monthly, price: 146000}
""")
    cat = catalog.load("2026-11", prices_file=path)
    bm = cat.resolve("bm-p100x2")
    assert bm.price == Decimal(146000)
    assert bm.price_jpy_per_hour == Decimal(200)  # 146000 / 730 h
    assert "price not sourced" not in bm.notes
    assert cat.offer_status(bm) == "active"


def test_power_price_override_changes_owned_hourly_cost(tmp_path):
    path = write(tmp_path, "providers:\n  baremetal: {power_price_jpy_per_kwh: 40}\n")
    gtx = catalog.load("2026-11", prices_file=path).resolve("1080ti")
    assert gtx.price_jpy_per_hour == Decimal(10)  # 0.25 kW x 40


def test_snapshot_key_limits_an_entry(tmp_path):
    path = write(tmp_path, "offers:\n  - {provider: azure, name: Standard_NC6, price: 80, snapshot: 2017-08}\n")
    assert catalog.load("2017-08", prices_file=path).resolve("nc6").price == Decimal(80)
    assert catalog.load("2026-11", prices_file=path).resolve("nc6").price == Decimal("0.90")


def test_default_file_in_config_dir_and_env_override(gpuplan_home, tmp_path, monkeypatch):
    cfg = gpuplan_home / "config"
    cfg.mkdir(parents=True)
    (cfg / "prices.yaml").write_text("fx: {USD: 100}\n")
    assert catalog.load("2026-11").resolve("g4dn.xlarge").price_jpy_per_hour == Decimal("52.600")
    other = write(tmp_path, "fx: {USD: 200}\n")
    monkeypatch.setenv(catalog.PRICES_ENV, str(other))
    assert catalog.load("2026-11").resolve("g4dn.xlarge").price_jpy_per_hour == Decimal("105.200")


def test_missing_named_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match=r"prices file .*nope.yaml not found"):
        catalog.load(prices_file=tmp_path / "nope.yaml")


def test_malformed_yaml_names_the_file_and_line(tmp_path):
    path = write(tmp_path, "fx:\n  USD: 150\noffers: [\n  {provider: azure\n")
    with pytest.raises(UsageError) as exc:
        catalog.load(prices_file=path)
    msg = str(exc.value)
    assert msg.startswith(f"{path} line ")
    assert "not valid YAML" in msg
    assert "\n" not in msg


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("offers:\n  - {provider: azure, name: Standard_NC6, price: cheap}\n",
         r"offers\[0\] \(azure:Standard_NC6\): bad price 'cheap': expected a number"),
        ("offers:\n  - {provider: aws, name: g4dn.xlarge, price: 1}\n  - {provider: aws, name: x1, region: r, gpu: T4, gpu_count: 0, price: 1, currency: USD}\n",
         r"offers\[1\] \(aws:x1\): bad gpu_count 0"),
        ("offers:\n  - {provider: aws, name: newbox, region: us-east-1, price: 1, currency: USD}\n",
         r"offers\[0\] \(aws:newbox\): a new offer needs gpu"),
        ("offers:\n  - {provider: aws, name: g4dn.xlarge, colour: red}\n", r"offers\[0\] \(aws:g4dn.xlarge\): unknown field 'colour'"),
        ("fx: {USD: -1}\n", r"fx.USD: bad jpy_per_unit -1"),
        ("fx: {USD: 0}\n", r"fx.USD: bad jpy_per_unit 0"),
        ("offers:\n  - {provider: azure, name: Standard_NC6, retired_on: soon}\n", r"bad retired_on 'soon': expected a date"),
        ("offers:\n  - {provider: azure, name: Standard_NC6, kind: leased}\n", r"bad kind 'leased'"),
        ("providers:\n  nosuch: {power_price_jpy_per_kwh: 1}\n", r"providers.nosuch: unknown provider"),
        ("- just a list\n", r"expected a mapping"),
        ("prices: {}\n", r"unknown section 'prices'"),
    ],
)
def test_bad_fields_name_the_file_entry_and_field(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(UsageError, match=expected) as exc:
        catalog.load("2026-11", prices_file=path)
    assert str(exc.value).startswith(str(path))
