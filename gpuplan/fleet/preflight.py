"""Everything `gpuplan provision` can check before it asks or creates anything, gathered in one
pass so that a user fixes them all at once (issue 33): the provider's SDK (the pip extra), its
credentials, the order itself (size, region, count, TTL, name), the playbooks and flags that
would only fail after the machines exist, the SSH source, and whether there is a terminal to
answer the question. `--dry-run` runs the same checks, less what it does not need (the SDK,
which it names in a note, credentials and a terminal).

Each problem is a typed value with its kind; `Problems` orders them (extras first) and is the
error the CLI shows."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

from gpuplan.errors import UsageError


class Kind(IntEnum):
    """What a problem is about, in the order they are listed: an extra to install comes first
    (nothing else can be checked without it), the question last."""

    EXTRA = 0
    CREDENTIALS = 1
    INPUT = 2
    TERMINAL = 3


@dataclass(frozen=True)
class Problem:
    kind: Kind
    line: str


class Problems(UsageError):
    """Every problem found before a command could start, extras first. The CLI shows one as its
    line, several as a short block (a line each)."""

    def __init__(self, doing: str, problems: list[Problem]) -> None:
        self.doing = doing
        unique = {p.line: p for p in problems}  # a broken config file fails several checks alike
        self.problems = sorted(unique.values(), key=lambda p: p.kind)
        super().__init__("; ".join(p.line for p in self.problems))


@dataclass(frozen=True)
class ProvisionAsk:
    """The provision as typed: `order` takes target..idle."""

    target: str | None
    count: str | None
    plan: Path | None = None
    region: str | None = None
    name: str | None = None
    image: str | None = None
    ttl: str | None = None
    spot: bool = False
    idle: str | None = None
    playbooks: tuple[str, ...] = ()
    bootstrap: bool = True
    ssh_from: str | None = None


def provision(ask: ProvisionAsk, *, dry_run: bool, yes: bool, interactive: bool):
    """The order, checked: returns it, or raises Problems listing everything wrong at once."""
    from gpuplan.fleet import lifecycle, provision
    from gpuplan.hosts.playbook import load as load_playbook

    problems: list[Problem] = []
    order = None
    try:
        order = provision.order(ask.target, ask.count, plan=ask.plan, region=ask.region, name=ask.name, image=ask.image,
                             ttl=ask.ttl, spot=ask.spot, idle=ask.idle)
    except UsageError as exc:
        problems.append(Problem(Kind.INPUT, str(exc)))
    provider = order.request.provider if order is not None else _named_provider(ask.target)
    if provider and not dry_run:  # a dry run names a missing extra as a note (provision.dry_run_notes)
        problems += provider_problems(provider)
    for book in ask.playbooks:
        try:
            load_playbook(book)
        except UsageError as exc:
            problems.append(Problem(Kind.INPUT, str(exc)))
    if ask.playbooks and not ask.bootstrap:
        problems.append(Problem(Kind.INPUT, "--playbook and --no-bootstrap contradict each other: drop one"))
    if ask.playbooks and ask.image:
        problems.append(Problem(Kind.INPUT, "--playbook is not run on machines started from an --image (it is set up"
                                            " already): drop --playbook, or bake the playbooks into an image with"
                                            " `gpuplan image build ... --playbook NAME`"))
    try:
        lifecycle.check_ssh_from(ask.ssh_from)
    except UsageError as exc:
        problems.append(Problem(Kind.INPUT, str(exc)))
    if not (dry_run or yes or interactive):
        problems.append(no_terminal("provision"))
    if problems:
        raise Problems("provision", problems)
    return order


def _named_provider(target: str | None) -> str | None:
    """The provider a target names before its colon (aws:g4dn.xlarge), when it is one."""
    from gpuplan.fleet import provider as registry

    head = (target or "").partition(":")[0].strip().lower()
    return head if ":" in (target or "") and head in registry.available() else None


def no_terminal(doing: str) -> Problem:
    """`doing` would ask a question that no one can answer (no --yes, stdin not a terminal)."""
    return Problem(Kind.TERMINAL, f"{doing} asks for confirmation, but stdin is not a terminal: rerun with --yes (-y)"
                                  " to proceed")


def provider_problems(name: str) -> list[Problem]:
    """The provider's SDK, then (where the SDK is there) its credentials."""
    from gpuplan.errors import AuthMissing
    from gpuplan.fleet import lifecycle
    from gpuplan.fleet.provider import MissingExtra

    try:
        prov = lifecycle.get_provider(name)
    except UsageError as exc:
        return [Problem(Kind.EXTRA if isinstance(exc, MissingExtra) else Kind.INPUT, str(exc))]
    missing = prov.missing_sdk()
    if missing is not None:
        return [Problem(Kind.EXTRA, str(missing))]
    try:
        prov.check_credentials()
    except AuthMissing as exc:
        return [Problem(Kind.CREDENTIALS, str(exc))]
    except UsageError as exc:
        return [Problem(Kind.INPUT, str(exc))]
    return []
