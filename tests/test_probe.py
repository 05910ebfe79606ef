"""`gpuplan probe`: the batch's own job timed at two sizes on the offers that contend for the pick,
a profile per GPU, and the next estimate planned from them.

The arithmetic (planning/probing.py) by hand; the DOK pick probed through the DOK fake (the pick
itself among the offers); two owned offers on loopback hosts (real sshd, real Ray) whose stand-in
job runs at different speeds: tests/test_probe_owned.py.
"""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest
import yaml

from gpuplan import batchfile
from gpuplan.errors import UsageError
from gpuplan.planning import probing
from support.sakura_dok_fake import run_the_queue, serving

D = Decimal


def test_two_sizes_separate_the_start_from_the_time_per_unit():
    # 2 units in 70 s and 10 units in 310 s: 30 s a unit, 10 s to start
    f = probing.fit((2, 10), (D(70), D(310)))
    assert (f.per_unit_s, f.start_s) == (D(30), D(10))
    with pytest.raises(probing.ProbeMisfit, match="does the probe command use {units}"):
        probing.fit((2, 10), (D(70), D(69)))


def test_default_sizes_are_half_a_minute_and_two_minutes_of_planned_work():
    assert probing.default_units(D("0.936")) == (33, 129)  # ceil(30 / 0.936), ceil(120 / 0.936)
    assert probing.default_units(D(300)) == (1, 2)  # a unit longer than both: the smallest two sizes


def test_the_budget_takes_probes_in_order_while_they_fit_together():
    assert probing.budget_of(None, D(60)) == D("1.2")  # 2 % of the pick's yen by default
    assert probing.budget_of("¥1,500", D(60)) == D(1500)
    with pytest.raises(UsageError, match="bad --probe-budget"):
        probing.budget_of("lots", D(60))
    offers = [object(), object(), object()]
    priced = [probing.Priced(o, (1, 2), object(), y) for o, y in zip(offers, (D(10), D(50), D(30)))]  # type: ignore[arg-type]
    take, skip = probing.within(priced, D(45))
    assert [p.yen for p in take] == [D(10), D(30)] and [p.yen for p in skip] == [D(50)]


def test_a_probe_field_needs_units_in_its_command(tmp_path):
    (tmp_path / "v.txt").write_text("a\n")
    base = {"workload": "colorize-hd", "items": "v.txt", "command": "run {item}"}
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump({**base, "probe": {"command": "run {item} --steps 5"}}))
    with pytest.raises(UsageError, match=r"has no \{units\}"):
        batchfile.read(path, {})
    path.write_text(yaml.safe_dump({**base, "probe": {"command": "run {item} --steps {units}", "units": [10, 2]}}))
    with pytest.raises(UsageError, match="the smaller first"):
        batchfile.read(path, {})
    path.write_text(yaml.safe_dump({**base, "command": "run {item} --steps {units}"}))
    assert batchfile.read(path, {}).probe == batchfile.Probe(("run", "{item}", "--steps", "{units}"))


# --- the DOK pick, through the DOK fake ---------------------------------------------------------


@pytest.fixture
def dok_env(monkeypatch):
    with serving(monkeypatch, execute=True) as fake:  # tasks' commands run here: the 8-GPU plan's items are timed by its own script
        yield fake


# The stand-in job sleeps 0.2 s + 0.5 s an epoch. A one-GPU task's time is what DOK reports
# (execution_seconds), set here as 10 s + 2 s an epoch: a V100 at half the generic table's speed,
# inside its band. The 8-GPU plan's one task runs both sizes side by side, each timed by its
# script in whole seconds: 0.5 s an epoch.
STAND_IN = "python3 -c 'import sys, time; time.sleep(0.2 + int(sys.argv[1]) * 0.5)' {units}"


def _end_by_size(fake):
    def end() -> None:
        c = fake.running()[0]["containers"][0]
        fake.advance(seconds=10 + int(c["command"][-1]) * 2 if c["plan"] == "v100-32gb" else 60)
    return end


def test_the_dok_pick_itself_is_probed_and_the_next_estimate_plans_from_it(dok_env, cli, tmp_path, monkeypatch,
                                                                             gpuplan_home):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "videos.txt").write_text("".join(f"v{i}.mp4\n" for i in range(4)))
    (tmp_path / "batch.yaml").write_text(yaml.safe_dump({
        "workload": "colorize-hd", "items": "videos.txt", "infra": ["dok"], "image": "registry.example/me/colorize:1",
        "command": "colorize {item}", "probe": {"command": STAND_IN, "units": [2, 10]}}))
    before = cli("estimate", "--videos", "4", "--provider", "sakura")
    assert "→  1x dok-v100-32gb" in before.out  # today's pick, on the generic table's speed
    r = cli("probe", "batch.yaml", "--dry-run")  # the default budget, 2 % of the pick's ¥60, buys no probe: said
    assert r.code == 2 and "no probe fits the budget ¥1; the cheapest may cost ¥2: raise --probe-budget" in r.err
    r = cli("probe", "batch.yaml", "--dry-run", "--probe-budget", "5")  # the pick's own probe, the rival's skipped
    assert r.code == 0, r.err
    assert "sakura:dok-v100-32gb (V100, the pick): 2 and 10 epochs, at most ¥2, about 6 min\n" in r.out
    assert "(H100 PCIe, a rival): 2 and 10 epochs, at most ¥51, about 3 min — skipped: past the probe budget" in r.out
    assert "budget ¥5 (--probe-budget): 1 probe, at most ¥2 in all" in r.out
    assert [p for m, p, _ in dok_env.requests if m == "POST"] == []  # a dry run sends nothing
    # both, with a budget that buys both: the V100's two tasks and the 8-GPU plan's one
    worker = threading.Thread(target=run_the_queue, args=(dok_env, 3, _end_by_size(dok_env)), daemon=True)
    worker.start()
    r = cli("probe", "batch.yaml", "--probe-budget", "2000", "-y")
    worker.join(30)
    assert r.code == 0, r.out + r.err
    assert "budget ¥2,000 (--probe-budget): 2 probes, at most ¥53 in all" in r.err  # shown before it spent
    posted = [b["containers"][0] for m, p, b in dok_env.requests if m == "POST" and p == "tasks/"]
    assert sorted((c["plan"], c["command"][-1]) for c in posted if c["plan"] == "v100-32gb") == [
        ("v100-32gb", "10"), ("v100-32gb", "2")]  # the pick itself, at both sizes
    assert [c["plan"] for c in posted].count("h100-8gpu-80gb") == 1
    # V100: 2 epochs in 14 s, 10 in 30 s -> 2 s an epoch, 10 s to start
    assert "probe sakura:dok-v100-32gb (V100): 2 epochs in 14.0 s, 10 in 30.0 s: 2.0 s per epoch, start 10 s" in r.out
    h100 = [ln for ln in r.out.splitlines() if ln.startswith("probe sakura:dok-h100-8gpu-80gb (H100 PCIe): 2 epochs in")]
    per_epoch = D(h100[0].split(": ")[2].split(" s per epoch")[0])
    assert D("0.2") <= per_epoch <= D(2)  # 0.5 s slept an epoch, read in whole seconds by the task's script
    spent = D(r.out.split("measured, ¥")[1].split(" ")[0].replace(",", ""))
    assert "probes: 2 of 2 offers measured" in r.out and spent <= D(53)
    measured = sorted(p.name for p in (gpuplan_home / "state" / "profiles" / "measured").glob("*.yaml"))
    assert measured == ["colorize-hd--sakura-dok-h100-8gpu-80gb@is1a.yaml", "colorize-hd--sakura-dok-v100-32gb@is1a.yaml"]
    after = cli("estimate", "--videos", "4", "--provider", "sakura")
    said = after.out + after.err
    assert "measured (probe): colorize-hd on sakura:dok-v100-32gb (V100" in said
    assert "measured (probe): colorize-hd on sakura:dok-h100-8gpu-80gb (H100 PCIe" in said
    assert "→  1x dok-v100-32gb" in after.out
    assert [t for t in dok_env.tasks.values() if t["status"] in ("waiting", "running")] == []


def test_launch_probe_measures_first_then_launches_the_pick_planned_again(dok_env, cli, tmp_path, monkeypatch):
    import time

    monkeypatch.chdir(tmp_path)
    (tmp_path / "videos.txt").write_text("".join(f"v{i}.mp4\n" for i in range(4)))
    (tmp_path / "batch.yaml").write_text(yaml.safe_dump({
        "workload": "colorize-hd", "items": "videos.txt", "infra": ["dok"], "image": "registry.example/me/colorize:1",
        "command": "echo {item}", "probe": {"command": STAND_IN, "units": [2, 10]}}))
    r = cli("launch", "batch.yaml", "--probe", "--probe-budget", "5", "--dry-run")
    assert r.code == 0, r.err
    assert "budget ¥5 (--probe-budget): 1 probe, at most ¥2 in all" in r.out and "dry run: nothing was run" in r.out
    assert "launch 4 items on 1x sakura:dok-v100-32gb" in r.out and "dry run: nothing was created" in r.out
    assert [p for m, p, _ in dok_env.requests if m == "POST"] == []

    def time_passes() -> None:  # the probe's two tasks, then the batch's four
        end = _end_by_size(dok_env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.05)
            if dok_env.running():
                c = dok_env.running()[0]["containers"][0]
                if c["command"][-1].isdigit():
                    end()
                else:
                    dok_env.advance(seconds=600)
            elif len(dok_env.tasks) >= 6 and not any(t["status"] == "waiting" for t in dok_env.tasks.values()):
                return

    worker = threading.Thread(target=time_passes, daemon=True)
    worker.start()
    r = cli("launch", "batch.yaml", "--probe", "--probe-budget", "5", "-y")
    worker.join(70)
    assert r.code == 0, r.out + r.err
    assert "probe sakura:dok-v100-32gb (V100): 2 epochs in 14.0 s, 10 in 30.0 s: 2.0 s per epoch" in r.out
    assert "planned again with what the probes measured:" in r.out
    again = r.out[r.out.index("planned again"):]
    assert "→  1x dok-v100-32gb" in again and "measured (probe): colorize-hd on sakura:dok-v100-32gb" in again
    posted = [b["containers"][0] for m, p, b in dok_env.requests if m == "POST" and p == "tasks/"]
    assert [c["command"][-1] for c in posted][2:] == [f"v{i}.mp4" for i in range(4)]  # then the batch itself
    assert "4 ok of 4 items" in " ".join(r.out.split())


def test_a_probe_that_fails_says_why_on_one_line_and_leaves_nothing_running(dok_env, cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "videos.txt").write_text("v0.mp4\nv1.mp4\n")
    broken = "python3 -c 'import sys; sys.exit(3 if int(sys.argv[1]) > 5 else 0)' {units}"  # the larger size fails
    (tmp_path / "batch.yaml").write_text(yaml.safe_dump({
        "workload": "colorize-hd", "items": "videos.txt", "infra": ["dok"], "image": "registry.example/me/colorize:1",
        "command": "echo {item}", "probe": {"command": broken, "units": [2, 10]}}))
    worker = threading.Thread(target=run_the_queue, args=(dok_env, 3, _end_by_size(dok_env)), daemon=True)
    worker.start()
    r = cli("probe", "batch.yaml", "--probe-budget", "2000", "-y")
    worker.join(30)
    assert r.code == 5 and "no probe measured" in r.err and "Traceback" not in r.err
    lines = [ln for ln in r.out.splitlines() if ln.startswith("probe sakura:")]
    assert len(lines) == 2 and all("not measured: the probe of 10 units: failed" in ln for ln in lines)
    assert [t for t in dok_env.tasks.values() if t["status"] in ("waiting", "running")] == []


def test_what_would_stop_a_probe_is_said_before_the_question_and_nothing_is_made(cli, tmp_path, monkeypatch,
                                                                                 gpuplan_home):
    from support.credentials import without_credentials

    without_credentials(monkeypatch, tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "videos.txt").write_text("v0.mp4\n")
    (tmp_path / "batch.yaml").write_text(yaml.safe_dump({
        "workload": "colorize-hd", "items": "videos.txt", "infra": ["aws"], "command": "echo {item}",
        "probe": "run {item} --epochs {units}"}))
    r = cli("probe", "batch.yaml", "--probe-budget", "5000", "-y")
    assert r.code == 2 and "no offer can be probed: each line above says why" in r.err and "Traceback" not in r.err
    lines = [ln for ln in r.err.splitlines() if ln.startswith("  aws:")]
    assert lines and all("cannot be probed: no AWS credentials: set AWS_PROFILE" in ln for ln in lines)
    from gpuplan import paths
    from gpuplan.store.state import State

    state = State(paths.state_db())
    assert state.clusters(include_gone=True) == []
    state.close()
