"""高火力 DOK tasks against the fake built from the published API (tests/support/sakura_dok_fake.py):
submit, status, the one-running-task queue, cancel, artifacts, and bad input refused locally."""

from __future__ import annotations

import pytest

from gpuplan.errors import AuthMissing, ProviderError, UsageError
from support.cli import Terminal
from support.sakura_dok_fake import DokFake, client_for, run_the_queue


@pytest.fixture
def fake():
    f = DokFake()
    f.root = f.start()
    yield f
    f.stop()
    assert f.unknown == []


@pytest.fixture
def dok(fake):
    return client_for(fake, fake.root)


def test_submit_sends_the_spec_shape_and_the_task_waits_its_turn(fake, dok):
    first = dok.submit("clip-1", "registry.example/me/colorize:1", "h100-80gb", ["python", "run.py", "clip-1"],
                       environment={"INPUT": "s3://bucket/clip-1.mp4"}, tags=["gpuplan-run=r1"], time_limit_s=3600)
    second = dok.submit("clip-2", "registry.example/me/colorize:1", "h100-80gb", ["python", "run.py", "clip-2"],
                        tags=["gpuplan-run=r1"])
    method, path, body = fake.requests[0]
    assert (method, path) == ("POST", "tasks/")
    assert body["containers"] == [{"image": "registry.example/me/colorize:1", "registry": None,
                                   "command": ["python", "run.py", "clip-1"], "entrypoint": [],
                                   "environment": {"INPUT": "s3://bucket/clip-1.mp4"}, "plan": "h100-80gb"}]
    assert body["execution_time_limit_sec"] == 3600 and body["tags"] == ["gpuplan-run=r1"]
    # one running task per project: the second waits
    assert (dok.task(first.id).status, dok.task(second.id).status) == ("running", "waiting")
    fake.advance()
    assert (dok.task(first.id).status, dok.task(second.id).status) == ("done", "running")
    assert [t.name for t in dok.tasks("gpuplan-run=r1")] == ["clip-1", "clip-2"]


def test_wait_polls_until_every_task_has_finished(fake, dok):
    ids = [dok.submit(f"j{i}", "img:1", "v100-32gb").id for i in range(3)]
    calls = []

    def tick(_s):
        calls.append(1)
        fake.advance()

    dok.sleep = tick
    done = dok.wait(ids, timeout_s=60)
    assert [t.status for t in done] == ["done"] * 3 and len(calls) == 3


def test_cancel_stops_a_waiting_or_running_task_and_leaves_a_finished_one(fake, dok):
    a = dok.submit("a", "img:1", "h100-80gb")
    b = dok.submit("b", "img:1", "h100-80gb")
    assert dok.cancel(b.id).status == "canceled"  # waiting
    assert dok.cancel(a.id).status == "canceled"  # running
    c = dok.submit("c", "img:1", "h100-80gb")
    assert dok.task(c.id).status == "running"  # the queue moved on
    fake.advance()
    assert dok.cancel(c.id).status == "done"  # 409 from the API: left as it is


def test_artifact_of_a_done_task_is_downloaded(fake, dok, tmp_path):
    t = dok.submit("clip", "img:1", "h100-80gb")
    with pytest.raises(UsageError, match="has no artifact yet"):
        dok.download_artifact(dok.task(t.id), tmp_path / "x.tar.gz")
    fake.advance()
    path = dok.download_artifact(dok.task(t.id), tmp_path / "out" / "clip.tar.gz")
    assert path.read_bytes() == fake.artifacts[dok.task(t.id).artifact_id]


@pytest.mark.parametrize("kwargs,message", [
    ({"plan": "a100"}, "unknown plan 'a100'"),
    ({"environment": {"SAKURA_TASK_ID": "x"}}, "SAKURA_ are DOK's own"),
    ({"environment": {"BIG": "x" * 9000}}, "fewer than 8,192"),
    ({"time_limit_s": 60}, "under DOK's minimum of 600 s"),
    ({"image": " "}, "name the container image"),
])
def test_bad_input_is_refused_before_the_api_is_asked(fake, dok, kwargs, message):
    args = {"name": "x", "image": "img:1", "plan": "h100-80gb", **kwargs}
    with pytest.raises(UsageError, match=message):
        dok.submit(**args)
    assert fake.requests == []


def test_a_rejected_key_is_auth_missing_and_an_unknown_task_a_provider_error(fake):
    bad = client_for(fake, fake.root)
    bad._vrt._env = {**fake.env(fake.root), "SAKURACLOUD_ACCESS_TOKEN": "wrong"}
    with pytest.raises(AuthMissing, match="may use 高火力 DOK"):
        bad.tasks()
    with pytest.raises(ProviderError, match="HTTP 404"):
        client_for(fake, fake.root).task("no-such-task")


# --- from the CLI -------------------------------------------------------------------------------

@pytest.fixture
def dok_env(fake, monkeypatch):
    for k, v in fake.env(fake.root).items():
        monkeypatch.setenv(k, v)
    return fake


def test_cli_submits_one_task_per_item_then_follows_cancels_and_fetches_artifacts(dok_env, cli, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    items = tmp_path / "clips.txt"
    items.write_text("# clips\nclip-1.mp4\nclip-2.mp4\nclip-3.mp4\n")
    r = cli("dok", "submit", "-y", "--image", "registry.example/me/colorize:1", "--items", str(items), "--plan", "h100-80gb",
            "--env", "BUCKET=s3://b", "--run", "r1", "--", "python", "run.py", "{item}")
    assert r.code == 0, r.err
    assert "3 tasks on h100-80gb" in r.out and "one task runs at a time per project" in r.out
    commands = [body["containers"][0]["command"] for m, p, body in dok_env.requests if m == "POST"]
    assert commands == [["python", "run.py", f"clip-{i}.mp4"] for i in (1, 2, 3)]
    dok_env.advance()  # the first is done, the second runs
    r = cli("dok", "status", "--run", "r1")
    assert r.code == 0, r.err
    assert r.out.count("done") == 1 and r.out.count("running") == 1 and r.out.count("waiting") == 1
    r = cli("dok", "cancel", "--run", "r1")
    assert r.code == 0, r.err
    assert r.out.count("canceled") == 2
    assert sorted(t["status"] for t in dok_env.tasks.values()) == ["canceled", "canceled", "done"]
    r = cli("dok", "artifacts", "--run", "r1", "--out", str(tmp_path / "out"))
    assert r.code == 0, r.err
    assert "1 artifact written" in r.out and (tmp_path / "out" / "r1-0.tar.gz").is_file()


def test_cli_bad_plan_is_one_line_exit_2(dok_env, cli, tmp_path):
    items = tmp_path / "i.txt"
    items.write_text("a\n")
    r = cli("dok", "submit", "--image", "img:1", "--items", str(items), "--plan", "a100", "--", "run", "{item}")
    assert r.code == 2 and "unknown plan 'a100'" in r.err and "Traceback" not in r.err
    assert dok_env.requests == []


def test_the_task_list_is_read_page_by_page(fake, dok):
    for i in range(130):
        dok.submit(f"t{i}", "img:1", "v100-32gb", tags=["gpuplan-run=big"])
    assert len(dok.tasks("gpuplan-run=big")) == 130
    assert [p for m, p, _ in fake.requests if m == "GET"] == ["tasks/", "tasks/"]


# --- logs: the task's log stream, a WebSocket -----------------------------------------------------

def test_logs_of_a_running_task_are_read_from_its_websocket_stream(fake, dok):
    t = dok.submit("clip", "img:1", "h100-80gb")
    fake.log(t.id, "epoch 1 loss 0.9\n")
    fake.log(t.id, "epoch 2 loss 0.5\n")
    assert list(dok.logs(t.id, idle_s=0.3)) == ["epoch 1 loss 0.9\n", "epoch 2 loss 0.5\n"]
    method, path, _ = fake.requests[-1]
    assert (method, path) == ("POST", f"tasks/{t.id}/containers/0/stream/")


def test_follow_waits_for_the_task_and_reads_until_it_ends(fake, dok):
    import threading

    first = dok.submit("a", "img:1", "h100-80gb")
    second = dok.submit("b", "img:1", "h100-80gb")  # waits behind the first
    polls = []

    def tick(_s):  # time passes while `logs -f` waits: the first ends, the second starts and writes
        polls.append(1)
        fake.advance()
        fake.log(second.id, "started\n")

    dok.sleep = tick
    def later():  # once the stream is open: one more line, then the second task ends
        import time

        deadline = time.monotonic() + 60
        while not fake.streams and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        fake.log(second.id, "halfway\n")
        time.sleep(0.1)
        fake.advance()  # the server closes the stream

    threading.Thread(target=later, daemon=True).start()
    got = list(dok.logs(second.id, follow=True))
    assert got == ["started\n", "halfway\n"] and polls == [1]
    assert dok.task(first.id).status == dok.task(second.id).status == "done"


def test_a_task_that_is_not_running_has_no_stream_and_says_why(fake, dok):
    a = dok.submit("a", "img:1", "h100-80gb")
    b = dok.submit("b", "img:1", "h100-80gb")
    with pytest.raises(UsageError, match="task b is waiting: its log streams only while it runs"):
        list(dok.logs(b.id))
    fake.advance()
    with pytest.raises(UsageError, match="task a is done.*in its artifact"):
        list(dok.logs(a.id))


def test_a_stream_the_api_refuses_is_a_usage_error_not_a_bad_key(fake, dok, monkeypatch):
    import dataclasses

    t = dok.submit("a", "img:1", "h100-80gb")
    real = dok.task
    fake.advance()  # it ends between the status check (still "running") and the stream request (403)
    monkeypatch.setattr(dok, "task", lambda tid: dataclasses.replace(real(tid), status="running"))
    with pytest.raises(UsageError, match="ended before its log could be read"):
        list(dok.logs(t.id))


def test_cli_dok_logs_by_task_name(dok_env, cli):
    dok = client_for(dok_env, dok_env.root)
    t = dok.submit("clip-7", "img:1", "h100-80gb")
    dok_env.log(t.id, "frame 1\n")
    dok_env.log(t.id, "frame 2")
    r = cli("dok", "logs", "clip-7")
    assert r.code == 0, r.err
    assert r.out == "frame 1\nframe 2\n"
    r = cli("dok", "logs", "no-such")
    assert r.code == 2 and "no DOK task with id or name 'no-such'" in r.err


def test_websocket_reader_answers_pings_and_joins_fragments():
    import socket
    import threading

    from gpuplan.providers import wsread

    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    seen = {}

    def serve():
        c, _ = srv.accept()
        req = b""
        while b"\r\n\r\n" not in req:
            req += c.recv(4096)
        key = next(ln.split(": ", 1)[1] for ln in req.decode().split("\r\n") if ln.lower().startswith("sec-websocket-key"))
        c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   f"Sec-WebSocket-Accept: {wsread.accept_key(key)}\r\n\r\n").encode())
        c.sendall(bytes([0x01, 4]) + b"hel" + b"l")  # a text frame without FIN
        c.sendall(bytes([0x89, 2]) + b"hi")  # a ping between the fragments
        c.sendall(bytes([0x80, 3]) + b"o w")  # the last fragment
        pong = c.recv(2 + 4 + 2)
        seen["pong"] = pong[0]
        c.sendall(wsread.frame(wsread.CLOSE, b"\x03\xe8", mask=False))
        seen["close"] = c.recv(64)[0]
        c.close()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    assert list(wsread.messages(f"ws://127.0.0.1:{port}/x")) == ["hello w"]
    server.join(5)
    srv.close()
    assert seen == {"pong": 0x8A, "close": 0x88}


# --- `gpuplan run dok:PLAN`: one task per item, followed through jobs / logs / cancel -----------

def _items(tmp_path, *names):
    path = tmp_path / "clips.txt"
    path.write_text("\n".join(names) + "\n")
    return str(path)


def test_run_dok_detached_then_jobs_logs_cancel_and_resume(dok_env, cli, tmp_path, monkeypatch, gpuplan_home):
    import json

    from gpuplan.store.state import State

    monkeypatch.setenv("COLUMNS", "200")
    r = cli("run", "-y", "dok:h100-80gb", "--image", "registry.example/me/colorize:1", "--items",
            _items(tmp_path, "a.mp4", "b.mp4", "c.mp4"), "--env", "BUCKET=s3://b", "--timeout", "1h", "--detach",
            "--", "python", "run.py", "{item}")
    assert r.code == 0, r.err
    assert "job dok-1 submitted: 3 DOK tasks on h100-80gb" in r.out and "gpuplan cancel dok dok-1" in r.out
    posted = [b for m, p, b in dok_env.requests if m == "POST" and p == "tasks/"]
    assert [b["containers"][0]["command"] for b in posted] == [["python", "run.py", f"{x}.mp4"] for x in "abc"]
    assert all(b["containers"][0]["environment"] == {"BUCKET": "s3://b"} and b["execution_time_limit_sec"] == 3600
               for b in posted)
    assert [b["tags"][:2] for b in posted] == [["gpuplan-run=dok-1", f"gpuplan-item={i}"] for i in range(3)]
    state = State.open_default()
    assert [j.op for j in state.journal("dok")] == ["dok-task"] * 3  # journaled before each API call

    dok_env.advance(seconds=30)  # a.mp4 ran 30 s (billed 60: the per-task minimum), b.mp4 starts
    running = next(t for t in dok_env.tasks.values() if t["status"] == "running")
    dok_env.log(running["id"], "b: frame 1\n")
    r = cli("logs", "dok", "dok-1", "b.mp4")
    assert r.code == 0, r.err
    assert r.out == "b: frame 1\n"
    r = cli("jobs", "dok", "--format", "json")
    assert r.code == 0, r.err
    [job] = json.loads(r.out)
    assert (job["state"], job["succeeded"], job["running"], job["queued"]) == ("running", 1, 1, 1)

    r = cli("status")
    assert r.code == 0, r.err
    assert "batch dok-1 on dok: running, 1 of 3 items done" in " ".join(r.out.split())
    r = cli("cancel", "dok", "dok-1")
    assert r.code == 0, r.err
    assert "2 DOK tasks cancelled" in r.out
    assert sorted(t["status"] for t in dok_env.tasks.values()) == ["canceled", "canceled", "done"]
    r = cli("jobs", "dok", "--format", "json")
    assert json.loads(r.out)[0]["state"] == "cancelled"

    # the state keeps no value of --env: a resume is told to give it again, before anything is sent
    r = cli("run", "-y", "dok", "--resume", "dok-1", "--detach")
    assert r.code == 2 and "job dok-1 ran with --env BUCKET: give it again" in r.err
    from gpuplan import paths

    assert b"s3://b" not in paths.state_db().read_bytes()
    r = cli("run", "-y", "dok", "--resume", "dok-1", "--env", "BUCKET=s3://b", "--detach")  # the two that did not succeed
    assert r.code == 0, r.err
    assert "job dok-2 submitted: 2 DOK tasks" in r.out
    again = [b for m, p, b in dok_env.requests if m == "POST" and p == "tasks/"][3:]
    assert [b["containers"][0]["command"][-1] for b in again] == ["b.mp4", "c.mp4"]
    assert all(b["containers"][0]["image"] == "registry.example/me/colorize:1" for b in again)
    assert all(b["containers"][0]["environment"] == {"BUCKET": "s3://b"} for b in again)


def test_run_dok_follows_to_the_end_and_bills_each_task_with_its_own_minimum(dok_env, cli, tmp_path, monkeypatch):
    import threading

    monkeypatch.setenv("GPUPLAN_POLL_S", "0.05")
    lengths = iter([30, 30, 600])  # seconds each task runs

    def time_passes():
        run_the_queue(dok_env, 3, lambda: dok_env.advance(seconds=next(lengths)))

    worker = threading.Thread(target=time_passes, daemon=True)
    worker.start()
    r = cli("run", "-y", "dok:h100-80gb", "--image", "img:1", "--items", _items(tmp_path, "x", "y", "z"), "--", "work", "{item}")
    worker.join(5)
    assert r.code == 0, r.err
    assert "3 ok of 3 items" in r.out
    # ¥0.28 a second, at least 60 s a task: 60 + 60 + 600 = 720 s -> ¥201.60 (one span of 660 s would be ¥184.80)
    assert "¥202 (3 tasks each billed for its own run time at ¥1,008/h, at least 60 s a task)" in r.out
    assert "gpuplan dok artifacts --run dok-1" in r.out


def test_run_dok_failed_items_exit_5_and_name_their_logs(dok_env, cli, tmp_path, monkeypatch):
    import threading

    monkeypatch.setenv("GPUPLAN_POLL_S", "0.05")
    outcomes = iter(["done", "error"])

    def time_passes():
        run_the_queue(dok_env, 2, lambda: dok_env.advance(next(outcomes), seconds=120))

    threading.Thread(target=time_passes, daemon=True).start()
    r = cli("run", "-y", "dok:v100-32gb", "--image", "img:1", "--items", _items(tmp_path, "x", "y"), "--", "work", "{item}")
    assert r.code == 5, (r.out, r.err)
    assert "1 of 2 items failed: y" in r.err and "gpuplan logs dok dok-1 ITEM" in r.err


@pytest.mark.parametrize("args,message", [
    (["dok:h100-80gb", "--items", "ITEMS", "--", "w", "{item}"], "name the container image"),
    (["dok:a100", "--image", "i:1", "--items", "ITEMS", "--", "w", "{item}"], "unknown DOK plan 'a100'"),
    (["dok", "--image", "i:1", "--items", "ITEMS", "--", "w", "{item}"], "name the DOK plan: gpuplan run dok:PLAN"),
    (["dok:h100-80gb", "--image", "i:1", "--items", "ITEMS", "--timeout", "60s", "--", "w", "{item}"], "at least 600 s"),
    (["dok:h100-80gb", "--image", "i:1", "--items", "ITEMS", "--per-gpu", "2", "--", "w", "{item}"], "one container task per item"),
    (["somecluster", "--env", "A=1", "--items", "ITEMS", "--", "w", "{item}"], "are for DOK task runs"),  # --image runs containers on a cluster now
    (["dok:h100-80gb", "--image", "i:1", "--items", "ITEMS", "--env", "SAKURA_X=1", "--", "w", "{item}"],
     "SAKURA_ are DOK's own"),
    (["dok:h100-8gpu-80gb", "--image", "i:1", "--items", "ITEMS", "--env", f"BIG={'x' * 9000}", "--", "w", "{item}"],
     "fewer than 8,192"),
])
def test_run_dok_bad_input_is_one_line_and_asks_nothing(dok_env, cli, tmp_path, args, message):
    items = _items(tmp_path, "a")
    r = cli("run", *[items if a == "ITEMS" else a for a in args])
    assert r.code == 2 and message in r.err and "Traceback" not in r.err, (r.out, r.err)
    assert dok_env.requests == []
    assert "dok-1" not in cli("jobs", "dok").out  # refused before a job was recorded


def test_dok_tasks_are_sent_only_after_their_cost_is_shown_and_a_person_says_yes(dok_env, cli, tmp_path, monkeypatch,
                                                                                  gpuplan_home):
    from gpuplan.store.state import State

    monkeypatch.setenv("COLUMNS", "200")
    items = _items(tmp_path, "a", "b", "c")
    run = ["run", "dok:h100-80gb", "--image", "img:1", "--items", items, "--timeout", "1h", "--", "w", "{item}"]
    posted = lambda: [b for m, p, b in dok_env.requests if m == "POST" and p == "tasks/"]  # noqa: E731

    r = cli(*run)  # no terminal and no -y: one line, nothing sent, no job
    assert r.code == 2 and r.err.count("\n") == 1, r.err
    assert "run dok asks for confirmation, but stdin is not a terminal: rerun with --yes (-y)" in r.err
    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    r = cli(*run)
    assert r.code == 1 and "aborted: nothing was changed" in r.err
    assert "send 3 DOK tasks on h100-80gb (one runs at a time per project, the rest wait)" in r.err
    # 3 tasks x the 60-s minimum at ¥1,008/h; one task that runs to its 3,600-s limit: ¥1,008
    assert "billed ¥1,008/h for the seconds each task runs, at least 1 min: at least ¥50.40 in all" in r.err
    assert "DOK stops each task at its time limit, 60 min: at most ¥1,008 a task" in r.err
    assert "Send these tasks? [Y/n]" in r.err
    assert posted() == [] and "dok-1" not in cli("jobs", "dok").out
    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    r = cli(*[("dok:h100-8gpu-80gb" if a == "dok:h100-80gb" else a) for a in run])
    assert r.code == 1 and "send one h100-8gpu-80gb DOK task for 3 items, one per GPU at a time" in r.err
    # its limit: one round of 8 slots x --timeout + the runner's 300 s = 3,900 s at ¥2,988/h
    assert "DOK stops the task at its time limit, 65 min: at most ¥3,237" in r.err and "Send this task?" in r.err
    assert posted() == []

    # dok submit asks the same way; on the 8-GPU plan each item is a task of its own on all 8 GPUs
    monkeypatch.setattr("sys.stdin", Terminal("y\n"))
    r = cli("dok", "submit", "--image", "img:1", "--items", items, "--plan", "h100-8gpu-80gb", "--time-limit", "2h",
            "--run", "r8", "--", "w", "{item}")
    assert r.code == 0, r.err
    assert "send 3 DOK tasks on h100-8gpu-80gb" in r.err and "2:00 h: at most ¥5,976 a task" in r.err  # 2 h x ¥2,988
    assert [b["containers"][0]["command"] for b in posted()] == [["w", x] for x in "abc"]
    state = State.open_default()
    assert [(j.op, j.target, j.phase) for j in state.journal("dok")] == [("dok-task", f"r8-{i}", "ok") for i in range(3)]
    state.close()


def test_no_cluster_may_be_named_dok(cli):
    r = cli("provision", "sakura:h100x1", "x1", "--name", "dok", "--dry-run")
    assert r.code == 2 and "kept for Sakura 高火力 DOK task batches" in r.err


def test_run_dok_takes_the_plan_from_a_saved_dok_pick_and_compares_with_it(dok_env, cli, tmp_path, monkeypatch):
    import json
    import threading

    monkeypatch.setenv("GPUPLAN_POLL_S", "0.05")
    plan = tmp_path / "plan.json"
    r = cli("estimate", "--videos", "4", "--save", str(plan))
    assert r.code == 0, r.err
    saved = json.loads(plan.read_text())
    assert (saved["provider"], saved["instance_type"]) == ("sakura", "dok-v100-32gb")  # today's pick for 4 videos

    def time_passes():
        run_the_queue(dok_env, 4, lambda: dok_env.advance(seconds=900))

    threading.Thread(target=time_passes, daemon=True).start()
    r = cli("run", "-y", "dok", "--plan", str(plan), "--image", "img:1", "--items", _items(tmp_path, *[f"v{i}.mp4" for i in range(4)]),
            "--", "python", "-m", "gpuplan.jobs.colorize", "--video", "{item}")  # the workload's job (issue 42)
    assert r.code == 0, r.err
    assert {b["containers"][0]["plan"] for m, p, b in dok_env.requests if m == "POST" and p == "tasks/"} == {"v100-32gb"}
    # 4 tasks x 900 s at ¥0.016 a second (minimum 1 s): ¥57.60
    assert "¥58 (4 tasks each billed for its own run time at ¥57.60/h, at least 1 s a task)" in r.out
    assert "plan:" in r.out and "calibration recorded" in r.out
