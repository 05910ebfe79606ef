"""An in-memory provider with failure switches, for lifecycle tests that are about gpuplan's
own bookkeeping (journal, rollback, resume) rather than a cloud's API. Cloud behaviour itself
is tested against moto, the fake ARM API, the Sakura fake and real sshd."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping, Sequence

from gpuplan.errors import AuthMissing, ProviderError
from gpuplan.fleet.provider import Image, Instance, NodeSpec, Provider, QuotaUsage, Resource
from gpuplan.fleet.tags import TAG_NODE


class MemoryProvider(Provider):
    name = "memory"

    def __init__(self, config: Mapping[str, str] | None = None, *, vcpus: int = 4, quota_limit: int = 1000,
                 fail_create_at: int | None = None, fail_delete_after: int | None = None,
                 credentials: bool = True) -> None:
        self.resources: dict[str, Resource] = {}
        self.vcpu_count = vcpus
        self.quota_limit = quota_limit
        self.fail_create_at = fail_create_at  # the Nth create call (1-based) raises
        self.fail_delete_after = fail_delete_after  # delete raises after removing this many
        self.credentials = credentials
        self.create_calls = 0
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def check_credentials(self) -> None:
        if not self.credentials:
            raise AuthMissing("no memory credentials: set MEMORY_TOKEN")

    def vcpus(self, region: str, size: str) -> int:
        return self.vcpu_count

    def quota(self, region: str, size: str, spot: bool = False) -> list[QuotaUsage]:
        used = self.vcpu_count * sum(1 for r in self.resources.values() if r.kind == "instance")
        return [QuotaUsage("memoryFamily", "Memory family vCPUs", self.quota_limit, used, how_to_raise="ask nicely")]

    def machines(self, region: str, match: Mapping[str, str]) -> dict[str, Instance]:
        return {r.name: self._instance(r) for r in list(self.resources.values())
                if r.kind == "instance" and r.region == region and all(r.tags.get(k) == v for k, v in match.items())}

    def launch(self, spec: NodeSpec, names: Sequence[str]) -> list[Instance]:
        out = []
        for name in names:
            with self._lock:
                self.create_calls += 1
                if self.fail_create_at is not None and self.create_calls == self.fail_create_at:
                    raise ProviderError(f"memory: create of {name} failed (injected)")
                rid = f"i-{next(self._ids)}"
                tags = {**spec.tags, TAG_NODE: name}
                self.resources[rid] = Resource("instance", rid, spec.region, tags, name)
                disk = f"d-{next(self._ids)}"
                self.resources[disk] = Resource("disk", disk, spec.region, tags, name + "-disk")
            out.append(self._instance(self.resources[rid]))
        return out

    def _instance(self, r: Resource) -> Instance:
        n = int(r.id.split("-")[1])
        return Instance(r.id, r.name, "running", public_ip=f"198.51.100.{n}", private_ip=f"10.0.0.{n}")

    def describe(self, region: str, ids: Sequence[str]) -> list[Instance]:
        return [self._instance(self.resources[i]) for i in ids if i in self.resources]

    def capture(self, region: str, instance_id: str, image_name: str, tags: Mapping[str, str]) -> Image:
        rid = f"img-{next(self._ids)}"
        self.resources[rid] = Resource("image", rid, region, dict(tags), image_name)
        return Image(rid, image_name, region)

    def list(self, region: str, tags: Mapping[str, str]) -> list[Resource]:
        return [r for r in self.resources.values()
                if r.region == region and all(r.tags.get(k) == v for k, v in tags.items())]

    def delete(self, region: str, resources: Sequence[Resource]) -> None:
        for n, r in enumerate(resources):
            if self.fail_delete_after is not None and n >= self.fail_delete_after:
                self.fail_delete_after = None
                raise ProviderError("memory: delete interrupted (injected)")
            self.resources.pop(r.id, None)

    def default_regions(self) -> list[str]:
        return ["mem-1"]

