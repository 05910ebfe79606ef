"""The JSON Schemas shipped for the files users write stay in step with gpuplan's own readers:
the same fields, the shipped files valid under both, and what the reader refuses refused by the
schema too."""

from __future__ import annotations

import dataclasses
import json
import re
from importlib import resources
from pathlib import Path

import pytest
import yaml

from gpuplan import schemas
from gpuplan.errors import UsageError
from gpuplan.market import catalog
from gpuplan.planning import profiles, workloads
from gpuplan.planning.types import Offer

jsonschema = pytest.importorskip("jsonschema")
DOCS = Path(__file__).resolve().parents[1] / "docs"


def _schema(name):
    return json.loads(schemas.path(name).read_text())


def _valid(name, data) -> bool:
    return jsonschema.Draft202012Validator(_schema(name)).is_valid(data)


def test_every_schema_is_a_valid_schema_and_ships_in_the_package():
    for name in schemas.NAMES:
        jsonschema.Draft202012Validator.check_schema(_schema(name))
        assert (resources.files("gpuplan.schemas") / f"{name}.schema.json").is_file()


def test_the_docs_point_to_the_schemas():
    text = " ".join(p.read_text() for p in DOCS.glob("*.md"))
    for name in schemas.NAMES:
        assert f"{name}.schema.json" in text


def test_workload_fields_are_the_readers():
    assert set(_schema("workload")["properties"]) == workloads._TOP


def test_prices_offer_fields_are_the_readers():
    offer = _schema("prices")["properties"]["offers"]["items"]["properties"]
    assert set(offer) == catalog._OFFER_FIELDS | {"snapshot"}
    # price_jpy_per_hour is worked out; listed_tax is set where an estimate moves a row to one tax basis;
    # interruption (issue 35) is a spot row's figure from spot_interruptions.csv, not a prices.yaml field;
    # tax_rate and tax_assumed are set with listed_tax (issue 42: the rate of the catalog's date, an unknown row's reading)
    assert catalog._OFFER_FIELDS == {f.name for f in dataclasses.fields(Offer)} - {"price_jpy_per_hour", "listed_tax",
                                                                                   "interruption", "tax_rate",
                                                                                   "tax_assumed"}


def test_profile_fields_are_what_bench_writes():
    s = _schema("profile")
    written = profiles.profile_from_dict(yaml.safe_load(_shipped_profiles()[0].read_text())).to_dict()
    assert set(written) <= set(s["properties"])
    assert set(s["properties"]["provenance"]["properties"]) == set(profiles.Provenance.__dataclass_fields__)


def _shipped_profiles():
    return sorted(Path(str(resources.files("gpuplan.catalog_data") / "profiles")).glob("*.yaml"))


def test_shipped_files_are_valid():
    for name in workloads.builtin_names():
        data = yaml.safe_load((Path(str(resources.files("gpuplan.catalog_data"))) / "workloads" / f"{name}.yaml").read_text())
        assert _valid("workload", data), name
    for path in _shipped_profiles():
        data = yaml.safe_load(path.read_text())
        profiles.profile_from_dict(data, str(path))
        assert _valid("profile", json.loads(json.dumps(data, default=str))), path.name


WORKLOADS = [  # (file, what the reader says)
    ({"name": "w", "reference_gpu": "T4", "jobs": [{"count": 3, "minutes": 30}]}, None),
    ({"name": "w", "reference_gpu": "T4", "unit": "epoch", "seconds_per_unit": 2, "jobs": [{"units": 30}]}, None),
    ({"name": "w", "reference_gpu": "T4", "jobs": [{"minutes": 30}], "colour": 1}, "unknown field 'colour'"),
    ({"name": "w", "jobs": [{"minutes": 30}]}, "field 'reference_gpu' is missing"),
    ({"name": "w", "reference_gpu": "T4", "jobs": [{"minutes": 30, "hours": 1}]}, "needs exactly one of"),
    ({"name": "w", "reference_gpu": "T4", "jobs": [{"minutes": 30}], "parallel": "model"}, "parallel must be"),
    ({"name": "w", "reference_gpu": "T4", "jobs": [{"minutes": -3}]}, "jobs[0].minutes"),
    ({"name": "w", "reference_gpu": "T4", "jobs": [{"minutes": 30, "count": 0}]}, "jobs[0].count"),
    ({"name": "w", "reference_gpu": "T4", "jobs": [{"minutes": 30}], "colocation": {"slowdown": {2: 0.5}}},
     "is below 1"),
    ({"name": "w", "reference_gpu": "T4", "jobs": [{"minutes": 30}],
      "memory_fraction": {"min": 0.25, "card_gib": 8, "context_gib": 0.3, "source": "report C"}}, None),
    ({"name": "w", "reference_gpu": "T4", "jobs": [{"minutes": 30}],
      "memory_fraction": {"min": 1.5, "card_gib": 8, "context_gib": 0.3}}, "is above 1"),
    ({"name": "w", "reference_gpu": "T4", "jobs": [{"minutes": 30}],
      "memory_fraction": {"min": 0.25, "card_gib": 8}}, "memory_fraction needs context_gib"),
    ({"name": "w", "reference_gpu": "T4", "jobs": [{"minutes": 30}], "memory_gib": 3,
      "memory_fraction": {"min": 0.25, "card_gib": 8, "context_gib": 0.3}}, "not both"),
]


@pytest.mark.parametrize("data, refusal", WORKLOADS)
def test_workload_schema_agrees_with_the_reader(data, refusal):
    if refusal is None:
        workloads.from_dict(data, "w.yaml")
        assert _valid("workload", json.loads(json.dumps(data)))
    else:
        with pytest.raises(UsageError, match=refusal.replace("[", r"\[").replace("]", r"\]")):
            workloads.from_dict(data, "w.yaml")
        assert not _valid("workload", json.loads(json.dumps(data)))


INVENTORIES = [
    ({"defaults": {"user": "root"}, "hosts": [{"name": "a", "address": "127.0.0.1", "port": 2222,
                                                "gpus": {"model": "Tesla T4", "count": 1}, "group": "t4"}]}, None),
    ({"hosts": [{"name": "a", "gpus": {"model": "T4"}}]}, "hosts[0]: address is missing"),
    ({"hosts": [{"name": "a", "address": "h"}]}, "hosts[0]: gpus is missing"),
    ({"hosts": "a"}, "expected `hosts:`"),
]


@pytest.mark.parametrize("data, refusal", INVENTORIES)
def test_inventory_schema_agrees_with_the_reader(data, refusal, tmp_path):
    from gpuplan.providers.baremetal import BaremetalProvider

    f = tmp_path / "inventory.yaml"
    f.write_text(yaml.safe_dump(data))
    provider = BaremetalProvider({"inventory": str(f)})
    if refusal is None:
        assert provider.inventory() and _valid("inventory", data)
    else:
        with pytest.raises(UsageError, match=re.escape(refusal)):
            provider.inventory()
        assert not _valid("inventory", data)


def test_the_docs_inventory_example_is_valid():
    text = (DOCS / "inventory.md").read_text()
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert _valid("inventory", yaml.safe_load(block))


PRICES = [
    ({"fx": {"USD": 150}, "offers": [{"provider": "aws", "name": "g4dn.xlarge", "price": 0.5}]}, None),
    ({"fx": {"USD": {"jpy_per_unit": 150, "date": "2026-11-01"}}, "providers": {"baremetal": {"power_price_jpy_per_kwh": 31}}},
     None),
    ({"offers": [{"provider": "aws", "name": "g4dn.xlarge", "prize": 0.5}]}, "unknown field 'prize'"),
    ({"offers": [{"name": "g4dn.xlarge", "price": 0.5}]}, "provider and name are required"),
    ({"providers": {"baremetal": {"colour": 1}}}, "only power_price_jpy_per_kwh"),
]


@pytest.mark.parametrize("data, refusal", PRICES)
def test_prices_schema_agrees_with_the_reader(data, refusal, tmp_path):
    f = tmp_path / "prices.yaml"
    f.write_text(yaml.safe_dump(data))
    if refusal is None:
        catalog.load(prices_file=f)
        assert _valid("prices", data)
    else:
        with pytest.raises(UsageError, match=refusal):
            catalog.load(prices_file=f)
        assert not _valid("prices", data)


def test_batch_fields_are_the_readers():
    from gpuplan import batchfile

    assert set(_schema("batch")["properties"]) == batchfile.FIELDS
    assert set(_schema("batch")["properties"]["registry"]["oneOf"][1]["properties"]) == batchfile.REGISTRY_FIELDS


BATCHES = [  # (file, what the reader says)
    ({"items": "v.txt", "command": "run {item}", "workload": "colorize-hd", "max_yen": 500, "infra": ["owned"]}, None),
    ({"items": "v.txt", "command": ["run", "{item}"], "env": {"A": "1"}, "image": "i:1",
      "registry": {"server": "ghcr.io", "username": "me", "password_env": "TOKEN"}}, None),
    ({"items": "v.txt", "command": "run x"}, "has no {item}"),
    ({"items": "v.txt", "command": "run {item}", "colour": 1}, "unknown field 'colour'"),
    ({"items": "v.txt", "command": "run {item}", "objective": "cheap"}, "use balanced, cost or time"),
    ({"items": "v.txt", "command": "run {item}", "registry": {"username": "me"}}, "give both username and password_env"),
    ({"items": "v.txt", "command": "run {item}", "per_gpu": 0}, "from 1 to 16"),
    ({"command": "run {item}"}, "items is missing"),
    ({"items": "v.txt", "command": "run {item}", "tax": "exclude", "max_yen": 500}, None),
    ({"items": "v.txt", "command": "run {item}", "tax": "gross"}, "use included, include, excluded or exclude"),
]


@pytest.mark.parametrize("data, refusal", BATCHES)
def test_batch_schema_agrees_with_the_reader(data, refusal, tmp_path):
    from gpuplan import batchfile

    f = tmp_path / "batch.yaml"
    f.write_text(yaml.safe_dump(data))
    if refusal is None:
        batchfile.read(f, {})
        assert _valid("batch", data)
    else:
        with pytest.raises(UsageError, match=refusal.replace("{", r"\{").replace("}", r"\}")):
            batchfile.read(f, {})
        assert not _valid("batch", data)
