"""Reading the text files a user hands gpuplan: workloads, items, plans, profiles, playbooks,
prices, config and inventories.

Every way such a file can be unusable (missing, a directory, unreadable, binary, too large)
becomes one UsageError line that names the file and says what to do; nothing else is raised.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpuplan.errors import UsageError

MAX_BYTES = 16 * 2**20  # far above any hand-written file; stops a wrong path (a video, a disk image) early


def read_text(path: str | os.PathLike, what: str, fix: str, max_bytes: int = MAX_BYTES) -> str:
    """The UTF-8 text of `path` (a leading byte-order mark dropped). `what` names the file in
    messages ("items file"); `fix` says what to do about it ("write one item per line")."""
    p = Path(path).expanduser()
    try:
        with open(p, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise UsageError(f"{what} {p} not found; {fix}") from None
    except IsADirectoryError:
        raise UsageError(f"{what} {p} is a directory, not a file; {fix}") from None
    except OSError as exc:
        raise UsageError(f"{what} {p}: cannot read it ({exc.strerror or exc}); {fix}") from None
    if len(data) > max_bytes:
        raise UsageError(f"{what} {p} is larger than {_size(max_bytes)}, the most gpuplan reads for it; {fix}")
    if b"\0" in data:
        raise UsageError(f"{what} {p} is not a text file (it contains NUL bytes); {fix}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} {p} is not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x}); {fix}") from None


def load_yaml(text: str):
    """YAML text as plain data (safe: no Python objects), parsed by libyaml's C parser where
    PyYAML was built with it (about 10x faster on a 20,000-job workload), else by PyYAML's own.
    Raises yaml.YAMLError as yaml.safe_load does."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _size(n: int) -> str:
    return f"{n // 2**20} MiB" if n % 2**20 == 0 else f"{n // 2**10} KiB"
