"""Which item runs next where, and whose fault a failure is: the rules of one batch.

This module runs inside the batch's driver on the cluster's head node (beside ray_driver.py, in
Ray's own environment, where gpuplan is not installed), so it imports nothing but the standard
library. Tests use it directly.

The rules:
- Items are handed out in the batch's order (the plan's, longest first); a free slot on a node
  takes the first queued item that has not already failed on that node (unless it failed on
  every node still in the pool: then any node may retry it).
- An item that fails (non-zero exit, or timed out) is tried again on another node even with
  --retries 0: one failure cannot tell bad input from a bad node. An item that failed on two
  nodes is bad input: it ends as "bad input" once its retries are used. Failures on a node that
  was set aside never count against an item.
- A node is set aside (quarantined) when two different items failed there and then succeeded
  on another node, with no success on it in between: the node, not the input, is the problem.
  Its items move on, and items that had used up their retries there are queued again.
- A node the cloud announces it takes back (a spot interruption notice) is drained: set aside,
  its running items told to stop (SIGTERM: time to checkpoint) and queued again without
  counting as failures.
- A node that disappears (the engine lost it, or two attempts in a row died with their worker
  there before the engine noticed) is set aside; its running items go back on the queue without
  counting as failures. A node set aside for failures that then turns out gone is recorded as
  lost: its processes were killed with it, which is what made its items fail there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

STRIKES_TO_QUARANTINE = 2
LOST_IN_A_ROW = 2  # attempts whose worker died on a node the engine still lists: it is going, or gone

OK, FAILED, BAD_INPUT, QUEUED, RUNNING = "ok", "failed", "bad input", "queued", "running"

# Why a node was set aside: the "code" of the driver's quarantine events, stored in the client's
# state beside the words shown (`run --recover` replaces LOST nodes).
LOST = "lost"  # the engine lost it, or attempts died with their worker there LOST_IN_A_ROW times in a row
FAILURES = "failures"  # items failed there and then succeeded on other nodes
LEFT_OUT = "left_out"  # the client could not reach it or start Ray on it when it submitted the batch
NOT_IN_RAY = "not_in_ray"  # its Ray node was not running when the batch began
UNKNOWN = "unknown"  # set aside before quarantines carried a code
# the cloud announced it takes the machine back (a spot interruption notice); also the status of an
# attempt its node's drain stopped (queued again: Batch.interrupted)
INTERRUPTED = "interrupted"
QUARANTINE_CODES = (LOST, FAILURES, LEFT_OUT, NOT_IN_RAY, UNKNOWN, INTERRUPTED)


@dataclass(frozen=True)
class SetAside:
    """Why a node left the pool: one of the codes above, and one line for people."""

    code: str
    reason: str


@dataclass
class ItemState:
    index: int
    item: str
    status: str = QUEUED
    attempts: int = 0
    failed_on: list[str] = field(default_factory=list)  # the node of each failed attempt, in order
    exits: list[int] = field(default_factory=list)


@dataclass
class Batch:
    """The queue and the node pool of one batch. `order` is the list of item indexes in run order."""

    items: dict[int, ItemState]
    order: list[int]
    nodes: list[str]
    retries: int = 0
    out: dict[str, SetAside] = field(default_factory=dict)  # quarantined node -> why
    _strikes: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # node -> (item, exit) failed there, ok elsewhere
    _queued: list[int] = field(default_factory=list)
    _running: int = 0
    _lost: dict[str, int] = field(default_factory=dict)  # node -> attempts lost there in a row

    @classmethod
    def of(cls, items: list[tuple[int, str]], nodes: list[str], retries: int = 0) -> Batch:
        b = cls({i: ItemState(i, it) for i, it in items}, [i for i, _ in items], list(nodes), retries)
        b._queued = list(b.order)
        b._strikes = {n: [] for n in nodes}
        return b

    def add_node(self, node: str) -> None:
        """A node that joined while the batch runs (`run --recover`'s replacement): it takes items from now."""
        if node not in self.nodes:
            self.nodes.append(node)
            self._strikes[node] = []

    def live(self, node: str) -> bool:
        return node not in self.out

    def live_nodes(self) -> list[str]:
        return [n for n in self.nodes if self.live(n)]

    def done(self) -> bool:
        return not self._queued and self._running == 0

    def stuck(self) -> bool:
        """Items are queued but no node is left to run them."""
        return bool(self._queued) and not self.live_nodes()

    def next_for(self, node: str) -> int | None:
        """The first queued item this node may take (and mark it running), or None."""
        if not self.live(node):
            return None
        live = set(self.live_nodes())
        for pos, index in enumerate(self._queued):
            s = self.items[index]
            tried = {n for n in s.failed_on if n in live}
            if node not in tried or tried >= live:
                del self._queued[pos]
                s.status = RUNNING
                s.attempts += 1
                self._running += 1
                return index
        return None

    def _counted(self, s: ItemState) -> list[str]:
        return [n for n in s.failed_on if self.live(n)]

    def _requeue(self, index: int) -> None:
        """Back on the queue at its place in the batch's order."""
        rank = {i: r for r, i in enumerate(self.order)}
        self._queued.append(index)
        self._queued.sort(key=rank.__getitem__)

    def succeeded(self, index: int, node: str) -> list[str]:
        """Returns the nodes this outcome set aside."""
        s = self.items[index]
        s.status = OK
        self._running -= 1
        self._strikes[node] = []
        self._lost[node] = 0
        gone = []
        for other, code in zip(s.failed_on, s.exits):
            if other != node and self.live(other):
                self._strikes[other].append((index, code))
                if len({i for i, _ in self._strikes[other]}) >= STRIKES_TO_QUARANTINE:
                    codes = ", ".join(sorted({str(c) for _, c in self._strikes[other]}))
                    gone += self.quarantine(other, FAILURES, f"{len(self._strikes[other])} items failed there"
                                                             f" (exit {codes}) and then succeeded on other nodes")
        return gone

    def failed(self, index: int, node: str, exit_code: int) -> str:
        """The item's status after this failure: queued again, failed or bad input."""
        s = self.items[index]
        self._running -= 1
        self._lost[node] = 0
        s.failed_on.append(node)
        s.exits.append(exit_code)
        s.status = self._after_failure(s)
        if s.status == QUEUED:
            self._requeue(index)
        return s.status

    def _after_failure(self, s: ItemState) -> str:
        counted = self._counted(s)
        distinct = set(counted)
        untried = [n for n in self.live_nodes() if n not in distinct]
        if len(counted) <= self.retries or (len(distinct) < 2 and untried):
            return QUEUED
        return BAD_INPUT if len(distinct) >= 2 else FAILED

    def lost(self, index: int, node: str, node_gone: bool, reason: str) -> list[str]:
        """The attempt could not run to an exit code (its node or worker died): queue the item
        again without counting it; set the node aside when it is gone."""
        s = self.items[index]
        self._running -= 1
        s.status = QUEUED
        self._requeue(index)
        self._lost[node] = self._lost.get(node, 0) + 1
        if node_gone or self._lost[node] >= LOST_IN_A_ROW:
            return self.quarantine(node, LOST, f"lost: {reason}")
        return []

    def interrupted(self, index: int, node: str) -> None:
        """The attempt ended because its node was drained (told to checkpoint and stop before
        the cloud takes the machine): queue the item again, not counted as a failure."""
        s = self.items[index]
        self._running -= 1
        s.status = QUEUED
        self._requeue(index)

    def gone(self, node: str, reason: str) -> list[str]:
        """The engine no longer lists the node: set it aside as lost (or say so, where failures had)."""
        if node in self.out and self.out[node].code != FAILURES:
            return []
        return self.quarantine(node, LOST, f"lost: {reason}")

    def quarantine(self, node: str, code: str, reason: str) -> list[str]:
        """Set `node` aside (`code`: one of QUARANTINE_CODES; `reason`: the words shown); items
        whose failures there had ended them go back on the queue."""
        if node in self.out and code == LOST and self.out[node].code == FAILURES:
            self.out[node] = SetAside(code, reason)  # already out of the pool: only why changes
            return [node]
        if node in self.out or node not in self.nodes:
            return []
        self.out[node] = SetAside(code, reason)
        for s in self.items.values():
            if s.status in (FAILED, BAD_INPUT) and node in s.failed_on:
                s.status = self._after_failure(s)
                if s.status == QUEUED:
                    self._requeue(s.index)
        return [node]
