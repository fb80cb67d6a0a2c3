"""Guards the Spider loader: what it keeps, what it drops and why, filters, ids and input errors."""

from __future__ import annotations

import csv
import json
import os
import sqlite3
from pathlib import Path

import pytest

from sqlenv.data.spider import LoadResult, load_spider, load_tables_json, normalize_sql
from sqlenv.env import verifier
from sqlenv.env.sandbox import SandboxLimits
from sqlenv.types import HARDNESS_LEVELS

# <repo>/../shared/spider unless SQLENV_SPIDER_DIR says otherwise.
SPIDER_DIR = Path(os.environ.get("SQLENV_SPIDER_DIR") or Path(__file__).resolve().parents[2] / "shared" / "spider")

# item prices: a=10, b=20, c=20, d=30 (b and c tie); sales per item: a 1, b 2, c 2, d 0.
SHOP_SQL = """
CREATE TABLE item (id INTEGER PRIMARY KEY, name TEXT, price INTEGER);
INSERT INTO item VALUES (1, 'a', 10), (2, 'b', 20), (3, 'c', 20), (4, 'd', 30);
CREATE TABLE sale (id INTEGER PRIMARY KEY, item_name TEXT);
INSERT INTO sale VALUES (1, 'a'), (2, 'b'), (3, 'b'), (4, 'c'), (5, 'c');
"""

# (db_id, gold SQL, expected: "kept" or the drop category). The id is f"{db_id}_{position:04d}".
QUESTIONS = [
    ("shop", "SELECT name FROM item ORDER BY price DESC LIMIT 1", "kept"),
    ("shop", "SELECT name FROM item ORDER BY price ASC LIMIT 2", "nondeterministic"),  # b/c tie at the cut
    ("shop", "SELECT nope FROM item", "sql_error"),
    ("empty_db", "SELECT count(*) FROM t", "empty_database"),
    ("ghost", "SELECT count(*) FROM t", "missing_database"),
    ("shop", "SELECT name FROM item LIMIT 1", "nondeterministic"),  # binding LIMIT, no ORDER BY
    ("shop", "SELECT name FROM item ORDER BY price LIMIT 10", "nondeterministic"),  # b/c tie inside the answer:
    ("shop", "SELECT price FROM item ORDER BY price LIMIT 2", "kept"),  # tied rows return the same value
    ("shop", "SELECT count(*) FROM item WHERE name = (SELECT name FROM item ORDER BY price LIMIT 1 OFFSET 1)",
     "nondeterministic"),  # the tie sits in a subquery
    ("shop", "SELECT name FROM item ORDER BY price LIMIT 1 OFFSET 2", "nondeterministic"),  # tie at the OFFSET cut
    ("shop", "SELECT name FROM item ORDER BY price DESC, name LIMIT 2", "kept"),  # second key breaks the tie
    ("shop", "SELEC name FROM item", "unparsable_sql"),
    ("shop", "SELECT item_name, count(*) AS n FROM sale GROUP BY item_name ORDER BY n DESC LIMIT 1",
     "nondeterministic"),  # key given by alias
    ("shop", "SELECT name, price FROM item ORDER BY 2 LIMIT 2", "nondeterministic"),  # key given by position
    ("shop", "SELECT T1.name FROM item AS T1 JOIN sale AS T2 ON T1.name = T2.item_name GROUP BY T1.name "
             "ORDER BY count(*) DESC LIMIT 1", "nondeterministic"),  # aggregate key outside the output
    ("shop", "SELECT T1.name FROM item AS T1 JOIN sale AS T2 ON T1.name = T2.item_name GROUP BY T1.name "
             "ORDER BY count(*) ASC LIMIT 1", "kept"),
    ("shop", "SELECT  count(*)\n   FROM item\tWHERE name != 'x  y'", "kept"),
    ("shop", "SELECT name, price FROM item WHERE price > 15", "kept"),
    ("shop", "SELECT *, price AS p FROM item ORDER BY p LIMIT 2", "nondeterministic"),  # `*` shifts positions
    ("broken", "SELECT count(*) FROM t", "bad_database"),  # the file is not SQLite
    ("shop", "SELECT name FROM item ORDER BY price", "nondeterministic"),  # b/c tie, their order SQLite's choice
    ("shop", "SELECT name FROM item WHERE price != 20 ORDER BY price", "kept"),  # no tie left
]


def _write_db(path: Path, script: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        conn.executescript(script)
    conn.close()


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    """A Spider-format folder: shop (data), empty_db (tables, no rows), ghost (no file),
    unused (no question uses it), broken (not SQLite)."""
    root = tmp_path / "spider"
    _write_db(root / "database" / "shop" / "shop.sqlite", SHOP_SQL)
    _write_db(root / "database" / "empty_db" / "empty_db.sqlite", "CREATE TABLE t (x INTEGER);")
    _write_db(root / "database" / "unused" / "unused.sqlite", "CREATE TABLE u (x INTEGER); INSERT INTO u VALUES (1);")
    (root / "database" / "broken").mkdir()
    (root / "database" / "broken" / "broken.sqlite").write_bytes(b"this is not an SQLite database file" * 100)
    dbs = ("shop", "empty_db", "ghost", "unused", "broken")
    tables = [{"db_id": d, "table_names": [], "column_names": []} for d in dbs]
    (root / "tables.json").write_text(json.dumps(tables))
    records = [{"db_id": db, "question": f"question {i}?", "query": sql} for i, (db, sql, _) in enumerate(QUESTIONS)]
    (root / "dev.json").write_text(json.dumps(records))
    return root


def _outcomes(result: LoadResult) -> dict[str, str]:
    out = {q.id: "kept" for q in result.questions}
    out.update({qid: reason.split(":", 1)[0] for qid, reason in result.dropped})
    return out


def test_each_question_kept_or_dropped_for_the_right_reason(tiny):
    result = load_spider(tiny)
    expected = {f"{db}_{i:04d}": outcome for i, (db, _, outcome) in enumerate(QUESTIONS)}
    assert _outcomes(result) == expected
    assert result.considered == len(QUESTIONS)
    assert all(reason.split(":", 1)[1].strip() for _, reason in result.dropped), "every reason has a detail"


def test_drop_counts_by_category(tiny):
    counts = load_spider(tiny).drop_counts()
    assert counts == {"nondeterministic": 10, "sql_error": 1, "empty_database": 1, "missing_database": 1,
                      "unparsable_sql": 1, "bad_database": 1}
    assert list(counts)[0] == "nondeterministic"  # most frequent first


def test_kept_question_fields(tiny):
    by_id = {q.id: q for q in load_spider(tiny).questions}
    top = by_id["shop_0000"]
    assert (top.db_id, top.question, top.source) == ("shop", "question 0?", "spider")
    assert top.gold_answer == verifier.format_answer(["name"], [("d",)])
    assert top.ordered is True and top.hardness == "medium" and top.tables == ("item",)
    two = by_id["shop_0017"]
    assert two.ordered is False and two.hardness == "medium"
    assert two.gold_answer == verifier.format_answer(["name", "price"], [("b", 20), ("c", 20), ("d", 30)])
    assert verifier.verify(two.gold_answer, [("b", 20), ("c", 20), ("d", 30)], two.ordered).correct
    joined = by_id["shop_0015"]
    assert joined.tables == ("item", "sale") and joined.hardness == "extra"


def test_gold_sql_whitespace_normalised_but_literals_kept(tiny):
    q = {q.id: q for q in load_spider(tiny).questions}["shop_0016"]
    assert q.gold_sql == "SELECT count(*) FROM item WHERE name != 'x  y'"


@pytest.mark.parametrize(
    "raw,normal",
    [
        ("  SELECT  a\n\tFROM t ;  ", "SELECT a FROM t ;"),
        ("SELECT 'a  b' ,  \"c  d\"", "SELECT 'a  b' , \"c  d\""),
        ("SELECT 'it''s  x'  FROM [my  table]", "SELECT 'it''s  x' FROM [my  table]"),
        ("SELECT `a  b`\r\nFROM t", "SELECT `a  b` FROM t"),
        ("", ""),
    ],
)
def test_normalize_sql(raw, normal):
    assert normalize_sql(raw) == normal


def test_timeout_and_truncation_are_drop_reasons(tiny):
    records = json.loads((tiny / "dev.json").read_text())
    records.append({"db_id": "shop", "question": "forever?",
                    "query": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"})
    (tiny / "dev.json").write_text(json.dumps(records))
    n = len(records) - 1
    result = load_spider(tiny, databases=["shop"], sandbox_limits=SandboxLimits(timeout_s=0.2))
    assert _outcomes(result)[f"shop_{n:04d}"] == "timeout"
    small = load_spider(tiny, databases=["shop"], sandbox_limits=SandboxLimits(timeout_s=0.2, max_fetch_rows=2))
    assert _outcomes(small)["shop_0017"] == "too_many_rows"


def test_filters_keep_ids_stable(tiny):
    full = {q.id: q for q in load_spider(tiny).questions}
    shop = load_spider(tiny, databases=["shop"])
    assert {q.db_id for q in shop.questions} == {"shop"}
    assert not any(not qid.startswith("shop_") for qid, _ in shop.dropped)
    assert all(full[q.id] == q for q in shop.questions)
    easy_medium = load_spider(tiny, difficulties=["easy", "medium"])
    assert easy_medium.questions and {q.hardness for q in easy_medium.questions} <= {"easy", "medium"}
    assert all(full[q.id] == q for q in easy_medium.questions)
    assert load_spider(tiny, databases="shop").questions == shop.questions  # a lone name is one name
    assert load_spider(tiny, databases=[], difficulties=[]).questions == list(full.values())  # empty = no filter


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        ({"databases": ["ghost"]}, FileNotFoundError, "ghost.sqlite"),
        ({"databases": ["unused"]}, ValueError, "unused"),
        ({"difficulties": ["trivial"]}, ValueError, "trivial"),
    ],
)
def test_bad_filters_raise(tiny, kwargs, error, match):
    with pytest.raises(error, match=match):
        load_spider(tiny, **kwargs)


@pytest.mark.parametrize(
    "questions_text,match",
    [
        ("{not json", "malformed"),
        ('{"db_id": "shop"}', "JSON list"),
        ('[{"db_id": "shop", "question": "q?"}]', "record 0 lacks \\['query'\\]"),
        ('[{"db_id": "shop", "question": "", "query": "SELECT 1"}]', "record 0 lacks \\['question'\\]"),
        ('["SELECT 1"]', "record 0 is not an object"),
    ],
)
def test_malformed_questions_file_names_the_path(tiny, questions_text, match):
    (tiny / "dev.json").write_text(questions_text)
    with pytest.raises(ValueError, match=match) as info:
        load_spider(tiny)
    assert str(tiny / "dev.json") in str(info.value)


def test_missing_inputs_name_the_path(tiny, tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nowhere")):
        load_spider(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="train_spider.json"):
        load_spider(tiny, questions_file="train_spider.json")
    (tiny / "tables.json").unlink()
    with pytest.raises(FileNotFoundError, match="tables.json"):
        load_spider(tiny)


def test_load_tables_json(tiny):
    tables = load_tables_json(tiny / "tables.json")
    assert set(tables) == {"shop", "empty_db", "ghost", "unused", "broken"}
    (tiny / "tables.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="tables.json"):
        load_tables_json(tiny / "tables.json")


# ----------------------------------------------------------------------------- real Spider
needs_spider = pytest.mark.skipif(not (SPIDER_DIR / "dev.json").is_file(),
                                  reason=f"no Spider data at {SPIDER_DIR} (set SQLENV_SPIDER_DIR)")


@pytest.fixture(scope="module")
def spider_dev() -> LoadResult:
    return load_spider(SPIDER_DIR)


@needs_spider
def test_real_spider_keeps_the_large_majority(spider_dev):
    n = len(json.loads((SPIDER_DIR / "dev.json").read_text()))
    assert spider_dev.considered == n
    assert len(spider_dev.questions) >= 0.9 * n
    ids = [q.id for q in spider_dev.questions] + [qid for qid, _ in spider_dev.dropped]
    assert len(set(ids)) == n
    # a known tie: 2014 and 2015 both have the most concerts
    assert dict(spider_dev.dropped)["concert_singer_0026"].startswith("nondeterministic")


@needs_spider
def test_real_spider_fields_match_sources(spider_dev):
    records = json.loads((SPIDER_DIR / "dev.json").read_text())
    with open(SPIDER_DIR / "dev_hardness.tsv", newline="") as f:
        official = {int(r["index"]): r["hardness"] for r in csv.DictReader(f, delimiter="\t")}
    for q in spider_dev.questions:
        index = int(q.id.rsplit("_", 1)[1])
        record = records[index]
        assert q.id == f"{record['db_id']}_{index:04d}" and q.db_id == record["db_id"]
        assert q.question == record["question"].strip()
        assert q.gold_sql == " ".join(q.gold_sql.split()) and q.gold_answer and q.tables
        assert q.hardness in HARDNESS_LEVELS and q.source == "spider"
    agree = sum(q.hardness == official[int(q.id.rsplit("_", 1)[1])] for q in spider_dev.questions)
    assert agree / len(spider_dev.questions) >= 0.95


@needs_spider
def test_real_spider_is_deterministic_and_filters(spider_dev):
    again = load_spider(SPIDER_DIR, databases=["concert_singer", "pets_1"], difficulties=["hard", "extra"])
    expected = [q for q in spider_dev.questions
                if q.db_id in ("concert_singer", "pets_1") and q.hardness in ("hard", "extra")]
    assert again.questions == expected and expected


def test_keep_nondeterministic_flags_instead_of_dropping(tiny):
    """`sqlenv validate` keeps ties under LIMIT (flagged); the prepare stage drops them."""
    dropped = load_spider(tiny)
    kept = load_spider(tiny, keep_nondeterministic=True)
    tie_ids = {qid for qid, reason in dropped.dropped if reason.startswith("nondeterministic")}
    assert tie_ids
    assert {qid for qid, _ in kept.flagged} == tie_ids
    assert tie_ids <= {q.id for q in kept.questions}
    assert len(kept.dropped) == len(dropped.dropped) - len(tie_ids)
