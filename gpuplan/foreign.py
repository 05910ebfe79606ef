"""A SkyPilot task YAML or a dstack task file read as a gpuplan batch (`gpuplan convert FILE`,
`gpuplan launch FILE`; docs/batch.md, "Coming from SkyPilot or dstack").

Recognised by its fields: a file with gpuplan's own `items` or `command` is a batch file; one with
`type: task` (or `commands:`) is a dstack configuration; one with SkyPilot's `run`, `resources`,
`envs`, `num_nodes`, `file_mounts`, ... is a SkyPilot task. What maps becomes the batch's fields
(the GPUs, infra and region, spot, env, setup, the command, workdir, name); every other field is
listed once with what to do in gpuplan. The task is one job, so the batch has one item, the task
itself, and its command is the task's script run by bash (`bash -c SCRIPT {item}`: the item is the
script's $0). The field names and shapes follow SkyPilot's YAML reference (docs.skypilot.co,
reference/yaml-spec) and dstack's task reference (dstack.ai, reference/dstack.yml/task); no code
of either is used.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.errors import UsageError
from gpuplan.planning import fmt
from gpuplan.userfiles import ENV_NAME as _ENV_NAME

SKYPILOT = "SkyPilot task"
DSTACK = "dstack task"
_BATCH_ONLY = frozenset({"items", "command", "workload"})
_SKY_ONLY = frozenset({"run", "resources", "envs", "num_nodes", "file_mounts", "storage_mounts", "secrets", "service",
                       "event_callback", "config", "volumes"})
_DSTACK_TYPES = ("task", "service", "dev-environment", "fleet", "volume", "gateway")
_NAME = re.compile(r"[a-z][a-z0-9-]{0,39}\Z")


@dataclass(frozen=True)
class Mapped:
    """A field of the task that became batch fields: `field` (its path in the task), `to` (the
    batch field) and `value` as the batch has it, in words."""

    field: str
    to: str
    value: str


@dataclass(frozen=True)
class Unmapped:
    """A field of the task gpuplan has no place for, and what to do about it in gpuplan."""

    field: str
    todo: str


@dataclass(frozen=True)
class Conversion:
    """A foreign task as a gpuplan batch. `batch`: the batch file's fields (what `convert` prints,
    what `launch` reads); `nodes`: the machines the task asked for; `refusal`: why it cannot run
    as a batch at all ("" where it can: only a task with no command cannot)."""

    kind: str  # SKYPILOT or DSTACK
    source: Path
    batch: dict[str, Any]
    mapped: tuple[Mapped, ...]
    unmapped: tuple[Unmapped, ...]
    nodes: int = 1
    refusal: str = ""


def kind_of(data: Any) -> str:
    """SKYPILOT, DSTACK or "" (a gpuplan batch file, or not a mapping)."""
    if not isinstance(data, dict) or _BATCH_ONLY & set(map(str, data)):
        return ""
    if data.get("type") in _DSTACK_TYPES or "commands" in data:
        return DSTACK
    return SKYPILOT if _SKY_ONLY & set(map(str, data)) else ""


# what to do in gpuplan for the fields that do not map (one line each; `*` covers a field not listed)
_SKY_TODO = {
    "file_mounts": ("copy local files with `workdir:` (sent to every node) or fetch bucket data in `setup:` (aws s3 cp, gsutil"
                    " cp)"),
    "storage_mounts": "fetch the bucket's data in `setup:` (aws s3 cp, gsutil cp); outputs come back from $GPUPLAN_OUTPUT_DIR",
    "volumes": "fetch the data in `setup:`; outputs come back from $GPUPLAN_OUTPUT_DIR",
    "service": "gpuplan runs batches that end; serve the model elsewhere",
    "config": "no equivalent; left out",
    "event_callback": "no equivalent; `gpuplan jobs CLUSTER` and `launch`'s exit code say how the batch ended",
    "resources.instance_type": ("gpuplan picks the size from the catalog; pin GPUs with `gpus:`, or `gpuplan provision"
                                " PROVIDER:TYPE xN` for one size"),
    "resources.cpus": "gpuplan plans on GPUs; pick GPUs with `gpus:` (`gpuplan catalog` lists each size's vCPUs)",
    "resources.memory": "gpuplan plans on GPUs; pick GPUs with `gpus:` (a workload file's memory need leaves out GPUs too small)",
    "resources.disk_size": "the catalog's disk for the size is used; no option",
    "resources.disk_tier": "the catalog's disk for the size is used; no option",
    "resources.network_tier": "gpuplan's plan uses each size's measured network (docs/model.md); no option",
    "resources.ports": "gpuplan opens SSH only; reach a port with `gpuplan ssh CLUSTER -- -L PORT:localhost:PORT`",
    "resources.labels": "every resource is tagged gpuplan-cluster and gpuplan-owner; no other tags",
    "resources.zone": "give `region:`; gpuplan tries the region's zones in turn",
    "resources.accelerator_args": "no equivalent; left out",
    "resources.image_id": "run each item in a container with `image: NAME` (docker:NAME maps); a machine image: `gpuplan image`",
    "resources.any_of": "give `infra:` and `gpus:`; gpuplan compares every offer and picks by yen",
    "resources.ordered": "give `infra:`; gpuplan ranks offers by yen and time, not by a list",
    "resources.max_hourly_cost": "give `max_yen_per_hour:` in yen (this field is in dollars)",
    "resources.autostop": ("`gpuplan launch` tears the cluster down when the batch ends; `gpuplan provision --idle 30m` for a"
                           " kept one"),
    "resources.job_recovery": "`recover: true` replaces a lost or reclaimed node mid-batch",
    "num_nodes": ("gpuplan picks how many machines from the items and `deadline:`; a batch runs items, not one program across"
                  " nodes (`gpuplan run --torchrun` for that)"),
    "workdir": "give `workdir: FOLDER` (a local folder; relative to the batch file)",
    "name": "give `name:` of lowercase letters, digits and '-' (or --name)",
    "secrets": "secret_env",
    "*": "not a field gpuplan knows; left out",
}
_DSTACK_TODO = {
    "python": "gpuplan runs on the machine's Python; give `image:` for another, or install it in `setup:`",
    "nvcc": "cloud VMs get CUDA from gpuplan's bootstrap; give `image:` for another toolkit",
    "ports": "gpuplan opens SSH only; reach a port with `gpuplan ssh CLUSTER -- -L PORT:localhost:PORT`",
    "volumes": "fetch the data in `setup:`; outputs come back from $GPUPLAN_OUTPUT_DIR",
    "files": "copy local files with `workdir:` (sent to every node)",
    "repos": "copy the repository with `workdir:` (sent to every node), or clone it in `setup:`",
    "working_dir": "items run in `workdir:` (the folder gpuplan copies to every node)",
    "registry_auth": "give `registry: {server, username, password_env}` (the password in an environment variable)",
    "retry": "`recover: true` replaces a lost or reclaimed node; `retries: N` runs a failed item again",
    "max_price": "give `max_yen_per_hour:` in yen (this field is in dollars)",
    "instance_types": "gpuplan picks the size from the catalog; pin GPUs with `gpus:`",
    "availability_zones": "give `region:`; gpuplan tries the region's zones in turn",
    "idle_duration": "`gpuplan launch` tears the cluster down when the batch ends",
    "utilization_policy": "no equivalent; `gpuplan jobs CLUSTER` shows each item's progress",
    "fleets": "gpuplan makes a cluster per batch; owned machines go in the inventory (docs/owned.md)",
    "nodes": ("gpuplan picks how many machines from the items and `deadline:`; a batch runs items, not one program across nodes"
              " (`gpuplan run --torchrun` for that)"),
    "resources.cpu": "gpuplan plans on GPUs; pick GPUs with `gpus:`",
    "resources.memory": "gpuplan plans on GPUs; pick GPUs with `gpus:`",
    "resources.disk": "the catalog's disk for the size is used; no option",
    "resources.shm_size": "no option; a container item gets Docker's default",
    "privileged": "no option",
    "name": "give `name:` of lowercase letters, digits and '-' (or --name)",
    "*": "not a field gpuplan knows; left out",
}


def _todo(table: dict[str, str], field: str) -> str:
    return table.get(field) or table["*"]


def convert(data: dict[str, Any], source: Path, kind: str) -> Conversion:
    """The task `data` (read from `source`) as a gpuplan batch."""
    if kind == DSTACK:
        return _dstack(data, source)
    return _skypilot(data, source)


class _Builder:
    def __init__(self, source: Path, todo: dict[str, str]) -> None:
        self.source, self.table = source, todo
        self.batch: dict[str, Any] = {}
        self.mapped: list[Mapped] = []
        self.unmapped: list[Unmapped] = []
        self.nodes = 1
        self.refusal = ""

    def put(self, field: str, to: str, value: Any, said: str = "") -> None:
        self.batch[to] = value
        self.mapped.append(Mapped(field, to, said or _said(value)))

    def leave(self, field: str, todo: str = "") -> None:
        self.unmapped.append(Unmapped(field, todo or _todo(self.table, field)))

    def name(self, field: str, value: Any) -> None:
        if isinstance(value, str) and _NAME.match(value):
            self.put(field, "name", value)
        else:
            self.leave(field)

    def env(self, field: str, value: Any, listed_bare_means_caller: bool) -> None:
        """`envs:`/`env:` as a mapping (a value None: from the caller), or dstack's list of
        NAME=VALUE and bare NAME (from the caller's environment)."""
        pairs: dict[str, Any] = {}
        if isinstance(value, dict):
            pairs = {str(k): v for k, v in value.items()}
        elif isinstance(value, list) and listed_bare_means_caller:
            for entry in value:
                key, sep, val = str(entry).partition("=")
                pairs[key.strip()] = val if sep else None
        else:
            self.leave(field, "write it as NAME: value under `env:`")
            return
        plain = {k: v for k, v in pairs.items() if v is not None}
        caller = [k for k, v in pairs.items() if v is None]
        bad = [k for k in pairs if not _ENV_NAME.match(k)]
        if bad:
            self.leave(f"{field}.{bad[0]}", "not a variable name (letters, digits and _, not starting with a digit)")
            plain = {k: v for k, v in plain.items() if k not in bad}
            caller = [k for k in caller if k not in bad]
        if plain:
            self.put(field, "env", {k: v if isinstance(v, (str, int, float)) and not isinstance(v, bool) else str(v)
                                    for k, v in plain.items()}, ", ".join(plain))
        if caller:
            have = list(self.batch.get("secret_env", []))
            self.put(field, "secret_env", have + [k for k in caller if k not in have],
                     f"{', '.join(caller)} (their values from the environment you launch in)")

    def setup(self, field: str, value: Any, todo: str = "") -> None:
        """The task's setup script (text or a list of lines) as the batch's setup; left, with `todo`, otherwise."""
        script = _script(value)
        if script is None:
            self.leave(field, todo)
            return
        self.put(field, "setup", [script], f"{fmt.plural(len(script.splitlines()), 'line')}, run by bash (set -e) on every"
                 " node before the batch")

    def command(self, field: str, value: Any, todo: str) -> None:
        """The task's run script (text or a list of lines) as the batch's command; left, with `todo`, otherwise."""
        script = _script(value)
        if script is None:
            self.leave(field, todo)
            return
        self.put(field, "command", ["bash", "-c", script, "{item}"],
                 f"bash -c SCRIPT {{item}} ({fmt.plural(len(script.splitlines()), 'line')}; the item, the task's name, is the"
                 " script's $0)")

    def done(self, kind: str, stem: str) -> Conversion:
        if "command" not in self.batch and not self.refusal:
            what = "run:" if kind == SKYPILOT else "commands:"
            self.refusal = f"{self.source}: the {kind} has no {what} gpuplan runs a command; give one"
        item = self.batch.get("name") or stem
        batch = {"items": [item], **self.batch}
        order = ["name", "items", "command", "gpus", "infra", "region", "spot", "image", "env", "secret_env", "setup",
                 "workdir", "timeout", "recover"]
        ordered = {k: batch[k] for k in order if k in batch}
        return Conversion(kind, self.source, ordered, tuple(self.mapped), tuple(self.unmapped), self.nodes,
                          self.refusal)


def _said(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(map(str, value))
    if isinstance(value, dict):
        return ", ".join(map(str, value))
    return str(value)


def _script(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip("\n")
    if isinstance(value, list) and value and all(isinstance(v, (str, int)) for v in value):
        return "\n".join(str(v) for v in value)
    return None


def _stem(source: Path) -> str:
    stem = source.name
    for end in (".dstack.yml", ".yaml", ".yml"):
        stem = stem.removesuffix(end)
    return re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-") or "task"


def _skypilot(data: dict[str, Any], source: Path) -> Conversion:
    b = _Builder(source, _SKY_TODO)
    for key, value in data.items():
        key = str(key)
        if key == "name":
            b.name(key, value)
        elif key == "run":
            b.command(key, value, "give `run:` as a shell script (text)")
        elif key == "setup":
            b.setup(key, value, "give `setup:` as a shell script (text)")
        elif key == "envs":
            b.env(key, value, listed_bare_means_caller=False)
        elif key == "secrets" and isinstance(value, dict):
            names = [str(k) for k in value if _ENV_NAME.match(str(k))]
            have = list(b.batch.get("secret_env", []))
            b.put(key, "secret_env", have + [n for n in names if n not in have],
                  f"{', '.join(names)} (their values from the environment you launch in, never from the file)")
        elif key == "workdir":
            if isinstance(value, str) and value.strip():
                b.put(key, "workdir", value.strip(), f"{value.strip()} (relative to this file, not to where you run)")
            else:
                b.leave(key, "give `workdir:` a local folder; clone a repository in `setup:`")
        elif key == "num_nodes":
            if value in (1, "1"):
                b.mapped.append(Mapped(key, "(none)", "one machine at least: gpuplan's plan picks how many"))
            else:
                b.nodes = value if isinstance(value, int) and value > 0 else 1
                b.leave(key)
        elif key == "resources":
            _sky_resources(b, value)
        else:
            b.leave(key)
    return b.done(SKYPILOT, _stem(source))


def _sky_resources(b: _Builder, res: Any) -> None:
    if isinstance(res, list):
        b.leave("resources", "give one set of resources: `gpus:`, `infra:`, `region:`")
        return
    if not isinstance(res, dict):
        b.leave("resources", "a mapping of accelerators, infra, use_spot, ...")
        return
    for key, value in res.items():
        field = f"resources.{key}"
        if key == "accelerators":
            ask = _sky_accelerators(value)
            if ask:
                b.put(field, "gpus", ask)
            else:
                b.leave(field, "name one GPU: `gpus: MODEL:N` (gpuplan compares every GPU when none is named)")
        elif key in ("cloud", "infra") and isinstance(value, str) and value.strip():
            # infra: CLOUD[/REGION[/ZONE]] (k8s/CONTEXT: a Kubernetes context, not a cloud)
            cloud, _, rest = value.strip().partition("/")
            if cloud.lower() in ("k8s", "kubernetes", "ssh"):
                b.leave(field, "gpuplan runs on cloud VMs, owned hosts (`infra: [owned]`, docs/owned.md), 高火力 DOK and Slurm")
                continue
            b.put(field, "infra", [cloud.lower()])
            region = rest.partition("/")[0]
            if region:
                b.put(field, "region", region)
            if rest.partition("/")[2]:
                b.leave(f"{field} (zone)", _todo(_SKY_TODO, "resources.zone"))
        elif key == "region" and isinstance(value, str):
            b.put(field, "region", value)
        elif key == "use_spot":
            if value is True:
                b.put(field, "spot", True, "true (gpuplan plans spot capacity beside on-demand and picks by yen)")
            elif value is not False:
                b.leave(field, "true or false")
        elif key == "image_id" and isinstance(value, str) and value.startswith("docker:"):
            b.put(field, "image", value.removeprefix("docker:"))
        elif key == "job_recovery" and value not in (None, "none", "NONE"):
            b.put(field, "recover", True, "true (a lost or reclaimed node gets a replacement mid-batch)")
        elif key == "job_recovery":
            continue
        else:
            b.leave(field)


def _sky_accelerators(value: Any) -> str:
    """"V100:4", "V100", {"A100": 8}, ["V100"] (one choice only) as a gpus: ask; "" where it is none."""
    if isinstance(value, dict) and len(value) == 1:
        (name, count), = value.items()
        return f"{name}:{count}" if isinstance(count, int) and not isinstance(count, bool) else str(name)
    if isinstance(value, list) and len(value) == 1:
        return _sky_accelerators(value[0])
    if isinstance(value, str) and value.strip() and "," not in value:
        return value.strip().replace(" ", "")
    return ""


def _dstack(data: dict[str, Any], source: Path) -> Conversion:
    b = _Builder(source, _DSTACK_TODO)
    kind = data.get("type", "task")
    if kind != "task":
        b.refusal = (f"{source}: a dstack {kind} is not a batch; gpuplan runs tasks that end (`type: task`)")
    for key, value in data.items():
        key = str(key)
        if key == "type":
            continue
        if key == "name":
            b.name(key, value)
        elif key == "commands":
            b.command(key, value, "give `commands:` as a list of shell commands")
        elif key == "setup":
            b.setup(key, value)
        elif key == "env":
            b.env(key, value, listed_bare_means_caller=True)
        elif key == "image" and isinstance(value, str):
            b.put(key, "image", value)
        elif key == "backends" and isinstance(value, list) and value:
            b.put(key, "infra", [str(v).lower() for v in value])
        elif key == "regions" and isinstance(value, list) and len(value) == 1:
            b.put(key, "region", str(value[0]))
        elif key == "regions":
            b.leave(key, "give one `region:` (or none: gpuplan compares every region)")
        elif key == "spot_policy":
            if value in ("spot", "auto"):
                b.put(key, "spot", True, f"true ({value}: gpuplan plans spot capacity beside on-demand and picks by yen)")
            elif value != "on-demand":
                b.leave(key, "spot, on-demand or auto")
        elif key == "max_duration" and value not in ("off", False, None):
            b.put(key, "timeout", _dstack_duration(value), f"{_dstack_duration(value)} (how long the task's item may run)")
        elif key == "nodes":
            if value in (1, "1"):
                b.mapped.append(Mapped(key, "(none)", "one machine at least: gpuplan's plan picks how many"))
            else:
                b.nodes = value if isinstance(value, int) and value > 0 else 1
                b.leave(key)
        elif key == "resources" and isinstance(value, dict):
            for rkey, rvalue in value.items():
                if rkey == "gpu":
                    ask, left = _dstack_gpu(rvalue)
                    if ask:
                        b.put("resources.gpu", "gpus", ask)
                    if left:
                        b.leave("resources.gpu", left)
                else:
                    b.leave(f"resources.{rkey}")
        else:
            b.leave(key)
    return b.done(DSTACK, _stem(source))


def _dstack_duration(value: Any) -> str:
    """dstack's duration (seconds as a number, or 30m, 2h, 1d) as gpuplan writes one."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value}s"
    return str(value).strip()


_RANGE = re.compile(r"([0-9]*)\s*(?:\.\.\s*([0-9]*))?\Z")


def _dstack_gpu(value: Any) -> tuple[str, str]:
    """dstack's `resources.gpu` (NAME[,NAME]:MEMORY:COUNT in any order, ranges a..b; a mapping of
    name, memory, count; a bare count) as a gpus: ask, and what of it gpuplan cannot hold ("": all)."""
    names: list[str] = []
    memory = count = ""
    left: list[str] = []
    if isinstance(value, int) and not isinstance(value, bool):
        count = str(value)
    elif isinstance(value, dict):
        raw = value.get("name")
        names = [str(n) for n in raw] if isinstance(raw, list) else ([str(raw)] if raw else [])
        memory = str(value.get("memory") or "")
        c = value.get("count")
        count = f"{c.get('min', '')}..{c.get('max', '')}" if isinstance(c, dict) else str(c or "")
        extra = sorted(set(map(str, value)) - {"name", "memory", "count", "vendor"})
        if extra:
            left.append(f"{', '.join(extra)}: no option in gpuplan")
    elif isinstance(value, str):
        for part in value.split(":"):
            part = part.strip()
            if not part or part.lower() in ("nvidia", "amd", "google", "tpu", "intel"):
                continue
            if re.fullmatch(r"[0-9.]*\s*(GB)?\s*(\.\.\s*[0-9.]*\s*(GB)?)?", part, re.IGNORECASE) and "GB" in part.upper():
                memory = part
            elif _RANGE.match(part):
                count = part
            else:
                names = [n.strip() for n in part.split(",") if n.strip()]
    words: list[str] = []
    if len(names) == 1:
        words.append(names[0])
    elif names:
        left.append(f"several GPUs ({', '.join(names)}): gpuplan compares every GPU; give one as `gpus:` to pin it")
    low_memory = memory.upper().replace(" ", "").split("..")[0].removesuffix("GB")
    if low_memory:
        words.append(f"{low_memory}GB")
        if ".." in memory and memory.split("..")[1].strip():
            left.append(f"memory at most {memory.split('..')[1].strip()}: gpuplan asks for at least {low_memory}GB only")
    low, _, high = count.partition("..")
    if low.strip().isdigit():
        words.append(low.strip())
        if ".." in count:
            left.append(f"count {count}: gpuplan asks for exactly {low.strip()} per machine")
    elif high.strip():
        left.append(f"count {count}: give an exact count per machine")
    return ":".join(words), "; ".join(left)


def lines(conv: Conversion) -> list[str]:
    """The mapping in words: what became what, then the fields left out with what to do."""
    out = [f"{conv.source}: a {conv.kind}; as a gpuplan batch:"]
    out += [f"  {m.field} -> {m.to}: {m.value}" for m in conv.mapped]
    if conv.unmapped:
        out.append(f"not mapped ({len(conv.unmapped)}):")
        out += [f"  {u.field}: {u.todo}" for u in conv.unmapped]
    return out


def batch_yaml(conv: Conversion) -> str:
    """The equivalent batch file, as YAML, with a comment saying where it came from."""
    import yaml

    head = (f"# gpuplan batch file converted from {conv.kind} {conv.source.name} (gpuplan convert)\n"
            "# one item: the task itself; add `workload:` (docs/workloads.md) to plan the batch's total time and yen\n")
    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper, value: str):  # a script of several lines as a literal block, as it was written
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)

    Dumper.add_representer(str, text)
    return head + yaml.dump(conv.batch, Dumper=Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False,
                            width=100)


def read(path: Path) -> tuple[str, dict[str, Any]]:
    """(kind, data) of a YAML file: kind SKYPILOT, DSTACK or "" (a batch file, or not a mapping)."""
    from gpuplan.userfiles import read_yaml

    data = read_yaml(path, "task file", "give a SkyPilot task YAML, a dstack task or a gpuplan batch file")
    return kind_of(data), data if isinstance(data, dict) else {}


def read_batch(batch_file: Path | None, overrides: Mapping[str, Any], show: Callable[[list[str]], None]):
    """(batch, conversion): batchfile.read of `batch_file` with the command line's `overrides`; a
    SkyPilot or dstack task is converted first (its Conversion, else None) and its mapping handed
    to `show`; one line where it cannot run as a batch at all (no command)."""
    from gpuplan import batchfile

    conv = None
    if batch_file is not None and batch_file.is_file():
        kind, data = read(batch_file)
        conv = convert(data, batch_file, kind) if kind else None
    if conv is not None:
        show(lines(conv))
        if conv.refusal:
            raise UsageError(conv.refusal)
    return batchfile.read(batch_file, overrides, conv.batch if conv is not None else None), conv
