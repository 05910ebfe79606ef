"""Azure: VMs through Azure Resource Manager, one resource group per cluster.

Layout. Cluster `demo` lives in resource group `gpuplan-demo-<installation>` (group names are
unique per subscription, so they carry the installation; tagged gpuplan-cluster, gpuplan-owner
and gpuplan-installation; a group of that name with other tags is never adopted or re-tagged):
one VNet/subnet, one NSG that lets in SSH only (from NodeSpec.ssh_cidr, the caller's address
unless asked otherwise), and per node a Standard static public IP, a NIC and a VM whose OS disk
and NIC carry deleteOption=Delete. Deleting the cluster deletes the resource group. Images live
in `gpuplan-images-<region>`, tagged gpuplan-image/gpuplan-owner but not gpuplan-cluster, so a
cluster teardown keeps them.

TTL. Azure's own guard is the VM auto-shutdown schedule (a Microsoft.DevTestLab/schedules
resource named shutdown-computevm-<vm>), set to fire daily at the UTC minute of now+ttl, so
for a TTL under 24 h it fires once at the expiry (a TTL of a day or more fires at that time of
day, i.e. possibly before the full TTL). It *deallocates* the VM: compute billing stops, but
the OS disk and the static public IP keep billing until the resource group is deleted, which
only `gpuplan teardown` (or a sweep) does. An in-guest poweroff would be worse: an Azure VM
stopped from inside stays allocated and keeps billing compute.

Host keys. The one-time host key goes in customData, which ARM never returns (a VM GET omits it)
and the instance metadata service does not serve (it serves userData, a different property);
on the VM only root can read it. gpuplan rotates it at the first login anyway.

Credentials: AZURE_SUBSCRIPTION_ID (or config `subscription_id`) plus anything
DefaultAzureCredential accepts. Tests inject `credential`, `transport`, `polling_interval=0`
and `retry_total=0`, passed to every SDK client.
"""

from __future__ import annotations

import base64
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from gpuplan.errors import AuthMissing, CapacityUnavailable, GpuplanError, ProviderError, QuotaExceeded, UsageError, unreachable
from gpuplan.fleet import tags as tagging
from gpuplan.fleet.provider import NEW_LIMIT, Image, Instance, NodeSpec, Provider, QuotaUsage, Resource, cloud_config
from gpuplan.fleet.tags import TAG_CLUSTER, TAG_IMAGE, TAG_NODE, TAG_OWNER

SCHEDULE_API = "2018-09-15"
DEFAULT_IMAGE = ("Canonical", "ubuntu-24_04-lts", "server", "latest")
DEFAULT_REGIONS = ["japaneast", "eastus", "westus2"]
VNET, SUBNET, NSG = "gpuplan-vnet", "default", "gpuplan-nsg"
LOW_PRIORITY = "lowPriorityCores"  # ARM's usage name for the regional Spot vCPU quota

KINDS = {
    "microsoft.compute/virtualmachines": "instance",
    "microsoft.compute/disks": "disk",
    "microsoft.compute/images": "image",
    "microsoft.compute/snapshots": "snapshot",
    "microsoft.network/networkinterfaces": "nic",
    "microsoft.network/publicipaddresses": "public-ip",
    "microsoft.network/networksecuritygroups": "security-group",
    "microsoft.network/virtualnetworks": "network",
    "microsoft.devtestlab/schedules": "schedule",
}
# Dependents before what they depend on: ARM refuses to delete a NIC still used by a VM, etc.
DELETE_ORDER = ["schedule", "instance", "nic", "public-ip", "disk", "snapshot", "security-group", "network", "image"]


def cluster_group(tags: Mapping[str, str]) -> str:
    """The cluster's resource group: "gpuplan-<cluster>-<installation>" (tags.account_name)."""
    return tagging.account_name(tags)


def image_group(region: str) -> str:
    return f"gpuplan-images-{region}"


@dataclass(frozen=True)
class _Sku:
    name: str
    family: str
    vcpus: int
    restriction: str  # reason code when not offered to this subscription in the region, else ""
    zones: tuple[str, ...] = ()  # the region's availability zones that offer it ("1", "2", "3"), sorted


def _split_id(rid: str) -> tuple[str, str]:
    """(resource group, last name) of an ARM id."""
    parts = rid.strip("/").split("/")
    low = [p.lower() for p in parts]
    try:
        group = parts[low.index("resourcegroups") + 1]
    except (ValueError, IndexError):
        raise UsageError(f"{rid!r} is not an Azure resource id (/subscriptions/.../resourceGroups/...)") from None
    return group, parts[-1]


def _all_deleted(begins: Sequence[Callable[[], object]]) -> None:
    """Start every delete before awaiting any (Azure runs them in parallel); not found = deleted."""
    from azure.core.exceptions import ResourceNotFoundError

    pollers = []
    for begin in begins:
        try:
            pollers.append(begin())
        except ResourceNotFoundError:
            pass
    for p in pollers:
        try:
            p.result()
        except ResourceNotFoundError:
            pass


class AzureProvider(Provider):
    name = "azure"
    default_ssh_user = "azureuser"
    sdk_modules = ("azure.identity", "azure.mgmt.compute", "azure.mgmt.network", "azure.mgmt.resource")
    opens_ssh_ingress = True
    # Run with sudo on the builder before capture_image: Azure images must be deprovisioned first.
    capture_prep_command = "waagent -deprovision+user -force"

    def __init__(
        self,
        config: Mapping[str, str] | None = None,
        *,
        credential=None,
        transport=None,
        polling_interval: float | None = None,
        retry_total: int | None = None,
        clock=None,
        sleep=None,
    ) -> None:
        self.config = dict(config or {})
        self._credential = credential
        self._client_kwargs = {
            k: v for k, v in (("transport", transport), ("polling_interval", polling_interval),
                              ("retry_total", retry_total)) if v is not None
        }
        self.poll_s = 5.0 if polling_interval is None else float(polling_interval)
        self._clock = clock or (lambda: datetime.now(timezone.utc))
        self.sleep = sleep or time.sleep
        self._clients = None
        self._skus: dict[str, dict[str, _Sku]] = {}

    # --- credentials and clients ---------------------------------------------------------

    def _subscription(self) -> str:
        return self.config.get("subscription_id") or os.environ.get("AZURE_SUBSCRIPTION_ID", "")

    def check_credentials(self) -> None:
        """Presence only (env vars, `az login` profile, config); no network call."""
        if not self._subscription():
            raise AuthMissing(
                "AZURE_SUBSCRIPTION_ID is not set: export it (`az account show --query id -o tsv` prints it) "
                "or set providers.azure.subscription_id in config.yaml"
            )
        if self._credential is not None or self.config.get("credential") == "default":
            return
        env = os.environ
        service_principal = env.get("AZURE_CLIENT_ID") and env.get("AZURE_TENANT_ID") and (
            env.get("AZURE_CLIENT_SECRET") or env.get("AZURE_CLIENT_CERTIFICATE_PATH") or env.get("AZURE_FEDERATED_TOKEN_FILE"))
        managed_identity = env.get("IDENTITY_ENDPOINT") or env.get("MSI_ENDPOINT")
        cli_dir = Path(env.get("AZURE_CONFIG_DIR") or Path.home() / ".azure")
        if service_principal or managed_identity or (cli_dir / "azureProfile.json").exists():
            return
        raise AuthMissing(
            "no Azure credentials found: set AZURE_CLIENT_ID, AZURE_TENANT_ID and AZURE_CLIENT_SECRET, "
            "or run `az login` (on an Azure VM with a managed identity set providers.azure.credential: default)"
        )

    def _sdk(self):
        if self._clients is None:
            self.check_credentials()
            try:
                from azure.mgmt.compute import ComputeManagementClient
                from azure.mgmt.network import NetworkManagementClient
                from azure.mgmt.resource.resources import ResourceManagementClient

                if self._credential is None:
                    from azure.identity import DefaultAzureCredential
            except ImportError as exc:
                from gpuplan.fleet.provider import missing_extra

                raise missing_extra("azure", exc) from exc
            credential = self._credential
            if credential is None:
                credential = DefaultAzureCredential()
            self._token_source = credential
            sub = self._subscription()
            self._clients = (
                ResourceManagementClient(credential, sub, **self._client_kwargs),
                NetworkManagementClient(credential, sub, **self._client_kwargs),
                ComputeManagementClient(credential, sub, **self._client_kwargs),
            )
        return self._clients

    def verify_credentials(self, region: str) -> None:
        self._sdk()
        with self._arm("get a token for Azure Resource Manager", region=region):
            self._token_source.get_token("https://management.azure.com/.default")

    @contextmanager
    def _arm(self, what: str, size: str = "", region: str = ""):
        """Turn an azure-core exception into gpuplan's one-line error."""
        from azure.core.exceptions import AzureError, ClientAuthenticationError, HttpResponseError, ServiceRequestError

        try:
            yield
        except GpuplanError:
            raise
        except ClientAuthenticationError as exc:
            why = unreachable(exc)  # a credential that could not reach Entra ID is not a refused one
            if why:
                raise ProviderError(f"cannot reach Azure to {what}: {why}") from exc
            raise AuthMissing(
                f"Azure refused the credentials while trying to {what} ({_first_line(exc)}); "
                "run `az login` or check AZURE_CLIENT_ID / AZURE_TENANT_ID / AZURE_CLIENT_SECRET"
            ) from exc
        except HttpResponseError as exc:
            raise self._http_error(exc, what, size, region) from exc
        except ServiceRequestError as exc:
            raise ProviderError(f"cannot reach Azure to {what}: {unreachable(exc) or _first_line(exc)}") from exc
        except AzureError as exc:
            raise ProviderError(f"Azure failed to {what}: {_first_line(exc)}") from exc

    def _http_error(self, exc, what: str, size: str, region: str) -> GpuplanError:
        err = getattr(exc, "error", None)
        code = getattr(err, "code", None) or ""
        message = _first_line(getattr(err, "message", None) or exc)
        # ARM's quota error is 409 OperationNotAllowed, which azure-core raises as ResourceExistsError.
        if code == "OperationNotAllowed" and "quota" in message.lower():
            # ARM names the quota ("exceeding approved standardNCASv3_T4Family Cores quota") and the
            # limit it would take; then the one command that raises it, as the preflight says it
            named = re.search(r"approved (\S+) Cores quota", message)
            location = re.search(r"Location: ([a-z0-9]+)", message)
            need = re.search(r"New Limit Required: (\d+)", message)
            if named and (location or region):
                how = self.how_to_raise((location.group(1) if location else region), named.group(1))
                how = how.replace(NEW_LIMIT, need.group(1)) if need else how
                return QuotaExceeded(f"Azure quota {named.group(1)} exceeded while trying to {what}: {message}; {how}",
                                     quota=named.group(1))
            return QuotaExceeded(
                f"Azure quota exceeded while trying to {what}: {message}; raise it: Azure portal > Subscriptions > "
                "Usage + quotas, or `az quota create ...` (see `az quota create --help`)"
            )
        if code in ("SkuNotAvailable", "NotAvailableForSubscription") or (
                code == "InvalidParameter" and size and size.lower() in message.lower()):
            return UsageError(
                f"Azure size {size} is not available in {region} ({code}): it may be retired or not offered there; "
                "pick another size or region"
            )
        if code in ("AllocationFailed", "ZonalAllocationFailed", "OverconstrainedAllocationRequest"):
            return CapacityUnavailable(
                f"Azure has no capacity for {size} in {region} right now ({code}); retry later or pick another region",
                code=code)
        return ProviderError(f"Azure failed to {what}: {code or exc.status_code}: {message}")

    # --- sizes and quota -----------------------------------------------------------------

    def _sku(self, region: str, size: str) -> _Sku:
        if region not in self._skus:
            _, _, cmp = self._sdk()
            skus: dict[str, _Sku] = {}
            with self._arm(f"list VM sizes in {region}", size, region):
                for s in cmp.resource_skus.list(filter=f"location eq '{region}'"):
                    if (s.resource_type or "").lower() != "virtualmachines":
                        continue
                    caps = {c.name: c.value for c in s.capabilities or []}
                    reasons = [
                        str(getattr(r.reason_code, "value", r.reason_code) or "restricted") for r in s.restrictions or []
                        if r.type == "Location" and region.lower() in [v.lower() for v in r.values_property or []]
                    ]
                    zoned = {z for info in s.location_info or [] if (info.location or "").lower() == region.lower()
                             for z in info.zones or []}
                    zoned -= {z for r in s.restrictions or [] if r.type == "Zone"
                              for z in (getattr(r.restriction_info, "zones", None) or [])}
                    skus[s.name.lower()] = _Sku(s.name, s.family or "", int(caps.get("vCPUs", 0)),
                                                reasons[0] if reasons else "", tuple(sorted(zoned)))
            self._skus[region] = skus
        sku = self._skus[region].get(size.lower())
        if sku is None:
            raise UsageError(
                f"Azure size {size!r} is not offered in {region}: check the spelling (e.g. Standard_NC4as_T4_v3) "
                "or pick another region"
            )
        if sku.restriction:
            raise UsageError(
                f"Azure size {sku.name} is not available to this subscription in {region} ({sku.restriction}); "
                "it may be retired: pick its successor or another region"
            )
        return sku

    def vcpus(self, region: str, size: str) -> int:
        return self._sku(region, size).vcpus

    def zones(self, region: str, size: str) -> list[str]:
        """The region's availability zones that offer the size (resource SKUs' locationInfo, less
        zone restrictions); [] in a region without zones (one regional try) or with config `zone`."""
        pinned = (self.config.get("zone") or "").strip()
        return [pinned] if pinned else list(self._sku(region, size).zones)

    def how_to_raise(self, region: str, quota: str) -> str:
        return (
            "raise it: Azure portal > Subscriptions > Usage + quotas, or `az quota create --resource-name "
            f"{quota} --scope /subscriptions/{self._subscription()}/providers/Microsoft.Compute/locations/{region} "
            f"--limit-object value={NEW_LIMIT} --resource-type dedicated`"
        )

    def quota(self, region: str, size: str, spot: bool = False) -> list[QuotaUsage]:
        """Two tiers: the size's vCPU family and "cores" (Total Regional vCPUs); Spot VMs count
        against "lowPriorityCores" (Total Regional Spot vCPUs) alone. Deallocated VMs still count."""
        sku = self._sku(region, size)
        _, _, cmp = self._sdk()
        with self._arm(f"read vCPU quota in {region}", size, region):
            usages = {u.name.value: u for u in cmp.usage.list(region)}
        tiers = []
        for key in (LOW_PRIORITY,) if spot else (sku.family, "cores"):
            u = usages.get(key)
            # A family ARM does not report has no quota granted: fail closed with limit 0.
            limit, used = (int(u.limit), int(u.current_value)) if u else (0, 0)
            label = (u.name.localized_value if u and u.name.localized_value else key)
            tiers.append(QuotaUsage(key, f"{label} in {region}", limit, used, "vCPUs", self.how_to_raise(region, key)))
        return tiers

    # --- create --------------------------------------------------------------------------

    def machines(self, region: str, match: Mapping[str, str]) -> dict[str, Instance]:
        group = cluster_group(match)
        if self._foreign_group(group, match) != "":  # absent, or another cluster's
            return {}
        return {node: self._instance(vm) for node, vm in self._vms_by_node(group).items()
                if tagging.carries(vm.tags or {}, match)}

    def _foreign_group(self, group: str, match: Mapping[str, str]) -> str | None:
        """Why resource group `group` is not this cluster's ("" when it is; None when absent)."""
        from azure.core.exceptions import ResourceNotFoundError

        res, _, _ = self._sdk()
        with self._arm(f"read resource group {group}"):
            try:
                found = res.resource_groups.get(group)
            except ResourceNotFoundError:
                return None
        return tagging.foreign(dict(found.tags or {}), match)

    def launch(self, spec: NodeSpec, names: Sequence[str]) -> list[Instance]:
        """The cluster's resource group and network, then one VM per name, all VM pollers
        started before any is awaited. On a failure the VMs that were made stay (tagged, inside
        the cluster's resource group) and the first error is raised."""
        from azure.mgmt.resource.resources.models import ResourceGroup

        res, _, _ = self._sdk()
        region, group = spec.region, cluster_group(spec.tags)
        sku = self._sku(region, spec.size)
        image = self._image_reference(spec.image)
        why = self._foreign_group(group, tagging.identity(spec.tags))
        if why:  # never rewrite another cluster's owner tag
            raise UsageError(f"Azure resource group {group} belongs to another cluster ({why}); pick another --name")
        if why is None:
            with self._arm(f"create resource group {group}", spec.size, region):
                res.resource_groups.create_or_update(group, ResourceGroup(location=region, tags=dict(spec.tags)))
        subnet_id, nsg_id = self._network(spec, group)
        self._create_vms(spec, group, names, sku, image, subnet_id, nsg_id)
        vms = self._vms_by_node(group)
        return [self._instance(vms[n]) for n in names if n in vms]

    def _image_reference(self, image: str | None):
        import azure.mgmt.compute.models as cm

        if not image:
            publisher, offer, sku, version = DEFAULT_IMAGE
            return cm.ImageReference(publisher=publisher, offer=offer, sku=sku, version=version)
        if image.startswith("/subscriptions/"):
            return cm.ImageReference(id=image)
        parts = image.split(":")
        if len(parts) == 4 and all(parts):
            return cm.ImageReference(publisher=parts[0], offer=parts[1], sku=parts[2], version=parts[3])
        raise UsageError(
            f"Azure image {image!r} is neither an image id (/subscriptions/...) nor a URN publisher:offer:sku:version"
        )

    def _vms_by_node(self, group: str) -> dict:
        from azure.core.exceptions import ResourceNotFoundError

        _, _, cmp = self._sdk()
        with self._arm(f"list VMs in {group}"):
            try:
                vms = list(cmp.virtual_machines.list(group))
            except ResourceNotFoundError:
                return {}
        return {(vm.tags or {}).get(TAG_NODE, vm.name): vm for vm in vms}

    def _network(self, spec: NodeSpec, group: str) -> tuple[str, str]:
        """VNet, subnet and NSG, created once per cluster (a re-PUT of a VNet without its subnets
        would try to delete them, so existing ones are read, not re-put)."""
        import azure.mgmt.network.models as nm
        from azure.core.exceptions import ResourceNotFoundError

        _, net, _ = self._sdk()
        region, tags = spec.region, dict(spec.tags)
        source = (spec.ssh_cidr or self.config.get("ssh_source", "")).strip()
        if not source:
            raise UsageError("no SSH source for the network security group: set providers.azure.ssh_source in "
                             "config.yaml (e.g. 203.0.113.5) or pass --ssh-from CIDR")
        prefix = source if "/" in source else f"{source}/32"
        with self._arm(f"create the network of {group}", spec.size, region):
            try:
                net.virtual_networks.get(group, VNET)
            except ResourceNotFoundError:
                net.virtual_networks.begin_create_or_update(group, VNET, nm.VirtualNetwork(
                    location=region, tags=tags, address_space=nm.AddressSpace(address_prefixes=["10.0.0.0/16"]))).result()
            try:
                subnet = net.subnets.get(group, VNET, SUBNET)
            except ResourceNotFoundError:
                subnet = net.subnets.begin_create_or_update(
                    group, VNET, SUBNET, nm.Subnet(address_prefix="10.0.0.0/24")).result()
            try:
                nsg = net.network_security_groups.get(group, NSG)
            except ResourceNotFoundError:
                nsg = None
            rules = [] if nsg is None else list(nsg.security_rules or [])
            # A resumed provision admits exactly what was asked: a rule an earlier run left
            # with another source is replaced (the NSG is put whole, with this one rule).
            if nsg is None or [(r.name, r.source_address_prefix) for r in rules] != [("ssh", prefix)]:
                rule = nm.SecurityRule(
                    name="ssh", description="SSH from gpuplan's caller", priority=1000, direction="Inbound",
                    access="Allow", protocol="Tcp",
                    source_address_prefix=prefix, source_port_range="*", destination_address_prefix="*",
                    destination_port_range="22")
                nsg = net.network_security_groups.begin_create_or_update(
                    group, NSG, nm.NetworkSecurityGroup(location=region, tags=tags, security_rules=[rule])).result()
        return subnet.id, nsg.id

    def _create_vms(self, spec, group, names, sku, image, subnet_id, nsg_id) -> None:
        import azure.mgmt.compute.models as cm
        import azure.mgmt.network.models as nm
        from azure.core.exceptions import HttpResponseError

        _, net, cmp = self._sdk()
        region = spec.region
        tags = {n: tagging.for_node(spec.tags, n) for n in names}
        with self._arm(f"create public IPs and NICs in {group}", spec.size, region):
            pips = {n: net.public_ip_addresses.begin_create_or_update(group, f"{n}-ip", nm.PublicIPAddress(
                location=region, tags=tags[n], sku=nm.PublicIPAddressSku(name="Standard"),
                public_ip_allocation_method="Static")) for n in names}
            pips = {n: p.result() for n, p in pips.items()}
            nics = {n: net.network_interfaces.begin_create_or_update(group, f"{n}-nic", nm.NetworkInterface(
                location=region, tags=tags[n], network_security_group=nm.NetworkSecurityGroup(id=nsg_id),
                ip_configurations=[nm.NetworkInterfaceIPConfiguration(
                    name="ipconfig1", subnet=nm.Subnet(id=subnet_id), public_ip_address=nm.PublicIPAddress(id=pips[n].id))],
            )) for n in names}
            nics = {n: p.result() for n, p in nics.items()}
        failures: list[tuple[str, Exception]] = []
        pollers = {}
        for n in names:
            vm = cm.VirtualMachine(
                location=region, tags=tags[n],
                hardware_profile=cm.HardwareProfile(vm_size=sku.name),
                storage_profile=cm.StorageProfile(image_reference=image, os_disk=cm.OSDisk(
                    name=f"{n}-osdisk", create_option="FromImage", delete_option="Delete", disk_size_gb=spec.disk_gib)),
                os_profile=cm.OSProfile(
                    computer_name=n, admin_username=spec.ssh_user, custom_data=self._custom_data(spec, n),
                    linux_configuration=cm.LinuxConfiguration(
                        disable_password_authentication=True,
                        ssh=cm.SshConfiguration(public_keys=[cm.SshPublicKey(
                            path=f"/home/{spec.ssh_user}/.ssh/authorized_keys", key_data=spec.ssh_public_key)]))),
                network_profile=cm.NetworkProfile(network_interfaces=[
                    cm.NetworkInterfaceReference(id=nics[n].id, primary=True, delete_option="Delete")]),
            )
            if spec.zone:  # zones(): create() asks the region's zones in turn
                vm.zones = [spec.zone]
            if spec.spot:
                vm.priority, vm.eviction_policy = "Spot", "Deallocate"
                vm.billing_profile = cm.BillingProfile(max_price=-1)
            try:
                pollers[n] = cmp.virtual_machines.begin_create_or_update(group, n, vm)
            except HttpResponseError as exc:
                failures.append((n, exc))
        created = []
        for n, poller in pollers.items():
            try:
                created.append(poller.result())
            except HttpResponseError as exc:
                failures.append((n, exc))
        if spec.ttl_s:
            self._shutdown_schedules(spec, group, created)
        if failures:
            # a quota refusal first: it ends the region, where a capacity one moves to the next zone
            failures.sort(key=lambda f: getattr(getattr(f[1], "error", None), "code", None) != "OperationNotAllowed")
            name, exc = failures[0]
            more = f" ({len(failures)} of {len(names)} VMs failed)" if len(failures) > 1 else ""
            where = f"{region} zone {spec.zone}" if spec.zone else region
            with self._arm(f"create VM {name}{more}", spec.size, where):
                raise exc

    def _custom_data(self, spec: NodeSpec, node: str) -> str:
        """cloud-init: the locally generated host key (so the first SSH is already pinned) and the expiry."""
        doc: dict = {}
        key = spec.host_keys.get(node)
        if key is not None:
            doc["ssh_deletekeys"] = True
            doc["ssh_genkeytypes"] = []
            doc["ssh_keys"] = {"ed25519_private": key.private_openssh, "ed25519_public": key.public_openssh}
        if spec.ttl_s:
            expires = (self._clock() + timedelta(seconds=spec.ttl_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
            doc["write_files"] = [{"path": "/etc/gpuplan/expires-at", "content": expires + "\n", "permissions": "0644"}]
        return base64.b64encode(cloud_config(doc).encode()).decode()

    def shutdown_time(self, ttl_s: int) -> str:
        """HHmm (UTC) of now+ttl, rounded up to the minute: the schedule's daily time."""
        at = self._clock().astimezone(timezone.utc) + timedelta(seconds=ttl_s)
        if at.second or at.microsecond:
            at = at.replace(second=0, microsecond=0) + timedelta(minutes=1)
        return at.strftime("%H%M")

    def _shutdown_schedules(self, spec: NodeSpec, group: str, vms) -> None:
        from azure.mgmt.resource.resources.models import GenericResource

        res, _, _ = self._sdk()
        hhmm = self.shutdown_time(spec.ttl_s)
        with self._arm(f"set the auto-shutdown TTL in {group}", spec.size, spec.region):
            pollers = [res.resources.begin_create_or_update_by_id(
                f"/subscriptions/{self._subscription()}/resourceGroups/{group}/providers/Microsoft.DevTestLab/"
                f"schedules/shutdown-computevm-{vm.name}",
                GenericResource(location=spec.region, tags=dict(vm.tags or {}), properties={
                    "status": "Enabled", "taskType": "ComputeVmShutdownTask", "dailyRecurrence": {"time": hhmm},
                    "timeZoneId": "UTC", "notificationSettings": {"status": "Disabled"}, "targetResourceId": vm.id,
                }),
                api_version=SCHEDULE_API) for vm in vms]
            for p in pollers:
                p.result()

    # --- addresses and readiness ---------------------------------------------------------

    def _addresses(self, vm) -> tuple[str | None, str | None]:
        _, net, _ = self._sdk()
        refs = vm.network_profile.network_interfaces if vm.network_profile else []
        if not refs:
            return None, None
        nic = net.network_interfaces.get(*_split_id(refs[0].id))
        cfg = nic.ip_configurations[0]
        public = None
        if cfg.public_ip_address is not None and cfg.public_ip_address.id:
            public = net.public_ip_addresses.get(*_split_id(cfg.public_ip_address.id)).ip_address
        return public, cfg.private_ip_address

    def _instance(self, vm, power: str | None = None) -> Instance:
        with self._arm(f"read the addresses of VM {vm.name}"):
            public, private = self._addresses(vm)
        state = (vm.provisioning_state or "").lower()
        if power == "running" and state == "succeeded":
            status = "running"
        elif power in ("deallocated", "deallocating", "stopped", "stopping"):
            status = "stopped"
        else:
            status = "pending"
        group, _ = _split_id(vm.id)
        extra = {"resource_group": group, "size": vm.hardware_profile.vm_size if vm.hardware_profile else "",
                 **({"zone": vm.zones[0]} if vm.zones else {})}
        return Instance(vm.id, (vm.tags or {}).get(TAG_NODE, vm.name), status, public, private, 22, extra)

    def _power(self, group: str, name: str) -> tuple[str, str]:
        _, _, cmp = self._sdk()
        view = cmp.virtual_machines.instance_view(group, name)
        codes = {s.code.split("/", 1)[0]: s.code.split("/", 1)[1].lower()
                 for s in view.statuses or [] if s.code and "/" in s.code}
        return codes.get("ProvisioningState", ""), codes.get("PowerState", "")

    def describe(self, region: str, ids: Sequence[str]) -> list[Instance]:
        _, _, cmp = self._sdk()
        out = []
        for rid in ids:
            group, name = _split_id(rid)
            with self._arm(f"read the state of VM {name}"):
                provisioning, power = self._power(group, name)
                if provisioning == "failed":
                    raise ProviderError(f"Azure VM {name} failed to provision; `gpuplan teardown` removes it")
                if power in ("deallocated", "stopped"):
                    raise ProviderError(
                        f"Azure VM {name} is {power} (auto-shutdown TTL passed?); tear the cluster down and provision again")
                if provisioning == "succeeded" and power == "running":
                    out.append(self._instance(cmp.virtual_machines.get(group, name), power))
        return out

    def is_ready(self, inst: Instance) -> bool:
        return inst.status == "running" and bool(inst.public_ip)

    # --- images --------------------------------------------------------------------------

    def capture(self, region: str, instance_id: str, image_name: str, img_tags: Mapping[str, str]) -> Image:
        """Deallocate, generalize, then image the VM into gpuplan-images-<region>. The caller must
        first run `sudo waagent -deprovision+user -force` on it over SSH. Afterwards the VM cannot
        be started again (Azure refuses a generalized VM); it still bills its disk until teardown."""
        import azure.mgmt.compute.models as cm
        from azure.core.exceptions import ResourceNotFoundError
        from azure.mgmt.resource.resources.models import ResourceGroup

        res, _, cmp = self._sdk()
        group, vm_name = _split_id(instance_id)
        img_group = image_group(region)
        with self._arm(f"capture VM {vm_name} as image {image_name}", region=region):
            try:
                img = cmp.images.get(img_group, image_name)
                return Image(img.id, image_name, region)
            except ResourceNotFoundError:
                pass
            vm = cmp.virtual_machines.get(group, vm_name)
            generation = cmp.virtual_machines.instance_view(group, vm_name).hyper_v_generation or "V2"
            cmp.virtual_machines.begin_deallocate(group, vm_name).result()
            cmp.virtual_machines.generalize(group, vm_name)
            group_tags = {k: v for k, v in img_tags.items() if k == TAG_OWNER}
            res.resource_groups.create_or_update(img_group, ResourceGroup(location=region, tags=group_tags))
            img = cmp.images.begin_create_or_update(img_group, image_name, cm.Image(
                location=region, tags=img_tags, source_virtual_machine=cm.SubResource(id=vm.id),
                hyper_v_generation=generation)).result()
        return Image(img.id, image_name, region)

    # --- list and delete -----------------------------------------------------------------

    def list(self, region: str, tags: Mapping[str, str]) -> list[Resource]:
        """Cluster resource groups carrying all `tags` (and everything inside them, with the
        group's tags merged in), plus images in gpuplan-images-<region> carrying all `tags`.
        The images' own group is never listed, so a sweep cannot delete it with its images."""
        from azure.core.exceptions import ResourceNotFoundError

        res, _, _ = self._sdk()
        out: list[Resource] = []
        flt = None
        if tags:
            key = TAG_CLUSTER if TAG_CLUSTER in tags else next(iter(tags))
            flt = f"tagName eq '{key}' and tagValue eq '{tags[key]}'"
        with self._arm(f"list gpuplan resources in {region}", region=region):
            for g in res.resource_groups.list(filter=flt):
                gtags = dict(g.tags or {})
                if (g.location or "").lower() != region.lower() or TAG_CLUSTER not in gtags:
                    continue
                if any(gtags.get(k) != v for k, v in tags.items()):
                    continue
                out.append(Resource("resource-group", g.id, region, gtags, g.name))
                for r in res.resources.list_by_resource_group(g.name):
                    rtags = {**gtags, **(r.tags or {})}
                    kind = KINDS.get((r.type or "").lower(), r.type or "unknown")
                    name = rtags.get(TAG_NODE, r.name) if kind == "instance" else r.name
                    out.append(Resource(kind, r.id, region, rtags, name))
            try:
                for r in res.resources.list_by_resource_group(image_group(region)):
                    rtags = dict(r.tags or {})
                    if (r.type or "").lower() == "microsoft.compute/images" and all(rtags.get(k) == v for k, v in tags.items()):
                        out.append(Resource("image", r.id, region, rtags, rtags.get(TAG_IMAGE, r.name)))
            except ResourceNotFoundError:
                pass
        return out

    def delete(self, region: str, resources: Sequence[Resource]) -> None:
        """Resource groups go whole (one LRO each, all started before any is awaited); anything
        outside them is deleted one by one in DELETE_ORDER. Not found counts as deleted. The
        images group is removed once its last image is gone."""
        res, _, cmp = self._sdk()
        groups = {r.name or _split_id(r.id)[1] for r in resources if r.kind == "resource-group"}
        inside = lambda r: _split_id(r.id)[0].lower() in {g.lower() for g in groups}  # noqa: E731
        singles = [r for r in resources if r.kind != "resource-group" and not inside(r)]
        unknown = sorted({r.kind for r in singles if r.kind not in DELETE_ORDER})
        if unknown:
            raise ProviderError(
                f"the Azure provider cannot delete resources of kind {', '.join(unknown)}; delete them in the portal")
        for kind in DELETE_ORDER:
            batch = [r for r in singles if r.kind == kind]
            with self._arm(f"delete {len(batch)} {kind}(s)", region=region):
                _all_deleted([lambda r=r: self._begin_delete(r) for r in batch])
        with self._arm(f"delete resource group(s) {', '.join(sorted(groups))}", region=region):
            _all_deleted([lambda g=g: res.resource_groups.begin_delete(g) for g in sorted(groups)])
            left = [g for g in sorted(groups) if res.resource_groups.check_existence(g)]
            if left:
                raise ProviderError(f"Azure resource group(s) {', '.join(left)} still exist after delete; run the teardown again")
            if any(r.kind == "image" for r in singles):
                self._drop_empty_image_group(region)

    def _begin_delete(self, r: Resource):
        res, net, cmp = self._sdk()
        group, name = _split_id(r.id)
        if r.kind == "schedule":
            return res.resources.begin_delete_by_id(r.id, api_version=SCHEDULE_API)
        begin = {
            "instance": cmp.virtual_machines.begin_delete,
            "disk": cmp.disks.begin_delete,
            "snapshot": cmp.snapshots.begin_delete,
            "image": cmp.images.begin_delete,
            "nic": net.network_interfaces.begin_delete,
            "public-ip": net.public_ip_addresses.begin_delete,
            "security-group": net.network_security_groups.begin_delete,
            "network": net.virtual_networks.begin_delete,
        }[r.kind]
        return begin(group, name)

    def _drop_empty_image_group(self, region: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        res, _, _ = self._sdk()
        group = image_group(region)
        try:
            if not list(res.resources.list_by_resource_group(group)):
                res.resource_groups.begin_delete(group).result()
        except ResourceNotFoundError:
            pass

    def default_regions(self) -> list[str]:
        configured = self.config.get("regions", "")
        return [r.strip() for r in configured.split(",") if r.strip()] or list(DEFAULT_REGIONS)


def _first_line(exc) -> str:
    text = str(exc).strip()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("Code:", "Message:")):
            return line
    return text.splitlines()[0] if text else exc.__class__.__name__
