"""What `gpuplan run` costs per item on the Ray engine, and what a big batch costs the client.

    python benchmarks/run_bench.py                 # both parts
    python benchmarks/run_bench.py --items 500 --big 0

Part 1: 500 `true` items over 4 loopback sshd hosts x 4 GPU slots (16 slots; the hosts, their
Ray nodes and the client all share this machine). The overhead per item is the time a slot
spends between one item's end and the next one's start (driver, Ray call, process start and
bookkeeping), from the times the driver records; an item's own time is its process's
start-to-end on the node. The start of the batch (until every slot ran its first item) is
printed apart, and the all-in figure (wall x slots - own time) / items beside it. It runs twice:
the first batch starts a Ray worker per slot (its driver hands nothing out before they are up),
the next one finds them kept. (From 2026-11-24 to 11-29 the engine's start made them with a
warm-up job of its own, which the first batch's figure then left out; that job cost a launch
~5 s more than the slots themselves, and it went.) The target (issue 20) is at most 50 ms per
item once the slots run; the SSH fan-out this engine replaced measured 270-330 ms.

Beside the per-item figure: the client time per submission to a warm cluster, the median over
--submissions batches of one `true` item, each submitted by a `gpuplan run --detach` process
one after another (process start to exit: Python's start, the check that Ray is up on every
node, the spec's upload and the Jobs API call), and how long after the client's start the
driver began (its "begin" event: the Ray job started, the driver connected, the slots found).
Issue 30's target: under 2 s of client time (6-12 s on two owned hosts before).

Part 2: 10,000 `true` items on the same 16 slots, followed by a real `gpuplan run` client
process: its peak memory (ru_maxrss) and how many lines it printed.

Needs root (the sshd hosts log in as root), /usr/sbin/sshd and the tests' Ray venv
(scripts/test.sh builds it; tests/support/ray_env.py names it).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

CLUSTER = "bench"


def _cluster(state, hosts, gpus: int) -> None:
    state.add_cluster(CLUSTER, "baremetal", "loopback", "bench", len(hosts), ssh_user="root", price_jpy_per_hour=100)
    state.save_ssh_key(CLUSTER, hosts[0].client_key_path, "")
    for i, h in enumerate(hosts):
        state.add_node(CLUSTER, f"{CLUSTER}-{i}", gpus=gpus)
        state.update_node(CLUSTER, f"{CLUSTER}-{i}", status="running", public_ip=h.host, private_ip=h.host,
                          ssh_port=h.port, provider_id=f"bm-{i}")
        state.pin_host_key(h.host, h.port, h.host_public_key, cluster=CLUSTER, node=f"{CLUSTER}-{i}")
    state.set_cluster_status(CLUSTER, "ready")


def _client(items: Path, env: dict, detach: bool = False) -> tuple[str, float, int, int]:
    """Run `gpuplan run` as a user would; returns (job id, seconds, peak RSS in MiB, output lines)."""
    t0 = time.monotonic()
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    p = subprocess.Popen([sys.executable, "-c", "from gpuplan.cli import main; main()", "run", CLUSTER, "--items", str(items),
                          *(["--detach"] if detach else []), "--", "true", "{item}"], stdout=out, stderr=err, text=True,
                         env=env)
    _, status, usage = os.wait4(p.pid, 0)  # this child's own peak memory
    seconds = time.monotonic() - t0
    out.seek(0)
    err.seek(0)
    stdout, stderr = out.read(), err.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"gpuplan run failed ({os.waitstatus_to_exitcode(status)}): {stderr[-2000:]}")
    peak = usage.ru_maxrss
    job = next(line.split()[1] for line in stdout.splitlines() if line.startswith("job ") and " submitted" in line)
    lines = len(stdout.splitlines()) + len(stderr.splitlines())
    return job, seconds, peak // 1024, lines


def _submissions(state, items: Path, env: dict, n: int) -> tuple[float, float]:
    """n batches of `items`, one after another, each submitted by a `gpuplan run --detach`
    client and waited for (its driver's events on the head): the median seconds of a client
    (process start to exit), and the median seconds from a client's start until its driver began
    (the "begin" event)."""
    import statistics

    from gpuplan.run.ray import engine
    from gpuplan.store.state import parse_time

    head = engine.engine_of(state, CLUSTER).head.host
    clients, begun = [], []
    for _ in range(n):
        at = time.time()
        job, seconds, _, _ = _client(items, env, detach=True)
        clients.append(seconds)
        deadline, offset, events = time.monotonic() + 300, 0, []
        while not any(e.get("t") == "done" for e in events):
            if time.monotonic() > deadline:
                raise SystemExit(f"job {job} did not end within 300 s")
            time.sleep(0.2)
            p = engine.poll(head, job, offset)
            offset, events = p.offset, events + p.events
        done = next(e for e in events if e.get("t") == "done")
        if done.get("state") != "succeeded":
            raise SystemExit(f"job {job} ended {done.get('state')}")
        begun.append(parse_time(next(e["at"] for e in events if e.get("t") == "begin")).timestamp() - at)
    return statistics.median(clients), statistics.median(begun)


def _overhead(state, job: str, slots: int) -> dict:
    """All-in: (wall x slots - the items' own time) / items, wall from the driver's start to the
    last end. Per item: on each slot, the time between its first item's start and its last
    item's end that no item was running, summed over slots, per item; the batch's start-up
    (until every slot has started an item) is the one-time part."""
    row = state.job(job)
    items = state.job_items(job)
    begin = row.started_at
    by_slot: dict[str, list[tuple]] = {}
    for i in items:
        by_slot.setdefault(i.slot, []).append((i.started_at, i.ended_at))
    own = sum((e - s).total_seconds() for runs in by_slot.values() for s, e in runs)
    wall = (max(e for runs in by_slot.values() for _, e in runs) - begin).total_seconds()
    gaps = sum((max(e for _, e in runs) - min(s for s, _ in runs)).total_seconds() - sum((e - s).total_seconds() for s, e in runs)
               for runs in by_slot.values())
    startup = max((min(s for s, _ in runs) - begin).total_seconds() for runs in by_slot.values())
    return {"wall": wall, "own": own, "all_in_ms": (wall * slots - own) / len(items) * 1000,
            "per_item_ms": gaps / len(items) * 1000, "startup": startup, "slots_used": len(by_slot)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--gpus", type=int, default=4, help="GPU slots per host")
    ap.add_argument("--items", type=int, default=500)
    ap.add_argument("--big", type=int, default=10_000, help="items of part 2 (0: skip it)")
    ap.add_argument("--submissions", type=int, default=5, help="submissions to a warm cluster timed (0: skip them)")
    a = ap.parse_args()

    from support.ray_env import VENV, free_port_range, stop_ray
    from support.sshd import start_hosts, stop_hosts

    if not (VENV / "bin" / "ray").exists():
        raise SystemExit(f"no Ray venv at {VENV}: run scripts/test.sh first (it builds it)")
    tmp = Path(tempfile.mkdtemp(prefix="run-bench-"))
    port = free_port_range(a.hosts)
    env = dict(os.environ, GPUPLAN_HOME=str(tmp / "home"), GPUPLAN_RAY_VENV=str(VENV),
               GPUPLAN_RAY_PORT=str(port), GPUPLAN_RAY_OBJECT_STORE_MB="80")
    os.environ.update(env)
    import pytest  # start_hosts skips through pytest when sshd is missing

    from gpuplan import paths
    from gpuplan.run.ray import engine
    from gpuplan.store.state import State

    try:
        hosts = start_hosts(a.hosts, tmp)
    except pytest.skip.Exception as exc:
        raise SystemExit(str(exc)) from None
    try:
        state = State(paths.state_db())
        _cluster(state, hosts, a.gpus)
        slots = a.hosts * a.gpus
        t0 = time.monotonic()
        engine.ensure_up(state, CLUSTER)
        up = time.monotonic()
        print(f"Ray {engine.RAY_VERSION} up on {a.hosts} loopback hosts in {up - t0:.1f} s ({slots} slots; one machine:"
              f" {os.cpu_count()} CPUs)")
        items = tmp / "items.txt"
        items.write_text("".join(f"item-{i}\n" for i in range(a.items)))
        for which in ("first batch on the cluster (it starts its slots' workers)", "next batch (the slots are kept)"):
            job, seconds, rss, lines = _client(items, env)
            o = _overhead(state, job, slots)
            print(f"part 1, {which}: {a.items} `true` items over {a.hosts} hosts x {a.gpus} slots ({o['slots_used']} used):"
                  f" batch wall {o['wall']:.2f} s, the items' own time {o['own']:.2f} s; client {seconds:.1f} s"
                  f" (Ray check and submit included)")
            print(f"        overhead per item on a slot {o['per_item_ms']:.1f} ms; {o['startup']:.1f} s until every slot ran its"
                  f" first item; all-in {o['all_in_ms']:.1f} ms per item per slot (target 50 ms; the SSH fan-out:"
                  f" 270-330 ms); client: peak RSS {rss} MiB, {lines} output lines")
        if a.submissions:
            one = tmp / "one.txt"
            one.write_text("item-0\n")
            client_s, begun_s = _submissions(state, one, env, a.submissions)
            print(f"        client time per submission to a warm cluster {client_s:.2f} s (median of {a.submissions}"
                  f" `run --detach` of one item; target under 2 s); its driver began {begun_s:.2f} s after the client"
                  " started")
        if a.big:
            items.write_text("".join(f"item-{i}\n" for i in range(a.big)))
            job, seconds, rss, lines = _client(items, env)
            o = _overhead(state, job, slots)
            print(f"part 2: {a.big:,} `true` items on {slots} slots: batch wall {o['wall']:.1f} s (client {seconds:.1f} s);"
                  f" overhead per item on a slot {o['per_item_ms']:.1f} ms; client peak RSS {rss} MiB,"
                  f" {lines} output lines")
        state.close()
    finally:
        stop_ray(f"{CLUSTER}-", port, a.hosts)
        stop_hosts(hosts)


if __name__ == "__main__":
    main()
