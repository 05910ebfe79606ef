"""A plan lists each machine's jobs longest first, and the saved plan's order is longest first, so
`gpuplan run --plan` hands the batch out longest first (issue 30: the machines listed their
jobs in the workload's order, shortest first here, and that was the order they ran in)."""

from __future__ import annotations

import json
from decimal import Decimal

from gpuplan.cli.estimate import plan_dict
from gpuplan.planning import optimizer, saved_plan
from gpuplan.planning.model import Setting
from gpuplan.planning.plan_types import Job, Workload
from gpuplan.run import items as run_items
from support import planner as sp

MINUTES = {"j0": 10, "j1": 20, "j2": 30, "j3": 40, "j4": 50, "j5": 60, "j6": 5, "j7": 45}


def _estimate(gpus: int = 1):
    jobs = tuple(Job(name, Decimal(m * 60)) for name, m in MINUTES.items())
    work = Workload(name="unequal", description="", jobs=jobs, unit="second", seconds_per_unit=Decimal(1),
                    reference_gpu="K80", speed={"K80": Decimal(1)})
    cat = sp.catalog([sp.offer("vm1", gpus=gpus)])
    return optimizer.estimate(work, Setting(catalog=cat), mixes=False)


def _longest_first(names) -> bool:
    return [MINUTES[n] for n in names] == sorted((MINUTES[n] for n in names), reverse=True)


def test_every_machine_of_every_plan_lists_its_jobs_longest_first():
    for gpus in (1, 2):  # one slot per machine, and two slots whose jobs merge
        est = _estimate(gpus)
        plans = [p for p in est.plans if p.feasible and sum(n for _, n in p.fleet) >= 2]
        assert plans
        for p in plans:
            vms = [vm for m in p.machines for vm in m.each() if vm.jobs]
            assert len(vms) >= 2 and sorted(j for vm in vms for j in vm.jobs) == sorted(MINUTES)
            assert all(_longest_first(vm.jobs) for vm in vms), [vm.jobs for vm in vms]


def test_the_saved_plan_hands_the_batch_out_longest_first(tmp_path):
    est = _estimate()
    two = next(p for p in est.plans if p.feasible and p.fleet[0][1] == 2 and p.setup == "scratch")
    data = plan_dict(two, "unequal")
    machines = [m["jobs"] for m in data["machines"] if m.get("jobs")]
    assert len(machines) == 2 and all(_longest_first(m) for m in machines)
    path = tmp_path / "plan.json"
    saved_plan.dump({**data, "schema_version": 2, "workload": "unequal", "order": saved_plan.longest_first(est.workload)},
                    path)
    predicted = run_items.read_plan(path)
    assert predicted["order"] == ["j5", "j4", "j7", "j3", "j2", "j1", "j0", "j6"]
    items = list(MINUTES)  # the items file in the workload's order
    ordered, why = run_items.run_order(items, predicted)
    assert [item for _, item in ordered] == ["j5", "j4", "j7", "j3", "j2", "j1", "j0", "j6"]
    assert why.startswith("the plan's (longest first; 8 of 8")
    # the indexes still name each item's line in the file
    assert all(items[i] == item for i, item in ordered)


def test_a_plan_saved_without_an_order_deals_its_machines_lists_in_turn(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"provider": "azure", "instance_type": "vm1", "count": 2, "wall_minutes": 1, "cost_jpy": 1,
                                "machines": [{"jobs_s": 5400, "idle_tail_s": 0, "billed_s": 5400, "cost_jpy": "1",
                                              "jobs": ["j5", "j2", "j1"]},
                                             {"jobs_s": 5400, "idle_tail_s": 0, "billed_s": 5400, "cost_jpy": "1",
                                              "jobs": ["j4", "j3", "j0"]}]}))
    assert run_items.read_plan(path)["order"] == ["j5", "j4", "j2", "j3", "j1", "j0"]


def test_estimate_save_writes_the_order(tmp_path):
    from support.cli import run_cli

    path = tmp_path / "p.json"
    r = run_cli("estimate", "--videos", "4", "--as-of", "2017-08", "--save", str(path))
    assert r.code == 0, r.err
    data = json.loads(path.read_text())
    assert sorted(data["order"]) == sorted(j for m in data["machines"] for j in m["jobs"])
