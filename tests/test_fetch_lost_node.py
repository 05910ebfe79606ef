"""Outputs of an item that ended on a node lost since (its engine stopped, `recover` put another in
its place): they are on that machine, so the fetch asks it too; where nothing is left to reach it
by, the item is named in OutputsNotFetched instead of being passed over. Two loopback sshd hosts,
no Ray: the job's rows are written as its driver's events would write them."""

from __future__ import annotations

import pytest

from support.sshd import missing_prerequisite, register_cluster, start_hosts, stop_hosts

pytestmark = pytest.mark.skipif(bool(missing_prerequisite()), reason=missing_prerequisite() or "")

AT = "2026-11-28T00:00:00+00:00"


def _end(i: int, node: str) -> dict:
    return {"t": "end", "i": i, "status": "ok", "attempt": 1, "node": node, "slot": 0, "start": AT, "end": AT,
            "exit": 0, "timed_out": False, "log": None}


@pytest.fixture()
def finished(tmp_path):
    from gpuplan.store.state import State

    hosts = start_hosts(2, tmp_path)
    state = State(tmp_path / "state.db")
    try:
        register_cluster(state, "c", hosts)
        state.add_job("c-1", "c", ["sh"], {}, [(0, "a"), (1, "b")], nodes=2)
        state.record_job_events("c-1", [_end(0, "c-0"), _end(1, "c-1"), {"t": "done", "state": "succeeded", "at": AT}], 0)
        for i, h in enumerate(hosts):  # where the driver leaves item i's outputs on the node it ran on
            out = h.fake_root / "root" / ".gpuplan" / "jobs" / "c-1" / "out" / str(i)
            out.mkdir(parents=True)
            (out / "r").write_text(f"item {i} on c-{i}\n")
        yield state
    finally:
        state.close()
        stop_hosts(hosts)


def test_an_item_that_ended_on_a_node_lost_since_has_its_outputs_fetched_from_that_node(finished, tmp_path):
    from gpuplan.run.ray import runner

    finished.update_node("c", "c-1", status="lost")  # its Ray stopped; the machine still answers SSH
    assert runner.fetch_outputs(finished, "c-1", None, tmp_path / "out") == (2, 2)
    assert (tmp_path / "out" / "0001-b" / "r").read_text() == "item 1 on c-1\n"


def test_an_ok_item_on_a_node_nothing_can_reach_is_named_not_passed_over(finished, tmp_path):
    from gpuplan.run.ray import runner

    finished.update_node("c", "c-1", status="deleted")  # the machine is gone, and its outputs with it
    with pytest.raises(runner.OutputsNotFetched) as raised:
        runner.fetch_outputs(finished, "c-1", None, tmp_path / "out")
    assert (raised.value.got, raised.value.files) == (1, 1)  # c-0's item came back all the same
    assert "c-1 (no address or pinned key is left to reach it)" in str(raised.value)
    assert (tmp_path / "out" / "0000-a" / "r").read_text() == "item 0 on c-0\n"
