"""The state store: one SQLite file (the default), or a team's PostgreSQL database
(GPUPLAN_STATE_URL or `state_url:` in config.yaml). With sql.py, the only place that knows SQL:
one schema text and one MIGRATIONS list for both; sql.py translates what is spelt differently.

It is the source of truth for teardown. Every cloud call is journaled twice: an intent row
written (and committed) *before* the call, and its outcome after. A node row exists, with its
deterministic name and tags, before the create call that makes it, so that a crash or a
kill -9 at any point leaves enough for `gpuplan teardown` to find and remove it.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

from gpuplan import faults, paths, team
from gpuplan.errors import UsageError
from gpuplan.market import billing
from gpuplan.market.billing import Terms
from gpuplan.run.ray.batch_rules import INTERRUPTED, UNKNOWN
from gpuplan.store import sql as dialect
from gpuplan.team import Who

Db = Any  # a sqlite3.Connection or a sql.PostgresDb: both take the same statements (state.py's SQL)

SCHEMA = """
CREATE TABLE IF NOT EXISTS clusters (
    name TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    region TEXT NOT NULL,
    size TEXT NOT NULL,
    count INTEGER NOT NULL,
    status TEXT NOT NULL,           -- provisioning | ready | failed | tearing-down | gone
    image TEXT,
    ssh_user TEXT NOT NULL DEFAULT 'ubuntu',
    ttl_expires_at TEXT,
    price_jpy_per_hour TEXT,        -- Decimal as text, per node
    spec TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS nodes (
    cluster TEXT NOT NULL,
    name TEXT NOT NULL,
    provider_id TEXT,
    status TEXT NOT NULL,           -- intent | creating | running | failed | deleting | deleted
    public_ip TEXT,
    private_ip TEXT,
    ssh_port INTEGER NOT NULL DEFAULT 22,
    gpus INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (cluster, name)
);
CREATE TABLE IF NOT EXISTS images (
    name TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    region TEXT NOT NULL,
    size TEXT NOT NULL,
    provider_id TEXT,
    status TEXT NOT NULL,           -- intent | capturing | ready | failed | deleting | deleted
    playbooks TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS ssh_keys (
    cluster TEXT PRIMARY KEY,
    private_key_path TEXT NOT NULL, -- file 0600 beside the database; never printed
    public_key TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS host_keys (
    host TEXT NOT NULL,
    port INTEGER NOT NULL,
    key TEXT NOT NULL,              -- "ssh-ed25519 AAAA..."
    cluster TEXT,
    node TEXT,
    pinned_at TEXT NOT NULL,
    origin TEXT NOT NULL DEFAULT 'node',  -- node (the machine's own key) | injected (one-time, rotated at first login)
    pending_key TEXT,               -- a rotation's new key, written on the node but not yet confirmed
    PRIMARY KEY (host, port)
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,           -- installation_id: made once, names this installation in the owner tag
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS journal (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    cluster TEXT,
    op TEXT NOT NULL,               -- create-node, delete-node, capture-image, sweep, ...
    target TEXT NOT NULL,
    phase TEXT NOT NULL,            -- intent | ok | failed
    detail TEXT NOT NULL DEFAULT '',
    done_at TEXT
);
CREATE TABLE IF NOT EXISTS ledger (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    cluster TEXT NOT NULL,
    node TEXT NOT NULL,
    provider TEXT NOT NULL,
    size TEXT NOT NULL,
    price_jpy_per_hour TEXT NOT NULL,
    started_at TEXT NOT NULL,
    stopped_at TEXT,
    -- the billing terms (planning/billing.Terms) the row is charged by; rows from before they
    -- were kept read as the per-second rule they were counted by then
    price_jpy TEXT,                 -- per period_s (an hourly price, or a monthly rent)
    period_s INTEGER NOT NULL DEFAULT 3600,
    granularity_s INTEGER NOT NULL DEFAULT 1,
    minimum_s INTEGER NOT NULL DEFAULT 0,
    daily_cap_jpy TEXT,
    monthly_cap_jpy TEXT,
    tax TEXT                        -- included / excluded / unknown: the price's basis as its row lists it
);
CREATE TABLE IF NOT EXISTS setup_times (
    provider TEXT NOT NULL,
    size TEXT NOT NULL,
    playbook TEXT NOT NULL,         -- the playbook list, comma-joined
    seconds INTEGER NOT NULL,
    cluster TEXT,
    measured_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    cluster TEXT NOT NULL,
    job TEXT NOT NULL,
    node TEXT NOT NULL,
    slot TEXT NOT NULL,
    status TEXT NOT NULL,           -- ok | failed
    attempts INTEGER NOT NULL,
    seconds REAL NOT NULL,
    log_path TEXT,
    started_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS calibrations (  -- a `gpuplan run --plan` batch: the plan's jobs phase vs measured
    workload TEXT NOT NULL,
    provider TEXT NOT NULL,
    size TEXT NOT NULL,
    jobs INTEGER NOT NULL,
    predicted_s REAL NOT NULL,
    measured_s REAL NOT NULL,
    cluster TEXT NOT NULL,
    measured_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (     -- a batch run by the cluster's engine (a Ray Job on its head node)
    id TEXT PRIMARY KEY,            -- "<cluster>-<n>": also the Ray submission id
    cluster TEXT NOT NULL,
    state TEXT NOT NULL,            -- submitted | running | succeeded | failed | cancelled | capped | lost
    command TEXT NOT NULL,          -- JSON list of words, {item} in them
    options TEXT NOT NULL DEFAULT '{}',  -- JSON: per_gpu, retries, timeout_s, workdir, plan figures
    total INTEGER NOT NULL,
    nodes INTEGER NOT NULL,         -- the cluster's nodes when submitted (each billed while it runs)
    resumes TEXT,                   -- the job whose unfinished items this one runs
    events_read INTEGER NOT NULL DEFAULT 0,  -- bytes of the head's events.jsonl recorded so far
    submitted_at TEXT NOT NULL,
    started_at TEXT,
    ended_at TEXT
);
CREATE TABLE IF NOT EXISTS job_items (
    job TEXT NOT NULL,
    idx INTEGER NOT NULL,           -- the item's place in the items file (0-based, comments skipped)
    item TEXT NOT NULL,
    position INTEGER NOT NULL,      -- its place in the run order (the plan's: longest first)
    status TEXT NOT NULL,           -- queued | running | ok | failed | bad input | cancelled (stopped at the yen cap)
    timed_out INTEGER NOT NULL DEFAULT 0,  -- its latest attempt was killed at --timeout
    attempts INTEGER NOT NULL DEFAULT 0,
    node TEXT,
    slot TEXT,
    started_at TEXT,
    ended_at TEXT,
    exit_code INTEGER,
    log_path TEXT,                  -- on `node`
    PRIMARY KEY (job, idx)
);
CREATE TABLE IF NOT EXISTS job_quarantines (
    job TEXT NOT NULL,
    node TEXT NOT NULL,
    reason TEXT NOT NULL,
    code TEXT                       -- why, as batch_rules' code (lost | failures | left_out | not_in_ray); NULL on older rows
);
CREATE TABLE IF NOT EXISTS job_interruptions (  -- an attempt stopped because the cloud took its node back
    job TEXT NOT NULL,
    idx INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    node TEXT NOT NULL,
    node_gpus INTEGER NOT NULL,     -- the node's GPUs then (its slots: GPUs x the job's per_gpu)
    started_at TEXT,
    ended_at TEXT,
    saved_at TEXT,                  -- its last checkpoint sent to the head; NULL: none (or a driver older than it)
    PRIMARY KEY (job, idx, attempt)
);
CREATE TABLE IF NOT EXISTS speed_points (  -- a batch on a fleet other than the plan's: seconds per job per GPU
    workload TEXT NOT NULL,
    provider TEXT NOT NULL,
    size TEXT NOT NULL,
    gpus INTEGER NOT NULL,
    jobs INTEGER NOT NULL,
    measured_s REAL NOT NULL,
    seconds_per_job_per_gpu REAL NOT NULL,
    why TEXT NOT NULL,              -- why it was not recorded as a calibration
    cluster TEXT NOT NULL,
    measured_at TEXT NOT NULL
);
-- status reads each cluster's ledger and nodes: without these, 1,000 clusters and 40,000
-- ledger rows took 7 s of table scans (benchmarks/status_bench.py)
CREATE INDEX IF NOT EXISTS ledger_by_cluster ON ledger (cluster);
-- the rows still billing, priced live by status; closed rows never change (ledger_closed)
CREATE INDEX IF NOT EXISTS ledger_open ON ledger (cluster) WHERE stopped_at IS NULL;
-- per cluster, its closed ledger rows summed once, when ledger_stop closed them (issue 47: status
-- re-priced 40,000 rows in Python each call): how many, their machine-seconds and exact yen
CREATE TABLE IF NOT EXISTS ledger_closed (
    cluster TEXT PRIMARY KEY,
    rows INTEGER NOT NULL,
    seconds INTEGER NOT NULL,
    yen TEXT NOT NULL               -- a Decimal, exact: the sum of billing.charge of each row
);
CREATE INDEX IF NOT EXISTS journal_by_cluster ON journal (cluster);
-- a project's budget for one month (JST: team.BUDGET_ZONE), yen on the "included" tax basis
CREATE TABLE IF NOT EXISTS budgets (
    project TEXT NOT NULL,
    month TEXT NOT NULL,            -- YYYY-MM, Japan's month
    yen TEXT NOT NULL,              -- a Decimal
    set_by TEXT NOT NULL,
    set_at TEXT NOT NULL,
    PRIMARY KEY (project, month)
);
-- a spend reserved against a project's month before anything is bought (issue 45): held while
-- its cluster row is live or its batch unfinished (a crashed client's row holds nothing once
-- those end; one attached to neither yet holds for COMMITMENT_GRACE_S)
CREATE TABLE IF NOT EXISTS commitments (
    id TEXT PRIMARY KEY,            -- random: a reservation is made before its job id exists
    project TEXT NOT NULL,
    month TEXT NOT NULL,
    user_name TEXT NOT NULL,
    yen TEXT NOT NULL,              -- a Decimal on the "included" basis: the cap, or the plan's upper yen
    what TEXT NOT NULL,             -- cap | plan | ttl: where the figure comes from
    cluster TEXT,
    job TEXT,
    created_at TEXT NOT NULL
);
"""


BUSY_WAIT_S = 30.0  # how long a statement waits for another process's write, and an opening for another's


@contextmanager
def _opening(path: Path) -> Iterator[None]:
    """Held (an flock on the database's folder: no file added beside it) while one process
    checks the file and sets up its schema. SQLite answers "database is locked" at once, not
    after its busy timeout, to a process switching a new file to WAL while another does: 3
    processes opening one new file together failed 102 times in 900 (a CI run: a second
    `provision` died on it). And two processes migrating an old file would both add the same
    column. Where the folder cannot be locked (NFS may refuse an flock on a folder opened
    read-only) it opens as before, unserialised."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # a folder gpuplan cannot make or open: _refuse_unusable says so in one line
        fd = None
    if fd is None:
        yield
        return
    try:
        deadline = time.monotonic() + BUSY_WAIT_S
        while not _try_flock(fd):
            if time.monotonic() > deadline:
                raise UsageError(f"another gpuplan has been opening the state database {path} for "
                                 f"{BUSY_WAIT_S:.0f} s (a stopped process?); let it finish or stop it, then run "
                                 "this again")
            time.sleep(0.01)
        yield
    finally:
        os.close(fd)  # releases the flock


def _try_flock(fd: int) -> bool:
    """Take the exclusive flock of `fd` if it is free (False: another holds it). True also where
    the file system has no flock to give: there the opening goes on unserialised."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


def _refuse_unusable(path: Path) -> None:
    """Refuse with one line, changing nothing, a state file that is damaged or not gpuplan's:
    what it records may be all that finds running machines. Opened read-only to look."""
    advice = (f"gpuplan left it as it is: restore it from a backup, or move it aside (mv {path} {path}.bad) to start"
              " a new one and find the machines it knew with `gpuplan teardown --sweep --dry-run`")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot make the state folder {path.parent} ({exc.strerror or exc}); set GPUPLAN_HOME"
                         " to a folder you can write") from None
    if not path.exists():
        return
    if not path.is_file():
        raise UsageError(f"state database {path} is not a file; {advice}")
    if not os.access(path, os.R_OK | os.W_OK) or not os.access(path.parent, os.W_OK | os.X_OK):
        raise UsageError(f"state database {path} (or its folder) is read-only for you; gpuplan records every cloud "
                         "call there before making it: make both writable (chmod u+w), then run this again")
    db = None
    try:
        db = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        tables = sorted(r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'"))
        columns = {r[1] for r in db.execute("PRAGMA table_info(clusters)")}
        check = [r[0] for r in db.execute("PRAGMA quick_check")] if tables else ["ok"]
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError):  # cannot open or locked: the file itself may be fine
            raise UsageError(f"cannot open state database {path} ({exc}); check that you may read and write it and"
                             " its folder, and that no other program holds it") from None
        raise UsageError(f"state database {path} is damaged or not a gpuplan state database ({exc}); {advice}") from None
    finally:
        if db is not None:
            db.close()
    if tables and not {"name", "provider", "region", "size", "status"} <= columns:
        raise UsageError(f"{path} is not a gpuplan state database (its tables: {', '.join(tables)[:80]}); {advice}")
    if check != ["ok"]:
        raise UsageError(f"state database {path} is damaged ({check[0]}); {advice}")


def file_holds_rows(path: Path) -> bool | None:
    """Whether the SQLite state file `path` holds a row outside the meta table (read-only look;
    None: it cannot be read). A refused command removes a state file it made only when empty."""
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return any(con.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchone() for t in tables
                   if not t.startswith("sqlite_") and t != "meta")
    except sqlite3.Error:
        return None
    finally:
        con.close()


# Columns added after a table was first shipped: (table, column, definition) for ALTER TABLE.
MIGRATIONS = [
    ("host_keys", "origin", "TEXT NOT NULL DEFAULT 'node'"),
    ("host_keys", "pending_key", "TEXT"),
    # ledger rows keep their billing terms; older rows keep the per-second rule they were counted by
    ("ledger", "price_jpy", "TEXT"),
    ("ledger", "period_s", "INTEGER NOT NULL DEFAULT 3600"),
    ("ledger", "granularity_s", "INTEGER NOT NULL DEFAULT 1"),
    ("ledger", "minimum_s", "INTEGER NOT NULL DEFAULT 0"),
    ("ledger", "daily_cap_jpy", "TEXT"),
    ("ledger", "monthly_cap_jpy", "TEXT"),
    # whether the row's price includes consumption tax, as listed (market/tax.py); NULL on older rows: "unknown"
    ("ledger", "tax", "TEXT"),
    # the run backend a job was submitted through (run/backends.py); NULL on older rows
    ("jobs", "backend", "TEXT"),
    # why a node was set aside, as a code (batch_rules.QUARANTINE_CODES); NULL on older rows: read as "unknown"
    ("job_quarantines", "code", "TEXT"),
    # a calibration's provenance (issue 42): the batch, its clock, its command, the GPU; NULL on older rows
    ("calibrations", "batch", "TEXT"),
    ("calibrations", "clock", "TEXT"),
    ("calibrations", "command", "TEXT"),
    ("calibrations", "gpu", "TEXT"),
    # who made a row, for which project (issue 45, gpuplan/team.py); NULL on older rows: read as
    # user "unknown", project "default", shown to every user
    ("clusters", "user_name", "TEXT"),
    ("clusters", "project", "TEXT"),
    ("jobs", "user_name", "TEXT"),
    ("jobs", "project", "TEXT"),
    ("ledger", "user_name", "TEXT"),
    ("ledger", "project", "TEXT"),
]


def _text(value: Decimal | None) -> str | None:
    return str(value) if value is not None else None


_TERMS_COLUMNS = ("price_jpy", "price_jpy_per_hour", "period_s", "granularity_s", "minimum_s", "daily_cap_jpy",
                  "monthly_cap_jpy")


def _terms(row) -> Terms:
    """A ledger row's billing terms (rows older than the terms columns: per second, as counted then)."""
    price = Decimal(row["price_jpy"] if row["price_jpy"] is not None else row["price_jpy_per_hour"])
    caps = [Decimal(row[k]) if row[k] is not None else None for k in ("daily_cap_jpy", "monthly_cap_jpy")]
    return Terms(price, row["period_s"], row["granularity_s"], row["minimum_s"], caps[0], caps[1])


def now() -> datetime:
    return datetime.now(timezone.utc)


def _iso(t: datetime | None = None) -> str:
    return (t or now()).isoformat(timespec="seconds")


def parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _node(r) -> NodeRow:
    return NodeRow(r["cluster"], r["name"], r["provider_id"], r["status"], r["public_ip"], r["private_ip"],
                   r["ssh_port"], r["gpus"], parse_time(r["created_at"]))


def _ledger_dict(r) -> dict:
    """A ledger row as State.ledger_rows gives it (user "unknown", project "default" on older rows)."""
    return {"cluster": r["cluster"], "node": r["node"], "provider": r["provider"], "size": r["size"],
            "price_jpy_per_hour": Decimal(r["price_jpy_per_hour"]), "started_at": parse_time(r["started_at"]),
            "stopped_at": parse_time(r["stopped_at"]), "terms": _terms(r), "tax": r["tax"] or "unknown",
            "user": r["user_name"] or team.UNKNOWN_USER, "project": r["project"] or team.DEFAULT_PROJECT}


def _payer(db: Db, cluster: str, node: str) -> Who:
    """Who a ledger row is billed to: its cluster's user and project; a batch's without a cluster
    (a Slurm task "<job>/<task>") its job's; else whoever writes it."""
    row = db.execute("SELECT user_name, project FROM clusters WHERE name=?", (cluster,)).fetchone()
    if row is None or row["user_name"] is None:
        row = db.execute("SELECT user_name, project FROM jobs WHERE id=?", (node.split("/", 1)[0],)).fetchone()
    if row is not None and row["user_name"] is not None:
        return Who(row["user_name"], row["project"] or team.DEFAULT_PROJECT)
    return team.current()


def _ledger_row(r, at: datetime) -> tuple[int, Decimal]:
    """One ledger row's machine-seconds up to `at` and what they are billed in yen (billing.charge
    by the row's terms: a started hour of an hourly machine is a whole hour; exact Decimal)."""
    stop = parse_time(r["stopped_at"]) or at
    s = max(0, int((stop - parse_time(r["started_at"])).total_seconds()))
    return s, billing.charge(s, _terms(r))


def _add_closed(db: Db, cluster: str, rows: int, seconds: int, yen: Decimal) -> None:
    """Add closed rows to the cluster's closed total (ledger_closed), inside the caller's transaction."""
    have = db.execute("SELECT * FROM ledger_closed WHERE cluster=?", (cluster,)).fetchone()
    if have is None:
        db.execute("INSERT INTO ledger_closed (cluster, rows, seconds, yen) VALUES (?,?,?,?)",
                   (cluster, rows, seconds, str(yen)))
    else:
        db.execute("UPDATE ledger_closed SET rows=?, seconds=?, yen=? WHERE cluster=?",
                   (have["rows"] + rows, have["seconds"] + seconds, str(Decimal(have["yen"]) + yen), cluster))


@dataclass(frozen=True)
class ClusterRow:
    name: str
    provider: str
    region: str
    size: str
    count: int
    status: str
    image: str | None
    ssh_user: str
    ttl_expires_at: datetime | None
    price_jpy_per_hour: Decimal | None
    spec: dict
    created_at: datetime
    user: str = "unknown"  # team.UNKNOWN_USER on rows older than the column
    project: str = "default"


@dataclass(frozen=True)
class NodeRow:
    cluster: str
    name: str
    provider_id: str | None
    status: str
    public_ip: str | None
    private_ip: str | None
    ssh_port: int
    gpus: int
    created_at: datetime


@dataclass(frozen=True)
class ImageRow:
    name: str
    provider: str
    region: str
    size: str
    provider_id: str | None
    status: str
    playbooks: str
    created_at: datetime


@dataclass(frozen=True)
class JobRow:
    """A batch (the jobs table). `options` is the JSON-decoded dict it was submitted with."""

    id: str
    cluster: str
    state: str  # submitted | running | succeeded | failed | cancelled | capped | lost
    command: tuple[str, ...]
    options: Mapping[str, Any]
    total: int
    nodes: int
    resumes: str | None
    events_read: int
    submitted_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    backend: str | None  # None on rows older than the column (run/backends.py: of)
    user: str = "unknown"  # team.UNKNOWN_USER on rows older than the column
    project: str = "default"


@dataclass(frozen=True)
class ItemRow:
    """One item of a batch (the job_items table)."""

    job: str
    idx: int  # its place in the items file
    item: str
    position: int  # its place in the run order
    status: str  # queued | running | ok | failed | bad input | cancelled
    timed_out: bool  # its latest attempt was killed at --timeout
    attempts: int
    node: str | None
    slot: str | None
    started_at: datetime | None
    ended_at: datetime | None
    exit_code: int | None
    log_path: str | None


@dataclass(frozen=True)
class QuarantineRow:
    """A node a batch set aside: `code` one of batch_rules.QUARANTINE_CODES, `reason` the words shown."""

    node: str
    code: str
    reason: str


@dataclass(frozen=True)
class InterruptionRow:
    """An attempt its node's drain stopped (the cloud took the machine back): the job_items row
    holds only the item's latest attempt, this one is kept apart."""

    job: str
    idx: int
    attempt: int
    node: str
    node_gpus: int  # the node's GPUs when it ran (0: CPU-only)
    started_at: datetime | None
    ended_at: datetime | None
    saved_at: datetime | None  # its last checkpoint sent to the head; None: none saved


@dataclass(frozen=True)
class HostPin:
    key: str  # "ssh-ed25519 AAAA..."
    origin: str  # "node" | "injected"
    pending_key: str | None  # a rotation under way: the node's new key, not yet confirmed


@dataclass(frozen=True)
class JournalRow:
    id: int
    at: datetime
    cluster: str | None
    op: str
    target: str
    phase: str
    detail: str


_INSTALLATION = re.compile(r"[0-9a-f]{12}")


def _side_file(path: Path, what: str, max_bytes: int) -> str:
    """The text of a small file the state keeps beside its database ("" when absent): a
    directory, a pipe, binary or oversized content there is one UsageError line."""
    advice = f"move {path} aside (mv {path} {path}.bad), then run this again"
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return ""
    except OSError as exc:
        raise UsageError(f"cannot read the {what} file {path} ({exc.strerror}); {advice}") from None
    if not stat.S_ISREG(mode):
        raise UsageError(f"the {what} file {path} is not a regular file; {advice}")
    try:
        data = path.read_bytes()[: max_bytes + 1]
        if len(data) > max_bytes or b"\0" in data:
            raise ValueError
        return data.decode("ascii")
    except OSError as exc:
        raise UsageError(f"cannot read the {what} file {path} ({exc.strerror}); {advice}") from None
    except ValueError:
        raise UsageError(f"the {what} file {path} is damaged (not a short text line); {advice}") from None


def _postgres_schema(db: dialect.PostgresDb) -> None:
    """Make or bring up to date gpuplan's tables in a PostgreSQL database, under an advisory
    lock so that two processes starting together do not race; refuse in one line a database
    whose tables are not gpuplan's. A database already up to date is only read."""
    wanted = [m.group(1) for m in re.finditer(r"CREATE TABLE IF NOT EXISTS (\w+)", SCHEMA)]

    def up_to_date(tables: dict[str, set[str]]) -> bool:
        if tables and not {"name", "provider", "region", "size", "status"} <= tables.get("clusters", set()):
            raise UsageError(f"{db.where} is not a gpuplan state database (its tables: "
                             f"{', '.join(sorted(tables))[:80]}); name an empty database or gpuplan's own in"
                             " GPUPLAN_STATE_URL")
        return all(t in tables for t in wanted) and all(c in tables[t] for t, c, _ in MIGRATIONS)

    if up_to_date(db.tables()):
        return
    with db.transaction(key=dialect.SCHEMA_KEY):
        tables = db.tables()
        if up_to_date(tables):
            return
        for statement in dialect.schema_statements(SCHEMA):
            db.execute(statement)
        for table, column, definition in MIGRATIONS:
            db.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {dialect.column_definition(definition)}")


class State:
    """A handle on the SQLite file, or on the PostgreSQL database `url` names (then `path` is
    not used). Safe to share between threads: each method is one transaction under one lock;
    WAL mode lets several processes read while one writes. On PostgreSQL, writing transactions
    take turns under one advisory lock, as SQLite's writers do under BEGIN IMMEDIATE."""

    def __init__(self, path: str | os.PathLike, url: str | None = None) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self._pg: dialect.PostgresDb | None = None
        self._db: Db
        # where the state is, in words a message may show (a URL never with a password)
        self.where = dialect.redacted(url) if url else str(self.path)
        if url:
            self._pg = self._db = dialect.PostgresDb(dialect.check_url(url, "the state URL"))
            try:
                _postgres_schema(self._pg)
            except BaseException:
                self._pg.close()
                raise
            return
        with _opening(self.path):
            _refuse_unusable(self.path)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(self.path.parent, 0o700)
            # The database holds key paths, addresses and pinned keys: 0600 from its first byte.
            # SQLite gives its -wal and -shm files the database file's mode.
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
            os.chmod(self.path, 0o600)
            self._db = sqlite3.connect(self.path, timeout=BUSY_WAIT_S, check_same_thread=False, isolation_level=None)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(SCHEMA)
            for table, column, definition in MIGRATIONS:
                have = {r["name"] for r in self._db.execute(f"PRAGMA table_info({table})")}
                if column not in have:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")
            for extra in ("-wal", "-shm"):
                side = Path(str(self.path) + extra)
                if side.exists():
                    os.chmod(side, 0o600)

    @classmethod
    def open_default(cls) -> State:
        """The user's state: the team's PostgreSQL database if one is set (config.state_url),
        else the SQLite file in the state folder."""
        from gpuplan import config

        return cls(paths.state_db(), url=config.state_url())

    @classmethod
    def open_existing(cls) -> State | None:
        """The user's state if it exists (None: no SQLite file yet, or a PostgreSQL database
        without gpuplan's tables): for commands that only read it and never create one."""
        from gpuplan import config

        url = config.state_url()
        if url is None:
            return cls(paths.state_db()) if paths.state_db().is_file() else None
        db = dialect.PostgresDb(url)
        try:
            if "clusters" not in db.tables():
                return None
        finally:
            db.close()
        return cls(paths.state_db(), url=url)

    @property
    def shared(self) -> bool:
        """Whether the state is a PostgreSQL database other machines may share."""
        return self._pg is not None

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[Db]:
        if self._pg is not None:
            with self._lock, self._pg.transaction():
                yield self._pg
            return
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            else:
                self._db.execute("COMMIT")

    def _query(self, sql: str, args: tuple = ()) -> list[Any]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # --- this installation ---------------------------------------------------------------

    def installation_id(self) -> str:
        """A random id made the first time it is asked for and kept for good: it tells this
        installation's cloud resources from those of every other one. Kept twice, in the
        database and in the file `installation-id` beside it, so a lost or replaced database
        file does not orphan what this installation made (a sweep finds it by this id)."""
        import secrets

        if self._pg is not None:  # the team shares one id, so that a sweep finds the team's resources
            with self._tx() as db:
                row = db.execute("SELECT value FROM meta WHERE key='installation_id'").fetchone()
                if row is not None and not _INSTALLATION.fullmatch(row["value"]):
                    raise UsageError(f"the installation id in {self.where} (meta table) is damaged ({row['value'][:20]!r});"
                                     " the team's cloud resources are tagged with it: restore it from a backup")
                if row is None:
                    db.execute("INSERT INTO meta (key, value) VALUES ('installation_id', ?)", (secrets.token_hex(6),))
                    row = db.execute("SELECT value FROM meta WHERE key='installation_id'").fetchone()
            return str(row["value"])
        side = self.path.parent / "installation-id"
        with self._tx() as db:
            row = db.execute("SELECT value FROM meta WHERE key='installation_id'").fetchone()
            from_file = _side_file(side, "installation id", 200).strip()
            in_db = row["value"] if row else ""
            for value, where in ((from_file, side), (in_db, f"{self.path} (meta table)")):
                if value and not _INSTALLATION.fullmatch(value):
                    raise UsageError(f"the installation id in {where} is damaged ({value[:20]!r}); the cloud resources "
                                     "of this installation are tagged with it: restore it from a backup, or move the "
                                     "file aside to start a new installation")
            value = from_file or in_db or secrets.token_hex(6)
            if row is None or row["value"] != value:
                db.execute("INSERT INTO meta (key, value) VALUES ('installation_id', ?)"
                           " ON CONFLICT (key) DO UPDATE SET value=excluded.value", (value,))
            if from_file != value:
                paths.write_owner_only(side, value + "\n")
        return value

    # --- journal -------------------------------------------------------------------------

    def journal_intent(self, op: str, target: str, cluster: str | None = None, detail: str = "") -> int:
        with self._tx() as db:
            row = db.execute(
                "INSERT INTO journal (at, cluster, op, target, phase, detail) VALUES (?,?,?,?,?,?) RETURNING id",
                (_iso(), cluster, op, target, "intent", detail),
            ).fetchone()
            return int(row[0])

    def journal_outcome(self, entry_id: int, ok: bool, detail: str = "") -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE journal SET phase=?, detail=CASE WHEN ?='' THEN detail ELSE ? END, done_at=? WHERE id=?",
                ("ok" if ok else "failed", detail, detail, _iso(), entry_id),
            )

    @contextmanager
    def journaled(self, op: str, target: str, cluster: str | None = None, detail: str = "") -> Iterator[int]:
        """Write the intent, run the body (the cloud call), then write its outcome."""
        entry = self.journal_intent(op, target, cluster, detail)
        faults.hit(f"before:{op}")
        try:
            yield entry
        except BaseException as exc:
            self.journal_outcome(entry, False, f"{type(exc).__name__}: {exc}"[:500])
            raise
        faults.hit(f"after:{op}")
        self.journal_outcome(entry, True)

    def journal(self, cluster: str | None = None) -> list[JournalRow]:
        if cluster is None:
            rows = self._query("SELECT * FROM journal ORDER BY id")
        else:
            rows = self._query("SELECT * FROM journal WHERE cluster=? ORDER BY id", (cluster,))
        return [
            JournalRow(r["id"], parse_time(r["at"]), r["cluster"], r["op"], r["target"], r["phase"], r["detail"])
            for r in rows
        ]

    # --- clusters ------------------------------------------------------------------------

    def add_cluster(
        self,
        name: str,
        provider: str,
        region: str,
        size: str,
        count: int,
        *,
        image: str | None = None,
        ssh_user: str = "ubuntu",
        ttl_expires_at: datetime | None = None,
        price_jpy_per_hour: Decimal | None = None,
        spec: dict | None = None,
        who: Who | None = None,
    ) -> None:
        t = _iso()
        who = who or team.current()
        with self._tx() as db:
            db.execute(
                "INSERT INTO clusters (name, provider, region, size, count, status, image, ssh_user, ttl_expires_at,"
                " price_jpy_per_hour, spec, created_at, updated_at, user_name, project)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    name,
                    provider,
                    region,
                    size,
                    count,
                    "provisioning",
                    image,
                    ssh_user,
                    _iso(ttl_expires_at) if ttl_expires_at else None,
                    str(price_jpy_per_hour) if price_jpy_per_hour is not None else None,
                    json.dumps(spec or {}),
                    t,
                    t,
                    who.user,
                    who.project,
                ),
            )

    def record_bootstrap(self, cluster: str, playbooks: Sequence[str], params: Mapping[str, str]) -> None:
        """The playbooks a cluster was bootstrapped with and the parameters given (kept in its
        spec, in order, each list once with its latest parameters): what a replacement node
        (`run --recover`) gets, so that it matches its peers."""
        def add(spec: dict) -> None:
            done = [b for b in spec.get("bootstrapped", []) if b.get("playbooks") != list(playbooks)]
            spec["bootstrapped"] = [*done, {"playbooks": list(playbooks), "params": dict(params)}]

        self._update_spec(cluster, add)

    def record_engine(self, cluster: str, settings: Mapping[str, Any]) -> None:
        """The run engine's settings (its ports, temp dirs, venv), kept with the cluster before
        its first process starts: whoever tears it down later finds it by them, whatever that
        shell's environment says."""
        self._update_spec(cluster, lambda spec: spec.__setitem__("engine", dict(settings)))

    def record_release_at(self, cluster: str, at: datetime) -> None:
        """The moment the cluster's machines release themselves (owned hosts armed by a launch
        from its max_yen): lifecycle.settle_released ends their ledger rows there once it is past."""
        self._update_spec(cluster, lambda spec: spec.__setitem__("releases_itself_at", _iso(at)))

    def _update_spec(self, cluster: str, change) -> None:
        with self._tx() as db:
            row = db.execute("SELECT spec FROM clusters WHERE name=?", (cluster,)).fetchone()
            if row is None:
                return
            spec = json.loads(row["spec"] or "{}")
            change(spec)
            db.execute("UPDATE clusters SET spec=?, updated_at=? WHERE name=?", (json.dumps(spec), _iso(), cluster))

    def set_cluster_status(self, name: str, status: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE clusters SET status=?, updated_at=? WHERE name=?", (status, _iso(), name))

    def cluster(self, name: str) -> ClusterRow | None:
        rows = self._query("SELECT * FROM clusters WHERE name=?", (name,))
        return _cluster(rows[0]) if rows else None

    def clusters(self, include_gone: bool = False) -> list[ClusterRow]:
        sql = "SELECT * FROM clusters" + ("" if include_gone else " WHERE status != 'gone'") + " ORDER BY created_at, name"
        return [_cluster(r) for r in self._query(sql)]

    def forget_cluster(self, name: str) -> None:
        """Drop a torn-down cluster's rows so its name can be used again; its ledger rows stay,
        renamed "<name>@<created_at>", so past spending is not lost."""
        with self._tx() as db:
            row = db.execute("SELECT created_at, status FROM clusters WHERE name=?", (name,)).fetchone()
            if row is None:
                return
            if row["status"] != "gone":
                raise ValueError(f"cluster {name} is {row['status']}, not gone")
            db.execute("UPDATE ledger SET cluster=? WHERE cluster=?", (f"{name}@{row['created_at']}", name))
            closed = db.execute("SELECT * FROM ledger_closed WHERE cluster=?", (name,)).fetchone()
            if closed is not None:
                db.execute("DELETE FROM ledger_closed WHERE cluster=?", (name,))
                _add_closed(db, f"{name}@{row['created_at']}", closed["rows"], closed["seconds"], Decimal(closed["yen"]))
            db.execute("DELETE FROM nodes WHERE cluster=?", (name,))
            db.execute("DELETE FROM clusters WHERE name=?", (name,))

    # --- nodes ---------------------------------------------------------------------------

    def add_node(self, cluster: str, name: str, gpus: int = 0) -> None:
        """Record a node *before* the create call (status 'intent')."""
        t = _iso()
        with self._tx() as db:
            db.execute(
                "INSERT INTO nodes (cluster, name, status, gpus, created_at, updated_at) VALUES (?,?,?,?,?,?)"
                " ON CONFLICT DO NOTHING",
                (cluster, name, "intent", gpus, t, t),
            )

    def update_node(self, cluster: str, name: str, **fields: object) -> None:
        allowed = {"provider_id", "status", "public_ip", "private_ip", "ssh_port", "gpus"}
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(f"unknown node fields {sorted(unknown)}")
        sets = ", ".join(f"{k}=?" for k in fields)
        with self._tx() as db:
            db.execute(
                f"UPDATE nodes SET {sets}, updated_at=? WHERE cluster=? AND name=?",
                (*fields.values(), _iso(), cluster, name),
            )

    def nodes(self, cluster: str, include_deleted: bool = False) -> list[NodeRow]:
        sql = "SELECT * FROM nodes WHERE cluster=?" + ("" if include_deleted else " AND status != 'deleted'")
        return [_node(r) for r in self._query(sql + " ORDER BY created_at, name", (cluster,))]

    def nodes_by_cluster(self) -> dict[str, list[NodeRow]]:
        """Every cluster's nodes (not deleted) in one query, as nodes() orders them."""
        out: dict[str, list[NodeRow]] = {}
        for r in self._query("SELECT * FROM nodes WHERE status != 'deleted' ORDER BY cluster, created_at, name"):
            out.setdefault(r["cluster"], []).append(_node(r))
        return out

    # --- images --------------------------------------------------------------------------

    def add_image(self, name: str, provider: str, region: str, size: str, playbooks: str = "") -> None:
        t = _iso()
        with self._tx() as db:
            db.execute(
                "INSERT INTO images (name, provider, region, size, status, playbooks, created_at, updated_at)"
                " VALUES (?,?,?,?,?,?,?,?)",
                (name, provider, region, size, "intent", playbooks, t, t),
            )

    def update_image(self, name: str, *, status: str | None = None, provider_id: str | None = None) -> None:
        with self._tx() as db:
            if status is not None:
                db.execute("UPDATE images SET status=?, updated_at=? WHERE name=?", (status, _iso(), name))
            if provider_id is not None:
                db.execute("UPDATE images SET provider_id=?, updated_at=? WHERE name=?", (provider_id, _iso(), name))

    def image(self, name: str) -> ImageRow | None:
        rows = self._query("SELECT * FROM images WHERE name=?", (name,))
        return _image(rows[0]) if rows else None

    def images(self, include_deleted: bool = False) -> list[ImageRow]:
        sql = "SELECT * FROM images" + ("" if include_deleted else " WHERE status != 'deleted'") + " ORDER BY created_at"
        return [_image(r) for r in self._query(sql)]

    # --- SSH keys and pinned host keys ---------------------------------------------------

    def save_ssh_key(self, cluster: str, private_key_path: Path, public_key: str) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO ssh_keys (cluster, private_key_path, public_key) VALUES (?,?,?) ON CONFLICT (cluster)"
                " DO UPDATE SET private_key_path=excluded.private_key_path, public_key=excluded.public_key",
                (cluster, str(private_key_path), public_key),
            )

    def ssh_key(self, cluster: str) -> tuple[Path, str] | None:
        rows = self._query("SELECT * FROM ssh_keys WHERE cluster=?", (cluster,))
        return (Path(rows[0]["private_key_path"]), rows[0]["public_key"]) if rows else None

    def forget_ssh_key(self, cluster: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM ssh_keys WHERE cluster=?", (cluster,))

    def pin_host_key(self, host: str, port: int, key: str, cluster: str | None = None, node: str | None = None,
                     origin: str = "node") -> None:
        """Pin `key` for host:port. Re-pinning the same address replaces the key: callers do
        that only for a key they generated themselves (a new machine on a reused address) or
        read over an authenticated channel. `origin` "injected": a one-time key gpuplan put on
        the machine, to be rotated at the first login."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO host_keys (host, port, key, cluster, node, pinned_at, origin, pending_key)"
                " VALUES (?,?,?,?,?,?,?,NULL) ON CONFLICT (host, port) DO UPDATE SET key=excluded.key,"
                " cluster=excluded.cluster, node=excluded.node, pinned_at=excluded.pinned_at, origin=excluded.origin,"
                " pending_key=NULL",
                (host, port, key.strip(), cluster, node, _iso(), origin),
            )

    def set_pending_host_key(self, host: str, port: int, key: str | None) -> None:
        with self._tx() as db:
            db.execute("UPDATE host_keys SET pending_key=? WHERE host=? AND port=?",
                       (key.strip() if key else None, host, port))

    def host_key(self, host: str, port: int) -> str | None:
        rows = self._query("SELECT key FROM host_keys WHERE host=? AND port=?", (host, port))
        return rows[0]["key"] if rows else None

    def host_pin(self, host: str, port: int) -> HostPin | None:
        rows = self._query("SELECT key, origin, pending_key FROM host_keys WHERE host=? AND port=?", (host, port))
        return HostPin(rows[0]["key"], rows[0]["origin"], rows[0]["pending_key"]) if rows else None

    def unpin_cluster_host_keys(self, cluster: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM host_keys WHERE cluster=?", (cluster,))

    def pinned_host_keys(self) -> dict[str, str]:
        """Every pinned key by "host:port": what a provider that reaches machines itself checks against."""
        return {f"{r['host']}:{r['port']}": r["key"] for r in self._query("SELECT host, port, key FROM host_keys")}

    def known_hosts_lines(self) -> list[str]:
        """OpenSSH known_hosts lines for every pinned key ("[host]:port" when port != 22)."""
        lines = []
        for r in self._query("SELECT host, port, key FROM host_keys ORDER BY host, port"):
            where = r["host"] if r["port"] == 22 else f"[{r['host']}]:{r['port']}"
            lines.append(f"{where} {r['key']}")
        return lines

    # --- quotas read by `gpuplan check` (kept in meta: one row per provider, region and tier) ----

    def save_quota(self, provider: str, region: str, name: str, limit: int, unit: str) -> None:
        value = json.dumps({"provider": provider, "region": region, "name": name, "limit": limit, "unit": unit,
                            "read_at": _iso()})
        with self._tx() as db:
            db.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value=excluded.value",
                       (f"quota:{provider}:{region}:{name}", value))

    def quotas(self) -> list[dict]:
        """Every quota `gpuplan check` read: provider, region, name, limit, unit, read_at (ISO)."""
        with self._tx() as db:
            rows = db.execute("SELECT value FROM meta WHERE key LIKE 'quota:%' ORDER BY key").fetchall()
        return [json.loads(r["value"]) for r in rows]

    # --- cost ledger ---------------------------------------------------------------------

    def ledger_start(self, cluster: str, node: str, provider: str, size: str, price_jpy_per_hour: Decimal,
                     terms: Terms | None = None, tax: str = "unknown") -> None:
        """A node starts being billed, by `terms` (default: its hourly price by the second), at a
        price that `tax` says includes consumption tax or not, as the provider bills it."""
        t = terms or billing.per_second(price_jpy_per_hour)
        with self._tx() as db:
            open_rows = db.execute(
                "SELECT 1 FROM ledger WHERE cluster=? AND node=? AND stopped_at IS NULL", (cluster, node)
            ).fetchall()
            if not open_rows:
                who = _payer(db, cluster, node)
                db.execute(
                    "INSERT INTO ledger (cluster, node, provider, size, price_jpy_per_hour, started_at, price_jpy, period_s,"
                    " granularity_s, minimum_s, daily_cap_jpy, monthly_cap_jpy, tax, user_name, project)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (cluster, node, provider, size, str(price_jpy_per_hour), _iso(), str(t.price_jpy), t.period_s,
                     t.granularity_s, t.minimum_s, _text(t.daily_cap_jpy), _text(t.monthly_cap_jpy), tax, who.user,
                     who.project),
                )

    def ledger_stop(self, cluster: str, node: str, at: datetime | None = None) -> None:
        """The node stops being billed now (or at `at`, a moment past: a host that released itself):
        its open row closed, and summed into its cluster's closed total (ledger_closed) in the same
        transaction: the one place a row is closed."""
        t = _iso(at) if at is not None else _iso()
        with self._tx() as db:
            ids = [r["id"] for r in db.execute(
                "SELECT id FROM ledger WHERE cluster=? AND node=? AND stopped_at IS NULL", (cluster, node))]
            if not ids:
                return
            db.execute("UPDATE ledger SET stopped_at=? WHERE cluster=? AND node=? AND stopped_at IS NULL", (t, cluster, node))
            for i in ids:
                r = db.execute("SELECT * FROM ledger WHERE id=?", (i,)).fetchone()
                seconds, yen = _ledger_row(r, parse_time(t) or now())
                _add_closed(db, cluster, 1, seconds, yen)

    def ledger_add(self, cluster: str, node: str, provider: str, size: str, price_jpy_per_hour: Decimal, terms: Terms,
                   tax: str, started_at: datetime, stopped_at: datetime) -> None:
        """One use that has ended, billed by `terms` from `started_at` to `stopped_at` (a Slurm
        array task as the cluster timed it); once per (cluster, node): a second call adds nothing."""
        t = terms
        with self._tx() as db:
            if db.execute("SELECT 1 FROM ledger WHERE cluster=? AND node=?", (cluster, node)).fetchone():
                return
            who = _payer(db, cluster, node)
            db.execute(
                "INSERT INTO ledger (cluster, node, provider, size, price_jpy_per_hour, started_at, stopped_at, price_jpy,"
                " period_s, granularity_s, minimum_s, daily_cap_jpy, monthly_cap_jpy, tax, user_name, project)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (cluster, node, provider, size, str(price_jpy_per_hour), _iso(started_at), _iso(stopped_at),
                 str(t.price_jpy), t.period_s, t.granularity_s, t.minimum_s, _text(t.daily_cap_jpy),
                 _text(t.monthly_cap_jpy), tax, who.user, who.project),
            )

    def ledger_seconds_and_yen(self, cluster: str, at: datetime | None = None) -> tuple[int, Decimal]:
        """Machine-seconds so far and what they are billed in yen (billing.charge by each row's
        terms), up to `at`."""
        return self.ledger_totals(at, cluster).get(cluster, (0, Decimal(0)))

    def ledger_totals(self, at: datetime | None = None, cluster: str | None = None) -> dict[str, tuple[int, Decimal]]:
        """ledger_seconds_and_yen for every cluster (or one): the closed rows' totals as summed
        when they closed (ledger_closed), the open rows priced up to `at`. Where the closed rows
        are not those summed (a database from before ledger_closed, or rows a older gpuplan
        closed), the sums are made again first, once."""
        at = at or now()
        self._sum_closed_rows()
        args: tuple = ()
        # The open rows alike (same cluster, start and terms: a cluster's machines started together)
        # come as one group and its count: each priced once (issue 47).
        grouped = (f"SELECT cluster, started_at, {', '.join(_TERMS_COLUMNS)}, COUNT(*) AS n FROM ledger"
                   " WHERE {} stopped_at IS NULL GROUP BY cluster, started_at, " + ", ".join(_TERMS_COLUMNS))
        if cluster is None:
            closed = self._query("SELECT * FROM ledger_closed")
            sql = grouped.format("")
        else:
            closed = self._query("SELECT * FROM ledger_closed WHERE cluster=?", (cluster,))
            sql, args = grouped.format("cluster=? AND"), (cluster,)
        out: dict[str, tuple[int, Decimal]] = {r["cluster"]: (r["seconds"], Decimal(r["yen"])) for r in closed}
        terms: dict[tuple, Terms] = {}  # the open rows of 1,000 clusters share a few terms
        priced: dict[tuple[tuple, str], tuple[int, Decimal]] = {}  # (terms, started_at) -> seconds, yen
        for r in self._query(sql, args):
            key = tuple(r[k] for k in _TERMS_COLUMNS)
            one = priced.get((key, r["started_at"]))
            if one is None:
                t = terms.get(key)
                if t is None:
                    t = terms[key] = _terms(r)
                s = max(0, int((at - datetime.fromisoformat(r["started_at"])).total_seconds()))
                one = priced[(key, r["started_at"])] = (s, billing.charge(s, t))
            seconds, total = out.get(r["cluster"], (0, Decimal(0)))
            for _ in range(r["n"]):  # added row by row, as before: Decimal's rounding in the same steps
                total += one[1]
            out[r["cluster"]] = (seconds + one[0] * r["n"], total)
        return out

    def _sum_closed_rows(self) -> None:
        """ledger_closed made again from the closed rows where their count is not the one summed."""
        have = self._query("SELECT (SELECT COUNT(*) FROM ledger WHERE stopped_at IS NOT NULL) AS n,"
                           " (SELECT COALESCE(SUM(rows), 0) FROM ledger_closed) AS summed")[0]
        if have["n"] == have["summed"]:
            return
        with self._tx() as db:
            totals: dict[str, tuple[int, int, Decimal]] = {}
            for r in db.execute("SELECT * FROM ledger WHERE stopped_at IS NOT NULL"):
                seconds, yen = _ledger_row(r, now())
                n, s0, y0 = totals.get(r["cluster"], (0, 0, Decimal(0)))
                totals[r["cluster"]] = (n + 1, s0 + seconds, y0 + yen)
            db.execute("DELETE FROM ledger_closed")
            db.executemany("INSERT INTO ledger_closed (cluster, rows, seconds, yen) VALUES (?,?,?,?)",
                           [(c, n, sec, str(yen)) for c, (n, sec, yen) in totals.items()])

    def ledger_rows(self) -> list[dict]:
        """Every ledger row (one machine held from started_at to stopped_at, or still held),
        oldest first: cluster, node, provider, size, price_jpy_per_hour (Decimal), started_at,
        stopped_at (None while held), terms (the billing Terms the row was started with), tax (whether
        its price includes consumption tax as the provider bills it; "unknown" on rows older than that)."""
        return [_ledger_dict(r) for r in self._query("SELECT * FROM ledger ORDER BY started_at, id")]
    def ledger_terms(self, cluster: str) -> Terms | None:
        """The billing terms of the cluster's latest ledger row (None where it has none)."""
        rows = self._query("SELECT * FROM ledger WHERE cluster=? ORDER BY id DESC LIMIT 1", (cluster,))
        return _terms(rows[0]) if rows else None

    # --- measured setup times and job runs ----------------------------------------------

    def record_setup_time(self, provider: str, size: str, playbook: str, seconds: int, cluster: str | None = None) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO setup_times (provider, size, playbook, seconds, cluster, measured_at) VALUES (?,?,?,?,?,?)",
                (provider, size, playbook, int(seconds), cluster, _iso()),
            )

    def setup_time(self, provider: str, size: str, playbook: str | None = None) -> tuple[int, datetime] | None:
        """The latest measured setup seconds for provider/size (and playbook list, if given)."""
        sql = "SELECT seconds, measured_at FROM setup_times WHERE provider=? AND size=?"
        args: tuple = (provider, size)
        if playbook is not None:
            sql += " AND playbook=?"
            args += (playbook,)
        else:  # the run engine's install is a step of its own, counted apart (planning.model)
            sql += " AND playbook != 'ray'"
        rows = self._query(sql + " ORDER BY measured_at DESC, rowid DESC LIMIT 1", args)
        return (rows[0]["seconds"], parse_time(rows[0]["measured_at"])) if rows else None

    def record_run(
        self, cluster: str, job: str, node: str, slot: str, status: str, attempts: int, seconds: float,
        log_path: str | None, started_at: datetime,
    ) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO runs (cluster, job, node, slot, status, attempts, seconds, log_path, started_at)"
                " VALUES (?,?,?,?,?,?,?,?,?)",
                (cluster, job, node, slot, status, attempts, seconds, log_path, _iso(started_at)),
            )

    def record_calibration(self, workload: str, provider: str, size: str, jobs: int, predicted_s: float,
                           measured_s: float, cluster: str, *, batch: str = "", clock: str = "", command: str = "",
                           gpu: str = "") -> None:
        """A batch taken as its workload's speed on `size`: the plan's and the batch's mean time per
        item (`clock`: the backend's billed task time or each item's run time on its host)."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO calibrations (workload, provider, size, jobs, predicted_s, measured_s, cluster, measured_at,"
                " batch, clock, command, gpu) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (workload, provider, size, jobs, predicted_s, measured_s, cluster, _iso(), batch or None, clock or None,
                 command or None, gpu or None),
            )

    def calibrations(self, workload: str | None = None) -> list[dict]:
        """The latest calibration of `workload` (None: of every workload) per provider and size,
        newest first; each with its `id` (`gpuplan profiles rm`)."""
        where, args = ("WHERE workload=?", (workload,)) if workload is not None else ("", ())
        rows = self._query(f"SELECT rowid AS id, * FROM calibrations {where} ORDER BY measured_at DESC, rowid DESC", args)
        latest: dict[tuple[str, str, str], dict] = {}
        for r in rows:
            latest.setdefault((r["workload"], r["provider"], r["size"]), {**dict(r), "measured_at": parse_time(r["measured_at"])})
        return list(latest.values())

    def remove_calibration(self, calibration_id: int) -> int:
        """Remove one calibration (`gpuplan profiles rm`) and the older ones of its workload and
        machine type it hid; returns how many rows went (0: no such calibration)."""
        with self._tx() as db:
            row = db.execute("SELECT workload, provider, size FROM calibrations WHERE rowid=?", (calibration_id,)).fetchone()
            if row is None:
                return 0
            return db.execute("DELETE FROM calibrations WHERE workload=? AND provider=? AND size=?",
                              (row["workload"], row["provider"], row["size"])).rowcount

    def runs(self, cluster: str) -> list[dict]:
        return [dict(r) for r in self._query("SELECT * FROM runs WHERE cluster=? ORDER BY id", (cluster,))]

    # --- batches run by the engine ----------------------------------------------------------

    def add_job(self, job: str, cluster: str, command: list[str], options: dict, items: Sequence[tuple[int, str]],
                nodes: int, resumes: str | None = None, backend: str | None = None) -> None:
        """A submitted batch and its items, `items` in run order as (index in the items file, item);
        `backend` the run backend it goes through (run/backends.py)."""
        with self._tx() as db:
            _insert_job(db, job, cluster, command, options, items, nodes, resumes, backend)

    def add_numbered_job(self, cluster: str, command: list[str], options: dict, items: Sequence[tuple[int, str]],
                         nodes: int, resumes: str | None = None, backend: str | None = None) -> str:
        """add_job under the next free id CLUSTER-N, the number taken and the row written in one
        transaction: two batches sent at once (two terminals, a probe's DOK offers side by side)
        never take the same id."""
        with self._tx() as db:
            rows = db.execute("SELECT id FROM jobs WHERE cluster=?", (cluster,)).fetchall()
            numbers = [int(r["id"].rsplit("-", 1)[1]) for r in rows if r["id"].rsplit("-", 1)[-1].isdigit()]
            job = f"{cluster}-{max(numbers, default=0) + 1}"
            _insert_job(db, job, cluster, command, options, items, nodes, resumes, backend)
        return job

    def next_job_number(self, cluster: str) -> int:
        rows = self._query("SELECT id FROM jobs WHERE cluster=?", (cluster,))
        numbers = [int(r["id"].rsplit("-", 1)[1]) for r in rows if r["id"].rsplit("-", 1)[-1].isdigit()]
        return max(numbers, default=0) + 1

    def job(self, job: str) -> JobRow | None:
        rows = self._query("SELECT * FROM jobs WHERE id=?", (job,))
        return _job(rows[0]) if rows else None

    def jobs(self, cluster: str) -> list[JobRow]:
        return [_job(r) for r in self._query("SELECT * FROM jobs WHERE cluster=? ORDER BY submitted_at, rowid", (cluster,))]

    def unfinished_jobs(self) -> list[JobRow]:
        """Every cluster's batches not known to be over (submitted or running), in one query:
        `status` of 1,000 clusters must not ask 1,000 times."""
        return [_job(r) for r in self._query("SELECT * FROM jobs WHERE state IN ('submitted', 'running')"
                                             " ORDER BY submitted_at, rowid")]

    def close_job(self, job: str, state: str, at: datetime | None = None) -> None:
        """A job ended without its driver saying so (its cluster torn down, or released at its
        cap): `state` from `at` (default now), its queued and running items cancelled."""
        with self._tx() as db:
            db.execute("UPDATE jobs SET state=?, ended_at=COALESCE(ended_at, ?) WHERE id=?", (state, _iso(at), job))
            db.execute("UPDATE job_items SET status='cancelled', ended_at=COALESCE(ended_at, ?)"
                       " WHERE job=? AND status IN ('queued', 'running')", (_iso(at), job))

    def set_job_state(self, job: str, state: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE jobs SET state=?, ended_at=COALESCE(ended_at, ?) WHERE id=?", (state, _iso(), job))

    def record_job_events(self, job: str, events: Sequence[dict], events_read: int) -> None:
        """What the job's driver reported (ray_driver.py's events), applied in one transaction."""
        with self._tx() as db:
            for e in events:
                kind = e.get("t")
                if kind == "begin":
                    db.execute("UPDATE jobs SET state='running', started_at=? WHERE id=? AND state='submitted'",
                               (e["at"], job))
                elif kind == "start":
                    db.execute("UPDATE job_items SET status='running', attempts=?, node=?, slot=COALESCE(?, slot),"
                               " started_at=?, ended_at=NULL, exit_code=NULL, timed_out=0 WHERE job=? AND idx=?",
                               (e["attempt"], e["node"], e.get("slot"), e["at"], job, e["i"]))
                elif kind == "end":
                    db.execute("UPDATE job_items SET status=?, attempts=CASE WHEN attempts > ? THEN attempts ELSE ? END,"
                               " node=?, slot=?, started_at=?, ended_at=?, exit_code=?, timed_out=?, log_path=?"
                               " WHERE job=? AND idx=?",
                               (e["status"], e["attempt"], e["attempt"], e["node"], e["slot"], e["start"], e["end"],
                                e["exit"], int(bool(e["timed_out"])), e["log"], job, e["i"]))
                    if e["status"] == INTERRUPTED:
                        gpus = db.execute("SELECT n.gpus FROM nodes n JOIN jobs j ON n.cluster=j.cluster"
                                          " WHERE j.id=? AND n.name=?", (job, e["node"])).fetchone()
                        db.execute("INSERT INTO job_interruptions (job, idx, attempt, node, node_gpus,"
                                   " started_at, ended_at, saved_at) VALUES (?,?,?,?,?,?,?,?) ON CONFLICT (job, idx,"
                                   " attempt) DO UPDATE SET node=excluded.node, node_gpus=excluded.node_gpus,"
                                   " started_at=excluded.started_at, ended_at=excluded.ended_at,"
                                   " saved_at=excluded.saved_at",
                                   (job, e["i"], e["attempt"], e["node"], gpus["gpus"] if gpus else 0, e["start"],
                                    e["end"], e.get("saved")))
                elif kind in ("lost", "requeue"):
                    db.execute("UPDATE job_items SET status='queued' WHERE job=? AND idx=?", (job, e["i"]))
                elif kind == "quarantine":  # one row a node: a later event says why anew (failures -> lost)
                    db.execute("DELETE FROM job_quarantines WHERE job=? AND node=?", (job, e["node"]))
                    db.execute("INSERT INTO job_quarantines (job, node, reason, code) VALUES (?,?,?,?)",
                               (job, e["node"], e["reason"], e.get("code")))
                elif kind == "done":
                    db.execute("UPDATE jobs SET state=?, ended_at=?, started_at=COALESCE(?, started_at) WHERE id=?",
                               (e["state"], e["at"], e.get("started"), job))
            db.execute("UPDATE jobs SET events_read=? WHERE id=?", (events_read, job))

    def job_counts(self, job: str) -> dict[str, int]:
        """Items per status; a failed item whose latest attempt timed out counts as "timed out"."""
        rows = self._query("SELECT CASE WHEN status IN ('failed', 'bad input') AND timed_out<>0 THEN 'timed out'"
                           " ELSE status END AS s, COUNT(*) AS n FROM job_items WHERE job=? GROUP BY s", (job,))
        return {r["s"]: r["n"] for r in rows}

    def job_items(self, job: str, statuses: Sequence[str] | None = None, limit: int | None = None) -> list[ItemRow]:
        sql, args = "SELECT * FROM job_items WHERE job=?", (job,)
        if statuses:
            sql += f" AND status IN ({','.join('?' * len(statuses))})"
            args += tuple(statuses)
        sql += " ORDER BY position"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [_item(r) for r in self._query(sql, args)]

    def job_item(self, job: str, item: str) -> ItemRow | None:
        """An item by its text or its index in the items file."""
        rows = self._query("SELECT * FROM job_items WHERE job=? AND item=? ORDER BY idx LIMIT 1", (job, item))
        if not rows and item.isdigit():
            rows = self._query("SELECT * FROM job_items WHERE job=? AND idx=?", (job, int(item)))
        return _item(rows[0]) if rows else None

    def job_quarantines(self, job: str) -> list[QuarantineRow]:
        """The nodes the job set aside, in order; a row older than the code column has code "unknown"."""
        rows = self._query("SELECT node, code, reason FROM job_quarantines WHERE job=? ORDER BY rowid", (job,))
        return [QuarantineRow(r["node"], r["code"] or UNKNOWN, r["reason"]) for r in rows]

    def job_interruptions(self, job: str) -> list[InterruptionRow]:
        """The job's attempts stopped because the cloud took their node back, in the order they ended."""
        rows = self._query("SELECT * FROM job_interruptions WHERE job=? ORDER BY ended_at, idx, attempt", (job,))
        return [InterruptionRow(r["job"], r["idx"], r["attempt"], r["node"], r["node_gpus"], parse_time(r["started_at"]),
                                parse_time(r["ended_at"]), parse_time(r["saved_at"])) for r in rows]

    def interrupted_jobs(self) -> list[JobRow]:
        """Every batch that had an attempt interrupted or a node taken back by the cloud, oldest first."""
        return [_job(r) for r in self._query(
            "SELECT * FROM jobs WHERE id IN (SELECT job FROM job_interruptions) OR id IN"
            " (SELECT job FROM job_quarantines WHERE code=?) ORDER BY submitted_at, rowid", (INTERRUPTED,))]

    def job_wall_seconds(self, job: str) -> float | None:
        """From the first item's start to the last item's end."""
        r = self._query("SELECT MIN(started_at) AS a, MAX(ended_at) AS b FROM job_items WHERE job=? AND ended_at IS NOT NULL",
                        (job,))
        if not r or r[0]["a"] is None:
            return None
        return (parse_time(r[0]["b"]) - parse_time(r[0]["a"])).total_seconds()

    def record_speed_point(self, workload: str, provider: str, size: str, gpus: int, jobs: int, measured_s: float,
                           why: str, cluster: str) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO speed_points (workload, provider, size, gpus, jobs, measured_s, seconds_per_job_per_gpu, why,"
                " cluster, measured_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (workload, provider, size, gpus, jobs, measured_s, measured_s * gpus / max(1, jobs), why, cluster, _iso()))

    def speed_points(self, workload: str) -> list[dict]:
        return [dict(r) for r in self._query("SELECT * FROM speed_points WHERE workload=? ORDER BY rowid", (workload,))]

    # --- teams: monthly budgets and the spend reserved against them (issue 45) -----------------

    def set_budget(self, project: str, month: str, yen: Decimal, user: str) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO budgets (project, month, yen, set_by, set_at) VALUES (?,?,?,?,?)"
                       " ON CONFLICT (project, month) DO UPDATE SET yen=excluded.yen, set_by=excluded.set_by,"
                       " set_at=excluded.set_at", (project, month, str(yen), user, _iso()))

    def budget_projects(self, month: str) -> list[str]:
        """Every project with a budget in `month`, a ledger row or a reservation: what `gpuplan budget` lists."""
        start, end = team.month_bounds(month)
        rows = self._query("SELECT project AS p FROM budgets WHERE month=? UNION SELECT COALESCE(project, 'default') AS p"
                           " FROM ledger WHERE started_at < ? AND (stopped_at IS NULL OR stopped_at > ?) UNION SELECT"
                           " project AS p FROM commitments WHERE month=?", (month, _iso(end), _iso(start), month))
        return sorted({r["p"] for r in rows})

    def budget_figures(self, project: str, month: str, pricing: Pricing, at: datetime | None = None) -> BudgetFigures:
        """`project`'s month: its budget, the ledger's yen in it (`pricing`: gpuplan/budget.py) and what
        live reservations hold."""
        with self._tx() as db:  # one snapshot of the budget, the ledger and the reservations
            return _figures(db, project, month, pricing, at or now())

    def reserve(self, project: str, month: str, yen: Decimal, what: str, user: str, pricing: Pricing,
                cluster: str | None = None, job: str | None = None, at: datetime | None = None) -> Reservation:
        """Reserve `yen` ("included" basis) of `project`'s budget for `month`, or refuse it: the
        figures read and the reservation written in one transaction, so two commands at once never
        both take the same yen left. No budget for the month: always reserved (no limit)."""
        import secrets

        with self._tx() as db:
            figures = _figures(db, project, month, pricing, at or now())
            if figures.left is not None and yen > figures.left:
                return Reservation(None, figures, yen)
            rid = secrets.token_hex(8)
            db.execute("INSERT INTO commitments (id, project, month, user_name, yen, what, cluster, job, created_at)"
                       " VALUES (?,?,?,?,?,?,?,?,?)", (rid, project, month, user, str(yen), what, cluster, job,
                                                      _iso(at)))
            return Reservation(rid, figures, yen)

    def re_reserve(self, rid: str, project: str, month: str, yen: Decimal, what: str, user: str, pricing: Pricing,
                   cluster: str | None = None, at: datetime | None = None) -> Reservation:
        """Reservation `rid` to hold `yen` ("included" basis) from now on instead of what it held (a
        launch's or provision's next plan after its pick was refused: issue 44), or refused where
        `yen` passes what is left with its old figure given back; read and written in one
        transaction. Where the refused attempt's teardown dropped it, it is made again under the
        same id (for `cluster`). What its cluster has spent so far (a refused attempt's seconds)
        stays counted beside it. The figures returned are the project's without this reservation."""
        with self._tx() as db:
            at = at or now()
            row = db.execute("SELECT * FROM commitments WHERE id=?", (rid,)).fetchone()
            figures = _figures(db, project, month, pricing, at)
            cluster = row["cluster"] if row is not None else cluster
            holds = row is not None and _holds(db, row, at)
            used = pricing(_month_ledger(db, project, month), month, at)[1].get(cluster, Decimal(0)) \
                if cluster else Decimal(0)
            held = max(Decimal(0), Decimal(row["yen"]) - used) if holds else Decimal(0)  # in `committed` now
            without = BudgetFigures(project, month, figures.budget, figures.spent, figures.committed - held,
                                    figures.live - int(holds))
            if without.left is not None and yen > without.left:
                return Reservation(None, without, yen)
            if row is not None:
                db.execute("UPDATE commitments SET yen=? WHERE id=?", (str(yen + used), rid))
            else:
                db.execute("INSERT INTO commitments (id, project, month, user_name, yen, what, cluster, job, created_at)"
                           " VALUES (?,?,?,?,?,?,?,?,?)", (rid, project, month, user, str(yen + used), what, cluster,
                                                          None, _iso(at)))
            return Reservation(rid, without, yen)

    def attach_commitment(self, rid: str, *, cluster: str | None = None, job: str | None = None) -> None:
        """A reservation made before its row existed now belongs to that cluster or batch (held while it lives)."""
        with self._tx() as db:
            db.execute("UPDATE commitments SET cluster=COALESCE(?, cluster), job=COALESCE(?, job) WHERE id=?",
                       (cluster, job, rid))

    def release_commitments(self, *, rid: str | None = None, cluster: str | None = None) -> None:
        """Drop a reservation (a launch refused after it), or every one of a torn-down cluster."""
        with self._tx() as db:
            if rid is not None:
                db.execute("DELETE FROM commitments WHERE id=?", (rid,))
            if cluster is not None:
                db.execute("DELETE FROM commitments WHERE cluster=?", (cluster,))


COMMITMENT_GRACE_S = 900  # a reservation not yet tied to a cluster or batch row holds this long (a client killed before)


@dataclass(frozen=True)
class BudgetFigures:
    """A project's month (JST), yen on the "included" basis: budget None = no limit."""

    project: str
    month: str
    budget: Decimal | None
    spent: Decimal  # the ledger's yen in the month
    committed: Decimal  # live reservations not yet spent
    live: int  # how many reservations hold

    @property
    def left(self) -> Decimal | None:
        return None if self.budget is None else self.budget - self.spent - self.committed


@dataclass(frozen=True)
class Reservation:
    id: str | None  # None: refused, it would pass what is left
    figures: BudgetFigures  # as they were before it
    yen: Decimal

    @property
    def refused(self) -> bool:
        return self.id is None


# (a project's ledger rows, the month, now) -> (the month's yen, each cluster's yen in it), both on
# the "included" basis: gpuplan/budget.py's `priced` (the store does not bill)
Pricing = Callable[[list[dict], str, datetime], tuple[Decimal, dict[str, Decimal]]]


def _figures(db: Db, project: str, month: str, pricing: Pricing, at: datetime) -> BudgetFigures:
    row = db.execute("SELECT yen FROM budgets WHERE project=? AND month=?", (project, month)).fetchone()
    spent, per_cluster = pricing(_month_ledger(db, project, month), month, at)
    committed, live = Decimal(0), 0
    for c in db.execute("SELECT * FROM commitments WHERE project=? AND month=?", (project, month)).fetchall():
        if not _holds(db, c, at):
            continue
        live += 1
        used = per_cluster.get(c["cluster"], Decimal(0)) if c["cluster"] else Decimal(0)
        committed += max(Decimal(0), Decimal(c["yen"]) - used)
    return BudgetFigures(project, month, Decimal(row["yen"]) if row else None, spent, committed, live)


def _month_ledger(db: Db, project: str, month: str) -> list[dict]:
    """`project`'s ledger rows that bill within `month`."""
    start, end = team.month_bounds(month)
    return [_ledger_dict(r) for r in db.execute(
        "SELECT * FROM ledger WHERE COALESCE(project, 'default')=? AND started_at < ? AND (stopped_at IS NULL OR"
        " stopped_at > ?) ORDER BY started_at, id", (project, _iso(end), _iso(start)))]


def _holds(db: Db, c, at: datetime) -> bool:
    """Whether a reservation still holds: its batch unfinished, else its cluster not gone; one tied
    to no row yet for COMMITMENT_GRACE_S after it was made (a client killed before it made one)."""
    young = (at - datetime.fromisoformat(c["created_at"])).total_seconds() < COMMITMENT_GRACE_S
    if c["job"]:
        job = db.execute("SELECT state FROM jobs WHERE id=?", (c["job"],)).fetchone()
        return job["state"] in ("submitted", "running") if job else young
    if c["cluster"]:
        cluster = db.execute("SELECT status, updated_at FROM clusters WHERE name=?", (c["cluster"],)).fetchone()
        # Not made yet: no row, or the row of the name's last use, gone before this reservation was
        # made (a launch reserves before it makes its row). A row gone at or after it is its own
        # cluster's, torn down. (This compared the row's created_at, so a reservation made in a later
        # second than its live cluster's row held on after that cluster was gone: a test's race.)
        if cluster is None or (cluster["status"] == "gone" and cluster["updated_at"] < c["created_at"]):
            return young
        return cluster["status"] != "gone"
    return young


def _insert_job(db: Db, job: str, cluster: str, command: list[str], options: dict,
                items: Sequence[tuple[int, str]], nodes: int, resumes: str | None, backend: str | None) -> None:
    who = team.current()
    if team.chosen() is None:  # a batch on a cluster counts to the cluster's project unless it names one
        row = db.execute("SELECT project FROM clusters WHERE name=?", (cluster,)).fetchone()
        if row is not None and row["project"]:
            who = Who(who.user, row["project"])
    db.execute("INSERT INTO jobs (id, cluster, state, command, options, total, nodes, resumes, submitted_at, backend,"
               " user_name, project) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
               (job, cluster, "submitted", json.dumps(command), json.dumps(options), len(items), nodes, resumes, _iso(),
                backend, who.user, who.project))
    db.executemany("INSERT INTO job_items (job, idx, item, position, status) VALUES (?,?,?,?,?)",
                   ((job, idx, item, pos, "queued") for pos, (idx, item) in enumerate(items)))


def _job(r) -> JobRow:
    return JobRow(
        r["id"], r["cluster"], r["state"], tuple(json.loads(r["command"])), json.loads(r["options"]) or {}, r["total"],
        r["nodes"], r["resumes"], r["events_read"], datetime.fromisoformat(r["submitted_at"]), parse_time(r["started_at"]),
        parse_time(r["ended_at"]), r["backend"], r["user_name"] or "unknown", r["project"] or "default",
    )


def _item(r) -> ItemRow:
    return ItemRow(
        r["job"], r["idx"], r["item"], r["position"], r["status"], bool(r["timed_out"]), r["attempts"], r["node"],
        r["slot"], parse_time(r["started_at"]), parse_time(r["ended_at"]), r["exit_code"], r["log_path"],
    )


def _cluster(r) -> ClusterRow:
    return ClusterRow(
        r["name"], r["provider"], r["region"], r["size"], r["count"], r["status"], r["image"], r["ssh_user"],
        parse_time(r["ttl_expires_at"]),
        Decimal(r["price_jpy_per_hour"]) if r["price_jpy_per_hour"] is not None else None,
        json.loads(r["spec"]), parse_time(r["created_at"]), r["user_name"] or "unknown", r["project"] or "default",
    )


def _image(r) -> ImageRow:
    return ImageRow(
        r["name"], r["provider"], r["region"], r["size"], r["provider_id"], r["status"], r["playbooks"],
        parse_time(r["created_at"]),
    )
