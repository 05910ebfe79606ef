"""When the cloud says no (issue 44): the price ceiling per hour a launch keeps, and what a
launch does after every zone of its pick's region refused: `next_plan` plans the batch again
without the offers refused (fleet/refusals.recent, remembered for an hour) and takes the
recommendation by the same pick rule, within the batch's deadline (the planner's) and max_yen
and max_yen_per_hour, or None where no plan is left.

`max_yen_per_hour` is judged on the estimate's tax basis: the planner leaves plans over it out
(planning/model.fleet_rate_over, outcome MAX_YEN_PER_HOUR); a saved plan launched or
provisioned with the ceiling is refused here with the same words before anything is bought.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from gpuplan.errors import UsageError
from gpuplan.planning import outcomes
from gpuplan.planning.types import Offer


def parse_rate_cap(value) -> Decimal | None:
    """--max-yen-per-hour / a batch's max_yen_per_hour as yen (None: no ceiling); one line for a bad one."""
    if value in (None, ""):
        return None
    if isinstance(value, Decimal):
        return value
    from gpuplan.units import MAX_YEN, yen

    amount = yen(value)
    if amount is None:
        raise UsageError(f"bad --max-yen-per-hour {value!r}: a number of yen an hour above 0 and at most {MAX_YEN:,},"
                         " such as 1500")
    return amount


def over_rate(fleet: Sequence[tuple[Offer, int]], cap: Decimal | None, basis: str = "included") -> str:
    """The words for a fleet whose machines cost more an hour than `cap` on the `basis`; "" within it."""
    from gpuplan.market import catalog
    from gpuplan.planning.model import fleet_rate_over

    found = fleet_rate_over([(catalog.offer_with_tax(o, basis), n) for o, n in fleet], cap)
    return outcomes.render(found) if found is not None else ""


def refuse_over_rate(fleet: Sequence[tuple[Offer, int]], cap: Decimal | None, basis: str = "included",
                     what: str = "the pick") -> None:
    """One line, exit 2, before anything is bought: the fleet costs more an hour than the ceiling."""
    said = over_rate(fleet, cap, basis)
    if said:
        machines = " + ".join(f"{n}x {o.provider}:{o.name}" for o, n in fleet)
        raise UsageError(f"{what}, {machines}, {said}: raise max_yen_per_hour, or plan again within it "
                         "(`gpuplan estimate ... --max-yen-per-hour`)")


def without_refused() -> tuple[str, ...]:
    """The offers ("provider:name@region") every zone of their region refused within the hour."""
    from gpuplan.fleet import refusals

    return tuple(f"{r.provider}:{r.size}@{r.region}" for r in refusals.recent())


def next_plan(batch, work, plan_batch, first=None):
    """The batch planned again without the refused offers by `plan_batch` (cli.estimate's, as the
    launch planned it first), within what the batch's `failover:` lets change from the `first`
    pick (its provider, its region, a spot pick's market): (the estimate, its pick) where the pick
    is within max_yen (its own estimate) and the planner kept the deadline and max_yen_per_hour;
    (the estimate, None) where nothing is left."""
    from dataclasses import replace

    def plan(without, provider, region):
        kept = batch
        if provider is not None:
            kept = replace(kept, infra=(provider,))
        if region is not None:
            kept = replace(kept, region=region)
        return plan_batch(kept, work, without=without)

    return _next(plan, batch.failover, batch.max_yen, first.offer if first else None, first.market if first else "")


def next_for_saved(saved, first_offer: Offer, first_market: str, plan_estimate, rate_cap=None, region=None, *,
                   deadline: str | None = None, max_yen: Decimal | None = None, policy=None):
    """A saved plan's next plan (`provision --plan` or `launch --plan` refused in every zone of its
    region): the workload planned again with what the plan was planned with (SavedPlan.replan_inputs:
    one line where the file does not say) by `plan_estimate` (cli.estimate's), without the refused
    offers, within its max_yen (and `max_yen`: a launch's, where lower), its deadline (a launch's
    `deadline` instead, where it gives one), max_yen_per_hour (and `rate_cap`, where lower), the
    `region` the command was held to, and its failover policy (a launch's batch's `policy`
    instead); (the estimate, its pick or None, the policy)."""
    from dataclasses import replace

    from gpuplan.batchfile import Failover

    work, settings, kept_yen, fields = saved.replan_inputs()
    if policy is None:
        try:
            policy = Failover(**fields)
        except TypeError:
            raise UsageError(f"plan file {saved.path}: its failover {fields!r} is not one this gpuplan reads;"
                             " write it with `gpuplan estimate ... --save`") from None
    if rate_cap is not None:
        had = parse_rate_cap(settings.get("max_yen_per_hour"))
        settings["max_yen_per_hour"] = rate_cap if had is None else min(had, rate_cap)
    if region is not None:
        settings["region"] = region
        policy = replace(policy, regions=False)
    if deadline is not None:
        settings["deadline"] = deadline
    max_yen = kept_yen if max_yen is None else max_yen if kept_yen is None else min(kept_yen, max_yen)

    def plan(without, provider, region):
        kept = dict(settings)
        if provider is not None:
            kept.update(providers=(provider,), provider=None)
        if region is not None:
            kept["region"] = region
        return plan_estimate(work, **kept, without=without)

    return (*_next(plan, policy, max_yen, first_offer, first_market), policy)


def _next(plan, policy, max_yen, first_offer: Offer | None, first_market: str):
    """`plan(without, provider, region)` (provider, region: None where they may change) again
    without the offers refused, by the `policy`; the recommendation where it is within `max_yen`."""
    provider = first_offer.provider if first_offer is not None and not policy.providers else None
    region = first_offer.region if first_offer is not None and not policy.regions else None
    left_out = list(without_refused())
    while True:
        est = plan(tuple(left_out), provider, region)
        rec = est.recommended
        if rec is None or (max_yen is not None and rec.cost > max_yen):
            return est, None
        on_demand = [o for o, _ in rec.fleet if o.market != "spot"]
        if first_offer is None or first_market != "spot" or policy.on_demand or not on_demand:
            return est, rec
        # a spot pick whose policy keeps it on spot: its on-demand rows are left out, its spot rows kept
        left_out += [on_demand_key(o) for o in on_demand]


def on_demand_key(offer: Offer) -> str:
    """The key `without` leaves out an offer's on-demand row by, keeping its spot row."""
    return offer.key.split("#")[0] + "#on-demand"


RETRY_S = 300  # while a batch waits for capacity (failover.wait), how often it asks again


def start_or_next(start, pick, replan, say, ask=None, policy=None, deadline_s=None, sleep=None, clock=None):
    """`start(pick)` (the launch's build-and-submit; returns the job id); where every zone of the
    pick's region refused it (CapacityUnavailable, remembered by then: fleet/refusals), the next
    plan from `replan(first)` (a new pick, or None: nothing left within the cap, deadline, rate
    and the batch's `failover:` policy), said in one line by `say`, asked about once by `ask(pick)`
    where given (no -y), and started in turn; at most `policy.plans` more. Where none is left and
    the policy waits (`wait_s`), the first pick is asked for again every RETRY_S while the wait
    lasts and its planned wall still fits the deadline (`deadline_s` from now). Raises the last
    refusal, with what was tried, where nothing came of it."""
    import time

    from gpuplan.batchfile import Failover
    from gpuplan.errors import CapacityUnavailable
    from gpuplan.planning import fmt

    policy = policy or Failover()
    sleep = sleep or time.sleep
    clock = clock or time.monotonic
    began = clock()
    first = pick
    tried: list[str] = []
    plans = 0
    while True:
        try:
            return start(pick)
        except CapacityUnavailable as exc:
            tried.append(f"{pick.count}x {pick.target}")
            nxt = replan(first) if plans < policy.plans else None
            if nxt is not None:
                plans += 1
                say(f"{pick.count}x {pick.target} refused in every zone of {pick.offer.region}; the next plan:"
                    f" {nxt.count}x {nxt.target} in {nxt.offer.region}, {fmt.yen(nxt.yen)}")
                if ask is not None:
                    ask(nxt)
                pick = nxt
                continue
            waited = clock() - began
            fits = deadline_s is None or waited + RETRY_S + float(first.wall_s) <= deadline_s
            if waited + RETRY_S <= policy.wait_s and fits:
                say(f"no capacity for {first.count}x {first.target} nor a next plan; waiting"
                    f" {fmt.duration(RETRY_S)} to ask again ({fmt.duration(int(policy.wait_s - waited))} of"
                    f" failover.wait left)")
                sleep(RETRY_S)
                pick = first
                continue
            why = ("no next plan within the batch's max_yen, max_yen_per_hour, deadline and failover"
                   if policy.plans else "failover: false")
            if policy.wait_s:
                why += f"; waited {fmt.duration(int(waited))} of failover.wait"
            exc.args = (f"{exc}; {why} (tried {', '.join(tried)})",)
            raise
