"""Locks that serialise the commands that change things: one per cluster, one per image, one
for sweeps.

    with locks.cluster("demo"):     # waits up to WAIT_S, then raises Busy naming the holder
        ...

A lock is an exclusive `fcntl.flock` on a small file in `<state_dir>/locks/`, beside the state
database it protects. Why a file lock and not a lease row in SQLite: the kernel releases it
when the holding process dies, kill -9 included, so a lock can never go stale and no pid
liveness check is needed (pids are reused, and a pid says nothing about another host). It is
exactly as shared as the state: two commands on one state (one GPUPLAN_HOME) exclude each
other; two homes with two states share no clusters and no locks. Like SQLite itself, it needs
the state directory on a local file system.

The holder writes who it is (pid, host, command, since) into the file, so a refused command
can say what to wait for. Locks are re-entrant within one thread: provision's rollback tears
down under the lock provision already holds.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from gpuplan import paths
from gpuplan.errors import Busy

WAIT_S = 10.0  # how long a second command waits before it refuses; GPUPLAN_LOCK_WAIT overrides
_POLL_S = 0.1

_held: dict[str, tuple[int, int]] = {}  # lock name -> (thread id, depth) for this process
_held_guard = threading.Lock()


def cluster(name: str, wait_s: float | None = None):
    """The lock of one cluster: provision, teardown, bootstrap, run, image builders."""
    return hold(f"cluster-{name}", f"cluster {name}", wait_s)


def image(name: str, wait_s: float | None = None):
    return hold(f"image-{name}", f"image {name}", wait_s)


def sweep(wait_s: float | None = None):
    return hold("sweep", "the sweep", wait_s)


def _wait_s(wait_s: float | None) -> float:
    if wait_s is not None:
        return wait_s
    raw = os.environ.get("GPUPLAN_LOCK_WAIT", "")
    try:
        return max(0.0, float(raw)) if raw else WAIT_S
    except ValueError:
        return WAIT_S


def _path(name: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    folder = paths.state_dir() / "locks"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder / f"{safe}.lock"


def _command() -> str:
    argv = list(sys.argv)
    script = Path(argv[0]) if argv else Path()
    if script.name == "gpuplan" or (script.name == "__main__.py" and script.parent.name == "gpuplan"):
        argv = ["gpuplan", *argv[1:]]
    return shlex.join(argv)[:200]


def holder(name: str) -> str:
    """Who holds (or last held) lock `name`, in words."""
    try:
        info = json.loads(_path(name).read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "another gpuplan command"
    return (f"`{info.get('command', 'gpuplan')}` (pid {info.get('pid', '?')} on {info.get('host', '?')}, "
            f"since {info.get('since', '?')})")


@contextmanager
def hold(name: str, what: str, wait_s: float | None = None) -> Iterator[None]:
    """Hold lock `name` for the body. Re-entrant in one thread. Waits up to `wait_s` seconds
    (default WAIT_S, or GPUPLAN_LOCK_WAIT) for another holder, then raises Busy."""
    me = threading.get_ident()
    with _held_guard:
        owner = _held.get(name)
        if owner and owner[0] == me:
            _held[name] = (me, owner[1] + 1)
            reentered = True
        else:
            reentered = False
    if reentered:
        try:
            yield
        finally:
            with _held_guard:
                tid, depth = _held[name]
                _held[name] = (tid, depth - 1)
        return

    path = _path(name)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + _wait_s(wait_s)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise Busy(f"{what} is busy: {holder(name)} holds its lock; "
                               "wait for it to finish (or stop that process), then run this again") from None
                time.sleep(_POLL_S)
        since = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": _command(),
                                  "since": since}).encode(), 0)
        with _held_guard:
            _held[name] = (me, 1)
        try:
            yield
        finally:
            with _held_guard:
                _held.pop(name, None)
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # closing the descriptor releases the flock
