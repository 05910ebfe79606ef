"""What `gpuplan run --plan` compares with: the jobs phase of a plan saved by `gpuplan estimate`."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from gpuplan.errors import UsageError
from gpuplan.run import items as run_items


def test_plan_from_estimate_predicts_report_a_jobs_phase(cli, tmp_path):
    path = tmp_path / "plan.json"
    r = cli("estimate", "--videos", "4", "--as-of", "2017-08", "--tax", "included", "--save", str(path))  # report A's own basis: with 2017's 8 %
    assert r.code == 0, r.err
    pred = run_items.read_plan(path)
    # Report A: 4x NC6 from an image; 60 min setup on the builder, then 120 min of four NC6 (¥826 in all).
    assert pred["plan_wall_s"] == 180 * 60 and pred["plan_yen"] == Decimal("826.20")
    assert pred["wall_s"] == 7200 and pred["yen"] == Decimal("734.40")  # 4 x 2 h x ¥91.80
    assert "setup excluded" in pred["basis"]


def test_plan_without_machines_is_compared_whole(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"recommended": {"wall_minutes": 210, "cost_jpy": 1285}}))
    pred = run_items.read_plan(path)
    assert (pred["wall_s"], pred["yen"], pred["basis"]) == (12600, 1285, "the whole plan")


@pytest.mark.parametrize("text, message", [
    ("{", "not valid JSON"),
    ('{"count": 1}', "no wall time or cost"),
    ('{"wall_minutes": 1, "cost_jpy": 1, "machines": [{"jobs_s": "x"}]}', "unreadable figure"),
])
def test_bad_plan_files_are_one_line_usage_errors(tmp_path, text, message):
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(UsageError, match=message):
        run_items.read_plan(path)
    with pytest.raises(UsageError, match="not found"):
        run_items.read_plan(tmp_path / "missing.json")


def test_read_items_skips_blanks_and_comments(tmp_path):
    f = tmp_path / "items.txt"
    f.write_text("# clips\n\n a.mp4 \nb.mp4\n")
    assert run_items.read_items(f) == ["a.mp4", "b.mp4"]
    f.write_text("# nothing\n")
    with pytest.raises(UsageError, match="has no items"):
        run_items.read_items(f)
    assert run_items.job_name(3, "/data/My Clip (1).mp4") == "0003-My_Clip_1_.mp4"
    # an item with a quote reaches the program as one word (the one command line of every backend)
    import os
    import subprocess

    from gpuplan.run import command_line

    line = command_line.exec_line(["printf", "%s|", "--video", "{item}"])
    done = subprocess.run(["sh", "-c", line], env={"PATH": os.environ["PATH"], "GPUPLAN_ITEM": "it's.mp4"},
                          capture_output=True, text=True)
    assert done.stdout == "--video|it's.mp4|"


def _summary(jobs: int, wall_s: float, tmp_path, status: str = "ok", nodes: int | None = None,
             size: str = "Standard_NC6") -> run_items.RunSummary:
    results = tuple(run_items.JobResult(f"video-{i}", f"v{i}.mp4", f"n{i}:gpu0", f"n{i}", status, 1, wall_s, tmp_path / "log")
                    for i in range(jobs))
    return run_items.RunSummary("demo", results, wall_s, jobs if nodes is None else nodes, Decimal("91.80"), tmp_path,
                             provider="azure", size=size)


def test_a_whole_batch_run_calibrates_the_next_estimate(cli, tmp_path):
    from gpuplan.store.state import State

    path = tmp_path / "plan.json"
    assert cli("estimate", "--videos", "4", "--as-of", "2017-08", "--save", str(path)).code == 0
    pred = run_items.read_plan(path)
    assert (pred["workload"], pred["provider"], pred["instance_type"], pred["jobs"]) == ("colorize-hd", "azure", "Standard_NC6", 4)
    state = State.open_default()
    job = ["python3", "-m", "gpuplan.jobs.colorize", "--epochs", "1000", "--video", "{item}"]  # the workload's own job
    assert "not recorded" in run_items.calibrate(state, _summary(3, 9000.0, tmp_path), pred, job)  # not the whole batch
    assert "not recorded" in run_items.calibrate(state, _summary(4, 9000.0, tmp_path, status="failed"), pred, job)
    # the four jobs took 150 min, not the 120 planned: the K80 runs this at 0.8x what the plan assumed
    assert "calibration recorded" in run_items.calibrate(state, _summary(4, 9000.0, tmp_path), pred, job, "demo-1")

    r = cli("estimate", "--videos", "4", "--as-of", "2017-08", "--tax", "included", "--format", "json")  # report A's own basis: with 2017's 8 %
    assert r.code == 0, r.err
    data = json.loads(r.out)
    rec = data["recommended"]
    # 4x NC6 from an image: 60 min setup (¥91.80) + 4 x 150 min at ¥91.80/h (¥918) = ¥1,009.80
    assert (rec["instance_type"], rec["count"], rec["wall_minutes"], rec["cost_jpy"]) == ("Standard_NC6", 4, 210, 1010)
    note = " ".join(data["notes"].values())
    assert "predicted 2:00 h, measured 2:30 h (+25.0 %)" in note and "K80 now 0.8x K80 (was 1.0x)" in note
    assert any("calibrated by gpuplan run" in a for a in rec["assumptions"])


def test_calibration_only_from_the_fleet_that_was_planned(cli, tmp_path):
    """Report: a batch on a 4-host cluster recorded against a 1-host plan made the next estimate
    say "T4 now 2.795x T4". Another fleet is kept as a per-GPU speed point, with the reason."""
    from gpuplan.store.state import State

    path = tmp_path / "plan.json"
    assert cli("estimate", "--videos", "4", "--as-of", "2017-08", "--save", str(path)).code == 0
    pred = run_items.read_plan(path)
    assert pred["fleet"] == [("Standard_NC6", 4)]
    state = State.open_default()
    job = ["python", "-m", "gpuplan.jobs.colorize", "{item}"]
    line = run_items.calibrate(state, _summary(4, 9000.0, tmp_path, nodes=1), pred, job)
    assert line == ("not recorded as a calibration: the plan is for 4 x Standard_NC6 (azure), the batch ran on"
                    " 1 x Standard_NC6 (azure); kept as a per-GPU speed point")
    line = run_items.calibrate(state, _summary(4, 9000.0, tmp_path, size="Standard_NC12"), pred, job)
    assert "ran on 4 x Standard_NC12 (azure)" in line
    assert state.calibrations("colorize-hd") == []
    points = state.speed_points("colorize-hd")
    assert [(p["size"], p["jobs"], p["measured_s"]) for p in points] == [("Standard_NC6", 4, 9000.0), ("Standard_NC12", 4, 9000.0)]
    r = cli("estimate", "--videos", "4", "--as-of", "2017-08", "--format", "json")
    assert "calibrated by gpuplan run" not in r.out  # the next estimate is not skewed by the other fleet


def test_the_run_engines_setup_is_in_the_plans_assumptions_and_counted_once_measured(cli):
    from gpuplan.store.state import State

    def recommended():
        r = cli("estimate", "--videos", "4", "--as-of", "2017-08", "--format", "json")
        assert r.code == 0, r.err
        return json.loads(r.out)["recommended"]

    before = recommended()
    assert any(a.startswith("run engine (Ray 2.60.0) install about 3 min per machine, start about 67 s and one submission"
                            " about 3 s per batch") and "not counted" in a for a in before["assumptions"])
    State.open_default().record_setup_time("azure", "Standard_NC6", "ray", 156)  # what bootstrap records for `ray`
    after = recommended()
    assert any(a.startswith("run engine (Ray 2.60.0) install 3 min on Standard_NC6: measured") for a in after["assumptions"])
    assert any(a.startswith("run engine (Ray 2.60.0) start 67 s (measured on two owned hosts) and one submission 3 s")
               for a in after["assumptions"])
    # 156 s install on the image's builder, then 67 s start + 3 s submission on every worker before its jobs
    assert after["wall_minutes"] == round(before["wall_minutes"] + (156 + 67 + 3) / 60, 2)
    assert int(after["cost_jpy"]) > int(before["cost_jpy"])
