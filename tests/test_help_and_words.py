"""Issue 46 item 4 (and issue 42's last two): help, hints and words that say what the code does.
The provider lists are in tests/test_cli_docs.py; here the lines that lagged or misled."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest


def test_infra_slurm_without_slurm_yaml_points_to_its_doc(gpuplan_home):
    from gpuplan.cli.estimate import plan_estimate
    from gpuplan.errors import UsageError
    from gpuplan.planning import workloads

    with pytest.raises(UsageError) as err:
        plan_estimate(workloads.load("colorize-hd"), providers=("slurm",))
    line = str(err.value)
    assert "docs/slurm.md" in line and "slurm.yaml" in line and "no offers" not in line


def test_newest_source_reads_a_year_range_as_its_last_year():
    from gpuplan.cli.catalog import newest_source

    def offers(*dates):
        return [SimpleNamespace(as_of=d) for d in dates]

    assert newest_source(offers("2025-2026")) == "2026"  # it read "2025-20"
    assert newest_source(offers("2025-2026", "2025-12")) == "2026"
    assert newest_source(offers("2024-11 to 2026-02", "~2025 H1")) == "2026-02"
    assert newest_source(offers("2026-11-09 (derived)", "2026-11")) == "2026-11-09"


def test_catalog_of_gcp_alone_is_dated_by_a_real_month_or_year(cli):
    r = cli("catalog", "--provider", "gcp", "--region", "us-central1")
    assert r.code == 0, r.err
    head = r.out.splitlines()[0] + r.err
    assert "2025-20)" not in head and "2025-20 " not in head
    assert re.search(r"newest source (\d{4}|\d{4}-[01]\d(-\d\d)?)\)", r.out + r.err), head


def test_a_spot_row_is_planned_against_its_spot_quota():
    from gpuplan.market import catalog

    cat = catalog.load(None)
    g5 = next(o for o in cat.offers if o.provider == "aws" and o.name == "g5.xlarge" and o.market == "on-demand")
    spot = cat.spot_offer(g5)
    assert g5.quota_family == "L-DB2E81BA"  # Running On-Demand G and VT instances
    assert spot is not None and spot.quota_family == "L-3819A6DF"  # All G and VT Spot Instance Requests
    p3 = next(o for o in cat.offers if o.provider == "aws" and o.name == "p3.2xlarge" and o.market == "on-demand")
    assert cat.spot_offer(p3).quota_family == "L-7212CCBC"


def test_a_spot_plan_says_how_to_raise_the_spot_quota(cli, issue_19_regions):
    r = cli("estimate", "--videos", "4", "--spot", "--provider", "aws")
    assert r.code == 0, r.err
    raise_line = next(x for x in r.out.splitlines() if "request-service-quota-increase" in x)
    code = re.search(r"--quota-code (L-\w+)", raise_line).group(1)
    assert code in ("L-3819A6DF", "L-7212CCBC"), raise_line  # a spot quota, not L-DB2E81BA (on-demand G)
    assert f"aws {code} (All " in r.out and "Spot Instance Requests)" in r.out


def test_the_why_line_writes_durations_as_the_table_does(cli):
    r = cli("estimate", "--videos", "4")
    assert r.code == 0, r.err
    why = next(x for x in r.out.splitlines() if x.strip().startswith("why:"))
    assert "(¥60, 1:14 h)" in why and "74 min" not in why  # the pick's row reads "1:14 h"


def test_billed_under_wall_says_what_is_billed(cli):
    r = cli("estimate", "--videos", "4")
    text = " ".join(r.out.split())
    # DOK bills each task's run time; its image pull is wall time: 1:02 h billed in 1:14 h of wall
    assert ("wall 1:14 h, billed 1:02 h (each task's run time; its image pull and start are wall time, not billed)"
            in text)


def test_billed_over_wall_says_it_sums_the_machines():
    from gpuplan.cli.estimate import _billed_words

    offer = SimpleNamespace(kind="cloud", provider="azure")
    assert _billed_words(SimpleNamespace(fleet=((offer, 4),), wall_s=3 * 3600, billed_s=9 * 3600)) == \
        " (the time of 4 machines, summed)"
    assert _billed_words(SimpleNamespace(fleet=((offer, 4),), wall_s=3600, billed_s=3600)) == ""


def test_excluded_reasons_that_need_words_get_them():
    from gpuplan.cli.estimate import _excluded_line
    from gpuplan.planning.outcomes import Code, Outcome

    def plan(code):
        return SimpleNamespace(feasible=False, excluded_by=(Outcome(code),))

    est = SimpleNamespace(plans=[plan(Code.PRICED_LATER)] * 4 + [plan(Code.RETIRED)] * 2)
    line = _excluded_line(est)
    assert line.startswith("6 plans excluded: priced later 4 (their price rows are dated after the --as-of month),"
                           " retired 2;"), line


@pytest.mark.parametrize(("nodes", "words"), [(1, "1 owned host's power at"), (2, "2 owned hosts' power at")])
def test_owned_hosts_power_in_good_grammar(nodes, words):
    from decimal import Decimal

    from gpuplan.cli.jobs import _billed_how

    summary = SimpleNamespace(task_seconds=(), terms=None, provider="baremetal", nodes=nodes,
                              price_jpy_per_hour=Decimal("9.30"), node_seconds=())
    assert _billed_how(summary).startswith(words)


@pytest.mark.parametrize(("provider", "words"), [("aws", "EC2 terminates them"), ("gcp", "GCE deletes them"),
                                                 ("azure", "Azure deallocates them"), ("sakura", "they stop (power off)")])
def test_a_cluster_left_up_says_what_its_cloud_does_at_the_ttl(gpuplan_home, provider, words):
    from datetime import datetime, timezone
    from decimal import Decimal

    from gpuplan.run import launcher
    from gpuplan.store.state import State

    gpuplan_home.mkdir(parents=True, exist_ok=True)
    state = State(gpuplan_home / "state.db")
    state.add_cluster("kept", provider, "r1", "m1", 1, price_jpy_per_hour=Decimal("100"),
                      ttl_expires_at=datetime(2026, 11, 28, 13, 30, tzinfo=timezone.utc))
    line = launcher.left_billing(state, "kept")
    state.close()
    assert f"({words} at 13:30:00 UTC, the max_yen or TTL moment)" in line
    assert "stop themselves" not in line


def test_slurm_md_points_cluster_example_is_refused_until_filled_in_then_planned_at_its_figures(tmp_path):
    """docs/slurm.md's prepaid-points example (issue 46 item 8) ships no figure of its own: as
    written it is refused in one line naming the blank; filled in, it is a points-priced partition."""
    from decimal import Decimal
    from pathlib import Path

    from gpuplan.errors import UsageError
    from gpuplan.providers import slurm

    doc = (Path(__file__).resolve().parents[1] / "docs" / "slurm.md").read_text(encoding="utf-8")
    example = doc.split("### Example: a prepaid-points GPU cluster")[1].split("```yaml\n")[1].split("```")[0]
    path = tmp_path / "slurm.yaml"
    path.write_text(example.replace("GPUS", "8").replace("NODES", "2").replace("host_key: ssh-ed25519 AAAA...", ""))
    with pytest.raises(UsageError, match="points_per_gpu_hour must be a number above 0, not 'POINTS'"):
        slurm.load(path)
    path.write_text(path.read_text().replace("POINTS", "3").replace("YEN", "110"))
    (cluster,) = slurm.load(path)
    (part,) = cluster.partitions
    assert (cluster.name, part.gpus_per_node, part.nodes) == ("soroban", 8, 2)
    cost = slurm.cost_of(cluster, part, None)
    assert cost.jpy_per_gpu_hour == Decimal(330) and "3 points a GPU-hour" in cost.said
