"""The reference jobs on CPU with tiny shapes: each prints one JSON line with honest figures."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")


def run_job(*argv: str, expect: int = 0) -> dict:
    proc = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, timeout=120)
    assert proc.returncode == expect, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout
    return json.loads(lines[0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_resnet50_has_torchvisions_parameter_count():
    from gpuplan.jobs.resnet50 import ResNet50

    # torchvision resnet50 (v1.5): 25,557,032 parameters -> the 102.2 MB of fp32 gradients in report B.
    assert sum(p.numel() for p in ResNet50().parameters()) == 25_557_032


def test_resnet50_quick_reports_images_per_second():
    rec = run_job("gpuplan.jobs.resnet50", "--json", "--device", "cpu", "--batch-size", "2", "--image-size", "32",
                  "--classes", "10", "--steps", "2", "--warmup", "1")
    assert rec["job"] == "resnet50" and rec["status"] == "ok"
    assert rec["device"] == "cpu" and rec["memory_source"] == "rss" and rec["peak_memory_bytes"] > 10 * 2**20
    assert rec["units"] == 4 and rec["unit"] == "images" and rec["world_size"] == 1
    assert rec["throughput"] == pytest.approx(rec["units"] / rec["seconds"])
    assert rec["torch"] == torch.__version__ and rec["cuda"] is None


def test_vgg_cifar_quick_uses_32px_inputs():
    rec = run_job("gpuplan.jobs.vgg_cifar", "--json", "--quick", "--steps", "3", "--warmup", "0")
    assert rec["image_size"] == 32 and rec["batch_size"] == 8 and rec["units"] == 24
    assert rec["quick"] is True and rec["seconds"] > 0
    assert "feed_cpu_seconds_per_image" not in rec  # the input pipeline runs only when asked


def test_vgg_cifar_times_tensorflows_tutorial_pipeline_when_asked():
    rec = run_job("gpuplan.jobs.vgg_cifar", "--json", "--quick", "--steps", "1", "--warmup", "0", "--device", "cpu",
                  "--measure-feed", "--feed-recipe", "tf-tutorial")
    # at least 2,048 images whatever the steps, in batches of 128; a positive CPU time per image
    assert rec["feed_images"] == 2048 and rec["feed_cpu_seconds_per_image"] > 0
    assert rec["feed_cpu_seconds"] == pytest.approx(rec["feed_cpu_seconds_per_image"] * 2048)
    assert rec["feed"].startswith("TensorFlow's CIFAR-10 tutorial pipeline (cifar10_input.distorted_inputs)")
    # the bytes it read, counted as it read them: CIFAR-10's binary records, a label byte and 32 x 32 x 3 pixel bytes
    assert rec["feed_bytes"] == 2048 * (1 + 32 * 32 * 3) and rec["feed_bytes_per_image"] == 3073


def test_colorize_counts_three_frames_per_step_and_epochs():
    rec = run_job("gpuplan.jobs.colorize", "--json", "--device", "cpu", "--height", "36", "--width", "64",
                  "--ngf", "4", "--levels", "4", "--epochs", "2", "--steps", "2", "--warmup", "1")
    assert (rec["height"], rec["width"]) == (36, 64)
    assert rec["steps"] == 4 and rec["units"] == 12 and rec["unit"] == "frames"
    assert rec["seconds_per_epoch"] == pytest.approx(rec["seconds"] / 2)


def test_colorize_generator_keeps_the_frame_shape_on_odd_hd_sizes():
    from gpuplan.jobs.colorize import UNetGenerator

    gen = UNetGenerator(3, 9, ngf=2, levels=7)
    out = gen(torch.zeros(1, 3, 90, 160))  # 720x1280 / 8: not a multiple of 2**7, padded then cropped
    assert tuple(out.shape) == (1, 9, 90, 160)


def test_detect_streams_packs_two_streams_with_half_memory_each():
    rec = run_job("gpuplan.jobs.detect_streams", "--json", "--quick", "--streams", "2", "--steps", "2",
                  "--warmup", "1", "--threads", "1", "--alone-seconds-per-frame", "0.001")
    assert rec["fit"] is True and rec["streams_ok"] == 2 and rec["memory_fraction"] == 0.5
    assert len({s["stream_pid"] for s in rec["per_stream"]}) == 2  # two processes, not two threads
    assert rec["efficiency_per_stream"] == pytest.approx(0.001 / rec["seconds_per_frame"])


def test_detect_streams_refuses_cleanly_when_a_share_is_too_small():
    from gpuplan.jobs.detect_streams import Detector, estimated_need_bytes

    need = estimated_need_bytes(Detector(4, 4), 64, 96)
    assert 1_000_000 < need < 10_000_000  # weights + input + the two largest activations of the tiny detector
    device_memory = str(int(need * 1.5))  # one stream would fit, two halves do not
    packed = run_job("gpuplan.jobs.detect_streams", "--json", "--quick", "--streams", "2", "--steps", "1",
                     "--warmup", "0", "--device-memory", device_memory, expect=3)
    assert packed["fit"] is False and packed["status"] == "refused" and packed["streams_ok"] == 0
    assert all(s["exit_code"] == 3 and s["need_bytes"] == need for s in packed["per_stream"])


def test_resnet50_data_parallel_over_gloo_with_torchrun():
    port = free_port()
    rec = run_job("torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                  "--master-port", str(port), "-m", "gpuplan.jobs.resnet50", "--json", "--device", "cpu",
                  "--threads", "1", "--batch-size", "2", "--image-size", "32", "--classes", "10",
                  "--steps", "2", "--warmup", "1")
    assert rec["world_size"] == 2 and rec["nodes"] == 1
    assert rec["units"] == 8  # 2 ranks x batch 2 x 2 steps, counted once by rank 0
