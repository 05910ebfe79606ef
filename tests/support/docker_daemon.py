"""A real Docker daemon on this machine, for the container tests (issue 41): Debian's dockerd
(docker.io) started in a scratch folder with its own socket, data and exec roots, no bridge and
no iptables rules of its own, and stopped by its pid.

    from support.docker_daemon import start_daemon
    daemon = start_daemon()                      # pytest.skip()s with the reason where it cannot start
    daemon.env                                   # {"DOCKER_HOST": "unix://.../docker.sock"}
    daemon.docker("ps", "-a")                    # the docker CLI against it (CompletedProcess)
    daemon.import_busybox("gpuplan-test/busybox:1")  # a local image FROM scratch: busybox, no bash
    daemon.stop()                                # always, in a fixture's teardown

No registry is reachable here: every image is made locally (`docker import` of a tarball holding
the static busybox of busybox-static and its applet links). There is no GPU: a runtime named
`nvidia` is registered pointing at runc, so the check that a GPU node's docker has the NVIDIA
runtime (run/ray/containers.py) passes as on a node with the toolkit; what that leaves
unproven is the NVIDIA runtime itself (devices in the container), which only a GPU machine shows.
dockerd writes /etc/docker/key.json: removed again when this daemon made it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from support import machine_lock

DOCKERD = "/usr/sbin/dockerd"
RUNC = "/usr/sbin/runc"
BUSYBOX = "/bin/busybox"  # busybox-static's (static: it runs in an image with nothing else)
KEY = Path("/etc/docker/key.json")
APPLETS = ("sh", "echo", "cat", "sleep", "test", "[", "mkdir", "ls", "printf", "true", "false", "env", "rm")


def docker_cli() -> str | None:
    """The docker client on this machine (not the tests' stand-in in tests/support/fakebin)."""
    fakebin = str(Path(__file__).parent / "fakebin")
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p.rstrip("/") != fakebin)
    return shutil.which("docker", path=path)


def missing_prerequisite() -> str | None:
    """Why a test daemon cannot start here, or None."""
    missing = [p for p in (DOCKERD, RUNC, BUSYBOX) if not os.path.exists(p)]
    if missing or docker_cli() is None:
        return (f"{', '.join(missing) or 'the docker client'} not installed: apt-get install docker.io busybox-static"
                " (scripts/test.sh does)")
    if os.geteuid() != 0:
        return "the test Docker daemon runs as root"
    return None


@dataclass
class DockerDaemon:
    dir: Path
    proc: subprocess.Popen
    key_was_there: bool
    etc_was_there: bool = True  # /etc/docker itself: dockerd makes it for its key
    lock: int | None = None  # machine_lock's "dockerd", held from start to stop

    @property
    def socket(self) -> str:
        return f"unix://{self.dir}/docker.sock"

    @property
    def env(self) -> dict[str, str]:
        return {"DOCKER_HOST": self.socket}

    def docker(self, *args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
        cli = docker_cli()
        assert cli is not None
        return subprocess.run([cli, *args], env={**os.environ, **self.env}, capture_output=True, text=True,
                              timeout=timeout, **kw)

    def import_busybox(self, name: str) -> None:
        """`name`: an image FROM scratch holding only busybox (static) and its applets: no bash."""
        root = self.dir / "image"
        (root / "bin").mkdir(parents=True, exist_ok=True)
        shutil.copy(BUSYBOX, root / "bin/busybox")
        for applet in APPLETS:
            (root / "bin" / applet).symlink_to("busybox")
        (root / "tmp").mkdir(exist_ok=True)
        with tarfile.open(self.dir / "image.tar", "w") as tar:
            tar.add(root, arcname=".")
        with open(self.dir / "image.tar", "rb") as fh:
            r = self.docker("import", "--change", "ENV PATH=/bin", "-", name, stdin=fh)
        assert r.returncode == 0, r.stderr

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # dockerd stops its containers and its containerd
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        subprocess.run(["umount", "-R", "-l", str(self.dir / "data")], capture_output=True)  # overlay mounts, if any
        subprocess.run(["umount", "-R", "-l", str(self.dir / "exec")], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)
        if not self.key_was_there:
            KEY.unlink(missing_ok=True)
        if not self.etc_was_there:
            with contextlib.suppress(OSError):  # only when empty: nothing of anyone else's goes
                KEY.parent.rmdir()
        machine_lock.release(self.lock)
        self.lock = None


def start_daemon(timeout: float = 60) -> DockerDaemon:
    """Start dockerd; pytest.skip() with the reason where it is missing or cannot start here."""
    import pytest

    missing = missing_prerequisite()
    if missing:
        pytest.skip(missing)
    lock = machine_lock.hold("dockerd")  # one test dockerd at a time: /etc/docker (its key.json) is the machine's
    d = Path("/tmp") / f"gpuplan-dockerd-{secrets.token_hex(4)}"  # short: containerd's socket paths must fit
    d.mkdir(mode=0o700)
    key_was_there, etc_was_there = KEY.exists(), KEY.parent.exists()
    log = open(d / "dockerd.log", "wb")
    proc = subprocess.Popen([DOCKERD, "--host", f"unix://{d}/docker.sock", "--data-root", str(d / "data"),
                             "--exec-root", str(d / "exec"), "--pidfile", str(d / "dockerd.pid"),
                             "--iptables=false", "--bridge=none", "--ip-masq=false",
                             "--add-runtime", f"nvidia={RUNC}"],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    daemon = DockerDaemon(d, proc, key_was_there, etc_was_there, lock)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            why = (d / "dockerd.log").read_text(errors="replace").strip().splitlines()[-3:]
            daemon.stop()
            pytest.skip(f"dockerd cannot start here (exit {proc.returncode}): {' / '.join(why)}")
        try:
            if (d / "docker.sock").exists() and daemon.docker("info", "--format", "{{.ServerVersion}}",
                                                              timeout=10).returncode == 0:
                return daemon
        except BaseException:  # stopped, and its lock freed, whatever went wrong
            daemon.stop()
            raise
        time.sleep(0.3)
    why = (d / "dockerd.log").read_text(errors="replace").strip().splitlines()[-3:]
    daemon.stop()
    pytest.skip(f"dockerd did not answer within {timeout:g} s: {' / '.join(why)}")
