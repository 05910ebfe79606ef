#!/usr/bin/env python3
"""A local demo of the cluster commands, with no GPU and no cloud account.

    sudo .venv/bin/python scripts/demo.py            # from a checkout, after the Quickstart
    sudo .venv/bin/python scripts/demo.py --home /tmp/gpuplan-demo

Starts two "machines": real OpenSSH sshd servers on 127.0.0.1, each with stand-in GPU tools
(tests/support/fakebin: nvidia-smi reports a Tesla T4, apt-get records what it would install
under the host's own fake root). Writes their inventory (two owned T4 hosts) under a fresh
GPUPLAN_HOME, prints the commands to try in another terminal, and keeps the hosts up until
Ctrl-C (or SIGTERM), when it stops them and removes their files.

Needs root (the hosts log in as root) and openssh-server (`apt-get install openssh-server`).
Nothing outside the demo's home and the hosts' folders under /run/gpuplan-test-sshd is touched:
bootstrap takes `--param 'root=$GPUPLAN_FAKE_ROOT'`, so the playbooks' files land in each host's
fake root, never in this machine's /etc.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support.sshd import missing_prerequisite, start_hosts, stop_hosts  # noqa: E402


def write_inventory(path: Path, hosts) -> None:
    """The inventory format of docs/inventory.md, for the loopback hosts."""
    import yaml

    # the private address is the host's own loopback one: `gpuplan run` starts Ray bound to it, and
    # these hosts share this machine (each Ray node gets its own ports from GPUPLAN_RAY_PORT up)
    entries = [{"name": h.name, "address": h.host, "port": h.port, "private_address": h.host,
                "gpus": {"model": "Tesla T4", "count": 1}, "group": "t4", "host_key": h.host_public_key}
               for h in hosts]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"defaults": {"user": "root", "key": str(hosts[0].client_key_path)},
                                    "hosts": entries}, sort_keys=False))


COMMANDS = """\
export GPUPLAN_HOME={home}
cd {home}
gpuplan provision baremetal:t4 x2 --name demo --no-bootstrap --yes
gpuplan status
gpuplan bootstrap demo --param 'root=$GPUPLAN_FAKE_ROOT'
gpuplan ssh demo -- nvidia-smi
gpuplan run demo --items videos.txt -- echo {{item}}
gpuplan teardown demo --yes"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, help="GPUPLAN_HOME for the demo (default: a new temporary folder)")
    args = parser.parse_args(argv)
    missing = missing_prerequisite()
    if missing:
        print(f"demo: cannot start the loopback hosts: {missing}", file=sys.stderr)
        return 2
    home = (args.home or Path(tempfile.mkdtemp(prefix="gpuplan-demo-"))).resolve()
    home.mkdir(parents=True, exist_ok=True)
    (home / "videos.txt").write_text("clip-a.mp4\nclip-b.mp4\nclip-c.mp4\n")
    hosts = start_hosts(2)
    try:
        write_inventory(home / "config" / "inventory.yaml", hosts)
        print(f"demo: 2 loopback hosts up ({', '.join(f'{h.host}:{h.port}' for h in hosts)}), "
              f"inventory in {home / 'config' / 'inventory.yaml'}")
        print("demo: in another terminal, try:")
        print(COMMANDS.format(home=home))
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
