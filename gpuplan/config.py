"""The user's config file, `<config_dir>/config.yaml`:

    owner: alice-laptop            # gpuplan-owner tag value (default: user-host-<installation id>)
    user: alice                    # who you are on a shared state (default: GPUPLAN_USER, else your login)
    project: vision                # the project your spend counts to by default (docs/teams.md)
    preferred_regions: [ap-northeast-1, japaneast, is1a]   # estimate and provision stay in these
    state_url: postgresql://alice@db.example:5432/gpuplan   # a team's shared state (default: SQLite)
    providers:
      aws: {ami: ami-0123..., ssh_cidr: 203.0.113.5/32}   # SSH source (default: your address, detected)
      azure: {ssh_source: 203.0.113.5}
      baremetal: {inventory: ~/gpus.yaml}
"""

from __future__ import annotations

import getpass
import os
import re
import socket
from typing import Any

from gpuplan import paths
from gpuplan.errors import UsageError


def _load() -> dict[str, Any]:
    path = paths.config_dir() / "config.yaml"
    if not path.exists():
        return {}
    import yaml

    from gpuplan.userfiles import load_yaml, read_text, yaml_problem

    text = read_text(path, "config file", "fix or remove it (README: Providers and credentials)")
    try:
        data = load_yaml(text) or {}
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: not valid YAML ({yaml_problem(exc)}); fix or remove the file") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping at the top level")
    unknown = sorted(set(map(str, data)) - KEYS)
    if unknown:  # a misspelt or invented setting would otherwise change nothing, silently
        raise UsageError(f"{path}: unknown setting {unknown[0]!r}; the settings are {', '.join(sorted(KEYS))}"
                         " (owned hardware goes in the bare-metal inventory or `estimate --owned`)")
    _check(data, path)
    return data


def _check(data: dict[str, Any], path) -> None:
    """Every setting read or refused (gpuplan/schemas/config.schema.json): an unknown provider or
    a misspelt provider setting would otherwise change nothing, silently. A provider added by a
    plugin (entry point gpuplan.providers) takes whatever settings it documents."""
    from gpuplan.errors import Mistakes
    from gpuplan.schemas.check import problems, schema

    sch = schema("config")
    providers = data.get("providers")
    if isinstance(providers, dict) and set(map(str, providers)) - set(sch["properties"]["providers"]["properties"]):
        from gpuplan.fleet.provider import available

        plugins = set(available()) - set(sch["properties"]["providers"]["properties"])
        known = sorted(set(sch["properties"]["providers"]["properties"]) | plugins)
        unknown = [str(k) for k in providers if str(k) not in known]
        if unknown:
            from gpuplan.userfiles import printable

            raise UsageError(f"{path}: providers.{printable(unknown[0])}: unknown provider; the providers are"
                             f" {', '.join(known)}")
        data = {**data, "providers": {k: v for k, v in providers.items() if str(k) not in plugins}}
    mistakes = problems(data, sch)
    if mistakes:
        raise Mistakes(str(path), mistakes)


KEYS = frozenset({"owner", "preferred_regions", "providers", "user", "project", "state_url"})


def provider_config(name: str) -> dict[str, str]:
    providers = _load().get("providers") or {}
    if not isinstance(providers, dict):
        raise UsageError(f"{paths.config_dir() / 'config.yaml'}: providers must be a mapping of provider name to settings")
    section = providers.get(name) or {}
    if not isinstance(section, dict):
        raise UsageError(f"{paths.config_dir() / 'config.yaml'}: providers.{name} must be a mapping")
    return {str(k): str(v) for k, v in section.items()}


def setting(key: str) -> str | None:
    """A plain text setting of config.yaml (`user:`, `project:`), None where it is not set."""
    value = _load().get(key)
    return str(value) if value not in (None, "") else None


def owner() -> str | None:
    """The configured gpuplan-owner tag value, if the user set one (to sweep across several
    installations on purpose); otherwise the installation's own (lifecycle.owner)."""
    configured = _load().get("owner")
    return tag_value(str(configured)) if configured else None


def legacy_owner() -> str:
    """The owner tag gpuplan wrote before owners were per installation: user-host, the same for
    every installation of one user on one host."""
    return tag_value(f"{getpass.getuser()}-{socket.gethostname()}")


def tag_value(raw: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]", "-", raw)[:63]


def preferred_regions() -> list[str]:
    """The regions (or zones) `preferred_regions:` in config.yaml names, in order; [] = any."""
    raw = _load().get("preferred_regions")
    if raw is None:
        return []
    if isinstance(raw, str):
        raw = [r for r in re.split(r"[,\s]+", raw) if r]
    if not isinstance(raw, list) or not all(isinstance(r, str) and r.strip() for r in raw):
        raise UsageError(f"{paths.config_dir() / 'config.yaml'}: preferred_regions must be a list of region names, "
                         "e.g. [ap-northeast-1, japaneast, is1a]")
    from gpuplan.userfiles import check_plain

    return [check_plain(r.strip(), f"{paths.config_dir() / 'config.yaml'}: preferred_regions entry") for r in raw]


def state_url() -> str | None:
    """The PostgreSQL state a team shares: GPUPLAN_STATE_URL, else `state_url:` in config.yaml;
    None: the SQLite file in the state folder (the default). A URL holding a password is refused."""
    from gpuplan.store.sql import check_url

    url = os.environ.get("GPUPLAN_STATE_URL", "").strip()
    if url:
        return check_url(url, "GPUPLAN_STATE_URL")
    configured = _load().get("state_url")
    if configured:
        return check_url(str(configured).strip(), f"{paths.config_dir() / 'config.yaml'}: state_url")
    return None
