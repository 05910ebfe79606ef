"""Issue 43, item 2: `secret_env: [NAME]` in a batch file (and `--secret-env NAME`): the value is
read from the caller's environment when the batch is submitted, as the registry password is, and
travels as an `env:` value does; the batch file, the state, the command line and the output hold
the name only. A name not set is refused before anything is bought (the dry run too), as is one
also in `env:`. The run on Ray for real: tests/test_run_env.py."""

from __future__ import annotations

import json
import secrets
from types import SimpleNamespace

import pytest

from gpuplan import batchfile
from gpuplan.errors import UsageError

BATCH = "items: items.txt\ncommand: echo {item}\nworkload: colorize-hd\n"
UNSET = "GPUPLAN_TEST_SECRET_NOT_SET"


def _read(tmp_path, extra: str, **overrides):
    (tmp_path / "items.txt").write_text("a\n")
    (tmp_path / "b.yaml").write_text(BATCH + extra)
    return batchfile.read(tmp_path / "b.yaml", overrides)


def test_the_file_holds_names_and_the_value_is_read_at_submission(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    batch = _read(tmp_path, "env: {HF_HOME: /data/hf}\nsecret_env: [HF_TOKEN, WANDB_API_KEY]\n")
    assert batch.secret_env == ("HF_TOKEN", "WANDB_API_KEY") and dict(batch.env) == {"HF_HOME": "/data/hf"}
    secret = "hf_" + secrets.token_hex(8)
    monkeypatch.setenv("HF_TOKEN", secret)  # set after the file was read: read when the batch is submitted
    monkeypatch.setenv("WANDB_API_KEY", "w1")
    assert batchfile.item_env(batch) == {"HF_HOME": "/data/hf", "HF_TOKEN": secret, "WANDB_API_KEY": "w1"}
    assert secret not in repr(batch)


def test_launch_submits_the_value_as_env_and_keeps_the_names_only(tmp_path, monkeypatch):
    """launcher.submission: the value in Submission.env (the path env: values take to a 0600
    file on the nodes); launch_options, the job row's, the names alone."""
    from pathlib import Path

    from gpuplan.run import launcher

    secret = "hf_" + secrets.token_hex(8)
    monkeypatch.setenv("HF_TOKEN", secret)
    batch = _read(tmp_path, "secret_env: [HF_TOKEN]\nenv: {A: b}\n")
    pick = SimpleNamespace(backend="ray", offer=None, plan_path=Path("plan.json"))
    sub = launcher.submission(pick, batch, "demo", ((0, "a"),))
    assert dict(sub.env) == {"A": "b", "HF_TOKEN": secret}
    opts = launcher.launch_options(batch, pick, "demo", tmp_path / "out")
    assert opts["secret_env"] == ["HF_TOKEN"] and secret not in json.dumps(opts)
    monkeypatch.delenv("HF_TOKEN")  # gone from the environment by the time the batch is submitted: one line
    with pytest.raises(UsageError, match="secret_env HF_TOKEN: not set in this environment; export HF_TOKEN"):
        launcher.submission(pick, batch, "demo", ((0, "a"),))


@pytest.mark.parametrize("extra, overrides, culprit", [
    ("secret_env: [1X]\n", {}, "secret_env[0] '1X' is not a variable name"),
    ("secret_env: ['HF-TOKEN']\n", {}, "'HF-TOKEN' is not a variable name"),
    ("secret_env: HF_TOKEN\n", {}, "secret_env 'HF_TOKEN': a list"),  # the schema: a list of names
    ("secret_env: []\n", {}, "secret_env: empty"),  # would silently mean none
    ("secret_env:\n", {}, "secret_env: empty"),
    ("secret_env: [{HF_TOKEN: x}]\n", {}, "secret_env[0]"),  # a value written in the file
    ("secret_env: [HF_TOKEN, HF_TOKEN]\n", {}, "HF_TOKEN is named twice"),
    ("secret_env: [HF_TOKEN]\nenv: {HF_TOKEN: x}\n", {}, "secret_env: HF_TOKEN is in env too"),
    ("secret_env: [HF_TOKEN]\n", {"env": ["HF_TOKEN=x"]}, "HF_TOKEN is in env too"),  # --env with the file's
    ("", {"secret_env": ["1X"]}, "--secret-env: '1X' is not a variable name"),
])
def test_a_bad_secret_env_is_refused_in_one_line(tmp_path, extra, overrides, culprit):
    with pytest.raises(UsageError) as got:
        _read(tmp_path, extra, **overrides)
    assert culprit in str(got.value), str(got.value)


def test_a_name_not_set_is_refused_before_buying(tmp_path, monkeypatch):
    monkeypatch.delenv(UNSET, raising=False)
    batch = _read(tmp_path, f"secret_env: [{UNSET}]\n")
    with pytest.raises(UsageError, match=f"secret_env {UNSET}: not set in this environment"):
        batchfile.check_before_buying(batch, "demo")
    monkeypatch.setenv(UNSET, "")  # empty: nothing to give the items, refused as well
    with pytest.raises(UsageError, match="not set"):
        batchfile.check_before_buying(batch, "demo")
    monkeypatch.setenv(UNSET, "s")
    batchfile.check_before_buying(batch, "demo")


def test_launch_dry_run_refuses_an_unset_name_and_shows_no_value(cli, tmp_path, monkeypatch, gpuplan_home):
    (tmp_path / "items.txt").write_text("a\n")
    (tmp_path / "b.yaml").write_text(BATCH + f"secret_env: [{UNSET}]\n")
    monkeypatch.delenv(UNSET, raising=False)
    r = cli("launch", str(tmp_path / "b.yaml"), "--dry-run")
    assert r.code == 2 and r.err.strip().splitlines() == [
        f"gpuplan: error: secret_env {UNSET}: not set in this environment; export {UNSET} (its value) before running,"
        f" or leave {UNSET} out"], r.err
    secret = "s_" + secrets.token_hex(8)
    monkeypatch.setenv(UNSET, secret)
    r = cli("launch", str(tmp_path / "b.yaml"), "--dry-run")
    assert r.code == 0, r.err
    assert "dry run: nothing was created" in r.out and secret not in r.out + r.err
    r = cli("launch", str(tmp_path / "b.yaml"), "--dry-run", "--secret-env", "NOT SET")  # the flag's names checked too
    assert r.code == 2 and "--secret-env: 'NOT SET' is not a variable name" in r.err


def test_run_takes_secret_env_where_it_takes_env(cli, tmp_path, monkeypatch):
    (tmp_path / "items.txt").write_text("a\n")
    monkeypatch.setenv("HF_TOKEN", "x")
    r = cli("run", "demo", "--items", str(tmp_path / "items.txt"), "--secret-env", "HF_TOKEN", "--", "echo", "{item}")
    assert r.code == 2 and "--env, --env-file, --secret-env and --registry are for DOK task runs" in r.err


# --- `gpuplan run dok:PLAN --secret-env NAME` against the DOK fake (tests/support/sakura_dok_fake.py) ----


@pytest.fixture
def dok_env(monkeypatch):
    from support.sakura_dok_fake import DokFake

    fake = DokFake()
    fake.root = fake.start()
    for k, v in fake.env(fake.root).items():
        monkeypatch.setenv(k, v)
    yield fake
    fake.stop()
    assert fake.unknown == []


def test_run_dok_sends_the_value_keeps_the_name_and_a_resume_reads_it_again(dok_env, cli, tmp_path, monkeypatch):
    from gpuplan import paths

    items = tmp_path / "clips.txt"
    items.write_text("a.mp4\nb.mp4\n")
    secret = "hf_" + secrets.token_hex(8)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    argv = ["run", "-y", "dok:h100-80gb", "--image", "registry.example/me/colorize:1", "--items", str(items),
            "--env", "BUCKET=s3://b", "--secret-env", "HF_TOKEN", "--detach", "--", "python", "run.py", "{item}"]
    r = cli(*argv)  # not set: refused before the API is asked or the state is written
    assert r.code == 2 and r.err.strip().splitlines() == [
        "gpuplan: error: --secret-env HF_TOKEN: not set in this environment; export HF_TOKEN (its value) before running,"
        " or leave HF_TOKEN out"], r.err
    assert dok_env.requests == [] and not paths.state_db().exists()
    r = cli(*argv[:-7], "--env", "HF_TOKEN=x", *argv[-7:])
    assert r.code == 2 and "--secret-env: HF_TOKEN is in env too" in r.err

    monkeypatch.setenv("HF_TOKEN", secret)
    r = cli(*argv)
    assert r.code == 0, r.err
    posted = [b for m, p, b in dok_env.requests if m == "POST" and p == "tasks/"]
    assert [b["containers"][0]["environment"] for b in posted] == [{"BUCKET": "s3://b", "HF_TOKEN": secret}] * 2
    assert secret not in r.out + r.err and secret.encode() not in paths.state_db().read_bytes()
    r = cli("jobs", "dok", "--format", "json")
    assert r.code == 0 and secret not in r.out, r.err
    from gpuplan.store.state import State

    opts = State.open_default().job("dok-1").options
    assert opts["env_names"] == ["BUCKET", "HF_TOKEN"] and opts["secret_env"] == ["HF_TOKEN"]

    assert cli("cancel", "dok", "dok-1").code == 0
    monkeypatch.delenv("HF_TOKEN")  # the resume reads it again from this environment: not set, refused
    r = cli("run", "-y", "dok", "--resume", "dok-1", "--env", "BUCKET=s3://b", "--detach")
    assert r.code == 2 and r.err.strip().splitlines() == [
        "gpuplan: error: job dok-1's secret_env HF_TOKEN: not set in this environment; export HF_TOKEN (its value)"
        " before running"], r.err
    rotated = "hf_" + secrets.token_hex(8)
    monkeypatch.setenv("HF_TOKEN", rotated)
    r = cli("run", "-y", "dok", "--resume", "dok-1", "--env", "BUCKET=s3://b", "--detach")
    assert r.code == 0, r.err
    again = [b for m, p, b in dok_env.requests if m == "POST" and p == "tasks/"][2:]
    assert again and all(b["containers"][0]["environment"] == {"BUCKET": "s3://b", "HF_TOKEN": rotated} for b in again)
    assert State.open_default().job("dok-2").options["secret_env"] == ["HF_TOKEN"]
    assert rotated.encode() not in paths.state_db().read_bytes()
