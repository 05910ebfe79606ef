"""`--dry-run` changes nothing, for every command that has it.

The commands are found by walking the CLI itself (click introspection), so a command that
gains --dry-run without a case here fails the test. Each case runs against a live cluster of
two machines on moto and a built image, and afterwards every instance, image and state row is
as it was."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest
import yaml

from support.aws_moto import REGION

# command path -> the invocations that must change nothing (each gets --dry-run as written)
CASES = {
    "provision": [["aws:g4dn.xlarge", "x2", "--name", "other", "--region", REGION, "--dry-run", "--yes"]],
    "teardown": [
        ["demo", "--dry-run", "--yes"],
        ["--all", "--dry-run", "--yes"],
        ["--all", "--images", "--dry-run", "--yes"],
        ["--sweep", "--force", "--provider", "aws", "--region", REGION, "--dry-run", "--yes"],
        ["--all", "--images", "--sweep", "--force", "--provider", "aws", "--region", REGION, "--dry-run", "--yes"],
    ],
    "image build": [["aws:g4dn.xlarge", "--name", "other-img", "--region", REGION, "--dry-run", "--yes"]],
    "bootstrap": [["demo", "--dry-run"]],
    "catalog refresh": [["--provider", "sakura", "--dry-run"]],
    "bench": [["colorize", "--on", f"aws:g4dn.xlarge@{REGION}", "--dry-run", "--yes"]],
    "launch": [["--items", str(Path(__file__).parent / "fixtures" / "launch" / "videos.txt"), "--workload", "colorize-hd",
                "--infra", "aws", "--region", REGION, "--dry-run", "--yes", "--", "echo", "{item}"]],
    "probe": [["--items", str(Path(__file__).parent / "fixtures" / "launch" / "videos.txt"), "--workload", "colorize-hd",
               "--infra", "aws", "--region", REGION, "--probe-budget", "5000", "--dry-run", "--yes", "--", "run", "{item}",
               "--epochs", "{units}"]],
}


def commands_with_dry_run() -> set[str]:
    import typer

    from gpuplan.cli import _register_commands, app

    _register_commands()
    found: set[str] = set()

    def walk(cmd, path: list[str]) -> None:
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, path + [name])
        if any("--dry-run" in getattr(p, "opts", []) for p in cmd.params):
            found.add(" ".join(path))

    walk(typer.main.get_command(app), [])
    return found


def test_every_command_with_dry_run_has_a_case():
    assert commands_with_dry_run() == set(CASES)


@pytest.fixture
def world(moto_aws, gpuplan_home, monkeypatch, cli):
    """A ready two-machine cluster `demo`, an image `img` and a stray key pair, all on moto."""
    from gpuplan.market import catalog_refresh
    from gpuplan.store.state import State
    from support.price_sources_fake import PriceSources

    monkeypatch.setattr(catalog_refresh, "new_session", PriceSources().session)
    monkeypatch.setattr(catalog_refresh, "today", lambda: date(2026, 11, 23))
    cfg = gpuplan_home / "config"
    cfg.mkdir(parents=True)
    (cfg / "config.yaml").write_text(yaml.safe_dump({"providers": {"aws": {
        "ami": moto_aws.ami, "quota_vcpus": "64", "ssh_cidr": "198.51.100.7", "poll_s": "0.01"}}}))
    r = cli("provision", "--yes", "aws:g4dn.xlarge", "x2", "--name", "demo", "--region", REGION, "--no-bootstrap")
    assert r.code == 0, r.err
    ec2 = moto_aws.ec2()
    state = State.open_default()
    [node] = [n for n in state.nodes("demo") if n.name == "demo-0"]
    image = ec2.create_image(InstanceId=node.provider_id, Name="img")["ImageId"]
    state.add_image("img", "aws", REGION, "g4dn.xlarge")
    state.update_image("img", status="ready", provider_id=image)
    # a stray of this installation, older than any grace period: a real sweep would take it
    from gpuplan.fleet import lifecycle
    from gpuplan.fleet.tags import TAG_CLUSTER, TAG_CREATED, TAG_INSTALLATION, TAG_OWNER

    ec2.create_key_pair(KeyName="stray", TagSpecifications=[{"ResourceType": "key-pair", "Tags": [
        {"Key": TAG_CLUSTER, "Value": "lost"}, {"Key": TAG_OWNER, "Value": lifecycle.owner(state)},
        {"Key": TAG_INSTALLATION, "Value": state.installation_id()}, {"Key": TAG_CREATED, "Value": "1"}]}])
    return moto_aws, state


def snapshot(moto_aws, state, home) -> dict:
    ec2 = moto_aws.ec2()
    return {
        "instances": sorted((i["InstanceId"], i["State"]["Name"]) for r in ec2.describe_instances()["Reservations"]
                            for i in r["Instances"]),
        "images": sorted(i["ImageId"] for i in ec2.describe_images(Owners=["self"])["Images"]),
        "keys": sorted(k["KeyName"] for k in ec2.describe_key_pairs()["KeyPairs"]),
        "groups": sorted(g["GroupId"] for g in ec2.describe_security_groups()["SecurityGroups"]),
        "clusters": [(c.name, c.status) for c in state.clusters(include_gone=True)],
        "nodes": [(n.name, n.status, n.provider_id) for n in state.nodes("demo")],
        "state_images": [(i.name, i.status) for i in state.images(include_deleted=True)],
        "snapshots": sorted(p.name for p in (home / "data" / "snapshots").glob("*")),
    }


@pytest.mark.parametrize("command,args", [(c, a) for c, cases in CASES.items() for a in cases],
                         ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_dry_run_changes_nothing(world, cli, gpuplan_home, command, args):
    moto_aws, state = world
    before = snapshot(moto_aws, state, gpuplan_home)
    assert len(before["instances"]) == 2 and before["images"] and "stray" in before["keys"]
    r = cli(*command.split(), *args)
    assert r.code == 0, r.err
    assert snapshot(moto_aws, state, gpuplan_home) == before
