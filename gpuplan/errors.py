"""gpuplan's own exceptions. Each carries one line a person can act on.

The CLI maps them to exit codes in one place (gpuplan.cli), each code meaning one thing
(docs/commands.md): 1 an unexpected error, 2 bad input, 3 cloud/provider failures, 4 remote
(SSH/bootstrap/fetch) failures, 5 items that failed (gpuplan.run.items.JobsFailed), 6 a batch stopped at
its yen cap (gpuplan.run.items.Capped), 7 when another gpuplan command holds the cluster (run it again
later), 130 interrupted (Ctrl-C).
"""


class GpuplanError(Exception):
    """Base class: str(exc) is the one line shown to the user; `detail`, what --debug shows
    besides (a failed remote step's whole output)."""

    exit_code = 1
    detail = ""


class UsageError(GpuplanError):
    """Bad input: unknown offer, malformed file, negative count, bad option."""

    exit_code = 2


class Mistakes(UsageError):
    """Every mistake found in one file at once (its schema, gpuplan/schemas/check.py): one line
    for one, a short block (a line each) for several."""

    def __init__(self, where: str, lines: list[str]) -> None:
        self.where = where
        self.lines = list(dict.fromkeys(lines))
        super().__init__(f"{where}: {self.lines[0]}" if len(self.lines) == 1 else
                         f"{where}: {len(self.lines)} mistakes: " + "; ".join(self.lines))


class NotFound(UsageError):
    """A cluster, node, image or offer the user named does not exist."""


class QuotaExceeded(UsageError):
    """The request needs more quota than the account has. Nothing was created.

    Told apart from CapacityUnavailable on purpose: a quota is the same in every zone of the
    region and does not come back in an hour, so nothing retries it in the next zone. `quota`
    is the quota's own name where the provider knows it ("L-DB2E81BA", "NVIDIA_T4_GPUS")."""

    def __init__(self, message: str = "", *, quota: str = "") -> None:
        super().__init__(message)
        self.quota = quota


class RetiredType(UsageError):
    """The instance type is retired (catalog); the message names its successor."""


class AuthMissing(UsageError):
    """Credentials are missing; the message names the variable or file to set."""


class StateUnreachable(UsageError):
    """The shared state database (GPUPLAN_STATE_URL, PostgreSQL) cannot be reached: stopped, wrong
    host or port, or the login refused. Nothing was changed; exit 2 as for a setting to fix."""


class ProviderError(GpuplanError):
    """A cloud API call failed for a reason the user cannot fix by changing input."""

    exit_code = 3


class CapacityUnavailable(ProviderError):
    """The zone (or region) has no capacity for the size right now: worth asking the next zone.

    `code` is the cloud's own word for it (InsufficientInstanceCapacity, ZonalAllocationFailed,
    ZONE_RESOURCE_POOL_EXHAUSTED); `refusals`, each zone's refusal when a provider tried them
    all (gpuplan.fleet.provider.ZoneRefusal values)."""

    def __init__(self, message: str = "", *, code: str = "", refusals: tuple = ()) -> None:
        super().__init__(message)
        self.code = code
        self.refusals = tuple(refusals)


class RemoteError(GpuplanError):
    """An SSH command or bootstrap step failed on a host."""

    exit_code = 4


class Busy(GpuplanError):
    """Another gpuplan command holds the lock of this cluster, image or sweep; nothing was done
    (exit code 7: 6 is a batch stopped at its cap)."""

    exit_code = 7


def unreachable(exc: BaseException) -> str | None:
    """Why a network call never got an answer, in words, from the exception or what caused it
    (any SDK: botocore, azure-core, requests, paramiko, plain sockets): "cannot resolve HOST
    (DNS)", "connection refused", "timed out"; None when it was not a network failure (an answer
    came back, e.g. refused credentials). Lets every provider and SSH say which one it was,
    instead of blaming the credentials or a cluster for a DNS failure."""
    import socket

    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        name = type(e).__name__
        text = str(e)
        if isinstance(e, socket.gaierror) or name in ("NameResolutionError",) or (
                "Name or service not known" in text or "nodename nor servname" in text
                or "Temporary failure in name resolution" in text or "getaddrinfo failed" in text):
            return "cannot resolve the host name (DNS); check the network connection and DNS"
        if isinstance(e, ConnectionRefusedError) or "Connection refused" in text or "[Errno 111]" in text:
            return "the connection was refused (nothing listens there); check the address, port and any proxy"
        if isinstance(e, (TimeoutError, socket.timeout)) or name in ("ConnectTimeoutError", "ConnectTimeout",
                                                                      "ReadTimeout", "ReadTimeoutError") or (
                "timed out" in text.lower()):
            return "the connection timed out; check the network, a firewall or proxy"
        if isinstance(e, OSError) and getattr(e, "errno", None) in (101, 113):  # network / host unreachable
            return "the network is unreachable from here; check the connection"
        stack.extend(x for x in (e.__cause__, e.__context__) if x is not None)
        stack.extend(a for a in getattr(e, "args", ()) if isinstance(a, BaseException))
        errors = getattr(e, "errors", None)  # paramiko's NoValidConnectionsError: address -> socket error
        if isinstance(errors, dict):
            stack.extend(v for v in errors.values() if isinstance(v, BaseException))
        for attr in ("reason", "original_error", "inner_exception", "exc"):
            inner = getattr(e, attr, None)
            if isinstance(inner, BaseException):
                stack.append(inner)
    return None
