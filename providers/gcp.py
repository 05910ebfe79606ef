"""Google Cloud: Compute Engine instances through the official google-cloud-compute client (REST).

Sizes. A machine type with its GPUs built in (`g2-standard-4` = 1 L4, `a2-highgpu-1g` = 1 A100,
`a3-highgpu-8g` = 8 H100), or an N1 type with GPUs attached, written
`n1-standard-4+nvidia-tesla-t4` (one) or `n1-standard-8+nvidia-tesla-t4x2` (two). A region
(`asia-northeast1`) places the machines in the first of its zones that offers the machine type
and the accelerator (machineTypes.get / acceleratorTypes.get); a zone (`asia-northeast1-a`) or
config `zone` pins them.

Layout. Per node one instance named `<node>-<installation>` (instance names are unique per zone
and project, so they carry the installation), from the Ubuntu 24.04 LTS public image family
(`projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64`, or config `image`, or a
captured image), its boot disk deleted with it (autoDelete) and labelled like it, on the
project's `default` network (config `network`) with an ephemeral external address. Per cluster
two firewall rules on that network, `gpuplan-<cluster>-<installation>-ssh` (TCP 22 from
NodeSpec.ssh_cidr only, the caller's address unless asked otherwise) and `...-internal` (every
protocol between the cluster's own nodes), both aimed at the network tag
`gpuplan-<cluster>-<installation>` that only this cluster's instances carry. Firewall rules have
no labels: their description holds the cluster's tags as JSON, and a rule of that name whose
description names another owner or installation is never adopted or rewritten.

Labels. GCP label values allow only lowercase letters, digits, `_` and `-` (63 at most): a tag
value that fits is the label value; any other (an owner like `Alice.Smith`) is labelled
`h-<sha256 prefix>` and matched by that. Every instance, disk and image also keeps its exact
tags as JSON in its description, which is what list() reports.

Host keys. GCE returns instance metadata to anyone allowed to read the instance, and its metadata
server serves it to every process on the node, so no private key goes there (see
gpuplan.fleet.provider). The node keeps the host key cloud-init generates; cloud-init
prints its public half between "-----BEGIN SSH HOST KEY KEYS-----" and "-----END ...", on the
serial console on Ubuntu's GCE images. describe() reads it with instances.getSerialPortOutput
(an authenticated API call) and returns it as Instance.extra["host_key"], so the first SSH is
pinned. The login key goes in the instance's `ssh-keys` metadata with project-wide keys blocked.

Spot and TTL. Spot: `scheduling.provisioningModel: SPOT` with instanceTerminationAction DELETE,
so a reclaimed machine is deleted with its boot disk and bills nothing after (as AWS's one-time
Spot terminates); automaticRestart false and onHostMaintenance TERMINATE, the only maintenance
behaviour a preemptible machine has (Compute Engine's Scheduling.OnHostMaintenance reference).
TTL: `scheduling.maxRunDuration` with instanceTerminationAction DELETE: GCE itself deletes the
instance (and its boot disk) at the expiry; Compute Engine takes 30 s to 120 days ("Limit the
run time of a VM"), so a TTL outside that is refused before anything is made. The firewall rules (free) remain
until `gpuplan teardown`. A shutdown from inside the machine stops it (TERMINATED): compute and
GPU billing end, the boot disk (a few yen a day) bills until teardown.

Quota. Three tiers: the project's GPUS_ALL_REGIONS (0 in a new project), the region's
per-model metric (NVIDIA_T4_GPUS, NVIDIA_L4_GPUS, NVIDIA_A100_GPUS, NVIDIA_H100_GPUS...) and the
region's vCPUs (`<FAMILY>_CPUS` where the region reports it, e.g. A2_CPUS, else CPUS). A Spot
machine counts against the PREEMPTIBLE_ metric of a tier where the project has one granted
(limit above 0), else against the standard one. A GPU tier of a size with g > 1 GPUs per machine
is expressed in machines of g GPUs, so the one quota rule counts it right.

Credentials: application default credentials (GOOGLE_APPLICATION_CREDENTIALS, or `gcloud auth
application-default login`; on a GCE VM config `credential: default`), the project from config
`project`, GOOGLE_CLOUD_PROJECT, or the credentials file. Never printed or stored. Tests inject
`credentials` and `api_endpoint` (a loopback fake) and a short `poll_s`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

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
from gpuplan.fleet.tags import TAG_CLUSTER, TAG_IMAGE, TAG_INSTALLATION, TAG_NODE

DEFAULT_IMAGE = "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64"
DEFAULT_REGIONS = ["asia-northeast1", "asia-northeast2", "us-central1"]
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
# maxRunDuration's range (Compute Engine, "Limit the run time of a VM": 30 seconds to 120 days).
TTL_MIN_S, TTL_MAX_S = 30, 120 * 24 * 3600
# Dependents before what they depend on: a firewall rule may go any time, an image after the
# instances made from it (GCE refuses nothing here, but the order keeps a sweep readable).
DELETE_ORDER = ["instance", "disk", "firewall", "image"]

# Accelerator type -> the regional quota metric it counts against (Compute Engine "GPU quota").
GPU_METRICS = {
    "nvidia-tesla-t4": "NVIDIA_T4_GPUS",
    "nvidia-tesla-v100": "NVIDIA_V100_GPUS",
    "nvidia-tesla-p100": "NVIDIA_P100_GPUS",
    "nvidia-tesla-p4": "NVIDIA_P4_GPUS",
    "nvidia-l4": "NVIDIA_L4_GPUS",
    "nvidia-tesla-a100": "NVIDIA_A100_GPUS",
    "nvidia-a100-80gb": "NVIDIA_A100_80GB_GPUS",
    "nvidia-h100-80gb": "NVIDIA_H100_GPUS",
    "nvidia-h100-mega-80gb": "NVIDIA_H100_MEGA_GPUS",
}
ALL_REGIONS = "GPUS_ALL_REGIONS"

_SIZE = re.compile(r"^(?P<mt>[a-z][a-z0-9-]*[a-z0-9])(?:\+(?P<acc>[a-z][a-z0-9-]*?)(?:x(?P<n>[1-9][0-9]*))?)?$")
_LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
_ZONE = re.compile(r"^(?P<region>[a-z]+-[a-z]+[0-9]+)-[a-z]$")


def label_value(value: str) -> str:
    """A tag value as a GCP label value: itself when it fits the label rules, else a stable hash."""
    if _LABEL_VALUE.match(value) and not value.startswith("h-"):
        return value
    return "h-" + hashlib.sha256(value.encode()).hexdigest()[:32]


def labels_of(tags: Mapping[str, str]) -> dict[str, str]:
    return {k: label_value(v) for k, v in tags.items()}


def rfc1035(name: str, limit: int = 63) -> str:
    """A GCE resource name ([a-z]([-a-z0-9]*[a-z0-9])?), a hash suffix where it had to change."""
    clean = re.sub(r"[^a-z0-9-]", "-", name.lower()).strip("-") or "x"
    if not clean[0].isalpha():
        clean = "g-" + clean
    if clean == name and len(clean) <= limit:
        return clean
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{clean[: limit - 9].rstrip('-')}-{digest}"


def parse_size(size: str) -> tuple[str, str, int]:
    """(machine type, attached accelerator type or "", its count)."""
    m = _SIZE.match(size.strip())
    if not m:
        raise UsageError(f"GCP size {size!r} is not a machine type (g2-standard-4) or an N1 type with GPUs "
                         "attached (n1-standard-4+nvidia-tesla-t4, n1-standard-8+nvidia-tesla-t4x2)")
    return m["mt"], m["acc"] or "", int(m["n"] or (1 if m["acc"] else 0))


def _tags_in(description: str) -> dict[str, str]:
    """The exact tags gpuplan keeps as JSON in a resource's description ({} if none)."""
    try:
        doc = json.loads(description or "")
    except ValueError:
        return {}
    tags = doc.get("gpuplan") if isinstance(doc, dict) else None
    return {str(k): str(v) for k, v in tags.items()} if isinstance(tags, dict) else {}


def _description(tags: Mapping[str, str]) -> str:
    return json.dumps({"gpuplan": dict(tags)}, sort_keys=True, separators=(",", ":"))


_ZONE_TAIL = re.compile(r"-[a-z]$")  # asia-northeast1-a -> asia-northeast1


def _last(url: str) -> str:
    return (url or "").rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class _Placement:
    zone: str
    machine_type: str
    vcpus: int
    accelerator: str  # accelerator type of the GPUs (built in or attached), "" for none
    gpus: int
    attached: bool  # N1 style: guestAccelerators in the instance body


class GcpProvider(Provider):
    name = "gcp"
    default_ssh_user = "ubuntu"
    sdk_modules = ("google.cloud.compute_v1", "google.auth")
    injects_host_keys = False  # the node's own key comes from the serial console
    opens_ssh_ingress = True
    not_ready_hint = (" with its SSH host key on the serial console (the image's cloud-init must print it: "
                      "keys_to_console)")

    def __init__(self, config: Mapping[str, str] | None = None, *, credentials=None, api_endpoint: str | None = None,
                 poll_s: float | None = None, sleep=None, op_timeout_s: float = 900) -> None:
        self.config = dict(config or {})
        self._credentials = credentials
        self._endpoint = api_endpoint or self.config.get("api_endpoint") or None
        self.poll_s = 2.0 if poll_s is None else float(poll_s)
        self.sleep = sleep or time.sleep
        self.op_timeout_s = op_timeout_s
        self._clients: dict[str, object] = {}
        self._project: str | None = None
        self._placements: dict[tuple[str, str], list[_Placement]] = {}
        self._zones: dict[str, list[str]] = {}

    # --- credentials and clients ---------------------------------------------------------

    def _credentials_file(self) -> Path | None:
        env = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
        if env:
            return Path(env)
        config_dir = Path(os.environ.get("CLOUDSDK_CONFIG") or Path.home() / ".config" / "gcloud")
        adc = config_dir / "application_default_credentials.json"
        return adc if adc.exists() else None

    def project(self) -> str:
        if self._project:
            return self._project
        found = (self.config.get("project") or os.environ.get("GOOGLE_CLOUD_PROJECT")
                 or os.environ.get("CLOUDSDK_CORE_PROJECT") or "").strip()
        if not found:
            path = self._credentials_file()
            if path is not None and path.is_file():
                try:
                    doc = json.loads(path.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    doc = {}
                found = str(doc.get("project_id") or doc.get("quota_project_id") or "")
        return found

    def check_credentials(self) -> None:
        """Presence only (config, env, the ADC file); no network call, nothing printed."""
        if self._credentials is None and self.config.get("credential") != "default":
            env = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
            if env and not Path(env).is_file():
                raise AuthMissing(f"GOOGLE_APPLICATION_CREDENTIALS names {env}, which is not a file: point it at a "
                                  "service-account key or run `gcloud auth application-default login`")
            if self._credentials_file() is None:
                raise AuthMissing(
                    "no Google Cloud credentials found: run `gcloud auth application-default login`, or export "
                    "GOOGLE_APPLICATION_CREDENTIALS=/path/to/key.json (on a GCE VM set providers.gcp.credential: default)")
        if not self.project():
            raise AuthMissing("no Google Cloud project: set providers.gcp.project in config.yaml or export "
                              "GOOGLE_CLOUD_PROJECT")

    def _client(self, kind: str):
        if kind not in self._clients:
            self.check_credentials()
            try:
                from google.api_core.client_options import ClientOptions
                from google.cloud import compute_v1
            except ImportError as exc:
                from gpuplan.fleet.provider import missing_extra

                raise missing_extra("gcp", exc) from exc
            credentials = self._credentials
            if credentials is None:
                import google.auth
                from google.auth.exceptions import DefaultCredentialsError

                try:
                    credentials, found_project = google.auth.default(scopes=SCOPES)
                except DefaultCredentialsError as exc:
                    raise AuthMissing(f"Google Cloud credentials could not be loaded ({_first_line(exc)}); run "
                                      "`gcloud auth application-default login` or fix GOOGLE_APPLICATION_CREDENTIALS") from exc
                self._credentials = credentials
                self._project = self.project() or found_project
            options = ClientOptions(api_endpoint=self._endpoint) if self._endpoint else None
            cls = {"instances": compute_v1.InstancesClient, "firewalls": compute_v1.FirewallsClient,
                   "images": compute_v1.ImagesClient, "disks": compute_v1.DisksClient,
                   "regions": compute_v1.RegionsClient, "projects": compute_v1.ProjectsClient,
                   "machine_types": compute_v1.MachineTypesClient,
                   "accelerator_types": compute_v1.AcceleratorTypesClient}[kind]
            client = cls(credentials=credentials, transport="rest", client_options=options)
            if self._endpoint:
                # google-cloud-compute builds the operations clients that extended operations poll
                # without the client's options, so they would poll compute.googleapis.com: give
                # them the same endpoint (an emulator or the tests' loopback fake).
                services = getattr(getattr(client, "_transport", None), "_extended_operations_services", None)
                if isinstance(services, dict):
                    for key, ops_cls in (("zone_operations", compute_v1.ZoneOperationsClient),
                                         ("global_operations", compute_v1.GlobalOperationsClient),
                                         ("region_operations", compute_v1.RegionOperationsClient)):
                        services[key] = ops_cls(credentials=credentials, transport="rest", client_options=options)
            self._clients[kind] = client
        return self._clients[kind]

    def check_features(self, spot: bool = False, ttl_s: int | None = None, capture: bool = False) -> None:
        super().check_features(spot=spot, ttl_s=ttl_s, capture=capture)
        if ttl_s and not TTL_MIN_S <= ttl_s <= TTL_MAX_S:
            raise UsageError(f"GCP deletes a machine at its TTL (scheduling.maxRunDuration) only between 30 s and "
                             f"120 days; --ttl asked {int(ttl_s)} s")

    def verify_credentials(self, region: str) -> None:
        with self._gce(f"read project {self.project()}"):
            self._client("projects").get(project=self.project())

    @contextmanager
    def _gce(self, what: str, size: str = "", region: str = ""):
        """Turn a google-api-core / google-auth exception into gpuplan's one-line error."""
        from google.api_core import exceptions as gx
        from google.auth import exceptions as ax

        try:
            yield
        except GpuplanError:
            raise
        except ax.DefaultCredentialsError as exc:
            raise AuthMissing(f"Google Cloud credentials could not be loaded ({_first_line(exc)}); run "
                              "`gcloud auth application-default login`") from exc
        except ax.RefreshError as exc:
            why = unreachable(exc)
            if why:
                raise ProviderError(f"cannot reach Google to {what}: {why}") from exc
            raise AuthMissing(f"Google refused the credentials while trying to {what} ({_first_line(exc)}); "
                              "run `gcloud auth application-default login` again") from exc
        except ax.TransportError as exc:
            raise ProviderError(f"cannot reach Google Cloud to {what}: {unreachable(exc) or _first_line(exc)}") from exc
        except gx.GoogleAPICallError as exc:
            raise self._api_error(exc, what, size, region) from exc
        except gx.RetryError as exc:
            raise ProviderError(f"Google Cloud did not finish to {what} in time ({_first_line(exc)}); "
                                "run it again, or tear the cluster down") from exc
        except Exception as exc:
            why = unreachable(exc)
            if why:
                raise ProviderError(f"cannot reach Google Cloud to {what}: {why}") from exc
            raise

    def _api_error(self, exc, what: str, size: str, region: str) -> GpuplanError:
        from google.api_core import exceptions as gx

        codes = [str(getattr(e, "code", None) or (e.get("code") if isinstance(e, dict) else "") or
                     (e.get("reason") if isinstance(e, dict) else "") or "") for e in (exc.errors or [])]
        codes = [c for c in codes if c] + ([exc.reason] if getattr(exc, "reason", None) else [])
        message = _first_line(getattr(exc, "message", None) or exc)
        joined = " ".join(codes).upper()
        if "QUOTA" in joined or "quota" in message.lower() and isinstance(exc, gx.Forbidden | gx.TooManyRequests):
            # GCE names the metric ("Quota 'NVIDIA_T4_GPUS' exceeded. Limit: 0.0 in region X."): say how to raise it
            said = " ".join([message, *(str(getattr(e, "message", None) or (e.get("message") if isinstance(e, dict) else "")
                                             or "") for e in (exc.errors or []))])
            metric = re.search(r"Quota '([A-Z0-9_]+)' exceeded", said)
            where = re.search(r"in region ([a-z0-9-]+)", said)
            if metric:
                how = self.how_to_raise(where.group(1) if where else _ZONE_TAIL.sub("", region), metric.group(1))
                return QuotaExceeded(f"GCP quota {metric.group(1)} exceeded while trying to {what}; "
                                     f"{how.replace(NEW_LIMIT, 'what the fleet needs')}", quota=metric.group(1))
            return QuotaExceeded(
                f"GCP quota exceeded while trying to {what}: {message}; raise it: Google Cloud console > IAM & Admin > "
                f"Quotas & System Limits (filter the metric and region), `gpuplan check gcp` shows each tier")
        if "RESOURCE_POOL_EXHAUSTED" in joined or "STOCKOUT" in joined or "resources available" in message.lower():
            code = next((c for c in codes if "EXHAUSTED" in c.upper() or "STOCKOUT" in c.upper()), codes[0] if codes else "")
            return CapacityUnavailable(f"GCP has no capacity for {size or 'this size'} in {region or 'this zone'} right now "
                                       f"({code or 'stockout'}); retry later or pick another region", code=code)
        if isinstance(exc, gx.Unauthorized):
            return AuthMissing(f"Google refused the credentials while trying to {what} ({message}); "
                               "run `gcloud auth application-default login` again")
        if isinstance(exc, gx.Forbidden):
            return AuthMissing(f"Google Cloud denied access while trying to {what} ({message}); the credentials need "
                               f"the Compute Admin role on project {self.project()} and the Compute Engine API enabled")
        return ProviderError(f"GCP failed to {what}: {getattr(exc, 'code', '')} {message}".replace("  ", " "))

    def _wait(self, ops: Sequence[tuple[str, object]], what: str, size: str = "", region: str = "") -> None:
        """Wait for every operation, then raise the first failure (one line, naming how many failed)."""
        from google.api_core.future import polling

        poll = polling.DEFAULT_POLLING.with_delay(initial=self.poll_s, maximum=max(self.poll_s, self.poll_s * 8),
                                                  multiplier=1.5).with_timeout(self.op_timeout_s)
        failures: list[tuple[str, Exception]] = []
        for label, op in ops:
            try:
                op.result(timeout=self.op_timeout_s, polling=poll)  # type: ignore[attr-defined]
            except Exception as exc:  # noqa: BLE001 - each is turned into one line below
                failures.append((label, exc))
        if failures:
            first_label, first = failures[0]
            more = f" ({len(failures)} of {len(ops)} failed)" if len(failures) > 1 else ""
            with self._gce(f"{what} {first_label}{more}", size, region):
                raise first

    # --- placement, sizes and quota -------------------------------------------------------

    def _region_zone(self, where: str) -> tuple[str, str | None]:
        m = _ZONE.match(where)
        if m:
            return m["region"], where
        pinned = (self.config.get("zone") or "").strip()
        if pinned and pinned.startswith(where + "-"):
            return where, pinned
        return where, None

    def _region_zones(self, region: str) -> list[str]:
        if region not in self._zones:
            from google.api_core import exceptions as gx

            with self._gce(f"read region {region}", region=region):
                try:
                    found = self._client("regions").get(project=self.project(), region=region)
                except gx.NotFound:
                    raise UsageError(f"GCP region {region!r} does not exist; e.g. asia-northeast1 (Tokyo), "
                                     "asia-northeast2 (Osaka), us-central1") from None
            self._zones[region] = sorted(_last(z) for z in found.zones)
        return self._zones[region]

    def _placement(self, where: str, size: str) -> _Placement:
        """The zone and shape of `size` in `where` (a region: its first zone that offers it)."""
        return self._placements_in(where, size)[0]

    def _placements_in(self, where: str, size: str) -> list[_Placement]:
        """The zone and shape of `size` in each zone of `where` that offers it (a zone: that one)."""
        key = (where, size)
        if key in self._placements:
            return self._placements[key]
        from google.api_core import exceptions as gx

        machine, acc, count = parse_size(size)
        region, zone = self._region_zone(where)
        zones = [zone] if zone else self._region_zones(region)
        found: list[_Placement] = []
        for z in zones:
            with self._gce(f"read machine type {machine} in {z}", size, region):
                try:
                    mt = self._client("machine_types").get(project=self.project(), zone=z, machine_type=machine)
                    if acc:
                        self._client("accelerator_types").get(project=self.project(), zone=z, accelerator_type=acc)
                except gx.NotFound:
                    continue
            built_in = list(mt.accelerators)
            if acc and built_in:
                raise UsageError(f"GCP machine type {machine} has GPUs built in; drop '+{acc}' from the size")
            if acc and not machine.startswith("n1-"):
                raise UsageError(f"GCP attaches GPUs to N1 machine types only; {machine} cannot take +{acc}")
            accelerator, gpus = (acc, count) if acc else (
                (built_in[0].guest_accelerator_type, int(built_in[0].guest_accelerator_count)) if built_in else ("", 0))
            found.append(_Placement(z, machine, int(mt.guest_cpus), accelerator, gpus, bool(acc)))
        if not found:
            what = f"{machine} with {acc}" if acc else machine
            raise UsageError(f"GCP size {what} is not offered in {where} (zones {', '.join(zones)}): check the name "
                             "or pick another region")
        self._placements[key] = found
        return found

    def zones(self, region: str, size: str) -> list[str]:
        """The region's zones that offer the machine type and its GPUs, in name order; [] where a
        zone is named (the region given as a zone, or config `zone`): then that one alone."""
        if self._region_zone(region)[1]:
            return []
        return [p.zone for p in self._placements_in(region, size)]

    def vcpus(self, region: str, size: str) -> int:
        return self._placement(region, size).vcpus

    def how_to_raise(self, region: str, metric: str) -> str:
        where = "globally" if metric.endswith(ALL_REGIONS) else f"in {region}"
        return (f"raise it: Google Cloud console > IAM & Admin > Quotas & System Limits > filter metric {metric} {where} > "
                f"Edit quota to {NEW_LIMIT} (project {self.project()}); new projects may first need billing history")

    def quota(self, region: str, size: str, spot: bool = False) -> list[QuotaUsage]:
        """The project's GPUS_ALL_REGIONS, the region's per-model GPU metric and its vCPU metric;
        for Spot the PREEMPTIBLE_ metric of a tier where one is granted. A metric GCE does not
        report counts as limit 0 (fail closed)."""
        placed = self._placement(region, size)
        reg, _ = self._region_zone(region)
        with self._gce(f"read quotas of {reg}", size, reg):
            regional = {q.metric: q for q in self._client("regions").get(project=self.project(), region=reg).quotas}
            project = {q.metric: q for q in self._client("projects").get(project=self.project()).quotas} if placed.gpus else {}

        def pick(table, metric: str):
            if spot:
                pre = table.get("PREEMPTIBLE_" + metric)
                if pre is not None and pre.limit > 0:
                    return "PREEMPTIBLE_" + metric, pre
            return metric, table.get(metric)

        tiers: list[QuotaUsage] = []
        family = placed.machine_type.split("-", 1)[0].upper()
        cpu_metric = f"{family}_CPUS" if f"{family}_CPUS" in regional else "CPUS"
        if placed.gpus:
            gpu_metric = GPU_METRICS.get(placed.accelerator)
            if gpu_metric is None:
                raise UsageError(f"gpuplan does not know the quota metric of GPU {placed.accelerator}; "
                                 "pick another size or check `gcloud compute regions describe`")
            for table, metric, label in ((project, ALL_REGIONS, "GPUs in all regions of the project"),
                                         (regional, gpu_metric, f"{placed.accelerator} GPUs in {reg}")):
                name, q = pick(table, metric) if metric != ALL_REGIONS else (metric, table.get(metric))
                limit, used = (int(q.limit), int(q.usage)) if q is not None else (0, 0)
                tiers.append(self._gpu_tier(name, label, limit, used, placed.gpus, reg))
        name, q = pick(regional, cpu_metric)
        limit, used = (int(q.limit), int(q.usage)) if q is not None else (0, 0)
        tiers.append(QuotaUsage(name, f"vCPUs ({name}) in {reg}", limit, used, "vCPUs", self.how_to_raise(reg, name)))
        return tiers

    def _gpu_tier(self, name: str, label: str, limit: int, used: int, per: int, region: str) -> QuotaUsage:
        how = self.how_to_raise(region, name)
        if per == 1:
            return QuotaUsage(name, label, limit, used, "GPUs", how)
        free = max(0, limit - used) // per
        busy = math.ceil(used / per)
        return QuotaUsage(name, f"{label}: limit {limit}, used {used} GPUs, counted in machines of {per}",
                          busy + free, busy, f"machines of {per} GPUs", how.replace(NEW_LIMIT, f"{NEW_LIMIT} machines x {per}"))

    # --- machines --------------------------------------------------------------------------

    def _instance_name(self, tags: Mapping[str, str], node: str) -> str:
        installation = tags.get(TAG_INSTALLATION)
        return rfc1035(f"{node}-{installation}" if installation else node)

    def _network_tag(self, tags: Mapping[str, str]) -> str:
        return rfc1035(tagging.account_name(tags), 50)

    def _aggregated(self, kind: str, match: Mapping[str, str]) -> list[tuple[str, Any]]:
        """(zone, item) of every instance or disk whose labels carry `match` (encoded)."""
        client = self._client(kind)
        flt = " AND ".join(f'labels.{k} = "{v}"' for k, v in sorted(labels_of(match).items()))
        request = {"project": self.project(), "filter": flt} if flt else {"project": self.project()}
        out = []
        for scope, listing in client.aggregated_list(request=request):
            items = listing.instances if kind == "instances" else listing.disks
            for item in items:
                if tagging.carries(dict(item.labels), labels_of(match)):
                    out.append((_last(scope), item))
        return out

    def _exact_tags(self, item) -> dict[str, str]:
        return _tags_in(item.description) or dict(item.labels)

    def machines(self, region: str, match: Mapping[str, str]) -> dict[str, Instance]:
        reg, _ = self._region_zone(region)
        with self._gce(f"list instances in {reg}"):
            found = self._aggregated("instances", match)
        out: dict[str, Instance] = {}
        for zone, vm in found:
            tags = self._exact_tags(vm)
            if not zone.startswith(reg + "-") or not tagging.carries(tags, match):
                continue
            inst = self._instance(zone, vm)
            out[inst.name] = inst
        return out

    def launch(self, spec: NodeSpec, names: Sequence[str]) -> list[Instance]:
        """The cluster's firewall rules, then one instance per name, every insert started before
        any is awaited. On a failure what was made stays (labelled) and the first error is raised."""
        from google.cloud import compute_v1

        placed = next((p for p in self._placements_in(spec.region, spec.size) if p.zone == spec.zone), None) if (
            spec.zone) else None
        placed = placed or self._placement(spec.zone or spec.region, spec.size)
        reg, _ = self._region_zone(spec.region)
        self._firewalls(spec)
        image = self._source_image(spec.image)
        client = self._client("instances")
        ops = []
        with self._gce(f"create instances in {placed.zone}", spec.size, reg):
            for node in names:
                body = self._instance_body(spec, node, placed, image, compute_v1)
                ops.append((node, client.insert(project=self.project(), zone=placed.zone, instance_resource=body)))
        self._wait(ops, "create instance", spec.size, placed.zone)
        have = self.machines(reg, tagging.identity(spec.tags))
        return [have[n] for n in names if n in have]

    def _instance_body(self, spec: NodeSpec, node: str, placed: _Placement, image: str, compute_v1):
        tags = tagging.for_node(spec.tags, node)
        labels = labels_of(tags)
        scheduling = compute_v1.Scheduling(on_host_maintenance="TERMINATE" if placed.gpus or spec.spot else "MIGRATE",
                                           automatic_restart=not spec.spot)
        if spec.spot:
            scheduling.provisioning_model = "SPOT"
            scheduling.instance_termination_action = "DELETE"
        if spec.ttl_s:
            scheduling.max_run_duration = compute_v1.Duration(seconds=int(spec.ttl_s))
            scheduling.instance_termination_action = "DELETE"
        items = [
            compute_v1.Items(key="ssh-keys", value=f"{spec.ssh_user}:{spec.ssh_public_key.strip()}"),
            compute_v1.Items(key="block-project-ssh-keys", value="TRUE"),
            compute_v1.Items(key="user-data", value=cloud_config({"ssh_keys_to_console": ["ed25519"]})),
        ]
        body = compute_v1.Instance(
            name=self._instance_name(spec.tags, node),
            description=_description(tags),
            machine_type=f"zones/{placed.zone}/machineTypes/{placed.machine_type}",
            labels=labels,
            tags=compute_v1.Tags(items=[self._network_tag(spec.tags)]),
            metadata=compute_v1.Metadata(items=items),
            scheduling=scheduling,
            disks=[compute_v1.AttachedDisk(boot=True, auto_delete=True, initialize_params=compute_v1.AttachedDiskInitializeParams(
                source_image=image, disk_size_gb=int(spec.disk_gib), labels=labels,
                description=_description(tags)))],
            network_interfaces=[compute_v1.NetworkInterface(
                network=f"global/networks/{self.config.get('network') or 'default'}",
                access_configs=[compute_v1.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")])],
        )
        if placed.attached:
            body.guest_accelerators = [compute_v1.AcceleratorConfig(
                accelerator_type=f"zones/{placed.zone}/acceleratorTypes/{placed.accelerator}",
                accelerator_count=placed.gpus)]
        return body

    def _source_image(self, image: str | None) -> str:
        chosen = (image or self.config.get("image") or DEFAULT_IMAGE).strip()
        if chosen.startswith(("projects/", "global/", "https://")):
            return chosen
        if re.fullmatch(r"[a-z][-a-z0-9]{0,62}", chosen):  # a captured image of this project, by name
            return f"projects/{self.project()}/global/images/{chosen}"
        raise UsageError(f"GCP image {chosen!r} is neither an image name nor a path "
                         "(projects/PROJECT/global/images/NAME or .../images/family/FAMILY)")

    def ssh_source(self, spec: NodeSpec) -> str:
        source = (spec.ssh_cidr or self.config.get("ssh_source", "")).strip()
        if not source:
            raise UsageError("no SSH source for the firewall rule: set providers.gcp.ssh_source in config.yaml "
                             "(e.g. 203.0.113.5) or pass --ssh-from CIDR")
        return source if "/" in source else f"{source}/32"

    def _firewalls(self, spec: NodeSpec) -> None:
        """Two rules per cluster (SSH from the caller, all traffic inside the cluster), made once;
        a resumed provision whose SSH source differs patches the rule to exactly what was asked."""
        from google.api_core import exceptions as gx
        from google.cloud import compute_v1

        client = self._client("firewalls")
        base = rfc1035(tagging.account_name(spec.tags), 54)
        target = self._network_tag(spec.tags)
        network = f"global/networks/{self.config.get('network') or 'default'}"
        source = self.ssh_source(spec)
        want = {
            f"{base}-ssh": compute_v1.Firewall(
                name=f"{base}-ssh", network=network, direction="INGRESS", priority=1000,
                description=_description(spec.tags), source_ranges=[source], target_tags=[target],
                allowed=[compute_v1.Allowed(I_p_protocol="tcp", ports=["22"])]),
            f"{base}-internal": compute_v1.Firewall(
                name=f"{base}-internal", network=network, direction="INGRESS", priority=1000,
                description=_description(spec.tags), source_tags=[target], target_tags=[target],
                allowed=[compute_v1.Allowed(I_p_protocol="all")]),
        }
        ops = []
        identity = tagging.identity(spec.tags)
        with self._gce(f"create the firewall rules of {base}", spec.size, spec.region):
            for name, rule in want.items():
                try:
                    have = client.get(project=self.project(), firewall=name)
                except gx.NotFound:
                    ops.append((name, client.insert(project=self.project(), firewall_resource=rule)))
                    continue
                why = tagging.foreign(_tags_in(have.description), identity)
                if why:
                    raise UsageError(f"GCP firewall rule {name} belongs to another cluster ({why}); pick another --name")
                if name.endswith("-ssh") and list(have.source_ranges) != [source]:
                    patch = compute_v1.Firewall(source_ranges=[source])
                    ops.append((name, client.patch(project=self.project(), firewall=name, firewall_resource=patch)))
        self._wait(ops, "create firewall rule", spec.size, spec.region)

    # --- readiness ---------------------------------------------------------------------------

    def _instance(self, zone: str, vm) -> Instance:
        state = vm.status
        status = {"PROVISIONING": "pending", "STAGING": "pending", "RUNNING": "running", "REPAIRING": "pending",
                  "STOPPING": "stopped", "STOPPED": "stopped", "SUSPENDING": "stopped", "SUSPENDED": "stopped",
                  "TERMINATED": "stopped"}.get(state, "pending")
        public = private = None
        for nic in vm.network_interfaces:
            private = private or nic.network_i_p or None
            for ac in nic.access_configs:
                public = public or ac.nat_i_p or None
        tags = self._exact_tags(vm)
        extra = {"zone": zone, "size": _last(vm.machine_type), "state": state}
        return Instance(f"zones/{zone}/instances/{vm.name}", tags.get(TAG_NODE, vm.name), status, public, private, 22, extra)

    def describe(self, region: str, ids: Sequence[str]) -> list[Instance]:
        """Each instance, with extra["host_key"] once it runs and cloud-init has printed its host key
        on the serial console (instances.getSerialPortOutput)."""
        from google.api_core import exceptions as gx

        client = self._client("instances")
        out: list[Instance] = []
        for iid in ids:
            zone, name = _zone_name(iid)
            with self._gce(f"read the state of instance {name}"):
                try:
                    vm = client.get(project=self.project(), zone=zone, instance=name)
                except gx.NotFound:
                    continue
            inst = self._instance(zone, vm)
            if inst.status == "stopped":
                raise ProviderError(
                    f"GCP instance {inst.name} ({name}) is {vm.status} (stopped from inside, or being deleted by GCE at"
                    " its TTL?); tear the cluster down and provision again")
            if inst.status == "running" and inst.public_ip:
                with self._gce(f"read the serial console of {name}"):
                    try:
                        text = client.get_serial_port_output(project=self.project(), zone=zone, instance=name).contents
                    except gx.NotFound:
                        text = ""
                key = console_host_key(text or "")
                if key:
                    inst = replace(inst, extra={**inst.extra, "host_key": key})
            out.append(inst)
        return out

    def is_ready(self, inst: Instance) -> bool:
        return Provider.is_ready(self, inst) and bool(inst.public_ip) and bool(inst.extra.get("host_key"))

    # --- images ------------------------------------------------------------------------------

    def capture(self, region: str, instance_id: str, image_name: str, img_tags: Mapping[str, str]) -> Image:
        """Stop the instance, then image its boot disk (global image, labelled gpuplan-image). The
        instance stays stopped (its disk bills) until teardown; idempotent by image name."""
        from google.api_core import exceptions as gx
        from google.cloud import compute_v1

        zone, name = _zone_name(instance_id)
        img_name = rfc1035(image_name)
        images = self._client("images")
        with self._gce(f"capture instance {name} as image {img_name}", region=region):
            try:
                images.get(project=self.project(), image=img_name)
                return Image(f"global/images/{img_name}", image_name, region)
            except gx.NotFound:
                pass
            instances = self._client("instances")
            vm = instances.get(project=self.project(), zone=zone, instance=name)
            boot = next((d.source for d in vm.disks if d.boot), "")
            if vm.status not in ("STOPPED", "TERMINATED"):
                self._wait([(name, instances.stop(project=self.project(), zone=zone, instance=name))], "stop instance")
            body = compute_v1.Image(name=img_name, source_disk=boot, labels=labels_of(img_tags),
                                    description=_description(img_tags))
            op = images.insert(project=self.project(), image_resource=body)
        self._wait([(img_name, op)], "create image", region=region)
        return Image(f"global/images/{img_name}", image_name, region)

    # --- list and delete -----------------------------------------------------------------------

    def default_regions(self) -> list[str]:
        configured = self.config.get("regions", "")
        return [r.strip() for r in configured.split(",") if r.strip()] or list(DEFAULT_REGIONS)


    def list(self, region: str, tags: Mapping[str, str]) -> list[Resource]:
        """Instances and disks in the region's zones, firewall rules and images (global) carrying all `tags`."""
        reg, _ = self._region_zone(region)
        out: list[Resource] = []
        with self._gce(f"list gpuplan resources in {reg}", region=reg):
            for kind, client_kind in (("instance", "instances"), ("disk", "disks")):
                for zone, item in self._aggregated(client_kind, tags):
                    exact = self._exact_tags(item)
                    if not zone.startswith(reg + "-") or TAG_CLUSTER not in exact or not tagging.carries(exact, tags):
                        continue
                    name = exact.get(TAG_NODE, item.name) if kind == "instance" else item.name
                    out.append(Resource(kind, f"zones/{zone}/{client_kind}/{item.name}", reg, exact, name))
            fw = self._client("firewalls")
            for rule in fw.list(project=self.project()):
                exact = _tags_in(rule.description)
                if exact and TAG_CLUSTER in exact and tagging.carries(exact, tags):
                    out.append(Resource("firewall", f"global/firewalls/{rule.name}", reg, exact, rule.name))
            flt = " AND ".join(f'labels.{k} = "{v}"' for k, v in sorted(labels_of(tags).items()))
            request = {"project": self.project(), "filter": flt} if flt else {"project": self.project()}
            for img in self._client("images").list(request=request):
                exact = self._exact_tags(img)
                if TAG_IMAGE in exact and tagging.carries(exact, tags):
                    out.append(Resource("image", f"global/images/{img.name}", reg, exact, exact.get(TAG_IMAGE, img.name)))
        return out

    def delete(self, region: str, resources: Sequence[Resource]) -> None:
        """In DELETE_ORDER, every delete of a kind started before any is awaited; not found = deleted."""
        from google.api_core import exceptions as gx

        unknown = sorted({r.kind for r in resources if r.kind not in DELETE_ORDER})
        if unknown:
            raise ProviderError(f"the GCP provider cannot delete resources of kind {', '.join(unknown)}; "
                                "delete them in the Google Cloud console")
        project = self.project()
        for kind in DELETE_ORDER:
            batch = [r for r in resources if r.kind == kind]
            if not batch:
                continue
            ops = []
            with self._gce(f"delete {len(batch)} {kind}(s)", region=region):
                for r in batch:
                    try:
                        if kind in ("instance", "disk"):
                            zone, name = _zone_name(r.id)
                            if kind == "instance":
                                op = self._client("instances").delete(project=project, zone=zone, instance=name)
                            else:
                                op = self._client("disks").delete(project=project, zone=zone, disk=name)
                        elif kind == "firewall":
                            op = self._client("firewalls").delete(project=project, firewall=_last(r.id))
                        else:
                            op = self._client("images").delete(project=project, image=_last(r.id))
                    except gx.NotFound:
                        continue
                    ops.append((_last(r.id), op))
            self._wait_deleted(ops, kind, region)

    def _wait_deleted(self, ops, kind: str, region: str) -> None:
        from google.api_core import exceptions as gx

        kept = []
        for label, op in ops:
            try:
                self._wait([(label, op)], f"delete {kind}", region=region)
            except GpuplanError as exc:
                if isinstance(exc.__cause__, gx.NotFound):
                    continue
                kept.append(exc)
        if kept:
            raise kept[0]



def _zone_name(rid: str) -> tuple[str, str]:
    """(zone, name) of "zones/ZONE/instances/NAME" (or disks)."""
    parts = rid.strip("/").split("/")
    try:
        i = parts.index("zones")
        return parts[i + 1], parts[i + 3]
    except (ValueError, IndexError):
        raise UsageError(f"{rid!r} is not a GCP zonal resource id (zones/ZONE/instances/NAME)") from None


def _first_line(exc) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else exc.__class__.__name__
