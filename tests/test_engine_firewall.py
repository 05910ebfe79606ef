"""The engine's iptables chains on a node (engine.firewall_script / unfirewall_script), as text:
tests/test_run_closed.py runs them for real in a network namespace."""

from __future__ import annotations

import re

from gpuplan.hosts import remote
from gpuplan.run.ray.engine import Engine, Layout, Node, firewall_script, unfirewall_script


def _engine(cluster: str, port: int) -> Engine:
    host = remote.Host("n0", "127.0.0.1", 22, "root", "/dev/null")
    return Engine(cluster, (Node(f"{cluster}-0", host, "127.0.0.1", 1, 0),), Layout("/opt/ray", port), host_firewall=True)


def _chains(script: str) -> set[str]:
    return set(re.findall(r"-N (GPUPLAN-RAYO?-\S+)", script))


def test_two_clusters_of_one_name_on_one_machine_get_chains_of_their_own():
    """Two homes (two users, or two tests at once) may each run a cluster named "batch" on one
    machine: with chains named by the cluster alone, the second's rules replaced the first's, and
    the first's teardown removed the second's."""
    a, b = _engine("batch", 21000), _engine("batch", 26000)
    assert len(_chains(firewall_script(a, a.head))) == 2 and _chains(firewall_script(a, a.head)).isdisjoint(
        _chains(firewall_script(b, b.head)))
    assert _chains(firewall_script(a, a.head)) == _chains(firewall_script(_engine("batch", 21000), a.head))  # stable


def test_a_teardown_removes_its_own_chains_and_a_legacy_one_only_when_nothing_else_jumps_to_it():
    a = _engine("batch", 21000)
    script = unfirewall_script(a, a.head)
    for chain in _chains(firewall_script(a, a.head)):
        assert f"-F {chain} 2>/dev/null; iptables -w -X {chain}" in script or f"-F {chain} 2>/dev/null; ip6tables" in script
    legacy = re.findall(r"grep -q -- '-j (GPUPLAN-RAY-\w+-0)\$' \|\| \{ iptables -w -F \1", script)
    assert len(legacy) == 1 and legacy[0] not in _chains(firewall_script(a, a.head))
    assert "--dport 21000:21099 -j " + legacy[0] in script  # this range's hook to it goes first
