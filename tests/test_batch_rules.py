"""The batch driver's rules (gpuplan/run/ray/batch_rules.py): order, retries, bad input vs bad node."""

from __future__ import annotations

import pytest

from gpuplan.run.ray import batch_rules as rules


def _batch(n_items, nodes, retries=0, names=None):
    names = names or [f"i{k}" for k in range(n_items)]
    return rules.Batch.of(list(enumerate(names)), nodes, retries)


def test_items_are_handed_out_in_the_batch_order():
    b = rules.Batch.of([(2, "long"), (0, "short"), (1, "mid")], ["a", "b"])
    assert [b.next_for("a"), b.next_for("b"), b.next_for("a"), b.next_for("b")] == [2, 0, 1, None]


def test_a_failed_item_gets_a_second_opinion_on_another_node_even_without_retries():
    b = _batch(2, ["a", "b"])
    assert b.next_for("a") == 0
    assert b.failed(0, "a", 3) == rules.QUEUED
    assert b.next_for("a") == 1  # item 0 failed on a: a takes the next one
    assert b.next_for("b") == 0
    assert b.failed(0, "b", 3) == rules.BAD_INPUT  # failed on two nodes: the input
    assert b.out == {}


def test_eight_corrupt_inputs_at_the_head_set_no_healthy_node_aside():
    nodes = ["n0", "n1", "n2", "n3"]
    names = [f"corrupt-{k}" for k in range(8)] + [f"ok-{k}" for k in range(8)]
    b = rules.Batch.of(list(enumerate(names)), nodes)
    while not b.done():
        for node in nodes:
            i = b.next_for(node)
            if i is None:
                continue
            if b.items[i].item.startswith("corrupt"):
                b.failed(i, node, 1)
            else:
                b.succeeded(i, node)
    assert b.out == {}
    assert {s.item: s.status for s in b.items.values() if s.item.startswith("corrupt")} == {
        f"corrupt-{k}": rules.BAD_INPUT for k in range(8)}
    assert all(s.status == rules.OK for s in b.items.values() if s.item.startswith("ok"))


def test_a_node_whose_failures_succeed_elsewhere_is_set_aside_and_nothing_is_lost():
    b = _batch(6, ["good", "bad"])
    while not b.done():
        for node in ("bad", "good"):
            i = b.next_for(node)
            if i is not None:
                (b.failed(i, node, 9) if node == "bad" else b.succeeded(i, node))
    assert list(b.out) == ["bad"] and "2 items failed there (exit 9)" in b.out["bad"].reason
    assert b.out["bad"].code == rules.FAILURES
    assert all(s.status == rules.OK for s in b.items.values())


def test_an_item_that_failed_on_a_node_set_aside_later_is_queued_again():
    b = _batch(3, ["a", "b"])
    assert b.next_for("b") == 0 and b.failed(0, "b", 9) == rules.QUEUED
    assert b.next_for("a") == 0 and b.failed(0, "a", 9) == rules.BAD_INPUT
    assert b.quarantine("b", rules.LOST, "lost: gone") == ["b"]
    # its failure on b no longer counts: one failure on a, no untried node left
    assert b.items[0].status == rules.FAILED


def test_retries_may_reuse_a_node_when_every_live_node_has_failed_it():
    b = _batch(1, ["a"], retries=1)
    assert b.next_for("a") == 0 and b.failed(0, "a", 1) == rules.QUEUED
    assert b.next_for("a") == 0 and b.failed(0, "a", 1) == rules.FAILED


def test_a_lost_attempt_does_not_count_and_a_gone_node_is_set_aside():
    b = _batch(1, ["a", "b"])
    assert b.next_for("a") == 0
    assert b.lost(0, "a", node_gone=True, reason="NodeDiedError") == ["a"]
    assert b.items[0].status == rules.QUEUED and b.items[0].failed_on == []
    assert b.next_for("a") is None and b.next_for("b") == 0


@pytest.mark.parametrize("outcomes, out", [
    ([("a", "fail", 0), ("b", "ok", 0), ("a", "fail", 1), ("b", "ok", 1)], ["a"]),
    ([("a", "fail", 0), ("b", "ok", 0), ("a", "ok", 2), ("a", "fail", 1), ("b", "ok", 1)], []),  # a success on a in between
    ([("a", "fail", 0), ("b", "fail", 0), ("a", "fail", 1), ("b", "fail", 1)], []),  # failing everywhere: the inputs
])
def test_strikes(outcomes, out):
    b = _batch(3, ["a", "b"])
    for node, what, i in outcomes:
        b.items[i].status = rules.RUNNING
        b._running += 1
        b._queued = [q for q in b._queued if q != i]
        (b.succeeded(i, node) if what == "ok" else b.failed(i, node, 1))
    assert list(b.out) == out


def test_two_attempts_lost_in_a_row_set_a_node_aside_before_the_engine_says_it_is_gone():
    b = _batch(3, ["a", "b"])
    assert b.next_for("a") == 0 and b.next_for("a") == 1
    assert b.lost(0, "a", node_gone=False, reason="ActorDiedError") == []
    assert b.lost(1, "a", node_gone=False, reason="ActorDiedError") == ["a"]
    assert b.out["a"] == rules.SetAside(rules.LOST, "lost: ActorDiedError") and [b.items[i].status for i in (0, 1)] == [rules.QUEUED] * 2


def test_a_node_set_aside_for_failures_that_turns_out_gone_is_recorded_as_lost():
    """Its items were killed with it (exit -9) and succeeded elsewhere before the engine noticed it
    had gone: set aside for failures first, then lost (`run --recover` replaces lost nodes)."""
    b = _batch(4, ["a", "b"])
    for i in (b.next_for("b"), b.next_for("b")):
        assert i is not None
        b.failed(i, "b", -9)
    for i in (b.next_for("a"), b.next_for("a")):
        b.succeeded(i, "a")
    assert b.out["b"].code == rules.FAILURES
    assert b.gone("b", "its Ray node is no longer in the cluster") == ["b"]
    assert b.out["b"].code == rules.LOST and b.out["b"].reason == "lost: its Ray node is no longer in the cluster"
    assert b.gone("b", "again") == [] and b.gone("a", "gone too") == ["a"]  # said once; a live node goes as lost
