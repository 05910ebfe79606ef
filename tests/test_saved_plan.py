"""One saved-plan type (issue 18 item 3): `estimate --save` writes it with a schema version,
`provision --plan` and `run --plan` read it through the same loader; older files load, newer
ones are refused in one line that says how to make a new one."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from gpuplan.errors import UsageError
from gpuplan.fleet import provision
from gpuplan.planning import saved_plan
from gpuplan.run import items as run_items


@pytest.fixture
def saved(cli, tmp_path):
    path = tmp_path / "plan.json"
    r = cli("estimate", "--videos", "4", "--as-of", "2017-08", "--save", str(path))
    assert r.code == 0, r.err
    return path


def test_estimate_save_writes_the_current_schema_and_both_readers_take_it(saved):
    data = json.loads(saved.read_text())
    assert data["schema_version"] == saved_plan.SCHEMA_VERSION == 2
    assert (data["snapshot"], data["workload"]) == ("2017-08", "colorize-hd")
    plan = saved_plan.load(saved)
    assert plan.target() == ("azure", "Standard_NC6", "westus2", 4, "image")
    assert provision.read_plan(saved) == ("azure", "Standard_NC6", "westus2", 4, "image", "on-demand")
    pred = run_items.read_plan(saved)
    # report A's ¥826.20: its prices include 2017's 8 % tax (¥91.80 = ¥85 x 1.08), the default basis (issue 42)
    assert pred["plan_yen"] == Decimal("826.20") and pred["workload"] == "colorize-hd" and pred["jobs"] == 4
    assert (data["tax"], plan.tax, pred["tax"], pred["listed_tax"]) == ("included", "included", "included", "included")


def test_a_version_1_file_still_loads(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"recommended": {"provider": "aws", "instance_type": "g4dn.xlarge", "count": 2,
                                                "setup_mode": "scratch", "wall_minutes": 90, "cost_jpy": 300}}))
    plan = saved_plan.load(path)
    assert plan.schema_version == 1
    assert plan.target() == ("aws", "g4dn.xlarge", None, 2, "scratch")
    assert plan.prediction()["basis"] == "the whole plan"
    assert (plan.tax, plan.prediction()["tax"]) == ("as-listed", "as-listed")  # written before plans said their basis


def test_a_file_from_a_newer_gpuplan_is_refused_in_one_line(tmp_path, cli):
    path = tmp_path / "new.json"
    path.write_text(json.dumps({"schema_version": 9, "provider": "aws", "instance_type": "g4dn.xlarge", "count": 2}))
    with pytest.raises(UsageError, match=r"schema version 9, newer than this gpuplan reads \(2\); make a new one with"
                                         r" `gpuplan estimate \.\.\. --save"):
        saved_plan.load(path)
    r = cli("provision", "--plan", str(path), "--dry-run")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and "schema version 9" in r.err


def test_a_launch_without_a_cap_counts_the_top_of_its_plan_s_cost_range_against_the_budget(gpuplan_home, tmp_path):
    """Issue 45: a launch with no max_yen reserves the plan's upper yen: its cost range's top, as
    the saved plan lists it, on the batch's basis (here the same: included)."""
    from gpuplan.cli import estimate as estimate_cli
    from gpuplan.run import launcher
    from support.batches import planned_batch

    batch, work = planned_batch(tmp_path)
    path = tmp_path / "plan.json"
    estimate_cli.save_plan(estimate_cli.plan_batch(batch, work), path)
    low, high = json.loads(path.read_text())["cost_jpy_range"]  # the saved plan is the recommendation itself
    pick = launcher.pick_of(path, None, batch.tax)
    assert pick.yen_upper == Decimal(high) and Decimal(low) <= pick.yen <= pick.yen_upper
    assert launcher.budget_spend(pick, batch) == (Decimal(high), "launch's planned upper yen")
    capped, _ = planned_batch(tmp_path, "max_yen: 900\n")
    assert launcher.budget_spend(pick, capped) == (Decimal(900), "launch's max_yen")
