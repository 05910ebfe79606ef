"""The chaos harness (benchmarks/chaos.py) in CI: a few randomized cycles against moto must leave
nothing behind and never find the state and the cloud disagreeing. The long run is a benchmark
(its result line is in docs/development.md, "Benchmarks")."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import chaos  # noqa: E402


def test_a_few_chaos_cycles_leak_nothing_and_agree(moto_aws):  # noqa: F811
    lines: list[str] = []
    report = chaos.run(cycles=4, seed=2026, log=lines.append)
    assert report.cycles == 4 and len(report.by_scenario) == 4  # four different scenarios
    assert report.leaks == [], lines
    assert report.disagreements == [], lines
    assert report.unexpected == [], lines


def test_the_issue_21_scenarios_leak_nothing_and_agree(moto_aws):  # noqa: F811
    """Same cluster name from two installations, a deleted lock file, a shared owner, a full disk."""
    lines: list[str] = []
    kinds = ["same-name", "lock-deleted", "shared-owner", "full-disk"]
    report = chaos.run(cycles=4, seed=21, log=lines.append, scenarios=kinds)
    assert report.cycles == 4 and sorted(report.by_scenario) == sorted(kinds)
    assert report.leaks == [], lines
    assert report.disagreements == [], lines
    assert report.unexpected == [], lines


def test_gcp_chaos_cycles_leak_nothing_and_agree():
    """The same scenarios against the GCP fake (operations done after 50 ms, one made to fail by
    the harness): a failed insert, a failed delete, a killed provision, one name from two
    installations, a full disk."""
    lines: list[str] = []
    kinds = ["fail-create", "fail-teardown", "kill-provision", "same-name", "full-disk"]
    report = chaos.run(cycles=5, seed=34, log=lines.append, scenarios=kinds, provider="gcp")
    assert report.cycles == 5 and sorted(report.by_scenario) == sorted(kinds)
    assert report.leaks == [], lines
    assert report.disagreements == [], lines
    assert report.unexpected == [], lines


def test_the_issue_44_refusals_leak_nothing_and_agree(moto_aws):  # noqa: F811
    """A 4-machine fleet whose first zone grants some, then refuses (the rest bought in the next
    zone), and the same with every zone refusing (rolled back): on moto and on the GCP fake."""
    for provider in ("aws", "gcp"):
        lines: list[str] = []
        kinds = ["refuse-zone", "refuse-all"]
        report = chaos.run(cycles=2, seed=44, log=lines.append, scenarios=kinds, provider=provider)
        assert report.cycles == 2 and sorted(report.by_scenario) == sorted(kinds)
        assert report.leaks == [], lines
        assert report.disagreements == [], lines
        assert report.unexpected == [], lines


def test_the_issue_44_refusals_on_azure_leak_nothing_and_agree():
    """The same refusals on the Azure fake ARM (served over loopback HTTP to the gpuplan
    processes): zone 1 grants some of the 4 VMs, then answers ZonalAllocationFailed (the rest
    bought in zone 2); then every zone refuses (exit 3, rolled back). Whatever the fake still
    holds afterwards (resource groups, VMs, NICs, public IPs, disks, NSGs) is a leak."""
    lines: list[str] = []
    kinds = ["refuse-zone", "refuse-all"]
    report = chaos.run(cycles=2, seed=44, log=lines.append, scenarios=kinds, provider="azure")
    assert report.cycles == 2 and sorted(report.by_scenario) == sorted(kinds)
    assert report.leaks == [], lines
    assert report.disagreements == [], lines
    assert report.unexpected == [], lines
