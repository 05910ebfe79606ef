"""`run --recover` buying a replacement (issue 35): in which market and at what price, and never
past the batch's yen cap (recover.cap_time, with hand arithmetic). The whole path on moto and
real Ray is tests/test_spot_notice.py."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from gpuplan.market import billing

PER_SECOND_360 = billing.per_second(Decimal(360))  # ¥0.1 a second


def _db(home, name: str):
    home.mkdir(parents=True, exist_ok=True)
    return home / name


def _cluster(state, spot: bool, max_yen: str | None = "100", price: Decimal = Decimal(360)):
    state.add_cluster("c", "aws", "us-east-1", "g4dn.xlarge", 2, price_jpy_per_hour=price,
                      spec={"spot": spot, "gpus_per_node": 1})
    for n in ("c-0", "c-1"):
        state.add_node("c", n, gpus=1)
        state.update_node("c", n, status="running", provider_id=f"i-{n}")
        state.ledger_start("c", n, "aws", "g4dn.xlarge", price, billing.per_second(price))
    state.add_job("c-1", "c", ["true"], {"max_yen": max_yen} if max_yen else {}, [(0, "a")], 2)
    return state.job("c-1")


def test_a_dearer_replacement_brings_the_cap_earlier_by_the_one_billing_rule(gpuplan_home):
    from gpuplan.run import recover
    from gpuplan.store.state import State

    state = State(_db(gpuplan_home, "state.db"))
    row = _cluster(state, spot=True)
    since = row.submitted_at
    # two nodes at ¥0.1/s from the batch's start: ¥100 lasts 500 s
    assert recover.cap_time(state, row, now=since) == since + timedelta(seconds=500)
    # at 100 s c-1 goes and a ¥720/h (¥0.2/s) machine joins:
    #   c-0 0.1 t + c-1 0.1 x 100 + new 0.2 (t - 100) <= 100  ->  0.3 t <= 110  ->  t = 366 s
    now = since + timedelta(seconds=100)
    dearer = billing.per_second(Decimal(720))
    assert recover.cap_time(state, row, gone=["c-1"], joining=dearer, now=now) == since + timedelta(seconds=366)
    # at the same price the stop stays where it was: 0.1 t + 10 + 0.1 (t - 100) = 0.2 t <= 100
    assert recover.cap_time(state, row, gone=["c-1"], joining=PER_SECOND_360, now=now) == since + timedelta(seconds=500)
    # a lost node is billed until now whether or not it is named
    state.update_node("c", "c-1", status="lost")
    assert recover.cap_time(state, row, joining=dearer, now=now) == since + timedelta(seconds=366)
    state.close()


def test_no_cap_no_stop_and_a_spent_cap_stops_now(gpuplan_home):
    from gpuplan.run import recover
    from gpuplan.store.state import State

    state = State(_db(gpuplan_home, "state.db"))
    row = _cluster(state, spot=False, max_yen=None)
    assert recover.job_cap(row) is None and recover.cap_time(state, row) is None
    state.close()
    state = State(_db(gpuplan_home, "state2.db"))
    row = _cluster(state, spot=False, max_yen="100")
    late = row.submitted_at + timedelta(seconds=600)  # ¥120 spent by the two nodes already
    assert recover.cap_time(state, row, gone=["c-1"], joining=PER_SECOND_360, now=late) == late
    state.close()


def test_a_spot_clusters_on_demand_replacement_is_priced_from_its_on_demand_row(gpuplan_home):
    from gpuplan.fleet import provision
    from gpuplan.run import recover
    from gpuplan.store.state import State

    state = State(_db(gpuplan_home, "state.db"))
    _cluster(state, spot=True, price=Decimal("33.00"))
    spot = recover.cost(state, "c", 3600)
    assert (spot.market, spot.price_jpy_per_hour, spot.what) == ("spot", Decimal("33.00"), "1x aws:g4dn.xlarge (spot)")
    assert spot.yen == Decimal("33.00")  # an hour by its recorded per-second terms
    offer, _ = provision.live("aws:g4dn.xlarge", "us-east-1")
    on_demand = recover.cost(state, "c", 3600, recover.ON_DEMAND)
    assert on_demand.market == "on-demand" and on_demand.what == "1x aws:g4dn.xlarge"
    assert on_demand.price_jpy_per_hour == offer.price_jpy_per_hour > spot.price_jpy_per_hour
    assert on_demand.yen == billing.charge(3600, billing.terms_for(offer))
    req = recover.request(state, "c", recover.ON_DEMAND)
    assert (req.spot, req.name, req.region, req.count, req.gpus_per_node) == (False, "c", "us-east-1", 1, 1)
    # an on-demand cluster has one market: its own
    state.add_cluster("d", "aws", "us-east-1", "g4dn.xlarge", 1, price_jpy_per_hour=Decimal(80))
    assert recover.cost(state, "d", 60, recover.ON_DEMAND).price_jpy_per_hour == Decimal(80)
    state.close()


@pytest.mark.parametrize("args", [["--on-demand-fallback"], ["--on-demand-fallback", "--detach"]])
def test_on_demand_fallback_needs_recover(cli, tmp_path, args):
    (tmp_path / "items.txt").write_text("a\n")
    r = cli("run", "c", "--items", str(tmp_path / "items.txt"), *args, "--", "true")
    assert r.code == 2
    assert r.err.strip() == ("gpuplan: error: --on-demand-fallback says how --recover buys a replacement: give --recover"
                             " too")


def _taken_back(state, row) -> None:
    """The driver's events for a running batch whose node c-1 got the cloud's notice."""
    at = row.submitted_at.isoformat()
    state.record_job_events(row.id, [{"t": "begin", "at": at}, {"t": "start", "i": 0, "node": "c-0", "attempt": 1, "at": at},
                                     {"t": "quarantine", "node": "c-1", "code": "interrupted",
                                      "reason": "the cloud takes it back (terminate at soon): drained"}], 1)


def _recoverer(state, monkeypatch, on_demand: bool, refuse: tuple = ()):
    """cli.jobs' recoverer with replace_node recording the markets asked for (those in `refuse`
    answered as AWS answers when that capacity is gone)."""
    from gpuplan.cli import jobs
    from gpuplan.errors import CapacityUnavailable
    from gpuplan.run import recover

    asked: list = []

    def replace_node(_state, cluster, lost, _progress, market=None):
        asked.append(market)
        if market in refuse:
            raise CapacityUnavailable("InsufficientInstanceCapacity: no Spot capacity")
        return "c-2"

    monkeypatch.setattr(recover, "replace_node", replace_node)
    return jobs._recoverer(state, "c", True, on_demand), asked


def test_a_spot_replacement_without_capacity_is_bought_on_demand_when_allowed(gpuplan_home, monkeypatch, capsys):
    from gpuplan.store.state import State

    state = State(_db(gpuplan_home, "state.db"))
    row = _cluster(state, spot=True, max_yen=None, price=Decimal("33.00"))
    _taken_back(state, row)
    look, asked = _recoverer(state, monkeypatch, on_demand=True, refuse=(None,))
    look(state.job(row.id))
    err = " ".join(capsys.readouterr().err.split())
    assert asked == [None, "on-demand"]
    assert "c-1 is being taken back by the cloud" in err
    assert "a replacement, 1x aws:g4dn.xlarge (spot), costs ¥33/h" in err, err
    assert "no spot capacity for the replacement" in err and "trying on-demand" in err
    assert "c-2 joined the batch in place of c-1" in err
    look(state.job(row.id))  # handled once
    assert asked == [None, "on-demand"]
    # without --on-demand-fallback the batch goes on without it
    state.close()
    state = State(_db(gpuplan_home, "state2.db"))
    row = _cluster(state, spot=True, max_yen=None, price=Decimal("33.00"))
    _taken_back(state, row)
    look, asked = _recoverer(state, monkeypatch, on_demand=False, refuse=(None,))
    look(state.job(row.id))
    assert asked == [None]
    err = " ".join(capsys.readouterr().err.split())
    assert "the batch goes on without it" in err
    # why no other region is tried (issue 44): the replacement joins over the region's private network
    assert f"every zone of its region {state.cluster('c').region} was asked, and no other region is" in err
    state.close()


def test_no_replacement_that_the_cap_would_stop_before_it_is_set_up(gpuplan_home, monkeypatch, capsys):
    from gpuplan.run import recover
    from gpuplan.store.state import State

    state = State(_db(gpuplan_home, "state.db"))
    # two nodes at ¥0.1/s and a ¥80 cap: 400 s from the start, less than a replacement's setup guess
    assert recover.SETUP_GUESS_S > 400
    row = _cluster(state, spot=False, max_yen="80")
    _taken_back(state, row)
    look, asked = _recoverer(state, monkeypatch, on_demand=False)
    look(state.job(row.id))
    err = " ".join(capsys.readouterr().err.split())
    assert asked == []
    assert "not replacing c-1: the batch would reach its cap before a replacement is set up" in err, err
    state.close()
