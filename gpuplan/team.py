"""Who spends, and for which project (issue 45): the one place each is resolved.

The user: GPUPLAN_USER, else `user:` in config.yaml, else the OS login. The project: the
command's `--project`, else the batch file's `project:`, else `project:` in config.yaml, else
"default". Every cluster, batch and ledger row the state writes records both (the store asks
`current()` where its caller gave none).

Rows written before gpuplan kept them read as user "unknown" and project "default" (UNKNOWN_USER,
DEFAULT_PROJECT), and `status`, `jobs` and `cost-report` show them to every user by default: a
machine nobody can be sure of is not hidden from anyone (docs/teams.md). "unknown" is therefore
not a name a user may take.

Budget months are Japan's (BUDGET_ZONE, JST, UTC+9, no daylight saving): a Japanese company's
month of 予算 begins at 00:00 JST on the 1st.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from gpuplan.errors import UsageError

UNKNOWN_USER = "unknown"  # the user of a row written before rows recorded one
DEFAULT_PROJECT = "default"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z")
BUDGET_ZONE = timezone(timedelta(hours=9), "JST")
MONTH = re.compile(r"\d{4}-(0[1-9]|1[0-2])\Z")

_chosen: str | None = None  # the project this command named (--project, a batch file's project:)


@dataclass(frozen=True)
class Who:
    user: str
    project: str


def check_name(value: str, what: str) -> str:
    """A user or project name: letters, digits, '_', '.', '-' (at most 63, starting with a
    letter or digit); one line, exit 2, where it is not one."""
    text = str(value).strip()
    if not NAME.match(text):
        raise UsageError(f"bad {what} {value!r}: a name of letters, digits, '_', '.' and '-', starting with a letter or"
                         " digit, at most 63 characters")
    return text


def user() -> str:
    """GPUPLAN_USER, else config.yaml's `user:`, else the OS login."""
    raw = os.environ.get("GPUPLAN_USER")
    what = "GPUPLAN_USER"
    if not raw:
        from gpuplan import config

        raw, what = config.setting("user"), "config.yaml user:"
    if not raw:
        import getpass

        try:
            raw = getpass.getuser()
        except (KeyError, OSError):  # no login name (a container's bare uid): say what to set
            raise UsageError("cannot tell who you are (no login name): set GPUPLAN_USER or `user:` in config.yaml") from None
        what = "login name (set GPUPLAN_USER)"
    name = check_name(raw, what)
    if name == UNKNOWN_USER:
        raise UsageError(f"bad {what} {name!r}: 'unknown' stands for rows older than gpuplan's users; choose another name")
    return name


def project(flag: str | None = None, batch: str | None = None) -> str:
    """The project a spend is for: `flag` (--project), else `batch` (a batch file's project:),
    else config.yaml's `project:`, else "default"."""
    for value, what in ((flag, "--project"), (batch, "batch file project:")):
        if value:
            return check_name(value, what)
    from gpuplan import config

    configured = config.setting("project")
    return check_name(configured, "config.yaml project:") if configured else DEFAULT_PROJECT


def choose(flag: str | None = None, batch: str | None = None) -> str:
    """project(), kept as this command's project: what the store records on the rows it writes."""
    global _chosen
    _chosen = project(flag, batch)
    return _chosen


def chosen() -> str | None:
    """The project this command named (None: it named none; a batch on a cluster then takes the cluster's)."""
    return _chosen


def reset() -> None:
    """Forget the chosen project (each CLI command starts without one)."""
    global _chosen
    _chosen = None


def current() -> Who:
    """Who writes now, for which project."""
    return Who(user(), _chosen or project())


def visible(user_of_row: str, project_of_row: str, all_users: bool, only_project: str | None, me: str) -> bool:
    """Whether a row shows in `status`, `jobs` and `cost-report`: your own (and rows older than
    users, "unknown", so nothing existing goes out of sight), every user's with --all-users;
    only `only_project`'s with --project."""
    if only_project is not None and project_of_row != only_project:
        return False
    return all_users or user_of_row in (me, UNKNOWN_USER)


def month_of(at: datetime | None = None) -> str:
    """The budget month ("YYYY-MM", JST) that `at` (default now) falls in."""
    return (at or datetime.now(timezone.utc)).astimezone(BUDGET_ZONE).strftime("%Y-%m")


def check_month(text: str, what: str = "--month") -> str:
    if not MONTH.match(str(text).strip()):
        raise UsageError(f"bad {what} {text!r}: write it as YYYY-MM, e.g. 2026-11")
    return str(text).strip()


def month_bounds(month: str) -> tuple[datetime, datetime]:
    """The first instant of `month` (JST) and of the month after, as UTC datetimes."""
    year, mon = (int(x) for x in month.split("-"))
    start = datetime(year, mon, 1, tzinfo=BUDGET_ZONE)
    end = datetime(year + (mon == 12), mon % 12 + 1, 1, tzinfo=BUDGET_ZONE)
    return start.astimezone(timezone.utc), end.astimezone(timezone.utc)

