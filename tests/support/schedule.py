"""How scripts/test.sh's three pytest-xdist workers get their test files: a file to a worker at a
time (xdist's `--dist loadfile`: a module's fixtures start once), in an order that keeps the
costly files from running three at once.

Why: about 70 % of the suite's time is in the HEAVY files below, whose tests start Ray clusters,
torch jobs or daemons, many processes each; the rest is light files of single-process tests. xdist
sends the files with the most tests first, which are light: the heavy files then ran three at
once, and the heaviest single tests (a launch from nothing, in files of one test) all came last,
side by side (run 59b: five of them at 47-54 s in the last 200 s). In a run, a test of about 40
CPU-seconds beside two other heavy files took 64-74 s on 2 cores; beside light files, 30-40 s.

So a worker that asks for a file gets a heavy one while fewer than two other workers have one,
otherwise a light one; the heavy files go in HEAVY's order (the costliest single test first, so
they run while light files are left to go beside them). When one kind is used up, the other is
given (no worker waits idle). And the two files holding the two costliest tests (APART) never
run at once: in runs 57 and 59a those two tests ran side by side, the only ones over 60 s.

A file missing from HEAVY is scheduled as a light one: nothing fails, the run only gets slower
(tests/test_schedule.py checks every name here is a test file)."""

from __future__ import annotations

from xdist.scheduler import LoadFileScheduling

# Costliest single test first (their time in the suite, runs 59a/59b on 2 cores)
HEAVY = tuple(f"tests/test_{name}.py" for name in (
    "launch_unhappy",  # two launches from nothing at once: 31-74 s
    "run_engine",  # a real torchrun over two Ray nodes: 40-64 s; the module's two-node cluster
    "launch",  # a launch from nothing on two hosts: 54-63 s
    "readme_examples", "demo", "launch_recover", "docker_daemon", "run_recover", "spot_notice",  # 47-57 s
    "teardown_engine", "probe_owned", "state_postgres", "calibration_evidence", "run_closed", "chaos",  # 45-52 s
    "failover_launch", "job_checkpoints", "jobs_reference", "run_backend_contract", "run_containers",
    "run_cluster", "run_env", "bench_local", "slurm_runs",
))
APART = frozenset({"tests/test_launch_unhappy.py", "tests/test_run_engine.py"})
HEAVY_AT_ONCE = 2


class BalancedFileScheduling(LoadFileScheduling):
    """loadfile, with at most HEAVY_AT_ONCE heavy files at once while light ones are left, and no
    two APART files at once while anything else is left."""

    def _assign_work_unit(self, node) -> None:
        others = [{scope for scope, tests in units.items() if not all(tests.values())}
                  for other, units in self.assigned_work.items() if other is not node]
        heavy_elsewhere = sum(1 for scopes in others if scopes & set(HEAVY))
        apart_elsewhere = any(scopes & APART for scopes in others)
        queued = set(self.workqueue)
        heavy = [s for s in HEAVY if s in queued and not (apart_elsewhere and s in APART)]
        light = [s for s in self.workqueue if s not in HEAVY]
        if heavy_elsewhere < HEAVY_AT_ONCE:
            choice = heavy + light
        else:
            choice = light + heavy
        if choice:
            self.workqueue.move_to_end(choice[0], last=False)  # the base class takes the queue's first
        super()._assign_work_unit(node)
