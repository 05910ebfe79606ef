"""`gpuplan provision` says everything it can check at once, before it asks or creates anything
(issues 32 and 33): a missing extra first, then credentials, the order and its flags, the SSH
source, and a missing terminal for the question; `--dry-run` checks the same, less credentials
and the terminal. The tests' stdin is not a terminal."""

from __future__ import annotations

import pytest


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    from support.credentials import without_credentials

    without_credentials(monkeypatch, tmp_path)


def _block(r) -> list[str]:
    assert r.code == 2, (r.code, r.out, r.err)
    assert "Traceback" not in r.err and r.out == ""
    lines = r.err.strip().splitlines()
    assert lines[0].startswith("gpuplan: error: provision cannot start; fix these ")
    return [ln.removeprefix("  - ") for ln in lines[1:]]


def test_a_missing_extra_comes_first_with_the_region_and_the_terminal(cli, no_credentials, monkeypatch):
    from gpuplan.providers.azure import AzureProvider

    monkeypatch.setattr(AzureProvider, "sdk_modules", ("azure.mgmt.nosuchmodule",))  # as if gpuplan[azure] were not there
    r = cli("provision", "azure:NC4as_T4_v3", "x1", "--region", "nowhere-1")
    block = _block(r)
    assert len(block) == 3, block
    assert "install it with: pip install 'gpuplan[azure]'" in block[0] and "azure.mgmt.nosuchmodule" in block[0]
    assert "not offered in nowhere-1" in block[1]
    assert "rerun with --yes" in block[2]


def test_credentials_playbook_ssh_source_and_terminal_together(cli, no_credentials):
    r = cli("provision", "aws:g4dn.xlarge", "x1", "--playbook", "nosuch", "--ssh-from", "not-an-address")
    block = _block(r)
    assert len(block) == 4, block
    assert "AWS" in block[0] and "credentials" in block[0].lower()
    assert "nosuch" in block[1] and "not-an-address" in block[2] and "rerun with --yes" in block[3]


def test_one_problem_is_one_line(cli, no_credentials):
    r = cli("provision", "aws:g4dn.xlarge", "x1", "--yes")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert r.err.startswith("gpuplan: error: ") and "credentials" in r.err.lower()


@pytest.mark.parametrize("flags, culprit", [
    (["--image", "my-image", "--playbook", "cuda"], "not run on machines started from an --image"),
    (["--no-bootstrap", "--playbook", "cuda"], "--playbook and --no-bootstrap contradict"),
    (["--playbook", "nosuch"], "nosuch"),
    (["--ssh-from", "300.1.2.3"], "300.1.2.3"),
])
def test_dry_run_refuses_what_the_real_run_would_only_find_after_creating(flags, culprit, cli, no_credentials):
    """No credentials and no terminal are needed for a dry run; what is wrong with the order is."""
    r = cli("provision", "aws:g4dn.xlarge", "x1", "--dry-run", *flags)
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and culprit in r.err, r.err
    ok = cli("provision", "aws:g4dn.xlarge", "x1", "--dry-run")
    assert ok.code == 0 and ok.out.startswith("would create cluster"), ok.err


def test_check_names_the_missing_extra_before_credentials(cli, no_credentials, monkeypatch):
    from gpuplan.providers.azure import AzureProvider

    monkeypatch.setattr(AzureProvider, "sdk_modules", ("azure.mgmt.nosuchmodule",))
    import json

    r = cli("check", "azure", "--format", "json")
    [row] = json.loads(r.out)
    assert row["provider"] == "azure" and row["ready"] is False
    assert "pip install 'gpuplan[azure]'" in row["credentials"] and "AZURE_SUBSCRIPTION_ID" not in row["credentials"]


def test_a_dry_run_names_a_missing_extra_in_a_note_and_still_shows_the_order(cli, no_credentials, monkeypatch):
    """The Quickstart install has no cloud SDK: a dry run still shows what would be made."""
    from gpuplan.providers.azure import AzureProvider

    monkeypatch.setattr(AzureProvider, "sdk_modules", ("azure.mgmt.nosuchmodule",))
    r = cli("provision", "azure:NC4as_T4_v3", "x1", "--dry-run")
    assert r.code == 0 and r.out.startswith("would create cluster"), r.err
    assert "note: provider 'azure' needs an extra package (azure.mgmt.nosuchmodule)" in r.out
