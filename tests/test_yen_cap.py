"""The yen cap without a cluster: when `run --max-yen N` makes the batch stop (runner.cap_stop_at, by Cap.stop_moment,
by the cluster's ledger terms and the one billing rule), and what `run` refuses. The cap on a
real cluster (the driver stopping the batch) is in tests/test_run_containers.py."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from gpuplan.market import billing
from gpuplan.run import items as run_items
from gpuplan.run.caps import Cap
from gpuplan.run.ray import runner
from gpuplan.store.state import State

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc)


def _cluster(tmp_path: Path, name: str, nodes: int, price: Decimal | None, terms: billing.Terms | None = None) -> State:
    state = State(tmp_path / "state.db")
    state.add_cluster(name, "aws", "ap-northeast-1", "g4dn.xlarge", nodes, ssh_user="ubuntu", price_jpy_per_hour=price)
    for i in range(nodes):
        state.add_node(name, f"{name}-{i}", gpus=1)
        state.update_node(name, f"{name}-{i}", status="running", public_ip=f"203.0.113.{i + 1}")
        if terms is not None:
            state.ledger_start(name, f"{name}-{i}", "aws", "g4dn.xlarge", price, terms)
    return state


def test_the_cap_is_the_last_whole_second_the_nodes_bill_stays_within_it(tmp_path):
    state = _cluster(tmp_path, "c", 2, Decimal("367.20"))  # no ledger terms: the hourly price by the second
    at = runner.cap_stop_at(state, "c", Cap.on(Decimal(4)), now=NOW)
    t = int((at - NOW).total_seconds())
    assert t == 19  # 2 x ¥0.102 a second: 19 s is ¥3.876, 20 s ¥4.08
    assert run_items.yen_for(None, Decimal("367.20"), 2, t) <= 4 < run_items.yen_for(None, Decimal("367.20"), 2, t + 1)


def test_the_cap_follows_the_ledgers_terms_granularity_and_minimum(tmp_path):
    hourly = billing.Terms(Decimal(990), 3600, granularity_s=3600, minimum_s=3600)  # Sakura: the started hour
    state = _cluster(tmp_path, "s", 1, Decimal(990), hourly)
    # ¥2,000 buys two started hours: the batch may run until the second hour's last second
    assert runner.cap_stop_at(state, "s", Cap.on(Decimal(2000)), now=NOW) == NOW + timedelta(hours=2)
    with pytest.raises(runner.UsageError, match="first billed second"):
        runner.cap_stop_at(state, "s", Cap.on(Decimal(500)), now=NOW)  # less than the first (whole) hour


def test_a_cluster_without_a_price_cannot_be_capped(tmp_path):
    state = _cluster(tmp_path, "owned", 1, None)
    with pytest.raises(runner.UsageError, match="no price"):
        runner.cap_stop_at(state, "owned", Cap.on(Decimal(100)), now=NOW)


def test_capped_is_an_end_state_and_exits_6():
    assert "capped" in run_items.JOB_STATES_OVER
    assert run_items.Capped("x").exit_code == 6


@pytest.mark.parametrize("args, says", [
    (["--max-yen", "0"], "bad --max-yen '0'"),
    (["--max-yen", "ten"], "bad --max-yen 'ten'"),
    (["--registry-user", "bob"], "needs both --registry-user USER and --registry-password-env VAR"),
    (["--registry-user", "bob", "--registry-password-env", "V"], "give the image"),
    (["--env", "A=1"], "--env, --env-file, --secret-env and --registry are for DOK task runs"),
])
def test_run_refuses_bad_cap_and_registry_options_before_anything_starts(cli, tmp_path, args, says):
    items = tmp_path / "items.txt"
    items.write_text("a\n")
    r = cli("run", "demo", "--items", str(items), *args, "--", "echo", "{item}")
    assert r.code == 2 and says in r.err, r.err


def test_torchrun_takes_no_image_and_no_cap(cli):
    r = cli("run", "demo", "--torchrun", "--max-yen", "100", "--", "python", "train.py")
    assert r.code == 2 and "for item batches" in r.err


def test_dok_keeps_its_own_options(cli, tmp_path):
    items = tmp_path / "items.txt"
    items.write_text("a\n")
    r = cli("run", "dok:h100-80gb", "--items", str(items), "--image", "x:1", "--max-yen", "5", "--", "echo", "{item}")
    assert r.code == 2 and "are for cluster runs" in r.err
