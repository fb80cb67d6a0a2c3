"""Guards the Spider hardness labeller (components, levels, official quirks, dev agreement) and tables_used."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from sqlenv.data.hardness import (
    HardnessComponents,
    hardness,
    hardness_components,
    level_from_components,
    tables_used,
)
from sqlenv.types import HARDNESS_LEVELS

# <repo>/../shared/spider unless SQLENV_SPIDER_DIR says otherwise.
SPIDER_DIR = Path(os.environ.get("SQLENV_SPIDER_DIR") or Path(__file__).resolve().parents[2] / "shared" / "spider")

# (sql, (component1, component2, others), level) — each count worked out by hand from the rules.
CASES = [
    # easy
    ("SELECT count(*) FROM singer", (0, 0, 0), "easy"),
    ("SELECT name FROM singer WHERE age > 20", (1, 0, 0), "easy"),
    ("SELECT name FROM singer ORDER BY age", (1, 0, 0), "easy"),
    ("SELECT DISTINCT country FROM singer", (0, 0, 0), "easy"),
    ("SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.id = T2.sid", (1, 0, 0), "easy"),
    # HAVING aggregates are not counted (count_agg reads the `not` flag there)
    ("SELECT a FROM t GROUP BY a HAVING count(*) > 1", (1, 0, 0), "easy"),
    # ... but HAVING's AND connector is, as one "aggregate" (still not > 1)
    ("SELECT a FROM t GROUP BY a HAVING count(*) > 1 AND sum(b) > 2", (1, 0, 0), "easy"),
    # a derived table in FROM is a table unit, not a nested query (Spider dev #395 is easy)
    ("SELECT count(*) FROM (SELECT a FROM t INTERSECT SELECT a FROM u)", (0, 0, 0), "easy"),
    ("SELECT a FROM t WHERE a IS NOT NULL", (1, 0, 0), "easy"),
    # medium
    ("SELECT name, age FROM singer", (0, 0, 1), "medium"),
    ("SELECT name FROM singer ORDER BY age LIMIT 1", (2, 0, 0), "medium"),
    ("SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.id = T2.sid WHERE T2.year = 2014", (2, 0, 0), "medium"),
    ("SELECT name FROM singer WHERE age > 20 AND country = 'France'", (1, 0, 1), "medium"),
    ("SELECT count(*), max(age) FROM singer", (0, 0, 2), "medium"),
    ("SELECT name FROM singer WHERE name LIKE '%a%'", (2, 0, 0), "medium"),
    ("SELECT name FROM singer WHERE age = 1 OR age = 2", (2, 0, 1), "medium"),
    ("SELECT t.a FROM t, u WHERE t.id = u.id", (2, 0, 0), "medium"),
    ("SELECT a, count(*) FROM t GROUP BY a HAVING count(*) > 1 AND sum(b) > 2", (1, 0, 2), "medium"),
    # hard
    ("SELECT name FROM singer WHERE age > (SELECT avg(age) FROM singer)", (1, 1, 0), "hard"),
    ("SELECT name FROM a UNION SELECT name FROM b", (0, 1, 0), "hard"),
    ("SELECT a FROM t UNION SELECT a FROM u UNION SELECT a FROM v", (0, 1, 0), "hard"),
    ("SELECT a FROM t WHERE x = 1 EXCEPT SELECT a FROM u WHERE y = 2 AND z = 3", (1, 1, 0), "hard"),
    ("SELECT name FROM singer WHERE age > 20 ORDER BY age LIMIT 1", (3, 0, 0), "hard"),
    ("SELECT name, age, country FROM singer WHERE a = 1 AND b = 2 GROUP BY x, y", (2, 0, 3), "hard"),
    # NOT IN counts as one "aggregate" (quirk), not > 1 on its own
    ("SELECT name FROM stadium WHERE id NOT IN (SELECT sid FROM concert)", (1, 1, 0), "hard"),
    # the subquery's own clauses belong to the subquery
    (
        "SELECT name FROM singer WHERE id IN (SELECT sid FROM concert AS c JOIN stadium AS s ON c.x = s.x "
        "WHERE s.cap > 10 GROUP BY sid ORDER BY count(*) LIMIT 1)",
        (1, 1, 0),
        "hard",
    ),
    # extension beyond Spider's grammar: a CTE is a nested query
    ("WITH x AS (SELECT a FROM t) SELECT a FROM x", (0, 1, 0), "hard"),
    # extra
    ("SELECT avg(age) FROM student WHERE id NOT IN (SELECT sid FROM pet)", (1, 1, 1), "extra"),
    ("SELECT name, age FROM singer WHERE age > (SELECT avg(age) FROM singer)", (1, 1, 1), "extra"),
    (
        "SELECT T1.a FROM t1 AS T1 JOIN t2 AS T2 ON T1.id = T2.id GROUP BY T1.a ORDER BY count(*) DESC LIMIT 1",
        (4, 0, 0),
        "extra",
    ),
    ("SELECT a, b FROM t UNION SELECT a, b FROM u", (0, 1, 1), "extra"),
    ("SELECT a FROM t WHERE b IN (SELECT b FROM u) AND c IN (SELECT c FROM v)", (1, 2, 1), "extra"),
    # two negations are two "aggregates" (quirk): others = 2 with component1 = 2 is extra
    ("SELECT a FROM t WHERE b NOT LIKE 'x%' AND c NOT BETWEEN 1 AND 2", (2, 0, 2), "extra"),
    # ORs and LIKEs in ON conditions count too
    ("SELECT a FROM t JOIN u ON t.x = u.x OR t.y = u.y WHERE u.n LIKE 'a%' ORDER BY a", (5, 0, 0), "extra"),
]


@pytest.mark.parametrize("sql,components,level", CASES, ids=[c[0][:60] for c in CASES])
def test_components_and_level(sql, components, level):
    assert hardness_components(sql) == HardnessComponents(*components)
    assert hardness(sql) == level


def test_every_level_is_covered():
    assert {c[2] for c in CASES} == set(HARDNESS_LEVELS)


# Spider's thresholds at their boundaries.
THRESHOLDS = [
    ((1, 0, 0), "easy"),
    ((2, 0, 0), "medium"),
    ((1, 0, 2), "medium"),
    ((2, 0, 1), "medium"),
    ((2, 0, 2), "extra"),
    ((1, 0, 3), "hard"),
    ((2, 0, 3), "hard"),
    ((3, 0, 2), "hard"),
    ((3, 0, 3), "extra"),
    ((4, 0, 0), "extra"),
    ((0, 1, 0), "hard"),
    ((2, 1, 0), "extra"),
    ((0, 2, 0), "extra"),
    ((0, 1, 1), "extra"),
]


@pytest.mark.parametrize("components,level", THRESHOLDS)
def test_thresholds(components, level):
    assert level_from_components(HardnessComponents(*components)) == level


@pytest.mark.parametrize(
    "sql",
    ["", "   ", "SELEC name FROM singer", "SELECT name FROM", "SELECT 1; SELECT 2", "DROP TABLE singer",
     "INSERT INTO t VALUES (1)"],
)
def test_unparsable_or_non_query_raises_value_error(sql):
    with pytest.raises(ValueError):
        hardness(sql)
    with pytest.raises(ValueError):
        tables_used(sql)


TABLES = [
    ("SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.id = T2.id", ["singer", "concert"]),
    ("WITH x AS (SELECT a FROM Stadium) SELECT * FROM x JOIN singer ON 1", ["stadium", "singer"]),
    ("SELECT name FROM singer WHERE id IN (SELECT sid FROM concert)", ["singer", "concert"]),
    ("SELECT (SELECT count(*) FROM concert), name FROM singer", ["concert", "singer"]),
    ("SELECT a FROM Singer UNION SELECT a FROM SINGER", ["singer"]),
    ('SELECT * FROM "Song Table"', ["song table"]),
    ("SELECT x.a FROM (SELECT a FROM t) AS x", ["t"]),
    ("SELECT * FROM t AS a JOIN t AS b ON a.id = b.pid", ["t"]),
    ("SELECT concert.a FROM singer AS concert", ["singer"]),
    ("SELECT b FROM u EXCEPT SELECT b FROM t JOIN u ON t.id = u.id", ["u", "t"]),
    ("SELECT 1", []),
]


@pytest.mark.parametrize("sql,expected", TABLES, ids=[t[0][:60] for t in TABLES])
def test_tables_used(sql, expected):
    assert tables_used(sql) == expected


@pytest.mark.skipif(not (SPIDER_DIR / "dev_hardness.tsv").is_file(),
                    reason=f"no Spider data at {SPIDER_DIR} (set SQLENV_SPIDER_DIR)")
def test_agreement_with_official_spider_labels():
    questions = json.loads((SPIDER_DIR / "dev.json").read_text())
    with open(SPIDER_DIR / "dev_hardness.tsv", newline="") as f:
        official = {int(r["index"]): r["hardness"] for r in csv.DictReader(f, delimiter="\t")}
    assert len(official) == len(questions)
    agree = sum(hardness(q["query"]) == official[i] for i, q in enumerate(questions))
    assert agree / len(questions) >= 0.95, f"{agree}/{len(questions)}"
