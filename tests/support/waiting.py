"""Waiting for something a real daemon does in its own time (Ray, sshd), without a fixed sleep."""

from __future__ import annotations

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
