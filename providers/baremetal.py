"""Owned machines ("bare metal") as a gpuplan provider: an inventory of hosts reached over SSH.

Config (providers.baremetal in config.yaml): `inventory` (default <config dir>/inventory.yaml)
and optionally `accept_host_keys` (comma-separated "SHA256:..." fingerprints a person checked
on the machines' consoles, for hosts whose inventory entry has no host_key). The inventory:

    defaults: {user: ubuntu, port: 22, key: ~/.ssh/id_ed25519}
    hosts:
      - name: gpu-a
        address: 203.0.113.10          # where gpuplan connects
        private_address: 192.168.0.1   # optional: the node-to-node network (report B)
        gpus: {model: TITAN X Pascal, count: 4}
        group: koukaryoku              # optional; a size may name the group or the GPU model
        host_key: ssh-ed25519 AAAA...  # optional but recommended: pinned before first contact

A "size" selects hosts: a group name, a GPU model (case, spaces and dashes ignored) or "any".
"Creating" a machine claims a free host: gpuplan writes `~/.gpuplan/claim` (its tags, as JSON)
with no-clobber so two clusters cannot claim one host, installs the cluster's login key in
`~/.ssh/authorized_keys` (comment "gpuplan-<cluster>"), and counts the GPUs with nvidia-smi when
a driver is present. list() reads the claims back; delete() removes the key, the intra-cluster
SSH files the cluster-network playbook wrote, the cluster's own files in ~/.gpuplan (its jobs,
driver code, hostfiles) and the claim. Software that bootstrap installed (driver, CUDA, ...,
and Ray's and the bench's venvs in ~/.gpuplan: KEPT) stays: the machine is yours, and the next
cluster reuses it.
Nothing here bills by the hour. Owned hosts have no spot market, enforce no TTL and are not
captured as images: such requests are refused before anything is claimed.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

from gpuplan.errors import CapacityUnavailable, ProviderError, RemoteError, UsageError, unreachable
from gpuplan.fleet import tags as tagging
from gpuplan.fleet.provider import Feature, Instance, NodeSpec, Provider, QuotaUsage, Resource
from gpuplan.fleet.tags import TAG_CLUSTER, TAG_INSTALLATION, TAG_NODE, TAG_OWNER
from gpuplan.hosts import remote
from gpuplan.planning.types import Offer

CLAIM_DIR = ".gpuplan"  # relative to the login user's home
# What a release leaves in CLAIM_DIR: software bootstrap installed, which the next cluster reuses
# (the `ray` playbook's venv, ~380 MB, and the bench's venv with torch)
KEPT = ("ray-*", "bench")
KEPT_FIND = " ".join(f"! -name {shlex.quote(k)}" for k in KEPT)
REGION = "local"


def _kill_engine(cluster: str) -> str:
    """Shell lines that kill, again until none is left, every process of `cluster`'s run engine on
    this host: Ray and what it started carry GPUPLAN_RAY_TAG=<cluster>-<port> (engine.stop_script)."""
    return ("for i in $(seq 1 50); do\n"
            f"  pids=$(grep -lszE '^GPUPLAN_RAY_TAG={cluster}-[0-9]+$' /proc/[0-9]*/environ | cut -d/ -f3 | grep -vx $$)\n"
            "  [ -n \"$pids\" ] || break\n"
            "  kill -9 $pids 2>/dev/null; sleep 0.2\n"
            "done\n")


@dataclass(frozen=True)
class InventoryHost:
    name: str
    address: str
    port: int
    user: str
    key_path: str | None
    gpu_model: str
    gpu_count: int
    group: str = ""
    private_address: str | None = None
    host_key: str | None = None
    power_watts: int | None = None  # the machine's draw under load: its power is what an estimate charges


_PLAIN = re.compile(r"[A-Za-z0-9_.:\[\]][A-Za-z0-9_.:\[\]-]{0,252}")


def _norm(text: str) -> str:
    return re.sub(r"[\s_-]+", "", text).lower()


def load_inventory(path: Path) -> list[InventoryHost]:
    from gpuplan.userfiles import check_plain, expand, printable, read_yaml

    if not path.is_file():
        raise UsageError(f"bare-metal inventory {path} not found; write one (see `gpuplan` docs: hosts with name, address, "
                         "user, key, gpus) or set providers.baremetal.inventory in config.yaml")
    data = read_yaml(path, "bare-metal inventory", "fix the file (hosts with name, address, gpus)")
    if not isinstance(data, dict) or not isinstance(data.get("hosts"), list):
        raise UsageError(f"{path}: expected `hosts:` with a list of hosts")
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise UsageError(f"{path}: defaults must be a mapping of host fields (user: ..., key: ...)")
    from gpuplan.errors import Mistakes
    from gpuplan.schemas.check import problems

    mistakes = problems(data, "inventory")  # every field read or refused: an unknown one changes nothing, silently
    if mistakes:
        raise Mistakes(f"bare-metal inventory {path}", mistakes)
    hosts, seen = [], set()
    for i, raw in enumerate(data["hosts"]):
        if not isinstance(raw, dict):
            raise UsageError(f"{path}: host {i + 1} must be a mapping")
        entry = {**defaults, **raw}
        name = str(entry.get("name") or "")
        where = f"{path}: host {name or i + 1}"
        if not name or not entry.get("address"):
            raise UsageError(f"{where}: needs a name and an address")
        if name in seen:
            raise UsageError(f"{where}: duplicate name")
        seen.add(name)
        gpus = entry.get("gpus") or {}
        if not isinstance(gpus, dict) or not gpus.get("model"):
            raise UsageError(f"{where}: needs gpus: {{model: ..., count: N}}")
        try:
            port, count = int(entry.get("port", 22)), int(gpus.get("count", 1))
        except (TypeError, ValueError):
            raise UsageError(f"{where}: port and gpus.count must be whole numbers") from None
        if not 1 <= port <= 65535:
            raise UsageError(f"{where}: port {port} is not a TCP port (1-65535)")
        if not 1 <= count <= 64:
            raise UsageError(f"{where}: gpus.count {count} must be 1 to 64")
        watts = entry.get("power_watts")
        if watts is not None and (isinstance(watts, bool) or not isinstance(watts, int) or not 1 <= watts <= 100_000):
            raise UsageError(f"{where}: power_watts must be a whole number of watts, 1 to 100,000 (the machine's draw"
                             " under load)")
        for field_name, value in (("group", entry.get("group")), ("gpus.model", gpus["model"]), ("key", entry.get("key"))):
            if value is not None:  # printed in the estimate and matched by name: no terminal escape codes
                check_plain(str(value), f"{where}: {field_name}")
        # what reaches an ssh command line or a known_hosts line: never an option, never two lines
        for field_name, value in (("name", name), ("address", str(entry["address"])), ("user", str(entry.get("user", "ubuntu"))),
                                  ("private_address", str(entry.get("private_address") or "x"))):
            if not _PLAIN.fullmatch(value):
                raise UsageError(f"{where}: {field_name} {printable(value)!r} must be letters, digits and . _ : - "
                                 "(not starting with -)")
        key = entry.get("key")
        if key:
            key_path = expand(str(key), f"{where}: key")
            key = str(key_path if key_path.is_absolute() else (path.parent / key_path))
        host_key = str(entry["host_key"]).strip() if entry.get("host_key") else None
        if host_key:
            remote.fingerprint(host_key)  # raises a one-line error for a malformed key
        hosts.append(InventoryHost(
            name=name, address=str(entry["address"]), port=port, user=str(entry.get("user", "ubuntu")),
            key_path=key, gpu_model=str(gpus["model"]), gpu_count=count, group=str(entry.get("group") or ""),
            private_address=str(entry["private_address"]) if entry.get("private_address") else None, host_key=host_key,
            power_watts=watts,
        ))
    return hosts


class BaremetalProvider(Provider):
    name = "baremetal"
    injects_host_keys = False  # owned hosts keep their keys: pinned from the inventory or a checked fingerprint
    machines_outlive_teardown = True  # released for the next claim, not deleted
    unsupported = {
        Feature.SPOT: "owned hosts have no spot market; drop --spot",
        Feature.TTL: "owned hosts are not stopped by gpuplan after a TTL (nothing bills by the hour); drop --ttl",
        Feature.IMAGE_CAPTURE: "bare-metal hosts cannot be captured as images; bootstrap them once and reuse them "
                               "(a re-run skips what is already installed)",
    }

    def __init__(self, config: Mapping[str, str], *, max_workers: int = 32) -> None:
        """Host keys pinned in the state arrive through use_known_hosts (providers never read
        the state themselves)."""
        self.config = dict(config)
        self._accepted = {f.strip() for f in self.config.get("accept_host_keys", "").split(",") if f.strip()}
        self._workers = max_workers
        self._inventory: list[InventoryHost] | None = None

    # --- inventory -----------------------------------------------------------------------

    def inventory_path(self) -> Path:
        if self.config.get("inventory"):
            from gpuplan.userfiles import expand

            return expand(self.config["inventory"], "providers.baremetal.inventory")
        from gpuplan import paths

        return paths.config_dir() / "inventory.yaml"

    def inventory(self) -> list[InventoryHost]:
        if self._inventory is None:
            self._inventory = load_inventory(self.inventory_path())
        return self._inventory

    @property
    def default_ssh_user(self) -> str:  # type: ignore[override]
        try:
            users = {h.user for h in self.inventory()}
        except UsageError:
            return "ubuntu"
        return users.pop() if len(users) == 1 else "ubuntu"

    def matching(self, size: str) -> list[InventoryHost]:
        want = _norm(size)
        hosts = [h for h in self.inventory() if want in ("any", "*", _norm(h.group), _norm(h.gpu_model))]
        if not hosts:
            groups = sorted({h.group for h in self.inventory() if h.group} | {h.gpu_model for h in self.inventory()})
            raise UsageError(f"no host in {self.inventory_path()} matches size {size!r}; "
                             f"use a group or GPU model: {', '.join(groups) or '(inventory is empty)'}, or 'any'")
        return hosts

    def offer(self, size: str):
        """A catalog Offer for `size` built from the inventory (owned hardware: no hourly price),
        for `gpuplan provision baremetal:<size> xN`, which the cloud catalog cannot resolve."""
        from decimal import Decimal

        hosts = self.matching(size)
        for h in hosts:  # checked by `provision --dry-run` too: the claim would fail on it later
            if h.key_path and not Path(h.key_path).is_file():
                raise UsageError(f"SSH key {h.key_path} for bare-metal host {h.name} not found; fix `key:` in"
                                 f" {self.inventory_path()}")
        models = {(h.gpu_model, h.gpu_count) for h in hosts}
        if len(models) > 1:
            raise UsageError(f"size {size!r} mixes GPU shapes {sorted(models)}; name a group or model that selects one")
        model, count = models.pop()
        return Offer(
            provider=self.name, name=size, aliases=(), region=REGION, gpu=model, gpu_count=count,
            gpu_memory_gib=Decimal(0), vcpus=0, ram_gib=Decimal(0), price=None, currency="JPY", price_unit="hour",
            price_jpy_per_hour=self._power_per_hour(hosts), billing_granularity_s=1, billing_minimum_s=0, quota_family="",
            available_from=None, retired_on=None, successor="", kind="owned", tax="included",  # as owned_offers lists it
            source=str(self.inventory_path()), notes=f"{len(hosts)} owned host(s) in the inventory",
        )

    def _power_per_hour(self, hosts) -> Decimal | None:
        """What the hosts' power costs an hour each, as an estimate charges it (power_watts x the
        catalog's baremetal power price): the price the ledger bills a claimed host by; None where
        the inventory gives no power_watts."""

        from gpuplan.market import catalog

        watts = max((h.power_watts for h in hosts if h.power_watts is not None), default=None)
        facts = catalog.load().providers.get(self.name)
        kwh = facts.power_price_jpy_per_kwh if facts is not None else None
        return Decimal(watts) / 1000 * kwh if watts is not None and kwh is not None else None

    def owned_offers(self, cat) -> tuple[list[tuple[Offer, int]], list[str]]:
        """The inventory as owned offers for an estimate: one per kind of host (its group, else
        its GPU model), with how many hosts there are of it; and a note per kind left out (hosts
        of one group with different GPUs: `provision baremetal:<group>` could not pick one).
        Priced as owned hardware is: power only (power_watts x the catalog's baremetal power
        price), ¥0 where the inventory gives no power_watts. The offer's name is what
        `gpuplan provision baremetal:NAME` and `gpuplan bench --on baremetal:NAME` take."""
        from decimal import Decimal

        from gpuplan.measuring.bench import catalog_gpu_key
        from gpuplan.planning import fmt

        kinds: dict[str, list[InventoryHost]] = {}
        for h in self.inventory():
            kinds.setdefault(h.group or h.gpu_model, []).append(h)
        facts = cat.providers.get(self.name)
        kwh = facts.power_price_jpy_per_kwh if facts is not None else None
        offers, notes = [], []
        for key, hosts in kinds.items():
            shapes = sorted({(h.gpu_model, h.gpu_count) for h in hosts})
            if len(shapes) > 1:
                notes.append(f"inventory: hosts of {key!r} have different GPUs ({', '.join(f'{m} x{n}' for m, n in shapes)});"
                             " not planned: give each kind its own group")
                continue
            model, count = shapes[0]
            gpu = catalog_gpu_key(model)
            if gpu not in cat.gpus:
                close = cat.match_gpus(model)
                gpu = close[0] if len(close) == 1 else gpu
            info = cat.gpus.get(gpu)
            watts = max((h.power_watts for h in hosts if h.power_watts is not None), default=None)
            per_hour = Decimal(watts) / 1000 * kwh if watts is not None and kwh is not None else Decimal(0)
            name = key if hosts[0].group else (re.sub(r"[^A-Za-z0-9]+", "-", model).strip("-").lower() or "host")
            power = (f"power {watts} W x {kwh} JPY/kWh = {fmt.yen(per_hour, 2)}/h" if watts is not None and kwh is not None else
                     "power not counted: give the hosts power_watts in the inventory")
            offers.append((Offer(
                provider=self.name, name=name, aliases=(), region=REGION, gpu=gpu, gpu_count=count,
                gpu_memory_gib=info.memory_gib if info is not None else Decimal(0), vcpus=0, ram_gib=Decimal(0),
                price=None, currency="JPY", price_unit="purchase", price_jpy_per_hour=per_hour, billing_granularity_s=1,
                billing_minimum_s=0, quota_family="", available_from=None, retired_on=None, successor="", kind="owned",
                power_watts=watts, source=f"inventory {self.inventory_path()}", tax="included",
                notes=f"{len(hosts)} owned host{'s' if len(hosts) > 1 else ''} in the inventory"
                      f" ({', '.join(h.name for h in hosts[:4])}{', ...' if len(hosts) > 4 else ''}); {power}",
            ), len(hosts)))
        return offers, notes

    def _host(self, h: InventoryHost, node: str | None = None) -> remote.Host:
        key = h.host_key or self.known_hosts.get(f"{h.address}:{h.port}")
        if not key:
            offered = remote.offered_host_key(h.address, h.port)
            fp = remote.fingerprint(offered)
            if fp not in self._accepted:
                raise UsageError(
                    f"bare-metal host {h.name} ({h.address}:{h.port}) has no host_key in {self.inventory_path()}; "
                    f"it offers {fp}: check that on its console, then add its host_key to the inventory "
                    f"or rerun with --accept-host-key {fp}"
                )
            key = offered
        return remote.Host(node or h.name, h.address, h.port, h.user, h.key_path, key)

    # --- claims --------------------------------------------------------------------------

    def _read_claim(self, rh: remote.Host) -> dict | None:
        """The host's claim as a dict, or None when it is free."""
        r = remote.run(rh, f"cd && cat {CLAIM_DIR}/claim 2>/dev/null || true", timeout=30)
        text = r.stdout.strip()
        if not text:
            return None
        try:
            claim = json.loads(text)
        except json.JSONDecodeError:
            claim = None
        return claim if isinstance(claim, dict) else {"tags": {}, "unreadable": text[:80]}

    def _claims_of(self, hosts: Sequence[InventoryHost]) -> list[dict | None | BaseException]:
        """Each host's claim (dict), None when free, or the exception that kept us from asking."""
        results: dict[str, object] = {}
        pairs = []
        for h in hosts:
            try:
                pairs.append((h, self._host(h)))
            except (UsageError, RemoteError) as exc:
                results[h.name] = exc
        outs = remote.run_many([rh for _, rh in pairs], self._read_claim, self._workers)
        for (h, _), out in zip(pairs, outs):
            results[h.name] = out
        return [results[h.name] for h in hosts]

    # --- Provider ------------------------------------------------------------------------

    def check_credentials(self) -> None:
        for h in self.inventory():
            if h.key_path and not Path(h.key_path).is_file():
                raise UsageError(
                    f"SSH key {h.key_path} for bare-metal host {h.name} not found; fix `key:` in {self.inventory_path()}")

    def quota(self, region: str, size: str, spot: bool = False) -> list[QuotaUsage]:
        hosts = self.matching(size)
        claims = self._claims_of(hosts)
        for c in claims:
            if isinstance(c, UsageError):  # an unconfirmed host key: the user must act
                raise c
        used = sum(1 for c in claims if c is not None)
        down = [f"{h.name} ({unreachable(c) or 'no answer'})" for h, c in zip(hosts, claims) if isinstance(c, BaseException)]
        note = f"; unreachable (counted as used): {', '.join(down)}" if down else ""
        return [QuotaUsage(
            name=f"hosts:{size}", description=f"free bare-metal hosts matching {size!r} in {self.inventory_path()}{note}",
            limit=len(hosts), used=used, unit="hosts",
            how_to_raise=("bring the unreachable hosts back (see above), add hosts to the inventory, or "
                          "`gpuplan teardown` a cluster that holds some") if down else
                         "add hosts to the inventory, or `gpuplan teardown` a cluster that holds some",
        )]

    def machines(self, region: str, match: Mapping[str, str]) -> dict[str, Instance]:
        """Hosts whose claim carries this cluster's identity (unreachable ones are not counted)."""
        hosts = self.inventory()
        out: dict[str, Instance] = {}
        for h, c in zip(hosts, self._claims_of(hosts)):
            if isinstance(c, dict) and tagging.carries(c.get("tags", {}), match) and c["tags"].get(TAG_NODE):
                node = c["tags"][TAG_NODE]
                out[node] = self._instance(self._host(h, node), h, None)
        return out

    def launch(self, spec: NodeSpec, names: Sequence[str]) -> list[Instance]:
        """Claim one free host per name (no-clobber claim file, login key installed, GPUs counted)."""
        hosts = [h for h in self.matching(spec.size) if h.user == spec.ssh_user]
        if not hosts:
            raise UsageError(f"no host matching {spec.size!r} logs in as {spec.ssh_user!r}; set user: in the inventory")
        claims = self._claims_of(hosts)
        for c in claims:
            if isinstance(c, UsageError):  # an unconfirmed host key: the user must act
                raise c
        free = [h for h, c in zip(hosts, claims) if c is None]
        if len(free) < len(names):
            down = [f"{h.name}: {unreachable(c) or 'no answer'}" for h, c in zip(hosts, claims) if isinstance(c, BaseException)]
            raise CapacityUnavailable(
                f"{len(names)} more bare-metal host(s) matching {spec.size!r} needed but {len(free)} are free"
                + (f" ({', '.join(down)} unreachable)" if down else "")
                + "; add hosts to the inventory or tear down a cluster holding some"
            )
        plan = dict(zip(names, free))
        outcomes = remote.run_many([self._host(h, n) for n, h in plan.items()],
                                   lambda rh: self._claim(rh, spec, plan[rh.name]), self._workers)
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        if errors:
            first = errors[0]
            if isinstance(first, (UsageError, ProviderError)):
                raise first
            raise ProviderError(f"claiming bare-metal hosts failed: {first}")
        return list(outcomes)

    def _instance(self, rh: remote.Host, h: InventoryHost, gpus_seen: int | None) -> Instance:
        extra = {"host_key": rh.host_key or "", "inventory_host": h.name, "gpu_model": h.gpu_model,
                 "gpus": str(h.gpu_count)}
        if gpus_seen is not None:
            extra["gpus_seen"] = str(gpus_seen)
        return Instance(id=h.name, name=rh.name, status="running", public_ip=h.address,
                        private_ip=h.private_address or h.address, ssh_port=h.port, extra=extra)

    def _gpus(self, rh: remote.Host, h: InventoryHost, conn: remote.Connection) -> Instance:
        cmd = "command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || echo none"
        r = conn.run(cmd, timeout=60)
        out = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else "none"
        seen = int(out) if out.isdigit() else None
        if seen is not None and seen != h.gpu_count:
            raise ProviderError(
                f"bare-metal host {h.name}: nvidia-smi sees {seen} GPU(s) but the inventory says {h.gpu_count}; "
                f"fix gpus.count in {self.inventory_path()} or check the machine"
            )
        return self._instance(rh, h, seen)

    def _claim(self, rh: remote.Host, spec: NodeSpec, h: InventoryHost) -> Instance:
        tags = tagging.for_node({**spec.tags, TAG_CLUSTER: spec.cluster}, rh.name)
        claim = json.dumps({"tags": tags, "login_key": spec.ssh_public_key,
                            "claimed_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
        script = (
            f"mkdir -p {CLAIM_DIR} && chmod 700 {CLAIM_DIR}\n"
            f"if ! (set -C; printf '%s\\n' {shlex.quote(claim)} > {CLAIM_DIR}/claim) 2>/dev/null; then\n"
            f"  echo 'claimed by:' >&2; cat {CLAIM_DIR}/claim >&2; exit 17\n"
            "fi\n"
        )
        if spec.ssh_public_key:
            key = shlex.quote(spec.ssh_public_key.strip())
            script += (
                "mkdir -p .ssh && chmod 700 .ssh && touch .ssh/authorized_keys && chmod 600 .ssh/authorized_keys\n"
                f"grep -qxF {key} .ssh/authorized_keys || printf '%s\\n' {key} >> .ssh/authorized_keys\n"
            )
        with remote.connect(rh) as conn:
            r = conn.run("cd && bash -s", stdin=script, timeout=60)
            if r.exit_code == 17:
                raise CapacityUnavailable(
                    f"bare-metal host {h.name} was claimed by someone else meanwhile: {r.stderr.strip()[-200:]}")
            if not r.ok:
                raise ProviderError(f"could not write the claim on {h.name} (exit {r.exit_code}): {r.tail(3)}")
            return self._gpus(rh, h, conn)

    def describe(self, region: str, ids: Sequence[str]) -> list[Instance]:
        by_id = {h.name: h for h in self.inventory()}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise ProviderError(f"bare-metal host(s) {', '.join(missing)} are not in {self.inventory_path()} any more")
        hosts = [by_id[i] for i in ids]
        claims = self._claims_of(hosts)
        out = []
        for h, c in zip(hosts, claims):
            if isinstance(c, BaseException):
                raise ProviderError(f"bare-metal host {h.name} is not reachable: {c}")
            if c is None:
                raise ProviderError(f"bare-metal host {h.name} is not claimed (its claim was removed); provision again")
            out.append(self._instance(self._host(h, c["tags"].get(TAG_NODE, h.name)), h, None))
        return out

    def list(self, region: str, tags: Mapping[str, str]) -> list[Resource]:
        """Claims carrying `tags`. A host that cannot be reached is left out and named in
        `unreached`: its claim, if any, stays until it is back (a teardown keeps it held)."""
        hosts = self.inventory()
        claims = self._claims_of(hosts)
        found = []
        self.unreached = {}
        for h, c in zip(hosts, claims):
            if isinstance(c, BaseException):
                self.unreached[h.name] = f"bare-metal host {h.name} ({h.address}): {unreachable(c) or c}"
                continue
            if c is None:
                continue
            ctags = {str(k): str(v) for k, v in (c.get("tags") or {}).items()}
            if tagging.carries(ctags, tags):
                node = ctags.get(TAG_NODE, "")
                found.append(Resource("instance", h.name, REGION, ctags, node))
                found.append(Resource("host-claim", f"{h.name}:claim", REGION, ctags, node))
        return found

    def delete(self, region: str, resources: Sequence[Resource]) -> None:
        by_id = {h.name: h for h in self.inventory()}
        work = []
        for r in resources:
            host = r.id.split(":", 1)[0]
            if r.kind not in ("instance", "host-claim"):
                continue
            if host not in by_id:
                continue  # gone from the inventory: nothing of ours to remove there
            work.append((r, by_id[host]))
        # Keys and files first, the claim last, so a half-done delete still shows up in list().
        for kind in ("instance", "host-claim"):
            batch = [(r, h) for r, h in work if r.kind == kind]
            if not batch:
                continue
            by_host = {h.name: r for r, h in batch}
            outcomes = remote.run_many([self._host(h) for _, h in batch],
                                       lambda rh, by_host=by_host, kind=kind: self._release(rh, by_host[rh.name], kind),
                                       self._workers)
            for o in outcomes:
                if isinstance(o, BaseException):
                    raise o if isinstance(o, (ProviderError, UsageError)) else ProviderError(f"bare-metal release failed: {o}")

    def _release(self, rh: remote.Host, r: Resource, kind: str) -> None:
        cluster = r.tags.get(TAG_CLUSTER, "")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", cluster):
            raise ProviderError(f"refusing to release {r.id}: claim has no usable {TAG_CLUSTER} tag")
        # Only touch a claim that is still this cluster's (the host may have been released and re-claimed).
        guard = (f"[ -f {CLAIM_DIR}/claim ] || exit 0\n"
                 f"grep -q '\"{TAG_CLUSTER}\": \"{cluster}\"' {CLAIM_DIR}/claim || exit 0\n")
        # ... and of this owner and installation: another home's cluster of the same name may hold it
        for tag in (TAG_OWNER, TAG_INSTALLATION):
            value = r.tags.get(tag, "")
            if re.fullmatch(r"[A-Za-z0-9_.-]+", value):
                guard += f"grep -q '\"{tag}\": \"{value}\"' {CLAIM_DIR}/claim || exit 0\n"
        if kind == "instance":
            script = guard + (
                f"login_key=$(sed -n 's/.*\"login_key\": \"\\([^\"]*\\)\".*/\\1/p' {CLAIM_DIR}/claim)\n"
                "if [ -f .ssh/authorized_keys ]; then\n"
                f"  grep -vxF -e \"$login_key\" -e \"$(cat .ssh/gpuplan_cluster.pub 2>/dev/null || echo '#none#')\" "
                ".ssh/authorized_keys > .ssh/authorized_keys.gpuplan || true\n"
                "  cat .ssh/authorized_keys.gpuplan > .ssh/authorized_keys; rm -f .ssh/authorized_keys.gpuplan\n"
                "fi\n"
                "rm -f .ssh/gpuplan_cluster .ssh/gpuplan_cluster.pub\n"
                "for f in .ssh/config .ssh/known_hosts; do\n"
                "  [ -f \"$f\" ] && sed -i '/^# >>> gpuplan cluster >>>$/,/^# <<< gpuplan cluster <<<$/d' \"$f\"\n"
                "done\n"
                # the cluster's own files (its jobs, driver code, hostfiles, idle stop); the software
                # bootstrap installed here (Ray's venv, the bench's venv) stays for the next cluster
                f"find {CLAIM_DIR} -mindepth 1 -maxdepth 1 ! -name claim {KEPT_FIND} -exec rm -rf {{}} +\n"
            )
        else:
            script = guard + f"rm -f {CLAIM_DIR}/claim; rmdir {CLAIM_DIR} 2>/dev/null; true\n"
        r2 = remote.run(rh, "cd && bash -s", stdin=script, timeout=120)
        if not r2.ok:
            raise ProviderError(f"could not release {r.id} (exit {r2.exit_code}): {r2.tail(3)}")

    # --- the engine on hosts the state lost; the cap's backstop: hosts that release themselves ---

    def stop_engine(self, resources: Sequence[Resource]) -> None:
        """Before a sweep releases claims the state has lost: the run engine of each claim's
        cluster (its Ray and every process started under it, by their GPUPLAN_RAY_TAG) stopped
        on the host, as a teardown stops it (engine.stop_all, which needs the state's record of
        the engine); released with it still running, a host would look free while it runs."""
        by_id = {h.name: h for h in self.inventory()}
        work = [(by_id[r.id], r.tags.get(TAG_CLUSTER, "")) for r in resources
                if r.kind == "instance" and r.id in by_id and re.fullmatch(r"[a-z][a-z0-9-]*", r.tags.get(TAG_CLUSTER, ""))]
        if not work:
            return
        clusters = {h.name: c for h, c in work}
        outcomes = remote.run_many([self._host(h) for h, _ in work],
                                   lambda rh: remote.run(rh, "bash -s", stdin=_kill_engine(clusters[rh.name]), timeout=60),
                                   self._workers)
        for (h, _), o in zip(work, outcomes):
            if isinstance(o, BaseException) or not o.ok:
                raise ProviderError(f"could not stop the run engine on {h.name} before releasing it: "
                                    f"{o if isinstance(o, BaseException) else o.tail(3)}")


    def release_at(self, tags: Mapping[str, str], at: datetime) -> Sequence[str]:
        """A launch's max_yen holds with no gpuplan client alive: on every host this cluster
        claims (`tags`), a timer that at `at` kills the cluster's Ray and everything started
        under it (GPUPLAN_RAY_TAG=<cluster>-<port>), removes the cluster's login key and its
        claim, as a teardown would; the ledger's end there is lifecycle.settle_released's. A
        timer gives up as soon as the claim is no longer the one it was armed for (torn down,
        or claimed anew). Returns the hosts armed; raises where one could not be."""
        cluster = tags.get(TAG_CLUSTER, "")
        if not re.fullmatch(r"[a-z][a-z0-9-]*", cluster):
            raise ProviderError(f"refusing to arm a release for {cluster!r}: not a cluster name")
        claimed = {r.id for r in self.list(REGION, tags) if r.kind == "instance"}
        hosts = [h for h in self.inventory() if h.name in claimed]
        epoch = int(at.timestamp())
        outcomes = remote.run_many([self._host(h) for h in hosts], lambda rh: self._arm(rh, cluster, epoch),
                                   self._workers)
        for h, o in zip(hosts, outcomes):
            if isinstance(o, BaseException):
                raise ProviderError(f"could not arm the cap's release on {h.name}: {o}")
        return [h.name for h in hosts]

    def _arm(self, rh: remote.Host, cluster: str, epoch: int) -> None:
        timer = f"{CLAIM_DIR}/release-{cluster}"
        script = (
            "#!/bin/bash\n"
            f"# gpuplan: max_yen of cluster {cluster}: at {epoch} (epoch s) its Ray stops and its claim here is released\n"
            "cd\n"
            f"while cmp -s {CLAIM_DIR}/claim {timer}.claim; do\n"
            f"  now=$(date +%s); [ \"$now\" -lt {epoch} ] || break\n"
            f"  left=$(({epoch} - now)); [ $left -le 5 ] || left=5; sleep $left\n"
            "done\n"
            f"cmp -s {CLAIM_DIR}/claim {timer}.claim || exit 0  # not the claim it was armed for: nothing of ours\n"
            + _kill_engine(cluster) +
            f"login_key=$(sed -n 's/.*\"login_key\": \"\\([^\"]*\\)\".*/\\1/p' {CLAIM_DIR}/claim)\n"
            "if [ -n \"$login_key\" ] && [ -f .ssh/authorized_keys ]; then\n"
            "  grep -vxF -e \"$login_key\" .ssh/authorized_keys > .ssh/authorized_keys.gpuplan\n"
            "  cat .ssh/authorized_keys.gpuplan > .ssh/authorized_keys; rm -f .ssh/authorized_keys.gpuplan\n"
            "fi\n"
            f"rm -f {CLAIM_DIR}/claim {timer}.claim {timer}.pid\n"
        )
        arm = (
            "set -e; cd\n"
            f"if [ -f {timer}.pid ] && grep -qF release-{cluster} /proc/$(cat {timer}.pid)/cmdline 2>/dev/null; then\n"
            f"  kill $(cat {timer}.pid) 2>/dev/null || true\n"  # armed again (a kept cluster's next launch)
            "fi\n"
            f"cp {CLAIM_DIR}/claim {timer}.claim\n"
            f"cat > {timer}.sh <<'GPUPLAN_TIMER'\n{script}GPUPLAN_TIMER\n"
            f"nohup setsid bash {timer}.sh > /dev/null 2>&1 < /dev/null &\n"
            f"echo $! > {timer}.pid\n"
            f"sleep 0.2; kill -0 $(cat {timer}.pid)\n"
        )
        r = remote.run(rh, "bash -s", stdin=arm, timeout=60)
        if not r.ok:
            raise ProviderError(f"exit {r.exit_code}: {r.tail(3)}")

    def default_regions(self) -> list[str]:
        return [REGION]
