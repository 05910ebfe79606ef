"""A launch that the cloud refuses still finishes its batch (issue 44), end to end.

The cloud is moto in server mode, reached by gpuplan's own AWS provider (boto3), with capacity
refusals injected at RunInstances as EC2 words them (support.aws_moto.refuse_in_zones). moto's
instances cannot run anything, so the machines behind them are loopback sshd hosts, as in
tests/test_spot_notice.py: the n-th instance that comes up gets the n-th host's address and host
key (login root, the cluster's key authorized there), and real Ray runs on those hosts.

- Refused in every zone of us-east-1, `launch -y` takes the next plan within max_yen (1x
  g5.xlarge refused: 1x g4dn.xlarge, from scratch), finishes the batch on it, fetches its outputs
  and tears down; nothing of the refused pick was bought.
- A partial grant (us-east-1a grants 1 of 2 g5.xlarge, us-east-1b the other) ends in a
  finished batch on the 2x fleet the output names, each machine billed from its own start.

The batches' picks are checked first without hosts (test_the_picks_the_launches_rest_on), so a
catalog change that moves them says so plainly instead of failing mid-launch.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from support.aws_moto import REGION, loopback_aws_class, refuse_in_zones

ITEMS = ["clip-a.mp4", "clip-b.mp4", "clip-c.mp4", "clip-d.mp4"]
COMMAND = "sh -c 'echo done {item} on $GPUPLAN_NODE > $GPUPLAN_OUTPUT_DIR/result.txt'"
NEXT_PLAN = {"objective": "cost", "max_yen": 2000}  # 1x g5.xlarge; refused: 1x g4dn.xlarge
PARTIAL = {"gpus": "A10G", "deadline": "40m"}  # for two items: 2x g5.xlarge from scratch
PARTIAL_ITEMS = ITEMS[:2]  # two machines, not four: two Ray nodes fewer to start (each several seconds of CPU)


def _batch(folder: Path, extra: dict, items: list[str] = ITEMS) -> Path:
    """batch.yaml (cluster `batch`) for the items (the four, unless given) on AWS in us-east-1, no
    playbooks (the loopback hosts are set up already), each item's result in its outputs folder."""
    (folder / "videos.txt").write_text("".join(f"{i}\n" for i in items))
    path = folder / "batch.yaml"
    path.write_text(yaml.safe_dump({"workload": "colorize-hd", "items": "videos.txt", "infra": ["aws"],
                                    "region": REGION, "playbooks": [], "command": COMMAND, "outputs": "results",
                                    **extra}, sort_keys=False))
    return path


def _picks(path: Path, without: tuple[str, ...] = ()):
    """The launch's pick for the batch file, as launch plans it (`without`: offers left out)."""
    from gpuplan import batchfile
    from gpuplan.cli.estimate import plan_batch
    from gpuplan.run import launcher

    batch = batchfile.read(path, {})
    items = (path.parent / "videos.txt").read_text().split()
    rec = plan_batch(batch, launcher.workload_for(batch, items), without=without).recommended
    return None if rec is None else ([(o.name, n) for o, n in rec.fleet], rec.setup, rec.cost)


def test_the_picks_the_launches_rest_on(tmp_path, gpuplan_home):
    first = _picks(_batch(tmp_path, NEXT_PLAN))
    assert first[:2] == ([("g5.xlarge", 1)], "scratch")
    nxt = _picks(tmp_path / "batch.yaml", without=(f"aws:g5.xlarge@{REGION}",))
    assert nxt[:2] == ([("g4dn.xlarge", 1)], "scratch") and nxt[2] <= NEXT_PLAN["max_yen"]
    assert _picks(_batch(tmp_path, PARTIAL, PARTIAL_ITEMS))[:2] == ([("g5.xlarge", 2)], "scratch")


def loopback_aws(hosts, refusals: dict[str, dict[str, int]]):
    """A factory for gpuplan's AWS provider, talking to moto, whose machines are `hosts` (the n-th
    instance that comes up gets the n-th host), and whose RunInstances of each size in
    `refusals` is refused in the zones given (refuse_in_zones: that many granted first)."""
    LoopbackAws = loopback_aws_class(hosts)

    def factory(conf):
        prov = LoopbackAws(conf)
        for size, zones in refusals.items():
            refuse_in_zones(prov, size, zones(prov) if callable(zones) else zones)
        return prov

    return factory


@pytest.fixture
def aws_hosts(tmp_path, moto_aws, gpuplan_home, monkeypatch):
    """aws_hosts(n): `n` loopback hosts to stand behind moto's instances, AWS configured for moto;
    Ray from the tests' venv. Stopped (Ray, sshd) and the provider override dropped at the end."""
    from gpuplan import paths
    from support.ray_env import free_port_range, ray_venv, stop_ray
    from support.sshd import start_hosts, stop_hosts

    monkeypatch.setenv("GPUPLAN_RAY_VENV", str(ray_venv()))
    monkeypatch.setenv("GPUPLAN_RAY_OBJECT_STORE_MB", "80")
    monkeypatch.setenv("GPUPLAN_POLL_S", "0.3")
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.chdir(tmp_path)
    paths.config_dir().mkdir(parents=True, exist_ok=True)
    (paths.config_dir() / "config.yaml").write_text(yaml.safe_dump({"providers": {"aws": {
        "ami": moto_aws.ami, "quota_vcpus": "64", "ssh_cidr": "198.51.100.7", "poll_s": "0.01",
        "max_workers": "1"}}}))  # one RunInstances at a time: a zone's grants are counted in order
    started: list[tuple[list, int, int]] = []

    def up(n: int) -> list:
        port = free_port_range(n)
        monkeypatch.setenv("GPUPLAN_RAY_PORT", str(port))
        hosts = start_hosts(n, tmp_path)
        started.append((hosts, port, n))
        return hosts

    try:
        yield up
    finally:
        from gpuplan.fleet import provider as registry

        registry.override("aws", None)
        for hosts, port, n in started:
            stop_ray("batch-", port, n)
            stop_hosts(hosts)


def _live(ec2) -> list[dict]:
    return [i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]
            if i["State"]["Name"] != "terminated"]


@pytest.mark.sshd
def test_refused_in_every_zone_launch_finishes_the_batch_on_the_next_plan_within_max_yen(
        aws_hosts, moto_aws, cli, tmp_path):
    from gpuplan import paths
    from gpuplan.fleet import provider as registry
    from gpuplan.store.state import State
    from support.ray_env import tagged_pids

    path = _batch(tmp_path, NEXT_PLAN)
    assert _picks(path)[0] == [("g5.xlarge", 1)]  # test_the_picks_the_launches_rest_on says why
    seen_zones: list[str] = []

    def every_zone(prov):
        seen_zones[:] = prov.zones(REGION, "g5.xlarge")
        return {z: 0 for z in seen_zones}

    registry.override("aws", loopback_aws(aws_hosts(1), {"g5.xlarge": every_zone}))
    r = cli("launch", str(path), "-y")
    assert r.code == 0, r.out + r.err
    err, out = " ".join(r.err.split()), " ".join(r.out.split())
    # each zone's refusal in one line, then the next plan in one line, within max_yen
    assert f"{seen_zones[0]}: no g5.xlarge capacity (InsufficientInstanceCapacity); trying {seen_zones[1]}" in err, err
    assert f"{seen_zones[-1]}: no g5.xlarge capacity (InsufficientInstanceCapacity); no zone of {REGION} left" \
           " to try" in err, err
    assert (f"1x aws:g5.xlarge refused in every zone of {REGION}; the next plan: 1x aws:g4dn.xlarge in {REGION},"
            " ¥") in err, err
    # the batch ran and finished on the next plan's machine, its outputs fetched, the cluster torn down
    assert "submitted: 4 items on 1x aws:g4dn.xlarge" in out, out
    assert "4 ok of 4 items" in out, out
    got = sorted(p.parent.name for p in (tmp_path / "results").glob("*/result.txt"))
    assert got == ["0000-clip-a.mp4", "0001-clip-b.mp4", "0002-clip-c.mp4", "0003-clip-d.mp4"]
    assert (tmp_path / "results" / "0001-clip-b.mp4" / "result.txt").read_text().startswith("done clip-b.mp4 on batch-")
    assert "cluster batch torn down" in out, out
    # nothing of the refused pick was bought or billed; the next plan's machine billed, then stopped
    state = State(paths.state_db())
    rows = [x for x in state.ledger_rows() if x["cluster"] == "batch"]
    assert [x["size"] for x in rows] == ["g4dn.xlarge"] and rows[0]["stopped_at"] is not None
    assert [x.target for x in state.journal("batch") if x.op == "zone-refused"] == seen_zones
    job = state.jobs("batch")[-1]
    assert (job.state, job.options["launch"]["cluster"]) == ("succeeded", "batch")
    # the plan the launch kept is the next plan's (its batch's calibration compares with it)
    assert state.cluster("batch").size == "g4dn.xlarge" and state.cluster("batch").status == "gone"
    state.close()
    assert _live(moto_aws.ec2()) == [] and moto_aws.held() == {}
    assert tagged_pids("batch-") == []


@pytest.mark.sshd
def test_a_partial_grant_finishes_the_batch_on_the_fleet_it_names_billed_as_held(aws_hosts, moto_aws, cli, tmp_path):
    from gpuplan import paths
    from gpuplan.fleet import provider as registry
    from gpuplan.market import catalog
    from gpuplan.store.state import State

    path = _batch(tmp_path, PARTIAL, PARTIAL_ITEMS)
    assert _picks(path)[0] == [("g5.xlarge", 2)]  # test_the_picks_the_launches_rest_on says why
    zones: list[str] = []

    def first_grants_one(prov):
        zones[:] = prov.zones(REGION, "g5.xlarge")
        return {zones[0]: 1}  # us-east-1a: one granted, then no capacity; the next zone grants the other

    registry.override("aws", loopback_aws(aws_hosts(2), {"g5.xlarge": first_grants_one}))
    r = cli("launch", str(path), "-y")
    assert r.code == 0, r.out + r.err
    err, out = " ".join(r.err.split()), " ".join(r.out.split())
    assert (f"{zones[0]}: 1 of 2 g5.xlarge granted, no capacity for 1 more (InsufficientInstanceCapacity);"
            f" trying {zones[1]} for 1") in err, err
    assert "the next plan" not in err  # the region gave both: no other plan
    assert "submitted: 2 items on 2x aws:g5.xlarge" in out, out  # the fleet, named
    assert "2 ok of 2 items" in out, out
    assert len(list((tmp_path / "results").glob("*/result.txt"))) == 2
    state = State(paths.state_db())
    job = state.jobs("batch")[-1]
    # the driver hands nothing out before every slot is up: the two items go to the two machines at once
    assert {it.node for it in state.job_items(job.id)} == {"batch-0", "batch-1"}
    # billed as held: one ledger row a machine, at the catalog's price for g5.xlarge, each from its
    # own start to its own stop (the two granted first are not billed from the others' start)
    price = catalog.load().resolve("aws:g5.xlarge", region=REGION).price_jpy_per_hour
    rows = sorted((x for x in state.ledger_rows() if x["cluster"] == "batch"), key=lambda x: x["node"])
    assert [x["node"] for x in rows] == ["batch-0", "batch-1"]
    assert all(x["size"] == "g5.xlarge" and Decimal(x["price_jpy_per_hour"]) == price for x in rows)
    assert all(x["stopped_at"] is not None and x["stopped_at"] > x["started_at"] for x in rows)
    [refused] = [x for x in state.journal("batch") if x.op == "zone-refused"]
    assert refused.target == zones[0] and "granted=1/2" in refused.detail
    state.close()
    assert "cluster batch torn down" in out, out
    assert _live(moto_aws.ec2()) == [] and moto_aws.held() == {}
