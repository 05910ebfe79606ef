"""Closed ledger rows summed once and kept (issue 47): `status` prices only the rows still
billing; the closed ones' totals are added up when ledger_stop closes them, and made again
where a database's closed rows are not those summed (an older gpuplan's)."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

from gpuplan.market import billing
from gpuplan.store import state as state_mod
from gpuplan.store.state import State


def _every_row_priced(rows, at: datetime) -> dict[str, tuple[int, Decimal]]:
    """The totals as status made them before: every row priced again."""
    out: dict[str, tuple[int, Decimal]] = {}
    for r in rows:
        s, yen = state_mod._ledger_row(r, at)
        s0, y0 = out.get(r["cluster"], (0, Decimal(0)))
        out[r["cluster"]] = (s0 + s, y0 + yen)
    return out


def _sqlite_rows(db: Path) -> list:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    rows = con.execute("SELECT * FROM ledger ORDER BY id").fetchall()
    con.close()
    return rows


def _closed(db: Path) -> dict[str, tuple[int, int, Decimal]]:
    con = sqlite3.connect(db)
    rows = {c: (n, s, Decimal(y)) for c, n, s, y in con.execute("SELECT cluster, rows, seconds, yen FROM ledger_closed")}
    con.close()
    return rows


def _closed_in(state: State) -> dict[str, tuple[int, int, Decimal]]:
    """ledger_closed as the store holds it, either store."""
    return {r["cluster"]: (r["rows"], r["seconds"], Decimal(r["yen"])) for r in state._query("SELECT * FROM ledger_closed")}


def test_a_row_closed_is_summed_once_and_open_rows_priced_live(tmp_path: Path, monkeypatch, store):
    state = State(tmp_path / "state.db", url=store)
    sakura = billing.Terms(Decimal(990), 3600, 3600, 3600)
    t0 = datetime(2026, 11, 28, 10, 0, tzinfo=timezone.utc)
    monkeypatch.setattr(state_mod, "now", lambda: t0)
    state.ledger_start("c", "c-0", "sakura", "x", Decimal(990), sakura)
    state.ledger_start("c", "c-1", "aws", "g", Decimal("80.5"))
    monkeypatch.setattr(state_mod, "now", lambda: t0 + timedelta(minutes=10))
    state.ledger_stop("c", "c-0")  # 10 minutes of a started hour: ¥990
    assert _closed_in(state) == {"c": (1, 600, Decimal(990))}
    at = t0 + timedelta(hours=2)
    # the open row by the second up to `at`: 7,200 s x ¥80.5/h = ¥161
    assert state.ledger_totals(at) == {"c": (600 + 7200, Decimal(990) + Decimal("161.0"))}
    assert state.ledger_totals(at) == _every_row_priced(state._query("SELECT * FROM ledger ORDER BY id"), at)
    assert state.ledger_seconds_and_yen("c", at) == (7800, Decimal("1151.0"))
    state.ledger_stop("c", "c-0")  # nothing open on it: nothing added twice
    assert _closed_in(state) == {"c": (1, 600, Decimal(990))}


def test_closed_rows_not_summed_are_summed_on_the_next_read(tmp_path: Path):
    db = tmp_path / "state.db"
    State(db).close()
    con = sqlite3.connect(db)  # rows closed by an older gpuplan, which kept no closed totals
    for i, (start, stop) in enumerate([("00:00", "00:10"), ("01:00", "03:30"), ("02:00", None)]):
        con.execute("INSERT INTO ledger (cluster, node, provider, size, price_jpy_per_hour, started_at, stopped_at)"
                    " VALUES (?,?,?,?,?,?,?)", ("old", f"old-{i}", "aws", "g", "990", f"2026-01-01T{start}:00+00:00",
                                                  f"2026-01-01T{stop}:00+00:00" if stop else None))
    con.commit()
    con.close()
    state = State(db)
    at = datetime(2026, 1, 1, 4, 0, tzinfo=timezone.utc)
    assert state.ledger_totals(at) == _every_row_priced(_sqlite_rows(db), at)
    # by the second: 600 s + 9,000 s closed = ¥2,640; the open row 7,200 s = ¥1,980
    assert _closed(db) == {"old": (2, 9600, Decimal(2640))}
    assert state.ledger_totals(at) == {"old": (16800, Decimal(4620))}
