"""A team's state on PostgreSQL (issue 45 items 1 and 4): the same State on a real server
(support/postgres.py), its password never shown, writers taking turns, locks that hold across
machines, and a database that is away: one line, nothing created, no cloud call unjournaled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpuplan.errors import Busy, StateUnreachable, UsageError
from gpuplan.store.state import State
from support.postgres import start_server

ROOT = Path(__file__).resolve().parents[1]


def _rows(state: State, table: str) -> int:
    return state._query(f"SELECT COUNT(*) AS n FROM {table}")[0]["n"]


def _files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*")) if folder.exists() else []


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once closed


# --- the URL and its password --------------------------------------------------------------------

def test_a_url_with_a_password_is_refused_and_the_password_shown_nowhere(cli, gpuplan_home, monkeypatch):
    monkeypatch.setenv("GPUPLAN_STATE_URL", "postgresql://alice:Hunter2secret@127.0.0.1:5432/team")
    r = cli("status")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert "PGPASSWORD or ~/.pgpass" in r.err and "postgresql://alice@127.0.0.1:5432/team" in r.err
    assert "Hunter2secret" not in r.out + r.err and "Traceback" not in r.err
    assert _files(gpuplan_home / "state") == []
    # the same URL in config.yaml: refused the same way
    monkeypatch.delenv("GPUPLAN_STATE_URL")
    (gpuplan_home / "config").mkdir(parents=True)
    (gpuplan_home / "config" / "config.yaml").write_text("state_url: postgresql://alice:Hunter2secret@db:5432/team\n")
    r = cli("cost-report")
    assert r.code == 2 and "config.yaml: state_url" in r.err and "PGPASSWORD" in r.err
    assert "Hunter2secret" not in r.out + r.err


def test_a_url_that_is_not_postgresql_is_one_line(cli, monkeypatch):
    monkeypatch.setenv("GPUPLAN_STATE_URL", "mysql://alice@db/team")
    r = cli("status")
    assert r.code == 2 and "is not a PostgreSQL URL; write postgresql://USER@HOST:PORT/DATABASE" in r.err


# --- the database away ---------------------------------------------------------------------------

def test_a_database_away_is_one_line_and_creates_nothing(cli, gpuplan_home, monkeypatch):
    port = _closed_port()
    monkeypatch.setenv("GPUPLAN_STATE_URL", f"postgresql://gpuplan@127.0.0.1:{port}/team")
    monkeypatch.setenv("PGPASSWORD", "Hunter2secret")
    for argv in (("status",), ("cost-report",), ("teardown", "--yes", "demo")):
        r = cli(*argv)
        assert r.code == 2 and len(r.err.strip().splitlines()) == 1, (argv, r.err)
        assert r.err.startswith(f"gpuplan: error: cannot reach the state database postgresql://gpuplan@127.0.0.1:{port}/team")
        assert "check that the server runs and that host, port and database are right" in r.err
        assert "nothing was changed" in r.err and "Traceback" not in r.err and "Hunter2secret" not in r.err
        assert _files(gpuplan_home / "state") == []


def test_a_cloud_call_whose_intent_cannot_be_written_is_not_made(tmp_path):
    server = start_server()
    try:
        server.psql("CREATE DATABASE team")
        state = State(tmp_path / "x.db", url=server.url("team"))
        state.add_cluster("demo", "aws", "ap-northeast-1", "g4dn.xlarge", 1)
        calls: list[str] = []
        server.stop()
        with pytest.raises(StateUnreachable) as caught:
            with state.journaled("create-nodes", "demo-0", "demo"):
                calls.append("create")
        assert calls == [] and str(caught.value).startswith(f"lost the state database {server.url('team')} mid-command")
        server.start()  # back: the same State goes on, on a new connection (none was in a transaction)
        assert state.journal() == [] and [c.name for c in state.clusters()] == ["demo"]
        with state.journaled("create-nodes", "demo-0", "demo"):
            calls.append("create")
        assert calls == ["create"] and [j.phase for j in state.journal()] == ["ok"]
        state.close()
    finally:
        server.stop()
        import shutil

        shutil.rmtree(server.folder, ignore_errors=True)


def test_a_login_the_server_refuses_is_one_line_naming_where_the_password_comes_from(cli, postgres_server, monkeypatch):
    url = f"postgresql://nosuch@127.0.0.1:{postgres_server.port}/postgres"
    monkeypatch.setenv("GPUPLAN_STATE_URL", url)
    r = cli("status")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err
    assert r.err.startswith(f"gpuplan: error: cannot reach the state database {url} (")
    assert '"nosuch" does not exist' in r.err and "check the user and the password in PGPASSWORD or ~/.pgpass" in r.err


def test_postgres_stopped_mid_provision_leaves_nothing_the_journal_does_not_hold(tmp_path, monkeypatch):
    """The server stops right after the create call, before its outcome is written: the
    provision fails with one line and makes no other call that needs a journal row first (no
    wait for the machines); its rollback deletes what was made all the same (journaled where the
    state can be written, deleted either way: a lost state must not keep machines billing).
    Once the server is back, the journal holds the create and names every machine it made."""
    from test_lifecycle import offer

    from gpuplan import faults
    from gpuplan.fleet import lifecycle
    from support.memory_provider import MemoryProvider

    monkeypatch.setenv("GPUPLAN_HOME", str(tmp_path / "home"))
    server = start_server()
    try:
        server.psql("CREATE DATABASE team")
        state = State(tmp_path / "unused.db", url=server.url("team"))
        prov = MemoryProvider()
        calls: list[str] = []
        for name in ("wait_ready", "create"):
            real = getattr(prov, name)
            monkeypatch.setattr(prov, name, lambda *a, _real=real, _name=name, **k: calls.append(_name) or _real(*a, **k))
        real_hit = faults.hit

        def hit(point: str) -> None:
            if point == "after:create-nodes":
                server.stop()
            real_hit(point)

        monkeypatch.setattr(faults, "hit", hit)
        with pytest.raises(StateUnreachable) as caught:
            lifecycle.provision(state, prov, lifecycle.request_from_offer(offer(), 2, name="demo"))
        assert str(caught.value).startswith(f"lost the state database {server.url('team')} mid-command")
        assert "\n" not in str(caught.value) and calls == ["create"]  # one create; no wait
        assert prov.resources == {}  # the rollback removed both machines and their disks
        state.close()

        monkeypatch.setattr(faults, "hit", real_hit)
        server.start()
        state = State(tmp_path / "unused.db", url=server.url("team"))
        [entry] = [j for j in state.journal("demo") if j.op == "create-nodes"]
        assert entry.phase == "intent" and set(entry.target.split(",")) == {"demo-0", "demo-1"}
        assert {n.name for n in state.nodes("demo")} == {"demo-0", "demo-1"}
        lifecycle.teardown(state, prov, "demo")  # what the one line says to run: it finds nothing left
        assert prov.resources == {} and state.cluster("demo").status == "gone"
        state.close()
    finally:
        server.stop()
        import shutil

        shutil.rmtree(server.folder, ignore_errors=True)


# --- both stores, the same answers ---------------------------------------------------------------

def test_the_other_tables_read_back_the_same_on_both_stores(tmp_path, store):
    """What the lifecycle, job-row and ledger tests (run on both stores) do not cover: images,
    keys, pins, quotas, setup times, calibrations, speed points, runs, the installation id."""
    state = State(tmp_path / "state.db", url=store)
    try:
        assert state.shared is (store is not None)
        assert state.installation_id() == state.installation_id() and len(state.installation_id()) == 12
        state.add_image("img", "aws", "r", "g", "cuda")
        state.update_image("img", status="ready", provider_id="ami-1")
        assert [(i.name, i.status, i.provider_id) for i in state.images()] == [("img", "ready", "ami-1")]
        state.save_ssh_key("c", tmp_path / "k1", "ssh-ed25519 A")
        state.save_ssh_key("c", tmp_path / "k2", "ssh-ed25519 B")  # replaces
        assert state.ssh_key("c") == (tmp_path / "k2", "ssh-ed25519 B")
        state.pin_host_key("10.0.0.1", 22, "ssh-ed25519 K1", "c", "c-0", origin="injected")
        state.set_pending_host_key("10.0.0.1", 22, "ssh-ed25519 K2")
        state.pin_host_key("10.0.0.1", 22, "ssh-ed25519 K2", "c", "c-0")  # the rotation confirmed
        pin = state.host_pin("10.0.0.1", 22)
        assert (pin.key, pin.origin, pin.pending_key) == ("ssh-ed25519 K2", "node", None)
        state.pin_host_key("10.0.0.2", 2222, "ssh-ed25519 K3")
        assert state.known_hosts_lines() == ["10.0.0.1 ssh-ed25519 K2", "[10.0.0.2]:2222 ssh-ed25519 K3"]
        state.save_quota("aws", "r", "L-1", 8, "vCPUs")
        state.save_quota("aws", "r", "L-1", 16, "vCPUs")
        assert [(q["name"], q["limit"]) for q in state.quotas()] == [("L-1", 16)]
        state.record_setup_time("aws", "g", "cuda", 300)
        state.record_setup_time("aws", "g", "cuda", 240)  # the same second: the later row wins
        state.record_setup_time("aws", "g", "ray", 90)
        assert state.setup_time("aws", "g")[0] == 240 and state.setup_time("aws", "g", "ray")[0] == 90
        state.record_calibration("w", "aws", "g", 10, 5.0, 6.5, "c", batch="c-1")
        state.record_calibration("w", "aws", "g", 10, 5.0, 7.25, "c", batch="c-2")
        [cal] = state.calibrations("w")
        assert (cal["measured_s"], cal["batch"]) == (7.25, "c-2") and "rowid" not in cal
        assert state.remove_calibration(cal["id"]) == 2 and state.calibrations() == []
        state.record_speed_point("w", "aws", "g", 4, 8, 10.0, "other fleet", "c")
        state.record_speed_point("w", "aws", "g", 2, 8, 20.0, "other fleet", "c")
        assert [p["seconds_per_job_per_gpu"] for p in state.speed_points("w")] == [5.0, 5.0]
        assert all("rowid" not in p for p in state.speed_points("w"))
        from datetime import datetime, timezone

        state.record_run("c", "j", "c-0", "c-0:0", "ok", 1, 1.5, None, datetime(2026, 1, 1, tzinfo=timezone.utc))
        assert [(r["job"], r["seconds"]) for r in state.runs("c")] == [("j", 1.5)]
    finally:
        state.close()


# --- the schema, migrations and the tables of another program -----------------------------------

def test_a_database_of_another_program_is_refused_in_one_line(postgres_server, postgres_url, tmp_path):
    postgres_server.psql("CREATE TABLE invoices (id int)", db=postgres_url.rsplit("/", 1)[1])
    with pytest.raises(UsageError) as caught:
        State(tmp_path / "x.db", url=postgres_url)
    assert "is not a gpuplan state database (its tables: invoices)" in str(caught.value)
    assert postgres_url in str(caught.value)


def test_an_older_database_gets_the_columns_added_since(postgres_server, postgres_url, tmp_path):
    State(tmp_path / "x.db", url=postgres_url).close()
    db = postgres_url.rsplit("/", 1)[1]  # job_quarantines as first shipped: no code column, a row then
    postgres_server.psql("DROP TABLE job_quarantines; CREATE TABLE job_quarantines (job TEXT NOT NULL,"
                         " node TEXT NOT NULL, reason TEXT NOT NULL, rowid BIGINT GENERATED ALWAYS AS IDENTITY);"
                         " INSERT INTO job_quarantines VALUES ('c-1', 'c-1', 'lost: NodeDiedError')", db=db)
    state = State(tmp_path / "x.db", url=postgres_url)
    try:
        state.add_job("c-1", "c", ["echo"], {}, [(0, "a")], nodes=1)
        state.record_job_events("c-1", [{"t": "quarantine", "node": "c-2", "code": "failures", "reason": "why"}], 1)
        assert [(q.node, q.code) for q in state.job_quarantines("c-1")] == [("c-1", "unknown"), ("c-2", "failures")]
    finally:
        state.close()


def test_processes_starting_together_on_a_new_database_make_one_schema(postgres_url, tmp_path):
    code = ("import sys\nfrom gpuplan.store.state import State\n"
            "s = State(sys.argv[1], url=sys.argv[2]); print(s.installation_id()); s.close()")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / f"{i}.db"), postgres_url], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(6)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, [e for _, e in outs]
    assert len({o.strip() for o, _ in outs}) == 1  # one installation id, made once, for the team


# --- one team, one state -------------------------------------------------------------------------

def test_writers_take_turns_so_a_read_then_write_never_takes_a_number_twice(postgres_url, tmp_path):
    """add_numbered_job reads the cluster's numbers, then writes the next: 24 at once from 6
    connections take 24 different numbers (the writers' advisory lock; without it two read the same)."""
    states = [State(tmp_path / "x.db", url=postgres_url) for _ in range(6)]
    try:
        with ThreadPoolExecutor(6) as pool:
            jobs = list(pool.map(lambda i: states[i % 6].add_numbered_job("c", ["x"], {}, [(0, "a")], 1), range(24)))
        assert sorted(jobs, key=lambda j: int(j.rsplit("-", 1)[1])) == [f"c-{n}" for n in range(1, 25)]
    finally:
        for s in states:
            s.close()


def test_two_homes_on_one_database_share_the_state_and_its_installation_id(postgres_url, tmp_path):
    alice = State(tmp_path / "alice" / "state.db", url=postgres_url)
    bob = State(tmp_path / "bob" / "state.db", url=postgres_url)
    try:
        alice.add_cluster("vision", "aws", "ap-northeast-1", "g5.xlarge", 1)
        assert [c.name for c in bob.clusters()] == ["vision"]
        assert alice.installation_id() == bob.installation_id()
        assert not (tmp_path / "alice").exists() and not (tmp_path / "bob").exists()  # no SQLite file, no id file
    finally:
        alice.close()
        bob.close()


def test_a_teammates_stray_is_found_by_my_sweep(postgres_url, tmp_path, monkeypatch):
    """One installation for the team: Alice's machines carry the team's owner tag, so Bob's
    sweep (another user, another host) finds those the state no longer knows."""
    from test_lifecycle import offer

    from gpuplan import config
    from gpuplan.fleet import lifecycle
    from support.memory_provider import MemoryProvider

    prov = MemoryProvider()
    monkeypatch.setattr(config, "legacy_owner", lambda: "alice-laptop")
    alice = State(tmp_path / "alice" / "state.db", url=postgres_url)
    lifecycle.provision(alice, prov, lifecycle.request_from_offer(offer(), 2, name="demo"))
    mine = lifecycle.owner(alice)
    assert mine == f"team-{alice.installation_id()}"
    assert {r.tags["gpuplan-owner"] for r in prov.resources.values()} == {mine}
    alice.set_cluster_status("demo", "gone")  # the state forgets the cluster; its machines stay
    alice.forget_cluster("demo")
    monkeypatch.setattr(config, "legacy_owner", lambda: "bob-desk")
    bob = State(tmp_path / "bob" / "state.db", url=postgres_url)
    assert lifecycle.owner(bob) == mine
    plan = lifecycle.sweep_find(bob, prov, ["mem-1"], lifecycle.sweep_owners(bob), grace_s=0)
    assert sorted(r.kind for r in plan.strays) == ["disk", "disk", "instance", "instance"]
    lifecycle.sweep_delete(bob, prov, plan.strays)
    assert prov.resources == {}
    alice.close()
    bob.close()


def test_a_lock_held_from_one_home_holds_for_another_on_the_same_database(postgres_url, tmp_path, monkeypatch):
    """Two homes (two machines: their own lock files) on one PostgreSQL state: a cluster's lock
    excludes across them, names its holder, and frees when the holder dies (kill -9)."""
    from gpuplan.fleet import locks

    env = {**os.environ, "PYTHONPATH": str(ROOT), "GPUPLAN_HOME": str(tmp_path / "alice"),
           "GPUPLAN_STATE_URL": postgres_url}
    holder = subprocess.Popen([sys.executable, "-c", "import time\nfrom gpuplan.fleet import locks\n"
                               "with locks.cluster('vision'):\n    print('held', flush=True)\n    time.sleep(120)"],
                              env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setenv("GPUPLAN_HOME", str(tmp_path / "bob"))
        monkeypatch.setenv("GPUPLAN_STATE_URL", postgres_url)
        with pytest.raises(Busy) as caught:
            with locks.cluster("vision", wait_s=0.3):
                pass
        assert f"gpuplan pid {holder.pid} on " in str(caught.value) and "holds its lock" in str(caught.value)
        with locks.cluster("other", wait_s=0):  # another name is free
            pass
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 10
    while True:  # the server notices the dead session's end at once, but give it a moment on a busy machine
        try:
            with locks.cluster("vision", wait_s=0):
                break
        except Busy:
            assert time.monotonic() < deadline, "the lock of a killed holder was not freed"
            time.sleep(0.1)
    monkeypatch.setenv("GPUPLAN_STATE_URL", "")  # the SQLite state: two homes share no lock
    with locks.cluster("vision", wait_s=0):
        pass


# --- the commands ------------------------------------------------------------------------------

def test_provision_status_teardown_and_cost_report_run_on_postgres(cli, mem, postgres_url, monkeypatch, gpuplan_home):
    monkeypatch.setenv("GPUPLAN_STATE_URL", postgres_url)
    r = cli("provision", "--yes", "memory:m1.gpu", "x2", "--name", "demo", "--no-bootstrap")
    assert r.code == 0, r.err
    [listed] = json.loads(cli("status", "--format", "json").out)
    assert (listed["name"], listed["count"], len(listed["nodes"])) == ("demo", 2, 2)
    time.sleep(1.1)  # the ledger keeps whole seconds
    assert cli("teardown", "--yes", "demo").code == 0 and mem.resources == {}
    doc = json.loads(cli("cost-report", "--format", "json", "--tax", "excluded").out)
    assert [line["cluster"] for line in doc["lines"]] == ["demo"]
    assert not (gpuplan_home / "state" / "state.db").exists()  # the state is the database, not a file


def test_an_estimate_on_an_empty_database_makes_no_table(cli, postgres_url, monkeypatch):
    from gpuplan.store.sql import PostgresDb

    monkeypatch.setenv("GPUPLAN_STATE_URL", postgres_url)
    r = cli("estimate", "--videos", "4")
    assert r.code == 0 and "recommend" in r.out.lower(), r.err
    db = PostgresDb(postgres_url)
    assert db.tables() == {}  # an estimate reads a state, never makes one
    db.close()


def test_two_homes_as_two_users_on_one_database_see_and_guard_each_other(cli, mem, postgres_url, monkeypatch,
                                                                          tmp_path):
    """Issue 45's two homes: Alice's cluster is in Bob's `status --all-users` with her name, and
    Bob's teardown of it asks, naming her (no terminal: refused; -y does not skip it)."""
    monkeypatch.setenv("GPUPLAN_STATE_URL", postgres_url)
    monkeypatch.setenv("GPUPLAN_HOME", str(tmp_path / "alice"))
    monkeypatch.setenv("GPUPLAN_USER", "alice")
    r = cli("provision", "--yes", "memory:m1.gpu", "x1", "--name", "vision", "--no-bootstrap", "--project", "vision")
    assert r.code == 0, r.err
    monkeypatch.setenv("GPUPLAN_HOME", str(tmp_path / "bob"))
    monkeypatch.setenv("GPUPLAN_USER", "bob")
    assert json.loads(cli("status", "--format", "json").out) == []  # his own: none
    [theirs] = json.loads(cli("status", "--all-users", "--format", "json").out)
    assert (theirs["name"], theirs["user"], theirs["project"]) == ("vision", "alice", "vision")
    r = cli("teardown", "vision", "-y")
    assert r.code == 2 and "alice's cluster vision is not yours" in r.err
    assert len(mem.resources) == 2  # her machine and its disk are still there


def test_a_refused_command_writes_no_row_on_postgres(cli, mem, postgres_url, monkeypatch):
    monkeypatch.setenv("GPUPLAN_STATE_URL", postgres_url)
    r = cli("provision", "memory:m1.gpu", "x2", "--no-bootstrap", "--format", "json")  # no --yes, no terminal
    assert r.code == 2 and "rerun with --yes" in r.err and mem.create_calls == 0
    r = cli("teardown", "--yes", "nosuch")
    assert r.code == 2
    state = State.open_existing()
    if state is not None:  # the tables may be made; no row but the installation id
        for table in ("clusters", "nodes", "journal", "ledger", "jobs"):
            assert _rows(state, table) == 0, table
        state.close()


def test_many_commands_at_once_on_postgres_all_succeed(postgres_url, tmp_path, monkeypatch, cli):
    """200 estimate/status/cost-report commands, 50 processes at a time, on one PostgreSQL state:
    0 errors. Each is its own process with its own connection, forked from this one once it has
    run each command (a fresh interpreter's imports would cost the 2-core CI machine ~4 minutes
    for 200; what is tested is 50 sessions at once on the server, not Python's start)."""
    import gc

    monkeypatch.setenv("GPUPLAN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUPLAN_STATE_URL", postgres_url)
    seed = State(tmp_path / "x.db", url=postgres_url)
    seed.add_cluster("demo", "aws", "ap-northeast-1", "g4dn.xlarge", 1)
    seed.close()
    commands = [["estimate", "--videos", "4"], ["status", "--format", "json"], ["cost-report", "--format", "json"]]
    for argv in commands:  # each once here: what the forked processes run is loaded
        r = cli(*argv)
        assert r.code == 0, r.err
    gc.collect()  # no connection of this process is left open for a child to share
    logs = tmp_path / "logs"
    logs.mkdir()
    t0 = time.monotonic()
    running: dict[int, int] = {}
    codes: dict[int, int] = {}
    for i in range(200):
        while len(running) >= 50:
            pid, status = os.waitpid(-1, 0)
            codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)
        pid = os.fork()
        if pid == 0:  # the child: one command, its output in a file, then out without pytest's cleanup
            code = 1
            try:
                fd = os.open(logs / f"{i}.err", os.O_WRONLY | os.O_CREAT, 0o600)
                os.dup2(fd, 2)
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, 1)
                from support.cli import run_cli

                r = run_cli(*commands[i % 3])
                os.write(2, r.err.encode())
                seen = i % 3 != 1 or [c["name"] for c in json.loads(r.out)] == ["demo"]  # status reads the state
                code = r.code if seen else 99
            finally:
                os._exit(code)
        running[pid] = i
    while running:
        pid, status = os.waitpid(-1, 0)
        codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)
    took = time.monotonic() - t0
    failures = {i: (c, (logs / f"{i}.err").read_text()[-300:]) for i, c in codes.items()
                if c != 0 or "Traceback" in (logs / f"{i}.err").read_text()}
    print(f"200 commands, 50 processes at a time, on PostgreSQL: {len(failures)} errors in {took:.1f} s")
    assert len(codes) == 200 and failures == {}
