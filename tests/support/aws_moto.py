"""moto in server mode as the AWS stand-in: one in-process ThreadedMotoServer per test run,
wiped before each test (POST /moto-api/reset), with moto's realism switches on so a bogus
instance type, AMI or key pair is refused as AWS would.

The `moto_aws` fixture is registered for every test module in tests/conftest.py (pytest_plugins).

One gap of moto's is filled in: its GetConsoleOutput is a fixed Xen boot log, while a real
Ubuntu instance's console carries the host key block cloud-init prints, which the AWS provider
reads to pin the first SSH connection. `emulate_cloud_init_console()` adds that block, with one
ed25519 key per instance (as cloud-init makes one per instance); CONSOLE_HOST_KEYS keeps them.

The switches (MOTO_* variables and moto.settings) stay set for the rest of the pytest process,
and an in-process server shares moto's global backends with any `mock_aws` in the same process.
    def test_x(moto_aws):
        prov = moto_aws.provider()
        ...
        assert moto_aws.held() == {}
"""

from __future__ import annotations

import atexit
import json
import os
import tempfile
import threading
from dataclasses import dataclass, field

import pytest

REGION = "us-east-1"
REALISM = {
    "MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION": "true",
    "MOTO_ENABLE_AMI_VALIDATION": "true",
    "MOTO_ENABLE_KEYPAIR_VALIDATION": "true",
}
_server: dict[str, object] = {}
_lock = threading.Lock()
_ec2_clients: dict = {}  # (region, url) -> a client of the emulator, for MotoAws.ec2
CONSOLE_HOST_KEYS: dict[str, str] = {}  # instance id -> the public host key its console printed


def emulate_cloud_init_console() -> None:
    """Make moto's GetConsoleOutput end with cloud-init's host key block (in this process)."""
    from moto.core.responses import ActionResult
    from moto.core.utils import utcnow
    from moto.ec2.responses import general
    from moto.ec2.utils import Base64EncodedString

    from gpuplan.hosts.keys import ed25519_pair

    def get_console_output(self) -> ActionResult:
        instance = self.ec2_backend.get_instance(self._get_param("InstanceId"))
        if instance.id not in CONSOLE_HOST_KEYS:
            CONSOLE_HOST_KEYS[instance.id] = ed25519_pair()[1]
        block = ("-----BEGIN SSH HOST KEY KEYS-----\n"
                 f"{CONSOLE_HOST_KEYS[instance.id]} root@ip-{instance.private_ip.replace('.', '-')}\n"
                 "-----END SSH HOST KEY KEYS-----\n")
        output = general.SAMPLE_CONSOLE_OUTPUT + "[   12.345678] cloud-init[812]: Cloud-init finished\n" + block
        return ActionResult({"InstanceId": instance.id, "Timestamp": utcnow(),
                             "Output": Base64EncodedString.from_raw_string(output)})

    general.General.get_console_output = get_console_output


def serve(port: int) -> None:
    """Run moto's server in this process (for benchmarks that want it in a process of its own),
    with the console emulation."""
    emulate_cloud_init_console()
    from moto.server import main

    main(["-H", "127.0.0.1", "-p", str(port)])


def server_url() -> str:
    """Start the shared moto server once (its settings are read from this process's environment,
    so they are set before it starts) and return its endpoint."""
    with _lock:
        if "url" not in _server:
            os.environ.update(REALISM)
            # No built-in AMIs (1301 old ones): resets are faster and only the test's AMI exists.
            amis = tempfile.NamedTemporaryFile("w", suffix=".json", prefix="gpuplan-moto-amis-", delete=False)
            json.dump([], amis)
            amis.close()
            os.environ["MOTO_AMIS_PATH"] = amis.name
            from moto import settings
            from moto.server import ThreadedMotoServer

            # moto reads these switches once, at import: if it was imported before, set them here.
            settings.EC2_ENABLE_INSTANCE_TYPE_VALIDATION = True
            settings.ENABLE_AMI_VALIDATION = True
            settings.ENABLE_KEYPAIR_VALIDATION = True

            emulate_cloud_init_console()
            server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            server.start()
            host, port = server.get_host_and_port()
            atexit.register(server.stop)
            atexit.register(os.unlink, amis.name)
            _server.update(server=server, url=f"http://{host}:{port}")
        return str(_server["url"])


def session():
    """A boto3 Session from the environment, as the provider builds it (its botocore data loader
    shared by the process's sessions, so the EC2 API model is parsed once, not per test)."""
    from gpuplan.providers.aws import boto3_session

    return boto3_session()


def reset() -> None:
    import requests

    requests.post(server_url() + "/moto-api/reset", timeout=30).raise_for_status()


def point_env_at_moto(monkeypatch, tmp_path) -> str:
    """AWS CLI-style environment aimed at moto, isolated from any real ~/.aws."""
    url = server_url()
    for var in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return url


@dataclass
class MotoAws:
    """Direct access to the emulator, for arranging a test and for asserting what it holds."""

    url: str
    ami: str = ""
    baseline_snapshots: set[str] = field(default_factory=set)

    def ec2(self, region: str = REGION):
        """An EC2 client of the emulator, made once per region and URL (making one builds a class
        of all EC2's operations: 0.07 s of CPU, and tests call this often); the test credentials
        are its own, whatever the environment holds by then."""
        key = (region, self.url)
        with _lock:
            if key not in _ec2_clients:
                _ec2_clients[key] = session().client("ec2", region_name=region, endpoint_url=self.url,
                                                     aws_access_key_id="testing", aws_secret_access_key="testing")
            return _ec2_clients[key]

    def register_ami(self, name: str = "gpuplan-test-ubuntu", region: str = REGION) -> str:
        ec2 = self.ec2(region)
        ami = ec2.register_image(
            Name=name, RootDeviceName="/dev/sda1", Architecture="x86_64", VirtualizationType="hvm",
            BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 8}}])["ImageId"]
        self.baseline_snapshots |= {s["SnapshotId"] for s in ec2.describe_snapshots(OwnerIds=["self"])["Snapshots"]}
        return ami

    def provider(self, config: dict | None = None, **kwargs):
        """An AwsProvider built the way the CLI builds it (credentials and endpoint from the
        environment), with the test AMI, a 64-vCPU fallback quota and fast polling."""
        from gpuplan.providers.aws import AwsProvider

        conf = {"ami": self.ami, "quota_vcpus": "64", **(config or {})}
        kwargs.setdefault("poll_s", 0.01)
        if "session" not in kwargs and not conf.get("profile") and not os.environ.get("AWS_PROFILE"):
            kwargs["session"] = session()
        return AwsProvider(conf, **kwargs)

    def held(self, region: str = REGION) -> dict[str, list[str]]:
        """Everything billable or blocking that exists beyond the test's own AMI: non-terminated
        instances, volumes, non-default security groups, key pairs, own AMIs and snapshots."""
        ec2 = self.ec2(region)

        def pages(operation: str, key: str, **kwargs) -> list[dict]:  # moto pages, 100 reservations at a time
            return [x for page in ec2.get_paginator(operation).paginate(**kwargs) for x in page[key]]

        out = {
            "instances": [i["InstanceId"] for r in pages("describe_instances", "Reservations") for i in r["Instances"]
                          if i["State"]["Name"] != "terminated"],
            "volumes": [v["VolumeId"] for v in pages("describe_volumes", "Volumes")],
            "security-groups": [g["GroupName"] for g in ec2.describe_security_groups()["SecurityGroups"]
                                if g["GroupName"] != "default"],
            "key-pairs": [k["KeyName"] for k in ec2.describe_key_pairs()["KeyPairs"]],
            "images": [i["ImageId"] for i in ec2.describe_images(Owners=["self"])["Images"] if i["ImageId"] != self.ami],
            "snapshots": [s["SnapshotId"] for s in pages("describe_snapshots", "Snapshots", OwnerIds=["self"])
                          if s["SnapshotId"] not in self.baseline_snapshots],
        }
        return {k: v for k, v in out.items() if v}


def loopback_aws_class(hosts):
    """gpuplan's AWS provider, talking to moto, whose machines are the loopback sshd `hosts`: the
    n-th instance that comes up gets the n-th host's address, port and host key, and the cluster's
    login key is authorized on every host (the spot notice and failover launch tests' fleets)."""
    from dataclasses import replace

    from gpuplan.providers.aws import AwsProvider

    given: dict[str, int] = {}  # instance id -> host index

    class LoopbackAws(AwsProvider):
        default_ssh_user = "root"  # the loopback hosts' login

        def create(self, spec, names):
            for h in hosts:
                with open(h.dir / "authorized_keys", "a") as fh:
                    fh.write(spec.ssh_public_key.strip() + "\n")
            return super().create(spec, names)

        def wait_ready(self, region, ids):
            out = []
            for inst in super().wait_ready(region, ids):
                h = hosts[given.setdefault(inst.id, len(given))]
                out.append(replace(inst, public_ip=h.host, private_ip=h.host, ssh_port=h.port,
                                   extra={**inst.extra, "host_key": h.host_public_key}))
            return out

    return LoopbackAws


def fail_nth_call(prov, operation: str, n: int, code: str = "InsufficientInstanceCapacity",
                  message: str = "We currently do not have sufficient capacity in the Availability Zone you requested.",
                  region: str = REGION) -> list[int]:
    """Make the provider's `n`th (1-based) call of `operation` (e.g. "RunInstances") fail with an
    AWS error `code`, before it reaches moto. Returns the list that counts the calls."""
    from botocore.exceptions import ClientError

    calls: list[int] = []
    lock = threading.Lock()

    def hook(**_):
        with lock:
            calls.append(1)
            nth = len(calls)
        if nth == n:
            raise ClientError({"Error": {"Code": code, "Message": message}}, operation)

    prov.client("ec2", region).meta.events.register(f"before-call.ec2.{operation}", hook)
    return calls


CAPACITY_MESSAGE = ("We currently do not have sufficient {size} capacity in the Availability Zone you requested "
                    "({zone}). Our system will be working on provisioning additional capacity. You can currently get "
                    "{size} capacity by not specifying an Availability Zone in your request or choosing {others}.")


def refuse_in_zones(prov, size: str, granted: dict[str, int], code: str = "InsufficientInstanceCapacity",
                    region: str = REGION) -> dict[str, int]:
    """Make RunInstances of `size` in each zone of `granted` succeed that many times, then fail
    with `code` worded as EC2 words it (0: the zone refuses outright), before the call reaches
    moto. A call with no zone counts as the region's first zone. Returns the calls per zone."""
    from botocore.exceptions import ClientError

    calls: dict[str, int] = {}
    lock = threading.Lock()
    zones = sorted(z["ZoneName"] for z in prov.client("ec2", region).describe_availability_zones()["AvailabilityZones"])

    def hook(params, **_):
        if params.get("InstanceType") != size:
            return
        zone = (params.get("Placement") or {}).get("AvailabilityZone") or zones[0]
        with lock:
            calls[zone] = calls.get(zone, 0) + 1
            nth = calls[zone]
        if zone in granted and nth > granted[zone]:
            others = ", ".join(z for z in zones if z not in granted) or "another zone"
            message = (CAPACITY_MESSAGE.format(size=size, zone=zone, others=others)
                       if code.startswith("Insufficient") else "You have requested more vCPU capacity than your "
                       "current vCPU limit of 0 allows for the instance bucket that the specified instance type "
                       "belongs to. Please visit http://aws.amazon.com/contact-us/ec2-request to request an "
                       "adjustment to this limit.")
            raise ClientError({"Error": {"Code": code, "Message": message}}, "RunInstances")

    prov.client("ec2", region).meta.events.register("before-parameter-build.ec2.RunInstances", hook)
    return calls


@pytest.fixture
def moto_aws(monkeypatch, tmp_path) -> MotoAws:
    """A wiped moto with one registered Ubuntu-like AMI, and the environment pointed at it."""
    url = point_env_at_moto(monkeypatch, tmp_path)
    reset()
    m = MotoAws(url)
    m.ami = m.register_ami()
    return m
