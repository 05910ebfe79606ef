"""How scripts/test.sh's pytest-xdist workers get their test files: xdist's `--dist loadfile` (a
file to a worker at a time, its module fixtures started once), except that no two of the APART
files run at the same time.

Why: the suite's costliest single tests are launches from nothing and a real torchrun (about 40
CPU-seconds each, 25-30 s alone), and the CPU bursts of a file's Ray cluster and daemons starting.
In xdist's order (most tests first) the APART files went out at about the same time, and the
costliest tests ran side by side: the two launches at once beside the torchrun, 74 s and 64 s
(runs 57, 59a); once those two were kept apart, a launch from nothing beside the contract file's
Ray and Slurm start, 62-64 s (runs 59b, 59d); then the README demo session's launch beside two
other Ray files, 60.7 s (run 59f). Those were the only tests over 60 s on 2 cores; with all five
apart the slowest test took 50.2 s (run 59g).

Apart, each runs beside files of ordinary cost. A file held back stays at the head of the queue
and goes to the next worker that asks once the other has ended; where nothing else is left, it
is given anyway (no worker waits idle). Together the APART files are about a quarter of the
suite's time, so one after another they still end well before the rest.

Tried and dropped (run 59c): no more than two Ray/torch/daemon files at once, the costliest first.
That put the costliest launches side by side in the first half of the run (85 s, 79 s, 64 s; 11
tests over 60 s, 1,308 s): the cores are busy throughout, so what helps is keeping the costliest
bursts apart, not holding back heavy files in general. And (run 59e) the files of few, costly
tests spread evenly through the queue instead of last, where xdist puts them (there they ran three
at once, 45-49 s, but left a worker idle up to 122 s at the end): in the middle of the run they
landed beside the APART files' starts and each other, 63-77 s."""

from __future__ import annotations

from xdist.scheduler import LoadFileScheduling

APART = frozenset(f"tests/test_{name}.py" for name in (
    "launch",  # launches from nothing on owned hosts
    "launch_unhappy",  # two launches from nothing at once; a killed launch's cap
    "run_engine",  # a two-node Ray cluster for the module; a real torchrun over it
    "run_backend_contract",  # a Ray cluster, Slurm's daemons and the DOK fake for the module
    "readme_examples",  # the demo session: a launch from nothing, as the README shows it
))


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
