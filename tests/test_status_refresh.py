"""`gpuplan status --refresh`: the state brought in line with what the cloud has, and each
difference said in one line (on the in-memory provider)."""

from __future__ import annotations

import json
from dataclasses import replace


def test_refresh_marks_a_machine_deleted_outside_gpuplan_gone_and_says_so(cli, mem):
    assert cli("provision", "--yes", "memory:m1.gpu", "x3", "--name", "demo", "--no-bootstrap").code == 0
    r = cli("status", "--refresh")
    assert r.code == 0 and "refresh: 0 differences with the cloud; the state matched" in r.err

    # someone deletes demo-1 in the console; demo-2 gets a new address after a restart
    gone = next(r for r in mem.resources.values() if r.kind == "instance" and r.name == "demo-1")
    del mem.resources[gone.id]
    moved = next(r for r in mem.resources.values() if r.kind == "instance" and r.name == "demo-2")
    del mem.resources[moved.id]
    mem.resources["i-77"] = replace(moved, id="i-77")
    before = json.loads(cli("status", "--format", "json").out)[0]["yen_so_far"]

    r = cli("status", "--refresh", "--format", "json")
    assert r.code == 0, r.err
    assert f"refresh: demo/demo-1 ({gone.id}): no longer in memory; marked gone, no more yen counted for it" in r.err
    assert "refresh: demo/demo-2: address 198.51.100." in r.err and "-> 198.51.100.77" in r.err
    assert "refresh: 2 differences with the cloud" in r.err
    [c] = json.loads(r.out)
    nodes = {n["name"]: n for n in c["nodes"]}
    assert nodes["demo-1"]["status"] == "gone" and nodes["demo-2"]["public_ip"] == "198.51.100.77"
    assert c["yen_so_far"] >= before
    # the next refresh finds nothing new
    assert "refresh: 0 differences" in cli("status", "--refresh").err


def test_refresh_reports_a_tagged_machine_the_state_lacks(cli, mem):
    assert cli("provision", "--yes", "memory:m1.gpu", "x1", "--name", "demo", "--no-bootstrap").code == 0
    first = next(r for r in mem.resources.values() if r.kind == "instance")
    mem.resources["i-90"] = replace(first, id="i-90", name="demo-9", tags={**first.tags, "gpuplan-node": "demo-9"})
    r = cli("status", "demo", "--refresh")
    assert r.code == 0
    assert "refresh: demo: memory has i-90 (demo-9, running) tagged with the cluster but the state does not;" \
           " `gpuplan teardown demo` removes it" in r.err
    assert "i-90" in [x.id for x in mem.resources.values()]  # reported, never deleted
    r = cli("status", "nosuch", "--refresh")
    assert r.code == 2 and "no cluster named 'nosuch'" in r.err


def test_slow_commands_show_progress_on_a_terminal_and_plain_lines_when_piped(cli, mem, monkeypatch):
    r = cli("provision", "--yes", "memory:m1.gpu", "x2", "--name", "piped", "--no-bootstrap")
    assert r.code == 0 and "\x1b[" not in r.err and "… " in r.err  # piped: the step lines, no terminal codes
    from rich.console import Console

    monkeypatch.setattr(Console, "is_terminal", property(lambda self: True))
    r = cli("provision", "--yes", "memory:m1.gpu", "x2", "--name", "shown", "--no-bootstrap")
    assert r.code == 0, r.err
    assert "provisioning shown" in r.err  # the spinner's line, with the latest step
    assert {n["name"] for n in json.loads(cli("status", "shown", "--format", "json").out)[0]["nodes"]} == \
        {"shown-0", "shown-1"}
