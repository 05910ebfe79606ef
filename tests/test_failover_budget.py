"""The budget reservation covers the next plan (issue 44): a launch reserves its first pick's
spend against the project's month before anything is bought; where every zone refuses the pick
and the launch falls over to the next plan, the reservation is made to hold that plan's spend
(its upper yen where the batch has no max_yen) before the plan is asked about or bought, or the
next plan is refused in one line when the month cannot hold it."""

from __future__ import annotations

from decimal import Decimal

from gpuplan import team
from gpuplan.budget import priced
from support.batches import planned_batch


def _refused_everywhere(offer):
    from gpuplan.fleet import refusals
    from gpuplan.fleet.provider import ZoneRefusal

    refusals.remember(ZoneRefusal(offer.provider, offer.region, offer.region + "-z", offer.name, 2, 0,
                                  "InsufficientInstanceCapacity", None))


def _launch_refusing_the_first(tmp_path, monkeypatch, budget_yen, first_reserved=None):
    """A launch's start with the budget `budget_yen` for the month: the first pick reserved (at its
    own spend, or `first_reserved`), then refused in every zone; returns (state, reservation id,
    first pick, the plan file, what launcher.start was called with, outcome of _start_or_next)."""
    from gpuplan import budget
    from gpuplan.cli import estimate as estimate_cli
    from gpuplan.cli import launch as launch_cli
    from gpuplan.errors import CapacityUnavailable
    from gpuplan.run import launcher
    from gpuplan.store.state import State

    batch, work = planned_batch(tmp_path)
    assert batch.max_yen is None  # the next plan's spend is its own upper yen, not the batch's cap
    plan = tmp_path / "plan.json"
    estimate_cli.save_plan(estimate_cli.plan_batch(batch, work), plan)
    first = launcher.pick_of(plan, None, batch.tax)
    state = State.open_default()
    state.set_budget(team.current().project, team.month_of(), Decimal(budget_yen), "alice")
    spend, what = launcher.budget_spend(first, batch)
    rid = budget.reserve_spend(state, team.current().project, first_reserved or spend, what, "plan", "c")
    started = []

    def start(state_, pick, batch_, name, order, todo, outputs, progress, keep=False):
        started.append(pick.target)
        if len(started) == 1:  # as launcher.start: zones tried and remembered, what it made torn down
            _refused_everywhere(pick.offer)
            state_.release_commitments(cluster=name)  # teardown drops the cluster's reservations
            raise CapacityUnavailable(f"no capacity for {pick.target} in any zone")
        return "job-7"

    monkeypatch.setattr(launcher, "start", start)
    monkeypatch.setattr(launcher, "preflight", lambda *a, **k: "order-2")
    todo = [(i, f"v{i}.mp4") for i in range(8)]
    try:
        job = launch_cli._start_or_next(state, first, batch, "c", "order-1", todo, tmp_path / "out", lambda m: None,
                                        plan, work, True, reserved=rid)
    except Exception as exc:  # noqa: BLE001 - the test looks at what it was
        job = exc
    return state, rid, first, plan, started, job


def _upper(pick) -> Decimal:
    return max(pick.yen, pick.yen_upper or pick.yen)  # the batch's basis is "included", the budget's too


def test_the_reservation_is_made_to_hold_the_next_plan_s_upper_yen(gpuplan_home, tmp_path, monkeypatch):
    from gpuplan.run import launcher

    state, rid, first, plan, started, job = _launch_refusing_the_first(tmp_path, monkeypatch, 1_000_000)
    assert job == "job-7"
    nxt = launcher.pick_of(plan, None, "included")
    assert started == [first.target, nxt.target] and nxt.target != first.target
    figures = state.budget_figures(team.current().project, team.month_of(), priced)
    # one reservation, now the next plan's upper yen (the top of its cost range), not the first pick's
    assert figures.live == 1
    assert figures.committed == _upper(nxt) != _upper(first)
    assert figures.left == Decimal(1_000_000) - _upper(nxt)


def test_a_next_plan_the_month_cannot_hold_is_refused_in_one_line_and_not_bought(gpuplan_home, tmp_path,
                                                                                 monkeypatch):
    from gpuplan.errors import UsageError
    from gpuplan.planning.fmt import yen
    from gpuplan.run import launcher

    # what the next plan is, learnt in a home of its own: then, in a fresh one, a month a yen short of it
    monkeypatch.setenv("GPUPLAN_HOME", str(tmp_path / "peek-home"))
    (tmp_path / "peek").mkdir()
    *_, peek_plan, _, done = _launch_refusing_the_first(tmp_path / "peek", monkeypatch, 1_000_000)
    assert done == "job-7"
    nxt = launcher.pick_of(peek_plan, None, "included")
    budget_yen = _upper(nxt) - 1
    monkeypatch.setenv("GPUPLAN_HOME", str(gpuplan_home))
    state, rid, first, plan, started, job = _launch_refusing_the_first(tmp_path, monkeypatch, budget_yen,
                                                                       first_reserved=Decimal(100))
    assert isinstance(job, UsageError)
    project, month = team.current().project, team.month_of()
    assert str(job) == (f"project {project}'s budget for {month} (JST) would be passed: budget {yen(budget_yen)},"
                        f" spent ¥0, committed ¥0, this next plan's ({nxt.count}x {nxt.target}) planned upper yen"
                        f" {yen(_upper(nxt))}, left {yen(budget_yen)} (yen include consumption tax); lower the"
                        f" spend, or raise the budget with `gpuplan budget set {project} YEN`")
    assert started == [first.target]  # the next plan was never bought
    # nothing is held: the refused attempt's teardown dropped its reservation, the next plan took none
    f = state.budget_figures(project, month, priced)
    assert (f.committed, f.live) == (Decimal(0), 0)


def test_re_reserve_gives_back_the_old_figure_and_keeps_what_the_cluster_spent(gpuplan_home, store):
    """Hand arithmetic: budget ¥10,000; another reservation holds ¥3,000; this one ¥2,000.
    Re-reserving it at ¥7,000 fits (10,000 - 3,000 = 7,000 left once its ¥2,000 is given back);
    ¥7,001 does not, and the refusal's figures are the month's without it. Dropped (its cluster
    torn down after the refusal), it is made again: ¥6,000 + the other ¥3,000 = ¥9,000 held.
    On both stores (`store`: SQLite, and a fresh PostgreSQL database)."""
    from gpuplan.store.state import State

    s = State.open_default()
    project, month = "vision", team.month_of()
    s.set_budget(project, month, Decimal(10_000), "alice")
    s.reserve(project, month, Decimal(3000), "cap", "bob", priced, cluster="other")
    mine = s.reserve(project, month, Decimal(2000), "plan", "alice", priced, cluster="c").id
    refused = s.re_reserve(mine, project, month, Decimal(7001), "plan", "alice", priced)
    assert refused.refused and (refused.figures.committed, refused.figures.left) == (Decimal(3000), Decimal(7000))
    assert s.budget_figures(project, month, priced).committed == Decimal(5000)  # unchanged
    ok = s.re_reserve(mine, project, month, Decimal(7000), "plan", "alice", priced)
    assert not ok.refused
    f = s.budget_figures(project, month, priced)
    assert (f.committed, f.left, f.live) == (Decimal(10_000), Decimal(0), 2)
    # a refused attempt's teardown drops its cluster's reservations: the next plan's is made again
    s.release_commitments(cluster="c")
    assert s.budget_figures(project, month, priced).committed == Decimal(3000)
    assert s.re_reserve(mine, project, month, Decimal(7001), "plan", "alice", priced, cluster="c").refused
    again = s.re_reserve(mine, project, month, Decimal(6000), "plan", "alice", priced, cluster="c")
    assert again.id == mine and s.budget_figures(project, month, priced).committed == Decimal(9000)
