"""Issue 46, items 1 and 3: a SkyPilot task YAML and a dstack task read as a gpuplan batch
(`gpuplan convert`, `gpuplan launch --dry-run`), and the flags their users reach for: --gpus
MODEL[:N], -o json / --json, --env KEY and --env-file, status -r, and one rule for a bare
duration (refused, with the units to use). Nothing here starts a machine, Ray or a cloud."""

from __future__ import annotations

import json

import pytest
import yaml

from gpuplan import batchfile, foreign

# the shape of SkyPilot's own examples (docs.skypilot.co, reference/yaml-spec and the quickstart):
# resources with accelerators, envs, setup, run; one field (file_mounts) gpuplan has no place for
SKY = """\
name: train-resnet
resources:
  infra: aws/us-east-1
  accelerators: V100:4
  use_spot: true
workdir: .
envs:
  MODEL_SIZE: 13b
file_mounts:
  /datasets: s3://my-dataset
setup: |
  echo "Begin setup."
  pip install -r requirements.txt
run: |
  echo "Begin run."
  python train.py --size $MODEL_SIZE
"""

# the shape of dstack's task reference (dstack.ai, concepts/tasks): env with a bare name (from the
# caller's environment), commands, resources.gpu in NAME:MEMORY:COUNT form, ports (no place here)
DSTACK = """\
type: task
name: axolotl-train
image: winglian/axolotl-cloud:main-20240429-py3.11-cu121-2.2.1
env:
  - HF_TOKEN
  - WANDB_MODE=offline
commands:
  - pip install -r requirements.txt
  - accelerate launch train.py
ports:
  - 8501
spot_policy: auto
max_duration: 2h
resources:
  gpu: A100:40GB:2
"""


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def _converted(cli, path) -> tuple[dict, str]:
    r = cli("convert", str(path))
    assert r.code == 0, r.err
    return yaml.safe_load(r.out), r.out


def test_a_skypilot_task_converts_field_by_field(cli, tmp_path):
    batch, text = _converted(cli, _write(tmp_path, "sky.yaml", SKY))
    assert batch["name"] == "train-resnet" and batch["items"] == ["train-resnet"]
    assert batch["gpus"] == "V100:4" and batch["infra"] == ["aws"] and batch["region"] == "us-east-1"
    assert batch["spot"] is True and batch["env"] == {"MODEL_SIZE": "13b"} and batch["workdir"] == "."
    assert batch["setup"] == ['echo "Begin setup."\npip install -r requirements.txt']
    assert batch["command"] == ["bash", "-c", 'echo "Begin run."\npython train.py --size $MODEL_SIZE', "{item}"]
    # the block of what does not map, each field with what to do, as comments at the end
    assert "# not mapped (1):" in text
    assert "#   file_mounts: copy local files with `workdir:`" in text and "setup:" in text.split("file_mounts:")[1]
    # the printed file is a batch file gpuplan reads as it is (with a workload added)
    out = tmp_path / "out.yaml"
    out.write_text(text + "workload: colorize-hd\n")
    got = batchfile.read(out, {})
    assert got.gpus == "V100:4" and got.item_list == ("train-resnet",) and got.spot and got.setup == tuple(batch["setup"])


def test_a_dstack_task_converts_field_by_field(cli, tmp_path):
    batch, text = _converted(cli, _write(tmp_path, "train.dstack.yml", DSTACK))
    assert batch["name"] == "axolotl-train" and batch["image"].startswith("winglian/axolotl-cloud:")
    assert batch["env"] == {"WANDB_MODE": "offline"} and batch["secret_env"] == ["HF_TOKEN"]  # the bare name: the caller's
    assert batch["gpus"] == "A100:40GB:2" and batch["spot"] is True and batch["timeout"] == "2h"
    assert batch["command"] == ["bash", "-c", "pip install -r requirements.txt\naccelerate launch train.py", "{item}"]
    assert "#   ports: gpuplan opens SSH only; reach a port with `gpuplan ssh CLUSTER -- -L" in text


def test_skypilot_accelerator_forms_and_dstack_gpu_forms():
    conv = foreign.convert({"resources": {"accelerators": {"A100": 8}}, "run": "x"}, foreign.Path("t.yaml"),
                           foreign.SKYPILOT)
    assert conv.batch["gpus"] == "A100:8"
    conv = foreign.convert({"resources": {"accelerators": ["H100:8"]}, "run": "x"}, foreign.Path("t.yaml"),
                           foreign.SKYPILOT)
    assert conv.batch["gpus"] == "H100:8"
    assert foreign._dstack_gpu("24GB") == ("24GB", "")
    assert foreign._dstack_gpu({"name": "A100", "count": 2}) == ("A100:2", "")
    ask, left = foreign._dstack_gpu({"memory": "24GB..", "count": "2.."})
    assert ask == "24GB:2" and "exactly 2" in left
    ask, left = foreign._dstack_gpu("A10G,A100:1")
    assert ask == "1" and "several GPUs (A10G, A100)" in left


def test_which_file_is_which():
    assert foreign.kind_of({"items": "i.txt", "command": "x {item}", "setup": ["a"]}) == ""  # gpuplan's own
    assert foreign.kind_of({"run": "x", "resources": {}}) == foreign.SKYPILOT
    assert foreign.kind_of({"type": "task", "commands": ["x"]}) == foreign.DSTACK
    assert foreign.kind_of({"setup": "x"}) == ""  # nothing SkyPilot's alone


def test_launch_dry_run_of_a_skypilot_task_prints_the_mapping_and_plans_it_by_the_hour(cli, tmp_path):
    r = cli("launch", str(_write(tmp_path, "sky.yaml", SKY)), "--dry-run")
    assert r.code == 0, r.err
    assert "a SkyPilot task; as a gpuplan batch:" in r.out and "resources.accelerators -> gpus: V100:4" in r.out
    assert "file_mounts: copy local files" in r.out
    hourly = [ln for ln in r.out.splitlines() if "/h  1x aws:" in ln]
    assert hourly and all("(4x V100)" in ln and "us-east-1" in ln and "setup 20 min" in ln for ln in hourly)
    assert "stay unknown until a workload says its size or `gpuplan probe` times it" in r.out
    assert r.out.rstrip().endswith("dry run: nothing was created")
    # a real launch of it cannot hold a cap on an unknown total: one line, exit 2
    r = cli("launch", str(tmp_path / "sky.yaml"), "-y")
    assert r.code == 2 and "names no workload" in r.err and len(r.err.strip().splitlines()) == 1


def test_launch_dry_run_with_a_workload_plans_the_task_on_its_gpus(cli, tmp_path):
    r = cli("launch", str(_write(tmp_path, "sky.yaml", SKY)), "--dry-run", "--workload", "colorize-hd")
    assert r.code == 0, r.err
    assert "launch 1 item on 1x aws:p3.8xlarge:" in r.out and "1 setup command on every node" in r.out


def test_launch_dry_run_of_a_dstack_task(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    r = cli("launch", str(_write(tmp_path, "train.dstack.yml", DSTACK)), "--dry-run")
    assert r.code == 0, r.err
    assert "a dstack task; as a gpuplan batch:" in r.out and "resources.gpu -> gpus: A100:40GB:2" in r.out
    assert "env -> secret_env: HF_TOKEN" in r.out and "ports: gpuplan opens SSH only" in r.out
    rows = [ln for ln in r.out.splitlines() if "/h  1x " in ln]
    assert rows and all("2x A100" in ln for ln in rows)
    monkeypatch.delenv("HF_TOKEN")  # the bare name is read from the caller's environment: not set, refused
    r = cli("launch", str(tmp_path / "train.dstack.yml"), "--dry-run")
    assert r.code == 2 and "HF_TOKEN: not set in this environment" in r.err


def test_a_task_with_no_command_is_refused_in_one_line(cli, tmp_path):
    path = _write(tmp_path, "sky.yaml", "resources:\n  accelerators: T4\nsetup: echo hi\n")
    for argv in (["convert", str(path)], ["launch", str(path), "--dry-run"]):
        r = cli(*argv)
        assert r.code == 2 and "has no run: gpuplan runs a command" in r.err.strip().splitlines()[-1]


def test_estimate_gpus_picks_v100_x4_offers(cli):
    r = cli("estimate", "--videos", "4", "--gpus", "V100:4", "--format", "json", "--all")
    assert r.code == 0, r.err
    data = json.loads(r.out)
    rec = data["recommended"]
    assert rec["fleet"] and rec["instance_type"] == "p3.8xlarge"
    assert all(m["gpu"] == "V100" and m["gpus_per_machine"] == 4 for m in rec["fleet"]), rec["fleet"]
    r = cli("estimate", "--videos", "4", "--gpus", "V100:3")
    assert r.code == 2 and "--gpus V100:3: no offer has that; V100 comes 1, 2, 4, 8 to a machine" in r.err


def test_o_json_and_json_are_format_json(cli):
    base = cli("estimate", "--videos", "4", "--gpus", "T4", "--format", "json")
    assert base.code == 0, base.err
    for alias in (["-o", "json"], ["--json"]):
        r = cli("estimate", "--videos", "4", "--gpus", "T4", *alias)
        assert r.code == 0 and r.out == base.out
    assert cli("status", "--json").out == cli("status", "--format", "json").out == "[]\n"
    assert cli("status", "-r").code == 0


def test_env_file_and_env_key_reach_the_batch(cli, tmp_path, monkeypatch):
    (tmp_path / "items.txt").write_text("a\n")
    batch_path = _write(tmp_path, "b.yaml", "items: items.txt\ncommand: echo {item}\nworkload: colorize-hd\n")
    env_file = _write(tmp_path, "run.env", "# keys\nexport BUCKET=s3://b\nMODE='fast'\n\nSIZE=13b\n")
    monkeypatch.setenv("FROM_CALLER", "hello")
    seen = []
    real = batchfile.read
    monkeypatch.setattr(batchfile, "read", lambda *a, **k: seen.append(real(*a, **k)) or seen[-1])
    r = cli("launch", str(batch_path), "--env-file", str(env_file), "--env", "SIZE=7b", "--env", "FROM_CALLER",
            "--dry-run")
    assert r.code == 0, r.err
    assert dict(seen[-1].env) == {"BUCKET": "s3://b", "MODE": "fast", "SIZE": "7b", "FROM_CALLER": "hello"}
    monkeypatch.delenv("FROM_CALLER")
    r = cli("launch", str(batch_path), "--env", "FROM_CALLER", "--dry-run")
    assert r.code == 2 and "--env FROM_CALLER: not set in this environment; export it" in r.err
    bad = _write(tmp_path, "bad.env", "OK=1\nno equals here\n1X=2\n")
    r = cli("launch", str(batch_path), "--env-file", str(bad), "--dry-run")
    assert r.code == 2 and "has 2 mistakes" in r.err and "line 2:" in r.err and "line 3:" in r.err


@pytest.mark.parametrize("argv, meant", [
    (["provision", "aws:g4dn.xlarge", "x1", "--ttl", "30", "--dry-run"], "minutes"),
    (["provision", "aws:g4dn.xlarge", "x1", "--idle", "30", "--dry-run"], "minutes"),
    (["estimate", "--videos", "4", "--deadline", "90"], "minutes"),
])
def test_a_bare_duration_is_refused_with_the_units_to_use(cli, argv, meant):
    r = cli(*argv)
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1
    assert "give the unit, such as" in r.err and f"a bare number meant {meant} here" in r.err


def test_a_batch_files_bare_timeout_is_refused(tmp_path):
    (tmp_path / "items.txt").write_text("a\n")
    path = _write(tmp_path, "b.yaml", "items: items.txt\ncommand: echo {item}\ntimeout: 600\n")
    with pytest.raises(Exception) as got:
        batchfile.read(path, {})
    assert "timeout '600': give the unit, such as 600m, 600h or 600s (a bare number meant seconds here" in str(got.value)
    path.write_text("items: items.txt\ncommand: echo {item}\ntimeout: 10m\n")
    assert batchfile.read(path, {}).timeout_s == 600


def test_provision_gpus_takes_the_cheapest_size_with_them(cli):
    r = cli("provision", "--gpus", "V100:4", "x2", "--dry-run", "--ssh-from", "203.0.113.7/32")
    assert r.code == 0, r.err
    assert "--gpus V100:4: aws:p3.8xlarge in us-east-1, 4x V100, the cheapest an hour" in r.err
    assert "2x aws:p3.8xlarge" in r.out
    r = cli("provision", "aws:g4dn.xlarge", "--gpus", "T4", "--dry-run")
    assert r.code == 2 and "give --gpus or TARGET (or --plan), not both" in r.err


def test_a_gpu_ask_matches_the_catalogs_names_and_json_stays_out_of_a_batchs_command():
    from gpuplan.cli import _register_commands, shapes
    from gpuplan.market import gpus

    assert gpus.model_matches("A100", "A100 80GB") and gpus.model_matches("a100-80gb", "A100 80GB")
    assert gpus.model_matches("H100", "H100 SXM") and not gpus.model_matches("H100", "H200")
    assert not gpus.model_matches("A10", "A100 40GB") and gpus.model_matches("A10", "A10")
    assert gpus.parse("A100:40GB:2") == gpus.GpuAsk("A100", 2, 40) and gpus.parse("24GB").text() == "24GB"
    root = _register_commands()
    assert shapes.json_alias(root, ["status", "--json"]) == ["status", "--format=json"]
    assert shapes.json_alias(root, ["dok", "status", "--json"]) == ["dok", "status", "--format=json"]
    run = ["run", "c", "--items", "i", "--", "python", "x.py", "--json", "{item}"]
    assert shapes.json_alias(root, run) == run  # the batch's own words
    assert shapes.json_alias(root, ["launch", "b.yaml", "--json"]) == ["launch", "b.yaml", "--json"]  # no --format there
