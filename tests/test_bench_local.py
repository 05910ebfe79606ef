"""`gpuplan bench --local --quick` end to end on this CPU: real job processes, a real profile file."""

from __future__ import annotations

import pytest

from gpuplan.planning import profiles

pytestmark = pytest.mark.torch
pytest.importorskip("torch")


def test_bench_local_quick_writes_a_cpu_profile_with_provenance(cli, gpuplan_home, monkeypatch):
    from gpuplan.measuring import bench

    monkeypatch.setattr(bench.shutil, "which", lambda name: None)  # this machine's answer, made explicit
    out = gpuplan_home / "colorize.json"
    r = cli("bench", "colorize", "--local", "--quick", "--gpus", "2", "--max-pack", "1", "--out", str(out))
    assert r.code == 0, r.err
    prof = profiles.load_profile(out)
    assert (prof.workload, prof.unit, prof.reference_gpu) == ("colorize", "epoch", "cpu")
    assert prof.seconds_per_unit > 0 and prof.memory_peak_gib is None  # RSS is not GPU memory
    assert prof.memory_need_gib is None  # a CPU enforces no memory cap: nothing to search
    assert prof.fixed_seconds_per_job > 0  # interpreter, torch import, model build: process wall - timed steps
    assert set(prof.colocation_slowdown) == {1, 2} and prof.colocation_slowdown[2] > 0
    assert prof.packing_fits == {1: True}  # --max-pack 1; packing itself: test_bench_profiles.py
    assert prof.dp_scaling == ()  # colorize is one job per GPU, as in report A
    p = prof.provenance
    assert p.quick and p.device == "cpu" and p.source == "gpuplan bench" and p.torch.startswith("2.")
    assert "bench colorize --local --quick" in p.command and "tiny shapes" in p.notes
    assert "quick CPU run" in r.out and str(out) in r.out.replace("\n", "")


def test_bench_local_quick_measures_the_cpu_need_and_the_estimate_names_it_as_measured(cli, gpuplan_home, monkeypatch):
    import json

    from gpuplan.measuring import bench

    monkeypatch.setattr(bench.shutil, "which", lambda name: None)
    out = gpuplan_home / "vgg.yaml"
    r = cli("bench", "vgg_cifar", "--local", "--quick", "--gpus", "1", "--max-pack", "1", "--out", str(out))
    assert r.code == 0, r.err
    prof = profiles.load_profile(out)
    # CIFAR-10's crop, flip and normalise on this CPU: tens of microseconds per image, x 50,000 images per epoch
    assert prof.feed_cpu_seconds_per_unit is not None and 0 < prof.feed_cpu_seconds_per_unit < 100
    assert "pad 4, random 32x32 crop" in prof.feed_how and "feed" not in prof.unmeasured()
    assert "CPU need to feed:" in r.out
    # the bytes the pipeline read, counted: 3,073 per CIFAR-10 record (label + 32 x 32 x 3) x 50,000 images per epoch
    assert prof.feed_bytes_per_unit == 3073 * 50_000 and "bytes read to feed: 153,650,000 bytes per epoch" in r.out
    # a CPU run's GPU figures are not used for a GPU plan; its CPU need is
    r = cli("estimate", "--workload", "vgg-cifar10", "--profile", str(out), "--format", "json")
    assert r.code == 0, r.err
    assumptions = json.loads(r.out)["recommended"]["assumptions"]
    feed = [a for a in assumptions if a.startswith("feed limit:")]
    assert len(feed) == 1 and "CPU s per epoch to feed one job, measured (CIFAR-10 training pipeline" in feed[0]
    assert "; and 153.65 MB read per epoch, measured the same way" in feed[0]
    assert any(a.startswith("GPU figures of profile vgg_cifar") and "measured on a CPU" in a for a in assumptions)
