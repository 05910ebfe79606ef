"""The state store: one SQLite file. The only module that knows SQL.

It is the source of truth for teardown. Every cloud call is journaled twice: an intent row
written (and committed) *before* the call, and its outcome after. A node row exists, with its
deterministic name and tags, before the create call that makes it, so that a crash or a
kill -9 at any point leaves enough for `gpuplan teardown` to find and remove it.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

from gpuplan import faults, paths
from gpuplan.errors import UsageError

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
    stopped_at TEXT
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
-- status reads each cluster's ledger and nodes: without these, 1,000 clusters and 40,000
-- ledger rows took 7 s of table scans (benchmarks/status_bench.py)
CREATE INDEX IF NOT EXISTS ledger_by_cluster ON ledger (cluster);
CREATE INDEX IF NOT EXISTS journal_by_cluster ON journal (cluster);
"""


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


# Columns added after a table was first shipped: (table, column, definition) for ALTER TABLE.
MIGRATIONS = [
    ("host_keys", "origin", "TEXT NOT NULL DEFAULT 'node'"),
    ("host_keys", "pending_key", "TEXT"),
]


def now() -> datetime:
    return datetime.now(timezone.utc)


def _iso(t: datetime | None = None) -> str:
    return (t or now()).isoformat(timespec="seconds")


def parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _node(r) -> NodeRow:
    return NodeRow(r["cluster"], r["name"], r["provider_id"], r["status"], r["public_ip"], r["private_ip"],
                   r["ssh_port"], r["gpus"], parse_time(r["created_at"]))


def _ledger_row(r, at: datetime) -> tuple[int, Decimal]:
    """One ledger row's machine-seconds up to `at` and their yen."""
    stop = parse_time(r["stopped_at"]) or at
    s = max(0, int((stop - parse_time(r["started_at"])).total_seconds()))
    return s, Decimal(r["price_jpy_per_hour"]) * s / 3600


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


class State:
    """A handle on the SQLite file. Safe to share between threads: each method is one
    transaction under one lock; WAL mode lets several processes read while one writes."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        _refuse_unusable(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(self.path.parent, 0o700)
        # The database holds key paths, addresses and pinned keys: 0600 from its first byte.
        # SQLite gives its -wal and -shm files the database file's mode.
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
        os.chmod(self.path, 0o600)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
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
        from gpuplan import paths

        return cls(paths.state_db())

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            else:
                self._db.execute("COMMIT")

    def _query(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # --- this installation ---------------------------------------------------------------

    def installation_id(self) -> str:
        """A random id made the first time it is asked for and kept for good: it tells this
        installation's cloud resources from those of every other one. Kept twice, in the
        database and in the file `installation-id` beside it, so a lost or replaced database
        file does not orphan what this installation made (a sweep finds it by this id)."""
        import secrets

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
                db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('installation_id', ?)", (value,))
            if from_file != value:
                paths.write_owner_only(side, value + "\n")
        return value

    # --- journal -------------------------------------------------------------------------

    def journal_intent(self, op: str, target: str, cluster: str | None = None, detail: str = "") -> int:
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO journal (at, cluster, op, target, phase, detail) VALUES (?,?,?,?,?,?)",
                (_iso(), cluster, op, target, "intent", detail),
            )
            return int(cur.lastrowid)

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
    ) -> None:
        t = _iso()
        with self._tx() as db:
            db.execute(
                "INSERT INTO clusters (name, provider, region, size, count, status, image, ssh_user, ttl_expires_at,"
                " price_jpy_per_hour, spec, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
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
                ),
            )

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
            db.execute("DELETE FROM nodes WHERE cluster=?", (name,))
            db.execute("DELETE FROM clusters WHERE name=?", (name,))

    # --- nodes ---------------------------------------------------------------------------

    def add_node(self, cluster: str, name: str, gpus: int = 0) -> None:
        """Record a node *before* the create call (status 'intent')."""
        t = _iso()
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO nodes (cluster, name, status, gpus, created_at, updated_at) VALUES (?,?,?,?,?,?)",
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
                "INSERT OR REPLACE INTO ssh_keys (cluster, private_key_path, public_key) VALUES (?,?,?)",
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
                "INSERT OR REPLACE INTO host_keys (host, port, key, cluster, node, pinned_at, origin, pending_key)"
                " VALUES (?,?,?,?,?,?,?,NULL)",
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

    # --- cost ledger ---------------------------------------------------------------------

    def ledger_start(self, cluster: str, node: str, provider: str, size: str, price_jpy_per_hour: Decimal) -> None:
        with self._tx() as db:
            open_rows = db.execute(
                "SELECT 1 FROM ledger WHERE cluster=? AND node=? AND stopped_at IS NULL", (cluster, node)
            ).fetchall()
            if not open_rows:
                db.execute(
                    "INSERT INTO ledger (cluster, node, provider, size, price_jpy_per_hour, started_at) VALUES (?,?,?,?,?,?)",
                    (cluster, node, provider, size, str(price_jpy_per_hour), _iso()),
                )

    def ledger_stop(self, cluster: str, node: str) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE ledger SET stopped_at=? WHERE cluster=? AND node=? AND stopped_at IS NULL", (_iso(), cluster, node)
            )

    def ledger_seconds_and_yen(self, cluster: str, at: datetime | None = None) -> tuple[int, Decimal]:
        """Machine-seconds so far and their cost in yen (unrounded Decimal), up to `at`."""
        return self.ledger_totals(at, cluster).get(cluster, (0, Decimal(0)))

    def ledger_totals(self, at: datetime | None = None, cluster: str | None = None) -> dict[str, tuple[int, Decimal]]:
        """ledger_seconds_and_yen for every cluster (or one) in one query: `status` of 1,000
        clusters asked 1,000 times."""
        at = at or now()
        sql, args = ("SELECT * FROM ledger", ()) if cluster is None else ("SELECT * FROM ledger WHERE cluster=?", (cluster,))
        out: dict[str, tuple[int, Decimal]] = {}
        for r in self._query(sql, args):
            s, yen = _ledger_row(r, at)
            seconds, total = out.get(r["cluster"], (0, Decimal(0)))
            out[r["cluster"]] = (seconds + s, total + yen)
        return out

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
                           measured_s: float, cluster: str) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO calibrations (workload, provider, size, jobs, predicted_s, measured_s, cluster, measured_at)"
                " VALUES (?,?,?,?,?,?,?,?)",
                (workload, provider, size, jobs, predicted_s, measured_s, cluster, _iso()),
            )

    def calibrations(self, workload: str) -> list[dict]:
        """The latest calibration of `workload` per provider and size, newest first."""
        rows = self._query("SELECT * FROM calibrations WHERE workload=? ORDER BY measured_at DESC, rowid DESC", (workload,))
        latest: dict[tuple[str, str], dict] = {}
        for r in rows:
            latest.setdefault((r["provider"], r["size"]), {**dict(r), "measured_at": parse_time(r["measured_at"])})
        return list(latest.values())

    def runs(self, cluster: str) -> list[dict]:
        return [dict(r) for r in self._query("SELECT * FROM runs WHERE cluster=? ORDER BY id", (cluster,))]


def _cluster(r: sqlite3.Row) -> ClusterRow:
    return ClusterRow(
        r["name"], r["provider"], r["region"], r["size"], r["count"], r["status"], r["image"], r["ssh_user"],
        parse_time(r["ttl_expires_at"]),
        Decimal(r["price_jpy_per_hour"]) if r["price_jpy_per_hour"] is not None else None,
        json.loads(r["spec"]), parse_time(r["created_at"]),
    )


def _image(r: sqlite3.Row) -> ImageRow:
    return ImageRow(
        r["name"], r["provider"], r["region"], r["size"], r["provider_id"], r["status"], r["playbooks"],
        parse_time(r["created_at"]),
    )
