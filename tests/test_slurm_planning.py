"""Slurm partitions in the estimate (issue 34): each partition an offer priced per GPU-hour as
slurm.yaml says (here in points), its queue wait (an assumption the user sets) counted in the
wall before its jobs and never billed; the pick weighs it against the clouds by yen and wall."""

from __future__ import annotations

import json
from decimal import Decimal

import yaml

from gpuplan import paths


def write_clusters(queue_wait: str = "2h", cost: dict | None = None, **partition) -> None:
    config = paths.config_dir()
    config.mkdir(parents=True, exist_ok=True)
    part = {"name": "gpu", "gpu": "V100", "gpus_per_node": 4, "nodes": 1, **partition}
    doc = {"clusters": [{"name": "lab", "login": {"address": "192.0.2.7", "user": "me"}, "queue_wait": queue_wait,
                         "cost": cost or {"points_per_gpu_hour": 2, "yen_per_point": 15}, "partitions": [part]}]}
    (config / "slurm.yaml").write_text(yaml.safe_dump(doc))


def estimate(cli, *args) -> dict:
    r = cli("estimate", "--videos", "4", "--format", "json", "--all", "--schedules", *args)
    assert r.code == 0, r.err
    return json.loads(r.out)


def slurm_plan(est: dict, count: int) -> dict:
    return next(p for p in est["plans"] if p["provider"] == "slurm" and p["count"] == count and p["per_gpu"] == 1)


def test_a_points_priced_partition_is_an_offer_with_its_queue_wait_in_the_wall(cli, gpuplan_home):
    write_clusters("2h")  # 2 points a GPU-hour x ¥15 a point = ¥30 a GPU-hour
    est = estimate(cli)
    four = slurm_plan(est, 4)
    assert four["instance_type"] == "lab.gpu" and four["fleet"][0]["gpu"] == "V100"
    assert Decimal(four["fleet"][0]["billing"]["price_jpy"]) == Decimal(30)
    jobs = [m["jobs_s"] for m in four["machines"]]
    assert len(jobs) == 4 and all(m["setup_s"] == 0 for m in four["machines"])
    # by hand: the wall is the 2 h wait and then the longest task; the yen are the tasks' GPU-seconds only
    assert round(four["wall_minutes"] * 60) == 7200 + max(jobs)
    assert Decimal(four["cost_exact_jpy"]) == (Decimal(sum(jobs)) * 30 / 3600).quantize(Decimal("0.01"))
    assert four["billed_minutes"] * 60 == sum(jobs)  # the wait is not billed
    said = [a for a in four["assumptions"] if a.startswith("queue wait 2:00 h on Slurm lab/gpu: an assumption")]
    assert said and "not billed" in said[0] and "queue_wait: 2h" in said[0]
    assert "points a GPU-hour" in four["note"]
    # it is the cheapest by far, and no plan is within 3 % of it: the balanced pick is the partition
    rec = est["recommended"]
    assert (rec["provider"], rec["count"]) == ("slurm", 4)
    cheapest_cloud = min(p["cost_exact_jpy"] for p in est["plans"] if p["feasible"] and p["provider"] != "slurm")
    assert Decimal(cheapest_cloud) > Decimal(rec["cost_exact_jpy"]) * Decimal("1.03")


def test_a_long_queue_loses_to_a_cloud_offer_on_a_deadline_and_a_short_one_wins(cli, gpuplan_home):
    write_clusters("2h")
    est = estimate(cli, "--deadline", "1h")
    four = slurm_plan(est, 4)
    jobs = max(m["jobs_s"] for m in four["machines"])
    assert jobs < 3600 < 7200 + jobs  # its GPUs alone would make the hour; the queue wait does not
    assert not four["feasible"] and any(e["code"] == "deadline" for e in four["excluded_by"])
    rec = est["recommended"]
    assert rec["provider"] != "slurm" and rec["wall_minutes"] <= 60
    # rent when the queue is long: the pick costs more than the partition would, and is in time
    assert Decimal(rec["cost_exact_jpy"]) > Decimal(four["cost_exact_jpy"])

    write_clusters("10m")
    est = estimate(cli, "--deadline", "1h")
    rec = est["recommended"]
    assert (rec["provider"], rec["instance_type"]) == ("slurm", "lab.gpu")
    assert round(rec["wall_minutes"] * 60) == 600 + max(m["jobs_s"] for m in rec["machines"])


def test_power_and_monthly_share_prices(cli, gpuplan_home):
    # a node of 4 GPUs drawing 1200 W: a GPU's share 300 W x the catalog's baremetal power price
    write_clusters("0", cost={"power_watts": 1200})
    est = estimate(cli)
    kwh = Decimal(next(line for line in slurm_plan(est, 1)["note"].split("; ") if "JPY/kWh" in line)
                  .split(" x ")[1].split(" JPY/kWh")[0])
    assert Decimal(slurm_plan(est, 1)["fleet"][0]["billing"]["price_jpy"]) == Decimal(1200) / 4 / 1000 * kwh
    assert any("queue wait on Slurm lab/gpu: none assumed" in a for a in slurm_plan(est, 1)["assumptions"])
    write_clusters("0", cost={"monthly_yen": 200000, "gpu_hours": 1000})  # ¥200 a GPU-hour
    assert Decimal(slurm_plan(estimate(cli), 1)["fleet"][0]["billing"]["price_jpy"]) == Decimal(200)


def test_a_bad_slurm_file_is_a_note_and_the_rest_is_planned(cli, gpuplan_home):
    write_clusters("soon")
    est = estimate(cli)
    assert not any(p["provider"] == "slurm" for p in est["plans"]) and est["recommended"] is not None
    assert any(line.startswith("slurm: its partitions are not planned:") and "queue_wait" in line
               for line in est["notes"].values())
    write_clusters("1h", cost={"points_per_gpu_hour": 1})
    est = estimate(cli)
    assert any("cost must be one of" in line for line in est["notes"].values())


def test_the_measurement_the_estimate_suggests_for_a_partition_is_one_that_works(cli, gpuplan_home):
    """Issue 41: the estimate suggested `gpuplan bench colorize --on slurm:lab.gpu@lab`, which
    failed ("unknown provider 'slurm'"). A partition is not provisioned: the bench runs inside a
    Slurm job there, and `bench --on` says so in one line."""
    write_clusters("1m")
    r = cli("estimate", "--videos", "4")
    assert r.code == 0, r.err
    said = " ".join(r.out.split())
    assert "--on slurm:" not in said
    assert ("measure it: run `srun -p gpu --gres=gpu:1 gpuplan bench colorize --local --out lab-gpu.yaml` on lab's login"
            " host (gpuplan[bench] installed there), then `--profile lab-gpu.yaml`") in said
    r = cli("bench", "colorize", "--on", "slurm:lab.gpu@lab", "-y")
    assert r.code == 2 and "unknown provider" not in r.err
    assert r.err.strip().splitlines()[-1] == (
        "gpuplan: error: bad --on 'slurm:lab.gpu@lab': gpuplan does not provision this offer's machines; run `srun -p gpu"
        " --gres=gpu:1 gpuplan bench WORKLOAD --local --out FILE.yaml` on lab's login host (gpuplan[bench] installed"
        " there), then `--profile FILE.yaml`")
