"""Items in containers on a cluster's nodes (`gpuplan run CLUSTER --image IMAGE`, `launch` with
an image): docker checked and the image pulled on every node before the batch starts.

The batch's driver (ray_driver.py) runs each attempt as `docker run --rm --init --gpus
device=N ...` on its node; this module gets the nodes ready for it, over SSH, all nodes at once:

- `check`: docker works for the SSH user (else through `sudo -n`), and a node with GPUs has the
  NVIDIA runtime; a node where it does not is named in one line with the fix (`gpuplan bootstrap
  CLUSTER --playbook docker-gpu` installs Docker and the NVIDIA container toolkit).
- `pull`: the image pulled on every node that does not have it already (`docker image
  inspect`); an image named without a tag or with `:latest` is pulled every time, as that tag
  moves (give a fixed tag or a digest to use what a node has). A pull that fails is worded by its
  cause (the node cannot resolve or reach the registry, the image or tag does not exist, access
  denied: a private image, the node's disk is full). A private registry's secret never touches a disk nor a
  command line: it goes to `docker login --password-stdin` on the SSH channel's standard input,
  and docker keeps it in a DOCKER_CONFIG folder on tmpfs (/dev/shm, mode 0700) that is removed
  when the pull has ended, however it ended.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuplan.errors import RemoteError, UsageError

if TYPE_CHECKING:
    from gpuplan.run.ray.engine import Engine, Node

PULL_TIMEOUT_S = 1800  # a CUDA image is several GB
CHECK_TIMEOUT_S = 60
DOCKER = "docker"
SUDO_DOCKER = "sudo -n docker"


class ContainerError(RemoteError):
    """Docker is missing or broken on a node, or a node could not pull the image (exit 4).
    `nodes`: the nodes' own lines ("; "-joined), without what a caller added about the cluster."""

    def __init__(self, message: str, nodes: str = "") -> None:
        super().__init__(message)
        self.nodes = nodes or message


@dataclass(frozen=True)
class Login:
    """Credentials for a private registry. `password` is the secret itself (a password or an
    access token), held in memory only; it never appears in repr()."""

    username: str
    password: str = field(repr=False)
    server: str = ""  # "" : the image's own registry (registry_of)


def login_of(registry: Any, image: str) -> Login | None:
    """A Login from what a caller has: a Login, or anything with `username`, `server` and either
    `password()` (reads the secret, e.g. batchfile.Registry from its password_env) or a
    `password` / `password_env` attribute. None without a username."""
    if registry is None or not getattr(registry, "username", ""):
        return None
    if isinstance(registry, Login):
        secret, server = registry.password, registry.server
    else:
        given = getattr(registry, "password", None)
        if callable(given):
            secret = given()
        elif isinstance(given, str):
            secret = given
        else:
            secret = secret_from_env(getattr(registry, "password_env", "") or "")
        server = getattr(registry, "server", "") or ""
    if not secret:
        raise UsageError(f"the registry login for {registry.username} has no password or token")
    return Login(registry.username, secret, server or registry_of(image))


def secret_from_env(name: str) -> str:
    """The secret in environment variable `name` (one line if it is not set)."""
    import os

    if not name:
        raise UsageError("name the environment variable that holds the registry's password or token")
    value = os.environ.get(name)
    if not value:
        raise UsageError(f"{name} is not set: export it with the registry's password or token")
    return value


def registry_of(image: str) -> str:
    """The registry an image name points at, as docker reads it: the first part of the name when
    it has a dot or a port or is localhost (ghcr.io/me/x, my.reg:5000/x), else Docker Hub ("")."""
    first, sep, _ = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return ""


def check_image(image: str) -> None:
    """An image reference docker could take (no spaces, no leading dash, not empty)."""
    if not image or image.startswith("-") or any(c.isspace() for c in image) or len(image) > 512:
        raise UsageError(f"--image {image!r}: give an image reference such as nvcr.io/nvidia/pytorch:24.05-py3")


def check_script(gpus: int) -> str:
    """Prints the docker command that works for the SSH user ("docker" or "sudo -n docker"), or
    exits 10 (no docker), 11 (docker does not answer), 12 (no NVIDIA runtime on a GPU node:
    `gpus` from the state, or where it says 0, what nvidia-smi lists)."""
    has_gpus = "true" if gpus else "nvidia-smi -L 2>/dev/null | grep -q '^GPU '"  # 0: the state does not know
    runtime = (f" if {has_gpus}; then"
               ' case "$($d info --format "{{json .Runtimes}}" 2>/dev/null)" in *nvidia*) ;; *) exit 12;; esac; fi;')
    return ("command -v docker >/dev/null 2>&1 || exit 10; d=''; err=$(docker info 2>&1 >/dev/null); rc=$?;"
            " [ $rc -ne 127 ] || exit 10; if [ $rc -eq 0 ]; then d=docker;"
            " elif sudo -n docker info >/dev/null 2>&1; then d='sudo -n docker'; fi;"
            ' [ -n "$d" ] || { printf "%s\\n" "$err" | tail -n 1; exit 11; };' + runtime + ' echo "$d"')


PRESENT = "present"  # what pull_script prints where the node has the image and did not pull it


def always_pulled(image: str) -> bool:
    """An image named by a tag that moves: no tag (docker reads it as :latest) or `:latest`. A
    node that has it is not believed to have the current one, so it is pulled every time."""
    if "@" in image:  # a digest names one image for good
        return False
    last = image.rsplit("/", 1)[-1]
    return ":" not in last or last.rsplit(":", 1)[1] == "latest"


def pull_script(image: str, login: Login | None, docker: str) -> str:
    """Pull `image` with `docker` unless the node has it (and its tag does not move: see
    always_pulled; then it prints PRESENT); with a login, first `docker login --password-stdin`
    (the secret on standard input) into a DOCKER_CONFIG folder on /dev/shm, removed on exit."""
    have = ("" if always_pulled(image)
            else f"if {docker} image inspect {shlex.quote(image)} >/dev/null 2>&1; then echo {PRESENT}; exit 0; fi; ")
    pull = f"{docker} pull -q {shlex.quote(image)} >/dev/null"
    if login is None:
        return have + pull
    sudo = "sudo -n " if docker.startswith("sudo ") else ""
    server = f" {shlex.quote(login.server)}" if login.server else ""
    return (have + "umask 077; d=$(mktemp -d /dev/shm/gpuplan-docker-XXXXXXXX) ||"
            " { echo 'no tmpfs at /dev/shm to hold the registry login'; exit 20; }; trap 'rm -rf \"$d\"' EXIT;"
            f" {sudo}env DOCKER_CONFIG=\"$d\" docker login --username {shlex.quote(login.username)} --password-stdin{server}"
            f" >/dev/null || exit 21;"
            f" {sudo}env DOCKER_CONFIG=\"$d\" docker pull -q {shlex.quote(image)} >/dev/null")


def check(eng: Engine, skip: Sequence[str] = (), cluster: str | None = None) -> dict[str, str]:
    """Docker on every node but `skip`: returns node -> how it runs docker ("docker" or "sudo -n
    docker"). Raises ContainerError naming every node where it does not work, one line each."""
    from gpuplan.hosts import remote

    cluster = cluster or eng.cluster
    nodes = [n for n in eng.nodes if n.name not in skip]
    fix = f"run `gpuplan bootstrap {cluster} --playbook docker-gpu`"

    def one(node: Node) -> str:
        r = remote.run(node.host, "bash -c " + shlex.quote(check_script(node.gpus)), timeout=CHECK_TIMEOUT_S)
        if r.exit_code == 10:
            raise ContainerError(f"{node.name}: docker is not installed: {fix}")
        if r.exit_code == 11:
            raise ContainerError(f"{node.name}: docker does not answer ({r.tail(1) or 'no daemon'}): {fix}, or start"
                                 " the docker service and let the SSH user use it")
        if r.exit_code == 12:
            raise ContainerError(f"{node.name}: docker has no NVIDIA runtime (containers would not see the GPUs): {fix}")
        if not r.ok or r.stdout.strip() not in (DOCKER, SUDO_DOCKER):
            raise ContainerError(f"{node.name}: cannot check docker (exit {r.exit_code}): {r.why()}")
        return r.stdout.strip()

    return _each(nodes, one)


def pull(eng: Engine, image: str, docker: dict[str, str], login: Login | None = None,
         progress: Callable[[str], None] = lambda _m: None) -> dict[str, bool]:
    """Pull `image` on every node in `docker` (node -> docker command, from `check`) that does
    not have it (pull_script), all at once; returns node -> whether it pulled. Raises
    ContainerError naming each node that could not, one line each, worded by the cause."""
    from gpuplan.hosts import remote
    from gpuplan.planning import fmt

    nodes = [n for n in eng.nodes if n.name in docker]
    where = "" if always_pulled(image) else " where it is not there already"
    progress(f"pulling {image} on {fmt.plural(len(nodes), 'node')}{where}")
    secret = login.password + "\n" if login is not None else None

    def one(node: Node) -> bool:
        r = remote.run(node.host, "bash -c " + shlex.quote(pull_script(image, login, docker[node.name])),
                       timeout=PULL_TIMEOUT_S, stdin=secret)
        if r.ok:
            return r.stdout.strip() != PRESENT
        if r.exit_code == 21:
            who = f"{login.username} at {login.server or 'Docker Hub'}" if login else "?"
            raise ContainerError(f"{node.name}: the registry refused the login of {who}: {_scrub(r.tail(1), login)}")
        said = _scrub(r.tail(1), login)
        raise ContainerError(f"{node.name} cannot pull {image}: {said or f'exit {r.exit_code}'}"
                             f"{pull_cause(said, image, login)}")

    pulled = _each(nodes, one)
    have = sum(1 for p in pulled.values() if not p)
    if have:
        progress(f"{image}: on {fmt.plural(have, 'node')} already (not pulled there)")
    return pulled


def pull_cause(said: str, image: str, login: Login | None) -> str:
    """What a failed pull's last line means and what to do, as " (...)"; "" where it says
    nothing gpuplan knows. Each cause its own words: a node that cannot resolve the registry's
    name is not a private image."""
    text = said.lower()
    registry = registry_of(image) or "Docker Hub (registry-1.docker.io)"
    if any(k in text for k in ("no such host", "name resolution", "server misbehaving", "dial tcp: lookup")):
        return (f" (the node cannot resolve the name of {registry}: check its DNS and network, or give an image the node"
                " has already or one from a registry it can reach)")
    if any(k in text for k in ("connection refused", "i/o timeout", "network is unreachable", "no route to host",
                                "tls handshake timeout", "connection reset")):
        return f" (the node cannot reach {registry}: check its network, proxy or firewall)"
    if any(k in text for k in ("no space left", "disk quota")):
        return " (the node's disk is full: free space for docker there, e.g. `docker system prune`)"
    if any(k in text for k in ("pull access denied", "unauthorized", "denied:", "authentication required")):
        if login is not None:
            return f" (the login of {login.username} may not read {image}: check its rights on the registry)"
        return " (a private image? give the registry's user and the variable holding its token)"
    if any(k in text for k in ("manifest unknown", "not found", "invalid reference")):
        return f" (no such image or tag at {registry}: check the name and tag)"
    return ""


def prepare(eng: Engine, image: str, login: Login | None = None, skip: Sequence[str] = (),
            progress: Callable[[str], None] = lambda _m: None) -> dict[str, str]:
    """`check` then `pull` on every node but `skip` (nodes the batch left out); returns node ->
    docker command, for the batch's spec."""
    check_image(image)
    docker = check(eng, skip)
    pull(eng, image, docker, login, progress)
    return docker


def _each(nodes: Sequence[Node], fn: Callable[[Node], Any]) -> dict[str, Any]:
    from gpuplan.hosts import remote

    results = remote.run_many([n.host for n in nodes], lambda h: fn(next(n for n in nodes if n.name == h.name)))
    errors = []
    for n, r in zip(nodes, results):
        if isinstance(r, ContainerError):
            errors.append(str(r))
        elif isinstance(r, BaseException):
            errors.append(f"{n.name}: {r}")
    if errors:
        raise ContainerError("; ".join(errors))
    return dict(zip((n.name for n in nodes), results))


def _scrub(text: str, login: Login | None) -> str:
    """One line of a node's output, with the secret blanked should anything have echoed it."""
    line = " ".join(text.split())
    if login is not None and login.password:
        line = line.replace(login.password, "***")
    return line[:300]
