"""AWS: EC2 instances through boto3, with the AWS CLI's conventions for profile and region.

Credentials and endpoint come from where the AWS CLI takes them: AWS_PROFILE (or config
`profile`), AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, ~/.aws/credentials and ~/.aws/config, SSO
and credential_process profiles; AWS_ENDPOINT_URL (honoured by boto3 itself) points every
client at an emulator. On an EC2 host with an instance role set config `credentials: instance-role`
(the credentials check never calls the metadata service).

Layout. Per cluster `demo`, in the default VPC (or config `subnet_id`'s VPC): key pair
`gpuplan-demo-<installation>` (the cluster's login key, imported), security group
`gpuplan-demo-<installation>` (names are unique per account, so they carry the installation; SSH 22 from
NodeSpec.ssh_cidr, the caller's address unless asked otherwise; all traffic between the
cluster's own nodes, which MPI needs), and one instance per node whose root EBS volume is
tagged like the instance and deleted with it. Everything carries the NodeSpec tags; instances
and volumes also `gpuplan-node`. Instances require IMDSv2 (session tokens), so a request forged
through a server on the node cannot read the metadata service.

Host keys. Nothing secret goes into user data: EC2 returns it to anyone allowed to call
DescribeInstanceAttribute, and the metadata service serves it to every process on the node.
The node keeps the host key cloud-init generates, and cloud-init prints its public half to the
console between "-----BEGIN SSH HOST KEY KEYS-----" and "-----END ...". wait_ready reads it
from GetConsoleOutput, the check AWS documents for a first connection ("Get the instance
fingerprint", EC2 user guide), and returns it as Instance.extra["host_key"], so the first SSH
is already pinned to a key only EC2 itself could have vouched for.

Creation: one run_instances call per node name from a bounded thread pool rather than one
call with MinCount=MaxCount=N. Each instance is born with its exact node tag (a batch call
would launch untagged-by-node instances and tag them afterwards, so a crash in between leaves
instances nobody can match to a node), gets its own user data (its own host key), and fails
alone: the nodes that did launch are reported, found by tag and torn down.

TTL. The instance terminates itself: InstanceInitiatedShutdownBehavior=terminate, and cloud-init
installs a per-boot script (re-armed after every reboot of the bootstrap) that runs
`shutdown -h +N` to the absolute deadline. A guest-initiated shutdown then *terminates* the
instance, and its root volume goes with it (DeleteOnTermination), so nothing of the node bills
afterwards. Still billed after a TTL expiry: AMIs' snapshots (EBS snapshot storage) until
`gpuplan image delete` / `teardown --images`; the key pair and security group cost nothing but
remain until `gpuplan teardown`.

Quota: Service Quotas for the instance family's On-Demand vCPU quota (L-DB2E81BA G and VT,
L-417A185B P, L-1216C47A standard), or for spot machines its Spot quota (L-3819A6DF, L-7212CCBC,
L-34B43A08); used = vCPUs of the region's pending and running instances of that family and
market. Where Service Quotas does not answer (an emulator, a missing
servicequotas:GetServiceQuota permission) config `quota_vcpus` is the limit, and the
description says so.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from gpuplan.errors import AuthMissing, CapacityUnavailable, GpuplanError, ProviderError, QuotaExceeded, UsageError, unreachable
from gpuplan.fleet import tags as tagging
from gpuplan.fleet.provider import (
    NEW_LIMIT,
    Image,
    Instance,
    NodeSpec,
    Provider,
    QuotaUsage,
    Resource,
    cloud_config,
    console_host_key,
)
from gpuplan.fleet.tags import TAG_CLUSTER, TAG_IMAGE, TAG_NODE, TAG_OWNER
from gpuplan.market.catalog import SPOT_QUOTA

UBUNTU_SSM = "/aws/service/canonical/ubuntu/server/24.04/stable/current/amd64/hvm/ebs-gp3/ami-id"
DEFAULT_REGIONS = ["us-east-1", "ap-northeast-1"]
LIVE_STATES = ["pending", "running", "stopping", "stopped"]
NOT_TERMINATED = [*LIVE_STATES, "shutting-down"]
# Dependents before what they depend on: a security group cannot go while an instance uses it,
# a snapshot cannot go while an AMI is registered from it.
DELETE_ORDER = ["instance", "disk", "security-group", "key-pair", "image", "snapshot"]

QUOTAS = {
    "L-DB2E81BA": "Running On-Demand G and VT instances",
    "L-417A185B": "Running On-Demand P instances",
    "L-1216C47A": "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
    "L-3819A6DF": "All G and VT Spot Instance Requests",
    "L-7212CCBC": "All P Spot Instance Requests",
    "L-34B43A08": "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests",
}
_FAMILY_QUOTA = {"g": "L-DB2E81BA", "gr": "L-DB2E81BA", "vt": "L-DB2E81BA", "p": "L-417A185B",
                 **{letter: "L-1216C47A" for letter in "acdhimrtz"}}
_SPOT_QUOTA = SPOT_QUOTA  # the catalog plans a spot row against the same code

_AUTH_CODES = {"AuthFailure", "UnrecognizedClient", "UnrecognizedClientException", "InvalidClientTokenId",
               "SignatureDoesNotMatch", "ExpiredToken", "ExpiredTokenException", "RequestExpired",
               "InvalidAccessKeyId"}
_CAPACITY_CODES = {"InsufficientInstanceCapacity", "InsufficientHostCapacity", "InsufficientCapacity",
                   "InsufficientReservedInstanceCapacity", "SpotMaxPriceTooLow"}
_QUOTA_CODES = {"VcpuLimitExceeded", "InstanceLimitExceeded", "MaxSpotInstanceCountExceeded"}
_NOT_FOUND = ("InvalidInstanceID.NotFound", "InvalidVolume.NotFound", "InvalidGroup.NotFound",
              "InvalidKeyPair.NotFound", "InvalidAMIID.NotFound", "InvalidAMIID.Unavailable",
              "InvalidSnapshot.NotFound", "InvalidID")


def family(size: str) -> str:
    """The instance family's letters: "g" for g4dn.xlarge, "vt" for vt1.3xlarge, "inf" for inf2.xlarge."""
    m = re.match(r"[a-z]+", size.strip().lower())
    return m.group(0) if m else ""


def _code(exc) -> str:
    return (getattr(exc, "response", None) or {}).get("Error", {}).get("Code", "") or ""


def _tags(items) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in items or []}


def _tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def user_data(expires_at: datetime | None) -> str:
    """cloud-init: with a TTL, a per-boot script that powers the instance off at the absolute
    deadline. No key of any kind (see the module docstring)."""
    doc: dict = {}
    if expires_at is not None:
        epoch = int(expires_at.timestamp())
        stamp = expires_at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        script = (
            "#!/bin/sh\n"
            "# gpuplan TTL: power off at the deadline; EC2 then terminates the instance.\n"
            f"left=$(( ({epoch} - $(date +%s) + 59) / 60 ))\n"
            'if [ "$left" -lt 1 ]; then exec shutdown -h now; fi\n'
            'exec shutdown -h +"$left"\n'
        )
        doc["write_files"] = [
            {"path": "/etc/gpuplan/expires-at", "content": stamp + "\n", "permissions": "0644"},
            {"path": "/var/lib/cloud/scripts/per-boot/gpuplan-ttl.sh", "content": script, "permissions": "0755"},
        ]
    return cloud_config(doc)


# botocore's reader of the services' API models, shared by every session this process makes
_DATA_LOADER: list = []
_DATA_LOADER_LOCK = threading.Lock()


def boto3_session(profile: str | None = None):
    """A boto3 Session (credentials from the environment, or `profile`, as boto3's own) that shares
    one botocore data loader with every other session of this process. The loader reads and parses
    each service's API model once: EC2's took 0.3 s of CPU each time. A process that runs several
    commands (the tests, a script using gpuplan) made a provider, so a session, and parsed it, for
    each. The loader holds only botocore's data files: credentials stay the session's own."""
    import boto3
    import botocore.session

    bs = botocore.session.Session(profile=profile)
    with _DATA_LOADER_LOCK:
        if not _DATA_LOADER:
            _DATA_LOADER.append(bs.get_component("data_loader"))
        loader = _DATA_LOADER[0]
        bs.register_component("data_loader", loader)
        session = boto3.Session(botocore_session=bs)
        # boto3 adds its own data folder to the loader's search paths with every Session
        loader.search_paths[:] = list(dict.fromkeys(loader.search_paths))
    return session


class AwsProvider(Provider):
    name = "aws"
    default_ssh_user = "ubuntu"
    sdk_modules = ("boto3",)
    injects_host_keys = False  # the node's own key comes from the console output
    opens_ssh_ingress = True

    def __init__(
        self,
        config: Mapping[str, str] | None = None,
        *,
        session=None,
        clock: Callable[[], datetime] | None = None,
        sleep: Callable[[float], None] | None = None,
        poll_s: float | None = None,
        max_workers: int | None = None,
    ) -> None:
        """`session`: a boto3.Session to use instead of one built from the environment (tests).
        `poll_s`: seconds between state polls (waiters); `max_workers`: concurrent launches."""
        self.config = dict(config or {})
        self._session = session
        self._clock = clock or (lambda: datetime.now(timezone.utc))
        self.sleep = sleep or time.sleep
        self.poll_s = float(poll_s if poll_s is not None else self._num("poll_s", 5))
        self.max_workers = int(max_workers or self._num("max_workers", 16))
        self._clients: dict[tuple[str, str], object] = {}
        self._vcpus: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def _num(self, key: str, default: float) -> float:
        raw = self.config.get(key, "")
        if raw == "":
            return default
        try:
            value = float(raw)
        except ValueError:
            raise UsageError(f"providers.aws.{key} in config.yaml must be a number, not {raw!r}") from None
        if value < 0:
            raise UsageError(f"providers.aws.{key} in config.yaml must not be negative ({raw})")
        return value

    # --- credentials and clients ---------------------------------------------------------

    def check_credentials(self) -> None:
        """Resolve credentials the way the AWS CLI does, minus the instance-metadata and container
        endpoints (those are network calls): config `credentials: instance-role` opts into them."""
        if self.config.get("credentials") == "instance-role":
            return
        self._require_sdk()
        import botocore.session
        from botocore.exceptions import BotoCoreError, ProfileNotFound

        if self._session is not None:
            creds = self._session.get_credentials()
        else:
            if os.environ.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") or os.environ.get(
                    "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
                return
            profile = self.config.get("profile") or None
            try:
                session = botocore.session.Session(profile=profile)
                resolver = session.get_component("credential_provider")
                for name in ("iam-role", "container-role"):
                    resolver.remove(name)
                creds = resolver.load_credentials()
            except ProfileNotFound as exc:
                raise AuthMissing(
                    f"AWS profile {exc.kwargs.get('profile')!r} (from AWS_PROFILE or providers.aws.profile) is not in "
                    "~/.aws/config or ~/.aws/credentials: run `aws configure --profile NAME` or fix the name"
                ) from exc
            except BotoCoreError as exc:
                raise AuthMissing(f"AWS credentials could not be read ({exc}); fix ~/.aws/config or run `aws configure`") from exc
        if creds is None:
            raise AuthMissing(
                "no AWS credentials: set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or run `aws configure`"
            )

    def verify_credentials(self, region: str) -> None:
        with self._aws("check the credentials (sts get-caller-identity)", region=region):
            self.client("sts", region).get_caller_identity()

    @staticmethod
    def _require_sdk() -> None:
        try:
            import boto3  # noqa: F401
            import botocore.session  # noqa: F401
        except ImportError as exc:
            from gpuplan.fleet.provider import missing_extra

            raise missing_extra("aws", exc) from exc

    def client(self, service: str, region: str):
        """The boto3 client for `service` in `region`, made once and shared by all threads."""
        key = (service, region)
        with self._lock:
            if key not in self._clients:
                self._require_sdk()
                self.check_credentials()
                from botocore.config import Config
                session = self._session or boto3_session(self.config.get("profile") or None)
                # Service Quotas is only read, and an unanswered quota falls back to config:
                # no retries there (moto answers some of its calls with a 500).
                retries = {"total_max_attempts": 1} if service == "service-quotas" else {"max_attempts": 5}
                cfg = Config(retries={**retries, "mode": "standard"},
                             max_pool_connections=max(10, self.max_workers * 2), user_agent_extra="gpuplan")
                from botocore.exceptions import InvalidRegionError

                try:
                    self._clients[key] = session.client(service, region_name=region, config=cfg)
                except InvalidRegionError:
                    raise UsageError(f"bad AWS region {region!r}: use a region name such as us-east-1 or "
                                     "ap-northeast-1") from None
            return self._clients[key]

    def _ec2(self, region: str):
        return self.client("ec2", region)

    @contextmanager
    def _aws(self, what: str, size: str = "", region: str = ""):
        """Turn a botocore exception into gpuplan's one-line error."""
        from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError, NoCredentialsError, WaiterError

        try:
            yield
        except GpuplanError:
            raise
        except ClientError as exc:
            raise self._client_error(exc, what, size, region) from exc
        except NoCredentialsError as exc:
            raise AuthMissing(
                "no AWS credentials: set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or run `aws configure`"
            ) from exc
        except EndpointConnectionError as exc:
            why = unreachable(exc) or _one_line(exc)
            raise ProviderError(f"cannot reach AWS to {what}: {why} (region {region or '?'}, AWS_ENDPOINT_URL if set)"
                                ) from exc
        except WaiterError as exc:
            raise ProviderError(f"AWS did not finish to {what}: {_one_line(exc)}") from exc
        except BotoCoreError as exc:
            why = unreachable(exc)
            if why:
                raise ProviderError(f"cannot reach AWS to {what}: {why}") from exc
            raise ProviderError(f"AWS failed to {what}: {_one_line(exc)}") from exc

    def _client_error(self, exc, what: str, size: str, region: str) -> GpuplanError:
        code = _code(exc)
        message = _one_line((exc.response.get("Error") or {}).get("Message") or exc)
        if code in _CAPACITY_CODES:
            return CapacityUnavailable(
                f"AWS has no capacity for {size or 'this size'} in {region} right now ({code}: {message}); "
                "retry later or pick another region", code=code
            )
        if code.startswith(("InvalidInstanceType", "Unsupported")) or (
                code == "InvalidParameterValue" and "instance type" in message.lower()):
            return UsageError(
                f"AWS instance type {size!r} cannot be used in {region} ({code}: {message}); "
                "check the name (e.g. g4dn.xlarge) or pick another region"
            )
        if code in _QUOTA_CODES:
            quota = _FAMILY_QUOTA.get(family(size), "L-1216C47A")
            return QuotaExceeded(
                f"AWS refused to {what}: {code}: {message}; raise quota {quota} ({QUOTAS.get(quota, quota)}): "
                f"{self.how_to_raise(_region_of(region), quota)}", quota=quota
            )
        if code.startswith("InvalidAMIID"):
            return UsageError(
                f"AWS image not usable in {region} ({code}: {message}); set providers.aws.ami in config.yaml "
                "to an AMI id of that region, or pass --image"
            )
        if code in _AUTH_CODES:
            return AuthMissing(
                f"AWS refused the credentials while trying to {what} ({code}); check AWS_PROFILE or "
                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or run `aws configure`"
            )
        return ProviderError(f"AWS failed to {what}: {code or 'error'}: {message}")

    # --- sizes and quota -----------------------------------------------------------------

    def vcpus(self, region: str, size: str) -> int | None:
        """From describe_instance_types; None where EC2 does not describe the type (moto lacks
        p3.2xlarge): then the request's own figure counts."""
        key = (region, size)
        if key not in self._vcpus:
            with self._aws(f"describe instance type {size}", size, region):
                types = _unless_unknown("InvalidInstanceType", self._ec2(region).describe_instance_types,
                                        "InstanceTypes", InstanceTypes=[size])
            self._vcpus[key] = int(types[0]["VCpuInfo"]["DefaultVCpus"]) if types else None
        return self._vcpus[key]

    def _quota_code(self, size: str, spot: bool = False) -> str:
        configured = self.config.get("spot_quota_code" if spot else "quota_code", "").strip()
        if configured:
            return configured
        code = _FAMILY_QUOTA.get(family(size))
        if spot and code:
            return _SPOT_QUOTA[code]
        if code is None:
            raise UsageError(
                f"gpuplan does not know which EC2 vCPU quota instance family {family(size)!r} counts against; "
                "set providers.aws.quota_code in config.yaml (Service Quotas console > Amazon EC2 lists the codes)"
            )
        return code

    def how_to_raise(self, region: str, quota_code: str) -> str:
        return (f"aws service-quotas request-service-quota-increase --service-code ec2 --quota-code {quota_code} "
                f"--desired-value {NEW_LIMIT} --region {region}")

    def quota(self, region: str, size: str, spot: bool = False) -> list[QuotaUsage]:
        """One tier: the family's Running On-Demand vCPU quota in the region, or with `spot` its
        Spot quota; each counts only the instances of its own market."""
        from botocore.exceptions import ClientError

        code = self._quota_code(size, spot)
        label = QUOTAS.get(code, code)
        description = f"{label} in {region}"
        limit = None
        with self._aws(f"read EC2 quota {code} in {region}", size, region):
            sq = self.client("service-quotas", region)
            why = ""
            try:
                limit = int(sq.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])
            except ClientError as exc:
                why = _code(exc)
                if why == "NoSuchResourceException":
                    # No applied value: AWS answers with the default quota instead.
                    try:
                        limit = int(sq.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"])
                    except ClientError:
                        pass
                elif why in _AUTH_CODES:
                    raise
            if limit is None:
                configured = self.config.get("quota_vcpus", "").strip()
                if not configured:
                    raise UsageError(
                        f"AWS Service Quotas did not report quota {code} ({label}) in {region} ({why}); "
                        "set providers.aws.quota_vcpus in config.yaml to your limit, or grant servicequotas:GetServiceQuota"
                    )
                limit = int(self._num("quota_vcpus", 0))
                description += f" (limit {limit} from providers.aws.quota_vcpus: Service Quotas answered {why})"
            used = self._used_vcpus(region, code, spot)
        return [QuotaUsage(code, description, limit, used, "vCPUs", self.how_to_raise(region, code))]

    def _used_vcpus(self, region: str, code: str, spot: bool) -> int:
        ec2 = self._ec2(region)
        used = 0
        for page in ec2.get_paginator("describe_instances").paginate(
                Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]):
            for r in page["Reservations"]:
                for i in r["Instances"]:
                    if (i.get("InstanceLifecycle") == "spot") != spot or self._quota_code(i["InstanceType"], spot) != code:
                        continue
                    cpu = i.get("CpuOptions") or {}
                    if cpu.get("CoreCount") and cpu.get("ThreadsPerCore"):
                        used += int(cpu["CoreCount"]) * int(cpu["ThreadsPerCore"])
                    else:  # EC2 always reports CpuOptions; an emulator may not
                        used += self.vcpus(region, i["InstanceType"]) or 0
        return used

    def zones(self, region: str, size: str) -> list[str]:
        """The region's available zones that offer `size` (EC2's instance type offerings), in
        name order; [] with config `subnet_id` (its zone is the only one) or where EC2 lists none."""
        if self.config.get("subnet_id", "").strip():
            return []
        ec2 = self._ec2(region)
        with self._aws(f"list the zones of {region} that offer {size}", size, region):
            up = {z["ZoneName"] for z in ec2.describe_availability_zones(Filters=[
                {"Name": "state", "Values": ["available"]}, {"Name": "zone-type", "Values": ["availability-zone"]},
            ])["AvailabilityZones"]}
            offered = {o["Location"] for page in ec2.get_paginator("describe_instance_type_offerings").paginate(
                LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [size]}])
                for o in page["InstanceTypeOfferings"]}
        return sorted(up & offered)

    def default_regions(self) -> list[str]:
        configured = [r.strip() for r in self.config.get("regions", "").split(",") if r.strip()]
        if configured:
            return configured
        env = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        return ([env] if env and env not in DEFAULT_REGIONS else []) + list(DEFAULT_REGIONS)

    # --- create --------------------------------------------------------------------------

    def machines(self, region: str, match: Mapping[str, str]) -> dict[str, Instance]:
        return {node: self._instance(i) for node, i in self._instances_by_node(region, match).items()}

    def launch(self, spec: NodeSpec, names: Sequence[str]) -> list[Instance]:
        """The cluster's key pair and security group, then one instance per name, concurrently.
        On failures the launched ones stay tagged and the first error is raised, saying how
        many failed."""
        ami, root_device, root_gib = self._image(spec.region, spec.image)
        key_name = self._key_pair(spec)
        group_id = self._security_group(spec)
        expires = self._clock() + timedelta(seconds=spec.ttl_s) if spec.ttl_s else None
        launched: dict[str, dict] = {}
        failures: list[tuple[str, GpuplanError]] = []

        def launch_one(node: str) -> None:
            try:
                launched[node] = self._run_instance(spec, node, ami, root_device, max(spec.disk_gib, root_gib),
                                                    key_name, group_id, expires)
            except GpuplanError as exc:
                failures.append((node, exc))

        with ThreadPoolExecutor(max_workers=max(1, min(self.max_workers, len(names)))) as pool:
            list(pool.map(launch_one, names))
        if failures:
            # a quota refusal first: it ends the region, where a capacity one moves to the next zone
            failures.sort(key=lambda f: (not isinstance(f[1], QuotaExceeded), list(names).index(f[0])))
            node, exc = failures[0]
            more = f" ({len(failures)} of {len(names)} launches failed)" if len(failures) > 1 else ""
            exc.args = (f"{exc}{more}",)
            raise exc
        return [self._instance(launched[n]) for n in names]

    def _instances_by_node(self, region: str, match: Mapping[str, str]) -> dict:
        out: dict = {}
        with self._aws(f"list the instances of cluster {match[TAG_CLUSTER]}", region=region):
            pages = self._ec2(region).get_paginator("describe_instances").paginate(Filters=[
                *({"Name": f"tag:{k}", "Values": [v]} for k, v in match.items()),
                {"Name": "instance-state-name", "Values": LIVE_STATES},
            ])
            for page in pages:
                for r in page["Reservations"]:
                    for i in r["Instances"]:
                        out.setdefault(_tags(i.get("Tags")).get(TAG_NODE, i["InstanceId"]), i)
        return out

    def _image(self, region: str, image: str | None) -> tuple[str, str, int]:
        """(AMI id, root device name, root volume GiB) of the spec's image, else config `ami`,
        else Canonical's Ubuntu 24.04 from its public SSM parameter."""
        ami = image or self.config.get("ami", "").strip()
        if not ami:
            try:
                with self._aws(f"look up the Ubuntu 24.04 AMI of {region}", region=region):
                    ami = self.client("ssm", region).get_parameter(Name=UBUNTU_SSM)["Parameter"]["Value"]
            except (ProviderError, UsageError) as exc:
                raise UsageError(
                    f"no default Ubuntu 24.04 AMI for {region} (SSM {UBUNTU_SSM}: {exc}); "
                    "set providers.aws.ami in config.yaml to an AMI id of that region"
                ) from exc
        with self._aws(f"describe AMI {ami}", region=region):
            found = _unless_unknown("InvalidAMIID", self._ec2(region).describe_images, "Images", ImageIds=[ami])
        if not found:
            raise UsageError(
                f"AMI {ami!r} does not exist in {region}; set providers.aws.ami in config.yaml to an AMI id of "
                "that region (or pass a gpuplan image built there)"
            )
        img = found[0]
        root = img.get("RootDeviceName") or "/dev/sda1"
        size = 0
        for m in img.get("BlockDeviceMappings") or []:
            if m.get("DeviceName") == root:
                size = int((m.get("Ebs") or {}).get("VolumeSize") or 0)
        return img["ImageId"], root, size

    def _key_pair(self, spec: NodeSpec) -> str:
        """Import the cluster's login key as `gpuplan-<cluster>-<installation>`. A key pair only
        seeds authorized_keys at launch, so an existing one of that name is replaced (the state
        may hold a newer key after a loss), but only when it carries this cluster's identity."""
        from botocore.exceptions import ClientError

        ec2, name = self._ec2(spec.region), tagging.account_name(spec.tags)
        args = dict(KeyName=name, PublicKeyMaterial=spec.ssh_public_key.encode(),
                    TagSpecifications=[{"ResourceType": "key-pair", "Tags": _tag_list(spec.tags)}])
        with self._aws(f"import key pair {name}", region=spec.region):
            try:
                ec2.import_key_pair(**args)
            except ClientError as exc:
                if _code(exc) != "InvalidKeyPair.Duplicate":
                    raise
                found = _unless_unknown("InvalidKeyPair", ec2.describe_key_pairs, "KeyPairs", KeyNames=[name])
                why = tagging.foreign(_tags(found[0].get("Tags")) if found else {}, tagging.identity(spec.tags))
                if why:
                    raise UsageError(f"AWS key pair {name} in {spec.region} belongs to another cluster ({why}); "
                                     "pick another --name") from None
                ec2.delete_key_pair(KeyName=name)
                ec2.import_key_pair(**args)
        return name

    def ssh_cidr(self, spec: NodeSpec) -> str:
        """Where SSH may come from: the spec's (gpuplan fills it), else config ssh_cidr."""
        cidr = (spec.ssh_cidr or self.config.get("ssh_cidr", "")).strip()
        if not cidr:
            raise UsageError("no SSH source for the security group: set providers.aws.ssh_cidr in config.yaml "
                             "(e.g. 203.0.113.5/32) or pass --ssh-from CIDR")
        return cidr if "/" in cidr else cidr + "/32"

    def _security_group(self, spec: NodeSpec) -> str:
        """The cluster's group, with both its rules. A group found from an earlier run gets any
        rule it lacks (a run killed between creating the group and authorizing it)."""
        from botocore.exceptions import ClientError

        ec2, region, name = self._ec2(spec.region), spec.region, tagging.account_name(spec.tags)
        cidr = self.ssh_cidr(spec)
        with self._aws(f"create security group {name}", region=region):
            vpc = self._vpc(region)
            flt = [{"Name": "group-name", "Values": [name]}] + ([{"Name": "vpc-id", "Values": [vpc]}] if vpc else [])
            groups = ec2.describe_security_groups(Filters=flt)["SecurityGroups"]
            if not groups:
                extra = {"VpcId": vpc} if vpc else {}
                try:
                    ec2.create_security_group(
                        GroupName=name, Description=f"gpuplan cluster {spec.cluster}", **extra,
                        TagSpecifications=[{"ResourceType": "security-group", "Tags": _tag_list(spec.tags)}])
                except ClientError as exc:
                    if _code(exc) != "InvalidGroup.Duplicate":
                        raise
                groups = ec2.describe_security_groups(Filters=flt)["SecurityGroups"]
            group = groups[0]
            group_id = group["GroupId"]
            why = tagging.foreign(_tags(group.get("Tags")), tagging.identity(spec.tags))
            if why:
                raise UsageError(f"AWS security group {name} in {region} belongs to another cluster ({why}); "
                                 "pick another --name")
            have = group.get("IpPermissions") or []
            wanted = [
                ({"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
                  "IpRanges": [{"CidrIp": cidr, "Description": "SSH from gpuplan's caller"}]},
                 any(p.get("FromPort") == 22 and cidr in [r.get("CidrIp") for r in p.get("IpRanges", [])] for p in have)),
                ({"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group_id, "Description": "within the cluster"}]},
                 any(pair.get("GroupId") == group_id for p in have for pair in p.get("UserIdGroupPairs", []))),
            ]
            # A resumed provision admits exactly what was asked: SSH rules of an earlier run
            # (a killed provision with another --ssh-from) go.
            stale = [{"IpProtocol": p.get("IpProtocol", "tcp"), "FromPort": 22, "ToPort": 22,
                      **({"IpRanges": [{"CidrIp": r["CidrIp"]} for r in others]} if others else {}),
                      **({"Ipv6Ranges": [{"CidrIpv6": r["CidrIpv6"]} for r in p.get("Ipv6Ranges", [])]}
                         if p.get("Ipv6Ranges") else {})}
                     for p in have if p.get("FromPort") == 22
                     for others in [[r for r in p.get("IpRanges", []) if r.get("CidrIp") != cidr]]
                     if others or p.get("Ipv6Ranges")]
            if stale:
                ec2.revoke_security_group_ingress(GroupId=group_id, IpPermissions=stale)
            for permission, present in wanted:
                if present:
                    continue
                try:
                    ec2.authorize_security_group_ingress(GroupId=group_id, IpPermissions=[permission])
                except ClientError as exc:
                    if _code(exc) != "InvalidPermission.Duplicate":
                        raise
        return group_id

    def _vpc(self, region: str) -> str | None:
        subnet = self.config.get("subnet_id", "").strip()
        if not subnet:
            return None
        subnets = self._ec2(region).describe_subnets(SubnetIds=[subnet])["Subnets"]
        return subnets[0]["VpcId"]

    def _run_instance(self, spec, node, ami, root_device, root_gib, key_name, group_id, expires) -> dict:
        tags = _tag_list({**tagging.for_node(spec.tags, node), "Name": node})
        args = dict(
            ImageId=ami, InstanceType=spec.size, MinCount=1, MaxCount=1, KeyName=key_name,
            SecurityGroupIds=[group_id], UserData=user_data(expires),
            MetadataOptions={"HttpTokens": "required", "HttpEndpoint": "enabled"},
            BlockDeviceMappings=[{"DeviceName": root_device, "Ebs": {
                "VolumeSize": root_gib, "VolumeType": "gp3", "DeleteOnTermination": True}}],
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}, {"ResourceType": "volume", "Tags": tags}],
        )
        if expires is not None or spec.spot or spec.self_stop:  # one-time Spot: a shutdown ends the request anyway
            args["InstanceInitiatedShutdownBehavior"] = "terminate"
        subnet = self.config.get("subnet_id", "").strip()
        if subnet:
            args["SubnetId"] = subnet
        elif spec.zone:  # the zone's default subnet (zones(): the default VPC has one per zone)
            args["Placement"] = {"AvailabilityZone": spec.zone}
        if spec.spot:
            args["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": {
                "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}}
        with self._aws(f"launch {node} ({spec.size})", spec.size, spec.zone or spec.region):
            [instance] = self._ec2(spec.region).run_instances(**args)["Instances"]
        return {**instance, "Tags": tags}

    # --- readiness -----------------------------------------------------------------------

    def _instance(self, i: dict) -> Instance:
        state = i["State"]["Name"]
        status = {"pending": "pending", "running": "running", "stopping": "stopped", "stopped": "stopped"}.get(
            state, "terminated")
        extra = {"size": i.get("InstanceType", ""), "image": i.get("ImageId", "")}
        name = _tags(i.get("Tags")).get(TAG_NODE, i["InstanceId"])
        return Instance(i["InstanceId"], name, status, i.get("PublicIpAddress"), i.get("PrivateIpAddress"), 22, extra)

    def _describe(self, region: str, ids: Sequence[str]) -> dict[str, dict]:
        """Instances by id; an id EC2 does not know is simply absent (a filter, not InstanceIds)."""
        out: dict[str, dict] = {}
        pages = self._ec2(region).get_paginator("describe_instances").paginate(
            Filters=[{"Name": "instance-id", "Values": list(ids)}])
        for page in pages:
            for r in page["Reservations"]:
                for i in r["Instances"]:
                    out[i["InstanceId"]] = i
        return out

    not_ready_hint = " with its SSH host key on the console output (the image's cloud-init must print it: keys_to_console)"

    def describe(self, region: str, ids: Sequence[str]) -> list[Instance]:
        """Each instance, with extra["host_key"] once it runs and cloud-init has printed its
        host key to the console output (read from GetConsoleOutput)."""
        with self._aws(f"read the state of {len(ids)} instance(s)", region=region):
            found = self._describe(region, ids)
        out: list[Instance] = []
        for iid in ids:
            if iid not in found:
                continue
            inst = self._instance(found[iid])
            if inst.status in ("terminated", "stopped"):
                raise ProviderError(
                    f"AWS instance {inst.name} ({iid}) is {found[iid]['State']['Name']} (TTL passed, or spot reclaimed?); "
                    "tear the cluster down and provision again")
            out.append(inst)
        running = [i for i in out if i.status == "running" and (i.public_ip or i.private_ip)]
        with ThreadPoolExecutor(max_workers=max(1, min(self.max_workers, len(running) or 1))) as pool:
            keys = dict(zip([i.id for i in running], pool.map(lambda i: self._console_host_key(region, i.id), running)))
        return [replace(i, extra={**i.extra, "host_key": keys[i.id]}) if keys.get(i.id) else i for i in out]

    def is_ready(self, inst: Instance) -> bool:
        return Provider.is_ready(self, inst) and bool(inst.extra.get("host_key"))

    def _console_host_key(self, region: str, instance_id: str) -> str | None:
        from botocore.exceptions import ClientError

        ec2 = self._ec2(region)
        with self._aws(f"read the console output of {instance_id}", region=region):
            try:
                output = ec2.get_console_output(InstanceId=instance_id, Latest=True).get("Output") or ""
            except ClientError as exc:
                if _code(exc) not in ("UnsupportedOperation", "InvalidParameterCombination", "InvalidParameter"):
                    raise
                output = ec2.get_console_output(InstanceId=instance_id).get("Output") or ""  # not a Nitro instance
        return console_host_key(output)  # botocore has already decoded the base64

    # --- images --------------------------------------------------------------------------

    def capture(self, region: str, instance_id: str, image_name: str, img_tags: Mapping[str, str]) -> Image:
        """create_image (EC2 reboots the instance for a consistent disk; it stays usable as a
        worker afterwards), wait until available, then tag its snapshots like the image.
        Idempotent by name: an own AMI of that name is returned."""
        ec2 = self._ec2(region)
        with self._aws(f"capture {instance_id} as image {image_name}", region=region):
            found = ec2.describe_images(Owners=["self"], Filters=[{"Name": "name", "Values": [image_name]}])["Images"]
            if found:
                image_id = found[0]["ImageId"]
            else:
                image_id = ec2.create_image(
                    InstanceId=instance_id, Name=image_name, Description=f"gpuplan image {image_name}",
                    TagSpecifications=[{"ResourceType": "image", "Tags": _tag_list(img_tags)}])["ImageId"]
            delay = max(self.poll_s, 0.01)
            ec2.get_waiter("image_available").wait(
                ImageIds=[image_id], WaiterConfig={"Delay": delay, "MaxAttempts": max(1, int(3600 / delay))})
            # Tagged afterwards rather than through TagSpecifications (moto rejects a snapshot
            # spec on CreateImage); the image's mappings find the snapshots either way.
            snaps = self._image_snapshots(region, image_id)
            if snaps:
                ec2.create_tags(Resources=snaps, Tags=_tag_list(img_tags))
        return Image(image_id, image_name, region)

    def _image_snapshots(self, region: str, image_id: str) -> list[str]:
        images = _unless_unknown("InvalidAMIID", self._ec2(region).describe_images, "Images", ImageIds=[image_id])
        return [m["Ebs"]["SnapshotId"] for img in images for m in img.get("BlockDeviceMappings") or []
                if (m.get("Ebs") or {}).get("SnapshotId")]

    # --- list and delete -----------------------------------------------------------------

    def list(self, region: str, tags: Mapping[str, str]) -> list[Resource]:
        """Instances (not terminated), volumes, security groups, key pairs, own AMIs and own
        snapshots carrying all `tags` (with no tags: all carrying gpuplan-owner). A snapshot
        behind an own AMI is not listed: it goes with its image."""
        flt = [{"Name": f"tag:{k}", "Values": [v]} for k, v in tags.items()] or [
            {"Name": "tag-key", "Values": [TAG_OWNER]}]
        ec2 = self._ec2(region)
        out: list[Resource] = []
        with self._aws(f"list gpuplan resources in {region}", region=region):
            for page in ec2.get_paginator("describe_instances").paginate(
                    Filters=flt + [{"Name": "instance-state-name", "Values": NOT_TERMINATED}]):
                for r in page["Reservations"]:
                    for i in r["Instances"]:
                        t = _tags(i.get("Tags"))
                        out.append(Resource("instance", i["InstanceId"], region, t, t.get(TAG_NODE, i["InstanceId"])))
            for page in ec2.get_paginator("describe_volumes").paginate(Filters=flt):
                for v in page["Volumes"]:
                    t = _tags(v.get("Tags"))
                    out.append(Resource("disk", v["VolumeId"], region, t, t.get("Name", v["VolumeId"])))
            for page in ec2.get_paginator("describe_security_groups").paginate(Filters=flt):
                for g in page["SecurityGroups"]:
                    out.append(Resource("security-group", g["GroupId"], region, _tags(g.get("Tags")), g["GroupName"]))
            for k in ec2.describe_key_pairs(Filters=flt)["KeyPairs"]:
                out.append(Resource("key-pair", k.get("KeyPairId") or k["KeyName"], region, _tags(k.get("Tags")),
                                    k["KeyName"]))
            own = ec2.describe_images(Owners=["self"])["Images"]
            backing = {m["Ebs"]["SnapshotId"] for img in own for m in img.get("BlockDeviceMappings") or []
                       if (m.get("Ebs") or {}).get("SnapshotId")}
            for img in ec2.describe_images(Owners=["self"], Filters=flt)["Images"]:
                t = _tags(img.get("Tags"))
                out.append(Resource("image", img["ImageId"], region, t, t.get(TAG_IMAGE, img.get("Name", ""))))
            for page in ec2.get_paginator("describe_snapshots").paginate(OwnerIds=["self"], Filters=flt):
                for s in page["Snapshots"]:
                    if s["SnapshotId"] not in backing:
                        out.append(Resource("snapshot", s["SnapshotId"], region, _tags(s.get("Tags")), s["SnapshotId"]))
        return out

    def delete(self, region: str, resources: Sequence[Resource], timeout_s: float = 900) -> None:
        """Terminate instances and wait until they are gone, then volumes, security groups, key
        pairs, AMIs (deregistered, then their snapshots) and snapshots. Not found is success;
        what is still in use (a security group whose network interfaces EC2 has not released
        yet) is retried until `timeout_s`."""
        unknown = sorted({r.kind for r in resources if r.kind not in DELETE_ORDER})
        if unknown:
            raise ProviderError(f"the AWS provider cannot delete resources of kind {', '.join(unknown)}; "
                                "delete them in the EC2 console")
        deadline = time.monotonic() + timeout_s
        ec2 = self._ec2(region)
        by_kind = {k: [r for r in resources if r.kind == k] for k in DELETE_ORDER}
        if by_kind["instance"]:
            self._terminate(region, [r.id for r in by_kind["instance"]], deadline)
        for r in by_kind["disk"]:
            self._retrying(f"delete volume {r.id}", region, deadline, ec2.delete_volume, VolumeId=r.id)
        for r in by_kind["security-group"]:
            self._retrying(f"delete security group {r.name or r.id}", region, deadline,
                           ec2.delete_security_group, GroupId=r.id)
        for r in by_kind["key-pair"]:
            key = {"KeyName": r.name} if r.name else {"KeyPairId": r.id}
            self._retrying(f"delete key pair {r.name or r.id}", region, deadline, ec2.delete_key_pair, **key)
        for r in by_kind["image"]:
            with self._aws(f"read the snapshots of image {r.id}", region=region):
                snaps = self._image_snapshots(region, r.id)
            self._retrying(f"deregister image {r.id}", region, deadline, ec2.deregister_image, ImageId=r.id)
            for s in snaps:
                self._retrying(f"delete snapshot {s}", region, deadline, ec2.delete_snapshot, SnapshotId=s)
        for r in by_kind["snapshot"]:
            self._retrying(f"delete snapshot {r.id}", region, deadline, ec2.delete_snapshot, SnapshotId=r.id)

    def _terminate(self, region: str, ids: list[str], deadline: float) -> None:
        from botocore.exceptions import ClientError

        ec2 = self._ec2(region)
        with self._aws(f"terminate {len(ids)} instance(s)", region=region):
            live = [i for i, d in self._describe(region, ids).items() if d["State"]["Name"] != "terminated"]
            if live:
                try:
                    ec2.terminate_instances(InstanceIds=live)
                except ClientError as exc:
                    if not _code(exc).startswith("InvalidInstanceID"):
                        raise
                    for i in live:  # one unknown id fails the whole batch: go one by one
                        try:
                            ec2.terminate_instances(InstanceIds=[i])
                        except ClientError as exc1:
                            if not _code(exc1).startswith("InvalidInstanceID"):
                                raise
            while True:
                left = [i for i, d in self._describe(region, ids).items() if d["State"]["Name"] != "terminated"]
                if not left:
                    return
                if time.monotonic() >= deadline:
                    raise ProviderError(f"AWS instance(s) still not terminated: {', '.join(left)}; run the teardown again")
                self.sleep(self.poll_s)

    def _retrying(self, what: str, region: str, deadline: float, call, **kwargs) -> None:
        from botocore.exceptions import ClientError

        while True:
            with self._aws(what, region=region):
                try:
                    call(**kwargs)
                    return
                except ClientError as exc:
                    code = _code(exc)
                    if code in _NOT_FOUND or code.endswith(".NotFound"):
                        return
                    busy = code in ("DependencyViolation", "VolumeInUse", "IncorrectState", "InvalidSnapshot.InUse")
                    if not busy or time.monotonic() >= deadline:
                        raise
            self.sleep(max(self.poll_s, 0.01))


def _unless_unknown(code_prefix: str, describe, key: str, **kwargs) -> list:
    """describe(**kwargs)[key], or [] when EC2 answers that the thing asked about does not exist."""
    from botocore.exceptions import ClientError

    try:
        return describe(**kwargs)[key]
    except ClientError as exc:
        if not _code(exc).startswith(code_prefix):
            raise
        return []


def _region_of(where: str) -> str:
    """us-east-1 of us-east-1a (a zone is its region and a letter); a region stays as it is."""
    return where[:-1] if re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d+[a-z]", where) else where


def _one_line(exc) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else exc.__class__.__name__
