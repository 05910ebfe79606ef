"""The next plan (issue 44 item 2, the planning half): an offer every zone of its region refused
is remembered for an hour (fleet/refusals.py); the next estimate says it was refused and when,
and a launch's next plan (run/failover.next_plan) is the batch planned again without it, by the
same pick rule, within max_yen; none where nothing fits."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from gpuplan.fleet import refusals
from gpuplan.fleet.provider import ZoneRefusal
from support.batches import planned_batch


def _refused_everywhere(offer, at=None):
    r = ZoneRefusal(offer.provider, offer.region, offer.region + "-z", offer.name, 2, 0,
                    "InsufficientInstanceCapacity", None)
    refusals.remember(r, now=at)


def test_a_refused_pick_is_left_out_of_the_next_plan_and_the_estimate_says_when(gpuplan_home, tmp_path):
    from gpuplan.cli.estimate import plan_batch
    from gpuplan.run import failover

    batch, work = planned_batch(tmp_path)
    first = plan_batch(batch, work).recommended
    offer = first.fleet[0][0]
    assert not any(k.startswith("refused") for k in plan_batch(batch, work).extra)

    _refused_everywhere(offer)
    est, pick = failover.next_plan(batch, work, plan_batch)
    assert pick is not None
    assert offer.key.split("#")[0] not in {o.key.split("#")[0] for o, _ in pick.fleet}
    assert all(offer.key.split("#")[0] != o.key.split("#")[0] for p in est.plans for o, _ in p.fleet)
    [said] = [v for k, v in est.extra.items() if k.startswith("refused")]
    assert said.startswith(f"{offer.provider}:{offer.name} {offer.region} had no capacity in any zone at ")
    assert "(InsufficientInstanceCapacity)" in said and "leaves it out until" in said
    # the plain estimate says so too, but still plans the offer (capacity comes back)
    plain = plan_batch(batch, work)
    assert any(v == said for v in plain.extra.values()) and plain.recommended.fleet[0][0].key == offer.key


def test_no_next_plan_within_max_yen(gpuplan_home, tmp_path):
    from gpuplan.cli.estimate import plan_batch
    from gpuplan.run import failover

    batch, work = planned_batch(tmp_path)
    offer = plan_batch(batch, work).recommended.fleet[0][0]
    _refused_everywhere(offer)
    _, pick = failover.next_plan(batch, work, plan_batch)
    tight, _ = planned_batch(tmp_path, f"max_yen: {int(pick.cost) - 1}\n")  # a yen under the next plan's own estimate
    assert tight.max_yen == Decimal(int(pick.cost) - 1)
    est, none = failover.next_plan(tight, work, plan_batch)
    assert none is None and est.recommended is not None


def test_a_refusal_is_forgotten_after_an_hour_and_only_a_region_s_last_zone_is_kept(gpuplan_home):
    now = datetime.now(timezone.utc)
    r = ZoneRefusal("aws", "us-east-1", "us-east-1f", "g4dn.xlarge", 2, 0, "InsufficientInstanceCapacity", None)
    refusals.remember(r, now=now - timedelta(minutes=61))
    assert refusals.recent(now) == []
    refusals.remember(r, now=now - timedelta(minutes=59))
    [kept] = refusals.recent(now)
    assert (kept.provider, kept.size, kept.region) == ("aws", "g4dn.xlarge", "us-east-1")
    # a zone with a next one to try, or a zone that granted all, is no refusal of the region
    refusals.remember(ZoneRefusal("gcp", "r1", "r1-a", "n1", 2, 0, "ZONE_RESOURCE_POOL_EXHAUSTED", "r1-b"), now=now)
    refusals.remember(ZoneRefusal("gcp", "r1", "r1-b", "n1", 2, 2, "ZONE_RESOURCE_POOL_EXHAUSTED", None), now=now)
    assert [x.provider for x in refusals.recent(now)] == ["aws"]


def test_start_or_next_takes_the_next_plan_once_the_pick_is_refused_everywhere():
    from gpuplan.errors import CapacityUnavailable
    from gpuplan.run import failover
    from gpuplan.run.launcher import Pick
    from support import planner as sp

    a = Pick(Path("p.json"), sp.offer(name="a", provider="aws", region="us-east-1"), 2, "scratch", "on-demand",
             Decimal(900), Decimal(3600), "ray")
    b = Pick(Path("p.json"), sp.offer(name="b", provider="gcp", region="us-central1"), 1, "scratch", "on-demand", Decimal(1200),
             Decimal(7200), "ray")
    started, said = [], []

    def start(p):
        started.append(p.target)
        if p is a:
            raise CapacityUnavailable("AWS has no capacity for a in us-east-1a right now (every zone of us-east-1 refused)")
        return "job-1"

    assert failover.start_or_next(start, a, lambda first: b, said.append) == "job-1"
    assert started == ["aws:a", "gcp:b"]
    assert said == ["2x aws:a refused in every zone of us-east-1; the next plan: 1x gcp:b in us-central1, ¥1,200"]

    # nothing left within the cap: the refusal, saying what was tried
    with pytest.raises(CapacityUnavailable) as err:
        failover.start_or_next(start, a, lambda first: None, said.append)
    assert str(err.value).endswith("no next plan within the batch's max_yen, max_yen_per_hour, deadline and"
                                   " failover (tried 2x aws:a)")


def test_launch_saves_the_next_plan_and_starts_it(gpuplan_home, tmp_path, monkeypatch):
    from gpuplan.cli import estimate as estimate_cli
    from gpuplan.cli import launch as launch_cli
    from gpuplan.errors import CapacityUnavailable
    from gpuplan.run import launcher

    batch, work = planned_batch(tmp_path)
    plan = tmp_path / "plan.json"
    estimate_cli.save_plan(plan_first := estimate_cli.plan_batch(batch, work), plan)
    first = launcher.pick_of(plan, None, batch.tax)
    started = []

    def start(state, pick, batch_, name, order, todo, outputs, progress, keep=False):
        started.append((pick.target, order, len(todo)))
        if len(started) == 1:  # the provider tried every zone; the lifecycle remembered it
            _refused_everywhere(pick.offer)
            raise CapacityUnavailable("no capacity in any zone")
        return "job-7"

    monkeypatch.setattr(launcher, "start", start)
    monkeypatch.setattr(launcher, "preflight", lambda *a, **k: "order-2")
    said = []
    todo = [(i, f"v{i}.mp4") for i in range(8)]
    job = launch_cli._start_or_next(None, first, batch, "c", "order-1", todo, tmp_path / "out", said.append, plan,
                                    work, True)
    assert job == "job-7"
    assert started[0] == (first.target, "order-1", 8)
    second = launcher.pick_of(plan, None, batch.tax)  # the plan file now holds the next plan
    assert second.target != first.target and started[1] == (second.target, "order-2", 8)
    assert said == [f"{first.count}x {first.target} refused in every zone of {first.offer.region}; the next plan:"
                    f" {second.count}x {second.target} in {second.offer.region}, ¥{second.yen:,.0f}"]
    assert plan_first.recommended.fleet[0][0].name == first.offer.name


def test_launch_of_a_saved_plan_takes_the_next_plan_from_what_it_was_planned_with(gpuplan_home, tmp_path, monkeypatch):
    """`launch --plan FILE`: the plan keeps what it was planned with (planned_with), so a refusal
    in every zone plans its workload again from that, without the refused offer; the next plan is
    saved beside it (FILE.next.json: the user's file is left as it was) and started. A plan that
    does not say is launched as it is: the refusal says why no next plan was taken."""
    import json

    from gpuplan.cli import estimate as estimate_cli
    from gpuplan.cli import launch as launch_cli
    from gpuplan.errors import CapacityUnavailable
    from gpuplan.run import launcher

    batch, work = planned_batch(tmp_path)
    plan = tmp_path / "plan.json"
    estimate_cli.save_plan(estimate_cli.plan_batch(batch, work), plan, planned=estimate_cli.batch_planned_with(batch, work))
    kept = plan.read_text()
    first = launcher.pick_of(plan, None, batch.tax)
    started = []

    def start(state, pick, batch_, name, order, todo, outputs, progress, keep=False):
        started.append((pick.target, pick.plan_path.name, order))
        if pick.offer.key == first.offer.key:  # the provider tried every zone; the lifecycle remembered it
            _refused_everywhere(pick.offer)
            raise CapacityUnavailable("no capacity in any zone")
        return "job-8"

    monkeypatch.setattr(launcher, "start", start)
    monkeypatch.setattr(launcher, "preflight", lambda *a, **k: "order-2")
    said = []
    todo = [(i, f"v{i}.mp4") for i in range(8)]
    job = launch_cli._start_or_next(None, first, batch, "c", "order-1", todo, tmp_path / "out", said.append, plan,
                                    None, True)
    assert job == "job-8"
    second = launcher.pick_of(tmp_path / "plan.next.json", None, batch.tax)
    assert second.target != first.target
    assert started == [(first.target, "plan.json", "order-1"), (second.target, "plan.next.json", "order-2")]
    assert said == [f"{first.count}x {first.target} refused in every zone of {first.offer.region}; the next plan:"
                    f" {second.count}x {second.target} in {second.offer.region}, ¥{second.yen:,.0f}"]
    assert plan.read_text() == kept  # the user's plan is as it was
    assert json.loads((tmp_path / "plan.next.json").read_text())["planned_with"] == json.loads(kept)["planned_with"]

    # a plan that does not say what it was planned with: launched as it is, the refusal saying why
    old = json.loads(kept)
    del old["planned_with"]
    plan.write_text(json.dumps(old))
    said.clear()
    with pytest.raises(CapacityUnavailable) as err:
        launch_cli._start_or_next(None, first, batch, "c", "order-1", todo, tmp_path / "out", said.append, plan, None,
                                  True)
    assert said == [f"no next plan: plan file {plan} does not say what it was planned with (written by an older"
                    " gpuplan, or by hand), so no next plan can be made from it; write it with"
                    " `gpuplan estimate ... --save`"]
    assert str(err.value).endswith(f"(tried {first.count}x {first.target})")
