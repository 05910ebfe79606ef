"""Real OpenSSH sshd hosts on loopback, one fake machine each.

    from support.sshd import start_hosts
    hosts = start_hosts(4, tmp_path)          # pytest.skip()s when /usr/sbin/sshd is missing
    h = hosts[0]
    h.host, h.port, h.user                    # "127.0.0.1", a free port, "root"
    h.client_key_path                         # private key (OpenSSH) that logs in as h.user
    h.host_public_key                         # "ssh-ed25519 AAAA..." the host offers
    h.fake_root                               # Path: this host's "system" (files the stand-ins write)
    h.installed("cuda-toolkit-12-6")          # did the apt-get stand-in install that package here?
    h.restart(new_host_key=True)              # same port, fresh host key (a "rebuilt" machine)
    h.stop()
    stop_hosts(hosts)                         # always, in a fixture's teardown
    register_cluster(state, "demo", hosts)    # state rows (cluster, running nodes, key, pinned host keys)

Each host is a separate `/usr/sbin/sshd -D -e -f <config>` process on 127.0.0.1 with its own
ed25519 host key; all accept the same client key for root (and keys added to `<fake_root>/root/.ssh/authorized_keys`). sshd sets, per session,
`GPUPLAN_FAKE_ROOT=<fake_root>`, `GPUPLAN_SSHD_DIR=<host dir>`, `HOME=<fake_root>/root` (the
login user's files, and a fast ~/.bashrc) and `PATH=<tests/support/fakebin>:/usr/bin:/bin`, so the stand-in commands in fakebin (apt-get,
dpkg-query, nvidia-smi, nvcc, reboot, ...) record what they do under that host's fake root.
Playbooks reach the fake root through their `root` parameter: pass `root='$GPUPLAN_FAKE_ROOT'`
(single-quoted so it expands on each host). The `reboot` stand-in kills this host's sshd and
starts it again ~1 s later with a new boot id in `<fake_root>/proc/sys/kernel/random/boot_id`.

State lives under /run/gpuplan-test-sshd/ (root-owned 0755; sshd's StrictModes refuses /tmp).
`gpus` sets how many GPUs the nvidia-smi stand-in reports once a driver is "installed".
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = "/usr/sbin/sshd"
FAKEBIN = Path(__file__).parent / "fakebin"
BASE = Path("/run/gpuplan-test-sshd")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(path)], check=True)


@dataclass
class SshdHost:
    host: str
    port: int
    user: str
    client_key_path: Path
    host_public_key: str
    fake_root: Path
    dir: Path
    gpus: int = 1
    _stopped: bool = field(default=False, repr=False)

    @property
    def name(self) -> str:
        return self.dir.name

    def pid(self) -> int | None:
        try:
            return int((self.dir / "sshd.pid").read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def installed(self, package: str) -> bool:
        return (self.fake_root / "var/lib/dpkg/fake" / package).exists()

    def boot_id(self) -> str:
        return (self.fake_root / "proc/sys/kernel/random/boot_id").read_text().strip()

    def start(self) -> None:
        subprocess.run([str(self.dir / "start-sshd.sh")], check=True)
        _wait_listening(self)
        self._stopped = False

    def stop(self) -> None:
        pid = self.pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            _wait_gone(pid)
        self._stopped = True

    def restart(self, new_host_key: bool = False) -> None:
        self.stop()
        if new_host_key:
            key = self.dir / "ssh_host_ed25519_key"
            key.unlink()
            Path(str(key) + ".pub").unlink()
            _keygen(key)
            self.host_public_key = Path(str(key) + ".pub").read_text().strip()
        self.start()


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie no init has reaped yet is gone


def _wait_gone(pid: int, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not _alive(pid):
            return
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)


def _wait_listening(h: SshdHost, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.create_connection((h.host, h.port), timeout=0.5) as s:
                if s.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"sshd on {h.host}:{h.port} did not start; see {h.dir / 'sshd.log'}")


_START = """#!/bin/sh
# Start this host's sshd in the background and record its pid (used by tests and the reboot stand-in).
setsid {sshd} -D -e -f {dir}/sshd_config </dev/null >>{dir}/sshd.log 2>&1 &
echo $! > {dir}/sshd.pid
"""

_CONFIG = """Port {port}
ListenAddress 127.0.0.1
HostKey {dir}/ssh_host_ed25519_key
PidFile none
AuthorizedKeysFile {dir}/authorized_keys {root}/root/.ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
UsePAM no
MaxStartups 100:30:200
MaxSessions 50
Subsystem sftp /usr/lib/openssh/sftp-server
# Start in the fake home, as a real login starts in the real one (sshd itself chdirs to /root).
ForceCommand cd "$HOME" && eval "${{SSH_ORIGINAL_COMMAND:-exec bash -l}}"
SetEnv GPUPLAN_FAKE_ROOT={root} GPUPLAN_SSHD_DIR={dir} HOME={root}/root PATH={fakebin}:/usr/bin:/bin GPUPLAN_TEST_WORKER={worker} OMP_NUM_THREADS={threads}
"""


def missing_prerequisite() -> str | None:
    """Why loopback hosts cannot start here, or None."""
    if not os.path.exists(SSHD) or shutil.which("ssh-keygen") is None:
        return f"{SSHD} or ssh-keygen is not installed"
    if os.geteuid() != 0:
        return "the loopback sshd hosts need root (they log in as root)"
    return None


def start_hosts(n: int, tmp_path: Path | None = None, gpus: int = 1,
                host_env: list[dict[str, str]] | None = None) -> list[SshdHost]:
    """Start `n` sshd hosts; the caller must call stop_hosts() (or use the fixture pattern in
    the module docstring). `tmp_path` is unused for sshd state (StrictModes) but kept for
    symmetry with other helpers. `host_env`: more variables each host's logins get (one mapping
    per host; values without spaces), such as its own instance metadata endpoint."""
    missing = missing_prerequisite()
    if missing:
        import pytest  # only under pytest: scripts/demo.py checks missing_prerequisite() itself

        pytest.skip(missing)
    BASE.mkdir(mode=0o755, exist_ok=True)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    group = BASE / secrets.token_hex(4)
    group.mkdir(mode=0o755)
    client_key = group / "client_key"
    _keygen(client_key)
    hosts = []
    try:
        for i in range(n):
            d = group / f"h{i}"
            d.mkdir(mode=0o755)
            root = d / "root"
            _seed_fake_root(root, gpus)
            _keygen(d / "ssh_host_ed25519_key")
            shutil.copy(str(client_key) + ".pub", d / "authorized_keys")
            os.chmod(d / "authorized_keys", 0o600)
            port = _free_port()
            # every process of a login carries the pytest-xdist worker that started the host
            # (support/ray_env.ours: a worker counts only its own items' processes)
            config = _CONFIG.format(port=port, dir=d, root=root, fakebin=FAKEBIN,
                                    worker=os.environ.get("PYTEST_XDIST_WORKER") or "main",
                                    threads=os.environ.get("OMP_NUM_THREADS") or "1")  # tests/conftest.py says why
            extra = (host_env or [{}] * n)[i]
            if extra:
                config = config.rstrip("\n") + "".join(f" {k}={v}" for k, v in extra.items()) + "\n"
            (d / "sshd_config").write_text(config)
            start = d / "start-sshd.sh"
            start.write_text(_START.format(sshd=SSHD, dir=d))
            start.chmod(0o755)
            h = SshdHost("127.0.0.1", port, "root", client_key, (d / "ssh_host_ed25519_key.pub").read_text().strip(),
                         root, d, gpus)
            hosts.append(h)
            subprocess.run(["/usr/sbin/sshd", "-t", "-f", str(d / "sshd_config")], check=True)
            h.start()
    except BaseException:
        stop_hosts(hosts)
        raise
    return hosts


def _seed_fake_root(root: Path, gpus: int) -> None:
    """A fresh Ubuntu 24.04 machine with an NVIDIA card and nouveau loaded."""
    for sub in ("etc/modprobe.d", "etc/profile.d", "etc/apt/sources.list.d", "var/lib/dpkg/fake", "root",
                "proc/sys/kernel/random", "usr/local", "tmp"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "etc/os-release").write_text('ID=ubuntu\nVERSION_ID="24.04"\nVERSION_CODENAME=noble\n')
    (root / "proc/modules").write_text("nouveau 2785280 0 - Live 0x0000000000000000\n")
    (root / "proc/sys/kernel/random/boot_id").write_text(secrets.token_hex(16) + "\n")
    (root / "gpus").write_text(str(gpus) + "\n")
    # Debian's stock ~/.bashrc returns early for non-interactive shells.
    (root / "root/.bashrc").write_text(
        "# ~/.bashrc\ncase $- in\n    *i*) ;;\n      *) return;;\nesac\nalias ll='ls -l'\n"
    )


def stop_hosts(hosts: list[SshdHost]) -> None:
    """Kill every sshd these hosts run (including ones a reboot stand-in restarted) and remove their dirs."""
    groups = set()
    for h in hosts:
        # A reboot stand-in may still be about to start sshd again: let it finish first.
        end = time.monotonic() + 5
        while (h.dir / "rebooting").exists() and time.monotonic() < end:
            time.sleep(0.05)
        h.stop()
        groups.add(h.dir.parent)
    for g in groups:
        shutil.rmtree(g, ignore_errors=True)


def register_cluster(state, cluster: str, hosts: list[SshdHost], provider: str = "baremetal", size: str = "t4x1",
                     gpus: int = 1, pin: bool = True) -> list[str]:
    """Record `hosts` in a gpuplan State as a ready cluster of running nodes "<cluster>-<i>",
    with the client key as the cluster's SSH key and (unless `pin` is False) each host key
    pinned. Returns the node names."""
    state.add_cluster(cluster, provider, "local", size, len(hosts), ssh_user=hosts[0].user if hosts else "root")
    state.save_ssh_key(cluster, hosts[0].client_key_path, hosts[0].client_key_path.with_suffix(".pub").read_text().strip()
                       if hosts[0].client_key_path.with_suffix(".pub").exists() else "")
    names = []
    for i, h in enumerate(hosts):
        name = f"{cluster}-{i}"
        state.add_node(cluster, name, gpus=gpus)
        state.update_node(cluster, name, status="running", public_ip=h.host, private_ip=f"10.0.0.{i + 1}", ssh_port=h.port,
                          provider_id=h.name)
        if pin:
            state.pin_host_key(h.host, h.port, h.host_public_key, cluster=cluster, node=name)
        names.append(name)
    state.set_cluster_status(cluster, "ready")
    return names
