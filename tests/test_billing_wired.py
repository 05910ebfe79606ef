"""One billing rule everywhere (issue 18 item 4): the plan, the cost ledger, `status` and `run`'s
measured yen all charge through market/billing.py. A Sakura node billed by the started hour
(¥990/h) that is up for 10 minutes costs ¥990, not 10/60 of it."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from gpuplan.fleet import lifecycle
from gpuplan.market import billing
from gpuplan.planning import optimizer
from gpuplan.planning.model import Setting
from gpuplan.planning.plan_types import Job, Workload
from gpuplan.run import backends
from gpuplan.run import items as run_items
from gpuplan.store.state import State
from support import planner as sp
from support.sakura_fake import SakuraFake


@pytest.fixture
def fake(gpuplan_home, monkeypatch):
    f = SakuraFake()
    root = f.start()
    for k, v in f.env(root).items():
        monkeypatch.setenv(k, v)
    cfg = gpuplan_home / "config"
    cfg.mkdir(parents=True)
    (cfg / "config.yaml").write_text(yaml.safe_dump(
        {"owner": "billing-owner", "providers": {"sakura": {"poll_s": "0.005", "retries": "2"}}}))
    yield f
    f.stop()


def test_a_sakura_node_up_ten_minutes_costs_990_in_status_and_in_runs_measured_yen(fake, cli, gpuplan_home, monkeypatch,
                                                                                     tmp_path):
    r = cli("provision", "--yes", "sakura:h100x1", "x1", "--name", "tenmin", "--no-bootstrap", "--ssh-from", "203.0.113.5/32")
    assert r.code == 0, r.err
    real_now = lifecycle.now
    monkeypatch.setattr(lifecycle, "now", lambda: real_now() + timedelta(minutes=10))
    r = cli("status", "tenmin", "--format", "json")
    assert r.code == 0, r.err
    [cluster] = json.loads(r.out)
    assert cluster["yen_so_far"] == 990  # the started hour, as Sakura bills it (was ¥165: 990 x 10/60)
    monkeypatch.setenv("COLUMNS", "200")
    r = cli("status", "tenmin")
    assert "≈¥990 so far" in r.out

    from gpuplan import paths

    state = State(paths.state_db())
    terms = state.ledger_terms("tenmin")
    assert (terms.price_jpy, terms.granularity_s, terms.minimum_s) == (Decimal(990), 3600, 3600)
    # `run` measures its wall time and charges every node by the ledger's terms, as it does after a batch
    summary = run_items.RunSummary("tenmin", (), 600.0, 1, Decimal(990), tmp_path, terms=terms)
    assert summary.yen == Decimal(990)
    cmp = run_items.compare(summary, {"wall_s": Decimal(600), "yen": Decimal(990)})
    assert cmp.measured_yen == Decimal(990) and cmp.yen_error_pct == 0
    # issue 31: the measured yen go on the plan's tax basis first (Sakura bills with consumption tax)
    assert state.ledger_rows()[0]["tax"] == "included"  # provision recorded the row's basis
    cmp = run_items.compare(summary, {"wall_s": Decimal(600), "yen": Decimal(900), "tax": "excluded",
                                   "listed_tax": "included"})
    assert cmp.measured_yen == Decimal(900) and cmp.yen_error_pct == 0
    cmp = run_items.compare(summary, {"wall_s": Decimal(600), "yen": Decimal(990), "tax": "included",
                                   "listed_tax": "included"})
    assert cmp.measured_yen == Decimal(990) and cmp.yen_error_pct == 0
    r = cli("teardown", "--yes", "tenmin")
    assert r.code == 0, r.err


def test_an_old_ledger_is_migrated_and_keeps_the_rule_it_was_counted_by(tmp_path: Path):
    db = tmp_path / "state.db"
    State(db).close()
    con = sqlite3.connect(db)  # a state file from before the ledger kept terms
    con.executescript("""
        DROP TABLE ledger;
        CREATE TABLE ledger (id INTEGER PRIMARY KEY AUTOINCREMENT, cluster TEXT NOT NULL, node TEXT NOT NULL,
            provider TEXT NOT NULL, size TEXT NOT NULL, price_jpy_per_hour TEXT NOT NULL, started_at TEXT NOT NULL,
            stopped_at TEXT);
        INSERT INTO ledger (cluster, node, provider, size, price_jpy_per_hour, started_at, stopped_at)
            VALUES ('old', 'old-0', 'sakura', 'x', '990', '2026-01-01T00:00:00+00:00', '2026-01-01T00:10:00+00:00');
    """)
    con.commit()
    con.close()
    state = State(db)
    seconds, yen = state.ledger_seconds_and_yen("old")
    assert seconds == 600 and yen == Decimal(165)  # by the second, as it was counted then
    sakura = billing.Terms(Decimal(990), 3600, 3600, 3600)
    state.ledger_start("new", "new-0", "sakura", "x", Decimal(990), sakura)
    assert state.ledger_terms("new") == sakura
    assert state.ledger_terms("old") == billing.Terms(Decimal(990))


def test_a_capped_offer_costs_the_lesser_of_hours_and_its_day():
    from dataclasses import replace

    # Sakura VRT H100's terms (shared/notes/sakura-koukaryoku.md): ¥990/h, ¥23,100/day, ¥385,000/month
    vrt = replace(sp.offer(name="vrt", gpu="V100", memory="80", price="990", granularity=3600, minimum=3600),
                  daily_cap_jpy=Decimal(23100), monthly_cap_jpy=Decimal(385000))
    cat = sp.catalog([vrt], {"azure": sp.facts(setup_min=0)})
    w = Workload(name="t", description="", jobs=(Job("long", Decimal(30 * 3600)),), unit="second",
                 seconds_per_unit=Decimal(1), reference_gpu="V100", speed={"V100": Decimal(1)})
    est = optimizer.estimate(w, Setting(catalog=cat))
    rec = est.recommended
    # 30 h: one day at its cap (¥23,100) + 6 h at ¥990 = ¥29,040, not 30 x 990 = ¥29,700
    assert rec.cost == Decimal(29040) and rec.billed_s == 30 * 3600
    assert sum(rec.breakdown.values()) == rec.cost and rec.breakdown["cap"] == Decimal(-660)
    assert [v.cost for v in rec.vms] == [Decimal(29040)]
    assert est.proven


def test_run_charges_its_measured_wall_time_by_the_ledgers_terms(gpuplan_home):
    """`gpuplan run`'s measured yen for a batch on a cluster whose node bills by the started hour
    (¥990/h, Sakura's terms): a batch of seconds costs the node its hour, as the invoice will say.
    The batch is recorded as the engine's driver reports it (begin, one item, done), so this is
    the figure `run`, `jobs` and the run summary print."""
    from gpuplan import paths

    state = State(paths.state_db())
    try:
        state.add_cluster("hourly", "sakura", "is1a", "24Core-240GB-H100x1", 1, ssh_user="root",
                          price_jpy_per_hour=Decimal(990))
        state.ledger_start("hourly", "hourly-0", "sakura", "24Core-240GB-H100x1", Decimal(990),
                           billing.Terms(Decimal(990), 3600, 3600, 3600))
        state.add_job("hourly-1", "hourly", ["echo", "{item}"], {}, [(0, "a")], nodes=1)
        state.record_job_events("hourly-1", [
            {"t": "begin", "at": "2026-11-24T06:00:00+00:00"},
            {"t": "end", "i": 0, "status": "ok", "attempt": 1, "node": "hourly-0", "slot": "hourly-0:0",
             "start": "2026-11-24T06:00:01+00:00", "end": "2026-11-24T06:00:07+00:00", "exit": 0, "timed_out": False,
             "log": "-"},
            {"t": "done", "state": "succeeded", "at": "2026-11-24T06:00:08+00:00"}], 3)
        summary = backends.summary(state, "hourly-1")
        assert summary.jobs[0].status == "ok" and summary.wall_seconds == 8
        assert summary.yen == Decimal(990)  # was 990 x 8 / 3600 = ¥2.2: no provider bills that
        assert backends.yen(state, state.job("hourly-1")) == Decimal(990)
    finally:
        state.close()
