"""Issue 45 items 2 and 3: who and which project every row records, views of your own by
default, another user's cluster not torn down by accident, and monthly budgets that hold before
anything is bought (two reservations at once: exactly one refused). Every test runs on both
stores (`store`: SQLite, and a fresh PostgreSQL database that two homes may share)."""

from __future__ import annotations

import json
import multiprocessing
import os
import uuid
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
import yaml

from gpuplan import team
from gpuplan.budget import priced
from gpuplan.store.state import State

ITEMS = ["clip-a.mp4", "clip-b.mp4"]


@pytest.fixture(autouse=True)
def _both_stores(store):
    """Each test on SQLite and on PostgreSQL (GPUPLAN_STATE_URL set by `store`)."""


def _state(home) -> State:
    return State(home / "state" / "state.db", url=os.environ.get("GPUPLAN_STATE_URL") or None)


def _cluster(home, name: str, user: str, project: str, provider: str = "baremetal") -> None:
    s = _state(home)
    s.add_cluster(name, provider, "local", "t4", 1, price_jpy_per_hour=Decimal(100), who=team.Who(user, project))
    s.set_cluster_status(name, "ready")
    s.close()


def test_the_user_and_project_resolve_in_order_and_a_bad_name_is_one_line(gpuplan_home, monkeypatch):
    monkeypatch.setenv("GPUPLAN_USER", "alice")
    (gpuplan_home / "config").mkdir(parents=True)
    (gpuplan_home / "config" / "config.yaml").write_text("user: carol\nproject: vision\n")
    assert team.user() == "alice" and team.project() == "vision"
    assert team.project("nlp") == "nlp" and team.project(None, "speech") == "speech"
    monkeypatch.delenv("GPUPLAN_USER")
    assert team.user() == "carol"
    monkeypatch.setenv("GPUPLAN_USER", "bad name!")
    with pytest.raises(Exception, match="bad GPUPLAN_USER 'bad name!'"):
        team.user()


def test_rows_record_their_user_and_project_and_older_rows_read_as_unknown(gpuplan_home, monkeypatch):
    monkeypatch.setenv("GPUPLAN_USER", "alice")
    _cluster(gpuplan_home, "c1", "alice", "vision")
    s = _state(gpuplan_home)
    s.ledger_start("c1", "n1", "baremetal", "t4", Decimal(100))
    s.add_job("c1-1", "c1", ["echo"], {}, [(0, "a")], 1)  # a batch on the cluster counts to its project
    s._db.execute("INSERT INTO clusters (name, provider, region, size, count, status, created_at, updated_at)"
                  " VALUES ('old', 'aws', 'r', 's', 1, 'ready', '2026-01-01T00:00:00+00:00', '2026-01-01T00:00:00+00:00')")
    assert (s.cluster("c1").user, s.cluster("c1").project) == ("alice", "vision")
    assert [(r["user"], r["project"]) for r in s.ledger_rows()] == [("alice", "vision")]
    assert (s.job("c1-1").user, s.job("c1-1").project) == ("alice", "vision")
    assert (s.cluster("old").user, s.cluster("old").project) == ("unknown", "default")


def test_alice_s_cluster_is_hidden_from_bob_but_named_with_all_users(cli, gpuplan_home, monkeypatch):
    _cluster(gpuplan_home, "alices", "alice", "vision")
    _cluster(gpuplan_home, "bobs", "bob", "default")
    monkeypatch.setenv("GPUPLAN_USER", "bob")
    r = cli("status", "--format", "json")
    assert r.code == 0, r.err
    assert [c["name"] for c in json.loads(r.out)] == ["bobs"]
    r = cli("status", "--all-users", "--format", "json")
    assert {c["name"]: c["user"] for c in json.loads(r.out)} == {"alices": "alice", "bobs": "bob"}
    r = cli("status", "--all-users", "--project", "vision", "--format", "json")
    assert [(c["name"], c["project"]) for c in json.loads(r.out)] == [("alices", "vision")]
    r = cli("status", "--all-users")
    assert "alices  (alice's, project vision)" in r.out


def test_bob_s_teardown_of_alice_s_cluster_asks_naming_her_and_y_does_not_skip_it(cli, gpuplan_home, monkeypatch):
    from support.cli import Terminal

    _cluster(gpuplan_home, "alices", "alice", "vision")
    monkeypatch.setenv("GPUPLAN_USER", "bob")
    r = cli("teardown", "alices", "-y")  # no terminal: refused in one line, nothing changed
    assert r.code == 2 and "alice's cluster alices is not yours" in r.err and "--force" in r.err
    assert _state(gpuplan_home).cluster("alices").status == "ready"
    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    r = cli("teardown", "alices", "-y")
    assert r.code == 1 and "alice's cluster alices: tear it down? (it is not yours)" in r.err
    assert _state(gpuplan_home).cluster("alices").status == "ready"
    monkeypatch.setattr("sys.stdin", Terminal(""))
    (gpuplan_home / "config").mkdir(parents=True, exist_ok=True)  # an owned-hosts cluster with no host claimed yet
    (gpuplan_home / "config" / "inventory.yaml").write_text(yaml.safe_dump({"hosts": [
        {"name": "h1", "address": "127.0.0.1", "port": 9, "user": "root", "gpus": {"model": "Tesla T4", "count": 1}}]}))
    r = cli("teardown", "alices", "-y", "--force")
    assert r.code == 0, r.err
    assert "not yours" not in r.err and _state(gpuplan_home).cluster("alices").status == "gone"


def _batch(folder, **fields):
    (folder / "videos.txt").write_text("".join(f"{i}\n" for i in ITEMS))
    path = folder / "batch.yaml"
    path.write_text(yaml.safe_dump({"workload": "colorize-hd", "items": "videos.txt", "command": "echo {item}",
                                    "infra": ["aws"], **fields}, sort_keys=False))
    return path


def test_a_launch_dry_run_past_the_project_s_budget_is_refused_naming_it(cli, gpuplan_home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUPLAN_USER", "alice")
    r = cli("budget", "set", "vision", "100")
    assert r.code == 0 and "vision" in r.out and "¥100" in r.out
    before = _state(gpuplan_home)._query("SELECT COUNT(*) AS n FROM commitments")[0]["n"]
    r = cli("launch", str(_batch(tmp_path, project="vision", max_yen=500)), "--dry-run")
    month = team.month_of()
    assert r.code == 2
    assert (f"project vision's budget for {month} (JST) would be passed: budget ¥100, spent ¥0, committed ¥0,"
            " this launch's max_yen ¥500, left ¥100") in r.err
    s = _state(gpuplan_home)
    assert s._query("SELECT COUNT(*) AS n FROM commitments")[0]["n"] == before == 0
    assert s.clusters() == [] and not list((gpuplan_home / "state").rglob("*.plan.json"))
    r = cli("launch", str(_batch(tmp_path, project="vision", max_yen=500)), "--dry-run", "--project", "nlp")
    assert r.code == 0 and "dry run: nothing was created" in r.out  # nlp has no budget: no limit
    r = cli("budget", "nlp", "--format", "json")
    assert json.loads(r.out)["projects"] == [{"project": "nlp", "budget_jpy": None, "spent_jpy": "0.00",
                                              "committed_jpy": "0.00", "left_jpy": None, "limited": False}]


def test_spent_and_committed_count_the_month_on_the_included_basis(gpuplan_home, monkeypatch):
    """¥100/h excluding tax, one machine held 2 h in the month: ¥220 spent with tax. A live
    cluster's reservation of ¥500 less the ¥220 it spent commits ¥280; a gone one's nothing.
    The store's clock moves a second on every reading: the cluster's row, its reservation and its
    teardown each in a later second than the last (in the suite, a second's boundary between them
    once left the reservation held after its cluster was gone)."""
    from gpuplan.store import state as store

    clock = iter(range(10**6))
    t0 = store.now()
    monkeypatch.setattr(store, "now", lambda: t0 + timedelta(seconds=next(clock)))
    monkeypatch.setenv("GPUPLAN_USER", "alice")
    s = _state(gpuplan_home)
    month = team.month_of()
    start, _ = team.month_bounds(month)
    s.set_budget("vision", month, Decimal(1000), "alice")
    s.add_cluster("c1", "aws", "r", "g4", 1, price_jpy_per_hour=Decimal(100), who=team.Who("alice", "vision"))
    s.ledger_add("c1", "n1", "aws", "g4", Decimal(100), __import__("gpuplan.market.billing").market.billing.per_second(
        Decimal(100)), "excluded", start + timedelta(hours=1), start + timedelta(hours=3))
    s.ledger_add("c1", "n0", "aws", "g4", Decimal(100), __import__("gpuplan.market.billing").market.billing.per_second(
        Decimal(100)), "excluded", start - timedelta(hours=2), start - timedelta(hours=1))  # the month before
    r = s.reserve("vision", month, Decimal(500), "cap", "alice", priced, cluster="c1")
    assert not r.refused
    f = s.budget_figures("vision", month, priced)
    assert (f.budget, f.spent, f.committed, f.left) == (Decimal(1000), Decimal(220), Decimal(280), Decimal(500))
    refused = s.reserve("vision", month, Decimal(501), "cap", "alice", priced)
    assert refused.refused and refused.figures.left == Decimal(500)
    s.set_cluster_status("c1", "gone")  # torn down (or its client died and teardown ran): holds nothing
    assert s.budget_figures("vision", month, priced).committed == Decimal(0)
    s.add_job("c1-1", "dok", ["x"], {}, [(0, "a")], 1)
    old = datetime.now(timezone.utc) - timedelta(hours=1)
    s.reserve("vision", month, Decimal(100), "cap", "alice", priced, at=old)  # a client killed before its row: expired
    assert s.budget_figures("vision", month, priced).committed == Decimal(0)


def test_a_reservation_made_before_its_cluster_row_holds_though_the_names_last_cluster_is_gone(gpuplan_home, monkeypatch):
    """A launch reserves before it makes its cluster's row; where the name's last cluster is gone
    (its row left), the reservation holds until the grace ends or its own row comes and goes."""
    monkeypatch.setenv("GPUPLAN_USER", "alice")
    s = _state(gpuplan_home)
    month = team.month_of()
    s.set_budget("vision", month, Decimal(1000), "alice")
    s.add_cluster("c2", "aws", "r", "g4", 1, price_jpy_per_hour=Decimal(100), who=team.Who("alice", "vision"))
    s.set_cluster_status("c2", "gone")  # the name's last use
    later = datetime.now(timezone.utc) + timedelta(seconds=5)
    assert not s.reserve("vision", month, Decimal(300), "cap", "alice", priced, cluster="c2", at=later).refused
    assert s.budget_figures("vision", month, priced, at=later).committed == Decimal(300)
    grace_over = later + timedelta(hours=1)  # its client killed before it made the row: expired
    assert s.budget_figures("vision", month, priced, at=grace_over).committed == Decimal(0)


def _reserve(path: str, url: str | None, start, yen: int, out) -> None:
    start.wait()
    s = State(path, url=url)
    r = s.reserve("vision", team.month_of(), Decimal(yen), "cap", "x", priced)
    out.put(r.refused)


def test_two_reservations_at_once_that_fit_alone_but_not_together_one_is_refused(gpuplan_home, monkeypatch, request,
                                                                                   store):
    monkeypatch.setenv("GPUPLAN_USER", "alice")
    ctx = multiprocessing.get_context("spawn")
    for round_ in range(4):
        project_month = team.month_of()
        path = gpuplan_home / f"race{round_}" / "state.db"
        url = None
        if store is not None:  # a database a round, as a file a round on SQLite
            server, name = request.getfixturevalue("postgres_server"), f"race_{uuid.uuid4().hex[:12]}"
            server.psql(f"CREATE DATABASE {name}")
            url = server.url(name)
        s = State(path, url=url)
        s.set_budget("vision", project_month, Decimal(1000), "alice")
        s.close()
        start, out = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_reserve, args=(str(path), url, start, 600, out)) for _ in range(2)]
        for p in procs:
            p.start()
        start.set()
        for p in procs:
            p.join(60)
        refused = sorted(out.get(timeout=5) for _ in procs)
        assert refused == [False, True]
        assert State(path, url=url).budget_figures("vision", project_month, priced).committed == Decimal(600)


def test_cost_report_by_user_project_and_month_adds_up_by_hand(cli, gpuplan_home, monkeypatch):
    """Per second at ¥3,600/h excluding tax: alice 1 h (¥3,960 with tax) in 2026-10 for vision, bob
    30 min (¥1,980) in 2026-10 and 2 h (¥7,920) in 2026-11 for nlp."""
    from gpuplan.market import billing

    s = _state(gpuplan_home)
    t = billing.per_second(Decimal(3600))
    for name, user, project in (("a1", "alice", "vision"), ("b1", "bob", "nlp")):
        s.add_cluster(name, "aws", "r", "g4", 1, price_jpy_per_hour=Decimal(3600), who=team.Who(user, project))
    day = datetime(2026, 10, 5, tzinfo=timezone.utc)
    s.ledger_add("a1", "n1", "aws", "g4", Decimal(3600), t, "excluded", day, day + timedelta(hours=1))
    s.ledger_add("b1", "n1", "aws", "g4", Decimal(3600), t, "excluded", day, day + timedelta(minutes=30))
    s.ledger_add("b1", "n2", "aws", "g4", Decimal(3600), t, "excluded", day + timedelta(days=30),
                 day + timedelta(days=30, hours=2))
    monkeypatch.setenv("GPUPLAN_USER", "alice")
    r = cli("cost-report", "--by", "user", "--format", "json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["groups"] == [{"user": "alice", "cost_jpy": "3960.00", "machine_seconds": 3600}]
    doc = json.loads(cli("cost-report", "--all-users", "--by", "user", "--format", "json").out)
    assert [(g["user"], g["cost_jpy"]) for g in doc["groups"]] == [("alice", "3960.00"), ("bob", "9900.00")]
    assert doc["total_jpy"] == "13860.00"
    doc = json.loads(cli("cost-report", "--all-users", "--by", "project", "--format", "json").out)
    assert [(g["project"], g["cost_jpy"]) for g in doc["groups"]] == [("nlp", "9900.00"), ("vision", "3960.00")]
    doc = json.loads(cli("cost-report", "--all-users", "--by", "month", "--format", "json").out)
    assert [(g["month"], g["cost_jpy"]) for g in doc["groups"]] == [("2026-10", "5940.00"), ("2026-11", "7920.00")]
    doc = json.loads(cli("cost-report", "--all-users", "--project", "nlp", "--format", "json").out)
    assert doc["total_jpy"] == "9900.00" and {x["user"] for x in doc["lines"]} == {"bob"}
    r = cli("cost-report", "--all-users", "--by", "project")
    assert "by project" in r.out and "¥9,900" in r.out and "(bob's, nlp)" in r.out
    assert cli("cost-report", "--by", "team").code == 2


def test_a_provision_holds_its_ttl_s_yen_until_torn_down_and_one_past_what_is_left_is_refused(cli, mem, gpuplan_home,
                                                                                              monkeypatch):
    """m1.gpu at ¥100/h (its row says no tax basis: as listed): x2 for 4 h is ¥800 of a ¥1,000
    budget; x1 for 4 h (¥400) is then over the ¥200 left, dry run or not."""
    monkeypatch.setenv("GPUPLAN_USER", "alice")
    month = team.month_of()
    assert cli("budget", "set", "vision", "1000").code == 0
    r = cli("provision", "--yes", "memory:m1.gpu", "x2", "--name", "a", "--no-bootstrap", "--ttl", "4h", "--project",
            "vision")
    assert r.code == 0, r.err
    doc = json.loads(cli("budget", "vision", "--format", "json").out)["projects"][0]
    # what the machines billed so far (a minimum of 60 s each once a second passed) moves from committed to spent
    assert (doc["budget_jpy"], doc["left_jpy"]) == ("1000.00", "200.00")
    assert Decimal(doc["spent_jpy"]) + Decimal(doc["committed_jpy"]) == Decimal(800)
    for extra in (["--dry-run"], []):
        r = cli("provision", "--yes", "memory:m1.gpu", "x1", "--name", "b", "--no-bootstrap", "--ttl", "4h",
                "--project", "vision", *extra)
        assert r.code == 2 and f"project vision's budget for {month} (JST) would be passed: budget ¥1,000" in r.err
        assert "this provision's 4 h (--ttl) ¥400, left ¥200" in r.err
    assert _state(gpuplan_home).cluster("b") is None and mem.create_calls == 2
    r = cli("provision", "--yes", "memory:m1.gpu", "x1", "--name", "b", "--no-bootstrap", "--project", "vision")
    assert r.code == 2 and "has no bound on its spend: give --ttl" in r.err
    assert cli("teardown", "a", "-y").code == 0
    doc = json.loads(cli("budget", "vision", "--format", "json").out)["projects"][0]
    assert doc["committed_jpy"] == "0.00"
    r = cli("provision", "--yes", "memory:m1.gpu", "x1", "--name", "b", "--no-bootstrap", "--ttl", "4h",
            "--project", "vision")
    assert r.code == 0, r.err
    assert _state(gpuplan_home).cluster("b").project == "vision"


def test_a_run_s_max_yen_past_what_is_left_is_refused_before_it_is_sent(cli, mem, gpuplan_home, tmp_path, monkeypatch):
    """A ¥1,000 month: the cluster's 1 h (¥100, as listed) held; a run capped at ¥950 is over the
    ¥900 left: refused before anything reaches the cluster, no batch row, nothing reserved."""
    monkeypatch.setenv("GPUPLAN_USER", "alice")
    assert cli("budget", "set", "vision", "1000").code == 0
    r = cli("provision", "--yes", "memory:m1.gpu", "x1", "--name", "a", "--no-bootstrap", "--ttl", "1h", "--project",
            "vision")
    assert r.code == 0, r.err
    (tmp_path / "items.txt").write_text("a\nb\n")
    r = cli("run", "a", "--items", str(tmp_path / "items.txt"), "--max-yen", "950", "--", "echo", "{item}")
    assert r.code == 2 and "project vision's budget" in r.err and "this run's --max-yen ¥950, left ¥900" in r.err
    s = _state(gpuplan_home)
    assert s.jobs("a") == [] and s._query("SELECT COUNT(*) AS n FROM commitments")[0]["n"] == 1  # the cluster's own


def test_a_probe_dry_run_past_the_project_s_budget_is_refused_and_sends_nothing(cli, tmp_path, monkeypatch,
                                                                                 gpuplan_home):
    """The DOK fake (nothing sent by a dry run): the pick's probe may cost ¥2 (tax included, as
    DOK lists it); vision has ¥1 this month."""
    from support.sakura_dok_fake import serving

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUPLAN_USER", "alice")
    (tmp_path / "videos.txt").write_text("".join(f"v{i}.mp4\n" for i in range(4)))
    (tmp_path / "batch.yaml").write_text(yaml.safe_dump({
        "workload": "colorize-hd", "items": "videos.txt", "infra": ["dok"], "image": "registry.example/me/colorize:1",
        "command": "colorize {item}", "project": "vision",
        "probe": {"command": "python3 -c 'import time; time.sleep(0.1)' {units}", "units": [2, 10]}}))
    assert cli("budget", "set", "vision", "1").code == 0
    with serving(monkeypatch, execute=True) as fake:
        r = cli("probe", "batch.yaml", "--dry-run", "--probe-budget", "5")
        assert r.code == 2 and "project vision's budget" in r.err and "budget ¥1, spent ¥0, committed ¥0" in r.err
        assert "this probe's most ¥2, left ¥1" in r.err
        r = cli("probe", "batch.yaml", "--dry-run", "--probe-budget", "5", "--project", "nlp")
        assert r.code == 0 and "dry run: nothing was run" in r.out
        assert [p for m, p, _ in fake.requests if m == "POST"] == []


def test_jobs_lists_your_own_batches_unless_all_users(cli, gpuplan_home, monkeypatch):
    _cluster(gpuplan_home, "shared", "alice", "vision")
    s = _state(gpuplan_home)
    for user, job in (("alice", "shared-1"), ("bob", "shared-2")):
        monkeypatch.setenv("GPUPLAN_USER", user)
        s.add_job(job, "shared", ["echo", "{item}"], {}, [(0, "a")], 1)
        s.set_job_state(job, "succeeded")  # over: `jobs` reads nothing from the cluster
    r = cli("jobs", "shared", "--format", "json")  # as bob
    assert [(j["id"], j["user"], j["project"]) for j in json.loads(r.out)] == [("shared-2", "bob", "vision")]
    r = cli("jobs", "shared", "--all-users", "--format", "json")
    assert [(j["id"], j["user"]) for j in json.loads(r.out)] == [("shared-1", "alice"), ("shared-2", "bob")]
    assert "(alice's)" in cli("jobs", "shared", "--all-users").out  # the owner, beside the id
    assert json.loads(cli("jobs", "shared", "--all-users", "--project", "nlp", "--format", "json").out) == []


def test_a_budget_month_is_japan_s_so_a_machine_held_over_midnight_jst_splits_there(cli, gpuplan_home, monkeypatch):
    """¥3,600/h excluding tax, held 2026-10-31 14:00-17:00 UTC (23:00-02:00 JST): 1 h in October's
    budget, 2 h (¥7,200, ¥7,920 with tax) in November's; cost-report's UTC months put all 3 h in October."""
    from gpuplan.market import billing

    monkeypatch.setenv("GPUPLAN_USER", "alice")
    s = _state(gpuplan_home)
    s.add_cluster("c", "aws", "r", "g4", 1, price_jpy_per_hour=Decimal(3600), who=team.Who("alice", "vision"))
    start = datetime(2026, 10, 31, 14, tzinfo=timezone.utc)
    s.ledger_add("c", "n1", "aws", "g4", Decimal(3600), billing.per_second(Decimal(3600)), "excluded", start,
                 start + timedelta(hours=3))
    s.set_budget("vision", "2026-11", Decimal(10000), "alice")
    at = datetime(2026, 11, 15, tzinfo=timezone.utc)
    nov, oct_ = s.budget_figures("vision", "2026-11", priced, at), s.budget_figures("vision", "2026-10", priced, at)
    assert (nov.spent, nov.left, oct_.spent, oct_.budget) == (Decimal(7920), Decimal(2080), Decimal(3960), None)
    r = cli("budget", "--month", "2026-11")
    assert "vision" in r.out and "¥10,000" in r.out and "¥7,920" in r.out and "¥2,080" in r.out
    r = cli("budget", "--month", "2026-10")
    assert "no limit" in r.out and "¥3,960" in r.out
    doc = json.loads(cli("cost-report", "--by", "month", "--format", "json").out)
    assert doc["groups"] == [{"month": "2026-10", "cost_jpy": "11880.00", "machine_seconds": 10800}]
    assert cli("budget", "set", "vision", "-5").code == 2 and cli("budget", "set", "bad name", "5").code == 2


def test_the_budget_plot_draws_the_month_s_spend_day_by_day_against_the_budget(cli, gpuplan_home, tmp_path,
                                                                                 monkeypatch):
    """The machine of the JST test above: by the end of 1 November (JST) ¥7,920 of November's, none
    before 31 October's end in October's (¥3,960 then)."""
    pytest.importorskip("matplotlib")
    from gpuplan import budget as budgets
    from gpuplan.market import billing

    monkeypatch.setenv("GPUPLAN_USER", "alice")
    s = _state(gpuplan_home)
    s.add_cluster("c", "aws", "r", "g4", 1, price_jpy_per_hour=Decimal(3600), who=team.Who("alice", "vision"))
    start = datetime(2026, 10, 31, 14, tzinfo=timezone.utc)
    s.ledger_add("c", "n1", "aws", "g4", Decimal(3600), billing.per_second(Decimal(3600)), "excluded", start,
                 start + timedelta(hours=3))
    rows = s.ledger_rows()
    # 2 November 12:00 UTC is 21:00 JST: two days of the month drawn
    assert budgets.spent_by_day(rows, "2026-11", datetime(2026, 11, 2, 12, tzinfo=timezone.utc)) == (
        [1, 2], [Decimal(7920), Decimal(7920)])
    days, spent = budgets.spent_by_day(rows, "2026-10", datetime(2026, 11, 15, tzinfo=timezone.utc))
    assert len(days) == 31 and spent[29] == 0 and spent[30] == Decimal(3960)
    s.set_budget("vision", team.month_of(), Decimal(50000), "alice")
    r = cli("budget", "vision", "--plot", str(tmp_path / "vision.svg"))
    assert r.code == 0, r.err
    svg = (tmp_path / "vision.svg").read_text()
    assert 'id="spent"' in svg and 'id="budget"' in svg and "budget ¥50,000" in svg
    assert cli("budget", "--plot", str(tmp_path / "all.svg")).code == 2  # one project's month


def test_a_launch_reserves_its_cap_while_its_batch_runs_and_the_next_one_past_what_is_left_is_refused(
        cli, tmp_path, monkeypatch, gpuplan_home):
    """Through the DOK fake (tasks queued, none run): ¥100 for vision; a launch capped at ¥80 holds ¥80
    while its batch is unfinished, so a second one capped at ¥80 is refused (¥20 left) and sends
    nothing; once the first batch is over, nothing is committed."""
    from support.sakura_dok_fake import serving

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPUPLAN_USER", "alice")
    with serving(monkeypatch) as fake:
        plan = tmp_path / "plan.json"
        assert cli("estimate", "--videos", "4", "--save", str(plan)).code == 0
        (tmp_path / "videos.txt").write_text("".join(f"v{i}.mp4\n" for i in range(4)))
        assert cli("budget", "set", "vision", "100").code == 0
        args = ("launch", "--plan", str(plan), "--image", "registry.example/me/colorize:1", "--items",
                str(tmp_path / "videos.txt"), "--max-yen", "80", "--project", "vision", "-y", "--detach", "--",
                "colorize", "{item}")
        r = cli(*args)
        assert r.code == 0, r.out + r.err
        doc = json.loads(cli("budget", "vision", "--format", "json").out)["projects"][0]
        assert (doc["committed_jpy"], doc["left_jpy"]) == ("80.00", "20.00")
        posted = len([p for m, p, _ in fake.requests if m == "POST"])
        r = cli(*args)
        assert r.code == 2 and "this launch's max_yen ¥80, left ¥20" in r.err
        assert len([p for m, p, _ in fake.requests if m == "POST"]) == posted
        s = _state(gpuplan_home)
        (job,) = [j for j in s.unfinished_jobs()]
        assert (job.user, job.project) == ("alice", "vision")
        s.close_job(job.id, "cancelled")  # the batch is over: its cap holds nothing more
        doc = json.loads(cli("budget", "vision", "--format", "json").out)["projects"][0]
        assert (doc["committed_jpy"], doc["left_jpy"]) == ("0.00", "100.00")
