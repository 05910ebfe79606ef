"""How scripts/test.sh's pytest-xdist workers get their test files: xdist's `--dist loadfile` (a
file to a worker at a time, its module fixtures started once), except that the files in APART are
never run at the same time as each other.

Why: the two costliest single tests of the suite (about 40 CPU-seconds each, 25-30 s alone) are in
test_launch_unhappy.py (two `gpuplan launch` runs from nothing at once) and test_run_engine.py (a
real torchrun over two Ray nodes: eight processes importing torch). In xdist's own order both files
went out at about the same time, and in runs 57 and 59a those two tests ran side by side: 64-74 s
each on 2 cores, the only tests of the suite over 60 s. Apart, each runs beside files of ordinary
cost. A file held back waits at the head of the queue and goes to the next worker that asks once
the other has ended; where nothing else is left, it is given anyway (no worker waits idle).

Tried and dropped (run 59c): no more than two Ray/torch/daemon files at once, the costliest first.
That put the costliest launches side by side in the first half of the run (85 s, 79 s, 64 s): the
cores are busy throughout, so what helps is keeping the costliest tests apart, not the heavy files
in general."""

from __future__ import annotations

from xdist.scheduler import LoadFileScheduling

APART = frozenset({"tests/test_launch_unhappy.py", "tests/test_run_engine.py"})


class ApartFileScheduling(LoadFileScheduling):
    """loadfile, with no two APART files assigned to different workers at once."""

    def _assign_work_unit(self, node) -> None:
        running = {scope for other, units in self.assigned_work.items() if other is not node
                   for scope, tests in units.items() if not all(tests.values())}
        if running & APART:
            later = next((scope for scope in self.workqueue if scope not in APART), None)
            if later is not None:
                self.workqueue.move_to_end(later, last=False)  # the base class takes the queue's first
        super()._assign_work_unit(node)
