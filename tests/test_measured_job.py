"""The job a probe timed goes into the plan it writes (issue 42, item 1's remainder): a later
batch of that plan calibrates it only where it runs that job, never a stand-in such as `echo`."""

from __future__ import annotations

import json

import pytest

from gpuplan.measuring import calibration


@pytest.mark.parametrize("probe, command, job", [
    # a probe command of its own: the words before {units}, as far as the batch's command shares them
    (["python", "train.py", "--steps", "{units}", "{item}"], ["python", "train.py", "{item}"], "python train.py"),
    # the batch's own command with {units} (the probe by default): up to its first placeholder
    (["python3", "-m", "myjob", "--units", "{units}", "{item}"], ["python3", "-m", "myjob", "--units", "{units}", "{item}"],
     "python3 -m myjob --units"),
    # leading VAR=value words are not the job
    (["CUDA_VISIBLE_DEVICES=0", "./colorize", "{units}"], ["CUDA_VISIBLE_DEVICES=0", "./colorize", "{item}"], "./colorize"),
    # another script than the batch's: only the interpreter is shared, which names no job
    (["python", "probe.py", "{units}"], ["python", "train.py", "{item}"], ""),
    (["echo", "{units}"], ["python", "train.py", "{item}"], ""),
])
def test_the_job_a_probe_timed_is_the_command_words_both_share(probe, command, job):
    assert calibration.measured_job(probe, command) == job


def test_a_plan_saved_with_the_probed_job_calibrates_only_batches_that_run_it(tmp_path, gpuplan_home):
    from gpuplan.cli.estimate import plan_estimate, save_plan
    from gpuplan.planning import workloads
    from gpuplan.run import items as run_items

    est = plan_estimate(workloads.load("colorize-hd"), objective="cost")
    path = tmp_path / "plan.json"
    save_plan(est, path, command="python mycolorize.py")
    assert json.loads(path.read_text())["command"] == "python mycolorize.py"
    predicted = run_items.read_plan(path)
    accepted = run_items.workload_commands(predicted)
    # the user's own job (not colorize-hd's reference job) counts, as the probe measured it
    assert "python mycolorize.py" in accepted and "python -m gpuplan.jobs.colorize" in accepted
    assert calibration.runs_job(["python3", "mycolorize.py", "clip-1.mp4"], accepted)
    # a stand-in does not, nor another script
    assert not calibration.runs_job(["echo", "clip-1.mp4"], accepted)
    assert not calibration.runs_job(["python", "other.py", "clip-1.mp4"], accepted)
    # a plan saved without a probe names no job of its own: only the workload's
    save_plan(est, path)
    assert "command" not in json.loads(path.read_text())
    assert not calibration.runs_job(["python", "mycolorize.py", "clip-1.mp4"], run_items.workload_commands(run_items.read_plan(path)))
