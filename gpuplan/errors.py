"""gpuplan's own exceptions. Each carries one line a person can act on.

The CLI maps them to exit codes in one place (gpuplan.cli): 2 for bad input,
3 for cloud/provider failures, 4 for remote (SSH/bootstrap) failures, 6 when another
gpuplan command holds the cluster (run it again later).
"""


class GpuplanError(Exception):
    """Base class: str(exc) is the one line shown to the user."""

    exit_code = 1


class UsageError(GpuplanError):
    """Bad input: unknown offer, malformed file, negative count, bad option."""

    exit_code = 2


class NotFound(UsageError):
    """A cluster, node, image or offer the user named does not exist."""


class QuotaExceeded(UsageError):
    """The request needs more quota than the account has. Nothing was created."""


class RetiredType(UsageError):
    """The instance type is retired (catalog); the message names its successor."""


class AuthMissing(UsageError):
    """Credentials are missing; the message names the variable or file to set."""


class ProviderError(GpuplanError):
    """A cloud API call failed for a reason the user cannot fix by changing input."""

    exit_code = 3


class CapacityUnavailable(ProviderError):
    """The region has no capacity for the size right now."""


class RemoteError(GpuplanError):
    """An SSH command or bootstrap step failed on a host."""

    exit_code = 4


class Busy(GpuplanError):
    """Another gpuplan command holds the lock of this cluster, image or sweep; nothing was done."""

    exit_code = 6
