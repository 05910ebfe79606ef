"""Failpoints for fault-injection tests: GPUPLAN_FAILPOINT=<point> makes the process kill itself
with SIGKILL when it reaches that point, the most abrupt death there is (no finally blocks, no
atexit). Points are "before:<op>" and "after:<op>" around every journaled cloud call, so a test
can kill gpuplan between a create call and the write of its outcome."""

from __future__ import annotations

import os
import signal


def hit(point: str) -> None:
    if os.environ.get("GPUPLAN_FAILPOINT") == point:
        os.kill(os.getpid(), signal.SIGKILL)
