"""Bootstrap playbooks: load them (data in playbooks/*.yaml) and run them on many hosts at once.

A playbook is an ordered list of steps. Each step has a `check` (shell; exit 0 means "already
done", so the step is skipped), an `action` (shell, or `script:` naming a file in
playbooks/steps/), whether the action `reboot`s the machine, a `timeout_s` and whether it needs
`sudo`. Checking is separate from changing: a re-run skips what is done, a dry run only prints
the scripts, and after an action the check is run again, so an action that did not achieve
what its check looks for fails instead of passing silently. Steps marked `always: true` have no
check and run every time (the verify playbook); `only_if` (shell) makes a step not apply
("n/a") when it exits non-zero.

Every script is: the parameters as shell variables, playbooks/steps/prelude.sh, then the step.
Parameter values are inserted as double-quoted shell strings, so `$VAR` in a value expands on
the host (tests pass `root='$GPUPLAN_FAKE_ROOT'`).

    report = run_playbooks(hosts, [load("gpu-driver"), load("cuda")], {"cuda_version": "12.6"})
    report.ok, report.failures, report.hosts[0].steps[0].status   # "skipped" | "ran" | "failed" | ...
    bootstrap_cluster(state, "demo", ["cuda"], {}, progress=print)  # reads nodes/keys from the state
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpuplan import paths
from gpuplan.errors import NotFound, RemoteError, UsageError
from gpuplan.fleet import locks
from gpuplan.hosts import remote
from gpuplan.hosts.keys import ed25519_pair

if TYPE_CHECKING:
    from gpuplan.store.state import State

DEFAULT_PLAYBOOKS = ("gpu-driver", "cuda", "cudnn", "nccl")
STEP_KEYS = {"name", "check", "action", "script", "reboot", "timeout_s", "sudo", "always", "only_if"}
PLAYBOOK_KEYS = {"name", "description", "params", "steps"}

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Step:
    name: str
    action: str
    check: str | None = None
    reboot: bool = False
    timeout_s: int = 900
    sudo: bool = True
    always: bool = False
    only_if: str | None = None


@dataclass(frozen=True)
class Playbook:
    name: str
    description: str
    params: Mapping[str, str]
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class StepResult:
    host: str
    playbook: str
    step: str
    status: str  # "skipped" (check: already done) | "ran" | "failed" | "n/a" | "dry-run" | "not-run"
    seconds: float = 0.0
    exit_code: int | None = None
    output: str = ""  # last lines of output (always on failure; for verify steps too)
    reboot_s: float | None = None  # seconds waited for the host to come back

    @property
    def key(self) -> str:
        return f"{self.playbook}/{self.step}"


@dataclass(frozen=True)
class HostReport:
    host: str
    steps: tuple[StepResult, ...]
    seconds: float
    error: str | None = None  # one line, when the host failed

    @property
    def ok(self) -> bool:
        return self.error is None

    def count(self, status: str) -> int:
        return sum(1 for s in self.steps if s.status == status)


@dataclass(frozen=True)
class BootstrapReport:
    playbooks: tuple[str, ...]
    hosts: tuple[HostReport, ...]
    seconds: float
    dry_run: bool = False
    # dry run: "playbook/step check|action|only_if" -> shell, run after the params and playbooks/steps/prelude.sh
    scripts: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(h.ok for h in self.hosts)

    @property
    def failures(self) -> list[HostReport]:
        return [h for h in self.hosts if not h.ok]

    def first_error(self) -> str:
        return self.failures[0].error if self.failures else ""

    def setup_seconds(self) -> int | None:
        """Wall seconds of the slowest host that ran at least one step; None if none did."""
        ran = [h.seconds for h in self.hosts if h.ok and h.count("ran") > 0]
        return round(max(ran)) if ran else None


class BootstrapFailed(RemoteError):
    """A step failed on at least one host; `.report` has every host's results."""

    def __init__(self, report: BootstrapReport) -> None:
        super().__init__(report.first_error())
        self.report = report
        failed = [s for h in report.failures[:1] for s in h.steps if s.status == "failed"]
        self.detail = failed[0].output if failed else ""


# --- loading -----------------------------------------------------------------------------


def _data_dir():
    from importlib.resources import files

    return files("gpuplan.playbooks_data")


def available() -> list[str]:
    return sorted(p.name[: -len(".yaml")] for p in _data_dir().iterdir()
                  if p.name.endswith(".yaml") and p.name != "defaults.yaml")


def default_params() -> dict[str, str]:
    from gpuplan.userfiles import load_yaml

    return {str(k): "" if v is None else str(v) for k, v in load_yaml(_data_dir().joinpath("defaults.yaml").read_text()).items()}


def _step_script(name: str, origin: str) -> str:
    res = _data_dir().joinpath("steps", name)
    if not res.is_file():
        raise UsageError(f"{origin}: script {name!r} not found in playbooks/steps/")
    return res.read_text()


def load(name_or_path: str) -> Playbook:
    """A built-in playbook by name ("cuda") or a YAML file by path (with the same format)."""
    import yaml

    from gpuplan.userfiles import load_yaml

    if name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path:
        from gpuplan.userfiles import expand, read_text

        path = expand(name_or_path, "playbook file")
        if not path.is_file():
            raise NotFound(f"playbook file {path} not found")
        text, origin = read_text(path, "playbook file", "see docs/playbooks.md for the format"), str(path)
    else:
        res = _data_dir().joinpath(f"{name_or_path}.yaml")
        if name_or_path == "defaults" or not res.is_file():
            raise NotFound(f"no playbook named {name_or_path!r}; known: {', '.join(available())}")
        text, origin = res.read_text(), f"playbook {name_or_path}"
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        from gpuplan.userfiles import yaml_problem

        raise UsageError(f"{origin}: not valid YAML ({yaml_problem(exc)}); fix the file") from None
    return parse(data, origin)


def parse(data: object, origin: str) -> Playbook:
    if not isinstance(data, dict):
        raise UsageError(f"{origin}: expected a mapping with name, description, params and steps")
    unknown = set(data) - PLAYBOOK_KEYS
    if unknown:
        raise UsageError(f"{origin}: unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(PLAYBOOK_KEYS))}")
    if not data.get("name") or not isinstance(data.get("steps"), list) or not data["steps"]:
        raise UsageError(f"{origin}: needs a name and a non-empty list of steps")
    params = data.get("params") or {}
    if not isinstance(params, dict):
        raise UsageError(f"{origin}: params must be a mapping of name: default")
    steps = []
    seen = set()
    for i, raw in enumerate(data["steps"]):
        where = f"{origin}, step {i + 1}"
        if not isinstance(raw, dict) or not raw.get("name"):
            raise UsageError(f"{where}: each step needs a name")
        where = f"{origin}, step {raw['name']!r}"
        unknown = set(raw) - STEP_KEYS
        if unknown:
            raise UsageError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(STEP_KEYS))}")
        if raw["name"] in seen:
            raise UsageError(f"{where}: step names must be unique within a playbook")
        seen.add(raw["name"])
        if ("action" in raw) == ("script" in raw):
            raise UsageError(f"{where}: give exactly one of action (shell) or script (a file in playbooks/steps/)")
        action = raw["action"] if "action" in raw else _step_script(str(raw["script"]), where)
        always = bool(raw.get("always", False))
        if not always and not raw.get("check") and not raw.get("only_if"):
            raise UsageError(f"{where}: needs a check (exit 0 = already done) or `always: true`")
        try:
            timeout = int(raw.get("timeout_s", 900))
        except (TypeError, ValueError):
            raise UsageError(f"{where}: timeout_s must be whole seconds") from None
        steps.append(Step(
            name=str(raw["name"]), action=str(action), check=str(raw["check"]) if raw.get("check") else None,
            reboot=bool(raw.get("reboot", False)), timeout_s=timeout, sudo=bool(raw.get("sudo", True)),
            always=always, only_if=str(raw["only_if"]) if raw.get("only_if") else None,
        ))
    return Playbook(str(data["name"]), str(data.get("description") or "").strip(),
                    {str(k): "" if v is None else str(v) for k, v in params.items()}, tuple(steps))


def parse_params(pairs: Sequence[str]) -> dict[str, str]:
    """`--param key=value` strings -> dict."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip().isidentifier():
            raise UsageError(f"bad --param {pair!r}: use NAME=VALUE, e.g. --param cuda_version=12.6")
        if not value.strip():  # an empty value would replace the playbook's default with nothing (root= is /)
            raise UsageError(f"bad --param {pair!r}: {key.strip()} has no value; give one, or leave the --param out for"
                             " the playbook's default")
        out[key.strip()] = value
    return out


# --- rendering ---------------------------------------------------------------------------


def _quote(value: str) -> str:
    """A shell double-quoted string: `$` still expands (on purpose), nothing else does."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`") + '"'


def merged_params(playbooks: Sequence[Playbook], overrides: Mapping[str, str]) -> dict[str, str]:
    params = default_params()
    for pb in playbooks:
        for k, v in pb.params.items():
            params.setdefault(k, v)
    known = set(params)
    unknown = set(overrides) - known
    if unknown:
        raise UsageError(f"unknown parameter(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
    params.update(overrides)
    return params


def render(body: str, params: Mapping[str, str], strict: bool = False) -> str:
    """The script sent to the host: parameters, the prelude, then `body`."""
    head = "\n".join(f"{k}={_quote(v)}" for k, v in sorted(params.items()))
    mode = "set -eo pipefail\n" if strict else ""
    return f"{head}\n{_step_script('prelude.sh', 'prelude')}\n{mode}{body.rstrip()}\n"


# --- running -----------------------------------------------------------------------------


def _tail(r: remote.Result, lines: int = 8) -> str:
    return r.tail(lines)


def _run_host(
    host: remote.Host, playbooks: Sequence[Playbook], params: Mapping[str, str], progress: Progress,
    reboot_timeout_s: float,
) -> HostReport:
    start = time.monotonic()
    results: list[StepResult] = []
    boot_id_path = f"{params.get('root', '')}/proc/sys/kernel/random/boot_id"
    conn: remote.Connection | None = None

    def finish(error: str | None) -> HostReport:
        if conn is not None:
            conn.close()
        done = {(r.playbook, r.step) for r in results}
        rest = [StepResult(host.name, pb.name, s.name, "not-run") for pb in playbooks for s in pb.steps
                if (pb.name, s.name) not in done]
        return HostReport(host.name, tuple(results + rest), time.monotonic() - start, error)

    def script_run(body: str, step: Step, strict: bool) -> remote.Result:
        return conn.run("bash -s", timeout=step.timeout_s, sudo=step.sudo, stdin=render(body, params, strict))

    try:
        conn = remote.connect(host)
    except RemoteError as exc:
        return finish(f"{host.name}: {exc}")
    for pb in playbooks:
        for step in pb.steps:
            t0 = time.monotonic()
            label = f"{host.name} {pb.name}/{step.name}"
            try:
                if step.only_if:
                    r = script_run(step.only_if, step, strict=False)
                    if not r.ok:
                        results.append(StepResult(host.name, pb.name, step.name, "n/a", time.monotonic() - t0))
                        progress(f"{label}: n/a")
                        continue
                if step.check and not step.always:
                    r = script_run(step.check, step, strict=False)
                    if r.ok:
                        results.append(StepResult(host.name, pb.name, step.name, "skipped", time.monotonic() - t0))
                        progress(f"{label}: already done")
                        continue
                progress(f"{label}: running")
                old_boot = remote.boot_id(conn, boot_id_path) if step.reboot else None
                r = script_run(step.action, step, strict=True)
                waited = None
                if step.reboot:
                    # The connection may drop before the command reports (-1): that is the reboot.
                    if r.exit_code not in (0, -1):
                        raise _StepFailed(r, "the reboot command failed")
                    conn.close()
                    conn = None
                    progress(f"{label}: waiting for the reboot")
                    waited = remote.wait_for_reboot(host, old_boot, reboot_timeout_s, boot_id_path)
                    conn = remote.connect(host)
                elif not r.ok:
                    raise _StepFailed(r, "")
                if step.check and not step.always:
                    again = script_run(step.check, step, strict=False)
                    if not again.ok:
                        raise _StepFailed(again, "the action finished but its check still fails", r)
                output = _tail(r, 20) if step.always or step.only_if else ""
                results.append(StepResult(host.name, pb.name, step.name, "ran", time.monotonic() - t0,
                                          r.exit_code, output, waited))
                progress(f"{label}: done in {time.monotonic() - t0:.1f} s")
            except _StepFailed as exc:
                shown = exc.action_result or exc.result
                results.append(StepResult(host.name, pb.name, step.name, "failed", time.monotonic() - t0,
                                          exc.result.exit_code, _tail(shown)))
                why = f" ({exc.why})" if exc.why else ""
                progress(f"{label}: FAILED")
                return finish(f"{host.name}: step {pb.name}/{step.name} failed with exit code {exc.result.exit_code}{why}: "
                              f"{shown.why()}")
            except RemoteError as exc:
                results.append(StepResult(host.name, pb.name, step.name, "failed", time.monotonic() - t0, None, str(exc)))
                progress(f"{label}: FAILED")
                return finish(f"{host.name}: step {pb.name}/{step.name}: {exc}")
    return finish(None)


class _StepFailed(Exception):
    def __init__(self, result: remote.Result, why: str, action_result: remote.Result | None = None) -> None:
        super().__init__(why)
        self.result = result
        self.why = why
        self.action_result = action_result


def _quiet(_: str) -> None:
    pass


def run_playbooks(
    hosts: Sequence[remote.Host],
    playbooks: Sequence[Playbook],
    params: Mapping[str, str] | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    max_workers: int = 32,
    reboot_timeout_s: float = 900,
) -> BootstrapReport:
    """Run `playbooks` in order on every host at once (one thread per host, at most
    `max_workers`). A host stops at its first failed step; the others go on. A dry run
    connects to nothing and returns the rendered scripts."""
    progress = progress or _quiet
    merged = merged_params(playbooks, params or {})
    names = tuple(pb.name for pb in playbooks)
    start = time.monotonic()
    if dry_run:
        scripts = {}
        for pb in playbooks:
            for s in pb.steps:
                if s.only_if:
                    scripts[f"{pb.name}/{s.name} only_if"] = s.only_if.rstrip()
                if s.check and not s.always:
                    scripts[f"{pb.name}/{s.name} check"] = s.check.rstrip()
                scripts[f"{pb.name}/{s.name} action"] = s.action.rstrip() + (
                    "\n# then wait for the reboot" if s.reboot else "")
        reports = tuple(HostReport(h.name, tuple(StepResult(h.name, pb.name, s.name, "dry-run")
                                                 for pb in playbooks for s in pb.steps), 0.0) for h in hosts)
        return BootstrapReport(names, reports, 0.0, True, scripts, merged)
    outcomes = remote.run_many(hosts, lambda h: _run_host(h, playbooks, merged, progress, reboot_timeout_s), max_workers)
    reports = []
    for h, out in zip(hosts, outcomes):
        if isinstance(out, BaseException):
            out = HostReport(h.name, (), 0.0, f"{h.name}: {type(out).__name__}: {out}")
        reports.append(out)
    return BootstrapReport(names, tuple(reports), time.monotonic() - start)


# --- a cluster from the state --------------------------------------------------------------


def _intra_key(state: State, cluster: str) -> tuple[str, str]:
    """The cluster's node-to-node key pair, kept beside its login key so a re-run reuses it
    (removed with it at teardown: gpuplan.hosts.keys)."""
    path = Path(str(state.ssh_key(cluster)[0]) + "-intra")
    if not path.exists():
        private, public = ed25519_pair()
        paths.write_owner_only(path, private)
        Path(str(path) + ".pub").write_text(public + "\n")
    return path.read_text().strip(), Path(str(path) + ".pub").read_text().strip()


def cluster_network_params(state: State, cluster: str, hosts: Sequence[remote.Host]) -> dict[str, str]:
    """Parameters for the cluster-network playbook, from the state: private addresses, GPU
    slots, every node's pinned host key (known_hosts by name and private address) and the
    intra-cluster key pair (made once per cluster)."""
    nodes = {n.name: n for n in state.nodes(cluster)}
    lines, known = [], []
    for h in hosts:
        n = nodes[h.name]
        private = n.private_ip or n.public_ip
        lines.append(f"{h.name} {private}")
        names = ",".join(dict.fromkeys(x for x in (h.name, private) if x))
        known.append(f"{names} {' '.join(h.host_key.split()[:2])}")
    slots = max((nodes[h.name].gpus for h in hosts), default=1) or 1
    private, public = _intra_key(state, cluster)
    return {
        "cluster_hosts": "\n".join(lines), "slots": str(slots), "known_hosts": "\n".join(known),
        "intra_key": private.strip(), "intra_key_pub": f"{public} gpuplan-{cluster}-intra",
    }


def bootstrap_cluster(
    state,
    cluster: str,
    playbooks: Sequence[str] | None = None,
    params: Mapping[str, str] | None = None,
    progress: Progress | None = None,
    dry_run: bool = False,
    accept_host_keys: Sequence[str] = (),
    raise_on_failure: bool = True,
    reboot_timeout_s: float = 900,
    only: Sequence[str] = (),
) -> BootstrapReport:
    """Run playbooks (default DEFAULT_PLAYBOOKS) on every live node of `cluster` in the state.

    Records the measured setup time via State.record_setup_time(provider, size,
    ",".join(playbooks), seconds, cluster) on the cluster's first successful run of this
    playbook list (a re-run after a failure or a repeat would under-count a fresh machine).
    Raises BootstrapFailed (a RemoteError, exit 4) naming host, step, exit code and output tail
    when a step fails, unless `raise_on_failure` is False. Holds the cluster's lock (not for a
    dry run). `only`: run on these nodes alone (a replacement joining its peers); the parameters
    that depend on the cluster (cluster-network's) still come from every node. A successful run
    records the playbooks and the parameters given with the cluster (State.record_bootstrap)."""
    names = list(playbooks or DEFAULT_PLAYBOOKS)
    books = [load(n) for n in names]
    params = dict(params or {})
    given = dict(params)
    row = state.cluster(cluster)
    if row is None:
        raise NotFound(f"no cluster named {cluster!r}; `gpuplan status` lists them")
    if dry_run:
        nodes = [n for n in state.nodes(cluster) if n.status not in ("deleted", "deleting", "failed", "lost")]
        hosts = [remote.Host(n.name, n.public_ip or n.private_ip or "?", n.ssh_port, row.ssh_user) for n in nodes]
        return run_playbooks(hosts, books, params, dry_run=True)
    with locks.cluster(cluster):
        hosts = remote.cluster_hosts(state, cluster, accept_host_keys)
        if "cluster-network" in names:
            for k, v in cluster_network_params(state, cluster, hosts).items():
                params.setdefault(k, v)
        target = ",".join(names)
        first = not any(j.op == "bootstrap" and j.target == target for j in state.journal(cluster))
        if only:
            hosts = [h for h in hosts if h.name in only]
        with state.journaled("bootstrap", target, cluster, f"{len(hosts)} hosts"):
            report = run_playbooks(hosts, books, params, progress=progress, reboot_timeout_s=reboot_timeout_s)
            if not report.ok and raise_on_failure:
                raise BootstrapFailed(report)
        if report.ok and not only:
            state.record_bootstrap(cluster, names, given)
        seconds = report.setup_seconds()
        if first and seconds is not None and not only:
            state.record_setup_time(row.provider, row.size, target, seconds, cluster)
        return report
