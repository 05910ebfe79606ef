"""Where gpuplan keeps its files: GPUPLAN_HOME overrides the platform directories."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path | None:
    value = os.environ.get("GPUPLAN_HOME")
    if not value:
        return None
    from gpuplan.userfiles import expand

    return expand(value, "GPUPLAN_HOME")


def config_dir() -> Path:
    """User configuration: price/FX overrides (prices.yaml), inventory files."""
    if (h := home()) is not None:
        return h / "config"
    import platformdirs

    return Path(platformdirs.user_config_dir("gpuplan"))


def state_dir() -> Path:
    """The SQLite state store, SSH keys, fetched logs, measured profiles."""
    if (h := home()) is not None:
        return h / "state"
    import platformdirs

    return Path(platformdirs.user_state_dir("gpuplan"))


def data_dir() -> Path:
    """Data gpuplan writes for the user that is not state: catalog snapshots from `catalog refresh`."""
    if (h := home()) is not None:
        return h / "data"
    import platformdirs

    return Path(platformdirs.user_data_dir("gpuplan"))


def state_db() -> Path:
    return state_dir() / "state.db"


def write_owner_only(path: Path, text: str) -> None:
    """Write a file (a private key, known_hosts, the installation id) readable by its owner
    only, never for a moment by anyone else."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)
