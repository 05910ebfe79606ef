"""What a spot interruption costs a reference training job that checkpoints, on this machine.

Run on a GPU machine with the project installed (`pip install -e .`, torch present):

    python benchmarks/checkpoint_resume.py --out $OUT/ckpt.json

For each job (default colorize at its 1280x720 default, then resnet50 at its defaults) it runs:

  a. the job uninterrupted for --epochs epochs, no checkpoint dir: its process wall;
  b. the same with a fresh checkpoint dir and --checkpoint-every S, sent SIGTERM at --stop-at of
     a's wall (and not before its first checkpoint is on disk), which saves and exits 143;
  c. the same command again on that dir: it resumes and trains the epochs left.

and prints one line per figure: the walls and exit codes, redone seconds = b + c - a (the
interruption's whole cost, saves included), of which c's fixed cost (its wall minus its timed
steps, from its own JSON: interpreter, torch import, CUDA context, model build, warm-up), the
checkpoint saves (count, seconds, bytes) and the epoch c resumed from. --out writes the same
figures and each run's JSON line.

Default epochs are sized for about 60 s of timed steps on an H100 (colorize 0.187 s/epoch of
10 steps, resnet50 ~0.41 s/epoch of 20 steps of 32 images, from
shared/measurements/h100-2026-11-22): about 3 + 2 minutes for both jobs in all. On a CPU, pass
tiny sizes, e.g.

    python benchmarks/checkpoint_resume.py --jobs colorize --epochs 100 --checkpoint-every 0 \\
        --job-args "--device cpu --height 64 --width 64 --ngf 8 --levels 4 --steps 2" --out ckpt.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time

DEFAULT_EPOCHS = {"colorize": 300, "resnet50": 100, "vgg_cifar": 800}  # ~56 s, ~41 s, ~61 s timed on an H100
CHECKPOINT_FILE = "checkpoint.pt"  # gpuplan.jobs._common.CHECKPOINT_FILE (that module imports torch)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", nargs="+", default=["colorize", "resnet50"], choices=sorted(DEFAULT_EPOCHS))
    p.add_argument("--epochs", type=int, default=None,
                   help="epochs of every job (default per job: " + ", ".join(f"{j} {n}" for j, n in DEFAULT_EPOCHS.items())
                        + ")")
    p.add_argument("--job-args", default="", help="more arguments for every job, e.g. sizes or --device cpu")
    p.add_argument("--checkpoint-every", type=float, default=10.0, metavar="SECONDS")
    p.add_argument("--stop-at", type=float, default=0.5, help="SIGTERM at this fraction of the uninterrupted wall")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one job process may run")
    p.add_argument("--out", help="write the figures as JSON to this file")
    args = p.parse_args(argv)
    if not 0 < args.stop_at < 1:
        p.error("--stop-at must be between 0 and 1")
    return args


class Run:
    """One job process: its wall seconds, exit code and JSON line (None when it printed none)."""

    def __init__(self, argv: list[str], timeout: float, checkpoint: str | None = None,
                 stop_after: float | None = None) -> None:
        self.sigterm_at: float | None = None
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            t0 = time.perf_counter()
            proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
            while proc.poll() is None:
                elapsed = time.perf_counter() - t0
                if elapsed > timeout:
                    proc.kill()
                    proc.wait()
                    break
                # SIGTERM only once a checkpoint is on disk: before its first save a job has nothing to keep
                if (stop_after is not None and self.sigterm_at is None and elapsed >= stop_after
                        and checkpoint is not None and os.path.exists(checkpoint)):
                    proc.send_signal(signal.SIGTERM)
                    self.sigterm_at = elapsed
                time.sleep(0.02)
            self.wall = time.perf_counter() - t0
            self.exit = proc.returncode
            out.seek(0)
            err.seek(0)
            lines = out.read().decode(errors="replace").strip().splitlines()
            self.stderr_tail = err.read().decode(errors="replace")[-2000:]
        self.record = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None

    def field(self, key: str, default: object = None) -> object:
        return (self.record or {}).get(key, default)

    def timed_epochs(self) -> float:
        rec = self.record or {}
        return rec.get("steps", 0) / rec["steps_per_epoch"] if rec.get("steps_per_epoch") else 0.0


def measure(job: str, epochs: int, args: argparse.Namespace, say) -> dict:
    base = [sys.executable, "-m", f"gpuplan.jobs.{job}", "--json", "--epochs", str(epochs),
            *shlex.split(args.job_args)]
    env_clear = os.environ.pop("GPUPLAN_CHECKPOINT_DIR", None)  # run a must not checkpoint
    try:
        whole = Run(base, args.timeout)
    finally:
        if env_clear is not None:
            os.environ["GPUPLAN_CHECKPOINT_DIR"] = env_clear
    if whole.exit != 0 or whole.record is None:
        raise SystemExit(f"{job}: the uninterrupted run failed (exit {whole.exit}): {whole.stderr_tail}")
    per_epoch = whole.field("seconds") / whole.timed_epochs()
    say(f"{job}: uninterrupted: wall {whole.wall:.1f} s, exit {whole.exit}, {epochs} epochs,"
        f" {per_epoch:.4f} s/epoch timed ({whole.field('device')}, {whole.field('gpu_name') or 'no GPU'})")

    with tempfile.TemporaryDirectory(prefix="gpuplan-ckpt-") as folder:
        checkpointed = [*base, "--checkpoint-dir", folder, "--checkpoint-every", f"{args.checkpoint_every:g}"]
        stopped = Run(checkpointed, args.timeout, os.path.join(folder, CHECKPOINT_FILE), args.stop_at * whole.wall)
        sigterm = f"{stopped.sigterm_at:.1f} s" if stopped.sigterm_at is not None else "never (it ended first)"
        say(f"{job}: interrupted: wall {stopped.wall:.1f} s, exit {stopped.exit} (SIGTERM at {sigterm}),"
            f" {stopped.timed_epochs():.1f} epochs trained, {stopped.field('checkpoint_saves', 0)} saves in"
            f" {stopped.field('checkpoint_save_s', 0.0):.2f} s")
        resumed = Run(checkpointed, args.timeout)
        if resumed.exit != 0 or resumed.record is None:
            raise SystemExit(f"{job}: the resumed run failed (exit {resumed.exit}): {resumed.stderr_tail}")
        say(f"{job}: resumed: wall {resumed.wall:.1f} s, exit {resumed.exit}, from epoch"
            f" {resumed.field('resumed_from_epoch')} (step {resumed.field('resumed_from_step')}),"
            f" {resumed.timed_epochs():.1f} epochs trained")

    redone = stopped.wall + resumed.wall - whole.wall
    fixed = resumed.wall - resumed.field("seconds")
    saves = stopped.field("checkpoint_saves", 0) + resumed.field("checkpoint_saves", 0)
    save_s = stopped.field("checkpoint_save_s", 0.0) + resumed.field("checkpoint_save_s", 0.0)
    size = max(stopped.field("checkpoint_bytes", 0), resumed.field("checkpoint_bytes", 0))
    trained = stopped.timed_epochs() + resumed.timed_epochs()
    say(f"{job}: redone: {redone:.1f} s = {stopped.wall:.1f} + {resumed.wall:.1f} - {whole.wall:.1f}")
    say(f"{job}:   of which the resumed process's fixed cost: {fixed:.1f} s (its wall - its timed steps)")
    say(f"{job}:   of which checkpoint saves: {saves} in {save_s:.2f} s, {size:,} bytes each")
    say(f"{job}: resumed from epoch {resumed.field('resumed_from_epoch')}; epochs trained in both runs"
        f" {trained:.1f} of {epochs}")
    return {
        "job": job,
        "epochs": epochs,
        "job_args": args.job_args,
        "checkpoint_every_s": args.checkpoint_every,
        "stop_at_fraction": args.stop_at,
        "uninterrupted_wall_s": whole.wall,
        "uninterrupted_exit": whole.exit,
        "seconds_per_epoch": per_epoch,
        "uninterrupted_fixed_s": whole.wall - whole.field("seconds"),
        "sigterm_at_s": stopped.sigterm_at,
        "interrupted_wall_s": stopped.wall,
        "interrupted_exit": stopped.exit,
        "interrupted_epochs": stopped.timed_epochs(),
        "resumed_wall_s": resumed.wall,
        "resumed_exit": resumed.exit,
        "resumed_epochs": resumed.timed_epochs(),
        "resumed_from_epoch": resumed.field("resumed_from_epoch"),
        "resumed_from_step": resumed.field("resumed_from_step"),
        "redone_s": redone,
        "resumed_fixed_s": fixed,
        "checkpoint_saves": saves,
        "checkpoint_save_s": save_s,
        "checkpoint_bytes": size,
        "epochs_trained": trained,
        "records": {"uninterrupted": whole.record, "interrupted": stopped.record, "resumed": resumed.record},
    }


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)

    def say(line: str) -> None:
        print(line, flush=True)

    started = time.perf_counter()
    results = [measure(job, args.epochs or DEFAULT_EPOCHS[job], args, say) for job in args.jobs]
    total = time.perf_counter() - started
    say(f"all: {total:.0f} s")
    if args.out:
        first = results[0]["records"]["uninterrupted"]
        with open(args.out, "w") as fh:
            json.dump({"benchmark": "checkpoint_resume", "date": time.strftime("%Y-%m-%d"),
                       "host": first.get("host"), "device": first.get("device"), "gpu_name": first.get("gpu_name"),
                       "torch": first.get("torch"), "cuda": first.get("cuda"), "total_s": total, "jobs": results},
                      fh, indent=2, sort_keys=True)
            fh.write("\n")


if __name__ == "__main__":
    main()
