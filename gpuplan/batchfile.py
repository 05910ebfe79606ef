"""The batch file `gpuplan launch` takes (docs/batch.md; JSON Schema gpuplan/schemas/batch.schema.json):
what to plan, the items, the command, where it may run and what it may cost, in one YAML file.

    workload: colorize-hd            # built-in name or a workload file; one job per item
    items: videos.txt                # one item per line
    command: python colorize.py {item} --out {out}
    image: registry.example/me/colorize:1    # optional: each item runs in this container
    infra: [sakura, baremetal]       # optional: only these providers
    max_yen: 500                     # optional: the batch stops before it spends more
    project: vision                  # optional: whose monthly budget it spends (docs/teams.md)
    checkpoint: {every: 10m}         # optional: how often each item's job saves its work (spot risk)
    recover: true                    # optional: a node lost or taken back mid-batch is replaced
    on_demand_fallback: true         # optional, with recover on spot: on-demand when spot capacity is gone
    failover: {regions: false, wait: 2h}  # optional: what the next plan may change when the cloud refuses

Paths are relative to the batch file. Every field can be given on the command line instead
(`gpuplan launch --items v.txt --workload colorize-hd -- python colorize.py {item}`); a flag wins
over the file. Read once, checked field by field (one line and exit 2 for each mistake), and
turned into a frozen Batch: nothing downstream reads the YAML again.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from gpuplan.errors import UsageError
from gpuplan.units import MAX_YEN
from gpuplan.userfiles import ENV_NAME as _ENV_NAME

FIELDS = frozenset({"name", "workload", "profile", "items", "command", "image", "registry", "workdir", "setup", "env",
                    "secret_env", "infra", "region", "objective", "deadline", "max_yen", "outputs", "per_gpu", "retries",
                    "timeout", "playbooks", "params", "spot", "probe", "tax", "checkpoint", "recover", "on_demand_fallback",
                    "max_yen_per_hour", "failover", "gpus", "project"})
REGISTRY_FIELDS = frozenset({"server", "username", "password_env", "dok_registry"})
PROBE_FIELDS = frozenset({"command", "units"})
FAILOVER_FIELDS = frozenset({"regions", "providers", "on_demand", "plans", "wait"})
OBJECTIVES = ("balanced", "cost", "time")
_NAME = re.compile(r"[a-z][a-z0-9-]{0,39}\Z")
# a container image reference as docker and DOK parse it: [registry[:port]/]path[:tag][@digest]
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE = re.compile(rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
                    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?\Z")


@dataclass(frozen=True)
class Registry:
    """How a private image is pulled. The secret itself is never in the batch file: `password_env`
    names the environment variable that holds it (read when the image is pulled, fed to `docker
    login --password-stdin`). On 高火力 DOK the credentials are registered with DOK and named by
    their UUID (`dok_registry`)."""

    server: str = ""
    username: str = ""
    password_env: str = ""
    dok_registry: str = ""

    def password(self) -> str:
        """The secret, read from `password_env` now ("" where the login names none)."""
        if not self.password_env:
            return ""
        from gpuplan.run.ray.containers import secret_from_env

        return secret_from_env(self.password_env)


@dataclass(frozen=True)
class Probe:
    """How `gpuplan probe` measures the batch's own job: `command` with {units} (how much work:
    the workload's unit) and {item} (the first item), run at two sizes so that the start cost
    and the time per unit come apart; `units` those sizes (None: from the planned speed, about
    half a minute and two minutes of work)."""

    command: tuple[str, ...]
    units: tuple[int, int] | None = None


@dataclass(frozen=True)
class Failover:
    """What a launch may change when every zone of its pick's region refuses it (issue 44:
    run/failover.py): plan again in other regions, with other providers, a spot pick on
    on-demand; at most `plans` next plans; and, where none is left, keep trying for `wait_s`
    seconds (within the batch's deadline) for the capacity to come back. Zones of one region are
    always tried in turn: that is the provider's own way to one machine, not another plan."""

    regions: bool = True
    providers: bool = True
    on_demand: bool = True
    plans: int = 3
    wait_s: int = 0


@dataclass(frozen=True)
class Batch:
    """One batch as `gpuplan launch` runs it. `command` is a list of words ({item} and {out} are
    filled in per item); `infra` the providers it may run on (empty: any); `max_yen` the cap."""

    items: Path | None  # None: the items are in the file itself (item_list)
    command: tuple[str, ...]
    workload: str = ""  # a built-in workload name or a workload file's path
    profile: Path | None = None
    name: str = ""
    image: str = ""
    registry: Registry | None = None
    workdir: Path | None = None
    setup: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    # `secret_env: [HF_TOKEN]`: names whose values are read from the caller's environment when the
    # batch is submitted (secret_env_values), as the registry password is; never in the file
    secret_env: tuple[str, ...] = ()
    infra: tuple[str, ...] = ()
    region: str = ""
    objective: str = "balanced"
    deadline: str = ""
    max_yen: Decimal | None = None
    max_yen_per_hour: Decimal | None = None  # plans whose fleet costs more an hour are left out (issue 44)
    outputs: Path | None = None
    per_gpu: int = 1
    retries: int = 0
    timeout_s: int = 24 * 3600
    playbooks: tuple[str, ...] | None = None  # None: the default for the machines (cloud VMs: the GPU stack; owned: none)
    params: Mapping[str, str] = field(default_factory=dict)
    spot: bool = False
    tax: str = "included"  # the tax basis its yen are planned and capped on (market/tax.py)
    probe: Probe | None = None  # None: the batch says no way to measure its job in a few units
    source: Path | None = None  # the batch file it was read from (None: the command line alone)
    # `checkpoint: {every: 10m, path: DIR}`: how often each item's job saves its work (None: not
    # said; the workload's own then holds) and where; the planner prices redone spot work with it
    checkpoint_s: int | None = None
    checkpoint_path: str = ""
    recover: bool = False  # a node lost, or taken back by the cloud, mid-batch gets a replacement (run --recover)
    on_demand_fallback: bool = False  # a spot cluster's replacement is bought on-demand when spot capacity is gone
    failover: Failover = Failover()  # what the next plan may change when the cloud refuses the pick
    gpus: str = ""  # only machines with these GPUs (market/gpus.py: "V100:4"); "": any the planner picks
    item_list: tuple[str, ...] = ()  # `items: [a, b]` in the file: the items themselves (items is then None)
    project: str = ""  # `project:` (team.project resolves it with --project and config; "": not said)

    def planned(self, workload):
        """The workload as this batch plans it: with the batch's checkpoint where it gives one
        (a batch's word wins over its workload file's)."""
        from dataclasses import replace

        if self.checkpoint_s is None:
            return workload
        return replace(workload, checkpoint_s=self.checkpoint_s,
                       checkpoint_path=self.checkpoint_path or workload.checkpoint_path)


def read(path: Path | None, overrides: Mapping[str, Any], loaded_data: dict[str, Any] | None = None) -> Batch:
    """The batch of `path` (None: none) with the command line's `overrides` (None values are not
    given) applied on top; every field checked. `loaded_data`: the file's fields, already read
    (a SkyPilot or dstack task converted: gpuplan/foreign.py)."""
    data: dict[str, Any] = {}
    base = Path.cwd()
    where = "the command line"
    if path is not None and loaded_data is not None:
        data = dict(loaded_data)
        check_file(data, path)
        base = path.resolve().parent
        where = f"batch of {path}"
    elif path is not None:
        from gpuplan.userfiles import load_yaml, read_text

        text = read_text(path, "batch file", "see docs/batch.md for its fields")
        try:
            loaded = load_yaml(text)
        except Exception as exc:  # yaml.YAMLError: one line, where it is
            mark = getattr(exc, "problem_mark", None)
            at = f" line {mark.line + 1}" if mark is not None else ""
            raise UsageError(f"batch file {path}{at}: not valid YAML ({getattr(exc, 'problem', None) or type(exc).__name__})"
                             ) from None
        if not isinstance(loaded, dict):
            raise UsageError(f"batch file {path}: expected a mapping with items, command and workload (docs/batch.md)")
        data = {str(k): v for k, v in loaded.items()}
        check_file(data, path)
        base = path.resolve().parent
        where = f"batch file {path}"
    given = {k: v for k, v in overrides.items() if v is not None and v != () and v != []}
    return _batch({**data, **given}, base, set(given), where, path)


# fields whose empty list is a choice (no setup, no playbooks); anywhere else an empty value
# would silently mean "none" or "any" (`max_yen:` with nothing after it: no cap; `infra: []`: anywhere)
_MAY_BE_EMPTY = frozenset({"setup", "playbooks", "env", "params"})


def check_file(data: dict[str, Any], path: Path) -> None:
    """Every mistake of a batch file at once (its JSON Schema, gpuplan/schemas/batch.schema.json,
    plus an empty value where one means nothing); errors.Mistakes when there is any."""
    from gpuplan.errors import Mistakes
    from gpuplan.schemas.check import problems

    empty = [f"{k}: empty; give a value or leave the line out" for k, v in data.items()
             if k in FIELDS and (v is None or v == "" or (v in ([], {}) and k not in _MAY_BE_EMPTY))]
    lines = empty + [p for p in problems(data, "batch") if p.split(":")[0] not in {e.split(":")[0] for e in empty}]
    if lines:
        raise Mistakes(f"batch file {path}", lines)


def _batch(data: dict[str, Any], base: Path, flags: set[str], where: str, source: Path | None) -> Batch:
    def at(key: str) -> str:
        return f"--{key.replace('_', '-')}" if key in flags else f"{where}: {key}"

    def path_of(key: str) -> Path | None:
        value = data.get(key)
        if value in (None, ""):
            return None
        text = _text(at(key), value)
        from gpuplan.userfiles import expand

        p = expand(text, at(key))
        return p if p.is_absolute() or key in flags else base / p

    item_list: tuple[str, ...] = ()
    if isinstance(data.get("items"), list) and "items" not in flags:  # `items: [task]`: the items themselves
        item_list = tuple(_text(at("items"), v) for v in data["items"])
        items = None
    else:
        items = path_of("items")
        if items is None:
            raise UsageError(f"{where} names no items: give `items: FILE` (one item per line) or --items FILE")
    command = _command(at("command"), data.get("command"))
    workload = _text(at("workload"), data.get("workload") or "")
    if workload and (workload.endswith((".yaml", ".yml")) or "/" in workload) and "workload" not in flags:
        workload = str(base / workload) if not Path(workload).is_absolute() else workload
    from gpuplan.market import tax as taxes

    objective = _text(at("objective"), data.get("objective") or "balanced")
    if objective not in OBJECTIVES:
        raise UsageError(f"{at('objective')} {objective!r}: use balanced, cost or time")
    deadline = _text(at("deadline"), data.get("deadline") or "")
    if deadline:
        from gpuplan.units import parse_duration

        parse_duration(deadline, at("deadline"))
    name = _text(at("name"), data.get("name") or "")
    if name and not _NAME.match(name):
        raise UsageError(f"{at('name')} {name!r}: a cluster name of lowercase letters, digits and '-', starting with a"
                         " letter, at most 40 characters")
    workdir = path_of("workdir")
    if workdir is not None and not workdir.is_dir():
        raise UsageError(f"{at('workdir')} {workdir}: no such folder; give the folder to copy to every node")
    image = _text(at("image"), data.get("image") or "")
    if image and not _IMAGE.match(image):
        raise UsageError(f"{at('image')} {image!r}: not an image reference; write [REGISTRY/]NAME[:TAG] in lowercase, such"
                         " as ghcr.io/me/colorize:1")
    from gpuplan.planning.workloads import checkpoint

    checkpoint_s, checkpoint_path = checkpoint(at("checkpoint"), data.get("checkpoint"))
    recover = _flag(at("recover"), data.get("recover", False))
    on_demand_fallback = _flag(at("on_demand_fallback"), data.get("on_demand_fallback", False))
    if on_demand_fallback and not recover:
        raise UsageError(f"{at('on_demand_fallback')}: says how a replacement is bought; give recover: true (or"
                         " --recover) too")
    env = _env(at("env"), data.get("env"))
    timeout = data.get("timeout", 24 * 3600)
    if "timeout" in data:
        from gpuplan.units import parse_duration

        timeout = parse_duration(timeout, at("timeout"), bare_meant="seconds")
    gpus = ""
    if data.get("gpus") not in (None, ""):
        from gpuplan.market import gpus as gpu_asks

        gpus = gpu_asks.parse(_text(at("gpus"), data["gpus"]), at("gpus")).text()
    return Batch(
        items=items, command=command, workload=workload, profile=path_of("profile"), name=name,
        image=image, registry=_registry(at("registry"), data.get("registry")),
        workdir=workdir, setup=_setup(at("setup"), data.get("setup")), env=env,
        secret_env=secret_env_names(at("secret_env"), data.get("secret_env"), env),
        infra=_words(at("infra"), data.get("infra")), region=_text(at("region"), data.get("region") or ""),
        objective=objective, deadline=deadline, max_yen=_yen(at("max_yen"), data.get("max_yen")),
        max_yen_per_hour=_yen(at("max_yen_per_hour"), data.get("max_yen_per_hour")),
        outputs=path_of("outputs"), per_gpu=_whole(at("per_gpu"), data.get("per_gpu", 1), 1, 16),
        retries=_whole(at("retries"), data.get("retries", 0), 0, 100),
        timeout_s=_whole(at("timeout"), timeout, 1, 366 * 86400),
        playbooks=None if data.get("playbooks") is None else _words(at("playbooks"), data.get("playbooks")),
        params=_env(at("params"), data.get("params")), spot=_flag(at("spot"), data.get("spot", False)),
        tax=taxes.parse(_text(at("tax"), data.get("tax") or "included"), at("tax")),
        probe=_probe(at("probe"), data.get("probe"), command), source=source, checkpoint_s=checkpoint_s,
        checkpoint_path=checkpoint_path, recover=recover, on_demand_fallback=on_demand_fallback, gpus=gpus,
        item_list=item_list, failover=_failover(at("failover"), data.get("failover"), deadline),
        project=_project(at("project"), data.get("project")))


def _project(at: str, value: Any) -> str:
    if value in (None, ""):
        return ""
    from gpuplan.team import check_name

    return check_name(_text(at, value), at)


def _text(at: str, value: Any) -> str:
    if isinstance(value, os.PathLike):  # a path given on the command line
        value = os.fspath(value)
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise UsageError(f"{at}: expected text, not {type(value).__name__}")
    from gpuplan.userfiles import check_plain

    return check_plain(str(value), at)


def _command(at: str, value: Any) -> tuple[str, ...]:
    if value in (None, "", []):
        raise UsageError(f"{at}: the batch has no command; give `command: python run.py {{item}}` or the command after --")
    if isinstance(value, str):
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise UsageError(f"{at}: {exc}; quote it as a shell command line") from None
    elif isinstance(value, list) and all(isinstance(w, (str, int)) and not isinstance(w, bool) for w in value):
        words = [str(w) for w in value]
    else:
        raise UsageError(f"{at}: a command line (text) or a list of words")
    if not any("{item}" in w for w in words):
        raise UsageError(f"{at} {shlex.join(words)!r} has no {{item}}: say where each item goes")
    from gpuplan.run.command_line import is_script

    # a shell's script (`bash -c SCRIPT`, a SkyPilot task's run:) may span lines; any other word is one line
    return tuple(_script(at, w) if is_script(words, i) else _text(at, w) for i, w in enumerate(words))


def _script(at: str, value: str) -> str:
    """A shell script's text: lines and tabs allowed, any other control character refused."""
    _text(at, value.replace("\n", " ").replace("\t", " "))
    return value


def _probe(at: str, value: Any, command: tuple[str, ...]) -> Probe | None:
    """`probe: {command: ..., units: [A, B]}`; a command alone is the probe command; none given:
    the batch's own command where it has {units}."""
    if value in (None, ""):
        return Probe(command) if any("{units}" in w for w in command) else None
    if isinstance(value, (str, list)):
        value = {"command": value}
    if not isinstance(value, dict):
        raise UsageError(f"{at}: a mapping with command (with {{units}}) and units: [A, B]")
    unknown = sorted(set(map(str, value)) - PROBE_FIELDS)
    if unknown:
        raise UsageError(f"{at}: unknown field {unknown[0]!r}; use command and units")
    words = command
    if value.get("command") not in (None, "", []):
        raw = value["command"]
        if isinstance(raw, str):
            try:
                words = tuple(shlex.split(raw))
            except ValueError as exc:
                raise UsageError(f"{at}.command: {exc}; quote it as a shell command line") from None
        elif isinstance(raw, list) and all(isinstance(w, (str, int)) and not isinstance(w, bool) for w in raw):
            words = tuple(str(w) for w in raw)
        else:
            raise UsageError(f"{at}.command: a command line (text) or a list of words")
        words = tuple(_text(f"{at}.command", w) for w in words)
    if not any("{units}" in w for w in words):
        raise UsageError(f"{at}.command {shlex.join(words)!r} has no {{units}}: say where the amount of work goes"
                         " (e.g. --steps {units}), so that two sizes can be timed")
    units = value.get("units")
    if units is None:
        return Probe(words)
    if not isinstance(units, list) or len(units) != 2:
        raise UsageError(f"{at}.units {units!r}: two sizes, such as [2, 10] (the smaller first)")
    a, b = (_whole(f"{at}.units", u, 1, 10**9) for u in units)
    if a >= b:
        raise UsageError(f"{at}.units {units!r}: two different sizes, the smaller first, such as [2, 10]")
    return Probe(words, (a, b))


def _failover(at: str, value: Any, deadline: str) -> Failover:
    """`failover: {regions: false, providers: false, on_demand: false, plans: 2, wait: 2h}`; each
    left out keeps its default (the next plan may be anywhere the batch may run, at most 3, no
    waiting); `failover: false` is no next plan and no waiting."""
    if value is None:
        return Failover()
    if value is False:
        return Failover(plans=0)
    if not isinstance(value, dict):
        raise UsageError(f"{at}: a mapping such as {{regions: false, wait: 2h}}, or false for no next plan")
    unknown = sorted(set(map(str, value)) - FAILOVER_FIELDS)
    if unknown:
        raise UsageError(f"{at}: unknown field {unknown[0]!r}; use {', '.join(sorted(FAILOVER_FIELDS))}")
    wait_s = 0
    if value.get("wait") not in (None, 0, "0"):
        from gpuplan.units import parse_duration

        raw = value["wait"]
        if isinstance(raw, bool) or not isinstance(raw, str):
            raise UsageError(f"{at}.wait {raw!r}: a duration with its unit, such as 30m or 2h")
        wait_s = parse_duration(raw, f"{at}.wait")
        if deadline:
            limit = parse_duration(deadline, "deadline")
            if wait_s >= limit:
                raise UsageError(f"{at}.wait {raw}: as long as the deadline ({deadline}) or longer, so the batch could"
                                 " not finish in time after it; wait less, or give a later deadline")
    return Failover(regions=_flag(f"{at}.regions", value.get("regions", True)),
                    providers=_flag(f"{at}.providers", value.get("providers", True)),
                    on_demand=_flag(f"{at}.on_demand", value.get("on_demand", True)),
                    plans=_whole(f"{at}.plans", value.get("plans", 3), 0, 10), wait_s=wait_s)


def _setup(at: str, value: Any) -> tuple[str, ...]:
    """`setup:` commands: a list of shell text run by bash in order (an entry may span lines, as
    a SkyPilot task's setup script does); text alone is a comma-separated list, as before."""
    if isinstance(value, list):
        if not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
            raise UsageError(f"{at}: a list of shell commands")
        return tuple(_script(at, str(v)) for v in value)
    return _words(at, value)


def _words(at: str, value: Any) -> tuple[str, ...]:
    if value in (None, ""):
        return ()
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, (list, tuple)):
        raise UsageError(f"{at}: a list")
    return tuple(_text(at, v) for v in value)


def _env(at: str, value: Any) -> dict[str, str]:
    if value in (None, ""):
        return {}
    if isinstance(value, (list, tuple)):  # KEY=VALUE words, as --env gives them
        pairs = {}
        for kv in value:
            key, sep, val = _text(at, kv).partition("=")
            if not sep:
                raise UsageError(f"{at} {kv!r}: write KEY=VALUE")
            pairs[key] = val
        value = pairs
    if not isinstance(value, dict):
        raise UsageError(f"{at}: a mapping of NAME: value")
    out = {}
    for k, v in value.items():
        key = _text(at, k)
        if not _ENV_NAME.match(key):
            raise UsageError(f"{at}: {key!r} is not a variable name (letters, digits and _, not starting with a digit)")
        out[key] = _text(f"{at}.{key}", v) if not isinstance(v, (int, float)) or isinstance(v, bool) else str(v)
    return out


def secret_env_names(at: str, value: Any, env: Mapping[str, str]) -> tuple[str, ...]:
    """`secret_env: [NAME, ...]`: the names of variables whose values come from the caller's
    environment; each a variable name, given once, and none also in `env:` (which value would win?)."""
    names = _words(at, value)
    seen: set[str] = set()
    for name in names:
        if not _ENV_NAME.match(name):
            raise UsageError(f"{at}: {name!r} is not a variable name (letters, digits and _, not starting with a digit)")
        if name in seen:
            raise UsageError(f"{at}: {name} is named twice; name it once")
        if name in env:
            raise UsageError(f"{at}: {name} is in env too; give it in one of them (secret_env: its value is read from"
                             " your environment, env: the value is written out)")
        seen.add(name)
    return names


def secret_env_values(names: tuple[str, ...] | list[str], said: str = "secret_env",
                      may_leave_out: bool = True) -> dict[str, str]:
    """The values of the secret_env `names`, read from this process's environment now (as the
    registry password is: batchfile.Registry.password); one line naming the first that is not set.
    The values are held in memory only: they travel as `env:` values do (a 0600 file on the nodes)."""
    values = {}
    for name in names:
        value = os.environ.get(name)
        if not value:
            raise UsageError(f"{said} {name}: not set in this environment; export {name} (its value) before running"
                             + (f", or leave {name} out" if may_leave_out else ""))
        values[name] = value
    return values


def item_env(batch: Batch) -> dict[str, str]:
    """Every item's own variables: the batch's `env:` and its `secret_env:` values, read now."""
    return {**batch.env, **secret_env_values(batch.secret_env)}


def _registry(at: str, value: Any) -> Registry | None:
    if value in (None, ""):
        return None
    if isinstance(value, str):  # a DOK registry's UUID
        return Registry(dok_registry=_text(at, value))
    if not isinstance(value, dict):
        raise UsageError(f"{at}: a mapping with server, username and password_env (or dok_registry)")
    unknown = sorted(set(map(str, value)) - REGISTRY_FIELDS)
    if unknown:
        raise UsageError(f"{at}: unknown field {unknown[0]!r}; use server, username, password_env, dok_registry")
    if "password" in value or "token" in value:  # caught by the check above; said plainly for the common mistake
        raise UsageError(f"{at}: never write the password in the file: name the variable holding it (password_env)")
    reg = Registry(**{k: _text(f"{at}.{k}", v) for k, v in value.items()})
    if reg.password_env and not _ENV_NAME.match(reg.password_env):
        raise UsageError(f"{at}.password_env {reg.password_env!r}: the name of an environment variable")
    if (reg.username or reg.password_env) and not (reg.username and reg.password_env):
        raise UsageError(f"{at}: give both username and password_env (the variable that holds the password)")
    return reg


def _yen(at: str, value: Any) -> Decimal | None:
    from gpuplan.units import yen

    if value in (None, ""):
        return None
    amount = yen(value)
    if amount is None:
        raise UsageError(f"{at} {value!r}: a number of yen above 0 and at most {MAX_YEN:,}, such as 500")
    return amount


def _whole(at: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise UsageError(f"{at} {value!r}: a whole number from {low} to {high:,}")
    return value


def _flag(at: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise UsageError(f"{at} {value!r}: true or false")
    return value


def items_of(batch: Batch) -> list[str]:
    """The batch's items: those its file lists (`items: [a, b]`) or its items file's lines."""
    from gpuplan.run import items as run_items

    if batch.items is None:
        if not batch.item_list:
            raise UsageError(f"batch file {batch.source}: items: an empty list; give the items, or an items file")
        if len(batch.item_list) > run_items.MAX_JOBS:
            raise UsageError(f"batch file {batch.source}: {len(batch.item_list):,} items; one run takes at most"
                             f" {run_items.MAX_JOBS:,}: put them in an items file and split it")
        return list(batch.item_list)
    return run_items.read_items(batch.items)


def outputs_dir(batch: Batch, name: str) -> Path:
    """Where the outputs come back to: the batch's `outputs`, else outputs/<cluster name>."""
    return batch.outputs or Path("outputs") / name


def check_environment(batch: Batch) -> None:
    """The secrets the batch names in the caller's environment are there: a registry password
    variable or a secret_env variable not set is refused (one line), before anything is planned,
    claimed or written."""
    if batch.registry is not None and batch.registry.password_env and not os.environ.get(batch.registry.password_env):
        raise UsageError(f"registry.password_env {batch.registry.password_env}: not set in this environment; export it"
                         " (the registry password) before launching")
    secret_env_values(batch.secret_env)


def check_before_buying(batch: Batch, cluster: str) -> None:
    """What the real run would refuse only once the machines are bought, refused now (by the dry
    run too): a secret not set in this environment (check_environment), an outputs folder that
    cannot be made."""
    check_environment(batch)
    out = outputs_dir(batch, cluster).absolute()
    above = out
    while not above.exists() and above != above.parent:
        above = above.parent
    if above != out and not above.is_dir():
        raise UsageError(f"outputs folder {out}: {above} is a file, so the folder cannot be made; name another"
                         " (outputs: or --outputs)")
    if above.is_dir() and not os.access(above, os.W_OK | os.X_OK):
        raise UsageError(f"outputs folder {out}: {above} is not writable; name another (outputs: or --outputs)")
