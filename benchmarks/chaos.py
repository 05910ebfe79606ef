"""Chaos against a cloud's stand-in: randomized provision / teardown / sweep cycles with kills,
failing API calls and concurrent commands; counts what leaks and where the state and the cloud
disagree.

    .venv/bin/python benchmarks/chaos.py --cycles 1000 [--seed 1] [--minutes 60] [--provider aws|gcp|azure]

Every gpuplan command runs as its own process (this script's `child`: gpuplan's CLI with the
faults below), forked from a fork server that has imported the clouds' SDKs once (importing
google-cloud-compute alone is ~3 s of CPU, which every command paid), with two installations
(two GPUPLAN_HOMEs, no `owner:` configured), against `--provider`'s stand-in:

  aws  one moto server in server mode; the child makes one AWS call fail where asked.
  gcp  the loopback Compute REST fake (tests/support/gcp_fake.py), served from this process,
       reached by the real google-cloud-compute client in each child; its operations complete
       after 50 ms, and this process makes one of them fail (the k-th instance insert, an
       instance or firewall delete) before it starts the command.
  azure the fake ARM (tests/support/azure_fake.py), served over loopback HTTP from this process,
       reached by the real Azure SDK clients in each child; this process sets its zonal stockouts
       (ZonalAllocationFailed) and makes the k-th new-VM PUT or one resource group delete answer
       500 InternalServerError.

Each cycle is one scenario:

  plain          provision xN, teardown
  kill-provision provision killed with SIGKILL at a failpoint (GPUPLAN_FAILPOINT), then teardown
  kill-teardown  teardown killed at a failpoint, then teardown again
  fail-create    the k-th RunInstances fails (InternalError; GCP: the k-th instance insert ends
                 in an internal error; Azure: the k-th new-VM PUT answers 500): rolled back (a
                 capacity refusal moves to the next zone now)
  refuse-zone    a 4-machine fleet whose first zone grants k of 4 (k = 0..3), then refuses as the
                 cloud words it (InsufficientInstanceCapacity; GCP: ZONE_RESOURCE_POOL_EXHAUSTED;
                 Azure: ZonalAllocationFailed):
                 the rest are bought in the next zone, ready with 4, then torn down
  refuse-all     the same, but every other zone of the region refuses too: exit 3, rolled back
                 (or kept with --keep-on-failure), nothing left after the teardown
  fail-teardown  TerminateInstances, DeleteSecurityGroup or DeleteKeyPair fails once (GCP: an
                 instance or firewall rule delete; Azure: the resource group delete): teardown
                 again finishes
  twice          the same provision twice at once: one cluster, never duplicates
  sweep-during   a sweep (--force) in the same home while a provision runs
  sweep-other    a sweep (--force --legacy-owner) from the second home while a provision runs
  down-during    a teardown of the cluster while its provision runs (waits for the lock)
  same-name      both homes provision the same cluster name at once, then tear down one after
                 the other: each state knows exactly its own machines, and A's teardown leaves B's
  lock-deleted   the same provision twice, the cluster's lock file deleted while the first holds it
  shared-owner   both homes share `owner:`; a forced sweep from B while A's cluster runs spares it
  full-disk      every state write fails right after the create (a full disk): the cloud is rolled
                 back first (nothing left running), then a teardown with space again tidies the state

Checks: after a provision that exits 0, the state says ready and its nodes' ids are exactly the
instances the cloud runs for that cluster (N of them); after a teardown that exits 0, the state
says gone and the cloud holds nothing of the cluster; an exit code the scenario does not allow
is counted as unexpected. After every cycle, `teardown --all` in both homes, then whatever the
stand-in still holds (AWS: instances, volumes, security groups, key pairs, images, snapshots;
GCP: instances, disks, firewall rules, images; Azure: every resource group, VM, NIC, public IP,
disk, NSG, VNet, image and schedule the fake holds) is a leak. The stand-in is wiped every 25 cycles
once that check is done (moto's calls slow down with every terminated instance), and after a leak.
Prints one line per problem and a result line; exits 1 if anything leaked or disagreed.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

REGION = "us-east-1"
SIZE = "g4dn.xlarge"
GCP_REGION = "asia-northeast1"
AZURE_REGION = "japaneast"
SCENARIOS = ["plain", "kill-provision", "kill-teardown", "fail-create", "fail-teardown", "twice",
             "sweep-during", "sweep-other", "down-during", "same-name", "lock-deleted", "shared-owner", "full-disk",
             "refuse-zone", "refuse-all"]
PROVISION_POINTS = ["before:create-nodes", "after:create-nodes", "before:wait-ready", "after:wait-ready"]
TEARDOWN_POINTS = ["after:list", "before:delete-instances", "after:delete-instances", "before:delete-resources",
                   "after:delete-resources", "before:verify-gone"]


@dataclass
class Report:
    cycles: int = 0
    leaks: list[str] = field(default_factory=list)
    disagreements: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    by_scenario: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.by_scenario.items()))
        return (f"chaos: {self.cycles} cycles ({kinds}): leaks {len(self.leaks)}, "
                f"disagreements {len(self.disagreements)}, unexpected exits {len(self.unexpected)}")

    @property
    def ok(self) -> bool:
        return not (self.leaks or self.disagreements or self.unexpected)


class AwsCloud:
    """moto in server mode (tests/support/aws_moto.py); a child makes its own AWS call fail."""

    name, region, target = "aws", REGION, f"aws:{SIZE}"
    teardown_failures = ["TerminateInstances", "DeleteSecurityGroup", "DeleteKeyPair"]
    prices: dict | None = None

    def __init__(self) -> None:
        import logging

        from support import aws_moto

        logging.getLogger("werkzeug").setLevel(logging.CRITICAL)  # moto's request log and its 501 tracebacks
        self.url = aws_moto.server_url()
        self.moto = aws_moto.MotoAws(self.url)
        self.reset()

    def reset(self) -> None:
        from support import aws_moto

        aws_moto.reset()
        self.moto.ami = self.moto.register_ami()

    def stop(self) -> None:
        pass

    def env(self, workdir: Path) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.url, "AWS_ACCESS_KEY_ID": "chaos", "AWS_SECRET_ACCESS_KEY": "chaos",
                "AWS_DEFAULT_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true",
                "AWS_CONFIG_FILE": str(workdir / "no-aws-config"),
                "AWS_SHARED_CREDENTIALS_FILE": str(workdir / "no-aws-credentials")}

    def provider_config(self, max_workers: int) -> dict[str, str]:
        return {"ami": self.moto.ami, "quota_vcpus": "4096", "ssh_cidr": "198.51.100.7", "poll_s": "0.01",
                "max_workers": str(max_workers)}

    def fail_create(self, nth: int) -> dict[str, str]:
        """The environment of a provision whose nth create call fails."""
        return {"CHAOS_FAIL": f"RunInstances:{nth}:InternalError"}

    def refuse(self, granted: int, everywhere: bool) -> dict[str, str]:
        """The environment of a provision whose first zone grants `granted` machines, then has no
        capacity (and with `everywhere`, neither has any other zone of the region)."""
        return {"CHAOS_REFUSE": f"{granted}:{'all' if everywhere else 'first'}"}

    def fail_teardown(self, operation: str) -> dict[str, str]:
        return {"CHAOS_FAIL": f"{operation}:1:InternalError"}

    def clear_failures(self) -> None:
        pass

    def instances(self, cluster: str, installation: str | None = None) -> list[str]:
        """The cluster's instances moto has not terminated (paged: moto answers 100 reservations
        a page, and terminated ones pile up over the cycles); with `installation`, only its own."""
        mine = [{"Name": "tag:gpuplan-installation", "Values": [installation]}] if installation else []
        pages = self.moto.ec2().get_paginator("describe_instances").paginate(Filters=mine + [
            {"Name": "tag:gpuplan-cluster", "Values": [cluster]},
            {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped", "shutting-down"]}])
        return [i["InstanceId"] for page in pages for r in page["Reservations"] for i in r["Instances"]]

    def resources(self, cluster: str, installation: str | None = None) -> list[str]:
        ec2 = self.moto.ec2()
        flt = [{"Name": "tag:gpuplan-cluster", "Values": [cluster]}]
        if installation:
            flt.append({"Name": "tag:gpuplan-installation", "Values": [installation]})
        return ([f"instance {i}" for i in self.instances(cluster, installation)]
                + [f"volume {v['VolumeId']}" for v in ec2.describe_volumes(Filters=flt)["Volumes"]]
                + [f"security-group {g['GroupId']}" for g in ec2.describe_security_groups(Filters=flt)["SecurityGroups"]]
                + [f"key-pair {k['KeyName']}" for k in ec2.describe_key_pairs(Filters=flt)["KeyPairs"]])

    def held(self) -> object:
        return self.moto.held()


class GcpCloud:
    """The loopback Compute REST fake, served from this process; this process makes its
    operations fail (a child reaches the fake through GcpProvider's api_endpoint)."""

    name, region, target = "gcp", GCP_REGION, "gcp:chaos-t4"
    teardown_failures = ["instances.delete", "firewalls.delete"]
    # A test-only offer, so the chaos does not depend on which GCP rows the shipped catalog has.
    prices: dict | None = {"offers": [{
        "provider": "gcp", "name": "n1-standard-4+nvidia-tesla-t4", "aliases": ["chaos-t4"], "region": GCP_REGION,
        "gpu": "T4", "gpu_count": 1, "vcpus": 4, "ram_gib": 15, "price": 100, "currency": "JPY",
        "price_unit": "hour"}]}

    def __init__(self) -> None:
        from support.gcp_fake import GceFake

        self.fake = GceFake(delay_s=0.05)
        self.fake.start()

    def reset(self) -> None:
        """Empty the fake; only between cycles, when no gpuplan process runs."""
        fake = self.fake
        with fake.lock:
            for table in (fake.instances, fake.disks, fake.firewalls, fake.images, fake.operations):
                table.clear()
            fake._pending.clear()
            fake.requests.clear()
        fake.clear_failures()

    def stop(self) -> None:
        self.fake.stop()

    def env(self, workdir: Path) -> dict[str, str]:
        return {"CHAOS_GCP_ENDPOINT": self.fake.root, "CLOUDSDK_CONFIG": str(workdir / "no-gcloud-config")}

    def provider_config(self, max_workers: int) -> dict[str, str]:
        return {"project": self.fake.project, "ssh_source": "198.51.100.7"}

    def fail_create(self, nth: int) -> dict[str, str]:
        self.fake.fail_next("instances.insert", nth, ("INTERNAL_ERROR", "Internal error. Please try again.", 500))
        return {}

    def refuse(self, granted: int, everywhere: bool) -> dict[str, str]:
        from support.gcp_fake import ACCELERATORS

        zones = sorted(z for z in ACCELERATORS["nvidia-tesla-t4"] if z.startswith(GCP_REGION + "-"))
        with self.fake.lock:
            self.fake.stockouts = {zones[0]: granted, **({z: 0 for z in zones[1:]} if everywhere else {})}
        return {}

    def fail_teardown(self, operation: str) -> dict[str, str]:
        self.fake.fail_next(operation, 1)
        return {}

    def clear_failures(self) -> None:
        self.fake.clear_failures()

    def _labelled(self, table: dict, kind: str, cluster: str, installation: str | None) -> list[str]:
        from gpuplan.providers.gcp import label_value

        want = {"gpuplan-cluster": label_value(cluster)}
        if installation:
            want["gpuplan-installation"] = label_value(installation)
        return sorted(f"zones/{zone}/{kind}/{name}" for (zone, name), item in table.items()
                      if all(item.get("labels", {}).get(k) == v for k, v in want.items()))

    def instances(self, cluster: str, installation: str | None = None) -> list[str]:
        """The cluster's instances in any state, read from the fake itself (not through gpuplan)."""
        with self.fake.lock:
            self.fake._tick()
            return self._labelled(self.fake.instances, "instances", cluster, installation)

    def resources(self, cluster: str, installation: str | None = None) -> list[str]:
        import json

        with self.fake.lock:
            self.fake._tick()
            disks = self._labelled(self.fake.disks, "disks", cluster, installation)
            rules = []
            for name, rule in self.fake.firewalls.items():
                tags = json.loads(rule.get("description") or "{}").get("gpuplan", {})
                if tags.get("gpuplan-cluster") == cluster and (
                        not installation or tags.get("gpuplan-installation") == installation):
                    rules.append(f"global/firewalls/{name}")
        return self.instances(cluster, installation) + disks + rules

    def held(self) -> object:
        return self.fake.held()


class AzureCloud:
    """The fake ARM (tests/support/azure_fake.py), served over loopback HTTP from this process;
    a child's real Azure SDK clients reach it through a transport that sends every request
    there. This process sets its zonal stockouts; a fresh fake replaces it on reset."""

    name, region, target = "azure", AZURE_REGION, "azure:chaos-t4"
    size = "Standard_NC4as_T4_v3"
    teardown_failures = ["Microsoft.Resources/resourceGroups"]  # teardown deletes the cluster's group whole
    # A test-only offer, so the chaos does not depend on which Azure rows the shipped catalog has.
    prices: dict | None = {"offers": [{
        "provider": "azure", "name": "Standard_NC4as_T4_v3", "aliases": ["chaos-t4"], "region": AZURE_REGION,
        "gpu": "T4", "gpu_count": 1, "vcpus": 4, "ram_gib": 28, "price": 100, "currency": "JPY",
        "price_unit": "hour"}]}

    def __init__(self) -> None:
        from support.azure_fake import ArmServer

        self.server = ArmServer(self._fresh())
        self.server.start()

    @staticmethod
    def _fresh():
        from support.azure_fake import FakeARM

        return FakeARM(limits={"cores": 4096}, default_family_limit=4096)

    @property
    def fake(self):
        return self.server.fake

    def reset(self) -> None:
        """A fresh fake; only between cycles, when no gpuplan process runs."""
        self.server.fake = self._fresh()

    def stop(self) -> None:
        self.server.stop()

    def env(self, workdir: Path) -> dict[str, str]:
        return {"CHAOS_AZURE_ENDPOINT": self.server.root, "AZURE_CONFIG_DIR": str(workdir / "no-azure-config")}

    def provider_config(self, max_workers: int) -> dict[str, str]:
        from support.azure_fake import SUBSCRIPTION

        return {"subscription_id": SUBSCRIPTION, "ssh_source": "198.51.100.7"}

    def fail_create(self, nth: int) -> dict[str, str]:
        """The nth new-VM PUT of the next provision answers 500 InternalServerError."""
        with self.fake._lock:
            self.fake.fail_vm_put_at = self.fake.vm_puts + nth
            self.fake.fail_vm_error = (500, "InternalServerError", "An internal server error occurred.")
        return {}

    def fail_teardown(self, operation: str) -> dict[str, str]:
        with self.fake._lock:
            self.fake.fail_deletes = {operation: 1}
        return {}

    def refuse(self, granted: int, everywhere: bool) -> dict[str, str]:
        fake = self.fake
        with fake._lock:
            first, *rest = fake.zones
            fake.stockouts = {(self.size.lower(), first): granted,
                              **({(self.size.lower(), z): 0 for z in rest} if everywhere else {})}
        return {}

    def clear_failures(self) -> None:
        with self.fake._lock:
            self.fake.stockouts = {}
            self.fake.fail_vm_put_at = None
            self.fake.fail_deletes = {}

    def _tagged(self, cluster: str, installation: str | None) -> tuple[list[dict], list[dict]]:
        """(the cluster's resource groups, every other resource tagged with the cluster)."""
        want = {"gpuplan-cluster": cluster, **({"gpuplan-installation": installation} if installation else {})}
        with self.fake._lock:
            tagged = [r for r in self.fake.store.values()
                      if all((r.get("tags") or {}).get(k) == v for k, v in want.items())]
        groups = [r for r in tagged if r["type"] == "Microsoft.Resources/resourceGroups"]
        return groups, [r for r in tagged if r["type"] != "Microsoft.Resources/resourceGroups"]

    def instances(self, cluster: str, installation: str | None = None) -> list[str]:
        """The cluster's VMs, read from the fake itself (not through gpuplan)."""
        _, tagged = self._tagged(cluster, installation)
        return sorted(r["id"] for r in tagged if r["type"] == "Microsoft.Compute/virtualMachines")

    def resources(self, cluster: str, installation: str | None = None) -> list[str]:
        """Everything tagged with the cluster, and everything inside its resource groups (the
        OS disks carry no tags)."""
        groups, tagged = self._tagged(cluster, installation)
        inside = [g["id"].lower() + "/" for g in groups]
        with self.fake._lock:
            held = [r["id"] for k, r in self.fake.store.items() if any(k.startswith(g) for g in inside)]
        return sorted({r["id"] for r in groups + tagged} | set(held))

    def held(self) -> object:
        return self.fake.held()


CLOUDS = {"aws": AwsCloud, "gcp": GcpCloud, "azure": AzureCloud}


class Chaos:
    def __init__(self, cloud, workdir: Path, rng: random.Random, log=print) -> None:
        self.cloud, self.rng, self.log = cloud, rng, log
        cloud.reset()
        self.homes = [workdir / "home-a", workdir / "home-b"]
        for home in self.homes:
            (home / "config").mkdir(parents=True, exist_ok=True)
            self.configure(home, max_workers=4)
        self.env = {**os.environ, **cloud.env(workdir), "GPUPLAN_LOCK_WAIT": "60"}
        for var in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "GPUPLAN_FAILPOINT", "CHAOS_FAIL",
                    "CHAOS_REFUSE",
                    "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT"):
            self.env.pop(var, None)
        self.report = Report()
        self.n = 0
        self.commands, self.started = workdir / "commands", 0  # each command's output files
        self.commands.mkdir()

    def configure(self, home: Path, max_workers: int, owner: str | None = None) -> None:
        import yaml

        (home / "config" / "config.yaml").write_text(yaml.safe_dump({**({"owner": owner} if owner else {}), "providers": {
            self.cloud.name: self.cloud.provider_config(max_workers)}}))
        if self.cloud.prices:
            (home / "config" / "prices.yaml").write_text(yaml.safe_dump(self.cloud.prices))

    # --- running gpuplan ----------------------------------------------------------------

    def start(self, *args: str, home: int = 0, **env: str) -> Command:
        self.started += 1
        return Command(list(args), {**self.env, "GPUPLAN_HOME": str(self.homes[home]), **env},
                       self.commands / str(self.started))

    def run(self, *args: str, home: int = 0, **env: str) -> tuple[int, str]:
        proc = self.start(*args, home=home, **env)
        out, err = proc.communicate(timeout=600)
        return proc.returncode, (out + err).strip()

    def provision_args(self, name: str, count: int) -> tuple[str, ...]:
        return ("provision", "--yes", self.cloud.target, f"x{count}", "--name", name, "--no-bootstrap")

    # --- what the cloud and the state say ----------------------------------------------

    def installation(self, home: int) -> str | None:
        side = self.homes[home] / "state" / "installation-id"
        return side.read_text().strip() if side.exists() else None

    def instances(self, cluster: str, home: int | None = None) -> list[str]:
        """The cluster's live instances in the cloud; with `home`, only that home's."""
        return self.cloud.instances(cluster, None if home is None else self.installation(home) or "-")

    def cluster_resources(self, cluster: str, home: int | None = None) -> list[str]:
        """What the cloud holds tagged with this cluster (with `home`: made by that home), read
        directly (not through gpuplan's listing)."""
        return self.cloud.resources(cluster, None if home is None else self.installation(home) or "-")

    def state_of(self, cluster: str, home: int = 0):
        from gpuplan.store.state import State

        db = self.homes[home] / "state" / "state.db"
        if not db.exists():
            return None, []
        state = State(db)
        try:
            return state.cluster(cluster), state.nodes(cluster)
        finally:
            state.close()

    def live_clusters(self, home: int) -> list[str]:
        from gpuplan.store.state import State

        db = self.homes[home] / "state" / "state.db"
        if not db.exists():
            return []
        state = State(db)
        try:
            return [c.name for c in state.clusters()]
        finally:
            state.close()

    def disagree(self, what: str) -> None:
        self.report.disagreements.append(f"cycle {self.n}: {what}")
        self.log(f"DISAGREEMENT cycle {self.n}: {what}")

    def unexpected(self, what: str, code: int, output: str) -> None:
        tail = output.splitlines()[-1] if output else ""
        self.report.unexpected.append(f"cycle {self.n}: {what} exited {code}: {tail}")
        self.log(f"UNEXPECTED cycle {self.n}: {what} exited {code}: {tail}")

    def check_ready(self, cluster: str, count: int, home: int = 0) -> None:
        row, nodes = self.state_of(cluster, home)
        cloud = sorted(self.instances(cluster, home))
        known = sorted(n.provider_id for n in nodes if n.provider_id)
        if row is None or row.status != "ready":
            self.disagree(f"{cluster}: provision exited 0 but the state says {row.status if row else 'nothing'}")
        if len(cloud) != count or known != cloud:
            self.disagree(f"{cluster}: state knows {known}, the cloud runs {cloud} (want {count})")

    def check_gone(self, cluster: str, home: int = 0) -> None:
        row, _ = self.state_of(cluster, home)
        left = self.cluster_resources(cluster, home)
        if row is not None and row.status != "gone":
            self.disagree(f"{cluster}: teardown exited 0 but the state says {row.status}")
        if left:
            self.disagree(f"{cluster}: teardown exited 0 but the cloud holds {left}")

    def expect(self, what: str, code: int, output: str, allowed: tuple[int, ...]) -> None:
        if code not in allowed:
            self.unexpected(what, code, output)

    # --- scenarios ----------------------------------------------------------------------

    def cycle(self, scenario: str) -> None:
        self.n += 1
        self.report.by_scenario[scenario] = self.report.by_scenario.get(scenario, 0) + 1
        name = f"c{self.n}"
        count = self.rng.randint(1, 3)
        self.configure(self.homes[0], max_workers=self.rng.choice([1, 2, 4]))
        getattr(self, "scenario_" + scenario.replace("-", "_"))(name, count)
        self.finish()
        self.report.cycles += 1

    def provision_ok(self, name: str, count: int) -> bool:
        code, out = self.run(*self.provision_args(name, count))
        self.expect(f"provision {name}", code, out, (0,))
        if code == 0:
            self.check_ready(name, count)
        return code == 0

    def teardown_ok(self, name: str, home: int = 0) -> None:
        code, out = self.run("teardown", "--yes", name, home=home)
        self.expect(f"teardown {name}", code, out, (0,))
        if code == 0:
            self.check_gone(name, home)

    def scenario_plain(self, name: str, count: int) -> None:
        if self.provision_ok(name, count):
            self.teardown_ok(name)

    def scenario_kill_provision(self, name: str, count: int) -> None:
        point = self.rng.choice(PROVISION_POINTS)
        code, out = self.run(*self.provision_args(name, count), GPUPLAN_FAILPOINT=point)
        self.expect(f"provision {name} killed at {point}", code, out, (-9,))
        self.teardown_ok(name)

    def scenario_kill_teardown(self, name: str, count: int) -> None:
        if not self.provision_ok(name, count):
            return
        point = self.rng.choice(TEARDOWN_POINTS)
        code, out = self.run("teardown", "--yes", name, GPUPLAN_FAILPOINT=point)
        self.expect(f"teardown {name} killed at {point}", code, out, (-9,))
        self.teardown_ok(name)

    def scenario_fail_create(self, name: str, count: int) -> None:
        nth = self.rng.randint(1, count)
        keep = self.rng.random() < 0.3
        args = self.provision_args(name, count) + (("--keep-on-failure",) if keep else ())
        try:
            code, out = self.run(*args, **self.cloud.fail_create(nth))
        finally:
            self.cloud.clear_failures()
        self.expect(f"provision {name} with create #{nth} failing", code, out, (3,))
        if not keep and code == 3:
            if self.instances(name):
                self.disagree(f"{name}: rolled back, but the cloud still runs {self.instances(name)}")
            row, _ = self.state_of(name)
            if row is not None and row.status != "gone":
                self.disagree(f"{name}: rolled back, but the state says {row.status}")
        self.teardown_ok(name)

    def refused(self, name: str, everywhere: bool) -> None:
        """A 4-machine fleet whose first zone grants k of 4 (each step of the fleet in turn)."""
        granted = self.rng.randint(0, 3)
        keep = everywhere and self.rng.random() < 0.3
        args = self.provision_args(name, 4) + (("--keep-on-failure",) if keep else ())
        try:
            code, out = self.run(*args, **self.cloud.refuse(granted, everywhere))
        finally:
            self.cloud.clear_failures()
        what = f"provision {name} x4, first zone granting {granted}" + (", every other zone refusing" if everywhere else "")
        if not everywhere:
            self.expect(what, code, out, (0,))
            if code == 0:
                self.check_ready(name, 4)
        else:
            self.expect(what, code, out, (3,))
            if code == 3 and not keep and self.instances(name):
                self.disagree(f"{name}: refused everywhere and rolled back, but the cloud still runs "
                              f"{self.instances(name)}")
            if code == 3 and keep and len(self.instances(name)) != granted:
                self.disagree(f"{name}: kept after refusals, {granted} granted, but the cloud runs "
                              f"{self.instances(name)}")
        self.teardown_ok(name)

    def scenario_refuse_zone(self, name: str, count: int) -> None:
        self.refused(name, everywhere=False)

    def scenario_refuse_all(self, name: str, count: int) -> None:
        self.refused(name, everywhere=True)

    def scenario_fail_teardown(self, name: str, count: int) -> None:
        if not self.provision_ok(name, count):
            return
        op = self.rng.choice(self.cloud.teardown_failures)
        try:
            code, out = self.run("teardown", "--yes", name, **self.cloud.fail_teardown(op))
        finally:
            self.cloud.clear_failures()
        self.expect(f"teardown {name} with {op} failing", code, out, (3,))
        self.teardown_ok(name)

    def scenario_twice(self, name: str, count: int) -> None:
        procs = [self.start(*self.provision_args(name, count)) for _ in range(2)]
        results = [(p.returncode, (o + e).strip()) for p in procs for o, e in [p.communicate(timeout=600)]]
        codes = sorted(c for c, _ in results)
        if codes != [0, 2]:
            for c, out in results:
                self.expect(f"provision {name} twice at once", c, out, ())
        if len(self.instances(name)) != count:
            self.disagree(f"{name}: provisioned twice at once, the cloud runs {len(self.instances(name))} (want {count})")
        if 0 in codes:
            self.check_ready(name, count)
        self.teardown_ok(name)

    def while_provisioning(self, name: str, count: int, *other: str, home: int = 0) -> tuple[int, str, int, str]:
        """Start a provision, run `other` once the first instance exists (or the provision ended)."""
        prov = self.start(*self.provision_args(name, count))
        deadline = time.monotonic() + 120
        while not self.instances(name) and prov.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        code, out = self.run(*other, home=home)
        pout, perr = prov.communicate(timeout=600)
        return prov.returncode, (pout + perr).strip(), code, out

    def scenario_sweep_during(self, name: str, count: int) -> None:
        self.sweep_while_provisioning(name, count, home=0)

    def scenario_sweep_other(self, name: str, count: int) -> None:
        self.sweep_while_provisioning(name, count, "--legacy-owner", home=1)

    def sweep_while_provisioning(self, name: str, count: int, *flags: str, home: int) -> None:
        pcode, pout, scode, sout = self.while_provisioning(
            name, count, "teardown", "--yes", "--sweep", "--force", *flags, "--provider", self.cloud.name,
            "--region", self.cloud.region, home=home)
        self.expect(f"sweep (home {home}) while {name} provisions", scode, sout, (0,))
        self.expect(f"provision {name} under a sweep from home {home}", pcode, pout, (0,))
        if pcode == 0:
            self.check_ready(name, count)
        self.teardown_ok(name)

    def scenario_down_during(self, name: str, count: int) -> None:
        pcode, pout, tcode, tout = self.while_provisioning(name, count, "teardown", "--yes", name)
        self.expect(f"provision {name} under a teardown", pcode, pout, (0,))
        self.expect(f"teardown {name} during its provision", tcode, tout, (0,))
        if tcode == 0:
            self.check_gone(name)
        else:
            self.teardown_ok(name)

    def scenario_same_name(self, name: str, count: int) -> None:
        other = self.rng.randint(1, 3)
        procs = [self.start(*self.provision_args(name, n), home=h) for h, n in ((0, count), (1, other))]
        results = [(p.returncode, (o + e).strip()) for p in procs for o, e in [p.communicate(timeout=600)]]
        for h, (code, out) in enumerate(results):
            self.expect(f"provision {name} from home {h} (same name in both)", code, out, (0,))
        if [c for c, _ in results] != [0, 0]:
            return
        self.check_ready(name, count, home=0)
        self.check_ready(name, other, home=1)
        first = self.rng.choice([0, 1])
        self.teardown_ok(name, home=first)
        left = self.instances(name)
        if sorted(left) != sorted(self.instances(name, 1 - first)) or len(left) != (other if first == 0 else count):
            self.disagree(f"{name}: home {first}'s teardown left {len(left)} machines, not the other home's")
        self.teardown_ok(name, home=1 - first)

    def scenario_lock_deleted(self, name: str, count: int) -> None:
        first = self.start(*self.provision_args(name, count))
        deadline = time.monotonic() + 120
        while not self.instances(name) and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        for lock in (self.homes[0] / "state" / "locks").glob("*.lock"):
            lock.unlink(missing_ok=True)  # a tmp cleaner
        code, out = self.run(*self.provision_args(name, count))
        fout, ferr = first.communicate(timeout=600)
        codes = sorted([first.returncode, code])
        if codes != [0, 2]:
            self.expect(f"provision {name} twice, lock file deleted", first.returncode, (fout + ferr).strip(), ())
            self.expect(f"second provision {name} after the lock file went", code, out, ())
        if len(self.instances(name)) != count:
            self.disagree(f"{name}: lock file deleted under a provision, the cloud runs {len(self.instances(name))} "
                          f"(want {count})")
        if 0 in codes:
            self.check_ready(name, count)
        self.teardown_ok(name)

    def scenario_shared_owner(self, name: str, count: int) -> None:
        for h in (0, 1):
            self.configure(self.homes[h], max_workers=4, owner="chaos-shared")
        try:
            if not self.provision_ok(name, count):
                return
            code, out = self.run("teardown", "--yes", "--sweep", "--force", "--provider", self.cloud.name,
                                 "--region", self.cloud.region, home=1)
            self.expect("forced sweep from home 1 under a shared owner", code, out, (0,))
            self.check_ready(name, count)  # spared: another installation's live cluster
            self.teardown_ok(name)
        finally:
            for h in (0, 1):
                self.configure(self.homes[h], max_workers=4)

    def scenario_full_disk(self, name: str, count: int) -> None:
        code, out = self.run(*self.provision_args(name, count), CHAOS_DISK_FULL="after-create")
        self.expect(f"provision {name} with a full disk after the create", code, out, (1,))
        if self.instances(name):
            self.disagree(f"{name}: full disk after the create, the cloud still runs {self.instances(name)}")
        self.teardown_ok(name)

    # --- after every cycle --------------------------------------------------------------

    def finish(self) -> None:
        for home in (0, 1):
            if self.live_clusters(home):
                code, out = self.run("teardown", "--yes", "--all", home=home)
                self.expect(f"final teardown --all (home {home})", code, out, (0,))
        held = self.cloud.held()
        if held:
            self.report.leaks.append(f"cycle {self.n}: {held}")
            self.log(f"LEAK cycle {self.n}: {held}")
        # A fresh stand-in after a leak (so one leak is counted once), and every 25 cycles anyway:
        # moto keeps terminated instances, and every describe call scans them all.
        if held or self.n % 25 == 0:
            self.cloud.reset()
            for home in self.homes:
                self.configure(home, max_workers=4)


def run(cycles: int, seed: int, minutes: float | None = None, log=print,
        scenarios: list[str] | None = None, provider: str = "aws") -> Report:
    """Run `cycles` cycles (or until `minutes` have passed) against `provider`'s stand-in (AWS:
    the shared moto server of tests/support/aws_moto.py; GCP and Azure: a fake started here,
    stopped at the end); scenarios (all, or those named) in a seeded random order that covers
    every kind before repeating one."""
    cloud = CLOUDS[provider]()
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="gpuplan-chaos-") as tmp:
        try:
            return _cycles(Chaos(cloud, Path(tmp), rng, log), rng, cycles, minutes, log, scenarios)
        finally:
            cloud.stop()


def _cycles(chaos: Chaos, rng: random.Random, cycles: int, minutes: float | None, log,
            scenarios: list[str] | None) -> Report:
    started = time.monotonic()
    order: list[str] = []
    for i in range(cycles):
        if minutes is not None and time.monotonic() - started > minutes * 60:
            break
        if not order:
            kinds = scenarios or SCENARIOS
            order = rng.sample(kinds, len(kinds))
        chaos.cycle(order.pop())
        if (i + 1) % 25 == 0:
            log(f"... {chaos.report.line()} after {time.monotonic() - started:.0f} s")
    return chaos.report


# What the commands import that costs seconds: imported once, in the fork server
SDKS = ["boto3", "botocore.session", "google.cloud.compute_v1", "google.auth", "google.api_core.exceptions",
        "azure.mgmt.compute", "azure.mgmt.network", "azure.mgmt.resource.resources", "azure.core.exceptions"]


class Command:
    """One gpuplan command in its own process, forked from the fork server; read as a Popen is
    (poll, communicate, returncode). Its output goes to two files beside `base`."""

    def __init__(self, argv: list[str], env: dict[str, str], base: Path) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(SDKS)  # once the server runs, a no-op
        self._out, self._err = base.with_suffix(".out"), base.with_suffix(".err")
        self._proc = ctx.Process(target=_command, args=(argv, env, str(self._out), str(self._err)))
        self._proc.start()

    @property
    def returncode(self) -> int | None:
        return self._proc.exitcode

    def poll(self) -> int | None:
        return self._proc.exitcode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self._proc.join(timeout)
        if self._proc.exitcode is None:
            raise subprocess.TimeoutExpired("gpuplan", timeout or 0)
        return (self._out.read_text(errors="replace") if self._out.exists() else "",
                self._err.read_text(errors="replace") if self._err.exists() else "")


def _command(argv: list[str], env: dict[str, str], out: str, err: str) -> None:
    """In the forked process: the command's environment, working folder and output files, then
    `child` (SystemExit's code is the process's exit code; a failpoint's SIGKILL, -9)."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(ROOT)
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    child(argv)


def child(argv: list[str]) -> None:
    """One gpuplan command; CHAOS_FAIL="Operation:n:Code" makes its n-th such AWS call fail;
    CHAOS_REFUSE="k:first|all" makes the first zone grant k RunInstances, then refuse (all: every zone);
    CHAOS_DISK_FULL=after-create makes every state write fail once the machines exist;
    CHAOS_GCP_ENDPOINT points the GCP provider at the fake there (anonymous credentials);
    CHAOS_AZURE_ENDPOINT points the Azure provider at the fake ARM served there (a fake credential)."""
    from gpuplan.fleet import provider as registry

    gcp_endpoint = os.environ.get("CHAOS_GCP_ENDPOINT")
    azure_endpoint = os.environ.get("CHAOS_AZURE_ENDPOINT")
    if gcp_endpoint:
        from gpuplan.providers.gcp import GcpProvider as Base
    elif azure_endpoint:
        from gpuplan.providers.azure import AzureProvider as Base
    else:
        from gpuplan.providers.aws import AwsProvider as Base
    cls = Base
    if os.environ.get("CHAOS_DISK_FULL"):
        import sqlite3

        from gpuplan.store.state import State

        full: list[bool] = []
        real_tx = State._tx

        def tx(self):
            if full:
                raise sqlite3.OperationalError("database or disk is full")
            return real_tx(self)

        class Filling(Base):
            def create(self, spec, names):
                made = super().create(spec, names)
                full.append(True)
                return made

        State._tx = tx
        cls = Filling
        if not (gcp_endpoint or azure_endpoint):
            registry.override("aws", Filling)
    if gcp_endpoint:
        from google.auth.credentials import AnonymousCredentials

        registry.override("gcp", lambda conf: cls(conf, credentials=AnonymousCredentials(), api_endpoint=gcp_endpoint,
                                                  poll_s=0.01))
    if azure_endpoint:
        from support.azure_fake import FakeCredential, loopback_transport

        registry.override("azure", lambda conf: cls(conf, credential=FakeCredential(),
                                                    transport=loopback_transport(azure_endpoint),
                                                    polling_interval=0, retry_total=0))
    refuse = os.environ.get("CHAOS_REFUSE")
    if refuse and not (gcp_endpoint or azure_endpoint):
        from support.aws_moto import refuse_in_zones

        granted, where = refuse.split(":")
        base = cls

        def refusing(conf):
            prov = base(conf)
            zones = prov.zones(REGION, SIZE)
            refuse_in_zones(prov, SIZE, {z: int(granted) for z in zones[:1]} | (
                {z: 0 for z in zones[1:]} if where == "all" else {}))
            return prov

        registry.override("aws", refusing)
    spec = os.environ.get("CHAOS_FAIL")
    if spec:
        operation, nth, code = spec.split(":")
        from gpuplan.providers.aws import AwsProvider
        from support.aws_moto import fail_nth_call

        def factory(conf):
            prov = AwsProvider(conf)
            fail_nth_call(prov, operation, int(nth), code=code, message="injected by benchmarks/chaos.py")
            return prov

        registry.override("aws", factory)
    from gpuplan.cli import main

    sys.argv = ["gpuplan", *argv]
    main(argv)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=None, help="stop after this long even if cycles remain")
    ap.add_argument("--scenario", action="append", choices=SCENARIOS, help="only these scenarios (repeat)")
    ap.add_argument("--provider", choices=sorted(CLOUDS), default="aws", help="whose stand-in (default aws: moto)")
    args = ap.parse_args()
    if args.provider == "aws":
        # this process reads moto directly (the checks); the gpuplan processes get the same values
        os.environ.update(AWS_ACCESS_KEY_ID="chaos", AWS_SECRET_ACCESS_KEY="chaos", AWS_DEFAULT_REGION=REGION)
    started = time.monotonic()
    report = run(args.cycles, args.seed, args.minutes, scenarios=args.scenario, provider=args.provider)
    for line in report.leaks + report.disagreements + report.unexpected:
        print(line)
    print(f"{report.line()} in {time.monotonic() - started:.0f} s (seed {args.seed}, {args.provider})")
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
