"""The tags gpuplan puts on everything a provider creates, and the few rules for using them.

A sweep finds a resource the state lost by these tags alone, so every provider writes the same
ones: `gpuplan-cluster` and `gpuplan-owner` on everything of a cluster, `gpuplan-node` on what
belongs to one machine, `gpuplan-created` (Unix seconds when the provision started) so a sweep
can tell a young resource from an old one, and `gpuplan-image` instead of `gpuplan-cluster` on
captured images, so a cluster's teardown leaves them alone.
"""

from __future__ import annotations

from collections.abc import Mapping

TAG_CLUSTER = "gpuplan-cluster"
TAG_OWNER = "gpuplan-owner"
TAG_NODE = "gpuplan-node"
TAG_CREATED = "gpuplan-created"
TAG_IMAGE = "gpuplan-image"


def for_node(tags: Mapping[str, str], node: str) -> dict[str, str]:
    """A cluster's tags plus the node that one resource belongs to."""
    return {**tags, TAG_NODE: node}


def for_image(tags: Mapping[str, str], image_name: str) -> dict[str, str]:
    """Tags for a captured image: the owner and creation time, never a cluster or node."""
    out = {k: v for k, v in tags.items() if k not in (TAG_CLUSTER, TAG_NODE)}
    out[TAG_IMAGE] = image_name
    return out


def carries(have: Mapping[str, str], want: Mapping[str, str]) -> bool:
    """Whether `have` carries every tag of `want` with the same value."""
    return all(have.get(k) == v for k, v in want.items())
