"""The suite's own xdist scheduling (support/schedule.py): the files in APART never run at once."""

from __future__ import annotations

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


def _simulate(scheduler_class, files: dict[str, int]) -> tuple[set[str], list[str]]:
    """Three workers finish one test each in turn until all are done. Returns the APART files that
    ever had tests pending on two workers at once, and the tests in the order they ran."""
    from support.schedule import APART

    config = SimpleNamespace(getvalue=lambda name: ["3*popen"] if name == "tx" else None,
                             option=SimpleNamespace(loadscopereorder=True))
    sched = scheduler_class(config)
    collection = [f"{path}::test_{k}" for path, count in files.items() for k in range(count)]
    workers = [_Worker(f"gw{k}") for k in range(3)]
    for w in workers:
        sched.add_node(w)
        sched.add_node_collection(w, collection)
    sched.schedule()
    together, ran = set(), []
    while any(w.queue for w in workers):
        for w in workers:
            pending = [{s for s, tests in sched.assigned_work.get(o, {}).items() if not all(tests.values())} & APART
                       for o in workers]
            if sum(bool(p) for p in pending) > 1:
                together |= set().union(*pending)
            if w.queue:
                index = w.queue.pop(0)
                ran.append(collection[index])
                sched.mark_test_complete(w, index)
    assert sorted(ran) == sorted(collection)  # every test once
    return together, ran


# In xdist's order (most tests first) the two APART files go out at once, as in the suite's runs
FILES = {"tests/test_a.py": 9, "tests/test_launch_unhappy.py": 8, "tests/test_run_engine.py": 7,
         "tests/test_b.py": 5, "tests/test_c.py": 4, "tests/test_d.py": 3, "tests/test_e.py": 2, "tests/test_f.py": 1}


def test_the_apart_files_never_run_at_once_and_every_test_still_runs():
    from xdist.scheduler import LoadFileScheduling

    from support.schedule import ApartFileScheduling

    together, _ = _simulate(LoadFileScheduling, FILES)
    assert together == {"tests/test_launch_unhappy.py", "tests/test_run_engine.py"}  # xdist's own: side by side
    together, ran = _simulate(ApartFileScheduling, FILES)
    assert together == set()
    assert ran.index("tests/test_run_engine.py::test_0") > ran.index("tests/test_launch_unhappy.py::test_7")


def test_with_nothing_else_left_the_held_back_file_is_given_anyway():
    from support.schedule import ApartFileScheduling

    together, ran = _simulate(ApartFileScheduling, {"tests/test_launch_unhappy.py": 3, "tests/test_run_engine.py": 3})
    assert together == {"tests/test_launch_unhappy.py", "tests/test_run_engine.py"} and len(ran) == 6
