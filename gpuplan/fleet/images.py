"""Captured images: set a machine up once, capture it, start every further machine from it.

Build = a one-machine builder cluster -> bootstrap -> capture -> builder torn down, under the
image's lock and the builder cluster's. The
builder is never a worker afterwards (on Azure a generalized VM cannot be used again; on the
other clouds keeping it would only bill idle time). Images carry the tags `gpuplan-image` and
`gpuplan-owner`, not the cluster tag, so a cluster teardown keeps them and `teardown --images`
or a sweep with --images finds them.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone

from gpuplan.errors import GpuplanError, RemoteError, UsageError
from gpuplan.fleet import lifecycle, locks
from gpuplan.fleet.provider import TAG_CREATED, TAG_IMAGE, TAG_OWNER, Provider, Resource
from gpuplan.planning.types import Offer
from gpuplan.store.state import ImageRow, State


def default_name(offer: Offer) -> str:
    base = (offer.aliases[0] if offer.aliases else offer.name).lower()
    base = re.sub(r"[^a-z0-9]+", "-", base).strip("-")[:16]
    return f"{base}-{datetime.now(timezone.utc):%Y%m%d-%H%M}"


def builder_name(image: str) -> str:
    """The one-machine cluster an image is built on."""
    return lifecycle.check_name(f"{image[:29].rstrip('-')}-b")


def build(
    state: State,
    prov: Provider,
    offer: Offer,
    name: str | None = None,
    playbooks: list[str] | None = None,
    region: str | None = None,
    progress: lifecycle.Progress = lifecycle._quiet,
    ssh_cidr: str | None = None,
) -> ImageRow:
    name = name or default_name(offer)
    builder = builder_name(name)
    with locks.image(name), locks.cluster(builder):
        return _build(state, prov, offer, name, builder, playbooks, region or offer.region, progress, ssh_cidr)


def _build(state: State, prov: Provider, offer: Offer, name: str, builder: str, playbooks: list[str] | None,
           region: str, progress: lifecycle.Progress, ssh_cidr: str | None) -> ImageRow:
    if state.image(name) is not None and state.image(name).status != "deleted":
        raise UsageError(f"an image named {name!r} already exists; pick another --name or delete it first")
    state.add_image(name, offer.provider, region, offer.name, ",".join(playbooks or []))
    req = lifecycle.request_from_offer(offer, 1, name=builder, region=region, ssh_cidr=ssh_cidr)
    try:
        lifecycle.provision(state, prov, req, progress=progress)
        from gpuplan.hosts.playbook import bootstrap_cluster

        progress(f"setting up builder {builder}")
        bootstrap_cluster(state, builder, playbooks or None, {}, progress=progress)
        node = state.nodes(builder)[0]
        if prov.capture_prep_command:
            from gpuplan.hosts import remote

            [host] = remote.cluster_hosts(state, builder)
            result = remote.run(host, prov.capture_prep_command, timeout=600, sudo=True)
            if not result.ok:
                raise RemoteError(f"{node.name}: `{prov.capture_prep_command}` exited {result.exit_code} before capture: "
                                  f"{result.why()}")
        state.update_image(name, status="capturing")
        progress(f"capturing {name} from {node.name}")
        with state.journaled("capture-image", name, builder, node.provider_id or ""):
            image = prov.capture_image(region, node.provider_id, name, {
                TAG_IMAGE: name, TAG_OWNER: lifecycle.owner(state), TAG_CREATED: str(int(time.time()))})
        state.update_image(name, status="ready", provider_id=image.id)
    except BaseException:
        state.update_image(name, status="failed")
        raise
    finally:
        if state.cluster(builder) is not None and state.cluster(builder).status != "gone":
            progress(f"removing builder {builder}")
            lifecycle.teardown(state, prov, builder, progress=progress)
    return state.image(name)


def delete(state: State, prov: Provider, name: str, progress: lifecycle.Progress = lifecycle._quiet) -> None:
    """Delete one image and its snapshots, under the image's lock."""
    with locks.image(name):
        _delete(state, prov, name, progress)


def _delete(state: State, prov: Provider, name: str, progress: lifecycle.Progress) -> None:
    row = state.image(name)
    if row is None:
        raise UsageError(f"no image named {name!r}; `gpuplan image list` shows them")
    state.update_image(name, status="deleting")
    with state.journaled("delete-image", name, None, row.provider_id or ""):
        found = prov.list(row.region, {TAG_IMAGE: name})
        if not found and row.provider_id:
            found = [Resource("image", row.provider_id, row.region, {TAG_IMAGE: name}, name)]
        if found:
            progress(f"deleting image {name} ({len(found)} resource(s))")
            prov.delete(row.region, found)
        left = prov.list(row.region, {TAG_IMAGE: name})
        if left:
            raise GpuplanError(f"image {name} still has {len(left)} resource(s) after delete; run the delete again")
    state.update_image(name, status="deleted")
