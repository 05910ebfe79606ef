"""The training jobs' checkpoints on CPU with tiny shapes: SIGTERM saves and exits 143, a second
run on the same folder goes on from there to the full count, and benchmarks/checkpoint_resume.py
runs end to end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
TINY = {
    "colorize": ["--height", "64", "--width", "64", "--ngf", "8", "--levels", "4", "--steps", "2"],
    "vgg_cifar": ["--quick", "--steps", "2"],
}
CHECKPOINT_FIELDS = ("checkpoint_dir", "resumed_from_epoch", "resumed_from_step", "checkpoint_saves",
                     "checkpoint_save_s", "checkpoint_bytes")


def job_argv(job: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", f"gpuplan.jobs.{job}", "--json", "--device", "cpu", "--warmup", "1", *extra]


def record_of(stdout: str) -> dict:
    lines = stdout.strip().splitlines()
    assert len(lines) == 1, stdout
    return json.loads(lines[0])


def run(argv: list[str], expect: int = 0, env: dict | None = None) -> dict:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == expect, proc.stderr[-2000:]
    return record_of(proc.stdout)


def run_until_checkpoint_then_sigterm(argv: list[str], checkpoint: Path) -> tuple[int, dict]:
    """Start the job, wait until its first checkpoint is on disk, SIGTERM it; its exit code and record."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 120
    while not checkpoint.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, "the job ended before it was sent SIGTERM: give it more epochs"
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=120)
    return proc.returncode, record_of(stdout)


@pytest.mark.parametrize("job", ["colorize", "vgg_cifar"])
def test_sigterm_saves_and_a_second_run_trains_the_epochs_left(job, tmp_path):
    epochs = 80  # about 2 s of steps: long enough to be stopped after its first epoch even on a busy machine
    argv = job_argv(job, *TINY[job], "--epochs", str(epochs), "--checkpoint-dir", str(tmp_path),
                    "--checkpoint-every", "0")
    code, stopped = run_until_checkpoint_then_sigterm(argv, tmp_path / "checkpoint.pt")
    assert code == 143 and stopped["status"] == "interrupted"
    assert 1 <= stopped["checkpoint_saves"] and stopped["checkpoint_bytes"] > 0 and stopped["checkpoint_save_s"] > 0
    assert stopped["resumed_from_epoch"] == 0 and stopped["resumed_from_step"] == 0
    assert 2 <= stopped["steps"] < epochs * 2
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.pt"]  # the latest only, no temporary file left

    resumed = run(argv)
    assert resumed["status"] == "ok" and resumed["epochs"] == epochs and resumed["steps_per_epoch"] == 2
    # saved after the step SIGTERM came in: the second run goes on from the step after it
    assert resumed["resumed_from_step"] == stopped["steps"]
    assert resumed["resumed_from_epoch"] == stopped["steps"] // 2
    assert stopped["steps"] + resumed["steps"] == epochs * 2
    assert resumed["units"] == resumed["steps"] * (3 if job == "colorize" else 8)
    if job == "colorize":
        assert resumed["seconds_per_epoch"] == pytest.approx(resumed["seconds"] / (resumed["steps"] / 2))


def test_resnet50_resumes_from_the_checkpoint_dir_in_its_environment(tmp_path):
    tiny = ["--batch-size", "2", "--image-size", "32", "--classes", "10", "--steps", "1"]
    env = dict(os.environ, GPUPLAN_CHECKPOINT_DIR=str(tmp_path))
    first = run(job_argv("resnet50", *tiny, "--epochs", "2", "--checkpoint-every", "0"), env=env)
    # a save after epoch 1; none after the last step, when the job is done
    assert first["checkpoint_dir"] == str(tmp_path) and first["checkpoint_saves"] == 1
    assert first["checkpoint_bytes"] > 2 * 23_000_000 * 4  # the weights and SGD's momentum, fp32
    more = run(job_argv("resnet50", *tiny, "--epochs", "4", "--checkpoint-every", "3600"), env=env)
    assert (more["resumed_from_epoch"], more["steps"], more["units"]) == (1, 3, 6)
    assert more["checkpoint_saves"] == 0 and more["epochs"] == 4
    # a checkpoint of another shape of run is refused, not half loaded
    proc = subprocess.run(job_argv("resnet50", "--batch-size", "2", "--image-size", "32", "--classes", "10",
                                   "--steps", "2"), capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 2 and "1 steps an epoch" in proc.stdout + proc.stderr


def test_without_a_checkpoint_dir_nothing_changes(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "GPUPLAN_CHECKPOINT_DIR"}
    rec = run(job_argv("colorize", *TINY["colorize"], "--epochs", "2"), env=env)
    assert rec["status"] == "ok" and rec["steps"] == 4 and rec["units"] == 12
    assert rec["seconds_per_epoch"] == pytest.approx(rec["seconds"] / 2)
    assert {k: rec[k] for k in CHECKPOINT_FIELDS} == {
        "checkpoint_dir": None, "resumed_from_epoch": 0, "resumed_from_step": 0, "checkpoint_saves": 0,
        "checkpoint_save_s": 0.0, "checkpoint_bytes": 0}


def test_the_benchmark_runs_end_to_end_on_tiny_sizes(tmp_path):
    out = tmp_path / "ckpt.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "checkpoint_resume.py"), "--jobs", "colorize", "--epochs", "80",
         "--checkpoint-every", "0", "--job-args", "--device cpu --quick --steps 2 --warmup 1", "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "colorize: redone:" in proc.stdout and "fixed cost" in proc.stdout
    data = json.loads(out.read_text())
    assert data["device"] == "cpu" and data["torch"] == torch.__version__
    (figures,) = data["jobs"]
    assert figures["job"] == "colorize" and figures["epochs"] == 80
    assert figures["uninterrupted_exit"] == 0 and figures["interrupted_exit"] == 143 and figures["resumed_exit"] == 0
    assert figures["sigterm_at_s"] is not None and figures["resumed_from_epoch"] >= 1
    assert figures["epochs_trained"] == 80
    assert figures["redone_s"] == pytest.approx(
        figures["interrupted_wall_s"] + figures["resumed_wall_s"] - figures["uninterrupted_wall_s"])
    assert 0 < figures["resumed_fixed_s"] < figures["resumed_wall_s"]
    assert figures["checkpoint_saves"] >= 1 and figures["checkpoint_bytes"] > 0 and figures["checkpoint_save_s"] > 0
    assert figures["records"]["resumed"]["status"] == "ok"
