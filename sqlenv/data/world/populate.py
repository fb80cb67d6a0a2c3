"""Fill one database's tables with values and write it to SQLite, byte-reproducibly.

`fill` draws row counts and values table by table in catalogue order (parents first, so
every foreign key points at an existing row); `write_sqlite` creates the file. The same
seed gives the same bytes: one connection, explicit page size and rollback journal
(no WAL side files), tables created and rows inserted in a fixed order in one
transaction, no VACUUM and nothing time-dependent. SQLite's file header holds only a
change counter and the library version, both equal for equal operation sequences on the
same SQLite build; the tests compare two builds byte for byte to keep it that way.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlenv.data.world.naming import Naming
from sqlenv.data.world.schema import ColumnView, DbView, TableView
from sqlenv.data.world.spec import Column, Domain, Table
from sqlenv.data.world.values import ValueSource

_SQL_TYPES = {"label": "TEXT", "cat": "TEXT", "date": "TEXT", "text": "TEXT", "fk": "INTEGER"}
_PAGE_SIZE = 4096


def _label_values(col: Column, n: int, src: ValueSource) -> list[str]:
    """n distinct labels: retry a few draws, then disambiguate with a numeral."""
    out: list[str] = []
    seen: set[str] = set()
    for _ in range(n):
        value = src.label(col)
        for _attempt in range(30):
            if value.lower() not in seen:
                break
            value = src.label(col)
        k = 2
        base = value
        while value.lower() in seen:
            value, k = f"{base} {k}", k + 1
        seen.add(value.lower())
        out.append(value)
    return out


def _column_values(col: Column, n: int, src: ValueSource, parents: dict[str, TableView]) -> list:
    rng = src.rng
    if col.kind == "label":
        return _label_values(col, n, src)
    if col.kind == "fk":
        parent_ids = [r[0] for r in parents[col.ref].rows]
        order, cum = src.popularity(len(parent_ids), col.skew)
        values = [parent_ids[src.pick_weighted(order, cum)] for _ in range(n)]
    elif col.kind == "cat":
        order, cum = src.popularity(len(col.params), col.skew)
        values = [col.params[src.pick_weighted(order, cum)] for _ in range(n)]
    elif col.kind == "num":
        values = [src.number(col) for _ in range(n)]
    elif col.kind == "date":
        values = [src.date(col) for _ in range(n)]
    else:
        values = [src.text(col) for _ in range(n)]
    # NULLs are drawn after the values so that changing a NULL share does not reshuffle
    # the rest of the column.
    return [None if col.null_frac and rng.random() < col.null_frac else v for v in values]


def _row_count(t: Table, src: ValueSource) -> int:
    lo, hi = t.rows
    n = src.rng.randint(lo, hi)
    lab = t.label
    if lab is not None and lab.gen == "pick":
        n = min(n, len(lab.params))  # a fixed vocabulary of names caps the table
    return n


def fill(db_id: str, domain: Domain, naming: Naming, src: ValueSource) -> DbView:
    """Draw every table's rows; returns the in-memory view of the database."""
    tables: dict[str, TableView] = {}
    for t in domain.tables:
        n = _row_count(t, src)
        columns = [ColumnView(naming.columns[(t.singular, c.concept)], c, i + 1) for i, c in enumerate(t.columns)]
        data = [_column_values(c, n, src, tables) for c in t.columns]
        rows = [(i + 1, *vals) for i, vals in enumerate(zip(*data))] if data else [(i + 1,) for i in range(n)]
        tables[t.singular] = TableView(t, naming.tables[t.singular], naming.pks[t.singular], columns, rows)
    return DbView(db_id, domain.name, naming.style, tables)


def _ddl(t: TableView, db: DbView) -> str:
    lines = [f"  {t.pk} INTEGER PRIMARY KEY"]
    fks = []
    for c in t.columns:
        sql_type = _SQL_TYPES.get(c.kind) or ("REAL" if c.spec.gen == "real" else "INTEGER")
        not_null = " NOT NULL" if c.kind == "label" else ""
        lines.append(f"  {c.name} {sql_type}{not_null}")
        if c.kind == "fk":
            parent = db.tables[c.spec.ref]
            fks.append(f"  FOREIGN KEY ({c.name}) REFERENCES {parent.name} ({parent.pk})")
    return f"CREATE TABLE {t.name} (\n" + ",\n".join(lines + fks) + "\n)"


def write_sqlite(db: DbView, path: Path) -> None:
    """Create `path` (must not exist) with the view's schema and rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        raise FileExistsError(path)
    con = sqlite3.connect(path, isolation_level=None)
    try:
        # page_size must precede the first table; journal_mode=DELETE leaves no -wal/-shm files.
        con.execute(f"PRAGMA page_size = {_PAGE_SIZE}")
        con.execute("PRAGMA journal_mode = DELETE")
        con.execute("PRAGMA foreign_keys = ON")
        con.execute("BEGIN")
        for t in db.tables.values():
            con.execute(_ddl(t, db))
            marks = ", ".join("?" * (len(t.columns) + 1))
            con.executemany(f"INSERT INTO {t.name} VALUES ({marks})", t.rows)
        con.execute("COMMIT")
        broken = con.execute("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise RuntimeError(f"{db.db_id}: foreign key violations {broken[:5]}")
    finally:
        con.close()
