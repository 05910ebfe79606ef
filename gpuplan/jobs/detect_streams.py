"""A YOLO-like convolutional detector over FHD frames, k streams (processes) per GPU.

Field report C: each stream is its own process with a fixed share of GPU memory
(torch.cuda.set_per_process_memory_fraction, like TensorFlow's per_process_gpu_memory_fraction).
A stream that does not fit its share refuses to start (exit code 3, JSON status "refused")
and harms no other; grow-on-demand packing is deliberately not offered.

    python -m gpuplan.jobs.detect_streams --json --streams 4 --frames 50
    python -m gpuplan.jobs.detect_streams --json --worker --memory-fraction 0.25   # one stream

The parent starts k workers at once (each with fraction 1/k unless --memory-fraction is given),
waits for all, and prints one JSON line: per-stream seconds per frame, how many fit, and
efficiency_per_stream = (seconds per frame alone) / (seconds per frame packed) when
--alone-seconds-per-frame is given.

On a CPU there is no memory share to enforce; `--device-memory BYTES` stands in for the GPU's
size so the fit decision (estimated need vs fraction x BYTES) can be exercised in tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from gpuplan.jobs import _common


def _cbl(cin: int, cout: int, stride: int = 1, k: int = 3) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False), nn.BatchNorm2d(cout),
                         nn.LeakyReLU(0.1, inplace=True))


class Residual(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.body = nn.Sequential(_cbl(c, c // 2, k=1), _cbl(c // 2, c))

    def forward(self, x):
        return x + self.body(x)


class Detector(nn.Module):
    """Darknet-style backbone (5 stride-2 stages with residual blocks) and three heads at
    strides 8/16/32, each predicting 3 anchors x (4 box + 1 objectness + classes)."""

    def __init__(self, classes: int = 80, base: int = 32, depth: tuple[int, ...] = (1, 2, 8, 8, 4)) -> None:
        super().__init__()
        self.stem = _cbl(3, base)
        stages = []
        c = base
        for n in depth:
            stages.append(nn.Sequential(_cbl(c, c * 2, stride=2), *[Residual(c * 2) for _ in range(n)]))
            c *= 2
        self.stages = nn.ModuleList(stages)
        out = 3 * (5 + classes)
        self.heads = nn.ModuleList([nn.Conv2d(c // 4, out, 1), nn.Conv2d(c // 2, out, 1), nn.Conv2d(c, out, 1)])

    def forward(self, x):
        h, w = x.shape[-2:]
        x = F.pad(x, (0, (-w) % 32, 0, (-h) % 32))
        x = self.stem(x)
        feats = []
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
        return [head(f) for head, f in zip(self.heads, feats[-3:])]


def estimated_need_bytes(model: nn.Module, height: int, width: int) -> int:
    """Inference memory estimate: weights + input + the two largest live activations,
    measured by one forward pass on the meta device (no real memory touched)."""
    sizes: list[int] = []
    hooks = [m.register_forward_hook(lambda _m, _i, o: sizes.append(o.numel() * o.element_size()))
             for m in model.modules() if isinstance(m, (nn.Conv2d,))]
    try:
        meta = model.to("meta")
        with torch.no_grad():
            meta(torch.empty(1, 3, height, width, device="meta"))
    finally:
        for hk in hooks:
            hk.remove()
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    top = sorted(sizes, reverse=True)[:2]
    return weights + 3 * height * width * 4 + sum(top)


def worker(args) -> None:
    device = _common.setup(args)
    model = Detector(args.classes, args.base)
    if device.type == "cpu" and args.device_memory:
        fraction = args.memory_fraction or 1.0
        budget = int(fraction * args.device_memory)
        need = estimated_need_bytes(Detector(args.classes, args.base), args.height, args.width)
        if need > budget:
            _common.fail(args, f"stream needs about {need} bytes but its share is {budget} bytes"
                         f" ({fraction:g} of {args.device_memory}); run fewer streams per GPU", _common.EXIT_NO_FIT,
                         need_bytes=need, budget_bytes=budget)
    model = model.to(device).eval()
    frame = torch.rand(1, 3, args.height, args.width, device=device)

    def step() -> None:
        with torch.no_grad():
            model(frame)

    try:
        seconds = _common.timed(step, args, device)
    except torch.cuda.OutOfMemoryError:
        _common.fail(args, f"stream does not fit its share ({args.memory_fraction or 1:g} of the GPU's memory);"
                     " run fewer streams per GPU", _common.EXIT_NO_FIT)
    record = _common.result("detect_streams", args, device, seconds=seconds, units_per_rank=args.steps, unit="frames",
                            extra={"height": args.height, "width": args.width, "stream_pid": os.getpid()})
    _common.emit(record, args.json)


def parent(args, argv: list[str]) -> None:
    k = args.streams
    fraction = args.memory_fraction if args.memory_fraction is not None else 1.0 / k
    passthrough = _strip(argv, {"--streams", "--memory-fraction", "--alone-seconds-per-frame"})
    cmd = [sys.executable, "-m", "gpuplan.jobs.detect_streams", *passthrough, "--worker", "--json",
           "--memory-fraction", repr(fraction)]
    t0 = time.perf_counter()
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(k)]
    streams = []
    for i, proc in enumerate(procs):
        out, err = proc.communicate()
        line = (out.strip().splitlines() or ["{}"])[-1]
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            rec = {"status": "error", "reason": (err.strip().splitlines() or ["no output"])[-1]}
        rec["stream"] = i
        rec["exit_code"] = proc.returncode
        streams.append(rec)
    wall = time.perf_counter() - t0
    ok = [s for s in streams if s.get("status") == "ok"]
    spf = [s["seconds_per_unit"] for s in ok]
    mean_spf = sum(spf) / len(spf) if spf else None
    summary = {
        "job": "detect_streams",
        "status": "ok" if len(ok) == k else "refused" if any(s.get("status") == "refused" for s in streams) else "error",
        "streams": k,
        "memory_fraction": fraction,
        "fit": len(ok) == k,
        "streams_ok": len(ok),
        "seconds_per_frame": mean_spf,
        "seconds_per_frame_per_stream": [s.get("seconds_per_unit") for s in streams],
        "throughput": sum(s["throughput"] for s in ok) if ok else None,
        "unit": "frames",
        "wall_seconds": wall,
        "efficiency_per_stream": (args.alone_seconds_per_frame / mean_spf)
        if (args.alone_seconds_per_frame and mean_spf) else None,
        "per_stream": streams,
        "device": ok[0]["device"] if ok else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "quick": bool(args.quick),
    }
    if args.json:
        print(json.dumps(summary, sort_keys=True), flush=True)
    else:
        print(f"detect_streams: {len(ok)}/{k} streams ran at fraction {fraction:.3g};"
              f" {mean_spf} s/frame per stream", flush=True)
    sys.exit(0 if summary["fit"] else _common.EXIT_NO_FIT)


def _strip(argv: list[str], options: set[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in options:
            skip = "=" not in a
            continue
        if a in ("--json", "--worker"):
            continue
        out.append(a)
    return out


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = _common.base_parser("detect_streams", "YOLO-like detection over FHD frames, k processes per GPU")
    p.add_argument("--streams", type=int, default=1, help="processes sharing this GPU")
    p.add_argument("--worker", action="store_true", help="be one stream (the parent starts these)")
    p.add_argument("--height", type=int, default=1080)
    p.add_argument("--width", type=int, default=1920)
    p.add_argument("--base", type=int, default=32, help="backbone base channels")
    p.add_argument("--classes", type=int, default=80)
    p.add_argument("--device-memory", type=int, default=None,
                   help="CPU only: bytes that stand in for the GPU's memory in the fit check")
    p.add_argument("--alone-seconds-per-frame", type=float, default=None,
                   help="seconds per frame of one stream alone, for the efficiency figure")
    p.set_defaults(steps=20)
    args = p.parse_args(argv)
    _common.check_args(p, args)
    if args.streams < 1:
        p.error("--streams must be at least 1")
    if args.quick:
        args.height, args.width, args.base, args.classes = 64, 96, 4, 4
    if args.worker:
        worker(args)
    else:
        parent(args, argv)


if __name__ == "__main__":
    main()
