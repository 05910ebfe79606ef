"""`gpuplan probe BATCH.yaml`: time the batch's own job on the offers that contend for the pick,
then plan again from what was measured (gpuplan/planning/probing.py chooses and prices,
gpuplan/measuring/probe.py carries out; docs/batch.md). `gpuplan launch --probe` does the same
before it builds the pick."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Annotated, Optional

import typer

from gpuplan.errors import UsageError
from gpuplan.planning import fmt


def probe(
    batch_file: Annotated[Optional[Path], typer.Argument(help="The batch file (docs/batch.md); its `probe:` says how to run the job at a few units.", metavar="BATCH.yaml")] = None,
    command: Annotated[Optional[list[str]], typer.Argument(help="After --: the job's command, with {item} and {units} (the amount of work to time); overrides the file's.")] = None,
    items: Annotated[Optional[Path], typer.Option("--items", help="File with one item per line (the first is probed).", metavar="FILE")] = None,
    workload: Annotated[Optional[str], typer.Option("--workload", help="Built-in workload or a workload file to plan with.", metavar="NAME|FILE")] = None,
    image: Annotated[Optional[str], typer.Option("--image", help="Run the probe in this container image.", metavar="IMAGE")] = None,
    infra: Annotated[Optional[str], typer.Option("--infra", help="Only these providers, comma-separated: {infra}.", metavar="NAMES")] = None,
    region: Annotated[Optional[str], typer.Option("--region", help="Only this region's offers.", metavar="NAME")] = None,
    objective: Annotated[Optional[str], typer.Option("--objective", help="balanced, cost or time (as estimate).", metavar="NAME")] = None,
    probe_budget: Annotated[Optional[str], typer.Option("--probe-budget", help="At most this for all the probes: a share of the pick's yen (2%, the default) or yen (500).", metavar="PERCENT|YEN")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show which offers would be probed and what each may cost; run nothing.")] = False,
    save: Annotated[Optional[Path], typer.Option("--save", help="Write the plan made again from what was measured (for `run --plan`), with the job the probes timed, which its batch's calibration then accepts.", metavar="FILE")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask (needed when stdin is not a terminal).")] = False,
    project: Annotated[Optional[str], typer.Option("--project", help="The project the probes' spend counts to and whose monthly budget must hold it (default: the batch file's project:, else config.yaml's, else default; docs/teams.md).", metavar="NAME")] = None,
) -> None:
    """Time the batch's own job on the pick and its rivals, save a profile per GPU, plan again."""
    from gpuplan import batchfile, team
    from gpuplan.cli.estimate import plan_batch, show_plan
    from gpuplan.run import launcher

    if batch_file is not None and batch_file.suffix.lower() not in (".yaml", ".yml"):
        # no batch file, a command after --: its first word landed in BATCH.yaml's place
        command, batch_file = [str(batch_file), *(command or [])], None
    overrides = {"items": items, "workload": workload, "image": image, "infra": infra, "region": region,
                 "objective": objective, "command": list(command) if command else None, "project": project}
    from gpuplan import foreign
    from gpuplan.cli.jobs import _console
    from gpuplan.cli.lifecycle import _print_lines

    # a SkyPilot or dstack task too, converted (its mapping printed)
    batch, _ = foreign.read_batch(batch_file, overrides, lambda lines: _print_lines(_console(), lines))
    # the probes run the batch's job with its env: and secret_env: (launcher.start); a secret this
    # environment lacks, or a registry password, refused before any probe is bought (dry run too)
    team.user()  # a bad GPUPLAN_USER is refused before anything
    team.choose(None, batch.project or None)
    batchfile.check_environment(batch)
    todo = batchfile.items_of(batch)
    work = launcher.workload_for(batch, todo)
    est = show_plan(plan_batch(batch, work))
    after = probe_and_plan_again(batch, work, todo[0], est, probe_budget, yes, dry_run)
    if after is not None:
        show_plan(after, "planned again with what the probes measured:")
        if save is not None:
            from gpuplan.cli.estimate import save_plan
            from gpuplan.cli.jobs import _console

            job = measured_job(batch)
            save_plan(after, save, command=job)
            _console().print(f"plan saved to {save}" + (f" (its job: `{job}`; only batches that run it calibrate it)"
                                                          if job else ""), markup=False)


def measured_job(batch) -> str:
    """The job the batch's probes timed, as its plan records it (measuring/calibration.measured_job):
    a later batch calibrates the plan only where it runs that job, never a stand-in such as `echo`."""
    from gpuplan.measuring import calibration

    return calibration.measured_job(batch.probe.command, batch.command) if batch.probe is not None else ""


def probe_and_plan_again(batch, work, first_item: str, est, budget_text: str | None, yes: bool, dry_run: bool):
    """Choose, price, show and (once agreed) run the probes; the estimate planned again from what
    they measured (None: a dry run, or nothing to probe). Raises UsageError where the batch says
    no way to probe, or no probe fits the budget."""
    from gpuplan.cli import estimate as estimate_cli
    from gpuplan.cli.jobs import _console
    from gpuplan.cli.lifecycle import _confirm, _need_answer, _print_lines
    from gpuplan.measuring import probe as probing_ops
    from gpuplan.planning import probing

    out, err = _console(), _console(stderr=True)
    rec = est.recommended
    # every plan, not only the short view's: a plan dearer and slower on today's figures may still
    # win once both are measured, where the ranges overlap
    rivals = probing.rivals(rec, est.plans, est.ranked_on == "time")
    offers = probing.offers_to_probe([rec, *rivals])[:probing.MAX_OFFERS]
    if not offers:
        out.print("nothing to probe: the pick's speed and its rivals' are measured for this workload, or no rival's"
                  " range overlaps the pick's", markup=False)
        return None
    if batch.probe is None:
        raise UsageError("the batch says no way to run its job at a few units: add `probe: {command: ... {units} ...}`"
                         " (or {units} in its command) to the batch file (docs/batch.md)")
    speeds = {e.gpu: e.speed for p in (rec, *rivals) for e in p.speeds}
    priced, estimates = [], {}
    for offer in offers:
        per_unit = work.seconds_per_unit / speeds.get(offer.gpu, Decimal(1))
        units = batch.probe.units or probing.default_units(per_unit)
        pest = estimate_cli.plan_estimate(
            probing.probe_workload(work, units), objective="cost", offers=(offer.key,), tax=batch.tax,
            owned=[f"{offer.name}=1"] if offer.kind == "owned" else None)
        plan = probing.probe_plan(pest.plans, offer)
        why = "" if plan is not None else (pest.reason or "no plan of one machine fits it")
        priced.append(probing.Priced(offer, units, plan, probing.yen_at_most(plan) if plan else Decimal(0), why))
        estimates[offer.key] = pest
    budget = probing.budget_of(budget_text, rec.cost)
    prepared: dict[str, probing_ops.Prepared] = {}
    if not dry_run:  # what can be checked before anything is bought, checked before the question
        _need_answer(yes, "probe")
        priced = _checked(priced, estimates, batch, first_item, prepared)
    take, _ = probing.within(priced, budget)
    lines = [f"probe: the batch's own job timed at two sizes on {fmt.plural(len(priced), 'offer')} (the pick and the"
             f" rivals whose {'wall' if est.ranked_on == 'time' else 'yen'} range overlaps it), one machine each:"]
    for p in priced:
        role = "the pick" if any(o.key == p.offer.key for o, _ in rec.fleet) else "a rival"
        what = (f"{p.units[0]} and {p.units[1]} {work.unit}s, at most {fmt.yen(p.yen)}, about"
                f" {fmt.duration(p.plan.wall_s)}" if p.plan is not None else f"cannot be probed: {p.why}")
        left = "" if p in take else (" — skipped: past the probe budget" if p.plan is not None else " — skipped")
        lines.append(f"  {p.offer.provider}:{p.offer.name} ({p.offer.gpu}, {role}): {what}{left}")
    share = (budget_text or probing.DEFAULT_BUDGET).strip()
    basis = f"{share} of the pick's {fmt.yen(rec.cost)}" if share.endswith("%") else "--probe-budget"
    at_most = sum((p.yen for p in take), Decimal(0))
    lines.append(f"budget {fmt.yen(budget)} ({basis}): {fmt.plural(len(take), 'probe')}, at most {fmt.yen(at_most)} in all")
    if not take:
        _print_lines(err, lines)
        cheapest = min((p.yen for p in priced if p.plan is not None), default=None)
        if cheapest is None:
            raise UsageError("no offer can be probed: each line above says why")
        raise UsageError(f"no probe fits the budget {fmt.yen(budget)}; the cheapest may cost {fmt.yen(cheapest)}:"
                         " raise --probe-budget")
    from gpuplan import budget as budgets
    from gpuplan import team
    from gpuplan.market import tax as taxes
    from gpuplan.store.state import State

    spend = taxes.on_basis(at_most, batch.tax, taxes.DEFAULT)  # the probes' most, held against the project's month
    state = State.open_existing()
    budgets.check_spend(state, team.current().project, spend, "probe's most")
    if dry_run:
        _print_lines(out, lines + ["dry run: nothing was run"])
        return None
    _confirm(lines, f"Spend at most {fmt.yen(at_most)} on probes?", yes, default=True)
    state = state or State.open_default()
    reserved = budgets.reserve_spend(state, team.current().project, spend, "probe's most", "cap")
    from gpuplan.cli.tables import working

    try:  # held while the probes run (a killed client's: COMMITMENT_GRACE_S)
        with working(err, f"probing {fmt.plural(len(take), 'offer')}") as step:  # one live display on a terminal
            results = probing_ops.run(work, batch, [prepared[p.offer.key] for p in take], step)
    finally:
        state.release_commitments(rid=reserved)  # what they spent is in the ledger now
    for r in results:
        where = f"{r.offer.provider}:{r.offer.name} ({r.offer.gpu})"
        cost = f", cost {fmt.yen(r.yen)}" if r.yen is not None else ""
        if r.problem:
            out.print(f"probe {where}: not measured: {r.problem}{cost}", markup=False)
        else:
            assert r.fit is not None and r.seconds is not None
            out.print(f"probe {where}: {r.units[0]} {work.unit}s in {r.seconds[0]:.1f} s, {r.units[1]} in"
                      f" {r.seconds[1]:.1f} s: {r.fit.per_unit_s:.4g} s per {work.unit}, start {r.fit.start_s:.0f} s"
                      f"{cost}; profile {r.profile}", markup=False)
    spent = sum((r.yen for r in results if r.yen is not None), Decimal(0))
    measured = sum(1 for r in results if not r.problem)
    out.print(f"probes: {measured} of {fmt.plural(len(results), 'offer')} measured,"
              f" {fmt.yen(spent)} spent of at most {fmt.yen(budget)}", markup=False)
    if not measured:  # nothing learnt: the plan would be the same guess, so say so and stop
        from gpuplan.run.items import JobsFailed

        raise JobsFailed("no probe measured (each says why above); fix the batch's `probe:` command, or plan without"
                         " probing")
    from gpuplan.cli.estimate import plan_batch

    return plan_batch(batch, work)


def register(app: typer.Typer) -> None:
    app.command("probe")(probe)


def _checked(priced, estimates, batch, first_item: str, prepared: dict) -> list:
    """Each probe that has a plan, its plan saved and checked as its launch would check it
    (credentials, quota, DOK's key and image); one that fails keeps its place with why, unplanned."""
    from dataclasses import replace

    from gpuplan import paths
    from gpuplan.cli import estimate as estimate_cli
    from gpuplan.errors import GpuplanError
    from gpuplan.measuring import probe as probing_ops
    from gpuplan.store.state import State

    folder = paths.state_dir() / "probes"
    folder.mkdir(parents=True, exist_ok=True)
    state = State.open_default()
    out = []
    try:
        for p in priced:
            if p.plan is None:
                out.append(p)
                continue
            path = folder / f"{probing_ops.cluster_name(p.offer)}.plan.json"
            estimate_cli.save_plan(replace(estimates[p.offer.key], recommended=p.plan), path)
            try:
                prepared[p.offer.key] = probing_ops.prepare(state, p, path, batch, first_item)
                out.append(p)
            except GpuplanError as exc:
                out.append(replace(p, plan=None, why=str(exc).splitlines()[0]))
    finally:
        state.close()
    return out
