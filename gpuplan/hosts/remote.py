"""Run commands on many hosts over SSH (paramiko), with host keys pinned before first contact.

    host = Host("demo-0", "203.0.113.5", 22, "ubuntu", Path("~/.../keys/demo"), host_key="ssh-ed25519 AAAA...")
    result = run(host, "nvidia-smi -L", timeout=60)            # Result(exit_code, stdout, stderr, seconds)
    with connect(host) as conn:                                  # one connection, several commands
        conn.run("apt-get update", sudo=True)
        conn.put_text("#!/bin/sh\n...", "/tmp/x.sh", mode=0o755)
    outcomes = run_many(hosts, lambda h: run(h, "uptime"))      # same order as hosts; value or exception

Every connection checks the server's key against `Host.host_key` (paramiko's RejectPolicy; a
host with no pinned key is refused), so a changed key raises RemoteError before any command
runs. `offered_host_key()` reads the key a host offers without logging in, for a first-contact
confirmation. Transient connect failures (refused, reset, banner timeouts) are retried a few
times with backoff; authentication and host-key failures are not. A one-time host key gpuplan
injected at creation is rotated at the first login (`rotate_injected_host_keys`, called by
`cluster_hosts`).

paramiko is imported inside the functions so importing this module stays cheap.
"""

from __future__ import annotations

import base64
import hashlib
import re
import shlex
import socket
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gpuplan.errors import NotFound, RemoteError, UsageError

if TYPE_CHECKING:
    from gpuplan.store.state import State

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
T = TypeVar("T")


class HostKeyChanged(RemoteError):
    """The host offered a key other than the pinned one; nothing was run."""


class LoginRefused(RemoteError):
    """The host refused our user/key."""


@dataclass(frozen=True)
class Host:
    """One machine to log in to. `host_key` is the pinned OpenSSH public key line."""

    name: str
    address: str
    port: int = 22
    user: str = "ubuntu"
    key_path: Path | str | None = None
    host_key: str | None = None
    cluster: str = ""  # only for messages (how to re-pin)

    @property
    def where(self) -> str:
        return f"{self.address}:{self.port}"


@dataclass(frozen=True)
class Result:
    exit_code: int  # -1: the connection closed without an exit status (e.g. a reboot); 124: timed out
    stdout: str
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def tail(self, lines: int = 10) -> str:
        """The last lines of stdout and stderr together."""
        text = (self.stdout.rstrip() + "\n" + self.stderr.rstrip()).strip()
        return "\n".join(text.splitlines()[-lines:])

    def why(self) -> str:
        """Why it failed, in one line: the last line of its output that names an error (a
        traceback's last line, "E: Unable to locate package", "Failed to ..."), else its last
        line. The rest is the caller's to keep for --debug."""
        lines = [ln.strip() for ln in self.tail(40).splitlines() if ln.strip().strip(".")]
        errors = [ln for ln in lines if re.search(r"rror|ailed|[Ff]atal|cannot|denied|not found|^E: ", ln)]
        return (errors or lines or ["no output"])[-1][:400]


def fingerprint(key_line: str) -> str:
    """OpenSSH's SHA256 fingerprint ("SHA256:...") of a public key line "ssh-ed25519 AAAA... [comment]"."""
    parts = key_line.split()
    if len(parts) < 2:
        raise RemoteError(f"not an OpenSSH public key line: {key_line[:40]!r}")
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except ValueError:
        raise RemoteError(f"not an OpenSSH public key line: {key_line[:40]!r}") from None
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def known_hosts_entry(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def _pkey(key_line: str):
    import paramiko

    parts = key_line.split()
    try:
        return paramiko.PKey.from_type_string(parts[0], base64.b64decode(parts[1]))
    except Exception as exc:
        raise RemoteError(f"cannot read pinned host key {key_line[:40]!r}: {exc}") from exc


def _line(pkey) -> str:
    return f"{pkey.get_name()} {pkey.get_base64()}"


_TRANSIENT = (socket.timeout, ConnectionError, EOFError, TimeoutError)


def _is_transient(exc: BaseException) -> bool:
    import paramiko

    if isinstance(exc, (paramiko.BadHostKeyException, paramiko.AuthenticationException)):
        return False
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        return True
    if isinstance(exc, paramiko.SSHException):  # banner/negotiation errors while a host boots
        return True
    return isinstance(exc, (OSError, *_TRANSIENT))


DRAIN_S = 2.0  # after a command exits, how long output may still trickle in with no end of file


class Connection:
    """One logged-in SSH connection. Use as a context manager; `connect()` makes one."""

    def __init__(self, host: Host, client) -> None:
        self.host = host
        self._client = client

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def run(self, cmd: str, timeout: float = 600, sudo: bool = False, stdin: str | None = None) -> Result:
        """Run `cmd` with the login shell. With `sudo`, via `sudo -n` unless the user is root.
        `stdin` text is written to the command's standard input (then EOF)."""
        if sudo and self.host.user != "root":
            cmd = "sudo -n bash -c " + shlex.quote(cmd)
        start = time.monotonic()
        try:
            chan = self._client.get_transport().open_session()
            chan.settimeout(max(1.0, timeout))
            chan.exec_command(cmd)
        except Exception as exc:
            raise RemoteError(f"{self.host.name} ({self.host.where}): could not start a command: {exc}") from exc
        try:
            if stdin is not None:
                chan.sendall(stdin.encode())
            chan.shutdown_write()
        except OSError:
            # the command started and ended (or closed its input) before reading all of it: its
            # exit status, read below, says how it went
            pass
        out, err = bytearray(), bytearray()
        deadline = start + timeout
        timed_out = False
        quiet_since = None  # since when the command has exited and nothing more came
        while True:
            got = False
            if chan.recv_ready():
                out += chan.recv(65536)
                got = True
            if chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
                got = True
            drained = not chan.recv_ready() and not chan.recv_stderr_ready()
            if chan.exit_status_ready() and drained:
                # sshd may send the exit status before the last of the output (a busy host): read
                # on until its end of file, or until a background process that keeps the output
                # open has let DRAIN_S pass without a byte
                now = time.monotonic()
                quiet_since = now if got or quiet_since is None else quiet_since
                if chan.eof_received or now - quiet_since > DRAIN_S:
                    break
            if chan.closed and not got:
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
            if not got:
                time.sleep(0.005)
        if timed_out:
            chan.close()
            code = 124
            err += f"\n[gpuplan: timed out after {timeout:g} s]".encode()
        elif chan.exit_status_ready():
            code = chan.recv_exit_status()
        else:
            code = -1
        chan.close()
        return Result(code, out.decode(errors="replace"), err.decode(errors="replace"), time.monotonic() - start)

    def open_tunnel(self, address: str, port: int):
        """A channel to address:port as seen from the host (SSH port forwarding; `gpuplan dashboard`)."""
        return self._client.get_transport().open_channel("direct-tcpip", (address, port), ("127.0.0.1", 0))

    def put(self, local: Path | str, remote: str, mode: int | None = None) -> None:
        with self._client.open_sftp() as sftp:
            sftp.put(str(local), remote)
            if mode is not None:
                sftp.chmod(remote, mode)

    def get(self, remote: str, local: Path | str) -> None:
        with self._client.open_sftp() as sftp:
            sftp.get(remote, str(local))


def connect(host: Host, timeout: float = 15, attempts: int = 4, backoff: float = 0.5) -> Connection:
    """Log in to `host`, checking its pinned key. Retries transient failures `attempts` times."""
    import paramiko

    if not host.host_key:
        raise RemoteError(
            f"{host.name} ({host.where}) has no pinned host key; pin it first "
            f"(`gpuplan bootstrap {host.cluster or 'CLUSTER'} --accept-host-key SHA256:...` after checking the fingerprint)"
        )
    pinned = _pkey(host.host_key)
    last: BaseException | None = None
    for attempt in range(attempts):
        client = paramiko.SSHClient()
        client.get_host_keys().add(known_hosts_entry(host.address, host.port), pinned.get_name(), pinned)
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            client.connect(
                host.address, port=host.port, username=host.user,
                key_filename=str(Path(host.key_path).expanduser()) if host.key_path else None,
                timeout=timeout, banner_timeout=timeout, auth_timeout=timeout,
                allow_agent=False, look_for_keys=False,
            )
            return Connection(host, client)
        except paramiko.BadHostKeyException as exc:
            client.close()
            offered = fingerprint(_line(exc.key))
            raise HostKeyChanged(
                f"host key for {host.where} changed (pinned {fingerprint(host.host_key)}, offered {offered}): "
                f"if the machine was rebuilt, run `gpuplan bootstrap {host.cluster or 'CLUSTER'} "
                f"--accept-host-key {offered}` to re-pin"
            ) from None
        except paramiko.AuthenticationException as exc:
            client.close()
            if "saw EOF" in str(exc) and attempt + 1 < attempts:
                # The server went away mid-login (a host shutting down for a reboot): not a refusal.
                last = exc
                time.sleep(backoff * (2**attempt))
                continue
            raise LoginRefused(
                f"{host.name} ({host.where}): login as {host.user} with key {host.key_path} was refused ({exc}); "
                "check the user and that the key is in its authorized_keys"
            ) from None
        except Exception as exc:
            client.close()
            if not _is_transient(exc):
                raise
            last = exc
            if attempt + 1 < attempts:
                time.sleep(backoff * (2**attempt))
    from gpuplan.errors import unreachable

    why = (unreachable(last) if last is not None else None) or str(last)
    raise RemoteError(f"{host.name} ({host.where}): cannot connect after {attempts} tries: {why}") from last


def run(host: Host, cmd: str, timeout: float = 600, sudo: bool = False, stdin: str | None = None) -> Result:
    """Connect, run one command, disconnect."""
    with connect(host) as conn:
        return conn.run(cmd, timeout=timeout, sudo=sudo, stdin=stdin)


def put(host: Host, local: Path | str, remote: str, mode: int | None = None) -> None:
    with connect(host) as conn:
        conn.put(local, remote, mode)


def get(host: Host, remote: str, local: Path | str) -> None:
    with connect(host) as conn:
        conn.get(remote, local)


def run_many(hosts: Sequence[Host], fn: Callable[[Host], T], max_workers: int = 32) -> list[T | BaseException]:
    """Call fn(host) for every host on a bounded thread pool. Returns, in host order, each
    call's value or the exception it raised (so one bad host does not hide the others)."""
    if not hosts:
        return []

    def guarded(h: Host) -> Any:
        try:
            return fn(h)
        except Exception as exc:  # returned to the caller, who reports it per host
            return exc

    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(hosts))), thread_name_prefix="gpuplan-ssh") as pool:
        return list(pool.map(guarded, hosts))


def offered_host_key(address: str, port: int = 22, timeout: float = 15) -> str:
    """The host key line ("ssh-ed25519 AAAA...") the server at address:port offers, without
    logging in. Only for showing its fingerprint to a person who confirms it before pinning."""
    import paramiko

    try:
        sock = socket.create_connection((address, port), timeout=timeout)
    except OSError as exc:
        raise RemoteError(f"cannot reach {address}:{port} to read its host key: {exc}") from None
    transport = paramiko.Transport(sock)
    try:
        transport.start_client(timeout=timeout)
        return _line(transport.get_remote_server_key())
    except paramiko.SSHException as exc:
        raise RemoteError(f"{address}:{port} did not complete an SSH handshake: {exc}") from None
    finally:
        transport.close()


def boot_id(conn: Connection, path: str = BOOT_ID_PATH) -> str:
    r = conn.run(f'cat "{path}"', timeout=30)  # double quotes: a $VAR in path expands on the host
    if not r.ok or not r.stdout.strip():
        raise RemoteError(f"{conn.host.name}: cannot read the boot id from {path}: {r.why()}")
    return r.stdout.strip()


def wait_for_reboot(host: Host, old_boot_id: str, timeout_s: float = 900, boot_id_path: str = BOOT_ID_PATH) -> float:
    """Block until `host` answers with a boot id other than `old_boot_id`; return the seconds
    waited. Backs off from 0.2 s up to 5 s between tries; a changed host key fails at once."""
    start = time.monotonic()
    delay = 0.2
    last: str = "no answer yet"
    while time.monotonic() - start < timeout_s:
        try:
            with connect(host, timeout=10, attempts=1) as conn:
                current = boot_id(conn, boot_id_path)
            if current != old_boot_id:
                return time.monotonic() - start
            last = "still the old boot id"
        except HostKeyChanged:
            raise
        except LoginRefused as exc:
            if "saw EOF" not in str(exc):
                raise
            last = str(exc)
        except RemoteError as exc:
            last = str(exc)
        time.sleep(delay)
        delay = min(delay * 2, 5.0)
    raise RemoteError(f"{host.name} ({host.where}) did not come back from a reboot within {timeout_s:g} s ({last})")


# --- rotating an injected host key ---------------------------------------------------------
#
# A provider that cannot show us the node's own key injects a one-time key gpuplan generated,
# so the first connection is already pinned. The cloud may keep a copy of it (user data), so at
# the first login the node makes a new key, its public half comes back over the connection
# pinned to the injected one, sshd is reloaded to serve only the new key, and the new key is
# pinned. Two steps, with the new key recorded as pending in between, so a gpuplan killed half
# way still recognises the node's new key next time.

HOST_KEY_FILE = "/etc/ssh/ssh_host_ed25519_key"
SSHD_RELOAD = "systemctl try-reload-or-restart ssh.service || systemctl try-reload-or-restart sshd.service"


def _make_new_host_key() -> str:
    return (f'k={HOST_KEY_FILE}; rm -f "$k.gpuplan-new" "$k.gpuplan-new.pub" && '
            'ssh-keygen -q -t ed25519 -N "" -C "" -f "$k.gpuplan-new" </dev/null >/dev/null && cat "$k.gpuplan-new.pub"')


def _install_new_host_key() -> str:
    return (f'k={HOST_KEY_FILE}; chmod 600 "$k.gpuplan-new" && mv -f "$k.gpuplan-new" "$k" && '
            f'mv -f "$k.gpuplan-new.pub" "$k.pub" && ({SSHD_RELOAD})')


def rotate_injected_host_keys(state: State, hosts: Sequence[Host]) -> list[Host]:
    """Rotate the injected host key of every host whose pin is one (state origin "injected"),
    under the cluster's lock; return the hosts with their current pins. A host that cannot be
    rotated now (unreachable, a refused key) keeps its pin and is tried again at the next
    login; connecting to it reports the problem as usual."""
    todo = [h for h in hosts if (pin := state.host_pin(h.address, h.port)) and pin.origin == "injected"]
    if not todo:
        return list(hosts)
    from gpuplan.fleet import locks

    with locks.cluster(todo[0].cluster) if todo[0].cluster else nullcontext():
        outcomes = dict(zip([h.name for h in todo], run_many(todo, lambda h: _rotate(state, h))))
    return [o if isinstance(o := outcomes.get(h.name, h), Host) else h for h in hosts]


def _rotate(state: State, host: Host) -> Host:
    pin = state.host_pin(host.address, host.port)
    if pin is None or pin.origin != "injected":
        return replace(host, host_key=pin.key) if pin else host
    if pin.pending_key:  # a rotation cut off after the node may have switched to its new key
        try:
            with connect(replace(host, host_key=pin.pending_key), attempts=1) as conn:
                conn.run("true", timeout=30)
            state.pin_host_key(host.address, host.port, pin.pending_key, host.cluster or None, host.name)
            return replace(host, host_key=pin.pending_key)
        except HostKeyChanged:
            pass  # still on the injected key: rotate from the start
    with connect(replace(host, host_key=pin.key)) as conn:
        made = conn.run(_make_new_host_key(), timeout=60, sudo=True)
        new_key = made.stdout.strip().splitlines()[-1] if made.ok and made.stdout.strip() else ""
        if not new_key.startswith("ssh-ed25519 "):
            raise RemoteError(f"{host.name}: could not make a new host key: {made.why()}")
        fingerprint(new_key)
        state.set_pending_host_key(host.address, host.port, new_key)
        installed = conn.run(_install_new_host_key(), timeout=60, sudo=True)
        if not installed.ok:
            raise RemoteError(f"{host.name}: could not install the new host key: {installed.why()}")
    rotated = replace(host, host_key=new_key)
    with connect(rotated) as conn:  # the node now answers with the new key, and only that one
        conn.run("true", timeout=30)
    state.pin_host_key(host.address, host.port, new_key, host.cluster or None, host.name)
    return rotated


def hosts_to_stop(state: State, cluster: str) -> list[Host]:
    """Before a teardown: every node that may still run something of the cluster, whatever the
    cluster's status (a teardown cut off half way left it "tearing-down"), lost nodes included (a
    lost owned host may be back). A node with no address or no pinned key is left out: nothing of
    gpuplan's was started on it without them. No login happens here."""
    key = state.ssh_key(cluster)
    row = state.cluster(cluster)
    if key is None or row is None:
        return []
    hosts = []
    for n in state.nodes(cluster):
        address = n.public_ip or n.private_ip
        pinned = state.host_key(address, n.ssh_port) if address else None
        if n.status not in ("intent", "deleted", "failed") and address and pinned:
            hosts.append(Host(n.name, address, n.ssh_port, row.ssh_user, key[0], pinned, cluster))
    return hosts


def cluster_hosts(state: State, cluster: str, accept_host_keys: Sequence[str] = ()) -> list[Host]:
    """The cluster's nodes as Hosts, with pinned keys. A node with no pin (bare metal without
    host_key in the inventory) or a changed key is pinned only when the key it offers has a
    fingerprint listed in `accept_host_keys`; otherwise a UsageError names the fingerprint.
    Injected one-time host keys are rotated here, at the first login."""
    row = state.cluster(cluster)
    if row is None:
        raise NotFound(f"no cluster named {cluster!r}; `gpuplan status` lists them")
    if row.status in ("gone", "tearing-down"):  # its machines (and what was on them) are gone or going
        raise UsageError(f"cluster {cluster!r} was torn down: its nodes, and anything left on them, are gone"
                         " (`run --down` fetches the outputs before it tears down)")
    key = state.ssh_key(cluster)
    if key is None:
        raise UsageError(f"cluster {cluster!r} has no SSH key in the state; was it provisioned by gpuplan?")
    nodes = [n for n in state.nodes(cluster) if n.status not in ("intent", "deleted", "deleting", "failed", "lost")]
    if not nodes:
        raise UsageError(f"cluster {cluster!r} has no live nodes; `gpuplan status {cluster}` shows them")
    accepted = set(accept_host_keys)
    hosts = []
    for n in nodes:
        address = n.public_ip or n.private_ip
        if not address:
            raise UsageError(f"node {n.name} has no address yet; wait for `gpuplan provision` to finish")
        pinned = state.host_key(address, n.ssh_port)
        if accepted:
            offered = offered_host_key(address, n.ssh_port)
            fp = fingerprint(offered)
            if fp in accepted and offered.split()[:2] != (pinned or "").split()[:2]:
                state.pin_host_key(address, n.ssh_port, offered, cluster=cluster, node=n.name)
                pinned = offered
        if not pinned:
            offered = offered_host_key(address, n.ssh_port)
            raise UsageError(
                f"{n.name} ({address}:{n.ssh_port}) has no pinned host key; it offers {fingerprint(offered)}: "
                f"check that fingerprint on the machine's console and rerun with --accept-host-key {fingerprint(offered)}"
            )
        hosts.append(Host(n.name, address, n.ssh_port, row.ssh_user, key[0], pinned, cluster))
    return rotate_injected_host_keys(state, hosts)
