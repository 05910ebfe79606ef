"""Profile files and the bench arithmetic, with a scripted executor (no torch, no processes)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from gpuplan.errors import RemoteError, UsageError
from gpuplan.measuring import bench
from gpuplan.planning import profiles


def test_report_a_catalog_profile_gives_the_planner_its_figures():
    path = next(p for p in profiles.catalog_profiles() if p.name == "colorize-k80-report-a.yaml")
    over = profiles.load_profile(path).to_workload_overrides()
    assert over["reference_gpu"] == "K80" and over["unit"] == "epoch"
    assert over["seconds_per_unit"] == Decimal("7.2")  # 1000 epochs in about 2 hours
    assert over["colocation_slowdown"][4] == Decimal("1.25")  # 2.5 h instead of 2 h on NC24
    assert over["max_per_gpu"] == 1 and over["packing_efficiency"] == {1: Decimal(1)}  # two did not fit
    assert "field report A" in over["profile_source"]


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_profile_round_trips_through_yaml_and_json(tmp_path, suffix):
    prof = profiles.Profile(
        workload="resnet50", unit="image", reference_gpu="H100 SXM", seconds_per_unit=Decimal("0.000571"),
        provenance=profiles.Provenance(source="gpuplan bench", date="2026-11-22", host="n0", gpu="NVIDIA H100 80GB HBM3",
                                       driver="580.1", cuda="12.8", torch="2.13.0", command="gpuplan bench resnet50"),
        memory_peak_gib=Decimal("21.5"), gpu_memory_gib=Decimal(80), memory_need_gib=Decimal("6.25"),
        memory_need_fraction=Decimal("0.078125"), fixed_seconds_per_job=Decimal("17.2"),
        colocation_slowdown={1: Decimal(1), 8: Decimal("1.04")},
        packing_efficiency={1: Decimal(1), 2: Decimal("0.55")}, packing_fits={1: True, 2: True, 3: False},
        dp_scaling=(profiles.ScalingPoint(1, 1, Decimal(1), Decimal(1750)),
                    profiles.ScalingPoint(8, 1, Decimal("0.987"), Decimal(13818)),
                    profiles.ScalingPoint(8, 2, Decimal("0.61"), Decimal(8540))),
        feed_cpu_seconds_per_unit=Decimal("2.279435"), feed_how="CIFAR-10 pipeline, one thread",
        feed_bytes_per_unit=Decimal(153_650_000),
    )
    path = profiles.save_profile(prof, tmp_path / f"p{suffix}")
    assert profiles.load_profile(path) == prof
    over = prof.to_workload_overrides()
    assert over["max_per_gpu"] == 2 and over["packing_no_fit"] == [3]
    assert over["dp_efficiency"] == {(1, 1): Decimal(1), (8, 1): Decimal("0.987"), (8, 2): Decimal("0.61")}
    assert (over["memory_need_gib"], over["memory_peak_gib"], over["fixed_seconds_per_job"]) == \
        (Decimal("6.25"), Decimal("21.5"), Decimal("17.2"))
    assert prof.unmeasured() == () and over["feed_bytes_per_unit"] == Decimal(153_650_000)


def test_a_profile_from_before_the_memory_need_reads_its_peak_and_names_what_it_lacks(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("schema: 1\nworkload: colorize\nunit: epoch\nreference_gpu: H100 SXM\nseconds_per_unit: 0.187079\n"
                   "memory_per_job_gib: 65.858109\nprovenance: {source: gpuplan bench, date: '2026-11-22'}\n")
    prof = profiles.load_profile(old)
    assert prof.memory_peak_gib == Decimal("65.858109") and prof.memory_need_gib is None
    assert prof.unmeasured() == ("fixed_seconds_per_job", "memory_need_gib", "packing", "colocation_slowdown",
                                 "dp_scaling", "feed")


def test_profile_errors_name_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: 1\nworkload: x\nunit: image\nreference_gpu: T4\nprovenance: {source: s, date: '2026-01-01'}\n")
    with pytest.raises(UsageError, match="'seconds_per_unit' is missing"):
        profiles.load_profile(bad)
    bad.write_text(bad.read_text() + "seconds_per_unit: -3\n")
    with pytest.raises(UsageError, match="seconds_per_unit must be a positive number"):
        profiles.load_profile(bad)
    with pytest.raises(UsageError, match="not found; run `gpuplan bench"):
        profiles.load_profile(tmp_path / "missing.yaml")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(UsageError, match="not valid json"):
        profiles.load_profile(tmp_path / "broken.json")



def test_nvidia_smi_names_map_to_catalog_keys():
    rows = bench.parse_nvidia_smi("NVIDIA H100 80GB HBM3, 81559, 580.65.06\nNVIDIA H100 80GB HBM3, 81559, 580.65.06\n")
    assert rows == [("NVIDIA H100 80GB HBM3", 81559, "580.65.06")] * 2
    assert bench.catalog_gpu_key("NVIDIA H100 80GB HBM3") == "H100 SXM"
    assert bench.catalog_gpu_key("NVIDIA H100 NVL") == "H100 NVL"
    assert bench.catalog_gpu_key("Tesla K80") == "K80"
    assert bench.catalog_gpu_key("NVIDIA A100-SXM4-80GB") == "A100 80GB"
    assert bench.catalog_gpu_key("Tesla T4") == "T4"


class ScriptedExecutor(bench.Executor):
    """Answers each launch from a function of (batch size, argv, env); records every batch."""

    def __init__(self, answer, gpus=4, nodes=1):
        self.answer, self.gpus, self.nodes, self.python = answer, gpus, nodes, "py"
        self.batches = []

    def run_all(self, launches, timeout):
        self.batches.append(launches)
        return [self.answer(len(launches), launch) for launch in launches]

    def machine(self):
        return bench.Machine(self.gpus, "NVIDIA A100-SXM4-80GB", 81920, "570.1", "gpu-0")

    def private_address(self, node):
        return f"10.0.0.{node + 1}"

    def remove_dirs(self, dirs):
        self.removed = list(dirs)


def ok(spu: float, throughput: float = 100.0, mem: int = 8 * 2**30, timed: float = 0.5, wall: float | None = 2.25,
       ) -> bench.Outcome:
    rec = {"status": "ok", "seconds_per_unit": spu, "throughput": throughput, "peak_memory_bytes": mem,
           "memory_source": "cuda", "torch": "2.13.0", "cuda": "12.8", "seconds": timed}
    return bench.Outcome(0, "warming up\n" + json.dumps(rec) + "\n", "", wall)


def test_bench_arithmetic_for_colocation_packing_and_data_parallel():
    def answer(n, launch):
        argv = launch.argv
        if "torch.distributed.run" in argv:
            procs = int(argv[argv.index("--nnodes") + 1]) * int(argv[argv.index("--nproc-per-node") + 1])
            return ok(0.01, throughput=100.0 * procs * (0.9 if procs > 1 else 1))
        if "--memory-fraction" in argv and n == 1:  # the memory-need search: full speed from 10 % of the GPU
            fraction = float(argv[argv.index("--memory-fraction") + 1])
            if fraction < 0.06:
                return bench.Outcome(3, '{"status": "refused"}\n', "")
            return ok(0.01 if fraction >= 0.1 else 0.0112)  # 12 % slower: not full speed
        if "--memory-fraction" in argv:
            return ok(0.01 * n / 1.6) if n <= 2 else bench.Outcome(3, '{"status": "refused"}\n', "")
        return ok(0.01 * (1.1 if n == 4 else 1.05 if n == 2 else 1.0))

    ex = ScriptedExecutor(answer, gpus=4, nodes=2)
    prof = bench.measure(bench.BenchOptions("resnet50", max_pack=4, command="gpuplan bench resnet50 --cluster c"), ex)
    assert prof.reference_gpu == "A100 80GB" and prof.gpu_memory_gib == 80 and prof.memory_peak_gib == 8
    # the fixed cost of a job start: 2.25 s of process wall - 0.5 s of timed steps
    assert prof.fixed_seconds_per_job == Decimal("1.75")
    # bisection: 1/2, 1/4, 1/8 run at full speed; 1/16 and 3/32 are slower; 7/64 and 13/128 are not
    tried = [Decimal(b[0].argv[b[0].argv.index("--memory-fraction") + 1]) for b in ex.batches
             if len(b) == 1 and "--memory-fraction" in b[0].argv]
    assert tried == [Decimal(x) for x in ("0.5", "0.25", "0.125", "0.0625", "0.09375", "0.109375", "0.101562")]
    assert prof.memory_need_fraction == Decimal(13) / 128 and prof.memory_need_gib == Decimal(13) / 128 * 80
    assert prof.unit == "epoch" and prof.seconds_per_unit == Decimal("0.01") * 1_281_167  # s/image x ImageNet
    assert prof.colocation_slowdown == {1: 1, 2: Decimal("1.05"), 4: Decimal("1.1")}
    assert prof.packing_fits == {1: True, 2: True, 3: False}  # stopped at the first k that refused
    assert prof.packing_efficiency[2] == Decimal("0.8")
    assert [(s.gpus, s.nodes, s.efficiency) for s in prof.dp_scaling] == [
        (1, 1, 1), (2, 1, Decimal("0.9")), (4, 1, Decimal("0.9")), (8, 2, Decimal("0.9"))]
    # co-located jobs each see one GPU; packed ones share GPU 0 with a fixed share
    coloc4 = next(b for b in ex.batches if len(b) == 4 and "--memory-fraction" not in b[0].argv
                  and "torch.distributed.run" not in b[0].argv)
    assert sorted(dict(launch.env)["CUDA_VISIBLE_DEVICES"] for launch in coloc4) == ["0", "1", "2", "3"]
    assert len({dict(launch.env)["GPUPLAN_START_BARRIER"] for launch in coloc4}) == 1
    packed3 = next(b for b in ex.batches if len(b) == 3)
    assert all(launch.argv[launch.argv.index("--memory-fraction") + 1] == "0.333333" for launch in packed3)
    two_nodes = ex.batches[-1]
    assert [launch.node for launch in two_nodes] == [0, 1]
    assert all(launch.argv[launch.argv.index("--master-addr") + 1] == "10.0.0.1" for launch in two_nodes)
    assert [launch.argv[launch.argv.index("--node-rank") + 1] for launch in two_nodes] == ["0", "1"]
    assert len(ex.removed) == 4  # the start barriers of 2 co-location and 2 packing batches
    assert prof.provenance.driver == "570.1" and prof.provenance.quick is False
    # resnet50 trains on synthetic batches: no input pipeline of its own to time, and the profile says so
    assert prof.feed_cpu_seconds_per_unit is None and "feed" in prof.unmeasured()
    assert "CPU need to feed not measured" in prof.provenance.notes


def test_bench_turns_the_jobs_feed_cpu_time_per_image_into_cpu_seconds_per_epoch():
    def answer(n, launch):
        out = ok(0.0001)
        if "--measure-feed" in launch.argv:  # only the job alone runs its input pipeline
            rec = {**json.loads(out.stdout.splitlines()[1]), "feed_cpu_seconds_per_image": 4.5e-05, "feed": "crop, flip"}
            return bench.Outcome(0, json.dumps(rec) + "\n", "", 2.0)
        return out

    ex = ScriptedExecutor(answer, gpus=1, nodes=1)
    prof = bench.measure(bench.BenchOptions("vgg_cifar", max_pack=1), ex)
    assert sum("--measure-feed" in launch.argv for b in ex.batches for launch in b) == 1
    # 45 microseconds of CPU per image x 50,000 CIFAR-10 training images = 2.25 CPU s per epoch
    assert prof.feed_cpu_seconds_per_unit == Decimal("2.25") and prof.feed_how == "crop, flip"
    assert "feed" not in prof.unmeasured()


def test_bench_turns_the_bytes_the_pipeline_read_per_image_into_bytes_per_epoch(tmp_path):
    def answer(n, launch):
        out = ok(0.0001)
        if "--measure-feed" in launch.argv:
            rec = {**json.loads(out.stdout.splitlines()[1]), "feed_cpu_seconds_per_image": 4.5e-05, "feed": "crop, flip",
                   "feed_bytes_per_image": 3073.0}
            return bench.Outcome(0, json.dumps(rec) + "\n", "", 2.0)
        return out

    prof = bench.measure(bench.BenchOptions("vgg_cifar", max_pack=1), ScriptedExecutor(answer, gpus=1, nodes=1))
    # 3,073 bytes read per image x 50,000 CIFAR-10 training images = 153,650,000 bytes per epoch
    assert prof.feed_bytes_per_unit == Decimal(153_650_000)
    saved = profiles.load_profile(profiles.save_profile(prof, tmp_path / "p.yaml"))
    assert saved.feed_bytes_per_unit == Decimal(153_650_000)


def test_estimate_with_a_profile_applies_its_bytes_read_per_unit(cli, tmp_path):
    gpu = tmp_path / "v100.yaml"
    # a V100 profile: 1 s per epoch alone, 2 CPU s and 625 MB read per epoch by its input pipeline
    gpu.write_text("schema: 1\nworkload: vgg_cifar\nunit: epoch\nreference_gpu: V100\nseconds_per_unit: 1\n"
                   "feed: {cpu_seconds_per_unit: 2, bytes_per_unit: 625000000, how: records read}\n"
                   "provenance: {source: gpuplan bench, date: '2026-11-24'}\n")
    r = cli("estimate", "--workload", "vgg-cifar10", "--profile", str(gpu), "--provider", "aws", "--region", "us-east-1",
            "--all", "--format", "json")
    assert r.code == 0, r.err
    plans = {p["instance_type"]: p for p in json.loads(r.out)["plans"] if p["count"] == 1 and p["feasible"]}
    p3 = plans["p3.2xlarge"]
    # vCPUs: 8 / 2 CPU s = 4 epochs/s; network: 2.5 Gbit/s sustained = 312.5 MB/s / 625 MB = 0.5 epochs/s, less
    # than the V100's 1: 4 runs of 30 epochs one after another on its one GPU take 4 x 60 s = 240 s, not 120 s
    assert p3["machine_groups"][0]["jobs_s_max"] == 240
    feed = [a for a in p3["assumptions"] if a.startswith("feed limit:")]
    assert len(feed) == 1 and feed[0].endswith(
        "; and 625 MB read per epoch, measured the same way: no faster than its share of object storage over the"
        " machine's network (sustained rate / GPUs) feeds it")
    assert any(a.startswith("speed on V100: 0.5x V100 (feed-bound by network: 312.5 MB/s per GPU") and
               "(CPU need and bytes read measured: records read, profile vgg_cifar" in a for a in p3["assumptions"])


def test_bench_reports_a_failed_measurement_in_one_line():
    ex = ScriptedExecutor(lambda n, launch: bench.Outcome(1, "", "Traceback...\nRuntimeError: CUDA error: no kernel image"))
    with pytest.raises(RemoteError, match=r"the job alone failed \(exit 1\): RuntimeError: CUDA error"):
        bench.measure(bench.BenchOptions("colorize"), ex)


def test_bench_cli_rejects_bad_input_in_one_line(cli):
    r = cli("bench", "colorize")
    assert r.code == 2 and "--local or --cluster" in r.err and len(r.err.strip().splitlines()) == 1
    r = cli("bench", "mnist", "--local")
    assert r.code == 2 and "unknown workload 'mnist'" in r.err
    r = cli("bench", "colorize", "--local", "--out", "p.txt")
    assert r.code == 2 and ".yaml, .yml or .json" in r.err


def test_bench_without_gpu_needs_quick(cli, monkeypatch):
    monkeypatch.setattr(bench.shutil, "which", lambda name: None)  # no nvidia-smi: a CPU-only machine
    r = cli("bench", "colorize", "--local")
    assert r.code == 2 and "--quick" in r.err


def test_a_cpu_profile_without_a_cpu_need_gives_a_gpu_plan_nothing(tmp_path):
    from gpuplan.planning import workloads

    cpu = tmp_path / "cpu.yaml"
    cpu.write_text("schema: 1\nworkload: colorize\nunit: epoch\nreference_gpu: cpu\nseconds_per_unit: 90\n"
                   "provenance: {source: gpuplan bench, date: '2026-11-24', quick: true}\n")
    with pytest.raises(UsageError, match="measured on a CPU .* gives no CPU need to feed: nothing in it applies"):
        workloads.apply_profile(workloads.load("colorize-hd"), cpu)
    cpu.write_text(cpu.read_text() + "feed: {cpu_seconds_per_unit: 3.5, how: decode}\n")
    work = workloads.apply_profile(workloads.load("colorize-hd"), cpu)
    # the CPU need is taken; the GPU figures stay the workload's own (7.2 s per epoch on a K80 half)
    assert work.feed_cpu_seconds_per_unit == Decimal("3.5") and work.seconds_per_unit == Decimal("7.2")
    assert work.feed_source.startswith("CPU need measured: decode, profile colorize")
