"""One `Cap` value (run/caps.py): a batch's max_yen on its tax basis and in the yen the
ledger counts, compared on that one basis everywhere (issue 41). Hand arithmetic throughout."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

import yaml

from gpuplan.market import billing
from gpuplan.run import caps

# AWS bills by the second without tax; this stand-in bills each started hour (minimum an hour) so
# that the arithmetic below does not depend on the milliseconds between two rows' starts
HOURLY_52 = billing.Terms(Decimal(52), 3600, granularity_s=3600, minimum_s=3600)


def test_a_cap_is_kept_on_its_basis_and_in_ledger_yen():
    # ¥110 with Japan's 10 % tax on a price listed without it (AWS): the ledger counts ¥100
    cap = caps.Cap.on(Decimal(110), "included", "excluded")
    assert cap.billed == Decimal(100) and cap.said(Decimal(50)) == Decimal(55)
    # ¥100 without tax on owned hosts' power, listed with it (¥31/kWh): the ledger counts ¥110
    assert caps.Cap.on(Decimal(100), "excluded", "included").billed == Decimal(110)
    # on the basis it is listed on, or a row that does not say: as written
    assert caps.Cap.on(Decimal(100), "included", "included").billed == Decimal(100)
    assert caps.Cap.on(Decimal(100), "included", "unknown").billed == Decimal(100)
    assert caps.Cap.on(Decimal(100)).billed == Decimal(100)
    assert cap.reached(Decimal(100)) and not cap.reached(Decimal("99.99")) and not cap.reached(None)


def _launch_job(tmp_path: Path, gpuplan_home):
    """A launch of a batch with max_yen ¥110 (tax included, the default) on 2x an AWS size, its
    job row as launcher.start records it, the two machines in the ledger at ¥52 an hour each."""
    from gpuplan import batchfile
    from gpuplan.run import launcher
    from gpuplan.store.state import State

    (tmp_path / "v.txt").write_text("a\n")
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({"workload": "colorize-hd", "items": "v.txt",
                                                     "command": "echo {item}", "max_yen": 110}))
    batch = batchfile.read(tmp_path / "b.yaml", {})
    offer = SimpleNamespace(provider="aws", name="g4dn.xlarge", tax="excluded", listed_tax="", kind="vm")
    pick = launcher.Pick(tmp_path / "plan.json", offer, 2, "scratch", "on-demand", Decimal(1), Decimal(1), "ray")
    cap = launcher.batch_cap(pick, batch)
    gpuplan_home.mkdir(parents=True, exist_ok=True)
    state = State(gpuplan_home / "state.db")
    state.add_cluster("c", "aws", "us-east-1", "g4dn.xlarge", 2, price_jpy_per_hour=Decimal(52))
    for n in ("c-0", "c-1"):
        state.add_node("c", n, gpus=1)
        state.update_node("c", n, status="running")
        state.ledger_start("c", n, "aws", "g4dn.xlarge", Decimal(52), HOURLY_52, tax="excluded")
    state.add_job("c-1", "c", ["echo", "{item}"], launcher.launch_options(batch, pick, "c", tmp_path / "out", cap),
                  [(0, "a")], 2, backend="ray")
    return state, state.job("c-1")


def test_a_launchs_cap_is_compared_with_ledger_yen_on_one_basis(tmp_path, gpuplan_home):
    """The likely bug of issue 41: job_cap gave the batch's ¥110 (tax included) and cap_time and
    the follower's watch compared it with ledger yen as AWS lists them (without tax), ~10 % too
    generous. Two machines' first started hour is 2 x ¥52 = ¥104: within ¥110, but over the ¥100
    the ledger may count (¥110 / 1.1)."""
    from gpuplan.run import recover

    state, row = _launch_job(tmp_path, gpuplan_home)
    cap = recover.job_cap(row)
    assert (cap.yen, cap.tax, cap.listed, cap.billed, cap.scope) == (Decimal(110), "included", "excluded",
                                                                     Decimal(100), caps.CLUSTER)
    now = max(r["started_at"] for r in state.ledger_rows()) + timedelta(seconds=1)
    # ¥104 > ¥100 already: the batch must stop now, and no replacement fits (recover's check)
    assert recover.cap_time(state, row, now=now) == now
    assert caps.stop_time(state, "c", cap.billed, now=now, allowance_s=cap.allowance_s) == -1
    assert cap.reached(state.ledger_seconds_and_yen("c", now)[1])  # ¥104 spent: the follower's watch stops it
    # the same cluster under a cap of ¥121 with tax (¥110 billed): the first hour fits, the second
    # (¥208) does not; the stop is the first hour's end less the 120 s kept for fetch and teardown
    roomier = caps.Cap.on(Decimal(121), "included", "excluded", scope=caps.CLUSTER)
    assert roomier.billed == Decimal(110)
    first = min(r["started_at"] for r in state.ledger_rows())
    t = caps.stop_time(state, "c", roomier.billed, now=first, allowance_s=roomier.allowance_s)
    assert t == 3600 - 120
    state.close()


def test_a_capped_launch_says_the_ledgers_figure_on_the_caps_basis(tmp_path, gpuplan_home):
    """What a capped launch says it spent is its cluster's ledger (claim to teardown), put on
    the cap's basis: ¥104 as AWS bills it is ¥114.40 with tax."""
    import time

    import pytest

    from gpuplan.run import items as run_items
    from gpuplan.run import launcher, recover

    state, row = _launch_job(tmp_path, gpuplan_home)
    time.sleep(1.1)  # a started second: each machine's first started hour is billed
    for n in ("c-0", "c-1"):
        state.ledger_stop("c", n)  # torn down: the ledger holds both machines' first started hour
    state.set_job_state("c-1", "capped")
    with pytest.raises(run_items.Capped) as got:
        launcher.raise_outcome(state, "c-1", recover.job_cap(row))
    assert "stopped at max_yen ¥110: ¥114 spent on the batch's cluster, claim to teardown" in str(got.value)
    state.close()
