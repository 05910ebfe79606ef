"""`gpuplan run dok:h100-8gpu-80gb`: the batch as ONE 8-GPU 高火力 DOK task whose POSIX sh runner
(gpuplan/run/dok/dok_batch.py) runs the items one per GPU, against the DOK fake that really runs
the task's command here (tests/support/sakura_dok_fake.py, execute=True)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuplan.errors import UsageError
from gpuplan.run.dok import dok_batch
from support.sakura_dok_fake import serving

SH = shutil.which("dash") or "sh"  # the runner must do with a plain POSIX shell

# 10 items: one fails (exit 3), one has spaces, quotes and a $ in it
ITEMS = ["a.mp4", "b.mp4", "c.mp4", "fail", "it's a \"clip\" $HOME.mp4", "f.mp4", "g.mp4", "h.mp4", "i.mp4", "j.mp4"]
# each item: says what it got and where, sleeps long enough that the 8 workers all take one, exits 3 for "fail"
ITEM_COMMAND = ["sh", "-c", 'echo "got [$1] on gpu $CUDA_VISIBLE_DEVICES"; sleep 0.3; [ "$1" != fail ] || exit 3',
                "item", "{item}"]


@pytest.fixture
def fake(monkeypatch):
    """The DOK fake running each task's command here (conftest's dok_env, with execute=True)."""
    with serving(monkeypatch, execute=True) as f:
        yield f


def _items(tmp_path: Path, names) -> str:
    path = tmp_path / "items.txt"
    path.write_text("\n".join(names) + "\n")
    return str(path)


def _posted(fake) -> list[dict]:
    return [b for m, p, b in fake.requests if m == "POST" and p == "tasks/"]


def test_run_8gpu_is_one_task_for_the_batch_with_each_items_outcome_gpu_log_and_one_yen(fake, cli, tmp_path, monkeypatch):
    from gpuplan.providers.sakura_dok import DokClient
    from gpuplan.store.state import State

    monkeypatch.setenv("COLUMNS", "200")
    journal_at_the_call = []
    real_submit = DokClient.submit

    def submit(self, *a, **kw):  # what the journal held when the API was asked
        journal_at_the_call.extend((j.op, j.target, j.phase) for j in State.open_default().journal("dok"))
        return real_submit(self, *a, **kw)

    monkeypatch.setattr(DokClient, "submit", submit)
    r = cli("run", "-y", "dok:h100-8gpu-80gb", "--image", "registry.example/me/colorize:1", "--items", _items(tmp_path, ITEMS),
            "--env", "BUCKET=s3://b", "--timeout", "1h", "--detach", "--", *ITEM_COMMAND)
    assert r.code == 0, r.err
    assert "job dok-1 submitted: one h100-8gpu-80gb DOK task for 10 items, one per GPU at a time" in r.out
    [body] = _posted(fake)  # exactly ONE task for the batch
    [container] = body["containers"]
    assert container["plan"] == "h100-8gpu-80gb" and container["entrypoint"] == ["sh", "-c"]
    assert len(container["command"]) == 1 and container["environment"] == {"BUCKET": "s3://b"}
    assert body["tags"][:2] == ["gpuplan-run=dok-1", "gpuplan-item=all"] and body["tags"][2].startswith("gpuplan-installation=")
    assert body["execution_time_limit_sec"] == 3600 * 2 + 300  # --timeout for each round of 8 items, and a margin
    assert "limit=3600" in container["command"][0]  # the runner stops an item after --timeout
    state = State.open_default()
    [entry] = state.journal("dok")
    assert (entry.op, entry.target) == ("dok-task", "dok-1")
    assert journal_at_the_call == [("dok-task", "dok-1", "intent")]  # journaled before the API call

    # the task runs (DOK started it: nothing else ran): every item is running in it
    r = cli("jobs", "dok", "--format", "json")
    [job] = json.loads(r.out)
    assert (job["state"], job["running"], job["queued"]) == ("running", 10, 0)
    task_id = next(iter(fake.tasks))
    assert {it.slot for it in state.job_items("dok-1")} == {f"task {task_id}"}

    fake.advance(seconds=45)  # the fake runs the runner here; DOK reports 45 s of execution
    assert fake.tasks[task_id]["status"] == "error"  # one item failed, so the task exits non-zero
    r = cli("jobs", "dok", "--format", "json")
    [job] = json.loads(r.out)
    assert (job["state"], job["succeeded"], job["failed"]) == ("failed", 9, 1)
    # one task of 45 s billed at its 60 s minimum at ¥0.83 a second: ¥49.80 (not ¥0.83 x 60 x 10 items)
    assert job["yen"] == "49.80" and job["wall_s"] == 45.0
    items = {it.item: it for it in state.job_items("dok-1")}
    assert items["fail"].status == "failed" and items["fail"].exit_code == 3
    assert all(it.status == "ok" and it.exit_code == 0 for name, it in items.items() if name != "fail")
    gpus = {it.slot.rpartition(" gpu ")[2] for it in items.values()}
    assert gpus == {str(g) for g in range(8)}  # spread over the 8 GPUs
    assert all(it.slot.startswith(f"task {task_id} gpu ") for it in items.values())

    r = cli("logs", "dok", "dok-1", ITEMS[4])  # that item's own output, from the artifact
    assert r.code == 0, r.err
    assert r.out.startswith(f"got [{ITEMS[4]}] on gpu ")
    r = cli("logs", "dok", "dok-1", "3")  # by its line number
    assert r.out.startswith("got [fail] on gpu ")

    r = cli("run", "-y", "dok", "--resume", "dok-1", "--env", "BUCKET=s3://b", "--detach")  # the failed item, again
    assert r.code == 0, r.err
    assert "job dok-2 submitted: one h100-8gpu-80gb DOK task for 1 item" in r.out
    again = _posted(fake)[1]
    assert again["containers"][0]["plan"] == "h100-8gpu-80gb" and "gpuplan-run=dok-2" in again["tags"]
    assert "'fail'" in again["containers"][0]["command"][0] and "'a.mp4'" not in again["containers"][0]["command"][0]


def test_run_8gpu_followed_to_the_end_prints_one_tasks_yen(fake, cli, tmp_path, monkeypatch):
    import threading
    import time

    monkeypatch.setenv("GPUPLAN_POLL_S", "0.05")

    def time_passes():
        deadline = time.monotonic() + 60
        while not fake.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        fake.advance(seconds=130)

    threading.Thread(target=time_passes, daemon=True).start()
    r = cli("run", "-y", "dok:h100-8gpu-80gb", "--image", "img:1", "--items", _items(tmp_path, ["x", "y z"]),
            "--", "sh", "-c", "echo $1", "_", "{item}")
    assert r.code == 0, (r.out, r.err)
    assert "2 ok of 2 items" in r.out
    # 130 s x ¥0.83 = ¥107.90
    assert "¥108 (one task billed for its run time at ¥2,988/h, at least 60 s)" in r.out


def test_cancel_of_a_running_8gpu_task_fails_its_items_and_says_why(fake, cli, tmp_path):
    r = cli("run", "-y", "dok:h100-8gpu-80gb", "--image", "img:1", "--items", _items(tmp_path, ["a", "b", "c"]), "--detach",
            "--", "work", "{item}")
    assert r.code == 0, r.err
    [task] = fake.tasks.values()
    assert task["status"] == "running"
    r = cli("cancel", "dok", "dok-1")
    assert r.code == 0, r.err
    assert "1 DOK task cancelled" in r.out
    assert task["status"] == "canceled"
    r = cli("jobs", "dok", "--format", "json")
    [job] = json.loads(r.out)
    assert (job["state"], job["succeeded"], job["failed"], job["running"]) == ("cancelled", 0, 3, 0)
    r = cli("logs", "dok", "dok-1", "b")
    assert r.code == 2 and "has no log: the task was cancelled before this item ended" in r.err


def test_while_the_task_runs_logs_is_its_stream_and_says_so(fake, cli, tmp_path):
    cli("run", "-y", "dok:h100-8gpu-80gb", "--image", "img:1", "--items", _items(tmp_path, ["a", "b"]), "--detach",
        "--", "work", "{item}")
    [task_id] = fake.tasks
    fake.log(task_id, "gpuplan: item 0 start gpu 0\n")
    r = cli("logs", "dok", "dok-1", "a")
    assert r.code == 0, r.err
    assert r.out == "gpuplan: item 0 start gpu 0\n"
    assert "one 8-GPU task: this is its stream, every item interleaved" in r.err


def test_a_batch_too_big_for_one_task_is_refused_in_one_line(fake, cli, tmp_path):
    r = cli("run", "-y", "dok:h100-8gpu-80gb", "--image", "img:1", "--items", _items(tmp_path, [f"item-{i:05d}" for i in range(3000)]),
            "--", "python", "run.py", "--input", "s3://bucket/{item}.mp4")
    assert r.code == 2 and "split the items file" in r.err and "Traceback" not in r.err
    assert fake.requests == []


# --- the runner itself, under a plain sh -----------------------------------------------------------

def _run_runner(tmp_path: Path, items: list[str], command: list[str], gpus: int | None,
                item_limit_s: int | None = None) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    path = f"{bin_dir}:{os.environ['PATH']}"
    if gpus is not None:
        smi = bin_dir / "nvidia-smi"
        smi.write_text("#!/bin/sh\n" + "".join(f"echo 'GPU {g}: NVIDIA H100 (UUID: GPU-{g})'\n" for g in range(gpus)))
        smi.chmod(0o755)
    else:  # no nvidia-smi at all: a PATH without it
        path = f"{bin_dir}:/usr/bin:/bin"
        assert shutil.which("nvidia-smi", path=path) is None
    script = dok_batch.script(list(enumerate(items)), command, item_limit_s)
    return subprocess.run([SH, "-c", script], env={"PATH": path, "SAKURA_ARTIFACT_DIR": str(tmp_path / "artifact")},
                          capture_output=True, text=True, timeout=120)


# a stand-in item: records that it ran, how many ran at once (a file per running item) and its GPU.
# The first `want` items (one per GPU) wait for each other, up to 30 s: on a busy machine one of
# them could end before the last has started, and the runner would look as if it used fewer GPUs.
STAND_IN = r"""
d=$1; item=$2; want=$3
: >"$d/running/$$"
i=${item#item }; i=${i%% *}
n=0
while [ "$i" -lt "$want" ] && [ "$(ls "$d/running" | wc -l)" -lt "$want" ] && [ $n -lt 300 ]; do sleep 0.1; n=$((n+1)); done
set -- "$d"/running/*
echo "$#" >>"$d/concurrency"
printf '%s\n' "$item" >>"$d/ran"
echo "$CUDA_VISIBLE_DEVICES" >>"$d/gpus"
sleep 0.2
rm -f "$d/running/$$"
"""


@pytest.mark.parametrize("gpus,expect", [(None, 8), (8, 8), (2, 2)])
def test_runner_runs_every_item_exactly_once_at_most_one_per_gpu(tmp_path, gpus, expect):
    work = tmp_path / "work"
    (work / "running").mkdir(parents=True)
    (tmp_path / "item.sh").write_text(STAND_IN)
    items = [f"item {i} 'q' \"d\" $x `y` *" for i in range(20)]
    r = _run_runner(tmp_path, items, ["sh", str(tmp_path / "item.sh"), str(work), "{item}", str(expect)], gpus)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert sorted((work / "ran").read_text().splitlines()) == sorted(items)  # each exactly once, as given
    most = max(int(n) for n in (work / "concurrency").read_text().split())
    assert most == expect  # never more at once than GPUs, and all of them used
    assert set((work / "gpus").read_text().split()) == {str(g) for g in range(expect)}
    statuses = dok_batch.statuses(_tar(tmp_path / "artifact", tmp_path / "a.tar.gz"))
    assert sorted(statuses) == list(range(20)) and {s.exit_code for s in statuses.values()} == {0}
    assert all(s.start <= s.end for s in statuses.values())
    assert r.stdout.count("gpuplan: item ") == 40 and f"20 items on {expect} GPUs" in r.stdout


def test_runner_exits_non_zero_when_an_item_fails_and_records_each_exit_code(tmp_path):
    r = _run_runner(tmp_path, ["ok", "bad", "missing"], ["sh", "-c", '[ "$1" = ok ] || { [ "$1" = bad ] && exit 7; }; '
                    '[ "$1" != missing ] || exec no-such-program-here', "_", "{item}"], None)
    assert r.returncode == 1 and "2 of 3 items failed" in r.stdout
    statuses = dok_batch.statuses(_tar(tmp_path / "artifact", tmp_path / "a.tar.gz"))
    assert [statuses[i].exit_code for i in range(3)] == [0, 7, 127]
    log = dok_batch.item_log(tmp_path / "a.tar.gz", 2).decode()
    assert "no-such-program-here" in log


def test_a_command_named_like_the_runners_own_functions_runs_the_program(tmp_path):
    (tmp_path / "bin").mkdir()
    prog = tmp_path / "bin" / "gpuplan_one"
    prog.write_text("#!/bin/sh\necho program \"$1\"\n")
    prog.chmod(0o755)
    _run_runner(tmp_path, ["x"], ["gpuplan_one", "{item}"], 1)
    assert (tmp_path / "artifact" / "gpuplan" / "0.log").read_text() == "program x\n"


def test_script_refuses_a_batch_over_the_size_one_argument_may_have():
    with pytest.raises(UsageError, match="split the items file"):
        dok_batch.script([(i, "x" * 200) for i in range(1000)], ["run", "{item}"])
    assert len(dok_batch.script([(i, "x" * 20) for i in range(1000)], ["run", "{item}"]).encode()) < dok_batch.MAX_SCRIPT_BYTES


def _tar(folder: Path, dest: Path) -> Path:
    import tarfile

    with tarfile.open(dest, "w:gz") as tar:
        tar.add(folder, arcname=".")
    return dest


def test_run_dok_with_a_saved_8gpu_pick_runs_it_as_one_task_at_the_planned_yen(fake, cli, tmp_path, monkeypatch):
    import threading
    import time

    from support.issue_cases import FOUR_TEN_MINUTE_H100_JOBS

    monkeypatch.setenv("GPUPLAN_POLL_S", "0.05")
    work = tmp_path / "ten-minutes.yaml"
    work.write_text(FOUR_TEN_MINUTE_H100_JOBS.replace("memory_gib: 20", "memory_gib: 40"))  # too big for the V100
    plan = tmp_path / "plan.json"
    r = cli("estimate", "--workload", str(work), "--provider", "sakura", "--save", str(plan))
    assert r.code == 0, r.err
    saved = json.loads(plan.read_text())
    assert (saved["provider"], saved["instance_type"]) == ("sakura", "dok-h100-8gpu-80gb")  # issue 22's ¥498 pick

    def time_passes():
        deadline = time.monotonic() + 60
        while not fake.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        fake.advance(seconds=600)  # the four jobs side by side: 10 minutes

    threading.Thread(target=time_passes, daemon=True).start()
    r = cli("run", "-y", "dok", "--plan", str(plan), "--image", "img:1", "--items", _items(tmp_path, [f"job{i}" for i in range(4)]),
            "--", "sh", "-c", "echo $1", "_", "{item}")
    assert r.code == 0, (r.out, r.err)
    [body] = _posted(fake)
    assert body["containers"][0]["plan"] == "h100-8gpu-80gb"
    # 600 s x ¥0.83 = ¥498, the plan's figure
    assert "¥498 (one task billed for its run time at ¥2,988/h, at least 60 s)" in r.out
    assert "plan:" in r.out and "yen +0.0%" in r.out


def test_while_the_task_waits_its_items_are_queued_and_a_timed_out_task_fails_them_with_why(fake, cli, tmp_path):
    from support.sakura_dok_fake import client_for

    other = client_for(fake, fake.root).submit("someone-else", "img:1", "h100-80gb")  # the project's one running task
    r = cli("run", "-y", "dok:h100-8gpu-80gb", "--image", "img:1", "--items", _items(tmp_path, ["a", "b"]), "--detach",
            "--", "work", "{item}")
    assert r.code == 0, r.err
    [job] = json.loads(cli("jobs", "dok", "--format", "json").out)
    assert (job["state"], job["queued"], job["running"], job["yen"]) == ("submitted", 2, 0, "0.00")
    fake.execute = False  # nothing runs: the 8-GPU task reaches its time limit with no artifact
    fake.advance(seconds=5)  # the other task ends; ours starts
    assert fake.tasks[other.id]["status"] == "done"
    [job] = json.loads(cli("jobs", "dok", "--format", "json").out)
    assert (job["state"], job["running"]) == ("running", 2)
    fake.advance("aborted", seconds=7200)
    [job] = json.loads(cli("jobs", "dok", "--format", "json").out)
    assert (job["state"], job["timed_out"], job["succeeded"]) == ("failed", 2, 0)
    assert job["yen"] == "5976.00"  # 7,200 s x ¥0.83, one task
    r = cli("logs", "dok", "dok-1", "a")
    assert r.code == 2 and "the task reached its time limit before this item ended" in r.err


def test_provision_of_the_8gpu_offer_points_to_run_dok(cli):
    r = cli("provision", "sakura:dok-h100-8gpu-80gb", "x1", "--dry-run")
    assert r.code == 2 and "gpuplan run dok:h100-8gpu-80gb --image IMAGE --items FILE -- CMD {item}" in r.err


def test_runner_kills_an_item_past_its_timeout_and_says_so(tmp_path):
    import time

    began = time.monotonic()
    r = _run_runner(tmp_path, ["quick", "slow"], ["sh", "-c", '[ "$1" = quick ] || exec sleep 30', "_", "{item}"], 2,
                    item_limit_s=1)
    assert time.monotonic() - began < 20  # not the 30 s the slow one asked for
    assert r.returncode == 1 and "1 of 2 items failed" in r.stdout
    statuses = dok_batch.statuses(_tar(tmp_path / "artifact", tmp_path / "a.tar.gz"))
    assert (statuses[0].exit_code, statuses[0].timed_out) == (0, False)
    assert (statuses[1].exit_code, statuses[1].timed_out) == (137, True)
