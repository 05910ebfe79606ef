"""GPU and size names as people type them: case, suffixes and punctuation forgiven, several fits listed."""

from __future__ import annotations

import pytest

from gpuplan.errors import UsageError
from gpuplan.market import catalog


@pytest.fixture(scope="module")
def cat():
    return catalog.load("2026-11")


@pytest.mark.parametrize("typed, expected", [
    ("t4", ["T4"]),
    ("H100", ["H100 NVL", "H100 PCIe", "H100 SXM"]),
    ("h100 sxm", ["H100 SXM"]),
    ("a100", ["A100 40GB", "A100 80GB"]),
    ("a100-80", ["A100 80GB"]),
    ("a10", ["A10"]),  # an exact name wins over the names it starts (A10G, A100 ...)
    ("1080ti", ["GTX 1080 Ti"]),
    ("titan x pascal", ["TITAN X (Pascal)"]),
    ("b200", ["B200"]),  # issue 22 (高火力 PHY) and issue 19 added the B200 row
    ("l40", ["L40"]),  # issue 19; an exact name wins over L40S
    ("mi300x", []),
])
def test_gpu_names_forgive_case_and_suffixes(cat, typed, expected):
    assert cat.match_gpus(typed) == expected


@pytest.mark.parametrize("typed, expected", [
    ("nc6", "Standard_NC6"),
    ("NC4as_T4_v3", "Standard_NC4as_T4_v3"),
    ("standard_nc4as_t4_v3", "Standard_NC4as_T4_v3"),
    ("nc24ads", "Standard_NC24ads_A100_v4"),  # the start of exactly one size
    ("G4DN.XLARGE", "g4dn.xlarge"),
    ("aws:g4dn-xlarge", "g4dn.xlarge"),
])
def test_size_names_forgive_case_prefix_and_punctuation(cat, typed, expected):
    assert cat.resolve(typed).name == expected


def test_a_size_that_fits_several_lists_them(cat):
    with pytest.raises(UsageError) as e:
        cat.resolve("aws:g4dn")
    assert str(e.value) == "instance type 'g4dn' fits several: aws:g4dn.12xlarge, aws:g4dn.xlarge; write one of them"


def test_catalog_gpu_filter_lists_every_h100(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    r = cli("catalog", "--gpu", "h100", "--format", "csv")
    assert r.code == 0, r.err
    gpus = {line.split(",")[4] for line in r.out.splitlines()[1:]}
    assert gpus == {"H100 NVL", "H100 PCIe", "H100 SXM"}
    r = cli("catalog", "--gpu", "nosuchgpu")
    assert r.code == 2 and "unknown GPU 'nosuchgpu'" in r.err
