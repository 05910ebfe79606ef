"""A cluster's lock holds even when its file is deleted (a tmp cleaner, an `rm -rf` of the
locks folder) or replaced while a command holds it, and a lock path that is not a regular
file is refused at once instead of hanging."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

from gpuplan.errors import Busy, UsageError
from gpuplan.fleet import locks


def _holder(name: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time\nfrom gpuplan.fleet import locks\n"
                               f"with locks.cluster({name!r}):\n    print('held', flush=True)\n    time.sleep(120)"],
        stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _free(name: str) -> bool:
    try:
        with locks.cluster(name, wait_s=0):
            return True
    except Busy:
        return False


@pytest.mark.parametrize("how", ["unlink", "rmtree", "replace"])
def test_a_deleted_lock_file_still_excludes_a_second_command(gpuplan_home, how, store):
    """On both stores (`store`: GPUPLAN_STATE_URL, which the holder inherits): on PostgreSQL the
    lock is also the database's advisory lock."""
    holder = _holder("gone")
    try:
        path = locks._path("cluster-gone")
        if how == "unlink":
            path.unlink()
        elif how == "rmtree":
            shutil.rmtree(path.parent)
        else:
            path.with_suffix(".new").write_text("{}")
            os.replace(path.with_suffix(".new"), path)
        for _ in range(3):  # every later try is refused, not only the first
            assert not _free("gone")
    finally:
        holder.kill()
        holder.wait()
    assert _free("gone")  # the holder's death frees it at once, file or no file


def test_a_lock_file_unlinked_between_open_and_flock_is_taken_again(gpuplan_home, monkeypatch):
    """The race the inode check closes: the file we flocked is no longer the one the path names."""
    real_flock = locks.fcntl.flock
    unlinked = []

    def flock(fd, op):
        real_flock(fd, op)
        if not unlinked:
            unlinked.append(True)
            locks._path("cluster-race").unlink()

    monkeypatch.setattr(locks.fcntl, "flock", flock)
    with locks.cluster("race", wait_s=1):
        held = os.stat(locks._path("cluster-race"))
        monkeypatch.setattr(locks.fcntl, "flock", real_flock)
        other: list[bool] = []
        t = threading.Thread(target=lambda: other.append(_free("race")))  # the lock is re-entrant in one thread
        t.start()
        t.join()
        assert other == [False]
    assert unlinked and held.st_size > 0  # the holder wrote who it is into the file the path names


def test_a_named_pipe_as_lock_file_is_refused_at_once(gpuplan_home):
    path = locks._path("cluster-fifo")
    os.mkfifo(path)
    t = time.monotonic()
    with pytest.raises(UsageError, match="not a regular file"):
        with locks.cluster("fifo", wait_s=60):
            pass
    assert time.monotonic() - t < 15  # at once, not after the 60 s wait (with room for a busy machine)
