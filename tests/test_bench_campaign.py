"""`gpuplan bench WORKLOAD --on OFFER[,OFFER]` on two owned offers backed by loopback sshd hosts
(issue 19): each offer's host is claimed, benched and released; one profile per offer is saved
where the estimate reads it; the next estimate says "measured" for both and its pick follows
the measured speeds. The inventory's hosts are owned offers of the estimate, several at once."""

from __future__ import annotations

import json

import pytest
import yaml

from gpuplan import paths
from gpuplan.store.state import State
from support.sshd import start_hosts, stop_hosts

pytestmark = pytest.mark.sshd

# The hosts' GPUs as their drivers name them, and the inventory's kinds (groups) for them. On the
# generic cnn-train table an A10G is about 2.6x a T4: unmeasured, the estimate picks "beta".
KINDS = {"alpha": "Tesla T4", "beta": "NVIDIA A10G"}
# What the bench stand-in reports, in seconds per epoch (colorize-hd: 7.2 s on a K80): the T4 host
# measures 6x faster than the A10G one, against the table.
SPU = {"alpha": "0.6", "beta": "3.6"}

STAND_IN = """#!/bin/bash
# Stands in for `python3 -m gpuplan.jobs.<job> ...` on a loopback host: one JSON record at the
# speed this host's fake root says (no file: the job fails, as a broken CUDA install would).
spu=$(cat "$GPUPLAN_FAKE_ROOT/bench_spu" 2>/dev/null) || { echo "RuntimeError: CUDA error: no kernel image" >&2; exit 1; }
echo "start $(date +%s.%N)" >> "$GPUPLAN_FAKE_ROOT/bench_runs"; sleep 0.3; echo "end $(date +%s.%N)" >> "$GPUPLAN_FAKE_ROOT/bench_runs"
echo '{"status": "ok", "seconds_per_epoch": '"$spu"', "seconds": 0.5, "throughput": 1.0, "torch": "stand-in"}'
"""


@pytest.fixture
def owned(gpuplan_home, tmp_path):
    """Two loopback hosts as the inventory's two kinds, their driver loaded, a stand-in python."""
    hosts = start_hosts(2, tmp_path)
    entries = []
    for h, (kind, gpu) in zip(hosts, KINDS.items()):
        (h.fake_root / "proc/modules").write_text("nvidia 1 0 - Live 0x0\n")
        (h.fake_root / "gpu_name").write_text(gpu + "\n")
        (h.fake_root / "bench_spu").write_text(SPU[kind] + "\n")
        entries.append({"name": h.name, "address": h.host, "port": h.port, "gpus": {"model": gpu, "count": 1},
                        "group": kind, "host_key": h.host_public_key})
    config = paths.config_dir()
    config.mkdir(parents=True, exist_ok=True)
    (config / "inventory.yaml").write_text(yaml.safe_dump(
        {"defaults": {"user": "root", "key": str(hosts[0].client_key_path)}, "hosts": entries}))
    python = tmp_path / "stand-in-python"
    python.write_text(STAND_IN)
    python.chmod(0o755)
    yield dict(zip(KINDS, hosts)), str(python)
    stop_hosts(hosts)


def claimed(h) -> bool:
    return (h.fake_root / "root/.gpuplan/claim").exists()


def pick(cli) -> tuple[str, dict]:
    r = cli("estimate", "--videos", "2", "--provider", "baremetal", "--format", "json")
    assert r.code == 0, r.err
    est = json.loads(r.out)
    return est["recommended"]["instance_type"], est


def test_a_campaign_on_two_owned_offers_writes_two_profiles_and_moves_the_pick(cli, owned):
    hosts, python = owned
    before, est = pick(cli)
    assert before == "beta"  # the generic table's faster GPU
    assert not any(line.startswith("measured:") for line in est["notes"].values())
    # the estimate names the campaign that would settle the pick: the pick's offer and its rival's
    text = " ".join(cli("estimate", "--videos", "2", "--provider", "baremetal").out.split())
    assert "measure it: `gpuplan bench colorize --on baremetal:beta,baremetal:alpha`" in text

    # the plan of the campaign, with its yen, spends nothing with --dry-run
    r = cli("bench", "colorize-hd", "--on", "baremetal:alpha,baremetal:beta", "--quick", "--dry-run")
    assert r.code == 0, r.err
    assert "baremetal:alpha local (1x T4): claim 1 inventory host" in r.out and "in all about ¥0" in r.out
    assert "dry run: nothing was provisioned" in r.out and not any(map(claimed, hosts.values()))

    r = cli("bench", "colorize-hd", "--on", "baremetal:alpha,baremetal:beta", "--quick", "-y", "--python", python)
    assert r.code == 0, r.err + r.out
    assert r.out.count("profile written to") == 2
    measured = paths.state_dir() / "profiles" / "measured"
    files = sorted(p.name for p in measured.iterdir())
    assert files == ["colorize--baremetal-alpha@local.yaml", "colorize--baremetal-beta@local.yaml"]
    from gpuplan.planning.profiles import load_profile

    alpha = load_profile(measured / files[0])
    assert alpha.provenance.offer == "baremetal:alpha@local" and alpha.reference_gpu == "T4"
    assert str(alpha.seconds_per_unit) == "0.6" and alpha.provenance.quick
    # one machine per offer, all at once: the two hosts' bench runs overlap in time
    spans = {k: [float(line.split()[1]) for line in (h.fake_root / "bench_runs").read_text().split("\n") if line]
             for k, h in hosts.items()}
    assert min(spans["alpha"]) < max(spans["beta"]) and min(spans["beta"]) < max(spans["alpha"])
    # nothing leaks: both hosts released, both clusters gone from the state
    assert not any(map(claimed, hosts.values()))
    state = State(paths.state_db())
    assert [c.name for c in state.clusters() if c.status != "deleted"] == []
    state.close()

    after, est = pick(cli)
    said = [line for line in est["notes"].values() if line.startswith("measured:")]
    assert len(said) == 2 and any("baremetal:alpha (T4, Tesla T4)" in x for x in said) \
        and any("baremetal:beta (A10G, NVIDIA A10G)" in x for x in said)
    assert "12.0x K80" in said[0] + said[1] and ", 2.0x K80" in said[0] + said[1]  # 7.2 / 0.6 and 7.2 / 3.6
    assert after == "alpha"  # the pick follows the measurements
    assert any(a.startswith("speed on T4: 12.0x K80 (measured for colorize-hd") for a in est["recommended"]["assumptions"])
    # the table says it too
    r = cli("estimate", "--videos", "2", "--provider", "baremetal")
    assert "measured: colorize-hd on baremetal:alpha" in r.out and "measured: colorize-hd on baremetal:beta" in r.out
    assert "speed: " not in r.out  # nothing left to settle


def test_a_failed_bench_is_torn_down_and_the_other_offers_still_measured(cli, owned):
    hosts, python = owned
    (hosts["alpha"].fake_root / "bench_spu").unlink()  # the stand-in job fails on alpha's host
    r = cli("bench", "colorize", "--on", "baremetal:alpha,baremetal:beta", "--quick", "-y", "--python", python)
    assert r.code == 4, r.err  # a remote failure
    assert "bench failed on baremetal:alpha" in r.err and "no kernel image" in r.err
    assert r.out.count("profile written to") == 1  # beta was still measured
    assert not any(map(claimed, hosts.values()))  # both hosts released, the failed one too
    state = State(paths.state_db())
    assert [c.name for c in state.clusters() if c.status != "deleted"] == []
    state.close()


def test_bad_offers_are_refused_in_one_line(cli, owned):
    for on, said in (("baremetal:gamma", "no kind of host 'gamma' in the inventory"),
                     ("aws:nope", "unknown instance type 'nope'"),
                     ("baremetal:alpha,baremetal:alpha", "named twice"),
                     ("sakura:dok-v100-32gb", "DOK task plan has no machine to provision"),
                     (",", "name offers separated by commas")):
        r = cli("bench", "colorize", "--on", on, "-y")
        assert r.code == 2 and said in r.err and len(r.err.strip().splitlines()) == 1, (on, r.err)
    r = cli("bench", "colorize", "--on", "baremetal:alpha", "--out", "x.yaml")
    assert r.code == 2 and "--out names one profile file" in r.err


def test_a_cloud_offer_is_priced_through_its_billing_terms(cli, gpuplan_home):
    r = cli("bench", "colorize", "--on", "aws:g5.xlarge", "--dry-run")
    assert r.code == 0, r.err
    # 20 min of setup (catalog) + 5 min making the bench's Python (no --python) + 11 runs x 2 min
    # = 47 min at aws's per-second price; with --python naming a ready one, 42 min
    from decimal import Decimal

    from gpuplan.market import billing, catalog

    offer = catalog.load().resolve("aws:g5.xlarge")
    for minutes, setup, args in ((47, "25 min", ()), (42, "20 min", ("--python", "/opt/venv/bin/python"))):
        r = cli("bench", "colorize", "--on", "aws:g5.xlarge", "--dry-run", *args)
        assert r.code == 0, r.err
        yen = billing.charge(minutes * 60, billing.terms_for(offer))
        assert (f"about {minutes} min (setup {setup} + 11 runs of colorize x 2 min, an ESTIMATE):"
                f" ¥{int(yen.quantize(Decimal(1))):,}") in r.out


class ScriptedCluster:
    """Stands in for the SSH executor on the campaign's cloud machine: records what the cloud
    held while the bench ran, then answers as `answer` says."""

    seen: list = []
    prepared: list = []
    answer = staticmethod(lambda: None)

    def __init__(self, state, cluster, python="python3"):
        self.cluster, self.nodes, self.python = cluster, 1, python
        ScriptedCluster.seen.append((cluster, [n.provider_id for n in state.nodes(cluster)]))

    def prepare(self, find_links=None):
        ScriptedCluster.prepared.append(self.cluster)  # the bench's Python made on the new machine
        return "2.13.0"

    def machine(self):
        from gpuplan.measuring import bench

        return bench.Machine(1, "NVIDIA A10G", None, "570.1", "node-0")

    def run_all(self, launches, timeout):
        from gpuplan.measuring import bench

        failure = ScriptedCluster.answer()
        if failure:
            return [bench.Outcome(1, "", failure) for _ in launches]
        rec = {"status": "ok", "seconds_per_epoch": 1.8, "seconds": 0.5, "throughput": 1.0}
        return [bench.Outcome(0, json.dumps(rec) + "\n", "", 2.0) for _ in launches]

    def private_address(self, node):
        return "10.0.0.1"

    def remove_dirs(self, dirs):
        pass


@pytest.fixture
def aws(moto_aws, gpuplan_home, monkeypatch):
    cfg = gpuplan_home / "config"
    cfg.mkdir(parents=True)
    (cfg / "config.yaml").write_text(yaml.safe_dump({"providers": {"aws": {
        "ami": moto_aws.ami, "quota_vcpus": "64", "ssh_cidr": "198.51.100.7", "poll_s": "0.01"}}}))
    from gpuplan.measuring import bench

    ScriptedCluster.seen, ScriptedCluster.prepared = [], []
    monkeypatch.setattr(bench, "ClusterExecutor", ScriptedCluster)
    yield moto_aws


@pytest.mark.parametrize("fails", [False, True])
def test_a_cloud_offer_is_provisioned_tagged_benched_and_torn_down(aws, cli, fails):
    ScriptedCluster.answer = staticmethod(lambda: "RuntimeError: CUDA error: no kernel image" if fails else None)
    r = cli("bench", "colorize", "--on", "aws:g5.xlarge@us-east-1", "--quick", "--max-pack", "1", "--no-bootstrap",
            "-y")
    assert r.code == (4 if fails else 0), r.err
    [(cluster, ids)] = ScriptedCluster.seen  # one machine, made through the provision path, while the bench ran
    assert cluster.startswith("bench-g5-xlarge-") and len(ids) == 1 and ids[0].startswith("i-")
    assert ScriptedCluster.prepared == [cluster]  # no --python: a fresh machine gets a Python with torch first
    state = State(paths.state_db())
    assert state.journal(cluster)  # journaled as any provision is
    state.close()
    [made] = [i for res in aws.ec2().describe_instances(InstanceIds=ids)["Reservations"] for i in res["Instances"]]
    assert {t["Key"]: t["Value"] for t in made["Tags"]}["gpuplan-cluster"] == cluster  # tagged
    assert aws.held() == {}  # torn down, the failed bench's machine too
    measured = paths.state_dir() / "profiles" / "measured" / "colorize--aws-g5.xlarge@us-east-1.yaml"
    assert measured.exists() != fails
