"""The tags gpuplan puts on everything a provider creates, and the few rules for using them.

A sweep finds a resource the state lost by these tags alone, so every provider writes the same
ones: `gpuplan-cluster` and `gpuplan-owner` on everything of a cluster, `gpuplan-node` on what
belongs to one machine, `gpuplan-created` (Unix seconds when the provision started) so a sweep
can tell a young resource from an old one, `gpuplan-installation` (the home that made it), and
`gpuplan-image` instead of `gpuplan-cluster` on captured images, so a cluster's teardown leaves them alone.
"""

from __future__ import annotations

from collections.abc import Mapping

TAG_CLUSTER = "gpuplan-cluster"
TAG_OWNER = "gpuplan-owner"
TAG_NODE = "gpuplan-node"
TAG_CREATED = "gpuplan-created"
TAG_IMAGE = "gpuplan-image"
# The installation (one gpuplan home, one state) that made a resource: two homes may share an
# owner on purpose (config `owner:`), never an installation.
TAG_INSTALLATION = "gpuplan-installation"
IDENTITY = (TAG_CLUSTER, TAG_OWNER, TAG_INSTALLATION)


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


def identity(tags: Mapping[str, str]) -> dict[str, str]:
    """The tags that say whose a cluster's resource is: its cluster, owner and installation
    (those present). Every lookup of a cluster matches all of them, so a cluster of the same
    name made by another installation in the same account is never taken for this one."""
    return {k: tags[k] for k in IDENTITY if tags.get(k)}


def account_name(tags: Mapping[str, str]) -> str:
    """A name that must be unique in the whole account (AWS key pair and security group, Azure
    resource group): "gpuplan-<cluster>-<installation>". Clusters made before installations
    were tagged keep their old "gpuplan-<cluster>"."""
    installation = tags.get(TAG_INSTALLATION)
    return f"gpuplan-{tags[TAG_CLUSTER]}" + (f"-{installation}" if installation else "")


def foreign(have: Mapping[str, str], want: Mapping[str, str]) -> str:
    """Why a resource found by an account-unique name is not this cluster's ("" when it is):
    the first identity tag whose value differs."""
    for k in IDENTITY:
        if k in want and have.get(k) != want[k]:
            return f"its {k} tag is {have.get(k)!r}, not {want[k]!r}"
    return ""
