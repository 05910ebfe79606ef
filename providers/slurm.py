"""Slurm clusters as infra: the user's clusters (a login host reached over SSH, partitions of GPU
nodes) from `slurm.yaml` in the config folder (or the file `providers.slurm.clusters` names in
config.yaml), and each partition as an offer for the estimate (docs/slurm.md).

    clusters:
      - name: lab
        login: {address: login.example.ac.jp, port: 22, user: me, key: ~/.ssh/id_ed25519,
                host_key: ssh-ed25519 AAAA...}
        queue_wait: 2h                       # an assumption: how long a job waits before it starts
        cost: {points_per_gpu_hour: 1, yen_per_point: 120}
        partitions:
          - {name: gpu, gpu: V100, gpus_per_node: 4, nodes: 2}
          - {name: short, gpu: T4, gpus_per_node: 1, nodes: 4, queue_wait: 10m, cost: {power_watts: 300}}

How a GPU-hour costs (`cost`, on the cluster or a partition; the partition's wins):
- `power_watts: W`: owned nodes, a node's draw under load; one GPU's share (W / gpus_per_node)
  x the catalog's (or prices.yaml's) baremetal power price per kWh.
- `monthly_yen: Y, gpu_hours: H`: a share bought by the month: Y / H yen a GPU-hour (H: the
  GPU-hours the share gives a month; default every GPU of the partition all month, 730 h).
- `points_per_gpu_hour: P, yen_per_point: Y`: a system billed in points: P x Y yen a GPU-hour.

This is not a machine provider (nothing is provisioned: the cluster is there), so it is not in
the gpuplan.providers entry points; its batches run through the `slurm` run backend
(gpuplan/run/slurm/slurm_runs.py). The planner sees each partition as an owned-like offer
(provider "slurm", name CLUSTER.PARTITION, one GPU a machine, as many machines as the partition
has GPUs, priced per GPU-hour) whose `queue_wait_s` the planner counts in the wall before its
jobs, unbilled (planning/candidates.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

from gpuplan.errors import UsageError
from gpuplan.planning.types import Offer

PROVIDER = "slurm"
HOURS_A_MONTH = 730
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,62}")
_PLAIN = re.compile(r"[A-Za-z0-9_.:\[\]][A-Za-z0-9_.:\[\]-]{0,252}")


@dataclass(frozen=True)
class PartitionOffer(Offer):
    """An offer that is a Slurm partition: the planner counts `queue_wait_s` in the wall before
    its jobs start (not billed: Slurm bills a job from its start), and says `queue_wait_said`."""

    queue_wait_s: int = 0
    queue_wait_said: str = ""


@dataclass(frozen=True)
class Cost:
    jpy_per_gpu_hour: Decimal | None  # None: power_watts with no power price in the catalog
    said: str  # how, in words


@dataclass(frozen=True)
class Partition:
    name: str
    gpu: str
    gpus_per_node: int
    nodes: int
    queue_wait_s: int
    queue_wait_text: str
    cost: Mapping

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes


@dataclass(frozen=True)
class Cluster:
    name: str
    address: str
    port: int
    user: str
    key_path: str | None
    host_key: str | None
    partitions: tuple[Partition, ...]
    workdir: str = "gpuplan"  # on the login host, relative to its home: the batches' files (a shared file system)
    env: Mapping[str, str] | None = None  # variables for every Slurm command on the login host

    def partition(self, name: str | None) -> Partition:
        if not name:
            return self.partitions[0]
        for p in self.partitions:
            if p.name == name:
                return p
        raise UsageError(f"Slurm cluster {self.name} has no partition {name!r}: one of"
                         f" {', '.join(p.name for p in self.partitions)}")

    def host(self):
        from gpuplan.hosts import remote

        if not self.host_key:
            raise UsageError(f"Slurm cluster {self.name}: its login has no host_key in {clusters_path()}; add the"
                             f" login host's public key (`ssh-keyscan -t ed25519 {self.address}`, checked on its console)")
        return remote.Host(f"{self.name}-login", self.address, self.port, self.user, self.key_path, self.host_key,
                           cluster=self.name)


def clusters_path() -> Path:
    from gpuplan import config, paths
    from gpuplan.userfiles import expand

    named = config.provider_config(PROVIDER).get("clusters")
    return expand(named, "providers.slurm.clusters") if named else paths.config_dir() / "slurm.yaml"


def load(path: Path | None = None) -> list[Cluster]:
    """The clusters of `slurm.yaml` (none where there is no such file); one line for a mistake."""
    from gpuplan import config
    from gpuplan.userfiles import expand, read_yaml

    named = path is None and bool(config.provider_config(PROVIDER).get("clusters"))
    path = path or clusters_path()
    if not path.is_file():
        if named:  # config.yaml names it: a wrong path is said, never read as "no clusters"
            raise UsageError(f"{path} (providers.slurm.clusters in config.yaml) is not a file; fix the path")
        return []
    data = read_yaml(path, "Slurm clusters", "fix the file (clusters with name, login, partitions)")
    if not isinstance(data, dict) or not isinstance(data.get("clusters"), list):
        raise UsageError(f"{path}: expected `clusters:` with a list of Slurm clusters")
    out, seen = [], set()
    for i, raw in enumerate(data["clusters"]):
        if not isinstance(raw, dict):
            raise UsageError(f"{path}: cluster {i + 1} must be a mapping")
        name = str(raw.get("name") or "")
        where = f"{path}: cluster {name or i + 1}"
        if not _NAME.fullmatch(name):
            raise UsageError(f"{where}: needs a name of letters, digits, _ and - (at most 63)")
        if name in seen:
            raise UsageError(f"{where}: duplicate name")
        seen.add(name)
        login = raw.get("login")
        if not isinstance(login, dict) or not login.get("address"):
            raise UsageError(f"{where}: needs login: {{address: ..., user: ..., key: ..., host_key: ...}}")
        try:
            port = int(login.get("port", 22))
        except (TypeError, ValueError):
            raise UsageError(f"{where}: login.port must be a whole number") from None
        if not 1 <= port <= 65535:
            raise UsageError(f"{where}: login.port {port} is not a TCP port (1-65535)")
        address, user = str(login["address"]), str(login.get("user", "ubuntu"))
        for what, value in (("login.address", address), ("login.user", user)):
            if not _PLAIN.fullmatch(value):
                raise UsageError(f"{where}: {what} {value!r} must be letters, digits and . _ : - (not starting with -)")
        key = login.get("key")
        if key:
            key_path = expand(str(key), f"{where}: login.key")
            key = str(key_path if key_path.is_absolute() else (path.parent / key_path))
        host_key = str(login["host_key"]).strip() if login.get("host_key") else None
        if host_key:
            from gpuplan.hosts import remote

            remote.fingerprint(host_key)  # a one-line error for a malformed key
        env = raw.get("env") or {}
        if not isinstance(env, dict) or not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(k)) for k in env):
            raise UsageError(f"{where}: env must map variable names to values")
        workdir = str(raw.get("workdir") or "gpuplan")
        if not re.fullmatch(r"[A-Za-z0-9_./~-]+", workdir) or workdir.startswith("-"):
            raise UsageError(f"{where}: workdir {workdir!r} must be a plain path (letters, digits, . _ / ~ -)")
        wait = _wait(raw.get("queue_wait", "0"), f"{where}: queue_wait")
        cost = raw.get("cost")
        parts = raw.get("partitions")
        if not isinstance(parts, list) or not parts:
            raise UsageError(f"{where}: needs partitions: [{{name, gpu, gpus_per_node, nodes}}, ...]")
        partitions, names = [], set()
        for j, p in enumerate(parts):
            if not isinstance(p, dict):
                raise UsageError(f"{where}: partition {j + 1} must be a mapping")
            pname = str(p.get("name") or "")
            pwhere = f"{where}, partition {pname or j + 1}"
            if not _NAME.fullmatch(pname) or pname in names:
                raise UsageError(f"{pwhere}: needs a name of its own (letters, digits, _ and -)")
            names.add(pname)
            if not p.get("gpu"):
                raise UsageError(f"{pwhere}: needs gpu: the GPU model of its nodes (V100, A100 80GB, ...)")
            try:
                per_node, nodes = int(p.get("gpus_per_node", 1)), int(p.get("nodes", 1))
            except (TypeError, ValueError):
                raise UsageError(f"{pwhere}: gpus_per_node and nodes must be whole numbers") from None
            if not (1 <= per_node <= 64 and 1 <= nodes <= 100_000):
                raise UsageError(f"{pwhere}: gpus_per_node must be 1 to 64 and nodes 1 to 100,000")
            pwait = _wait(p["queue_wait"], f"{pwhere}: queue_wait") if "queue_wait" in p else wait
            pcost = p.get("cost", cost)
            _check_cost(pcost, pwhere)
            from gpuplan.userfiles import check_plain

            check_plain(str(p["gpu"]), f"{pwhere}: gpu")  # printed in the estimate: no terminal escape codes
            partitions.append(Partition(pname, str(p["gpu"]), per_node, nodes, pwait[0], pwait[1], dict(pcost or {})))
        out.append(Cluster(name, address, port, user, key, host_key, tuple(partitions), workdir,
                           {str(k): str(v) for k, v in env.items()}))
    return out


def _wait(value, where: str) -> tuple[int, str]:
    from gpuplan.units import parse_duration

    text = str(value).strip()
    if text in ("0", "0s", "0m", "0h"):
        return 0, "0"
    return parse_duration(text, where), text


_COSTS = ({"power_watts"}, {"monthly_yen", "gpu_hours"}, {"monthly_yen"}, {"points_per_gpu_hour", "yen_per_point"})


def _check_cost(cost, where: str) -> None:
    if not isinstance(cost, dict) or set(cost) not in _COSTS:
        raise UsageError(f"{where}: cost must be one of {{power_watts: W}}, {{monthly_yen: Y, gpu_hours: H}} or"
                         " {points_per_gpu_hour: P, yen_per_point: Y}")
    for k, v in cost.items():
        try:
            ok = not isinstance(v, bool) and Decimal(str(v)) > 0 and Decimal(str(v)).is_finite()
        except InvalidOperation:
            ok = False
        if not ok:
            raise UsageError(f"{where}: cost {k} must be a number above 0, not {v!r}")


def cost_of(cluster: Cluster, p: Partition, kwh: Decimal | None) -> Cost:
    """A GPU-hour of the partition in yen, and how that figure is made."""
    from gpuplan.planning import fmt

    c = {k: Decimal(str(v)) for k, v in p.cost.items()}
    if "power_watts" in c:
        if kwh is None:
            return Cost(None, f"power {c['power_watts']} W a node: no power price in the catalog")
        per = c["power_watts"] / p.gpus_per_node / 1000 * kwh
        return Cost(per, f"power {c['power_watts']} W a node / {p.gpus_per_node} GPUs x {kwh} JPY/kWh"
                         f" = {fmt.yen(per, 2)} a GPU-hour")
    if "monthly_yen" in c:
        hours = c.get("gpu_hours") or Decimal(p.gpus * HOURS_A_MONTH)
        per = c["monthly_yen"] / hours
        how = "" if "gpu_hours" in c else f" (every one of its {p.gpus} GPUs, {HOURS_A_MONTH} h)"
        return Cost(per, f"monthly share {fmt.yen(c['monthly_yen'])} / {hours} GPU-hours{how}"
                         f" = {fmt.yen(per, 2)} a GPU-hour")
    per = c["points_per_gpu_hour"] * c["yen_per_point"]
    return Cost(per, f"{c['points_per_gpu_hour']} points a GPU-hour x {fmt.yen(c['yen_per_point'], 2)} a point"
                     f" = {fmt.yen(per, 2)} a GPU-hour")


def offer_name(cluster: str, partition: str) -> str:
    return f"{cluster}.{partition}"


def partition_offers(cat, clusters: list[Cluster] | None = None) -> tuple[list[tuple[Offer, int]], list[str]]:
    """Each partition of each cluster as an offer (one GPU a machine: a job is one array task
    with --gres=gpu:1), with how many such machines there are (the partition's GPUs); notes for
    what could not be planned."""
    from gpuplan.measuring.bench import catalog_gpu_key
    from gpuplan.planning import fmt

    clusters = load() if clusters is None else clusters
    facts = cat.providers.get("baremetal")
    kwh = facts.power_price_jpy_per_kwh if facts is not None else None
    out: list[tuple[Offer, int]] = []
    notes: list[str] = []
    for c in clusters:
        for p in c.partitions:
            gpu = catalog_gpu_key(p.gpu)
            if gpu not in cat.gpus:
                close = cat.match_gpus(p.gpu)
                gpu = close[0] if len(close) == 1 else gpu
            info = cat.gpus.get(gpu)
            cost = cost_of(c, p, kwh)
            wait = (f"queue wait {fmt.duration(p.queue_wait_s)} on Slurm {c.name}/{p.name}: an assumption"
                    f" (queue_wait: {p.queue_wait_text} in {clusters_path()}), counted in the wall before its jobs"
                    " start, not billed" if p.queue_wait_s else
                    f"queue wait on Slurm {c.name}/{p.name}: none assumed (set queue_wait in {clusters_path()})")
            out.append((PartitionOffer(
                provider=PROVIDER, name=offer_name(c.name, p.name), aliases=(), region=c.name, gpu=gpu, gpu_count=1,
                gpu_memory_gib=info.memory_gib if info is not None else Decimal(0), vcpus=0, ram_gib=Decimal(0),
                price=None, currency="JPY", price_unit="purchase", price_jpy_per_hour=cost.jpy_per_gpu_hour,
                billing_granularity_s=1, billing_minimum_s=0, quota_family="", available_from=None, retired_on=None,
                successor="", kind="owned", source=f"slurm clusters {clusters_path()}", tax="included",
                notes=f"Slurm partition {p.name} of {c.name}: {p.nodes} node(s) x {p.gpus_per_node} {p.gpu},"
                      f" one GPU a task; {cost.said}",
                queue_wait_s=p.queue_wait_s, queue_wait_said=wait,
            ), p.gpus))
    return out, notes


def find(target: str) -> tuple[Cluster, Partition]:
    """The cluster and partition a run target names: `slurm:CLUSTER/PARTITION`, `slurm:CLUSTER`
    (its first partition) or an offer name `CLUSTER.PARTITION`."""
    rest = target.removeprefix(f"{PROVIDER}:")
    name, sep, part = rest.partition("/")
    if not sep and "." in rest:
        name, _, part = rest.partition(".")
    clusters = load()
    if not name:
        raise UsageError(f"name the Slurm cluster: gpuplan run slurm:CLUSTER[/PARTITION] (clusters in {clusters_path()}:"
                         f" {', '.join(c.name for c in clusters) or 'none'})")
    for c in clusters:
        if c.name == name:
            return c, c.partition(part or None)
    raise UsageError(f"no Slurm cluster {name!r} in {clusters_path()}: "
                     f"{', '.join(c.name for c in clusters) or 'the file has none'}")


def with_partitions(cat):
    """The catalog with every Slurm partition as an offer (estimate's hook, beside the inventory's
    hosts); {offer name: GPUs} for the planner (they are yours: recommended, planned several at
    once); notes on what was left out. A slurm.yaml that cannot be read is a note: the rest is
    still planned."""
    from dataclasses import replace

    try:
        pairs, notes = partition_offers(cat)
    except UsageError as exc:
        return cat, {}, [f"slurm: its partitions are not planned: {exc}"]
    taken = {(o.provider, o.name.lower()) for o in cat.offers}
    pairs = [(o, n) for o, n in pairs if (o.provider, o.name.lower()) not in taken]
    cat = replace(cat, offers=cat.offers + tuple(o for o, _ in pairs))
    return cat, {o.name.lower(): n for o, n in pairs}, notes


def offer_of(name: str):
    """The offer of a partition by its name (`lab.gpu`), as a saved plan names it."""
    from gpuplan.market import catalog

    cluster, part = find(name)
    offers, _ = partition_offers(catalog.load(), [cluster])
    return next(o for o, _ in offers if o.name == offer_name(cluster.name, part.name))
