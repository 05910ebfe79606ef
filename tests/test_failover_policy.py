"""A batch's `failover:` (issue 44 item 2): what a launch's next plan may change when every zone
of its pick's region refused it — region, provider, a spot pick's market — how many next plans,
and how long it waits for capacity to come back within the deadline."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from gpuplan.errors import CapacityUnavailable, UsageError
from gpuplan.fleet import refusals
from gpuplan.fleet.provider import ZoneRefusal
from support.batches import planned_batch


def _refuse(offer):
    refusals.remember(ZoneRefusal(offer.provider, offer.region, offer.region + "-z", offer.name, 1, 0,
                                  "InsufficientInstanceCapacity", None))


def _pick(plan, tmp_path):
    """The plan's recommendation as launch holds it (a Pick)."""
    from gpuplan.cli import estimate as estimate_cli
    from gpuplan.run import launcher

    path = tmp_path / "plan.json"
    estimate_cli.save_plan(plan, path)
    return launcher.pick_of(path)


def test_the_policy_is_read_with_its_defaults_and_each_mistake_named(tmp_path):
    from gpuplan.batchfile import Failover

    assert planned_batch(tmp_path)[0].failover == Failover(regions=True, providers=True, on_demand=True, plans=3, wait_s=0)
    got = planned_batch(tmp_path, "deadline: 6h\nfailover: {regions: false, on_demand: false, plans: 1, wait: 2h}\n")[0]
    assert got.failover == Failover(regions=False, providers=True, on_demand=False, plans=1, wait_s=7200)
    assert planned_batch(tmp_path, "failover: false\n")[0].failover.plans == 0
    for extra, said in [("failover: {zones: false}\n", "unknown field 'zones'"),
                        ("failover: {wait: 30}\n", "failover.wait 30"),
                        ("deadline: 2h\nfailover: {wait: 3h}\n", "as long as the deadline (2h) or longer"),
                        ("failover: {plans: 11}\n", "failover.plans"),
                        ("failover: yes\n", "failover")]:
        with pytest.raises(UsageError) as err:
            planned_batch(tmp_path, extra)
        assert said in str(err.value), (extra, str(err.value))


def _refused_until(batch, work, first, leaves):
    """Refuse the default next plans' offers until one `leaves` (a test on a plan); that plan."""
    from gpuplan.cli.estimate import plan_batch
    from gpuplan.run import failover

    for _ in range(12):
        _, nxt = failover.next_plan(batch, work, plan_batch, first)
        assert nxt is not None
        if leaves(nxt):
            return nxt
        for o, _ in nxt.fleet:
            _refuse(o)
    raise AssertionError("the default next plan never left")


def test_regions_false_keeps_the_next_plan_in_the_pick_s_region(gpuplan_home, tmp_path):
    from gpuplan.cli.estimate import plan_batch
    from gpuplan.run import failover

    batch, work = planned_batch(tmp_path, "failover: {regions: false}\n")
    first = _pick(plan_batch(batch, work), tmp_path)
    _refuse(first.offer)
    # refused until the default next plan leaves the pick's region
    anywhere = _refused_until(planned_batch(tmp_path)[0], work, first, lambda p: p.region != first.offer.region)
    _, kept = failover.next_plan(batch, work, plan_batch, first)
    assert anywhere.region != first.offer.region
    assert kept is not None and kept.region == first.offer.region


def test_providers_false_keeps_the_next_plan_with_the_pick_s_provider(gpuplan_home, tmp_path):
    from gpuplan.cli.estimate import plan_batch
    from gpuplan.run import failover

    batch, work = planned_batch(tmp_path, "failover: {providers: false}\n")
    first = _pick(plan_batch(batch, work), tmp_path)
    _refuse(first.offer)
    anywhere = _refused_until(planned_batch(tmp_path)[0], work, first, lambda p: p.provider != first.offer.provider)
    _, kept = failover.next_plan(batch, work, plan_batch, first)
    assert anywhere.provider == "gcp" and first.offer.provider == "aws"
    assert kept is not None and kept.provider == "aws"


def test_a_spot_pick_whose_batch_keeps_spot_gets_a_spot_next_plan(gpuplan_home, tmp_path):
    from gpuplan.cli.estimate import plan_batch
    from gpuplan.run import failover

    batch, work = planned_batch(tmp_path, "spot: true\nfailover: {on_demand: false}\n")
    first = _pick(plan_batch(batch, work), tmp_path)
    assert first.market == "spot"
    _refuse(first.offer)
    free = _refused_until(planned_batch(tmp_path, "spot: true\n")[0], work, first,
                          lambda p: any(o.market != "spot" for o, _ in p.fleet))
    _, kept = failover.next_plan(batch, work, plan_batch, first)
    assert any(o.market != "spot" for o, _ in free.fleet)  # the default takes on-demand here
    assert kept is not None and {o.market for o, _ in kept.fleet} == {"spot"}


def _picks():
    from gpuplan.run.launcher import Pick
    from support import planner as sp

    a = Pick(Path("p.json"), sp.offer(name="a", provider="aws", region="us-east-1"), 2, "scratch", "on-demand",
             Decimal(900), Decimal(3600), "ray")
    return a


class _Clock:
    def __init__(self):
        self.t = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


def test_wait_asks_for_the_pick_again_until_capacity_comes_back():
    from gpuplan.batchfile import Failover
    from gpuplan.run import failover

    a, clock, said, tries = _picks(), _Clock(), [], []

    def start(p):
        tries.append(clock())
        if len(tries) < 3:
            raise CapacityUnavailable("no capacity in any zone")
        return "job-9"

    job = failover.start_or_next(start, a, lambda first: None, said.append, policy=Failover(wait_s=3600),
                                 sleep=clock.sleep, clock=clock)
    assert job == "job-9" and tries == [0.0, 300.0, 600.0]
    assert said[0] == ("no capacity for 2x aws:a nor a next plan; waiting 5 min to ask again"
                       " (60 min of failover.wait left)")


def test_wait_stops_where_the_pick_would_no_longer_meet_the_deadline():
    from gpuplan.batchfile import Failover
    from gpuplan.run import failover

    a, clock, tries = _picks(), _Clock(), []  # the pick runs 1 h; the deadline is 1 h 8:20 min away

    def start(p):
        tries.append(clock())
        raise CapacityUnavailable("no capacity in any zone")

    with pytest.raises(CapacityUnavailable) as err:
        failover.start_or_next(start, a, lambda first: None, lambda line: None, policy=Failover(wait_s=7200),
                               deadline_s=3600 + 500, sleep=clock.sleep, clock=clock)
    assert tries == [0.0, 300.0]  # a second wait would start it at 10 min, its 1 h wall then ends past the deadline
    assert "waited 5 min of failover.wait" in str(err.value)


def test_failover_false_tries_no_next_plan():
    from gpuplan.batchfile import Failover
    from gpuplan.run import failover

    a, asked = _picks(), []

    def start(p):
        raise CapacityUnavailable("no capacity in any zone")

    with pytest.raises(CapacityUnavailable) as err:
        failover.start_or_next(start, a, lambda first: asked.append(first), lambda line: None,
                               policy=Failover(plans=0))
    assert asked == [] and str(err.value).endswith("; failover: false (tried 2x aws:a)")
