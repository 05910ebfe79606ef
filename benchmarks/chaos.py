"""Chaos against moto: randomized provision / teardown / sweep cycles with kills, failing API
calls and concurrent commands; counts what leaks and where the state and the cloud disagree.

    .venv/bin/python benchmarks/chaos.py --cycles 1000 [--seed 1] [--minutes 60]

Every gpuplan command runs as its own process (`python -m gpuplan`, through this script's
--child mode, which can make one AWS call fail), against one moto server in server mode, with
two installations (two GPUPLAN_HOMEs, no `owner:` configured). Each cycle is one scenario:

  plain          provision xN, teardown
  kill-provision provision killed with SIGKILL at a failpoint (GPUPLAN_FAILPOINT), then teardown
  kill-teardown  teardown killed at a failpoint, then teardown again
  fail-create    the k-th RunInstances fails (InsufficientInstanceCapacity): rolled back
  fail-teardown  TerminateInstances or DeleteSecurityGroup fails once: teardown again finishes
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
instances moto runs for that cluster (N of them); after a teardown that exits 0, the state says
gone and moto holds nothing of the cluster; an exit code the scenario does not allow is counted
as unexpected. After every cycle, `teardown --all` in both homes, then whatever moto still holds
(instances, volumes, security groups, key pairs, images, snapshots) is a leak. moto is wiped
every 25 cycles once that check is done (its calls slow down with every terminated instance).
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
SCENARIOS = ["plain", "kill-provision", "kill-teardown", "fail-create", "fail-teardown", "twice",
             "sweep-during", "sweep-other", "down-during", "same-name", "lock-deleted", "shared-owner", "full-disk"]
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


class Chaos:
    def __init__(self, url: str, workdir: Path, rng: random.Random, log=print) -> None:
        from support import aws_moto

        self.url, self.rng, self.log = url, rng, log
        self.moto = aws_moto.MotoAws(url)
        aws_moto.reset()
        self.moto.ami = self.moto.register_ami()
        self.homes = [workdir / "home-a", workdir / "home-b"]
        for home in self.homes:
            (home / "config").mkdir(parents=True, exist_ok=True)
            self.configure(home, max_workers=4)
        self.env = {**os.environ, "AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "chaos",
                    "AWS_SECRET_ACCESS_KEY": "chaos", "AWS_DEFAULT_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true",
                    "AWS_CONFIG_FILE": str(workdir / "no-aws-config"),
                    "AWS_SHARED_CREDENTIALS_FILE": str(workdir / "no-aws-credentials"), "GPUPLAN_LOCK_WAIT": "60"}
        for var in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "GPUPLAN_FAILPOINT", "CHAOS_FAIL"):
            self.env.pop(var, None)
        self.report = Report()
        self.n = 0

    def configure(self, home: Path, max_workers: int, owner: str | None = None) -> None:
        import yaml

        (home / "config" / "config.yaml").write_text(yaml.safe_dump({**({"owner": owner} if owner else {}), "providers": {
            "aws": {"ami": self.moto.ami, "quota_vcpus": "4096", "ssh_cidr": "198.51.100.7", "poll_s": "0.01",
                    "max_workers": str(max_workers)}}}))

    # --- running gpuplan ----------------------------------------------------------------

    def start(self, *args: str, home: int = 0, **env: str) -> subprocess.Popen:
        full = {**self.env, "GPUPLAN_HOME": str(self.homes[home]), **env}
        return subprocess.Popen([sys.executable, __file__, "--child", *args], env=full, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def run(self, *args: str, home: int = 0, **env: str) -> tuple[int, str]:
        proc = self.start(*args, home=home, **env)
        out, err = proc.communicate(timeout=600)
        return proc.returncode, (out + err).strip()

    def provision_args(self, name: str, count: int) -> tuple[str, ...]:
        return ("provision", "--yes", f"aws:{SIZE}", f"x{count}", "--name", name, "--no-bootstrap")

    # --- what the cloud and the state say ----------------------------------------------

    def installation(self, home: int) -> str | None:
        side = self.homes[home] / "state" / "installation-id"
        return side.read_text().strip() if side.exists() else None

    def instances(self, cluster: str, home: int | None = None) -> list[str]:
        """The cluster's instances moto has not terminated (paged: moto answers 100 reservations
        a page, and terminated ones pile up over the cycles); with `home`, only that home's."""
        mine = [{"Name": "tag:gpuplan-installation", "Values": [self.installation(home) or "-"]}] if home is not None else []
        pages = self.moto.ec2().get_paginator("describe_instances").paginate(Filters=mine + [
            {"Name": "tag:gpuplan-cluster", "Values": [cluster]},
            {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped", "shutting-down"]}])
        return [i["InstanceId"] for page in pages for r in page["Reservations"] for i in r["Instances"]]

    def cluster_resources(self, cluster: str, home: int | None = None) -> list[str]:
        """What moto holds tagged with this cluster (with `home`: made by that home), read
        directly (not through gpuplan's listing)."""
        ec2 = self.moto.ec2()
        flt = [{"Name": "tag:gpuplan-cluster", "Values": [cluster]}]
        if home is not None:
            flt.append({"Name": "tag:gpuplan-installation", "Values": [self.installation(home) or "-"]})
        return ([f"instance {i}" for i in self.instances(cluster, home)]
                + [f"volume {v['VolumeId']}" for v in ec2.describe_volumes(Filters=flt)["Volumes"]]
                + [f"security-group {g['GroupId']}" for g in ec2.describe_security_groups(Filters=flt)["SecurityGroups"]]
                + [f"key-pair {k['KeyName']}" for k in ec2.describe_key_pairs(Filters=flt)["KeyPairs"]])

    def state_of(self, cluster: str, home: int = 0):
        from gpuplan.operating.state import State

        db = self.homes[home] / "state" / "state.db"
        if not db.exists():
            return None, []
        state = State(db)
        try:
            return state.cluster(cluster), state.nodes(cluster)
        finally:
            state.close()

    def live_clusters(self, home: int) -> list[str]:
        from gpuplan.operating.state import State

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
            self.disagree(f"{cluster}: state knows {known}, moto runs {cloud} (want {count})")

    def check_gone(self, cluster: str, home: int = 0) -> None:
        row, _ = self.state_of(cluster, home)
        left = self.cluster_resources(cluster, home)
        if row is not None and row.status != "gone":
            self.disagree(f"{cluster}: teardown exited 0 but the state says {row.status}")
        if left:
            self.disagree(f"{cluster}: teardown exited 0 but moto holds {left}")

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
        code, out = self.run(*args, CHAOS_FAIL=f"RunInstances:{nth}:InsufficientInstanceCapacity")
        self.expect(f"provision {name} with RunInstances #{nth} failing", code, out, (3,))
        if not keep and code == 3:
            if self.instances(name):
                self.disagree(f"{name}: rolled back, but moto still runs {self.instances(name)}")
            row, _ = self.state_of(name)
            if row is not None and row.status != "gone":
                self.disagree(f"{name}: rolled back, but the state says {row.status}")
        self.teardown_ok(name)

    def scenario_fail_teardown(self, name: str, count: int) -> None:
        if not self.provision_ok(name, count):
            return
        op = self.rng.choice(["TerminateInstances", "DeleteSecurityGroup", "DeleteKeyPair"])
        code, out = self.run("teardown", "--yes", name, CHAOS_FAIL=f"{op}:1:InternalError")
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
            self.disagree(f"{name}: provisioned twice at once, moto runs {len(self.instances(name))} (want {count})")
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
            name, count, "teardown", "--yes", "--sweep", "--force", *flags, "--provider", "aws", "--region", REGION,
            home=home)
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
            self.disagree(f"{name}: lock file deleted under a provision, moto runs {len(self.instances(name))} "
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
            code, out = self.run("teardown", "--yes", "--sweep", "--force", "--provider", "aws", "--region", REGION,
                                 home=1)
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
            self.disagree(f"{name}: full disk after the create, moto still runs {self.instances(name)}")
        self.teardown_ok(name)

    # --- after every cycle --------------------------------------------------------------

    def finish(self) -> None:
        from support import aws_moto

        for home in (0, 1):
            if self.live_clusters(home):
                code, out = self.run("teardown", "--yes", "--all", home=home)
                self.expect(f"final teardown --all (home {home})", code, out, (0,))
        held = self.moto.held()
        if held:
            self.report.leaks.append(f"cycle {self.n}: {held}")
            self.log(f"LEAK cycle {self.n}: {held}")
        # A fresh moto after a leak (so one leak is counted once), and every 25 cycles anyway:
        # moto keeps terminated instances, and every describe call scans them all.
        if held or self.n % 25 == 0:
            aws_moto.reset()
            self.moto.ami = self.moto.register_ami()
            for home in self.homes:
                self.configure(home, max_workers=4)


def run(cycles: int, seed: int, minutes: float | None = None, log=print,
        scenarios: list[str] | None = None) -> Report:
    """Run `cycles` cycles (or until `minutes` have passed) against the shared moto server of
    tests/support/aws_moto.py; scenarios (all, or those named) in a seeded random order that
    covers every kind before repeating one."""
    import logging

    from support import aws_moto

    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)  # moto's request log and its 501 tracebacks
    url = aws_moto.server_url()
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="gpuplan-chaos-") as tmp:
        chaos = Chaos(url, Path(tmp), rng, log)
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


def child(argv: list[str]) -> None:
    """One gpuplan command; CHAOS_FAIL="Operation:n:Code" makes its n-th such AWS call fail;
    CHAOS_DISK_FULL=after-create makes every state write fail once the machines exist."""
    if os.environ.get("CHAOS_DISK_FULL"):
        import sqlite3

        from gpuplan.operating import provider as registry
        from gpuplan.operating.state import State
        from gpuplan.providers.aws import AwsProvider

        full: list[bool] = []
        real_tx = State._tx

        def tx(self):
            if full:
                raise sqlite3.OperationalError("database or disk is full")
            return real_tx(self)

        class Filling(AwsProvider):
            def create(self, spec, names):
                made = super().create(spec, names)
                full.append(True)
                return made

        State._tx = tx
        registry.override("aws", Filling)
    spec = os.environ.get("CHAOS_FAIL")
    if spec:
        operation, nth, code = spec.split(":")
        from gpuplan.operating import provider as registry
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
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=None, help="stop after this long even if cycles remain")
    ap.add_argument("--scenario", action="append", choices=SCENARIOS, help="only these scenarios (repeat)")
    args = ap.parse_args()
    # this process reads moto directly (the checks); the gpuplan processes get the same values
    os.environ.update(AWS_ACCESS_KEY_ID="chaos", AWS_SECRET_ACCESS_KEY="chaos", AWS_DEFAULT_REGION=REGION)
    started = time.monotonic()
    report = run(args.cycles, args.seed, args.minutes, scenarios=args.scenario)
    for line in report.leaks + report.disagreements + report.unexpected:
        print(line)
    print(f"{report.line()} in {time.monotonic() - started:.0f} s (seed {args.seed})")
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
