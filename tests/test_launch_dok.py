"""`gpuplan launch` on a 高火力 DOK pick, against the DOK fake (tests/support/sakura_dok_fake.py):
today's default pick for `estimate --videos 4` launches as it was saved, and a batch file with an
image runs its items as DOK tasks, the artifacts fetched into the outputs folder."""

from __future__ import annotations

import json
import threading
from decimal import Decimal

import pytest
import yaml

from support.sakura_dok_fake import run_the_queue, serving


@pytest.fixture
def dok_env(monkeypatch):
    with serving(monkeypatch) as fake:
        yield fake


def _time_passes(fake, count, seconds):
    """In the background, once the `count` tasks are queued, end the running one after `seconds` each time."""
    worker = threading.Thread(target=run_the_queue, args=(fake, count, lambda: fake.advance(seconds=seconds)), daemon=True)
    worker.start()
    return worker


def _items(tmp_path, n=4):
    path = tmp_path / "videos.txt"
    path.write_text("".join(f"v{i}.mp4\n" for i in range(n)))
    return path


def test_the_default_pick_of_estimate_launches_through_dok(dok_env, cli, tmp_path, monkeypatch, gpuplan_home):
    from gpuplan import paths
    from gpuplan.store.state import State

    monkeypatch.chdir(tmp_path)
    plan = tmp_path / "plan.json"
    r = cli("estimate", "--videos", "4", "--save", str(plan))
    assert r.code == 0, r.err
    saved = json.loads(plan.read_text())
    assert (saved["provider"], saved["instance_type"]) == ("sakura", "dok-v100-32gb")  # today's default pick
    # the next step the estimate names works for this pick; provision, which has no machine to make, names it too
    assert f"`gpuplan launch --plan {plan} --items FILE -- CMD {{item}}` runs a batch on it" in r.err
    assert "add --image IMAGE" in r.err and "gpuplan provision --plan" not in r.err
    r = cli("provision", "--plan", str(plan), "--dry-run")
    assert r.code == 2 and f"`gpuplan launch --plan {plan} --image IMAGE" in r.err
    worker = _time_passes(dok_env, 4, 900)
    r = cli("launch", "--plan", str(plan), "--image", "registry.example/me/colorize:1", "--items", str(_items(tmp_path)),
            "-y", "--", "python", "-m", "gpuplan.jobs.colorize", "--video", "{item}")  # the workload's job (issue 42)
    worker.join(5)
    assert r.code == 0, r.out + r.err
    posted = [b for m, p, b in dok_env.requests if m == "POST" and p == "tasks/"]
    assert [b["containers"][0]["plan"] for b in posted] == ["v100-32gb"] * 4
    assert sorted(b["containers"][0]["command"][-1] for b in posted) == [f"v{i}.mp4" for i in range(4)]
    assert all(b["containers"][0]["image"] == "registry.example/me/colorize:1" for b in posted)
    assert "4 ok of 4 items" in " ".join(r.out.split())
    # 4 tasks x 900 s at ¥0.016 a second: ¥57.60, as `run dok` bills them
    assert "¥58 (4 tasks each billed for its own run time at ¥57.60/h, at least 1 s a task)" in r.out
    assert "calibration recorded" in r.out  # the whole planned batch on the planned fleet, as `run --plan` records it
    outputs = tmp_path / "outputs" / "videos"
    assert sorted(p.name for p in outputs.glob("*.tar.gz")) == [f"dok-1-{i}.tar.gz" for i in range(4)]
    state = State(paths.state_db())
    job = state.job("dok-1")
    assert (job.backend, job.state) == ("dok", "succeeded")
    state.close()


def test_a_dok_pick_without_an_image_is_one_line_before_anything_is_sent(dok_env, cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = tmp_path / "plan.json"
    cli("estimate", "--videos", "4", "--save", str(plan))
    r = cli("launch", "--plan", str(plan), "--items", str(_items(tmp_path)), "-y", "--", "colorize", "{item}")
    assert r.code == 2 and "give the batch an image" in r.err and "Traceback" not in r.err
    assert [p for m, p, _ in dok_env.requests if m == "POST"] == []


def test_a_batch_file_with_an_image_runs_on_dok_and_its_cap_bounds_each_task(dok_env, cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _items(tmp_path, 2)
    batch = tmp_path / "batch.yaml"
    batch.write_text(yaml.safe_dump({"workload": "colorize-hd", "items": "videos.txt", "infra": ["dok"],
                                     "image": "registry.example/me/colorize:1", "command": "colorize {item}",
                                     "env": {"MODE": "hd"}, "max_yen": 400, "outputs": "out"}))
    worker = _time_passes(dok_env, 2, 600)
    r = cli("launch", str(batch), "-y")
    worker.join(5)
    assert r.code == 0, r.out + r.err
    posted = [b for m, p, b in dok_env.requests if m == "POST" and p == "tasks/"]
    assert [b["containers"][0]["environment"] for b in posted] == [{"MODE": "hd"}] * 2
    # the pick's price a second bounds each task's time limit by what max_yen buys
    from gpuplan.run.dok import dok_runs

    plan = posted[0]["containers"][0]["plan"]
    terms = dok_runs.terms_of(plan)
    from gpuplan.market import billing

    limit = posted[0]["execution_time_limit_sec"]
    assert billing.charge(limit, terms) <= Decimal(400) < billing.charge(limit + 1, terms) or limit == 24 * 3600
    assert len(list((tmp_path / "out").glob("*.tar.gz"))) == 2


def test_the_same_batch_file_with_an_image_launches_on_dok_with_only_infra_changed(dok_env, cli, tmp_path, monkeypatch):
    """tests/test_launch.py runs this same file (support/batches.py) on owned hosts, infra: owned."""
    from support.batches import ITEMS, container_batch

    monkeypatch.chdir(tmp_path)
    worker = _time_passes(dok_env, 4, 300)
    r = cli("launch", str(container_batch(tmp_path, "dok")), "-y")
    worker.join(5)
    assert r.code == 0, r.out + r.err
    posted = [b["containers"][0] for m, p, b in dok_env.requests if m == "POST" and p == "tasks/"]
    assert {c["image"] for c in posted} == {"registry.example/me/colorize:1"}
    # $GPUPLAN_OUTPUT_DIR is the task's artifact folder there, as it is the item's output folder on a cluster
    # run as the task runs it (sh in the image), each command writes its item into the artifact folder
    import subprocess

    for c in posted:
        art = tmp_path / "artifact" / str(posted.index(c))
        art.mkdir(parents=True)
        subprocess.run(c["command"], env={"PATH": "/usr/bin:/bin", "SAKURA_ARTIFACT_DIR": str(art)}, check=True, timeout=30)
    assert sorted(p.read_text() for p in (tmp_path / "artifact").glob("*/result.txt")) == sorted(
        f"in-container {i}\n" for i in ITEMS)
    assert len(list((tmp_path / "results").glob("*.tar.gz"))) == 4


def test_launch_detach_returns_with_the_job_and_resume_finishes_it(dok_env, cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _items(tmp_path, 2)
    batch = tmp_path / "batch.yaml"
    batch.write_text(yaml.safe_dump({"workload": "colorize-hd", "items": "videos.txt", "infra": ["dok"],
                                     "image": "img:1", "command": "colorize {item}"}))
    r = cli("launch", str(batch), "-y", "--detach")
    assert r.code == 0, r.out + r.err
    assert "job dok-1 submitted: 2 items" in r.out and "`gpuplan launch --resume dok-1`" in r.out
    assert len(dok_env.tasks) == 2 and not (tmp_path / "outputs").exists()  # sent; nothing followed or fetched yet
    worker = _time_passes(dok_env, 2, 60)
    r = cli("launch", "--resume", "dok-1")
    worker.join(5)
    assert r.code == 0, r.out + r.err
    assert "2 ok of 2 items" in " ".join(r.out.split())
    assert len(list((tmp_path / "outputs" / "batch").glob("*.tar.gz"))) == 2
    r = cli("launch", "--resume", "nosuch")
    assert r.code == 2 and "no launch with job 'nosuch'" in r.err


def test_a_dok_pick_refuses_recover_in_one_line_before_the_question_and_sends_nothing(dok_env, cli, tmp_path,
                                                                                      monkeypatch):
    """Issue 41: a batch's `recover: true` on a pick whose backend cannot honour it (DOK has no
    nodes to replace) is refused in one line, exit 2, before anything is sent (it was ignored)."""
    monkeypatch.chdir(tmp_path)
    plan = tmp_path / "plan.json"
    cli("estimate", "--videos", "4", "--save", str(plan))
    r = cli("launch", "--plan", str(plan), "--image", "img:1", "--items", str(_items(tmp_path)), "--recover", "-y",
            "--", "colorize", "{item}")
    assert r.code == 2 and "Traceback" not in r.err, r.out + r.err
    assert "a DOK run is one container task per item" in r.err and "recover: does not apply" in r.err
    assert [p for m, p, _ in dok_env.requests if m == "POST"] == []
