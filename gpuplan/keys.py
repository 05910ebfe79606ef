"""SSH key pairs gpuplan generates locally: cluster login keys, node host keys, node-to-node keys."""

from __future__ import annotations


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
