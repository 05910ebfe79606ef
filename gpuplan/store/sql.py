"""The two stores' SQL: what differs between SQLite (the embedded default) and PostgreSQL (a
team's shared state, GPUPLAN_STATE_URL), kept here so that state.py writes one text for both.

state.py writes the portable subset both understand (INSERT ... ON CONFLICT, RETURNING id,
CASE instead of two-argument MAX). What is left differs only in spelling and is translated once
per statement text, for PostgreSQL only:
- `?` placeholders become psycopg's `%s` (and a literal `%` becomes `%%`);
- the schema's types: INTEGER PRIMARY KEY AUTOINCREMENT is an identity column, INTEGER is
  BIGINT (byte counts and seconds outgrow 32 bits), REAL is DOUBLE PRECISION (PostgreSQL's
  REAL is 4 bytes);
- SQLite's implicit `rowid`, which state.py orders a few tables by (the order rows were
  written), is an identity column named rowid on those tables (ROWID_TABLES), hidden from a
  row's keys as SQLite hides its own;
- a row reads by column name and by index on both (sqlite3.Row; Row here).

psycopg is imported only when a PostgresDb is made (`_psycopg`), so `gpuplan --help` and `estimate` on the
SQLite default import none of it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote, urlsplit

from gpuplan.errors import StateUnreachable, UsageError

# Tables state.py orders by SQLite's implicit rowid (the order rows were written); on
# PostgreSQL each gets a real column of that name.
ROWID_TABLES = ("setup_times", "calibrations", "jobs", "job_quarantines", "speed_points")

SCHEMES = ("postgresql", "postgres")


def _key(text: str) -> int:
    """A stable signed 64-bit advisory lock key for `text` (the same on every machine)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)


# Held by every write transaction (pg_advisory_xact_lock): writers take turns as they do under
# SQLite's BEGIN IMMEDIATE, so a read-then-write transaction sees no other write in between.
WRITE_KEY = _key("gpuplan state: writers")
# Held while a process creates or migrates the schema, so two starting together do not race.
SCHEMA_KEY = _key("gpuplan state: schema")


def lock_key(name: str) -> int:
    """The advisory lock key of a gpuplan lock name (fleet/locks.py): one per cluster, image, sweep."""
    return _key(f"gpuplan lock: {name}")


# --- the URL ---------------------------------------------------------------------------------

def is_postgres(url: str) -> bool:
    return url.split(":", 1)[0].lower() in SCHEMES


def redacted(url: str) -> str:
    """The URL as it may be shown: never a password, whatever was given."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(an unreadable URL)"
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}@" if parts.username else ""
    return f"{parts.scheme}://{user}{host}{parts.path}"


def check_url(url: str, where: str) -> str:
    """`url` if it is a PostgreSQL URL gpuplan may use (one UsageError line if not): a password
    in it is refused, since a URL ends up in shell history, argv and config files."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise UsageError(f"{where}: {redacted(url)} is not a PostgreSQL URL; write"
                         " postgresql://USER@HOST:PORT/DATABASE") from None
    if parts.scheme.lower() not in SCHEMES or not parts.hostname or not parts.path.strip("/"):
        raise UsageError(f"{where}: {redacted(url)} is not a PostgreSQL URL; write"
                         " postgresql://USER@HOST:PORT/DATABASE")
    if parts.password is not None:
        raise UsageError(f"{where}: the state URL holds a password ({redacted(url)}); remove it from the URL and"
                         " give it in PGPASSWORD or ~/.pgpass, so that it is in no command line, file or log")
    return url


def _conninfo(url: str, application_name: str = "gpuplan") -> dict[str, Any]:
    parts = urlsplit(url)
    info: dict[str, Any] = {"host": parts.hostname, "dbname": unquote(parts.path.lstrip("/")),
                            "connect_timeout": int(os.environ.get("GPUPLAN_STATE_CONNECT_TIMEOUT") or 10),
                            "application_name": application_name[:63]}
    if parts.port:
        info["port"] = parts.port
    if parts.username:
        info["user"] = unquote(parts.username)
    return info  # the password: libpq reads PGPASSWORD or ~/.pgpass itself


# --- translation -----------------------------------------------------------------------------

_TOKENS = re.compile(r"'(?:[^']|'')*'|\"[^\"]*\"|--[^\n]*|\?|%|[^'\"?%-]+|-")


@functools.lru_cache(maxsize=512)
def postgres_sql(sql: str) -> str:
    """A statement in psycopg's spelling: `?` -> `%s`, `%` -> `%%` (string literals kept whole)."""
    out = []
    for tok in _TOKENS.findall(sql):
        if tok == "?":
            out.append("%s")
        elif tok.startswith("'"):
            out.append(tok.replace("%", "%%"))
        elif tok == "%":
            out.append("%%")
        elif tok.startswith("--"):
            continue
        else:
            out.append(tok)
    return "".join(out)


def _ddl_types(text: str) -> str:
    text = re.sub(r"\bINTEGER PRIMARY KEY AUTOINCREMENT\b", "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", text)
    text = re.sub(r"\bINTEGER\b", "BIGINT", text)
    return re.sub(r"\bREAL\b", "DOUBLE PRECISION", text)


def schema_statements(schema: str) -> list[str]:
    """The schema text as PostgreSQL statements, one by one."""
    text = re.sub(r"--[^\n]*", "", schema)
    out = []
    for stmt in (s.strip() for s in text.split(";")):
        if not stmt:
            continue
        m = re.match(r"CREATE TABLE IF NOT EXISTS (\w+)", stmt)
        if m and m.group(1) in ROWID_TABLES:
            stmt = stmt[: stmt.rindex(")")].rstrip() + ",\n    rowid BIGINT GENERATED ALWAYS AS IDENTITY\n)"
        out.append(_ddl_types(stmt))
    return out


def column_definition(definition: str) -> str:
    """A MIGRATIONS column definition in PostgreSQL's types."""
    return _ddl_types(definition)


# --- rows ------------------------------------------------------------------------------------

class Row(tuple):
    """A PostgreSQL row read as sqlite3.Row reads: by index or by column name; keys() (and so
    dict(row)) without the rowid column SQLite also hides."""

    _names: tuple[str, ...]
    _index: dict[str, int]

    def __getitem__(self, key):
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return [n for n in self._names if n != "rowid"]


def _row_factory(cursor):
    names = tuple(c.name for c in cursor.description or ())
    index: dict[str, int] = {}
    for i, n in enumerate(names):
        index.setdefault(n, i)

    def make(values) -> Row:
        row = Row(values)
        row._names, row._index = names, index
        return row

    return make


# --- the PostgreSQL connection ---------------------------------------------------------------

class PostgresDb:
    """A psycopg connection that takes state.py's SQL (`?` placeholders) and answers as
    sqlite3.Connection does where state.py uses it: execute() returns a cursor (fetchone,
    fetchall, rowcount, iteration); executemany(). Autocommit: transactions are explicit
    (State._tx). Losing the server is one StateUnreachable line, not a traceback.

    A connection lost between transactions (the server restarted while `run` follows a batch
    for hours) is made again once, with `reconnect`, before a statement outside a transaction
    (a read, or a transaction's BEGIN); never inside one, whose writes the server rolled back."""

    def __init__(self, url: str, application_name: str = "gpuplan", reconnect: bool = True) -> None:
        self.url = url
        self.where = redacted(url)
        self._psycopg = _psycopg()
        self._application_name = application_name
        self._reconnect = reconnect
        self._in_tx = False
        try:
            self._conn = self._connect()
        except self._psycopg.Error as exc:
            raise unreachable(self.where, exc) from None

    def _connect(self):
        return self._psycopg.connect(**_conninfo(self.url, self._application_name), autocommit=True,
                                     row_factory=_row_factory)

    def _lost(self) -> bool:
        return bool(self._conn.closed or self._conn.broken)

    def execute(self, sql: str, args: Iterable[Any] = ()):
        text, values = postgres_sql(sql), tuple(args)
        again = self._reconnect and not self._in_tx
        if again and self._lost():
            self._reopen()
            again = False
        try:
            return self._conn.execute(text, values)
        except self._psycopg.OperationalError as exc:
            if not self._lost():
                raise
            if not again:
                raise unreachable(self.where, exc, lost=True) from None
        self._reopen()
        try:
            return self._conn.execute(text, values)
        except self._psycopg.OperationalError as exc:
            if self._lost():
                raise unreachable(self.where, exc, lost=True) from None
            raise

    def _reopen(self) -> None:
        try:
            self._conn = self._connect()
        except self._psycopg.Error as exc:
            raise unreachable(self.where, exc, lost=True) from None

    def executemany(self, sql: str, rows: Iterable[Iterable[Any]]) -> None:
        try:
            with self._conn.cursor() as cur:
                cur.executemany(postgres_sql(sql), [tuple(r) for r in rows])
        except self._psycopg.OperationalError as exc:
            if self._conn.closed or self._conn.broken:
                raise unreachable(self.where, exc, lost=True) from None
            raise

    @contextmanager
    def transaction(self, write: bool = True, key: int = WRITE_KEY) -> Iterator[PostgresDb]:
        """One transaction; a writing one holds the writers' advisory lock (`key`) from its
        start to its end, as SQLite's BEGIN IMMEDIATE holds the file's write lock."""
        self.execute("BEGIN")
        self._in_tx = True
        try:
            if write:
                self.execute("SELECT pg_advisory_xact_lock(?)", (key,))
            yield self
        except BaseException:
            if not self._lost():
                self._conn.execute("ROLLBACK")
            raise
        else:
            self.execute("COMMIT")
        finally:
            self._in_tx = False

    def tables(self) -> dict[str, set[str]]:
        """Every table of the connection's schema and its columns."""
        out: dict[str, set[str]] = {}
        for r in self.execute("SELECT table_name, column_name FROM information_schema.columns"
                              " WHERE table_schema = current_schema()"):
            out.setdefault(r[0], set()).add(r[1])
        return out

    def close(self) -> None:
        self._conn.close()


class AdvisoryLock:
    """A gpuplan lock (fleet/locks.py) held across machines sharing one PostgreSQL state: a
    session advisory lock on a connection of its own, kept for the lock's life. The server
    frees it when that session ends, a killed process's included, so it cannot go stale.
    `who` (pid, host, command) is the connection's application_name: what a refused command
    shows of the holder."""

    def __init__(self, url: str, name: str, who: str) -> None:
        self.key = lock_key(name)
        self.db = PostgresDb(url, application_name=who, reconnect=False)  # a new session would not hold it

    def try_take(self) -> bool:
        """Take the lock if no other session holds it."""
        return bool(self.db.execute("SELECT pg_try_advisory_lock(?)", (self.key,)).fetchone()[0])

    def holder(self) -> str | None:
        """The holder's application_name (None: it cannot be told)."""
        hi, lo = (self.key >> 32) & 0xFFFFFFFF, self.key & 0xFFFFFFFF
        row = self.db.execute("SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                              " WHERE l.locktype = 'advisory' AND l.granted AND l.classid::bigint = ?"
                              " AND l.objid::bigint = ? AND l.objsubid = 1 AND a.pid <> pg_backend_pid()",
                              (hi, lo)).fetchone()
        return str(row[0]) if row and row[0] else None

    def release(self) -> None:
        self.db.close()  # the session's end frees its advisory locks


def _psycopg():
    try:
        import psycopg
    except ImportError:
        raise UsageError("GPUPLAN_STATE_URL names a PostgreSQL state but psycopg is not installed; install it"
                         " with `pip install 'gpuplan[postgres]'`") from None
    return psycopg


def unreachable(where: str, exc: BaseException, lost: bool = False) -> StateUnreachable:
    """One line for a PostgreSQL state gpuplan cannot reach (`lost`: lost mid-command), saying
    what to check."""
    reason = " ".join(str(exc).split()) or type(exc).__name__
    reason = re.sub(r"password=\S+", "password=...", reason).split(". ")[0].rstrip(".")
    if any(w in reason.lower() for w in ("password", "authentication", "role", "permission denied")):
        check = "check the user and the password in PGPASSWORD or ~/.pgpass"
    else:
        check = "check that the server runs and that host, port and database are right"
    if lost:
        return StateUnreachable(f"lost the state database {where} mid-command ({reason[:160]}); {check}, then run"
                                " `gpuplan status` to see where things stand")
    return StateUnreachable(f"cannot reach the state database {where} ({reason[:160]}); {check}, then run this"
                            " again: nothing was changed")
