"""One at a time on this machine: a daemon the tests start that holds machine-wide names (Slurm's
munge and slurmd node, dockerd's /etc/docker) is started under an exclusive lock held until it is
stopped, so that pytest-xdist workers (or two suites run at once on one machine) take turns
instead of tripping over each other. The lock is the kernel's (flock): a killed holder frees it."""

from __future__ import annotations

import fcntl
import os


def hold(name: str) -> int:
    """Wait for, then hold, the machine's lock `name`; returns what release() takes."""
    fd = os.open(f"/tmp/gpuplan-test-{name}.lock", os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # closing the last descriptor drops the flock
