"""Issue 33: sizes and GPUs matched forgivingly when provisioning. A GPU's name ("t4", "h100")
takes the one size that fits, and lists them (exit 2) where several do, unless one provider is
named; without a count of GPUs a machine only one-GPU sizes fit, where there are any."""

from __future__ import annotations

import pytest


def _one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


def test_a_gpu_that_fits_several_sizes_lists_them_with_their_yen_and_exits_2(cli):
    r = cli("provision", "t4", "x4", "--dry-run")
    assert r.code == 2
    line = _one_line(r.err)
    assert "unknown instance type" not in line and "Traceback" not in line
    # every one-GPU T4 size of the catalog, cheapest first, each with its yen/h on one tax basis
    assert line == ("gpuplan: error: 't4' fits 5 sizes with 1x T4: aws:g4dn.xlarge ¥91.53/h,"
                    " azure:Standard_NC4as_T4_v3 ¥91.53/h, azure:Standard_NC8as_T4_v3 ¥130.85/h,"
                    " gcp:n1-standard-8+nvidia-tesla-t4 ¥149.21/h,"
                    " azure:Standard_NC16as_T4_v3 ¥209.51/h (yen/h with 10 % consumption tax); write one of them,"
                    " or name a provider too (aws:t4)")
    assert "NC64as" not in line  # four T4s a machine: not what `t4` asks for
    assert r.out == ""  # nothing would be created


def test_h100_is_not_silently_sakuras_when_aws_and_azure_have_h100_sizes(cli):
    r = cli("provision", "h100", "x1", "--dry-run")
    assert r.code == 2
    line = _one_line(r.err)
    for size in ("sakura:24Core-240GB-H100x1 ¥990/h", "aws:p5.4xlarge ¥1,197/h", "azure:Standard_NC40ads_H100_v5 ¥1,215/h"):
        assert size in line
    assert line.startswith("gpuplan: error: 'h100' fits 3 sizes with 1x H100 NVL or H100 PCIe or H100 SXM:")
    assert "dok-" not in line and "p5.48xlarge" not in line  # a DOK task is no machine; 8 GPUs is not one
    assert "would create" not in r.out


def test_naming_the_provider_takes_its_one_fitting_size_and_says_which(cli):
    r = cli("provision", "aws:t4", "x1", "--dry-run")
    assert r.code == 0, r.err
    assert "'aws:t4' is aws:g4dn.xlarge: the only aws size with 1x T4" in r.err
    assert "would create cluster" in r.out and "1x aws:g4dn.xlarge in us-east-1" in r.out
    r = cli("provision", "aws:h100", "x2", "--dry-run")
    assert r.code == 0, r.err
    assert "2x aws:p5.4xlarge" in r.out


def test_a_named_provider_with_several_fitting_sizes_lists_those(cli):
    r = cli("provision", "azure:t4", "x1", "--dry-run")
    assert r.code == 2
    line = _one_line(r.err)
    assert line.startswith("gpuplan: error: 't4' fits 3 azure sizes with 1x T4: azure:Standard_NC4as_T4_v3 ¥91.53/h,")
    assert "aws:" not in line and "name a provider" not in line


def test_without_one_gpu_sizes_every_size_of_that_gpu_fits(cli):
    r = cli("provision", "aws:a100", "x1", "--dry-run")  # AWS sells A100s eight at a time only
    assert r.code == 2
    line = _one_line(r.err)
    assert "fits 2 aws sizes with A100 40GB or A100 80GB GPUs: aws:p4d.24xlarge ¥3,821/h, aws:p4de.24xlarge" in line


def test_a_count_of_gpus_a_machine_chooses_among_the_sizes(cli):
    r = cli("provision", "t4x4", "x1", "--dry-run")
    assert r.code == 2
    assert ("'t4x4' fits 2 sizes with 4x T4: aws:g4dn.12xlarge ¥680.72/h, azure:Standard_NC64as_T4_v3 ¥757.29/h"
            in _one_line(r.err))
    r = cli("provision", "aws:t4x4", "x1", "--dry-run")
    assert r.code == 0, r.err
    assert "1x aws:g4dn.12xlarge" in r.out
    r = cli("provision", "t4x3", "x1", "--dry-run")
    assert r.code == 2 and "no size has 3x T4" in _one_line(r.err)


def test_one_fitting_size_is_taken_and_said(cli):
    r = cli("provision", "azure:a100", "x1", "--dry-run")  # Azure's only one-A100 size (GCP has one too)
    assert r.code == 0, r.err
    assert "'azure:a100' is azure:Standard_NC24ads_A100_v4: the only azure size with 1x A100" in r.err
    assert "1x azure:Standard_NC24ads_A100_v4" in r.out


@pytest.mark.parametrize("typed, expected", [
    ("nc4as_t4_v3", "azure:Standard_NC4as_T4_v3"),  # a size's own name still names it
    ("sakura:h100x1", "sakura:24Core-240GB-H100x1"),  # so does an alias
    ("g4dn-XLARGE", "aws:g4dn.xlarge"),
    ("nc24ads", "azure:Standard_NC24ads_A100_v4"),  # and the start of one size's name
])
def test_size_names_still_name_their_size(cli, typed, expected):
    r = cli("provision", typed, "x1", "--dry-run")
    assert r.code == 0, r.err
    assert f"1x {expected} in" in r.out


def test_a_provider_without_that_gpu_says_so(cli):
    r = cli("provision", "aws:a10", "x1", "--dry-run")
    assert r.code == 2
    assert _one_line(r.err) == ("gpuplan: error: no aws size has A10 GPUs (catalog 2026-11); `gpuplan catalog --gpu a10`"
                                " lists the sizes that do")


def test_the_start_of_several_size_names_still_lists_them(cli):
    r = cli("provision", "nv", "x1", "--dry-run")  # "nv" is part of "H100 NVL" but starts two Azure sizes
    assert r.code == 2
    assert "instance type 'nv' fits several: azure:Standard_NV12s_v3, azure:Standard_NV36ads_A10_v5" in r.err


def test_a_region_narrows_the_sizes_a_gpu_name_fits(cli):
    r = cli("provision", "t4", "x1", "--region", "ap-northeast-1", "--dry-run")  # Azure's T4 sizes are not there
    assert r.code == 0, r.err
    assert "'t4' is aws:g4dn.xlarge: the only size with 1x T4 in ap-northeast-1" in r.err
    assert "1x aws:g4dn.xlarge in ap-northeast-1" in r.out
    r = cli("provision", "t4", "x1", "--region", "japaneast", "--dry-run")  # a region the shipped catalog lacks
    assert r.code == 2
    line = _one_line(r.err)
    assert line.startswith("gpuplan: error: no size with 1x T4 is offered in japaneast (catalog 2026-11);")
    assert "gpuplan catalog refresh --provider azure --region japaneast" in line
