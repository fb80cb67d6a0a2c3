"""Fixture databases and questions for the environment, adapter, oracle and CLI tests.

A tiny concert database in Spider layout (`<db_dir>/concert/concert.sqlite`) with a
composite-key link table and foreign keys, a 120-row table for truncation, and text with
an embedded newline — the shapes the tool renderers must handle.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from sqlenv.types import Question, db_file

SPIDER_DIR = Path(os.environ.get("SQLENV_SPIDER_DIR", Path(__file__).resolve().parents[1].parent / "shared" / "spider"))

SINGERS = [
    (1, "Joe Sharp", "Netherlands", 52),
    (2, "Timbaland", "United States", 32),
    (3, "Justin Brown", "France", 29),
    (4, "Rose White", "France", 41),
    (5, "John Nizinik", "France", 43),
]
CONCERTS = [(1, "Auditions", 2014), (2, "Super bootcamp", 2014), (3, "Home Visits", 2015)]
LINKS = [(1, 2), (1, 3), (2, 3), (2, 4), (3, 5)]


def make_concert_db(db_dir: Path) -> Path:
    """Write the fixture database under `db_dir` (Spider layout); returns its file path."""
    path = db_file(db_dir, "concert")
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);
        CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, concert_name TEXT, year INTEGER);
        CREATE TABLE singer_in_concert (
            concert_id INTEGER REFERENCES concert(concert_id),
            singer_id INTEGER REFERENCES singer(singer_id),
            PRIMARY KEY (concert_id, singer_id)
        );
        CREATE TABLE numbers (n INTEGER, label TEXT);
        """
    )
    con.executemany("INSERT INTO singer VALUES (?, ?, ?, ?)", SINGERS)
    con.executemany("INSERT INTO concert VALUES (?, ?, ?)", CONCERTS)
    con.executemany("INSERT INTO singer_in_concert VALUES (?, ?)", LINKS)
    con.executemany("INSERT INTO numbers VALUES (?, ?)", [(i, f"n{i}") for i in range(120)])
    con.execute("INSERT INTO numbers VALUES (?, ?)", (1000, "two\nlines"))
    con.commit()
    con.close()
    return path


def question(qid: str, text: str, sql: str, ordered: bool = False, tables: tuple[str, ...] = ()) -> Question:
    return Question(id=qid, db_id="concert", question=text, gold_sql=sql, ordered=ordered, tables=tables)


Q_COUNT = question("q_count", "How many singers are there?", "SELECT count(*) FROM singer", tables=("singer",))
Q_FRANCE = question(
    "q_france", "Names of singers from France, oldest first.",
    "SELECT name FROM singer WHERE country = 'France' ORDER BY age DESC", ordered=True, tables=("singer",),
)
Q_JOIN = question(
    "q_join", "Which singers performed in 2014?",
    "SELECT DISTINCT s.name FROM singer s JOIN singer_in_concert sc ON s.singer_id = sc.singer_id "
    "JOIN concert c ON c.concert_id = sc.concert_id WHERE c.year = 2014",
)
Q_BROKEN = question("q_broken", "Unanswerable.", "SELECT nope FROM singer")
QUESTIONS = (Q_COUNT, Q_FRANCE, Q_JOIN)


@pytest.fixture(scope="session")
def concert_db_dir(tmp_path_factory) -> Path:
    """A Spider-layout folder holding the fixture `concert` database."""
    root = tmp_path_factory.mktemp("envdb")
    make_concert_db(root)
    return root


@pytest.fixture(scope="session")
def spider_dir() -> Path:
    """The real Spider dev folder, or skip (override the location with SQLENV_SPIDER_DIR)."""
    if not (SPIDER_DIR / "dev.json").is_file():
        pytest.skip(f"Spider data not found at {SPIDER_DIR}")
    return SPIDER_DIR
