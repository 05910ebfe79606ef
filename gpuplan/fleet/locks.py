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

A lock file can be deleted while held (a tmp cleaner, an `rm -rf`): the next command would then
create a new file and lock that. So a lock is also an abstract Unix socket bound under a name
made from the lock file's path (Linux), which no file deletion can remove and the kernel frees
with its process; and a flock is only trusted once the path still names the inode locked.

With a PostgreSQL state (GPUPLAN_STATE_URL) the state is shared by several machines, and so is
a lock: besides the flock, the holder takes a session advisory lock on the database, on a
connection kept for the lock's life (gpuplan/store/sql.AdvisoryLock), which the server frees
when that session ends, a killed process's included. A command on another machine that wants
the same name waits for it and is refused as above, naming the holder's pid, host and command.

The holder writes who it is (pid, host, command, since) into the file, so a refused command
can say what to wait for. Locks are re-entrant within one thread: provision's rollback tears
down under the lock provision already holds.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shlex
import socket
import stat
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from gpuplan import paths
from gpuplan.errors import Busy, UsageError

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
    path = _path(name)
    try:
        info = json.loads(path.read_text() or "{}") if stat.S_ISREG(os.stat(path).st_mode) else {}
    except (OSError, ValueError):
        info = {}
    if not info:
        return "another gpuplan command"
    return (f"`{info.get('command', 'gpuplan')}` (pid {info.get('pid', '?')} on {info.get('host', '?')}, "
            f"since {info.get('since', '?')})")


def _open(name: str) -> int:
    """The lock file's descriptor, refusing anything but a regular file (a named pipe there
    would block the open forever)."""
    path = _path(name)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise UsageError(f"cannot open the lock file {path} ({exc.strerror}); move it aside, then run this again") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UsageError(f"the lock file {path} is not a regular file; move it aside, then run this again")
    return fd


def _locked(name: str, what: str, deadline: float) -> tuple[int, socket.socket | None]:
    """The flock on the file `name`'s path names now, plus the lock's abstract socket.

    A file unlinked (a tmp cleaner, an `rm -rf`) or replaced while we waited for or took its
    flock locks nothing anyone else will open, so the path is checked after the flock (same
    inode as the descriptor) and the lock taken again on the new file if not. And since a
    holder's file can be unlinked at any time after, the lock is also an abstract Unix socket
    bound under a name made from the lock's path: no file to delete, released by the kernel
    when the holder dies, kill -9 included (Linux only; elsewhere the flock alone)."""
    while True:
        fd = _open(name)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                taken = _still_named(fd, _path(name))
                sock = _bind(name) if taken else None
                if taken and sock is not _BUSY:
                    return fd, sock
            except BlockingIOError:
                pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        if time.monotonic() >= deadline:
            raise Busy(f"{what} is busy: {holder(name)} holds its lock; "
                       "wait for it to finish (or stop that process), then run this again")
        time.sleep(_POLL_S)


_BUSY = object()


def _bind(name: str):
    """The lock's abstract socket (None where the system has none), or _BUSY when another
    process or thread holds it."""
    key = hashlib.sha256(str(_path(name).resolve()).encode()).hexdigest()[:40]
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except (AttributeError, OSError):
        return None
    try:
        sock.bind(f"\0gpuplan-lock-{key}")
    except OSError as exc:
        sock.close()
        return _BUSY if exc.errno == errno.EADDRINUSE else None
    return sock


def _still_named(fd: int, path: Path) -> bool:
    try:
        now_named = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (now_named.st_dev, now_named.st_ino) == (held.st_dev, held.st_ino)


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

    deadline = time.monotonic() + _wait_s(wait_s)
    fd, sock = _locked(name, what, deadline)
    try:
        shared = _shared(name, what, deadline)
    except BaseException:
        if sock is not None:
            sock.close()
        os.close(fd)
        raise
    try:
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
        if shared is not None:
            shared.release()
        if sock is not None:
            sock.close()
        os.close(fd)  # closing the descriptor releases the flock


def _shared(name: str, what: str, deadline: float):
    """With a PostgreSQL state, the lock's advisory lock there, waited for until `deadline`
    (None with the SQLite state: the flock is the lock)."""
    from gpuplan import config

    url = config.state_url()
    if url is None:
        return None
    from gpuplan.store.sql import AdvisoryLock

    who = f"gpuplan pid {os.getpid()} on {socket.gethostname()}: {_command().removeprefix('gpuplan ')}"
    lock = AdvisoryLock(url, name, who)
    try:
        while not lock.try_take():
            if time.monotonic() >= deadline:
                raise Busy(f"{what} is busy: {lock.holder() or 'another gpuplan command'} holds its lock (on the"
                           " shared state); wait for it to finish (or stop that process), then run this again")
            time.sleep(_POLL_S)
    except BaseException:
        lock.release()
        raise
    return lock
