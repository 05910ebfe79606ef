"""`gpuplan cost-report`: the ledger's machines billed as their providers bill them, per month."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from gpuplan.market import billing, catalog
from gpuplan.store import costs

T0 = datetime(2026, 10, 31, 23, 30, tzinfo=timezone.utc)


def _row(cluster, node, provider, size, price, start, seconds):
    """A ledger row as State.ledger_rows gives it: the terms are the catalog offer's, as provision records them."""
    offer = next(o for o in catalog.load().offers if o.provider == provider and o.name == size and o.market == "on-demand")
    terms = billing.terms_for(offer)
    return {"cluster": cluster, "node": node, "provider": provider, "size": size, "price_jpy_per_hour": Decimal(price),
            "started_at": start, "stopped_at": start + timedelta(seconds=seconds) if seconds is not None else None,
            "terms": billing.Terms(Decimal(price), terms.period_s, terms.granularity_s, terms.minimum_s,
                                   terms.daily_cap_jpy, terms.monthly_cap_jpy)}


def test_a_short_aws_hold_pays_the_60_s_minimum():
    rows = [_row("a", "a-0", "aws", "g4dn.xlarge", "120", T0, 30)]
    [line] = costs.report(rows)
    assert line.yen == Decimal(2)  # 60 s at ¥120/h, not 30 s
    assert line.seconds == 30 and "per second, minimum 60 s" in line.terms


def test_an_hourly_machine_across_a_month_end_pays_its_started_hours_once():
    # Sakura bills by the started hour: 23:30 -> 01:00 is 1.5 h held, 2 h billed; Oct gets the first hour
    rows = [_row("s", "s-0", "sakura", "24Core-240GB-H100x1", "990", T0, 5400)]
    lines = costs.report(rows)
    assert [(x.month, x.yen) for x in lines] == [("2026-10", Decimal(990)), ("2026-11", Decimal(990))]
    assert sum(x.seconds for x in lines) == 5400
    only_nov = costs.report(rows, month="2026-11")
    assert [x.month for x in only_nov] == ["2026-11"]


def test_machines_of_one_cluster_add_up_and_a_held_one_runs_to_now():
    rows = [_row("b", f"b-{i}", "aws", "g4dn.xlarge", "72", T0 + timedelta(hours=1), 3600) for i in range(3)]
    rows.append(_row("b", "b-3", "aws", "g4dn.xlarge", "72", T0 + timedelta(hours=1), None))
    at = T0 + timedelta(hours=3)
    [line] = costs.report(rows, at=at)
    assert line.machines == 4 and line.running and line.seconds == 3 * 3600 + 2 * 3600
    assert line.yen == Decimal(72 * 5)


def test_the_cli_reports_from_the_ledger(cli, gpuplan_home):
    from gpuplan.store.state import State

    state = State.open_default()
    import time

    sakura = next(o for o in catalog.load().offers if o.provider == "sakura" and o.name == "24Core-240GB-H100x1")
    state.ledger_start("demo", "demo-0", "sakura", "24Core-240GB-H100x1", Decimal(990), billing.terms_for(sakura))
    time.sleep(1.1)  # the ledger keeps whole seconds
    state.ledger_stop("demo", "demo-0")  # held for a second or two: one started hour
    r = cli("cost-report")
    assert r.code == 0, r.err
    row = next(line for line in r.out.splitlines() if line.split()[1:2] == ["demo"])
    assert "1x sakura:24Core-240GB-H100x1" in row and "¥990" in row and "per hour" in row
    assert "total: ¥990" in r.out
    data = json.loads(cli("cost-report", "--format", "json").out)
    assert data["total_jpy"] == "990.00" and data["lines"][0]["cluster"] == "demo"
    month = data["lines"][0]["month"]
    assert "nothing in the cost ledger for 1999-01" in cli("cost-report", "--month", "1999-01").out
    assert cli("cost-report", "--month", month).code == 0
    r = cli("cost-report", "--month", "2026-13")
    assert r.code == 2 and "bad --month '2026-13'" in r.err


def test_cost_report_shows_every_line_on_the_estimates_tax_basis(cli, gpuplan_home):
    # issue 31: the ledger keeps what the provider bills (AWS without consumption tax, Sakura with it);
    # cost-report puts every line on one basis, by default the estimate's: with the 10 % tax on all
    import time

    from gpuplan.store.state import State

    state = State.open_default()
    rows = (("a", "aws", "g4dn.xlarge", "110", "excluded"), ("s", "sakura", "24Core-240GB-H100x1", "990", "included"),
            ("o", "sakura", "24Core-240GB-H100x1", "990", None))
    for cluster, provider, size, price, listed in rows:
        state.ledger_start(cluster, f"{cluster}-0", provider, size, Decimal(price),
                           billing.Terms(Decimal(price), 3600, 3600, 3600), **({"tax": listed} if listed else {}))
    time.sleep(1.1)  # the ledger keeps whole seconds
    for cluster, *_ in rows:
        state.ledger_stop(cluster, f"{cluster}-0")  # one started hour each
    taxed = json.loads(cli("cost-report", "--format", "json").out)
    plain = json.loads(cli("cost-report", "--format", "json", "--tax", "exclude").out)
    yen = {d["tax"]: {x["cluster"]: x["cost_jpy"] for x in d["lines"]} for d in (taxed, plain)}
    # a row recorded before the ledger kept its basis ("o") stays as billed in both views
    assert yen == {"included": {"a": "121.00", "s": "990.00", "o": "990.00"},
                   "excluded": {"a": "110.00", "s": "900.00", "o": "990.00"}}
    assert {x["cluster"]: x["listed_tax"] for x in taxed["lines"]} == {"a": "excluded", "s": "included", "o": "unknown"}
    r = cli("cost-report")
    assert "gpuplan cost-report; yen include Japan's 10 % consumption tax" in r.out
    assert "total: ¥2,101" in r.out and "1 line whose price does not say" in r.out
    assert "gpuplan cost-report; yen exclude consumption tax" in cli("cost-report", "--tax", "excluded").out
    assert cli("cost-report", "--tax", "gross").code == 2
