"""The suite's own xdist scheduling (support/schedule.py): no two files in APART run at once."""

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


# In xdist's order (most tests first) the APART files go out at about the same time, as in the
# suite's runs; there, as here, they are about a quarter of the work
FILES = {"tests/test_bad_input.py": 120, "tests/test_teams.py": 60, "tests/test_layout.py": 30,
         "tests/test_run_backend_contract.py": 29, "tests/test_launch.py": 26, "tests/test_launch_unhappy.py": 13,
         "tests/test_run_engine.py": 6, "tests/test_readme_examples.py": 7,
         **{f"tests/test_{k}.py": 5 for k in range(20)}}


def test_no_two_apart_files_run_at_once_and_every_test_still_runs():
    from xdist.scheduler import LoadFileScheduling

    from support.schedule import APART, ApartFileScheduling

    together, _ = _simulate(LoadFileScheduling, FILES)
    assert len(together) > 1  # xdist's own: side by side
    together, ran = _simulate(ApartFileScheduling, FILES)
    assert together == set()
    # one after another: each APART file's tests all ran before the next one's first
    runs = [path for path in (test.split("::")[0] for test in ran) if path in APART]
    assert [path for k, path in enumerate(runs) if k == 0 or runs[k - 1] != path] == sorted(set(runs), key=runs.index)
    assert set(runs) == APART


def test_with_nothing_else_left_the_held_back_file_is_given_anyway():
    from support.schedule import ApartFileScheduling

    together, ran = _simulate(ApartFileScheduling, {"tests/test_launch_unhappy.py": 3, "tests/test_run_engine.py": 3})
    assert together == {"tests/test_launch_unhappy.py", "tests/test_run_engine.py"} and len(ran) == 6


def test_every_file_named_is_a_test_file():
    from support.schedule import APART

    root = Path(__file__).parent.parent
    assert sorted(f for f in APART if not (root / f).is_file()) == []

