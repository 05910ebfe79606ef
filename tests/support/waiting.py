"""Waiting for something a real daemon does in its own time (Ray, sshd), without a fixed sleep."""

from __future__ import annotations

import shlex
import time


def wait_for(what, timeout: float = 90.0, every: float = 0.3):
    """`what()` once it is truthy (called every `every` s); an AssertionError after `timeout` s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = what()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def item_running_on(state_db, cluster: str, node: str) -> bool:
    """Does the state at `state_db` show an item of a batch on `cluster` running on `node`, as the
    client following the batch wrote it? (A recover test loses the node then: by the state, not by
    counting machine-wide processes, as items carry no Ray tag.)"""
    from gpuplan.store.state import State

    seen = State(state_db)
    try:
        return any(it.status == "running" and it.node == node for job in seen.jobs(cluster) for it in seen.job_items(job.id))
    finally:
        seen.close()


def sleep_unless(flag, seconds: float) -> str:
    """A shell command that sleeps `seconds`, or ends within 0.1 s of the file `flag` existing.
    A recover test's items run long enough for the replacement to join and take one; the test
    then makes `flag`, as everything it checks has happened, and the batch ends at once."""
    return (f"i=0; while [ $i -lt {round(seconds * 10)} ] && [ ! -e {shlex.quote(str(flag))} ];"
            " do sleep 0.1; i=$((i+1)); done")
