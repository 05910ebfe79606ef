"""`provision --plan` follows a next plan (issue 44): a saved plan keeps what it was planned with
(its workload, settings, max_yen and failover: planning/saved_plan.planned_with), so where every
zone of the pick's region refuses it, the workload is planned again from them without the
refused offer; the next plan is saved beside the plan, the budget reservation made to hold its
spend, said in one line, asked about once without -y, and created. Against moto in server mode,
refusals injected at RunInstances as EC2 words them."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
import yaml

from support.aws_moto import REGION, refuse_in_zones
from support.cli import Terminal

OWNER = "e2e-owner"


@pytest.fixture
def aws(moto_aws, gpuplan_home, monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.chdir(tmp_path)
    cfg = gpuplan_home / "config"
    cfg.mkdir(parents=True)
    (cfg / "config.yaml").write_text(yaml.safe_dump({"owner": OWNER, "providers": {"aws": {
        "ami": moto_aws.ami, "quota_vcpus": "64", "ssh_cidr": "198.51.100.7", "poll_s": "0.01"}}}))
    yield moto_aws


@pytest.fixture
def refusing():
    """refusing(*sizes): every zone of us-east-1 refuses those sizes (InsufficientInstanceCapacity)."""
    from gpuplan.fleet import provider as registry
    from gpuplan.providers.aws import AwsProvider

    refused: list[str] = []

    def factory(conf):
        prov = AwsProvider(conf)
        for size in refused:
            refuse_in_zones(prov, size, {z: 0 for z in prov.zones(REGION, size)})
        return prov

    registry.override("aws", factory)
    yield lambda *sizes: refused.extend(sizes)
    registry.override("aws", None)


def live_types(ec2) -> list[str]:
    return sorted(i["InstanceType"] for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]
                  if i["State"]["Name"] != "terminated")


def saved(cli, *extra: str) -> dict:
    r = cli("estimate", "--videos", "1", "--provider", "aws", "--region", REGION, "--save", "plan.json", *extra)
    assert r.code == 0, r.err
    return json.loads(open("plan.json").read())


def test_a_saved_plan_keeps_what_it_was_planned_with(aws, cli):
    from gpuplan.planning import saved_plan, workloads

    plan = saved(cli, "--max-yen-per-hour", "5000")
    pw = plan["planned_with"]
    assert pw["workload"]["videos"] == 1 and pw["workload"]["jobs"] == [["video-1", "1000"]]
    assert {k: pw["settings"][k] for k in ("provider", "region", "max_yen_per_hour", "tax", "objective")} == {
        "provider": "aws", "region": REGION, "max_yen_per_hour": "5000", "tax": "included", "objective": "balanced"}
    work, settings, max_yen, policy = saved_plan.load("plan.json").replan_inputs()
    assert work == workloads.videos(1) and settings["region"] == REGION and max_yen is None and policy == {}


def test_provision_plan_refused_in_every_zone_takes_the_next_plan_within_the_budget(aws, cli, refusing, tmp_path):
    from gpuplan import team
    from gpuplan.budget import priced
    from gpuplan.market import catalog
    from gpuplan.market import tax as taxes
    from gpuplan.store.state import State

    first = saved(cli)["instance_type"]
    assert cli("budget", "set", team.current().project, "100000").code == 0
    refusing(first)
    r = cli("provision", "--yes", "--plan", "plan.json", "--name", "e2e", "--no-bootstrap", "--ttl", "4h")
    assert r.code == 0, r.err
    nxt = json.loads((tmp_path / "plan.next.json").read_text())
    size, n = nxt["instance_type"], nxt["count"]
    assert size != first and nxt["region"] == REGION and nxt["planned_with"] == json.loads(
        (tmp_path / "plan.json").read_text())["planned_with"]  # it keeps what it was planned with, for its own next
    said = (f"1x aws:{first} in {REGION} refused in every zone; the next plan: {n}x aws:{size} in {REGION},"
            f" ¥{Decimal(nxt['cost_exact_jpy']):,.0f} for the batch (saved to plan.next.json)")
    assert said in r.err and "Traceback" not in r.err, r.err
    assert live_types(aws.ec2()) == [size] * n  # the next plan's machines, nothing of the refused one
    state = State.open_default()
    assert [x.target for x in state.journal() if x.op == "zone-refused"] == \
        aws.provider().zones(REGION, first)  # each zone of the region refused it once
    # the budget holds the next plan's machines for their 4 h TTL, tax included (hand arithmetic)
    offer = catalog.load().resolve(f"aws:{size}", region=REGION)
    per_hour = taxes.on_basis(offer.price_jpy_per_hour, offer.tax, "included")
    f = state.budget_figures(team.current().project, team.month_of(), priced)
    assert f.live == 1 and f.spent + f.committed == per_hour * n * 4  # the new machines' first seconds spent of it
    assert cli("teardown", "--yes", "e2e").code == 0
    assert aws.held() == {}


def test_without_yes_the_next_plan_is_asked_about_once(aws, cli, refusing, tmp_path, monkeypatch):
    first = saved(cli)["instance_type"]
    refusing(first)
    monkeypatch.setattr("sys.stdin", Terminal("y\nn\n"))  # yes to the pick, no to the next plan
    r = cli("provision", "--plan", "plan.json", "--name", "e2e", "--no-bootstrap")
    assert r.code == 1, r.err
    assert r.err.count("Create these machines?") == 1 and r.err.count("Create these machines instead?") == 1
    assert "aborted: nothing was changed" in r.err
    assert not (tmp_path / "plan.next.json").exists()  # a next plan not taken leaves no file
    assert live_types(aws.ec2()) == [] and aws.held() == {}


def test_refused_everywhere_within_the_plan_s_deadline_and_rate_it_stops_in_one_line_leaving_nothing(
        aws, cli, refusing, tmp_path):
    """Planned with --deadline 40m and --max-yen-per-hour 176, only 1x g5.xlarge (37 min, ¥175.05/h)
    fits; refused, no next plan does (1x g4dn.xlarge, ¥91.53/h, takes 1:11 h; 1x g6e.2xlarge, 29
    min, costs more an hour): the plan's own deadline and rate are kept, not forgotten."""
    plan = saved(cli, "--deadline", "40m", "--max-yen-per-hour", "176")
    first = plan["instance_type"]
    assert first == "g5.xlarge" and plan["planned_with"]["settings"]["deadline"] == "40m"
    refusing(first)
    r = cli("provision", "--yes", "--plan", "plan.json", "--name", "e2e", "--no-bootstrap")
    assert r.code == 3
    [line] = [x for x in r.err.splitlines() if "no next plan" in x]
    assert f"every zone of {REGION} refused" in line
    assert line.endswith("; no next plan within the plan's max_yen, max_yen_per_hour, deadline and failover (tried"
                         f" 1x aws:{first} in {REGION})")
    assert "Traceback" not in r.err and "the next plan:" not in r.err
    assert not (tmp_path / "plan.next.json").exists()
    assert live_types(aws.ec2()) == [] and aws.held() == {}


def test_a_plan_that_does_not_say_what_it_was_planned_with_stops_in_one_line(aws, cli, refusing, tmp_path):
    plan = saved(cli)
    del plan["planned_with"]  # as an older gpuplan wrote it
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    refusing(plan["instance_type"])
    r = cli("provision", "--yes", "--plan", "plan.json", "--name", "e2e", "--no-bootstrap")
    assert r.code == 3
    [line] = [x for x in r.err.splitlines() if "no next plan" in x]
    assert line.endswith("; no next plan: plan file plan.json does not say what it was planned with (written by an"
                         " older gpuplan, or by hand), so no next plan can be made from it; write it with"
                         " `gpuplan estimate ... --save`")
    assert live_types(aws.ec2()) == [] and aws.held() == {}


def test_a_changed_workload_file_is_not_planned_again_as_if_it_were_the_same(aws, cli, tmp_path):
    from gpuplan.errors import UsageError
    from gpuplan.planning import saved_plan

    (tmp_path / "w.yaml").write_text(_workload_yaml(1000))
    r = cli("estimate", "--workload", "w.yaml", "--provider", "aws", "--region", REGION, "--save", "plan.json")
    assert r.code == 0, r.err
    work, *_ = saved_plan.load(tmp_path / "plan.json").replan_inputs()
    assert [j.units for j in work.jobs] == [Decimal(1000)] * 2
    (tmp_path / "w.yaml").write_text(_workload_yaml(1000).replace("seconds_per_unit: 7.2", "seconds_per_unit: 9.0"))
    with pytest.raises(UsageError) as err:
        saved_plan.load(tmp_path / "plan.json").replan_inputs()
    assert "its workload (w.yaml) is no longer what was planned (its file or profile changed since)" in str(err.value)


def _workload_yaml(units: int) -> str:
    from gpuplan.planning import workloads

    base = (workloads._root() / "colorize-hd.yaml").read_text()
    job = "  - {name: video, count: 1, units: 1000}"
    assert job in base
    return base.replace(job, f"  - {{name: video, count: 2, units: {units}}}")


# --- --recover's replacements: another zone of the cluster's region, no other region -------------


def test_a_replacement_refused_in_a_zone_is_bought_in_another_zone_of_the_cluster_s_region(aws, cli, monkeypatch):
    """recover.replace_node asks the provider for one machine in the cluster's region: the zones
    are tried in turn there as for any create; every zone refusing, the refusal says so and
    nothing is left of the attempt. (No other region: the replacement joins its cluster's head
    over the region's private network; docs/batch.md says so.) Ray is not started here."""
    from gpuplan.errors import CapacityUnavailable
    from gpuplan.fleet import provider as registry
    from gpuplan.providers.aws import AwsProvider
    from gpuplan.run import recover
    from gpuplan.run.ray import engine
    from gpuplan.store.state import State

    assert cli("provision", "--yes", "aws:g4dn.xlarge", "x1", "--name", "c", "--no-bootstrap").code == 0
    ec2 = aws.ec2()
    zones = aws.provider().zones(REGION, "g4dn.xlarge")
    refused: dict[str, int] = {zones[0]: 0}

    def factory(conf):
        prov = AwsProvider(conf)
        refuse_in_zones(prov, "g4dn.xlarge", refused)
        return prov

    registry.override("aws", factory)
    monkeypatch.setattr(engine, "ensure_up", lambda *a, **k: None)  # the new node would join Ray here
    try:
        state = State.open_default()
        new = recover.replace_node(state, "c", "c-0")
        [inst] = [i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]
                  if i["State"]["Name"] != "terminated" and {"Key": "gpuplan-node", "Value": new} in i["Tags"]]
        assert inst["Placement"]["AvailabilityZone"] == zones[1] and inst["InstanceType"] == "g4dn.xlarge"
        # every zone refusing: the refusal says the region was tried through, its node "failed", nothing made
        refused.update({z: 0 for z in zones})
        with pytest.raises(CapacityUnavailable) as err:
            recover.replace_node(state, "c", new)
        assert f"every zone of {REGION} refused" in str(err.value)
        status = {n.name: n.status for n in state.nodes("c")}
        assert status == {"c-0": "lost", "c-1": "lost", "c-2": "failed"}
        assert sorted(live_types(ec2)) == ["g4dn.xlarge", "g4dn.xlarge"]  # c-0 and c-1, nothing of the refused one
    finally:
        registry.override("aws", None)
    assert cli("teardown", "--yes", "c").code == 0
    assert aws.held() == {}
