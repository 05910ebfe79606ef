"""The lifecycle commands end to end through the CLI, on the in-memory provider.
(Each cloud's own end-to-end test runs the same commands against its stand-in.)"""

import json

import pytest

from support.cli import Terminal


def test_provision_status_teardown(cli, mem):
    r = cli("provision", "--yes", "memory:m1.gpu", "x4", "--name", "demo", "--no-bootstrap", "--ttl", "4h")
    assert r.code == 0, r.err
    assert sum(x.kind == "instance" for x in mem.resources.values()) == 4
    r = cli("status", "--format", "json")
    [c] = json.loads(r.out)
    assert (c["name"], c["count"], c["status"], c["price_jpy_per_hour"]) == ("demo", 4, "ready", "100")
    assert [n["public_ip"] for n in c["nodes"]] == ["198.51.100.1", "198.51.100.3", "198.51.100.5", "198.51.100.7"]
    assert 4 * 3600 - 60 < c["ttl_left_s"] <= 4 * 3600
    r = cli("teardown", "--yes", "demo")
    assert r.code == 0 and "nothing of it is left" in r.out
    assert mem.resources == {}
    # teardown is idempotent
    assert cli("teardown", "--yes", "demo").code == 0


def test_dry_run_prints_yen_per_hour_and_creates_nothing(cli, mem):
    r = cli("provision", "memory:m1.gpu", "x4", "--dry-run")
    assert r.code == 0
    assert "¥100/h per machine, ¥400/h for the cluster" in r.out
    assert mem.resources == {} and mem.create_calls == 0


@pytest.mark.parametrize(
    "args, message",
    [
        (("provision", "memory:m1.gpu", "x-1", "--yes"), "bad count 'x-1'"),
        (("provision", "memory:m1.gpu", "x0", "--yes"), "at least one machine"),
        (("provision", "memory:m1.gpu", "x2", "--ttl", "soon", "--yes"), "bad --ttl 'soon'"),
        (("provision", "memory:m1.gpu", "x2", "--name", "Bad_Name", "--yes"), "bad cluster name"),
        (("teardown", "nosuch"), "no cluster named 'nosuch'"),
        (("teardown",), "name a cluster"),
        (("status", "--format", "xml"), "bad --format"),
    ],
)
def test_bad_input_gets_one_line_and_exit_2(cli, mem, args, message):
    """(provision with --yes: piped without it, the missing answer is listed beside the bad
    input, tests/test_preflight.py)"""
    r = cli(*args)
    assert r.code == 2
    assert message in r.err
    assert len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err
    assert mem.create_calls == 0


def test_quota_exceeded_through_cli_is_one_line_exit_2(cli, mem):
    mem.vcpu_count, mem.quota_limit = 6, 20
    r = cli("provision", "--yes", "memory:m1.gpu", "x4", "--no-bootstrap")
    assert r.code == 2
    assert "needs 24 vCPUs of quota 'memoryFamily'" in r.err and len(r.err.strip().splitlines()) == 1
    assert mem.resources == {}


def test_plan_file_from_estimate_is_provisioned(cli, mem, tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"recommended": {"provider": "memory", "instance_type": "m1.gpu", "count": 3,
                                                "region": "mem-1", "setup": "scratch"}}))
    r = cli("provision", "--yes", "--plan", str(plan), "--name", "fromplan", "--no-bootstrap")
    assert r.code == 0, r.err
    assert sum(x.kind == "instance" for x in mem.resources.values()) == 3


def test_malformed_plan_file_is_one_line(cli, mem, tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text("{not json")
    r = cli("provision", "--yes", "--plan", str(plan))
    assert r.code == 2 and "is not valid JSON" in r.err


def test_at_a_terminal_provision_and_teardown_ask_first(cli, mem, monkeypatch):
    monkeypatch.setattr("sys.stdin", Terminal("n\n"))
    r = cli("provision", "memory:m1.gpu", "x2", "--name", "ask", "--no-bootstrap", "--ttl", "90m")
    assert r.code == 1 and "aborted: nothing was changed" in r.err
    assert mem.resources == {} and mem.create_calls == 0
    assert "create cluster ask: 2x memory:m1.gpu in mem-1" in r.err
    assert "¥100/h per machine, ¥200/h for the cluster" in r.err
    assert "quota memoryFamily (Memory family vCPUs): 8 vCPUs needed, 1000 free (limit 1000, used 0): ok" in r.err
    assert "TTL 90 min: the cloud itself stops the machines after that" in r.err
    assert "Create these machines? [Y/n]" in r.err
    monkeypatch.setattr("sys.stdin", Terminal("\n"))  # creating defaults to yes, as `sky launch` does
    r = cli("provision", "memory:m1.gpu", "x2", "--name", "ask", "--no-bootstrap")
    assert r.code == 0, r.err
    assert sum(x.kind == "instance" for x in mem.resources.values()) == 2
    monkeypatch.setattr("sys.stdin", Terminal("\n"))  # deleting defaults to no
    r = cli("teardown", "ask")
    assert r.code == 1 and "Delete all of this? [y/N]" in r.err
    assert "delete cluster ask (ready): 2 machines of memory:m1.gpu in mem-1 (¥200/h, as listed): ask-0 i-1, ask-1 i-3" in r.err  # a test row with no tax basis
    assert sum(x.kind == "instance" for x in mem.resources.values()) == 2
    monkeypatch.setattr("sys.stdin", Terminal("y\n"))
    r = cli("teardown", "ask")
    assert r.code == 0 and mem.resources == {}
