"""What every reference job shares: options, device choice, timing, memory and the JSON line.

Each job is runnable as `python -m gpuplan.jobs.<name> --json ...` and prints exactly one JSON
line (from rank 0 when launched by torchrun) with these keys:

    job, device, gpu_name, torch, cuda, steps, seconds, units, unit, throughput
    (units per second over all ranks), seconds_per_unit, peak_memory_bytes, memory_source
    ("cuda" | "rss" | null), world_size, nodes, quick, status ("ok")

The training jobs (colorize, resnet50, vgg_cifar) add epochs, steps_per_epoch and what their
checkpoints did: checkpoint_dir, resumed_from_epoch and resumed_from_step (0 when fresh),
checkpoint_saves, checkpoint_save_s (seconds spent saving, inside `seconds`) and checkpoint_bytes
(the last saved file's size). `steps`, `units` and `seconds` count this process's timed steps
only: a resumed run reports the part it trained. Stopped by SIGTERM, a run's status is
"interrupted" and it exits 143.

Checkpoints: with --checkpoint-dir DIR (default $GPUPLAN_CHECKPOINT_DIR, which `gpuplan run`
gives each item), a training job first loads DIR/checkpoint.pt when it is there (model,
optimizer, steps done, RNG state) and goes on from the step after it; it saves one every
--checkpoint-every seconds (checked at epoch ends) and, on SIGTERM, after the step it is in,
then exits 143. A save writes a temporary file and renames it, so DIR holds only the latest whole
checkpoint. Without a checkpoint dir nothing of this happens and SIGTERM ends the job as before.

torch is imported here at module load: this package is only ever imported by a job process,
never by the CLI's start-up path.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

EXIT_NO_FIT = 3  # a process that does not fit its memory share refuses with this code
EXIT_STOPPED = 143  # 128 + SIGTERM: what a shell reports for a process that SIGTERM ended
CHECKPOINT_FILE = "checkpoint.pt"


def base_parser(job: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m gpuplan.jobs.{job}", description=description)
    p.add_argument("--json", action="store_true", help="print one JSON line instead of a sentence")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="auto = cuda when available")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (cuDNN autotune, allocator)")
    share = os.environ.get("GPUPLAN_MEMORY_FRACTION")  # set by `gpuplan run --per-gpu k`
    p.add_argument("--memory-fraction", type=float, default=float(share) if share else None,
                   help="cap this process at this fraction of the GPU's memory (0 < f <= 1);"
                        " default $GPUPLAN_MEMORY_FRACTION")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (co-located CPU runs)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny shapes: a smoke run that proves nothing about speed")
    p.add_argument("--measure-feed", action="store_true",
                   help="after the timed steps, run the job's input pipeline alone on the CPU and report its CPU"
                        " seconds per image (jobs that have one)")
    return p


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.steps < 1 or args.warmup < 0:
        p.error("--steps must be at least 1 and --warmup at least 0")
    if args.memory_fraction is not None and not 0 < args.memory_fraction <= 1:
        p.error("--memory-fraction must be in (0, 1]")


def training_options(p: argparse.ArgumentParser) -> None:
    """--epochs and the checkpoint options of the training jobs (see the module docstring)."""
    p.add_argument("--epochs", type=int, default=1, help="epochs; timed steps = epochs x --steps")
    p.add_argument("--checkpoint-dir", default=os.environ.get("GPUPLAN_CHECKPOINT_DIR") or None, metavar="DIR",
                   help=f"resume from DIR/{CHECKPOINT_FILE} when there is one, save there every --checkpoint-every"
                        " seconds and on SIGTERM (then exit 143); default $GPUPLAN_CHECKPOINT_DIR")
    p.add_argument("--checkpoint-every", type=float, default=600.0, metavar="SECONDS",
                   help="seconds between saves, checked at epoch ends (0: every epoch)")


def training_steps(p: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Check the training options; make args.steps the timed steps of all epochs and return the
    steps of one epoch (the --steps given)."""
    check_args(p, args)
    if args.epochs < 1:
        p.error("--epochs must be at least 1")
    if args.checkpoint_every < 0:
        p.error("--checkpoint-every must be at least 0")
    steps_per_epoch = args.steps
    args.steps = args.epochs * steps_per_epoch
    return steps_per_epoch


def dist_env() -> tuple[int, int, int, int]:
    """(rank, world_size, local_rank, nodes) from torchrun's environment; (0, 1, 0, 1) alone."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    nodes = os.environ.get("GROUP_WORLD_SIZE")  # torchrun: the number of agents, one per node
    return rank, world, local_rank, int(nodes) if nodes else max(1, world // max(1, local_world))


def setup(args: argparse.Namespace) -> torch.device:
    """Pick the device, apply threads / memory fraction, join the process group under torchrun."""
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    want_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if want_cuda and not torch.cuda.is_available():
        fail(args, "--device cuda asked for, but torch sees no CUDA GPU (torch build "
             f"{torch.__version__}); use --device cpu", 2)
    _, world, local_rank, _ = dist_env()
    if want_cuda:
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
        if args.memory_fraction is not None:
            torch.cuda.set_per_process_memory_fraction(args.memory_fraction, device)
    else:
        device = torch.device("cpu")
    if world > 1:
        import torch.distributed as dist

        dist.init_process_group(backend="nccl" if want_cuda else "gloo")
    return device


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(step: Callable[[], None], args: argparse.Namespace, device: torch.device,
          checkpoints: Checkpoints | None = None) -> float:
    """Run warmup then timed steps; seconds of the timed part (max over ranks under torchrun).
    With `checkpoints`, the timed steps start after the ones its checkpoint had done, it may
    save after each step, and they end early when SIGTERM asked it to stop."""
    for _ in range(args.warmup):
        step()
    sync(device)
    barrier()
    done = 0
    if checkpoints is not None:
        done = checkpoints.load()  # after the warm-up, so that the saved state replaces what its steps changed
    start_together()
    t0 = time.perf_counter()
    while done < args.steps:
        step()
        done += 1
        if checkpoints is not None and checkpoints.after_step(done, args.steps):
            break
    sync(device)
    seconds = time.perf_counter() - t0
    if checkpoints is not None:
        checkpoints.steps_done = done
    return all_max(seconds, device)


class Checkpoints:
    """A training job's state in one folder, one file: loaded before the timed steps when it is
    there, saved every `--checkpoint-every` seconds at an epoch's end and after the step in which
    SIGTERM came. With no folder (no --checkpoint-dir) it does nothing and leaves SIGTERM alone.

    `parts` names what is saved: objects with state_dict() and load_state_dict() (models,
    optimizers); the file also holds the steps done and the RNG state. Under torchrun rank 0
    reads the file and sends what it read to the other ranks (a node of its own may not have
    it), rank 0 alone writes, and after every step the ranks agree whether to stop or save, so
    that they all do it after the same step."""

    def __init__(self, job: str, args: argparse.Namespace, parts: dict[str, Any], device: torch.device,
                 steps_per_epoch: int) -> None:
        self.job = job
        self.args = args
        self.folder: str | None = args.checkpoint_dir
        self.every_s = args.checkpoint_every
        self.parts = parts
        self.device = device
        self.steps_per_epoch = steps_per_epoch
        self.resumed_from_step = 0
        self.steps_done = 0
        self.saves = 0
        self.save_seconds = 0.0
        self.bytes = 0
        self.stop_asked = False
        self.stopped = False
        self.last_save = time.monotonic()
        if self.folder:
            os.makedirs(self.folder, exist_ok=True)
            for name in os.listdir(self.folder):  # a save cut short by the machine going away
                if name.startswith(f".{CHECKPOINT_FILE}.") and name.endswith(".tmp"):
                    os.unlink(os.path.join(self.folder, name))
            signal.signal(signal.SIGTERM, self._ask_stop)

    @property
    def path(self) -> str | None:
        return os.path.join(self.folder, CHECKPOINT_FILE) if self.folder else None

    def _ask_stop(self, signum: int, frame: object) -> None:
        self.stop_asked = True

    def load(self) -> int:
        """Restore the checkpoint if there is one; the steps it had done (0: none)."""
        if self.path is None:
            return 0
        rank, world, _, _ = dist_env()
        state = None
        if rank == 0 and os.path.exists(self.path):
            state = torch.load(self.path, map_location="cpu", weights_only=True)
        if world > 1:
            import torch.distributed as dist

            box = [state]
            dist.broadcast_object_list(box, src=0)
            state = box[0]
        if state is None:
            return 0
        if state["job"] != self.job or state["steps_per_epoch"] != self.steps_per_epoch:
            fail(self.args, f"{self.path} is a checkpoint of {state['job']} with {state['steps_per_epoch']} steps an"
                 f" epoch, not of {self.job} with {self.steps_per_epoch}: use another --checkpoint-dir", 2)
        for name, part in self.parts.items():
            part.load_state_dict(state["parts"][name])
        torch.set_rng_state(state["rng_cpu"])
        if self.device.type == "cuda" and state["rng_cuda"] is not None:
            torch.cuda.set_rng_state(state["rng_cuda"], self.device)
        self.resumed_from_step = self.steps_done = int(state["steps_done"])
        self.last_save = time.monotonic()
        if rank == 0:
            print(f"{self.job}: resumed from {self.path}: {self.resumed_from_step} steps done"
                  f" (epoch {self.resumed_from_step // self.steps_per_epoch})", file=sys.stderr, flush=True)
        return self.resumed_from_step

    def after_step(self, steps_done: int, steps_total: int) -> bool:
        """Save when SIGTERM asked to stop or, at an epoch's end, when a save is due; True: stop now.
        After the last step it neither saves nor stops: the job is done."""
        if self.path is None or steps_done >= steps_total:
            return False
        stop = self.stop_asked
        due = steps_done % self.steps_per_epoch == 0 and time.monotonic() - self.last_save >= self.every_s
        if dist_env()[1] > 1:
            import torch.distributed as dist

            flags = torch.tensor([float(stop), float(due)], device=self.device)
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
            stop, due = bool(flags[0]), bool(flags[1])
        if stop or due:
            self.save(steps_done)
        if stop:
            self.stopped = True
            barrier()  # every rank waits for rank 0's file before any of them exits
        return stop

    def save(self, steps_done: int) -> None:
        assert self.folder is not None and self.path is not None
        sync(self.device)  # the steps' GPU work is not save time
        t0 = time.perf_counter()
        if dist_env()[0] == 0:
            state = {
                "job": self.job,
                "steps_done": steps_done,
                "steps_per_epoch": self.steps_per_epoch,
                "parts": {name: part.state_dict() for name, part in self.parts.items()},
                "rng_cpu": torch.get_rng_state(),
                "rng_cuda": torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None,
            }
            temporary = os.path.join(self.folder, f".{CHECKPOINT_FILE}.{os.getpid()}.tmp")
            torch.save(state, temporary)
            os.replace(temporary, self.path)
            self.bytes = os.path.getsize(self.path)
        seconds = time.perf_counter() - t0
        self.saves += 1
        self.save_seconds += seconds
        self.last_save = time.monotonic()
        if dist_env()[0] == 0:
            print(f"{self.job}: checkpoint saved after step {steps_done} (epoch {steps_done // self.steps_per_epoch}):"
                  f" {self.bytes} bytes in {seconds:.2f} s", file=sys.stderr, flush=True)

    @property
    def steps_run(self) -> int:
        """The timed steps this process trained."""
        return self.steps_done - self.resumed_from_step

    def fields(self) -> dict:
        return {
            "checkpoint_dir": self.folder,
            "resumed_from_step": self.resumed_from_step,
            "resumed_from_epoch": self.resumed_from_step // self.steps_per_epoch,
            "checkpoint_saves": self.saves,
            "checkpoint_save_s": self.save_seconds,
            "checkpoint_bytes": self.bytes,
        }


def finish(record: dict, args: argparse.Namespace, checkpoints: Checkpoints) -> None:
    """Emit a training job's record with its checkpoint fields; exit 143 when SIGTERM stopped it."""
    record.update(checkpoints.fields())
    if checkpoints.stopped:
        record["status"] = "interrupted"
    emit(record, args.json)
    if checkpoints.stopped:
        sys.exit(EXIT_STOPPED)


def start_together(timeout: float = 600.0) -> None:
    """With GPUPLAN_START_BARRIER=<dir>:<n>, wait until n processes have reached this point, so
    that co-located jobs time the same stretch rather than one another's start-up."""
    spec = os.environ.get("GPUPLAN_START_BARRIER")
    if not spec:
        return
    folder, _, n = spec.rpartition(":")
    os.makedirs(folder, exist_ok=True)
    open(os.path.join(folder, f"ready.{os.getpid()}"), "w").close()
    deadline = time.monotonic() + timeout
    while len([f for f in os.listdir(folder) if f.startswith("ready.")]) < int(n):
        if time.monotonic() > deadline:
            raise TimeoutError(f"start barrier {folder}: fewer than {n} processes arrived in {timeout:.0f} s")
        time.sleep(0.01)


def barrier() -> None:
    if dist_env()[1] > 1:
        import torch.distributed as dist

        dist.barrier()


def all_max(value: float, device: torch.device) -> float:
    if dist_env()[1] == 1:
        return value
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def peak_memory(device: torch.device) -> tuple[int | None, str | None]:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device)), "cuda"
    if sys.platform.startswith("linux"):
        # ru_maxrss is KiB on Linux: the whole process, torch's own footprint included.
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, "rss"
    return None, None


def device_facts(device: torch.device) -> dict:
    facts = {
        "device": str(device),
        "gpu_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "gpu_memory_bytes": int(torch.cuda.get_device_properties(device).total_memory) if device.type == "cuda" else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if device.type == "cuda" else None,
        "host": platform.node(),
    }
    return facts


def result(job: str, args: argparse.Namespace, device: torch.device, *, seconds: float, units_per_rank: float,
           unit: str, extra: dict | None = None, steps: int | None = None) -> dict:
    """The JSON record: throughput counts the units of every rank over the slowest rank's time.
    `steps`: the timed steps this process ran, when not args.steps (a resumed or stopped run)."""
    _, world, _, nodes = dist_env()
    units = units_per_rank * world
    mem, source = peak_memory(device)
    record = {
        "job": job,
        "status": "ok",
        **device_facts(device),
        "steps": args.steps if steps is None else steps,
        "seconds": seconds,
        "units": units,
        "unit": unit,
        "throughput": units / seconds if seconds > 0 else None,
        "seconds_per_unit": seconds / units if units else None,
        "peak_memory_bytes": mem,
        "memory_source": source,
        "memory_fraction": args.memory_fraction,
        "world_size": world,
        "nodes": nodes,
        "quick": bool(args.quick),
    }
    record.update(extra or {})
    return record


def emit(record: dict, as_json: bool) -> None:
    """Print the record once (rank 0 only), then leave the process group."""
    rank, world, _, _ = dist_env()
    if rank == 0:
        if as_json:
            print(json.dumps(record, sort_keys=True), flush=True)
        else:
            print(
                f"{record['job']}: {record['throughput']:.3f} {record['unit']}/s on {record['device']}"
                f" x{record['world_size']} ({record['steps']} steps in {record['seconds']:.2f} s;"
                f" peak memory {record['peak_memory_bytes']} bytes [{record['memory_source']}])",
                flush=True,
            )
    if world > 1:
        import torch.distributed as dist

        dist.destroy_process_group()


def fail(args: argparse.Namespace, message: str, code: int, **extra: object) -> None:
    """Refuse cleanly: one line (JSON with status when --json) and a distinct exit code."""
    spec = os.environ.get("GPUPLAN_START_BARRIER")
    if spec:  # let the processes waiting for this one go on without it
        folder = spec.rpartition(":")[0]
        os.makedirs(folder, exist_ok=True)
        open(os.path.join(folder, f"ready.{os.getpid()}"), "w").close()
    if getattr(args, "json", False):
        print(json.dumps({"status": "refused" if code == EXIT_NO_FIT else "error", "reason": message, **extra}),
              flush=True)
    else:
        print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


FEED_MIN_IMAGES = 2048  # enough images for a CPU-time figure well above the clock's resolution


CIFAR_FEED_RECIPES = {
    "torchvision": "CIFAR-10 training pipeline from raw uint8: pad 4, random 32x32 crop, random flip, normalise,"
                   " stack; one thread, thread CPU clock",
    "tf-tutorial": "TensorFlow's CIFAR-10 tutorial pipeline (cifar10_input.distorted_inputs) in torch ops: uint8 to"
                   " float HWC, random 24x24 crop, random flip, random brightness (63) and contrast (0.2-1.8),"
                   " per-image standardisation, stack; one thread, thread CPU clock",
}


CIFAR_RECORD_BYTES = 1 + 3 * 32 * 32  # CIFAR-10's binary version: a label byte, then the 32x32 image's R, G, B planes
CIFAR_FILE_RECORDS = 10_000  # as many as one of its data_batch_N.bin files holds


def _cifar_binary_file(path: str, records: int, seed: int) -> None:
    """Write `records` CIFAR-10 binary records of random labels and pixels (the format, not the data)."""
    import random

    rng = random.Random(seed)
    with open(path, "wb") as f:
        for _ in range(records):
            f.write(bytes([rng.randrange(10)]) + rng.randbytes(CIFAR_RECORD_BYTES - 1))


def cifar_feed(images: int, seed: int = 0, recipe: str = "torchvision") -> dict:
    """Run a CIFAR-10 training input pipeline alone on this process's CPU and measure its CPU time
    and the bytes it reads.

    CIFAR-10's binary version is fixed-length records of raw uint8 bytes, so its pipeline is read
    one record (as TensorFlow's FixedLengthRecordReader does), the per-image distortions and a
    stack into batches of 128 (CIFAR_FEED_RECIPES says which). The records come from a file
    written first in that format (random pixels), read in a loop; the bytes are counted as they
    are read. Each image is handled on its own, as a data-loading worker does. One thread, timed
    with this thread's CPU clock: the CPU seconds one worker spends per image, whatever the GPU does."""
    import tempfile

    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(seed)
    mean = torch.tensor([0.4914, 0.4822, 0.4465]).view(3, 1, 1)
    std = torch.tensor([0.2470, 0.2435, 0.2616]).view(3, 1, 1)

    def torchvision_recipe(img: torch.Tensor) -> torch.Tensor:
        padded = torch.nn.functional.pad(img, (4, 4, 4, 4))
        y, x = (int(v) for v in torch.randint(0, 9, (2,), generator=gen))
        crop = padded[:, y:y + 32, x:x + 32]
        if bool(torch.rand(1, generator=gen) < 0.5):
            crop = crop.flip(2)
        return (crop.float() / 255 - mean) / std

    def tf_tutorial_recipe(img: torch.Tensor) -> torch.Tensor:
        hwc = img.permute(1, 2, 0).float()
        y, x = (int(v) for v in torch.randint(0, 9, (2,), generator=gen))
        crop = hwc[y:y + 24, x:x + 24, :]
        if bool(torch.rand(1, generator=gen) < 0.5):
            crop = crop.flip(1)
        crop = crop + (torch.rand(1, generator=gen) * 126 - 63)
        channel_mean = crop.mean(dim=(0, 1), keepdim=True)
        crop = (crop - channel_mean) * (0.2 + torch.rand(1, generator=gen) * 1.6) + channel_mean
        return (crop - crop.mean()) / torch.clamp(crop.std(), min=1 / crop.numel() ** 0.5)

    one = tf_tutorial_recipe if recipe == "tf-tutorial" else torchvision_recipe
    batch = 128
    with tempfile.TemporaryDirectory(prefix="gpuplan-feed-") as folder:
        path = os.path.join(folder, "data_batch_1.bin")
        _cifar_binary_file(path, min(images, CIFAR_FILE_RECORDS), seed)
        read = 0
        with open(path, "rb", buffering=0) as f:

            def record() -> torch.Tensor:
                nonlocal read
                data = f.read(CIFAR_RECORD_BYTES)
                if len(data) < CIFAR_RECORD_BYTES:  # the file's end: start it again, as another epoch would
                    f.seek(0)
                    data = f.read(CIFAR_RECORD_BYTES)
                read += len(data)
                return torch.frombuffer(bytearray(data[1:]), dtype=torch.uint8).view(3, 32, 32)

            start = time.thread_time()
            done = 0
            while done < images:
                torch.stack([one(record()) for _ in range(batch)])
                done += batch
            cpu = time.thread_time() - start
    return {"feed_cpu_seconds": cpu, "feed_images": done, "feed_cpu_seconds_per_image": cpu / done,
            "feed_bytes": read, "feed_bytes_per_image": read / done,
            "feed": f"{CIFAR_FEED_RECIPES[recipe]}; records read one at a time from a CIFAR-10 binary-format file"}


def classifier_training(job: str, model: torch.nn.Module, args: argparse.Namespace, device: torch.device, *,
                        image_size: int, classes: int, batch_size: int, steps_per_epoch: int) -> tuple[dict, Checkpoints]:
    """Train `model` on one synthetic batch per step (SGD, cross-entropy); DDP under torchrun.
    The record, and the checkpoints for `finish`."""
    model = model.to(device).to(memory_format=torch.channels_last if device.type == "cuda" else torch.contiguous_format)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    checkpoints = Checkpoints(job, args, {"model": model, "optimizer": opt}, device, steps_per_epoch)
    world = dist_env()[1]
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(batch_size, 3, image_size, image_size, device=device)
    y = torch.randint(0, classes, (batch_size,), device=device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    seconds = timed(step, args, device, checkpoints)
    record = result(job, args, device, seconds=seconds, units_per_rank=batch_size * checkpoints.steps_run,
                    unit="images", steps=checkpoints.steps_run,
                    extra={"batch_size": batch_size, "image_size": image_size, "grad_bytes": grad_bytes,
                           "epochs": args.epochs, "steps_per_epoch": steps_per_epoch})
    return record, checkpoints
