#!/usr/bin/env python3
"""A local demo of the cluster commands, with no GPU and no cloud account.

    .venv/bin/python scripts/demo.py                 # from a checkout, after the Quickstart
    .venv/bin/python scripts/demo.py --home /tmp/gpuplan-demo

Starts two "machines": real OpenSSH sshd servers on 127.0.0.1, each with stand-in GPU tools
(tests/support/fakebin: nvidia-smi reports a Tesla T4, apt-get records what it would install
under the host's own fake root). Writes their inventory (two owned T4 hosts) under a fresh
GPUPLAN_HOME, prints the commands to try in another terminal, and keeps the hosts up until
Ctrl-C (or SIGTERM), when it stops them and removes their files.

Needs root (the hosts log in as root) and openssh-server (`apt-get install openssh-server`). Run
as another user, it starts itself again through sudo, then gives the demo's home and login key
to that user, so the printed commands run in that user's own terminal without sudo.
Nothing outside the demo's home and the hosts' folders under /run/gpuplan-test-sshd is touched:
bootstrap takes `--param 'root=$GPUPLAN_FAKE_ROOT'`, so the playbooks' files land in each host's
fake root, never in this machine's /etc. `gpuplan run` installs Ray (about 380 MB, from the
package index) into each host's fake root the first time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support.sshd import SSHD, missing_prerequisite, start_hosts, stop_hosts  # noqa: E402


def write_inventory(path: Path, hosts, key: Path) -> None:
    """The inventory format of docs/inventory.md, for the loopback hosts."""
    import yaml

    # the private address is the host's own loopback one: `gpuplan run` starts Ray bound to it, and
    # these hosts share this machine (each Ray node gets its own ports from GPUPLAN_RAY_PORT up)
    entries = [{"name": h.name, "address": h.host, "port": h.port, "private_address": h.host,
                "gpus": {"model": "Tesla T4", "count": 1}, "group": "t4", "host_key": h.host_public_key}
               for h in hosts]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"defaults": {"user": "root", "key": str(key)},
                                    "hosts": entries}, sort_keys=False))


COMMANDS = """\
{activate}export GPUPLAN_HOME={home}
cd {home}
gpuplan provision baremetal:t4 x2 --name demo --no-bootstrap --yes
gpuplan status
gpuplan bootstrap demo --param 'root=$GPUPLAN_FAKE_ROOT'
gpuplan ssh demo -- nvidia-smi
gpuplan run demo --items videos.txt -- echo {{item}}
gpuplan teardown demo --yes"""


def _again_with_sudo(argv: list[str]) -> None:
    """Not root: start this script again through sudo (it asks for the password itself), with
    the same Python, so the venv's packages come along. Returns only when sudo is missing."""
    if os.geteuid() != 0 and shutil.which("sudo"):
        print("demo: the loopback hosts need root: starting again with sudo", file=sys.stderr, flush=True)
        os.execvp("sudo", ["sudo", sys.executable, str(Path(__file__).resolve()), *argv])


def _activate_line() -> str:
    """The printed commands call `gpuplan`: the Quickstart's venv is not on PATH, so say to
    activate it (the venv this script runs in) first."""
    if sys.prefix == sys.base_prefix:  # not in a venv: gpuplan was installed where PATH finds it
        return ""
    return f"source {Path(sys.prefix) / 'bin' / 'activate'}\n"


def _give_to_sudo_user(home: Path) -> None:
    """Started through sudo: the user who asked runs the printed commands as themselves, so the
    demo's home (state, the login key) is theirs, not root's."""
    uid, gid = os.environ.get("SUDO_UID"), os.environ.get("SUDO_GID")
    if os.geteuid() != 0 or not uid or not gid:
        return
    for folder, _, files in os.walk(home):
        for path in [folder, *(os.path.join(folder, f) for f in files)]:
            os.chown(path, int(uid), int(gid))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, help="GPUPLAN_HOME for the demo (default: a new temporary folder)")
    args = parser.parse_args(argv)
    if os.path.exists(SSHD) and shutil.which("ssh-keygen"):
        _again_with_sudo(argv)
    missing = missing_prerequisite()
    if missing:
        print(f"demo: cannot start the loopback hosts: {missing}", file=sys.stderr)
        return 2
    home = (args.home or Path(tempfile.mkdtemp(prefix="gpuplan-demo-"))).resolve()
    home.mkdir(parents=True, exist_ok=True)
    (home / "videos.txt").write_text("clip-a.mp4\nclip-b.mp4\nclip-c.mp4\n")
    hosts = start_hosts(2)
    try:
        # the hosts' login key, copied into the demo's home so that whoever runs the commands can read it
        key = home / "demo-key"
        shutil.copyfile(hosts[0].client_key_path, key)
        key.chmod(0o600)
        write_inventory(home / "config" / "inventory.yaml", hosts, key)
        _give_to_sudo_user(home)
        print(f"demo: 2 loopback hosts up ({', '.join(f'{h.host}:{h.port}' for h in hosts)}), "
              f"inventory in {home / 'config' / 'inventory.yaml'}")
        print("demo: in another terminal, try:")
        print(COMMANDS.format(home=home, activate=_activate_line()))
        print("demo: `gpuplan run` installs Ray (about 380 MB, from the package index) on each host the first time")
        print("demo: ready; Ctrl-C stops the hosts", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
    finally:
        stop_hosts(hosts)
        print("demo: hosts stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
