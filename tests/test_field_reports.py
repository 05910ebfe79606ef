"""The field reports' other shapes, reproduced from their inputs (shared/domain.md B, C, D):
data-parallel communication, packing with a remainder, streams, monthly servers, image limits."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpuplan.market import catalog
from gpuplan.planning import model, optimizer, workloads
from gpuplan.planning.model import Setting
from gpuplan.planning.outcomes import Code
from support import planner as sp


def _near(value, target, share="0.10") -> bool:
    return abs(Decimal(value) - Decimal(target)) <= Decimal(target) * Decimal(share)


# --- report B: data-parallel ResNet-50 over 10 GbE ------------------------------------------------

@pytest.fixture(scope="module")
def report_b():
    """The built-in resnet50 (report B's L, 32 per process) on 2017 Koukaryoku 4x Pascal TITAN X nodes."""
    cat = catalog.load("2017-08")
    work = workloads.load("resnet50")
    node = cat.resolve("koukaryoku-pascal")
    speed, _ = model.speed(work, node, cat.gpus)
    return work, node, cat.link(node), speed


def test_report_b_allreduce_times_come_out_of_the_model(report_b):
    """Inputs: L, the measured point-to-point 8.5 Gibit/s (report B: 8-9), and the in-node pass
    bandwidth fitted on the 0.15 s at 2 nodes ONLY (catalog/links.csv, docs/model.md). Checked
    here: the 0.22 s at 4 nodes, which nothing was fitted on."""
    work, node, link, _ = report_b
    dp = work.data_parallel
    assert dp.gradient_bytes == 102_228_384  # report B's L
    assert link.inter_node_gbps * link.inter_node_effective == Decimal("9.127")  # 8.5 x 2^30 bit/s, in Gbit/s
    two, why = model.allreduce_seconds(dp.gradient_bytes, 4, 2, node, link)
    four, _ = model.allreduce_seconds(dp.gradient_bytes, 4, 4, node, link)
    # 2 nodes: ring 102.228 MB at 9.127 Gbit/s = 0.0896 s + 4 passes of L at 54 Gbit/s = 0.0606 s -> 0.1502 s (fitted)
    assert _near(two, "0.15", "0.01")
    # 4 nodes: 153.343 MB = 0.1344 s + 0.0606 s = 0.1950 s: the report's ~0.22 s, 11 % under (the check;
    # why no model of this form reaches it with the report's other figures: the next test)
    assert _near(four, "0.22", "0.12") and four < Decimal("0.22")
    assert "ring allreduce over 2 machines: 2L(p-1)/p = 102.228 MB at 10 Gbit/s x 0.9127 (10GbE private network) = 0.09 s" in why
    assert "4 in-node passes of L (reduce, device-to-host, host-to-device, broadcast) at 54 Gbit/s = 0.061 s" in why


def test_report_b_4_nodes_come_as_near_0_22_s_as_a_volume_model_can_with_the_reports_other_figures(report_b):
    """benchmarks/report_b_bounds.py: in any model a + k x 2L(p-1)/p, 0.15 s at 2 nodes and 1.4x
    for 1 -> 2 nodes cap 4 nodes at 0.1975 s at this compute. The model's 0.195 s is within 1.5 %
    of that cap; a change of rates that drifted from it (or broke 0.15 s or 1.4x) fails here."""
    from support import benchmarks

    bounds = benchmarks.load("report_b_bounds")
    work, node, link, speed = report_b
    dp = work.data_parallel
    compute = model.step_compute_seconds(work, speed)
    four, _ = model.allreduce_seconds(dp.gradient_bytes, 4, 4, node, link)
    cap = bounds.most_at_4_nodes(compute)
    assert cap.quantize(Decimal("0.0001")) == Decimal("0.1975")
    assert cap * Decimal("0.985") <= four <= cap
    # and no such model gives both 0.15 s and 0.22 s with 1.4x, for any compute (4) allows
    assert bounds.best_ratio_with_both(bounds.T4) < Decimal("1.25")


def test_report_b_scaling_per_doubling_comes_out_of_the_model(report_b):
    work, node, link, speed = report_b
    up = {n: model.dp_speedup(work, node, n, speed, link)[0] for n in (1, 2, 4)}
    # report B: every doubling of nodes (4 -> 8 -> 16 processes) a little over 1.5x, never 2x.
    # 1 node pays the same in-node passes (0.061 s) as every node: 2.934x -> 4.209x -> 7.376x one GPU
    assert Decimal("1.4") <= up[2] / up[1] < 2 and Decimal("1.4") <= up[4] / up[2] < 2
    assert (up[1], up[2], up[4]) == (Decimal("2.9342"), Decimal("4.2093"), Decimal("7.3760"))
    # and at 16 processes the allreduce took over half of each iteration (0.195 s of 0.362 s)
    dp = work.data_parallel
    compute = model.step_compute_seconds(work, speed)
    allreduce, _ = model.allreduce_seconds(dp.gradient_bytes, 4, 4, node, link)
    assert allreduce / (compute + allreduce) > Decimal("0.5")


def test_report_b_estimate_from_the_cli_scales_over_1_4x_per_doubling(cli):
    import json

    r = cli("estimate", "--workload", "resnet50", "--as-of", "2017-12", "--provider", "sakura", "--all",
            "--format", "json")
    assert r.code == 0, r.err
    plans = json.loads(r.out)["plans"]
    train = {p["count"]: p["machine_groups"][0]["jobs_s_max"] for p in plans
             if p["instance_type"] == "koukaryoku-titanx-pascal-x4" and p["feasible"]}
    # 90 epochs on 1, 2, 4 nodes: 204,800 s, 142,761 s, 81,471 s of training (setup and staging apart)
    assert train[1] / train[2] >= 1.4 and train[2] / train[4] >= 1.4
    assert train[1] / train[2] < 2 and train[2] / train[4] < 2


def test_16_p5_machines_over_efa_do_not_scale_like_10gbe_nodes(report_b):
    work, sakura, sakura_link, sakura_speed = report_b
    cat = catalog.load("2026-11")
    p5 = cat.resolve("aws:p5.48xlarge", region="us-east-1")
    speed, _ = model.speed(work, p5, cat.gpus)
    p5_up = {n: model.dp_speedup(work, p5, n, speed, cat.link(p5))[0] for n in (1, 2, 16)}
    sakura_up = {n: model.dp_speedup(work, sakura, n, sakura_speed, sakura_link)[0] for n in (1, 2, 16)}
    # 16 machines: 128 H100 over 3,200 Gbit/s EFA keep 97 % of linear; 64 TITAN X over 10 GbE 42 %
    assert p5_up[16] / 128 > Decimal("0.95") and sakura_up[16] / 64 < Decimal("0.45")
    # one doubling: p5 near 2x; TITAN X nodes 1.43x (report B: a little over 1.5x; no longer 1.13x)
    assert p5_up[2] / p5_up[1] > Decimal("1.95") and Decimal("1.4") < sakura_up[2] / sakura_up[1] < Decimal("1.6")


def test_no_network_figure_means_no_multi_machine_data_parallel_plan():
    cat = catalog.load("2026-11")
    work = workloads.load("resnet50")
    est = optimizer.estimate(work, Setting(catalog=cat), provider="sakura")
    two = [p for p in est.plans if p.count == 2]
    assert two and all(not p.feasible for p in two)
    assert all(p.reason.startswith(f"no inter-node network figure for {p.fleet[0][0].name} (catalog/links.csv)")
               for p in two)


def test_past_the_validated_global_batch_a_plan_says_so():
    cat = catalog.load("2017-08")
    work = workloads.load("resnet50")
    est = optimizer.estimate(work, Setting(catalog=cat, as_of_month="2017-12"), provider="sakura")
    pascal = {p.count: p for p in est.plans if p.feasible and p.fleet[0][0].name == "koukaryoku-titanx-pascal-x4"
              and p.setup == "scratch"}
    assert not any("global batch" in w for w in pascal[4].warnings)  # 16 processes x 32 = 512: report B ran it
    batch = [w for w in pascal[8].warnings if "global batch" in w]
    assert batch == ["global batch 1,024 (32 per GPU x 32 GPUs) is past the 512 validated (field report B (ChainerMN on"
                     " Sakura 高火力, 2017-12)): accuracy may suffer; tune the learning rate and batch size first"]


# --- report C: streams packed on one GPU, and the remainder -----------------------------------------

def _clips(count: int, seconds: str = "147.5"):
    """Report C's clips on a GTX 1080: 147.5 s alone each (the figure behind the 495 s that the
    old rule gave 3 clips 2 per GPU), 2.4 GiB each, per-stream efficiency 71.55 % (2) and 57 % (3),
    start-up factor 1.2."""
    from gpuplan.planning.plan_types import Job, Packing, Workload

    return Workload(name="clips", description="", unit="second", seconds_per_unit=Decimal(1), reference_gpu="GTX 1080",
                    speed={"GTX 1080": Decimal(1)}, memory_gib=Decimal("2.4"),
                    packing=Packing({1: Decimal(1), 2: Decimal("0.7155"), 3: Decimal("0.57")}, startup_factor=Decimal("1.2")),
                    jobs=tuple(Job(f"clip{i + 1}", Decimal(seconds)) for i in range(count)))


def _gtx1080():
    o = sp.offer(name="gtx1080", gpu="GTX 1080", memory="8", price="3600", granularity=1, minimum=0)
    return o, sp.catalog([o], {"azure": sp.facts(setup_min=0)})


def test_report_c_three_clips_two_per_gpu_the_third_runs_alone_at_full_speed():
    o, cat = _gtx1080()
    plans = optimizer.estimate(_clips(3), Setting(catalog=cat), mixes=False).plans
    two = next(p for p in plans if p.per_gpu == 2 and p.count == 1)
    # two clips together: 147.5 x 1.2 / 0.7155 = 247.4 s; then the third alone: 147.5 s -> 394.9 -> 395 s
    # (the old rule ran it at the 2-per-GPU speed too: 2 x 247.4 = 495 s)
    assert two.wall_s == 395 and two.cost_jpy == 395
    three = next(p for p in plans if p.per_gpu == 3 and p.count == 1)
    # all three at once: 147.5 x 1.2 / 0.57 = 310.5 -> 311 s (report C: about 307 s)
    assert three.wall_s == 311 and _near(three.wall_s, 307, "0.02")
    assert any("fewer left run at the efficiency for their count" in a for a in two.assumptions)


def _yolo_clips(count: int, frames: int = 1000, **fraction):
    """The built-in yolo-fhd (report C's 0.147591 s per frame alone, its efficiencies, start-up
    factor and memory fraction) over `count` clips of `frames` frames: report C timed 1,000 frames
    ("1000フレームの映像を処理した場合", "1000(解析フレーム数)"). `fraction` changes the memory fraction's fields."""
    from dataclasses import replace

    from gpuplan.planning.plan_types import Job

    work = workloads.load("yolo-fhd")
    jobs = tuple(Job(f"clip{i + 1}", Decimal(frames)) for i in range(count))
    assert work.memory_fraction is not None
    return replace(work, jobs=jobs, memory_fraction=replace(work.memory_fraction, **fraction))


def test_report_c_307_s_packed_and_440_s_one_by_one_come_from_its_figures():
    """The shipped yolo-fhd as it is (no figure overridden) plans report C's best packing, three
    streams at 25 % on one GTX 1080. Inputs, all report C's: 0.147591 s per frame alone, 1,000
    frames, 57.28 % per-stream efficiency for three at 25 %, the author's start-up factor 1.2, the
    25 % of 8 GiB that ran as fast as the whole card. ESTIMATE: 0.3 GiB of CUDA context per process
    (chosen inside the range the report's fit / no-fit leaves: over 0.267, at most 0.667 GiB).
    The 57.28 % was measured in the very run that took the 307 s, so 307 s is the report's own
    arithmetic redone, not a prediction: what this checks is that the memory model lets the
    shipped workload take that packing at all, and that the figures combine as the report's do."""
    o, cat = _gtx1080()
    work = workloads.load("yolo-fhd")
    assert (work.unit, work.seconds_per_unit, work.reference_gpu) == ("frame", Decimal("0.147591"), "GTX 1080")
    assert work.memory_fraction is not None and work.memory_fraction.minimum == Decimal("0.25")
    assert work.packing.efficiency[3] == Decimal("0.5728")
    # one recorded hour at 30 fps: 108,000 frames x 0.147591 s = 15,939.8 s = 265.7 min alone (not 40 min)
    assert work.job_seconds(work.jobs[0]) == Decimal("15939.828")
    plans = optimizer.estimate(_yolo_clips(3), Setting(catalog=cat), mixes=False).plans
    three = next(p for p in plans if p.per_gpu == 3 and p.count == 1)
    alone = next(p for p in plans if p.per_gpu == 1 and p.count == 1)
    # three at 25 % each: 3 x (2 GiB + 0.3 GiB context) = 6.9 GiB of 8: they fit, with no override
    assert three.feasible
    assert any("per_process_gpu_memory_fraction 0.25 (25 % of 8 GiB = 2 GiB" in a and "3 per GTX 1080 take 6.9 GiB" in a
               and "up to 29 %" in a for a in three.assumptions)
    # packed: 0.147591 / 0.5728 x 1,000 x 1.2 = 309.2 -> 310 s (report C: 307 s, +1.0 %)
    assert three.wall_s == 310 and _near(three.wall_s, 307, "0.03")
    # one after another: 0.147591 x 3 x 1,000 = 442.8 -> 443 s (report C: 440 s, +0.7 %); packing wins by 30 %
    assert alone.wall_s == 443 and _near(alone.wall_s, 440, "0.01")
    two = next(p for p in plans if p.per_gpu == 2 and p.count == 1)
    # two packed (0.147591 / 0.7155 x 1.2 = 0.2475 s per frame each) for 247.5 s, the third alone 147.6 s
    assert two.wall_s == 396


def test_report_c_three_streams_at_30_percent_do_not_start():
    """Report C: at 30 % each a third stream did not start. A packing that needs 30 % each (the
    workload's minimum set to 30 %) does not fit three on the 8 GiB card: 3 x (2.4 + 0.3 GiB)
    = 8.1 GiB. Not an independent check either: the 0.3 GiB context was chosen so that it holds."""
    o, cat = _gtx1080()
    plans = optimizer.estimate(_yolo_clips(3, minimum=Decimal("0.30")), Setting(catalog=cat), mixes=False).plans
    three = next(p for p in plans if p.per_gpu == 3)
    assert not three.feasible and three.excluded_by[0].code is Code.PACKING
    assert three.excluded_by[0].get("why") == "memory"
    assert three.reason == ("3 per GPU: 3 x 2.7 GiB (a fixed fraction of 30 % + 0.3 GiB CUDA context each) exceed the 8 GiB"
                            " of a GTX 1080; 3 fit at most 29 % each, below the least that ran as fast")
    # two at 30 % fit (report C ran them: 71.55 %)
    assert any(p.feasible and p.per_gpu == 2 for p in plans)
    # and the shipped 25 % does not stretch to four: 4 x 2.3 GiB = 9.2 GiB (report C did not try four)
    shipped = optimizer.estimate(_yolo_clips(4), Setting(catalog=cat), mixes=False).plans
    assert not any(p.feasible for p in shipped if p.per_gpu == 4)


def test_a_fixed_fraction_is_the_same_gib_on_another_card():
    """The 25 % that ran as fast on the 8 GiB GTX 1080 is 2 GiB of work space: on a 16 GiB card the
    smallest share holding it is 13 % (2.08 GiB), on a 4 GiB card 50 %; each + the context."""
    work = workloads.load("yolo-fhd")
    for gib, share, need in (("8", "0.25", "2.3"), ("16", "0.13", "2.38"), ("4", "0.5", "2.3")):
        o = sp.offer(name="x", gpu="GTX 1080", memory=gib, price="3600")
        assert (model.memory_share(work, o), model.memory_need(work, o)) == (Decimal(share), Decimal(need))
    two_gib = sp.offer(name="x", gpu="GTX 1080", memory="2", price="3600")
    with pytest.raises(model.Infeasible, match="2.3 GiB"):
        model.check_offer(work, two_gib, Setting(catalog=_gtx1080()[1]))


def test_report_c_real_time_still_needs_work():
    import yaml

    data = yaml.safe_load((workloads._root() / "yolo-fhd.yaml").read_text())
    data.pop("jobs")
    data["streams"] = {"count": 8, "fps": 30, "hours": 1}
    o, cat = _gtx1080()
    est = optimizer.estimate(workloads.from_dict(data, "yolo-fhd as live cameras"), Setting(catalog=cat))
    # report C: one hour of video within one hour "still needs work": 0.147591 s per frame, 30 fps needs 0.0333 s
    assert est.recommended is None
    assert est.plans[0].reason == ("real time out of reach on a GTX 1080: one stream alone takes 147.591 ms per frame,"
                                   " 30 fps needs at most 33.333 ms: 4.43x too slow")


def test_packing_on_a_gpu_it_was_not_measured_on_is_not_planned():
    t4 = sp.offer(name="t4", gpu="T4", memory="16", price="3600", granularity=1, minimum=0)
    cat = sp.catalog([t4], {"azure": sp.facts(setup_min=0)})
    work = _clips(3)
    from dataclasses import replace

    plans = optimizer.estimate(replace(work, speed={"GTX 1080": Decimal(1), "T4": Decimal(1)}), Setting(catalog=cat),
                               mixes=False).plans
    packed = [p for p in plans if p.per_gpu > 1]
    assert packed and all(not p.feasible and "per-stream efficiency measured only on GTX 1080" in p.reason for p in packed)
    # a figure measured on the T4 itself is used there
    t4_measured = replace(work, speed={"GTX 1080": Decimal(1), "T4": Decimal(1)},
                          packing=replace(work.packing, by_gpu={"T4": {1: Decimal(1), 2: Decimal("0.9")}}))
    plans = optimizer.estimate(t4_measured, Setting(catalog=cat), mixes=False).plans
    two = next(p for p in plans if p.per_gpu == 2 and p.count == 1)
    # two together: 147.5 x 1.2 / 0.9 = 196.67 s, then one alone 147.5 s -> 344.2 -> 345 s
    assert two.feasible and two.wall_s == 345


def test_report_c_figures_stay_the_gtx_1080s_and_are_not_given_to_a_gtx_1080_ti(cli):
    import json

    # the catalog knows a GTX 1080 Ti but not a GTX 1080: the reference GPU is not renamed to the only
    # partial match, which gave the 1080 Ti report C's own speed (1.0, "measured") and its packing figures
    r = cli("estimate", "--workload", "yolo-fhd", "--as-of", "2017-08", "--provider", "baremetal", "--all",
            "--owned", "gtx1080ti-workstation", "--format", "json")
    assert r.code == 0, r.err
    plans = json.loads(r.out)["plans"]
    alone = next(p for p in plans if p["per_gpu"] == 1)
    # 0.533 / 0.36 (the GTX 1080 bridged from jcjohnson/cnn-benchmarks' ResNet-50 row, issue 42; it was 0.40) = 1.481
    assert any(a.startswith("speed on GTX 1080 Ti: 1.481x GTX 1080 (generic cnn-train table (GTX 1080 Ti 0.533 /"
                            " GTX 1080 0.36") for a in alone["assumptions"]), alone["assumptions"]
    assert any(a.startswith("workload yolo-fhd: 8 jobs, 0.147591 s per frame on GTX 1080 (") for a in alone["assumptions"])
    packed = [p for p in plans if p["per_gpu"] > 1]
    assert packed and all("per-stream efficiency measured only on GTX 1080;" in p["reason"] for p in packed)


# --- report E: four towers on one 4x TITAN X server ------------------------------------------------

E_ONE_GPU = Decimal("758")  # mean of steps 10-50 of report E's one-GPU log: 768.2, 745.9, 730.8, 764.6, 779.0 examples/s
E_FOUR = Decimal("2593")  # the same of its four-tower log: 2,682.6, 2,475.5, 2,452.7, 2,500.2, 2,853.9 (3.42x)


def test_report_e_logs_are_the_means_the_checks_use():
    one = [Decimal(x) for x in ("768.2", "745.9", "730.8", "764.6", "779.0")]
    four = [Decimal(x) for x in ("2682.6", "2475.5", "2452.7", "2500.2", "2853.9")]
    assert round(sum(one) / 5) == E_ONE_GPU and round(sum(four) / 5) == E_FOUR
    # examples/s x s/batch = 128 in every line (the tutorial's print): 128 per tower per step
    assert all(abs(e * t - 128) < 2 for e, t in zip(one, ("0.167", "0.172", "0.175", "0.167", "0.164"), strict=True)
               for t in [Decimal(t)])


# Report E's four-tower log (steps 10-50): the figures the prediction below is checked against
# and which no constant of the vgg-towers workload may be (issue 42)
E_FOUR_TOWER_LINES = ("2682.6", "2475.5", "2452.7", "2500.2", "2853.9", "0.048", "0.052", "0.051", "0.045", "7.467",
                      "17.1", "2593", "648", "3.42")
E_DISTINCT = Decimal("648")  # 2,593 counted / 4 towers: the script fed one batch to all four (issue 42)


def test_report_e_as_it_ran_is_predicted_from_the_one_gpu_log_and_the_shared_batch(cli):
    """Report E as it ran (issue 42). Inputs: the ONE-GPU log only, and the script as the report
    prints it (one `tf.train.batch` before the tower loop: every tower trains on the same batch).

    One GPU, steps 10-50: 768.2, 745.9, 730.8, 764.6, 779.0 examples/s, mean 757.7; 128 a step, so
    a step takes 128 / 757.7 = 0.1689 s and an epoch 50,000 / 757.7 = 65.99 s. The GPU was 29 %
    busy (its nvidia-smi): the step is the input pipeline's pace, not the GPU's.
    Four towers, modelled as the script ran: a step is the slower of that pipeline, 0.1689 s, and
    the towers' compute (12.197 s an epoch x 128 / 50,000 = 0.0312 s, VGG-16 scaled to 32x32, an
    unfitted estimate) + averaging (4 passes of 58,879,272 bytes at 54 Gbit/s = 0.0349 s, fitted on
    report B): max(0.1689, 0.0661) = 0.1689 s. One batch of 128 a step for all four towers:
      distinct  128 / 0.1689     =   758 images/s  against the log's 2,593 / 4 = 648:  +17 %
      counted   4 x 128 / 0.1689 = 3,031 examples/s against the log's 2,593:         +17 %
    both within 20 %; none of the four-tower lines is an input (the last assertion). Wall and yen
    use distinct images: 100 epochs x 65.99 s = 6,599 s on the 4-GPU server, as on one GPU (the
    run as logged took 100 x 50,000 / 648 = 7,716 s): the script gains nothing from four GPUs.
    Compute alone (0.0661 s a step) would allow 2.56x: a bound, never the prediction."""
    import json
    import re
    from importlib.resources import files

    cat = catalog.load("2017-08")
    work = workloads.with_catalog_gpus(workloads.load("vgg-towers"), cat)
    dp = work.data_parallel
    assert dp is not None and dp.samples_per_unit is not None and dp.shared_batch
    assert (work.reference_gpu, dp.batch_per_gpu, dp.input_step_s, work.seconds_per_unit) == (
        "TITAN X (Maxwell)", 128, Decimal("0.1689"), Decimal("65.99"))
    node = cat.resolve("koukaryoku-titanx-maxwell-x4")
    speed, _ = model.speed(work, node, cat.gpus)
    up, why = model.dp_speedup(work, node, 1, speed, cat.link(node))
    epoch_s = work.seconds_per_unit / speed / up
    distinct = dp.samples_per_unit / epoch_s
    counted = distinct * node.gpu_count  # the log's print: batch x towers / step
    assert (up, round(distinct), round(counted)) == (Decimal("1.0000"), 758, 3031)
    assert _near(distinct, E_DISTINCT, "0.20") and _near(counted, E_FOUR, "0.20")
    assert round((distinct / E_DISTINCT - 1) * 100) == 17 and round((counted / E_FOUR - 1) * 100) == 17
    assert "this script gains nothing from 4 GPUs" in why and "(a bound, not a prediction)" in why
    assert "every tower trains on the same dequeued batch of 128" in why
    # the plan: 100 epochs on the 4-GPU server take as long as on one GPU, 6,599 s
    r = cli("estimate", "--workload", "vgg-towers", "--as-of", "2017-12", "--provider", "sakura", "--all", "--format", "json")
    assert r.code == 0, r.err
    plan = next(p for p in json.loads(r.out)["plans"] if p["instance_type"] == "koukaryoku-titanx-maxwell-x4"
                and p["count"] == 1 and p["feasible"])
    assert plan["machine_groups"][0]["jobs_s_max"] == 6599
    assert any("gains nothing from 4 GPUs" in a for a in plan["assumptions"])
    # no constant of the workload comes from the four-tower lines
    text = files("gpuplan.catalog_data").joinpath("workloads", "vgg-towers.yaml").read_text(encoding="utf-8")
    numbers = set(re.findall(r"\d[\d,]*(?:\.\d+)?", text))
    assert not numbers & {*E_FOUR_TOWER_LINES, "2,593", "3,031"}, numbers & {*E_FOUR_TOWER_LINES, "2,593"}


def test_the_tutorial_cnns_towers_come_out_near_3_4x_but_that_is_no_evidence_about_report_e():
    """cifar10-towers is TensorFlow's CIFAR-10 tutorial CNN, not report E's VGG. Its inputs: 8,000
    images/s on a GTX 1080 (tensorflow/models PR #1538), the generic table's TITAN X / GTX 1080
    ratio, the tutorial model's 1,068,298 parameters, 128 per tower, the Koukaryoku link's in-node
    pass rate (fitted on report B's 0.15 s). Its speed-up, 3.53x, lands near report E's 3.42x, but
    its rate (6,800 examples/s on one Maxwell TITAN X, 24,000 on four) is 9x the report's logs: a
    ratio of two wrong rates, so the 3.5x checks nothing about report E (issue 31)."""
    cat = catalog.load("2017-08")
    work = workloads.with_catalog_gpus(workloads.load("cifar10-towers"), cat)
    dp = work.data_parallel
    assert dp is not None and dp.samples_per_unit is not None
    assert (work.seconds_per_unit, work.reference_gpu, dp.gradient_bytes, dp.batch_per_gpu) == \
        (Decimal("6.25"), "GTX 1080", 1_068_298 * 4, 128)
    up, rate = {}, {}
    for name in ("koukaryoku-titanx-maxwell-x4", "koukaryoku-titanx-pascal-x4"):
        node = cat.resolve(name)
        speed, _ = model.speed(work, node, cat.gpus)
        up[name], why = model.dp_speedup(work, node, 1, speed, cat.link(node))
        rate[name] = dp.samples_per_unit / work.seconds_per_unit * speed * up[name]
        assert "4 in-node passes of L (reduce, device-to-host, host-to-device, broadcast) at 54 Gbit/s" in why
    # Maxwell: 6.25 s / 0.85 x 128 / 50,000 = 18.82 ms per step + 4 x 4.273 MB at 54 Gbit/s = 2.53 ms -> 3.5257x
    # Pascal: 12.31 ms + 2.53 ms -> 3.3174x
    assert up == {"koukaryoku-titanx-maxwell-x4": Decimal("3.5257"), "koukaryoku-titanx-pascal-x4": Decimal("3.3174")}
    maxwell = rate["koukaryoku-titanx-maxwell-x4"]
    assert round(maxwell) == 23_975 and round(maxwell / E_FOUR) == 9


def test_the_tutorial_towers_feed_limit_is_named_where_the_catalog_lacks_the_servers_vcpus(cli):
    import json

    r = cli("estimate", "--workload", "cifar10-towers", "--as-of", "2017-12", "--provider", "sakura", "--all",
            "--format", "json")
    assert r.code == 0, r.err
    plans = json.loads(r.out)["plans"]
    one = next(p for p in plans if p["instance_type"] == "koukaryoku-titanx-maxwell-x4" and p["count"] == 1)
    # 256 epochs x 6.25 s / 0.85 / 3.5257 = 534 s of training on one server
    assert one["machine_groups"][0]["jobs_s_max"] == 534
    assert any("data-parallel over 1 x 4 GPUs: 3.5257x one GPU" in a for a in one["assumptions"])
    # the 2016-2017 Koukaryoku rows give no vCPU count and no disk read rate: the measured CPU need and bytes
    # read are shown, not silently dropped
    assert any(a.startswith("speed on TITAN X (Maxwell): 0.85x GTX 1080") and a.endswith(
        "feed limit not checked: the catalog gives no vCPU count for koukaryoku-titanx-maxwell-x4 (5.699 CPU s per epoch"
        " to feed one job); feed limit by disk not checked: the disk read rate of koukaryoku-titanx-maxwell-x4 is unknown"
        " (no figure in catalog/links.csv; 153.65 MB per epoch read))") for a in one["assumptions"])


def test_the_tutorial_towers_are_feed_bound_on_a_machine_with_too_few_vcpus():
    from dataclasses import replace

    cat = catalog.load("2017-08")
    work = workloads.with_catalog_gpus(workloads.load("cifar10-towers"), cat)
    node = replace(cat.resolve("koukaryoku-titanx-pascal-x4"), vcpus=8)
    speed, why = model.speed(work, node, cat.gpus)
    # 8 vCPUs for 4 towers: 2 vCPUs each / 5.699 CPU s per epoch feed 0.351 epochs/s, more than the
    # TITAN X (Pascal) does (1.3 / 6.25 = 0.208 epochs/s): the GPU binds
    assert speed == Decimal("1.3")
    node = replace(node, vcpus=2)
    speed, why = model.speed(work, node, cat.gpus)
    # 2 vCPUs: half a vCPU per tower feeds 0.088 epochs/s, less than half what the GPU does: feed-bound
    assert speed == Decimal("6.25") * Decimal("0.5") / Decimal("5.699")
    assert why.startswith("feed-bound: 0.5 vCPUs per GPU at 5.699 CPU s per epoch feed 0.088 epochs/s")


# --- streams: real-time work held for its whole duration ------------------------------------------------

def _cameras(ms_per_frame: str, hours=720):
    return workloads.from_dict({
        "name": "cameras", "unit": "frame", "seconds_per_unit": Decimal(ms_per_frame) / 1000, "reference_gpu": "GTX 1080",
        "speed": {"GTX 1080": 1}, "memory_gib": 2.4, "streams": {"count": 8, "fps": 30, "hours": hours},
        "packing": {"efficiency": {2: 0.7155, 3: 0.57}},
    }, "test cameras")


def test_an_8_stream_30_fps_month_is_priced_for_720_hours():
    # 20 ms per frame alone; 2 per GPU: 20 / 0.7155 = 27.95 ms <= 33.3 ms (30 fps); 3 per GPU: 35.09 ms is too slow
    # -> 2 streams per GTX 1080, 4 machines, each held 720 h at ¥100/h billed hourly = ¥288,000
    work = _cameras("20")
    assert [j.units for j in work.jobs] == [Decimal(30 * 720 * 3600)] * 8
    o = sp.offer(name="gtx1080", gpu="GTX 1080", memory="8", price="100", granularity=3600, minimum=3600)
    cat = sp.catalog([o], {"azure": sp.facts(setup_min=0, quota=1000)})
    est = optimizer.estimate(work, Setting(catalog=cat))
    rec = est.recommended
    assert (rec.count, rec.per_gpu, rec.wall_s, rec.billed_s, rec.cost_jpy) == (4, 2, 720 * 3600, 4 * 720 * 3600, 288_000)
    assert [v.jobs for v in rec.vms] == [("stream-1", "stream-2"), ("stream-3", "stream-4"),
                                         ("stream-5", "stream-6"), ("stream-7", "stream-8")]
    assert any(a.startswith("2 streams per GTX 1080 in real time: 27.952 ms per frame each, 30 fps needs at most 33.333 ms;"
                            " 3 would take 35.088 ms per frame each") for a in rec.assumptions)
    assert any("held for the whole duration" in a for a in rec.assumptions)


def test_streams_no_gpu_keeps_up_with_are_infeasible_and_say_by_how_much():
    o = sp.offer(name="gtx1080", gpu="GTX 1080", memory="8", price="100")
    est = optimizer.estimate(_cameras("45"), Setting(catalog=sp.catalog([o])))
    assert est.recommended is None
    assert est.plans[0].reason == ("real time out of reach on a GTX 1080: one stream alone takes 45 ms per frame,"
                                   " 30 fps needs at most 33.333 ms: 1.35x too slow")


# --- report D: a monthly server, rented or already yours ------------------------------------------------

def _monthly(price="146000"):
    o = sp.offer(name="p100x2-monthly", provider="baremetal", gpu="V100", gpus=2, price=None, memory="16",
                 granularity=30 * 86400, minimum=30 * 86400, family="")
    from dataclasses import replace

    return replace(o, kind="monthly", price=Decimal(price), price_unit="month",
                   price_jpy_per_hour=Decimal(price) / 730, aliases=("bm-p100x2",))


def test_a_monthly_server_is_billed_a_whole_month_not_720_of_730_hours():
    from gpuplan.planning.plan_types import Job, Workload

    w = Workload(name="t", description="", jobs=(Job("a", Decimal(7200)),), unit="second", seconds_per_unit=Decimal(1),
                 reference_gpu="V100", speed={"V100": Decimal(1)})
    o = _monthly()
    providers = {"baremetal": sp.facts("baremetal", setup_min=0, builder_is_worker=True, quota=None)}
    plan = next(p for p in optimizer.estimate(w, Setting(catalog=sp.catalog([o], providers))).plans if p.feasible)
    # 2 h of work starts a month: ¥146,000 (not 720 h x 146,000 / 730 h = ¥144,000)
    assert plan.cost == Decimal(146000) and plan.billed_s == 30 * 86400 and plan.wall_s == 7200
    assert "a started month billed whole" in plan.note
    # already rented (--owned): nothing more to pay for this batch, and only its busy time is counted
    mine = next(p for p in optimizer.estimate(w, Setting(catalog=sp.catalog([o], providers), owned=("bm-p100x2",))).plans
                if p.feasible)
    assert mine.cost == 0 and mine.billed_s == 7200 and mine.recommendable
    assert "you rent it already: ¥146,000 a month, not in this cost" in mine.note


def test_report_d_break_even_hours_per_month_for_a_stated_monthly_price(cli, tmp_path, monkeypatch):
    import json

    prices = tmp_path / "prices.yaml"
    prices.write_text("offers:\n  - {provider: baremetal, name: p100x2-monthly, price: 146000}\n")  # the stated price
    monkeypatch.setenv("GPUPLAN_PRICES", str(prices))
    r = cli("estimate", "--videos", "4", "--as-of", "2018-06", "--format", "json", "--all")
    assert r.code == 0, r.err
    data = json.loads(r.out)
    # the cheapest hourly plan, which the break-even is against: 1x Koukaryoku Maxwell TITAN X x4, 2 h at ¥288/h;
    # it is also the default pick: the Pascal TITAN X (GP102) is scaled from the GTX 1080 Ti (GP102) that report A
    # measured no faster than a K80 half for this job (issue 19: a speed scaled within one architecture), no longer
    # taken as the generic table's 4x
    cheapest = min((p for p in data["plans"] if p["feasible"] and p["recommendable"]), key=lambda p: p["cost_jpy"])
    # (issue 42: report B's prices do not say their tax basis: planned as listed without it, 2 h x ¥288 x 1.08
    # = ¥622 at 2018's 8 %; read with it, ¥576, the pick is the same, and the estimate says so)
    assert (cheapest["instance_type"], cheapest["cost_jpy"]) == ("koukaryoku-titanx-maxwell-x4", 622)
    best = data["recommended"]
    assert (best["instance_type"], best["cost_jpy"]) == ("koukaryoku-titanx-maxwell-x4", 622)
    assert data["notes"]["tax basis"].endswith("if their prices include it, the pick is the same (¥576)")
    pascal = next(p for p in data["plans"] if p["instance_type"] == "koukaryoku-titanx-pascal-x4" and p["feasible"])
    assert pascal["speed_kind"] == "scaled" and pascal["wall_minutes"] > cheapest["wall_minutes"]
    strict = json.loads(cli("estimate", "--videos", "4", "--as-of", "2018-06", "--format", "json", "--objective",
                            "cost").out)["recommended"]
    assert (strict["instance_type"], strict["cost_jpy"]) == ("koukaryoku-titanx-maxwell-x4", 622)
    monthly = next(p for p in data["plans"] if p["instance_type"] == "p100x2-monthly")
    # 4 videos on 2 P100 (Pascal, scaled from the GTX 1080 Ti measured for this job: 0.54 / 0.533 = 1.013x a K80;
    # 2 busy GPUs 1.25x): 2 x 8,883 s = 17,767 s of work on it; break-even = 146,000 x 17,767 / 3600 h / ¥576
    # = 1,251 h a month: more than a month has (both prices x 1.08: the stated price says no basis either, so the
    # hours are the same)
    assert monthly["cost_jpy"] == 157_680 and monthly["billed_minutes"] == 43200 and monthly["wall_minutes"] == 296.12
    assert ("break-even: renting it at ¥157,680 a month beats 1x koukaryoku-titanx-maxwell-x4 (¥622 for this batch,"
            " 4:56 h of work here) when it is busy more than 1,251 h a month (more than the month's 720 h: never)"
            ) in monthly["note"]
    # --owned accepts a server rented by the month: it is then recommended at no further cost
    r = cli("estimate", "--videos", "4", "--as-of", "2018-06", "--format", "json", "--owned", "bm-p100x2")
    assert r.code == 0, r.err
    mine = json.loads(r.out)["recommended"]
    assert (mine["instance_type"], mine["cost_jpy"], mine["billed_minutes"]) == ("p100x2-monthly", 0, 296.12)


# --- image limits per provider and era ---------------------------------------------------------------

def test_2017_koukaryoku_plans_never_start_from_an_image():
    cat = catalog.load("2017-08")
    est = optimizer.estimate(workloads.videos(4), Setting(catalog=cat, as_of_month="2017-12"), provider="sakura")
    sakura = [p for p in est.plans if p.feasible]
    assert sakura and all(p.setup == "scratch" for p in sakura)
    assert any(p.count > 1 for p in sakura)  # several machines, each set up from scratch
    assert any(a.startswith("no image capture on sakura as of 2017-12") and a.endswith("every machine runs setup")
               for a in sakura[0].assumptions)
    # Azure could capture in 2017 (report A): 4x NC6 from an image is still the pick there
    azure = optimizer.estimate(workloads.videos(4), Setting(catalog=cat), provider="azure").recommended
    assert (azure.label, azure.setup, azure.cost_jpy) == ("4x Standard_NC6", "image", 826)


def test_an_image_does_not_start_a_size_with_another_gpu():
    cat = catalog.load("2026-11")
    a, b = cat.resolve("aws:g4dn.xlarge", region="us-east-1"), cat.resolve("aws:g5.xlarge", region="us-east-1")
    setting = Setting(catalog=cat)
    assert model.image_problem([a, a], setting) is None
    problem = model.image_problem([a, b], setting)
    assert problem.code is Code.IMAGE and problem.get("other_gpu") == "A10G"
    assert str(problem).startswith(
        "an image built on g4dn.xlarge (T4) cannot start g5.xlarge (A10G): aws images start the same gpu only")
    est = optimizer.estimate(workloads.videos(8), setting, provider="aws", region="us-east-1")
    mixes = [p for p in est.plans if len(p.fleet) == 2]
    assert mixes and not any(p.feasible and p.setup == "image" and p.fleet[0][0].gpu != p.fleet[1][0].gpu for p in mixes)


# --- the new workload fields, read from a file ------------------------------------------------------

def test_overlap_hides_allreduce_behind_compute(report_b):
    from dataclasses import replace

    work, node, link, speed = report_b
    # 4 nodes: compute 0.1668 s, allreduce 0.1950 s; overlapping all compute leaves 0.0282 s exposed
    overlapped = replace(work, data_parallel=replace(work.data_parallel, overlap=Decimal(1)))
    up = model.dp_speedup(overlapped, node, 4, speed, link)[0]
    compute = work.seconds_per_unit / speed * 32 / work.data_parallel.samples_per_unit
    allreduce, _ = model.allreduce_seconds(work.data_parallel.gradient_bytes, 4, 4, node, link)
    assert up == (16 * compute / allreduce).quantize(Decimal("0.0001"))  # step = the allreduce alone
    assert up > model.dp_speedup(work, node, 4, speed, link)[0]


@pytest.mark.parametrize("extra, message", [
    ({"data_parallel": {"gradient_bytes": 1000}}, "data_parallel.gradient_bytes needs data_parallel.batch_per_gpu too"),
    ({"data_parallel": {"overlap": 1.5}}, "data_parallel.overlap = 1.5 is above 1"),
    ({"streams": {"count": 2, "fps": 30, "hours": 1}}, "streams need unit: frame"),
    ({"unit": "frame", "streams": {"count": 2, "fps": 30}}, "streams need exactly one of hours, days or minutes"),
    ({"unit": "frame", "streams": {"count": 2, "fps": 30, "days": 1}, "jobs": [{"units": 3}]},
     "give either streams (real-time work) or jobs (a batch), not both"),
    ({"packing": {"by_gpu": {"T4": {"x": 0.5}}}}, "packing.by_gpu.T4 key 'x' must be a whole number"),
])
def test_new_workload_fields_are_checked_in_one_line(extra, message):
    from gpuplan.errors import UsageError

    data = {"name": "w", "unit": "epoch", "seconds_per_unit": 1, "reference_gpu": "V100", "jobs": [{"units": 10}]}
    data.update(extra)
    if "streams" in extra and "jobs" not in extra:
        data.pop("jobs")
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        workloads.from_dict(data, "w.yaml")


# --- report A: co-location per machine and period ---------------------------------------------------

def _four_gpu_jobs(seconds, slowdown):
    from gpuplan.planning.plan_types import Job, Workload

    return Workload(name="t", description="", unit="second", seconds_per_unit=Decimal(1), reference_gpu="K80",
                    speed={"K80": Decimal(1)}, colocation_slowdown={g: Decimal(f) for g, f in slowdown.items()},
                    colocation_default=Decimal("1.25"), colocation_source="test",
                    jobs=tuple(Job(f"j{i}", Decimal(s)) for i, s in enumerate(seconds)))


def _one_machine_plan(work, gpus=4, count=1):
    o = sp.offer(name="nc24", gpu="K80", gpus=gpus, memory="12", price="3600", granularity=1, minimum=0)
    cat = sp.catalog([o], {"azure": sp.facts(setup_min=0)})
    plans = optimizer.estimate(work, Setting(catalog=cat), mixes=False).plans
    return next(p for p in plans if p.count == count and p.per_gpu == 1 and p.feasible)


def test_report_a_a_job_left_alone_after_a_colocated_group_runs_at_full_speed():
    # five 2 h jobs on one 4-GPU machine: four together at 1.25x (150 min, report A), then the fifth alone: 120 min
    plan = _one_machine_plan(_four_gpu_jobs([7200] * 5, {4: "1.25"}))
    assert plan.wall_s == 9000 + 7200  # the old per-fleet factor slowed the fifth too: 2 x 9000 = 18,000 s
    assert any(a.startswith("co-location slowdown per machine and period: while m jobs share a machine") for a in
               plan.assumptions)


def test_the_slowdown_follows_how_many_jobs_share_the_machine_while_they_do():
    # 1 h, 2 h, 2 h on 4 GPUs: 3 share (1.2x) until the 1 h job ends at 4,320 s; the two left share (1.1x)
    # for their last hour of work: 3,960 s (the old per-fleet rule: 2 h x 1.2 = 8,640 s)
    plan = _one_machine_plan(_four_gpu_jobs([3600, 7200, 7200], {2: "1.1", 3: "1.2", 4: "1.25"}))
    assert plan.wall_s == 4320 + 3960
    # the report A worked example is unchanged: four videos on one NC24, 150 min, ¥1,285
    cat = catalog.load("2017-08")
    est = optimizer.estimate(workloads.videos(4), Setting(catalog=cat), provider="azure")
    nc24 = next(p for p in est.plans if p.label == "1x Standard_NC24" and p.feasible)
    assert (nc24.wall_s, nc24.cost_jpy, est.recommended.cost_jpy) == (210 * 60, 1285, 826)


def test_an_up_to_link_is_planned_at_its_sustained_baseline():
    cat = catalog.load("2026-11")
    work = workloads.load("resnet50")
    g5 = cat.resolve("aws:g5.xlarge", region="us-east-1")
    link = cat.link(g5)
    assert (link.inter_node_gbps, link.inter_node_baseline_gbps) == (Decimal(10), Decimal("2.5"))
    seconds, why = model.allreduce_seconds(work.data_parallel.gradient_bytes, 1, 16, g5, link)
    # 16 machines: 2L x 15/16 = 191.678 MB at 2.5 Gbit/s x 0.6 = 1.022 s (at the 10 Gbit/s burst it would be 0.256 s)
    assert seconds == Decimal("1.02228384")
    assert "'up to' 10 Gbit/s is a burst, its sustained baseline is used" in why and "5 to 60 minutes" in why
    # a link sold at a sustained rate keeps it
    g5_12 = cat.resolve("aws:g5.12xlarge", region="us-east-1")
    assert cat.link(g5_12).inter_node_baseline_gbps is None


def test_the_builder_of_a_synchronous_job_is_billed_until_the_workers_have_launched():
    from gpuplan.planning.plan_types import DataParallel, Job, Workload

    o = sp.offer(name="v100x1", provider="aws", gpu="V100", memory="16", price="3600", granularity=1, minimum=0)
    cat = sp.catalog([o], {"aws": sp.facts("aws", setup_min=60, capture_min=10, launch_min=5, builder_is_worker=True)})
    work = Workload(name="dp", description="", unit="second", seconds_per_unit=Decimal(1), reference_gpu="V100",
                    speed={"V100": Decimal(1)}, jobs=(Job("train", Decimal(36000)),),
                    data_parallel=DataParallel(efficiency={(2, 2): Decimal("0.9")}, source="test"))
    plan = next(p for p in optimizer.estimate(work, Setting(catalog=cat), mixes=False).plans
                if p.count == 2 and p.setup == "image")
    builder = next(m for m in plan.machines if m.role == "builder+worker")
    worker = next(m for m in plan.machines if m.role == "worker")
    # the job takes 36,000 / (2 x 0.9) = 20,000 s on both machines, which start it together at 75 min
    assert worker.start_s == 75 * 60 and builder.capture_s == 15 * 60  # capture 10 min + 5 min waiting for the launch
    assert plan.wall_s == 75 * 60 + 20000
    assert plan.billed_s == (75 * 60 + 20000) + 20000  # the builder is held from 0 to the end, the worker from its launch
    assert any("the builder waits 5 min for the workers to launch" in a for a in plan.assumptions)


# --- sharded training memory --------------------------------------------------------------------------

def _full_finetune_7b(stage):
    # 7e9 parameters, bf16 weights and gradients (2 bytes each), Adam in fp32 (master copy, m, v: 12 bytes):
    # 13.04 + 13.04 + 78.23 GiB, plus 8 GiB of activations per GPU
    return workloads.from_dict({
        "name": "ft7b", "unit": "step", "seconds_per_unit": 1, "reference_gpu": "V100", "jobs": [{"units": 1000}],
        "parallel": "data",
        "data_parallel": {"memory": {"parameters_gib": 13.04, "gradients_gib": 13.04, "optimizer_gib": 78.23,
                                     "activations_gib": 8, "zero_stage": stage, "source": "test: 2 + 2 + 12 bytes"}},
    }, "ft7b.yaml")


def test_a_7b_full_fine_tune_does_not_fit_one_48_gb_gpu_and_fits_eight_sharded():
    one = sp.offer(name="one48", gpu="V100", memory="48", price="3600", granularity=1, minimum=0)
    eight = sp.offer(name="eight48", gpu="V100", gpus=8, memory="48", price="28800", granularity=1, minimum=0)
    cat = sp.catalog([one, eight], {"azure": sp.facts(setup_min=0, quota=1000)})
    est = optimizer.estimate(_full_finetune_7b(3), Setting(catalog=cat))
    alone = next(p for p in est.plans if p.fleet[0][0].name == "one48" and p.count == 1)
    # one GPU: nothing to split over, 13.04 + 13.04 + 78.23 + 8 = 112.31 GiB
    assert not alone.feasible and alone.excluded_by[0].code is Code.MEMORY
    assert alone.reason == "a job needs 112.31 GiB, more than the 48 GiB of a V100"
    node = next(p for p in est.plans if p.fleet[0][0].name == "eight48" and p.count == 1)
    # ZeRO-3 over 8 GPUs: 104.31 / 8 + 8 = 21.04 GiB per GPU
    assert node.feasible
    assert any(a.startswith("memory need 21.039 GiB per GPU: parameters 13.04, gradients 13.04, optimizer state 78.23,"
                            " activations 8 GiB; optimizer state, gradients, parameters split over 8 GPUs (ZeRO stage 3)")
               for a in node.assumptions)
    rec = est.recommended
    assert rec is not None and (rec.fleet[0][0].name, rec.count) != ("one48", 1)
    # without sharding (stage 0) no GPU of these holds it
    plain = optimizer.estimate(_full_finetune_7b(0), Setting(catalog=cat))
    assert plain.recommended is None and all(p.excluded_by[0].code is Code.MEMORY for p in plain.plans)


def test_sharded_memory_fields_are_checked_in_one_line():
    from gpuplan.errors import UsageError

    with pytest.raises(UsageError, match=r"data_parallel.memory.zero_stage = 4: give 0, 1, 2 or 3"):
        _full_finetune_7b(4)


# --- the feed limit ------------------------------------------------------------------------------

def _one_machine_plans(cli, tmp_path, feed: str) -> dict:
    """AWS us-east-1's one-machine plans, by instance type, of 3,600 epochs of 1 s alone on a V100
    whose input has the given `feed:` (a YAML flow mapping)."""
    import json

    f = tmp_path / "fed.yaml"
    f.write_text("name: fed\nunit: epoch\nseconds_per_unit: 1\nreference_gpu: V100\njobs:\n  - {units: 3600}\n"
                 f"feed: {feed}\n")
    r = cli("estimate", "--workload", str(f), "--provider", "aws", "--region", "us-east-1", "--all", "--format", "json")
    assert r.code == 0, r.err
    return {p["instance_type"]: p for p in json.loads(r.out)["plans"] if p["count"] == 1 and p["feasible"]}


def test_a_job_runs_no_faster_than_the_machines_vcpus_feed_it(cli, tmp_path):
    # its input pipeline takes 16 CPU s per epoch
    plans = _one_machine_plans(cli, tmp_path, "{cpu_seconds_per_unit: 16, source: measured here}")
    # p3.2xlarge: 8 vCPUs for one V100 feed 0.5 epochs/s, the V100 does 1: 3,600 epochs take 7,200 s, not 3,600
    p3 = plans["p3.2xlarge"]
    assert p3["machine_groups"][0]["jobs_s_max"] == 7200
    assert any(a.startswith("speed on V100: 0.5x V100 (feed-bound: 8 vCPUs per GPU at 16 CPU s per epoch feed 0.5"
                            " epochs/s, less than the GPU's 1 (measured here)") for a in p3["assumptions"])


def _reads(mb_per_epoch, reads_from=None, cpu=None):
    """1 s per epoch alone on a V100 (the reference GPU: speed 1 exactly), reading mb_per_epoch MB."""
    feed = {"bytes_per_unit": mb_per_epoch * 10**6, "source": "counted here"}
    if reads_from:
        feed["reads_from"] = reads_from
    if cpu is not None:
        feed["cpu_seconds_per_unit"] = cpu
    return workloads.from_dict({"name": "reads", "unit": "epoch", "seconds_per_unit": 1, "reference_gpu": "V100",
                                "jobs": [{"units": 3600}], "feed": feed}, "test")


def test_a_job_runs_no_faster_than_its_share_of_the_sustained_network_feeds_it():
    cat = catalog.load("2026-11")
    work = _reads(625)
    # p3.2xlarge: 'up to' 10 Gbit/s, sustained baseline 2.5 Gbit/s (catalog/links.csv) = 312.5 MB/s for its one
    # V100; 312.5 / 625 MB per epoch = 0.5 epochs/s, half what the V100 does (1 epoch/s): the network binds
    speed, why = model.speed(work, cat.resolve("p3.2xlarge"), cat.gpus)
    assert speed == Decimal("0.5")
    assert why.startswith("feed-bound by network: 312.5 MB/s per GPU (network 2.5 Gbit/s sustained / 1 GPU; ENA Ethernet"
                          " (up to): 'up to' 10 Gbit/s is a burst, its sustained baseline is used; catalog/links.csv)"
                          " at 625 MB per epoch read from object storage feed 0.5 epochs/s, less than the GPU's 1"
                          " (counted here); the GPU alone: measured for reads")
    # p3.8xlarge: 10 Gbit/s shared by 4 V100s = 312.5 MB/s each: the same limit, shared by the jobs at once
    assert model.speed(work, cat.resolve("p3.8xlarge"), cat.gpus)[0] == Decimal("0.5")
    # p3dn.24xlarge: 100 Gbit/s / 8 V100s = 1,562.5 MB/s each feed 2.5 epochs/s, more than the GPU's 1: not bound
    speed, why = model.speed(work, cat.resolve("p3dn.24xlarge"), cat.gpus)
    assert speed == Decimal(1) and "feed" not in why


def test_the_least_of_gpu_vcpu_and_network_feed_binds_and_names_itself():
    cat = catalog.load("2026-11")
    p3 = cat.resolve("p3.2xlarge")
    # vCPUs: 8 / 16 CPU s per epoch = 0.5 epochs/s; network: 312.5 MB/s / 1,250 MB = 0.25 epochs/s: the network
    speed, why = model.speed(_reads(1250, cpu=16), p3, cat.gpus)
    assert speed == Decimal("0.25") and why.startswith("feed-bound by network: 312.5 MB/s per GPU")
    # network: 312.5 / 125 MB = 2.5 epochs/s; vCPUs 0.5: the vCPUs
    speed, why = model.speed(_reads(125, cpu=16), p3, cat.gpus)
    assert speed == Decimal("0.5") and why.startswith("feed-bound: 8 vCPUs per GPU at 16 CPU s per epoch")


def test_a_disk_rate_nobody_sourced_limits_nothing_and_one_that_is_given_binds(monkeypatch):
    from dataclasses import replace

    cat = catalog.load("2026-11")
    p3 = cat.resolve("p3.2xlarge")
    speed, why = model.speed(_reads(625, "disk"), p3, cat.gpus)
    # catalog/links.csv gives no disk rate for p3.2xlarge: no limit, and the speed's source says so
    assert speed == Decimal(1)
    assert why.endswith("feed limit by disk not checked: the disk read rate of p3.2xlarge is unknown (no figure in"
                        " catalog/links.csv; 625 MB per epoch read)")
    link = replace(cat.link(p3), disk_read_mb_per_s=Decimal(250))
    monkeypatch.setattr(model, "link_of", lambda offer: link)
    # 250 MB/s / 625 MB per epoch = 0.4 epochs/s
    speed, why = model.speed(_reads(625, "disk"), p3, cat.gpus)
    assert speed == Decimal("0.4") and why.startswith(
        "feed-bound by disk: 250 MB/s per GPU (disk 250 MB/s / 1 GPU; catalog/links.csv) at 625 MB per epoch read from"
        " disk feed 0.4 epochs/s")


def test_feed_reads_from_takes_network_or_disk_in_one_line():
    from gpuplan.errors import UsageError

    with pytest.raises(UsageError, match=r"test: feed.reads_from = 'nfs': give network \(object storage, the default\)"
                                         r" or disk"):
        _reads(625, "nfs")


def test_the_plan_of_a_network_fed_job_takes_the_network_limit_and_bills_by_the_one_rule(cli, tmp_path):
    from gpuplan.market import billing

    # each epoch reads 625 MB from object storage
    plans = _one_machine_plans(cli, tmp_path, "{bytes_per_unit: 625000000, source: counted here}")
    cat = catalog.with_tax(catalog.load("2026-11"), "included")  # the estimate's basis: 10 % consumption tax on AWS
    p3, p3dn = plans["p3.2xlarge"], plans["p3dn.24xlarge"]
    # p3.2xlarge: 312.5 MB/s sustained / 625 MB = 0.5 epochs/s: 3,600 epochs take 7,200 s, not 3,600
    assert p3["machine_groups"][0]["jobs_s_max"] == 7200
    speed_lines = [a for a in p3["assumptions"] if a.startswith("speed on V100: 0.5x V100 (feed-bound by network:"
                                                                   " 312.5 MB/s per GPU (network 2.5 Gbit/s sustained")]
    assert len(speed_lines) == 1 and "at 625 MB per epoch read from object storage feed 0.5 epochs/s" in speed_lines[0]
    setup_s = p3["machine_groups"][0]["setup_s"]
    expected = billing.charge(setup_s + 7200, billing.terms_for(cat.resolve("p3.2xlarge", region="us-east-1")))
    assert Decimal(p3["cost_exact_jpy"]) == expected.quantize(Decimal("0.01"))
    # p3dn.24xlarge: 1,562.5 MB/s per GPU: not bound, the one job runs its 3,600 s
    assert p3dn["machine_groups"][0]["jobs_s_max"] == 3600
    assert not any("feed-bound" in a for a in p3dn["assumptions"])
    # p5.4xlarge: no network figure in catalog/links.csv: not limited, said once
    p5 = plans["p5.4xlarge"]
    unknown = [a for a in p5["assumptions"] if "feed limit by network not checked: the catalog gives no network"
               " bandwidth for p5.4xlarge (catalog/links.csv; 625 MB per epoch read from object storage)" in a]
    assert len(unknown) == 1


def test_a_mixed_fleet_slows_each_machine_for_the_jobs_it_runs_at_the_time():
    work = _four_gpu_jobs([3600, 7200, 7200, 7200], {2: "1.1", 3: "1.2", 4: "1.25"})
    four = sp.offer(name="four", gpu="K80", gpus=4, memory="12", price="3600", granularity=1, minimum=0)
    one = sp.offer(name="one", gpu="K80", gpus=1, memory="12", price="1000", granularity=1, minimum=0)
    cat = sp.catalog([four, one], {"azure": sp.facts(setup_min=0, quota=1000)})
    plans = optimizer.estimate(work, Setting(catalog=cat)).plans
    alone = next(p for p in plans if p.label == "1x four")
    # all four on one machine: 4 share (1.25x) until the 1 h job ends at 4,500 s, then 3 (1.2x) for 1 h: 8,820 s
    assert alone.wall_s == 4500 + 4320
    mix = next(p for p in plans if p.label == "1x one + 1x four" and p.setup == "scratch")
    four_vm = next(v for v in mix.vms if v.offer.name == "four")
    # 2 h + 2 h + 1 h on the 4-GPU machine: 3 share until 4,320 s, then 2 (1.1x) for the hour left: 8,280 s
    assert (sorted(four_vm.jobs), four_vm.jobs_s) == (["j0", "j2", "j3"], 4320 + 3960)
    assert mix.wall_s == 8280
