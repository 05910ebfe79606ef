"""SSH key pairs gpuplan generates locally: cluster login keys, node host keys, node-to-node keys.

They live in `<state_dir>/keys/` (0700), each private key 0600 from its first byte, and go when
their cluster is torn down: `<cluster>` (login key), `<cluster>-intra` (+ .pub, node-to-node,
made by the cluster-network playbook) and `<cluster>.hostkeys/<node>` (one-time host keys).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from gpuplan import paths
from gpuplan.fleet.provider import HostKey

if TYPE_CHECKING:
    from gpuplan.store.state import State


def ed25519_pair() -> tuple[str, str]:
    """(private key in OpenSSH PEM, public key line "ssh-ed25519 AAAA...")."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return private, public


def key_dir() -> Path:
    folder = paths.state_dir() / "keys"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder.chmod(0o700)
    return folder


def cluster_login_key(state: State, cluster: str) -> tuple[Path, str]:
    """The cluster's login key (made once; its path and public line are kept in the state)."""
    existing = state.ssh_key(cluster)
    if existing and existing[0].exists():
        return existing
    private, public = ed25519_pair()
    path = key_dir() / cluster
    paths.write_owner_only(path, private)
    public_line = f"{public} gpuplan-{cluster}"
    state.save_ssh_key(cluster, path, public_line)
    return path, public_line


def node_host_key(cluster: str, node: str) -> HostKey:
    """The one-time SSH host key gpuplan injects into a node at creation. Kept (0600) so a
    resumed provision injects and pins the same key a half-made machine may already have."""
    from cryptography.hazmat.primitives import serialization

    path = key_dir() / f"{cluster}.hostkeys" / node
    if path.exists():
        private = path.read_text()
        key = serialization.load_ssh_private_key(private.encode(), password=None)
        public = key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
        return HostKey(private, public)
    private, public = ed25519_pair()
    paths.write_owner_only(path, private)
    return HostKey(private, public)


def remove_cluster_keys(state: State, cluster: str) -> None:
    """Delete the cluster's key files and forget its login key. Only files gpuplan made in its
    own key folder are touched (a bare-metal cluster may log in with a key of the user's)."""
    folder = key_dir()
    saved = state.ssh_key(cluster)
    login = saved[0] if saved else folder / cluster
    if login.parent.resolve() == folder.resolve():
        for path in (login, Path(f"{login}-intra"), Path(f"{login}-intra.pub")):
            path.unlink(missing_ok=True)
    shutil.rmtree(folder / f"{cluster}.hostkeys", ignore_errors=True)
    state.forget_ssh_key(cluster)
