"""A real PostgreSQL server for the state tests (the Debian packages' binaries; scripts/test.sh
installs them): one per test session and pytest-xdist worker, in a scratch folder under /tmp, on
a free loopback port, stopped by its data folder when the session ends (also when it fails; an
atexit hook covers an interrupted run). Every test that asks gets a fresh empty database.

    def test_x(store):          # run twice: store is None (SQLite) or a fresh database's URL
        state = State(tmp_path / "state.db", url=store)

`store` also sets GPUPLAN_STATE_URL, so the CLI and State.open_default() use the same store.
Skipped, with the reason, where the binaries are missing.
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

USER = "gpuplan"


def _bin() -> Path | None:
    given = os.environ.get("GPUPLAN_TEST_PG_BIN")
    if given:
        return Path(given)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    folder: Path
    port: int
    bin: Path
    started_s: float = 0.0  # how long initdb and the start took

    def url(self, db: str = "postgres") -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{db}"

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [str(self.bin / argv[0]), *argv[1:]]
        if os.geteuid() == 0:  # initdb and postgres refuse root: run them as the postgres user
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=check)

    def start(self) -> None:
        options = (f"-k {self.folder} -p {self.port} -c listen_addresses=127.0.0.1 -c fsync=off"
                   " -c full_page_writes=off -c max_connections=300"
                   " -c shared_buffers=32MB")
        self._run("pg_ctl", "-D", str(self.folder / "data"), "-o", options, "-l", str(self.folder / "log"),
                  "-w", "-t", "60", "start")

    def stop(self) -> None:
        if (self.folder / "data" / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.folder / "data"), "-m", "immediate", "-w", "stop", check=False)

    def psql(self, sql: str, db: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user=USER, dbname=db, autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]


def start_server() -> Server:
    """A new server in a scratch folder (its owner the postgres user when run as root)."""
    binaries = _bin()
    if binaries is None or not (binaries / "initdb").exists():
        pytest.skip("PostgreSQL's server binaries are not installed (/usr/lib/postgresql/*/bin/initdb): "
                    "scripts/test.sh installs them (apt-get install postgresql)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed: pip install -e '.[postgres]'")
    t0 = time.monotonic()
    folder = Path(tempfile.mkdtemp(prefix=f"gpuplan-pg-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-"))
    os.chmod(folder, 0o755)
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    server = Server(folder, _free_port(), binaries)
    atexit.register(_remove, server)
    server._run("initdb", "-D", str(folder / "data"), "-A", "trust", "-U", USER, "-E", "UTF8", "--no-sync")
    for attempt in range(3):  # another process may take the free port before the server binds it
        try:
            server.start()
            break
        except subprocess.CalledProcessError:
            if attempt == 2:
                raise
            server.port = _free_port()
    server.started_s = time.monotonic() - t0
    return server


def _remove(server: Server) -> None:
    server.stop()
    shutil.rmtree(server.folder, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server():
    server = start_server()
    try:
        yield server
    finally:
        _remove(server)


@pytest.fixture
def postgres_url(postgres_server):
    """A fresh, empty database on the session's server, dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    postgres_server.psql(f"CREATE DATABASE {name}")
    yield postgres_server.url(name)
    try:
        postgres_server.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    except Exception:  # a test that stopped the server: the folder goes at the end anyway
        pass


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, monkeypatch):
    """None (the SQLite default) or a fresh PostgreSQL database's URL, also in GPUPLAN_STATE_URL."""
    if request.param == "sqlite":
        monkeypatch.delenv("GPUPLAN_STATE_URL", raising=False)
        return None
    url = request.getfixturevalue("postgres_url")
    monkeypatch.setenv("GPUPLAN_STATE_URL", url)
    return url
