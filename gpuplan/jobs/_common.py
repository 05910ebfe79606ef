"""What every reference job shares: options, device choice, timing, memory and the JSON line.

Each job is runnable as `python -m gpuplan.jobs.<name> --json ...` and prints exactly one JSON
line (from rank 0 when launched by torchrun) with these keys:

    job, device, gpu_name, torch, cuda, steps, seconds, units, unit, throughput
    (units per second over all ranks), seconds_per_unit, peak_memory_bytes, memory_source
    ("cuda" | "rss" | null), world_size, nodes, quick, status ("ok")

torch is imported here at module load: this package is only ever imported by a job process,
never by the CLI's start-up path.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from collections.abc import Callable

import torch

EXIT_NO_FIT = 3  # a process that does not fit its memory share refuses with this code


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


def timed(step: Callable[[], None], args: argparse.Namespace, device: torch.device) -> float:
    """Run warmup then timed steps; seconds of the timed part (max over ranks under torchrun)."""
    for _ in range(args.warmup):
        step()
    sync(device)
    barrier()
    start_together()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync(device)
    seconds = time.perf_counter() - t0
    return all_max(seconds, device)


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
           unit: str, extra: dict | None = None) -> dict:
    """The JSON record: throughput counts the units of every rank over the slowest rank's time."""
    _, world, _, nodes = dist_env()
    units = units_per_rank * world
    mem, source = peak_memory(device)
    record = {
        "job": job,
        "status": "ok",
        **device_facts(device),
        "steps": args.steps,
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
                        image_size: int, classes: int, batch_size: int) -> dict:
    """Train `model` on one synthetic batch per step (SGD, cross-entropy); DDP under torchrun."""
    model = model.to(device).to(memory_format=torch.channels_last if device.type == "cuda" else torch.contiguous_format)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    world = dist_env()[1]
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(batch_size, 3, image_size, image_size, device=device)
    y = torch.randint(0, classes, (batch_size,), device=device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    seconds = timed(step, args, device)
    return result(job, args, device, seconds=seconds, units_per_rank=batch_size * args.steps, unit="images",
                  extra={"batch_size": batch_size, "image_size": image_size, "grad_bytes": grad_bytes})
