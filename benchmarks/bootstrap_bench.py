"""Bootstrap concurrency: the default playbooks on 8 loopback sshd hosts at once vs on 1 host.

Each host is a real OpenSSH sshd with its own fake root (tests/support/sshd.py); the stand-in
commands are instant but the two reboots per host take about 1.3 s each, like a short real
reboot wait. The claim checked here: 8 hosts in parallel take < 2x one host.

    sudo .venv/bin/python benchmarks/bootstrap_bench.py [--hosts 8] [--repeat 3]

Prints the median wall time for 1 host and for N hosts and their ratio; exits 1 if the ratio
is 2 or more.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from gpuplan.hosts import playbook, remote  # noqa: E402
from support.sshd import start_hosts, stop_hosts  # noqa: E402


def one_run(n: int) -> float:
    hosts = start_hosts(n)
    try:
        targets = [remote.Host(f"n{i}", h.host, h.port, h.user, h.client_key_path, h.host_public_key)
                   for i, h in enumerate(hosts)]
        books = [playbook.load(name) for name in playbook.DEFAULT_PLAYBOOKS]
        t = time.monotonic()
        report = playbook.run_playbooks(targets, books, {"root": "$GPUPLAN_FAKE_ROOT"})
        seconds = time.monotonic() - t
        if not report.ok:
            raise SystemExit(f"bootstrap failed: {report.first_error()}")
        return seconds
    finally:
        stop_hosts(hosts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    single = statistics.median(one_run(1) for _ in range(args.repeat))
    many = statistics.median(one_run(args.hosts) for _ in range(args.repeat))
    ratio = many / single
    print(f"default playbooks ({', '.join(playbook.DEFAULT_PLAYBOOKS)}), median of {args.repeat} runs")
    print(f"1 host:  {single:6.2f} s")
    print(f"{args.hosts} hosts: {many:6.2f} s")
    print(f"ratio:   {ratio:6.2f} (claim: < 2)")
    sys.exit(0 if ratio < 2 else 1)


if __name__ == "__main__":
    main()
