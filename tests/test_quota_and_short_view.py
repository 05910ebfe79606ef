"""Quota as an input and the short default view (issue 19): a plan says in one short line the
quota it needs where the limit is unknown or over a known default, how to raise it once at the
end; a known quota (--quota) bounds the pick; `estimate` fits a screen, --all lists every row."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.usefixtures("issue_19_regions")


def _json(cli, *args):
    r = cli("estimate", *args, "--format", "json")
    assert r.code == 0, r.err
    return json.loads(r.out)


def _quota_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("  warning: needs ")]


def test_the_pick_states_the_aws_quota_it_needs_once_in_a_short_line(cli):
    r = cli("estimate", "--videos", "40", "--deadline", "6h")
    assert r.code == 0, r.err
    rec = _json(cli, "--videos", "40", "--deadline", "6h")["recommended"]
    assert rec["provider"] == "aws"
    unknown = [w for w in rec["warned_by"] if w["code"] == "quota_unknown"]
    assert unknown == [{"code": "quota_unknown", "provider": "aws", "family": "L-DB2E81BA",
                        "name": "Running On-Demand G and VT instances", "need": rec["peak_vcpus"], "unit": "vCPUs",
                        "how_to_raise": unknown[0]["how_to_raise"]}]
    line = (f"  warning: needs {rec['peak_vcpus']} vCPUs of aws L-DB2E81BA (Running On-Demand G and VT instances);"
            " your quota is unknown: `gpuplan check aws` reads it")
    assert r.out.count(line) == 1
    assert all(len(q) <= 240 for q in _quota_lines(r.out))
    raise_lines = [x for x in r.out.splitlines() if x.startswith("  to raise a quota on aws: ")]
    assert len(raise_lines) == 1 and "--quota-code L-DB2E81BA" in raise_lines[0]


def test_azure_quota_lines_are_short_and_said_once(cli):
    r = cli("estimate", "--workload", "yolo-fhd", "--spot")
    assert r.code == 0, r.err
    lines = _quota_lines(r.out)
    assert lines and all(len(q) <= 240 for q in lines) and len(lines) == len(set(lines))
    assert "over its default quota of 0: `gpuplan check azure` reads yours" in r.out
    assert sum(x.startswith("  to raise a quota on azure: ") for x in r.out.splitlines()) == 1
    assert "raise it:" not in r.out  # the how-to is no longer in every plan's line


def test_a_known_quota_bounds_the_pick_and_drops_the_unknown_line(cli):
    data = _json(cli, "--videos", "40", "--quota", "aws:L-DB2E81BA=64")
    rec = data["recommended"]
    assert rec["provider"] != "aws" or rec["peak_vcpus"] <= 64
    assert not [w for w in rec["warned_by"] if w["code"] == "quota_unknown" and w["provider"] == "aws"]
    aws = [p for p in data["plans"] if p["provider"] == "aws" and p["machine_groups"]]
    over = [p for p in aws if p["instance_type"].startswith("g") and p["peak_vcpus"] > 64]
    assert over and all(not p["feasible"] and "family_quota" in [x["code"] for x in p["excluded_by"]] for p in over)
    # the P family's quota is still unknown: its plans say so
    p5 = [p for p in aws if p["instance_type"].startswith("p5") and p["feasible"]]
    assert p5 and all(any(w["code"] == "quota_unknown" and w["family"] == "L-417A185B" for w in p["warned_by"])
                      for p in p5)


def test_a_tie_prefers_an_unknown_quota_to_one_known_to_need_an_increase(cli, gpuplan_home):
    # one video: g4dn.xlarge (AWS, quota unknown) and NC4as_T4_v3 (Azure, default family quota 0)
    # tie; g5.xlarge, cheaper than both on the T4's published training figure (issue 31), priced out
    (gpuplan_home / "config").mkdir(parents=True, exist_ok=True)
    (gpuplan_home / "config" / "prices.yaml").write_text(
        "offers:\n  - {provider: aws, name: g5.xlarge, region: us-east-1, price: 100}\n")
    rec = _json(cli, "--videos", "1")["recommended"]
    assert rec["instance_type"] == "g4dn.xlarge"


def test_estimate_videos_4_fits_a_screen_and_all_lists_every_row(cli, gpuplan_home):
    config = gpuplan_home / "config" / "config.yaml"
    regions = config.read_text()
    config.unlink()  # the screen as a new user sees it: every region, Sakura DOK included
    r = cli("estimate", "--videos", "4")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert len(lines) <= 40 and max(map(len, lines)) <= 160, (len(lines), max(map(len, lines)))
    rows = [x for x in lines if x[:1] in ("→", "·", " ") and ("yes" in x or "no:" in x) and "¥" in x]
    # every provider's best plan, the pick and the plans the why and faster lines name are on screen
    for provider in ("aws", "azure", "sakura"):
        assert any(f" {provider} " in x for x in rows), provider
    # the excluded plans folded into one line per reason
    excluded = [x for x in lines if " plans excluded: " in x]
    assert len(excluded) == 1 and "retired 9" in excluded[0] and "no:" not in r.out
    assert "Assumptions (" in r.out
    # in the regions, the faster plan the faster line names is on screen too
    config.write_text(regions)
    data = _json(cli, "--videos", "4")
    faster = data["faster"]
    assert faster.startswith("for +¥15 (5.9 %), 4x g5.xlarge aws us-east-1 finishes in 47 min")  # with consumption tax
    shown = cli("estimate", "--videos", "4").out.splitlines()
    # its row in the table's one unit for every duration (the longest figure, 4:51 h, needs h:mm)
    assert any(x.startswith("·  4x g5.xlarge ") and " 0:47 h " in x for x in shown)
    assert "speed on A10G" in "\n".join(shown)
    everything = cli("estimate", "--videos", "4", "--all").out.splitlines()
    assert len(everything) > 100 and any("no: Standard_NC6 retired on 2023-09-06" in x for x in everything)


def test_frontier_marks_are_on_rows_no_shown_row_dominates(cli):
    data = _json(cli, "--videos", "4")
    front = data["pareto"]
    for p in front:  # in whole yen as shown: no other frontier plan is as cheap and as fast
        assert not [q for q in front if q is not p and q["cost_jpy"] <= p["cost_jpy"]
                    and q["wall_minutes"] <= p["wall_minutes"]]


def test_quotas_read_by_check_are_stored_with_their_date_and_bound_every_estimate(moto_aws, gpuplan_home, cli):
    import yaml

    cfg = gpuplan_home / "config"
    cfg.mkdir(parents=True, exist_ok=True)
    # moto's Service Quotas does not know EC2: the provider takes the limit from config, as `check` shows
    (cfg / "config.yaml").write_text(yaml.safe_dump({"providers": {"aws": {"quota_vcpus": "64"}}}))
    r = cli("check", "aws", "--format", "json")
    assert r.code == 0, r.err
    data = _json(cli, "--videos", "40", "--deadline", "6h")
    rec = data["recommended"]
    assert not (rec["provider"] == "aws" and rec["region"] == "us-east-1" and rec["peak_vcpus"] > 64)
    east = [p for p in data["plans"] if p["provider"] == "aws" and p["region"] == "us-east-1" and p["machine_groups"]]
    over = [p for p in east if p["peak_vcpus"] > 64]
    assert over and all(not p["feasible"] for p in over)
    read = [x for p in over for x in p["excluded_by"] if x["code"] == "family_quota"]
    assert read and all(x["limit"] == 64 and x["read_at"][:4].isdigit() for x in read)
    assert "(read by gpuplan check on " in over[0]["reason"]
    # known there: no "unknown" line for us-east-1; another region's quota is still unknown
    assert not [w for p in east for w in p["warned_by"] if w["code"] == "quota_unknown"]
    tokyo = [p for p in data["plans"] if p["provider"] == "aws" and p["region"] == "ap-northeast-1" and p["feasible"]]
    assert tokyo and all(any(w["code"] == "quota_unknown" for w in p["warned_by"]) for p in tokyo)


@pytest.mark.parametrize("args", [("--videos", "4", "--as-of", "2017-08", "--objective", "cost"), ("--videos", "4"),
                                  ("--videos", "1", "--objective", "cost"), ("--videos", "40", "--deadline", "6h")])
def test_every_plan_the_why_line_names_is_on_screen(cli, args):
    import re

    r = cli("estimate", *args)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    why = " ".join(line.strip() for line in lines[lines.index(next(x for x in lines if x.startswith("  why: "))):]
                   if not line.startswith(("  optimal:",)))  # the why line, wrapped or not
    why = why.split("optimal:")[0]
    rows = [x for x in lines if re.match(r"^[→· ]  \S", x) and " yes" in x]
    for fleet, setup in re.findall(r"((?:\d+x [\w.-]+(?: \+ )?)+) from (an image|scratch)", why):
        mode = "image" if setup == "an image" else "scratch"
        assert any(re.match(rf"^[→· ]  {re.escape(fleet)} +\S+ \S+ +{mode} ", x) for x in rows), (fleet, mode)
    for fleet in re.findall(r"over the cheapest, ((?:\d+x [\w.-]+(?: \+ )?)+) \(", why):
        assert any(re.match(rf"^[→· ]  {re.escape(fleet)} ", x) for x in rows), fleet


def test_a_pick_on_the_generic_speed_table_names_the_measurement_that_would_settle_it(cli, tmp_path):
    r = cli("estimate", "--videos", "4")
    assert r.code == 0, r.err
    text = " ".join(r.out.split())  # the line may wrap
    # the pick's yen range overlaps its rivals': one campaign command, on the settle line, over the pick's
    # offer and the overlapping plans' unmeasured GPUs; the speed line points to it instead of naming another
    assert ("speed: A10G from the generic cnn-train table, not measured for colorize-hd (field report A: such a figure"
            " put a GTX 1080 Ti 4.1x ahead of a K80 half it only matched); measure it: the campaign on the settle line"
            " below") in text
    settle = text.split(" settle: ")[1]
    assert "`gpuplan bench colorize --on aws:g5.xlarge@us-east-1," in settle and "would settle it" in settle
    assert text.count("gpuplan bench colorize --on") == 1
    # report A's pick runs on the reference GPU the workload was timed on: nothing to settle
    assert "speed: " not in cli("estimate", "--videos", "4", "--as-of", "2017-08").out
    # a workload bench cannot run: time one job on that GPU
    f = tmp_path / "w.yaml"
    f.write_text("name: mine\nreference_gpu: T4\njobs:\n  - {count: 3, minutes: 30}\n")
    out = " ".join(cli("estimate", "--workload", str(f), "--provider", "aws").out.split())
    assert "not measured for mine" in out and "time one job on one A10G and give it as `speed:` in the workload" in out


def test_a_dok_pick_is_not_told_to_be_provisioned_for_its_measurement(cli, gpuplan_home):
    (gpuplan_home / "config" / "config.yaml").unlink()  # every region: a DOK task queue is the pick
    r = cli("estimate", "--videos", "4")
    assert r.code == 0, r.err
    speed = " ".join(" ".join(x.split()) for x in r.out.splitlines() if x.startswith(("  speed:", "    ")))
    assert "dok-v100-32gb" in r.out.split("Recommended:")[1].splitlines()[0]
    # `provision` refuses DOK task plans: the measurement runs inside a task (or on any V100) instead
    assert "gpuplan provision sakura:dok" not in speed
    assert "gpuplan bench colorize --local --out dok-v100-32gb.yaml" in speed and "gpuplan dok submit" in speed
