"""`gpuplan catalog`: filters, formats, retired rows, errors as one line with exit 2."""

from __future__ import annotations

import csv
import io
import json

import pytest


@pytest.fixture(autouse=True)
def _no_env_prices(monkeypatch):
    monkeypatch.delenv("GPUPLAN_PRICES", raising=False)


def test_json_lists_exactly_the_2017_azure_rows_with_their_yen(cli):
    r = cli("catalog", "--provider", "azure", "--as-of", "2017-08", "--format", "json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["snapshot"] == "2017-08"
    got = {(o["name"], o["price_jpy_per_hour"], o["billing_granularity_s"], o["status"]) for o in doc["offers"]}
    assert got == {("Standard_NC6", "91.80", 60, "active"), ("Standard_NC24", "367.20", 60, "active")}
    assert doc["retired_hidden"] == 0
    assert all(o["source"] and o["as_of"] for o in doc["offers"])


def test_unknown_provider_is_one_line_exit_2(cli):
    r = cli("catalog", "--provider", "nosuch")
    assert r.code == 2
    assert r.err.strip().count("\n") == 0
    assert "unknown provider 'nosuch'" in r.err and "azure" in r.err
    assert "Traceback" not in r.err + r.out


@pytest.mark.parametrize(("args", "needle"), [
    (("--as-of", "2016-01"), "no catalog snapshot on or before 2016-01"),
    (("--as-of", "last-year"), "bad --as-of 'last-year'"),
    (("--format", "xml"), "bad --format 'xml'"),
    (("--gpu", "K81"), "unknown GPU 'K81'"),
])
def test_bad_options_are_one_line_exit_2(cli, args, needle):
    r = cli("catalog", *args)
    assert r.code == 2
    assert needle in r.err
    assert r.err.strip().count("\n") == 0


def test_retired_rows_hidden_unless_all(cli):
    shown = json.loads(cli("catalog", "--provider", "azure", "--format", "json").out)
    names = {o["name"] for o in shown["offers"]}
    assert "Standard_NC6" not in names and "Standard_NC4as_T4_v3" in names
    # NC6, NC24 in two regions each; NC6s_v3 x2, NC12s_v3, NC24s_v3 x2
    assert shown["retired_hidden"] == 9
    every = json.loads(cli("catalog", "--provider", "azure", "--all", "--format", "json").out)
    nc6 = next(o for o in every["offers"] if o["name"] == "Standard_NC6" and o["region"] == "westus2")
    assert nc6["status"] == "retired 2023-09-06 -> Standard_NC4as_T4_v3"
    assert len(every["offers"]) == len(shown["offers"]) + 9


def test_table_says_how_many_retired_rows_were_hidden(cli):
    r = cli("catalog", "--provider", "azure")
    assert r.code == 0
    assert "9 retired instance type rows hidden (--all lists them)" in r.out
    assert "USD = ¥158.19" in r.out


def test_csv_filters_by_gpu_and_region(cli):
    r = cli("catalog", "--gpu", "t4", "--region", "ap-northeast-1", "--format", "csv")
    assert r.code == 0, r.err
    rows = list(csv.DictReader(io.StringIO(r.out)))
    assert {(x["provider"], x["name"], x["price"], x["currency"]) for x in rows} == {
        ("aws", "g4dn.xlarge", "0.71", "USD"), ("aws", "g4dn.12xlarge", "5.281", "USD"),
    }
    g4 = next(x for x in rows if x["name"] == "g4dn.xlarge")
    assert g4["price_jpy_per_hour"] == "112.3149"


def test_user_prices_file_shows_in_output(cli, gpuplan_home):
    cfg = gpuplan_home / "config"
    cfg.mkdir(parents=True)
    (cfg / "prices.yaml").write_text("offers:\n  - {provider: baremetal, name: p100x2-monthly, price: 146000}\n")
    doc = json.loads(cli("catalog", "--provider", "baremetal", "--format", "json").out)
    bm = next(o for o in doc["offers"] if o["name"] == "p100x2-monthly")
    assert (bm["price"], bm["price_jpy_per_hour"], bm["status"]) == ("146000", "200", "active")
    assert doc["prices_file"] == str(cfg / "prices.yaml")


def test_malformed_prices_file_is_one_line_exit_2(cli, gpuplan_home):
    cfg = gpuplan_home / "config"
    cfg.mkdir(parents=True)
    (cfg / "prices.yaml").write_text("offers: [\n")
    r = cli("catalog")
    assert r.code == 2
    assert str(cfg / "prices.yaml") in r.err and "not valid YAML" in r.err
    assert r.err.strip().count("\n") == 0
