"""The suite's own xdist scheduling (support/schedule.py): no more than two heavy files at once
while light ones are left, the APART files never at once, every test run once."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("xdist")


class _Worker:
    """A worker as the scheduler sees it: it is sent test indexes and runs them in order."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.queue: list[int] = []

    def send_runtest_some(self, indexes) -> None:
        self.queue += indexes

    def shutdown(self) -> None:
        self.shutting_down = True


def _simulate(scheduler_class, files: dict[str, int]) -> dict:
    """Three workers run their tests until all are done: the most heavy files seen at once while a
    light one was still queued, whether the APART files ever ran at once, the order they ran in."""
    from support.schedule import APART, HEAVY

    config = SimpleNamespace(getvalue=lambda name: ["3*popen"] if name == "tx" else None,
                             option=SimpleNamespace(loadscopereorder=True))
    sched = scheduler_class(config)
    collection = [f"{path}::test_{k}" for path, count in files.items() for k in range(count)]
    workers = [_Worker(f"gw{k}") for k in range(3)]
    for w in workers:
        sched.add_node(w)
        sched.add_node_collection(w, collection)
    sched.schedule()
    seen = {"heavy_at_once": 0, "apart_at_once": False, "ran": []}
    left = {w: 0 for w in workers}  # ticks left of the test a worker runs: a heavy file's take 5, a light one's 1
    while any(w.queue for w in workers):
        for w in workers:
            pending = [{s for s, tests in sched.assigned_work.get(o, {}).items() if not all(tests.values())}
                       for o in workers]
            if any(s not in HEAVY for s in sched.workqueue):
                seen["heavy_at_once"] = max(seen["heavy_at_once"], sum(bool(p & set(HEAVY)) for p in pending))
            seen["apart_at_once"] |= sum(bool(p & APART) for p in pending) > 1
            if not w.queue:
                continue
            if not left[w]:
                left[w] = 5 if collection[w.queue[0]].split("::")[0] in HEAVY else 1
            left[w] -= 1
            if not left[w]:
                index = w.queue.pop(0)
                seen["ran"].append(collection[index])
                sched.mark_test_complete(w, index)
    assert sorted(seen["ran"]) == sorted(collection)  # every test once
    return seen


# As in the suite: a heavy file's tests take 5 times a light one's, and the light files (most
# tests first in xdist's order) are a third of the work. xdist's order ran three heavy files at
# once, the two APART files side by side
FILES = {"tests/test_bad_input.py": 40, "tests/test_safety.py": 15, "tests/test_layout.py": 10,
         "tests/test_launch_unhappy.py": 8, "tests/test_run_engine.py": 7, "tests/test_launch.py": 7,
         "tests/test_teams.py": 6, "tests/test_chaos.py": 5, "tests/test_probe.py": 4, "tests/test_demo.py": 1,
         "tests/test_spot_notice.py": 1, "tests/test_run_recover.py": 1}


def test_two_heavy_files_at_most_while_light_ones_are_left_and_the_apart_ones_never_at_once():
    from xdist.scheduler import LoadFileScheduling

    from support.schedule import BalancedFileScheduling

    xdist = _simulate(LoadFileScheduling, FILES)
    assert xdist["heavy_at_once"] == 3 and xdist["apart_at_once"]
    ours = _simulate(BalancedFileScheduling, FILES)
    assert ours["heavy_at_once"] == 2 and not ours["apart_at_once"]
    ran = ours["ran"]
    assert ran.index("tests/test_run_engine.py::test_0") > ran.index("tests/test_launch_unhappy.py::test_7")
    # the heaviest single tests (files of one test) run while light files are left, not last
    assert ran.index("tests/test_demo.py::test_0") < ran.index("tests/test_probe.py::test_3")


def test_when_one_kind_is_used_up_the_other_is_given_and_no_worker_waits():
    from support.schedule import BalancedFileScheduling

    only_heavy = {"tests/test_launch_unhappy.py": 3, "tests/test_run_engine.py": 3, "tests/test_launch.py": 3}
    seen = _simulate(BalancedFileScheduling, only_heavy)
    assert seen["apart_at_once"] and len(seen["ran"]) == 9


def test_every_file_named_is_a_test_file():
    from support.schedule import APART, HEAVY

    root = Path(__file__).parent.parent
    assert [f for f in (*HEAVY, *APART) if not (root / f).is_file()] == []
    assert APART <= set(HEAVY)
