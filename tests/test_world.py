"""Procedural world: seed determinism, FK integrity, naming styles, oracle-checked questions, atomic writes."""

import re
import sqlite3
from collections import Counter

import pytest

from sqlenv.data.hardness import hardness, is_ordered, tables_used
from sqlenv.data.world import DOMAINS, STYLE_NAMES, build_world
from sqlenv.data.world import build as build_module
from sqlenv.data.world.checks import ambiguous, check
from sqlenv.data.world.domains import get_domain
from sqlenv.data.world.generate import quotas
from sqlenv.data.world.naming import RESERVED, STYLES, name_database
from sqlenv.env.sandbox import Sandbox
from sqlenv.env.verifier import format_answer, verify
from sqlenv.types import HARDNESS_LEVELS, db_file

SMALL = dict(domains=["retail", "sports", "hospital"], databases_per_domain=2, questions_per_db=40, side_tables=4)


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    root = tmp_path_factory.mktemp("worlds")
    return {name: (root / name, build_world(root / name, seed=seed, **SMALL))
            for name, seed in (("a", 0), ("b", 0), ("c", 1))}


def _db_ids(path):
    return sorted(p.name for p in path.iterdir())


def _fk_graph(con):
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return tables, {t: [r[2] for r in con.execute(f"PRAGMA foreign_key_list({t})")] for t in tables}


def _longest_chain(graph):
    def depth(t):
        return max((1 + depth(p) for p in graph[t]), default=0)

    return max(depth(t) for t in graph)


# --- determinism ----------------------------------------------------------------------------


def test_same_seed_same_questions_and_bytes(worlds):
    (pa, a), (pb, b) = worlds["a"], worlds["b"]
    assert [q.to_dict() for q in a.questions] == [q.to_dict() for q in b.questions]
    assert _db_ids(pa) == _db_ids(pb)
    for db_id in _db_ids(pa):
        assert db_file(pa, db_id).read_bytes() == db_file(pb, db_id).read_bytes(), db_id


def test_side_tables_are_in_the_files_and_in_no_question(worlds, tmp_path):
    """Side tables add what a real database holds beside the asked-about tables, and change nothing else: the same
    questions, gold SQL and domain tables as a world built without them."""
    path, world = worlds["a"]
    bare = build_world(tmp_path / "bare", seed=0, **{**SMALL, "side_tables": 0})
    assert [q.to_dict() for q in bare.questions] == [q.to_dict() for q in world.questions]
    extra_total = 0
    for db_id in _db_ids(path):
        with Sandbox(db_file(path, db_id)) as box, Sandbox(db_file(tmp_path / "bare", db_id)) as plain:
            domain_tables = plain.table_names()
            side = sorted(set(box.table_names()) - set(domain_tables))
            assert set(domain_tables) <= set(box.table_names()) and len(side) <= 4
            assert side == sorted(world.stats["databases"][db_id]["side_tables"])
            for t in domain_tables:  # the domain's tables hold the same rows
                assert box.execute(f"SELECT * FROM {t}").rows == plain.execute(f"SELECT * FROM {t}").rows
            for t in side:
                assert box.execute(f"SELECT count(*) FROM {t}").rows[0][0] > 0  # real rows, not empty shells
        asked = {t.lower() for q in world.questions if q.db_id == db_id for t in q.tables}
        assert not asked & {t.lower() for t in side}
        extra_total += len(side)
    assert extra_total >= len(_db_ids(path))  # about two per database on average, not none


def test_renamed_columns_change_names_not_questions_or_answers(worlds, tmp_path):
    """`renamed_columns` spells a share of columns from other words than the questions use (a table's label column is
    no longer `name` everywhere, `salary` may be `pay`) and changes nothing else: the same questions and gold answers,
    the same rows, keys keep their names; the gold SQL names the new columns, and is what the questions were checked
    against."""
    path, world = worlds["a"]
    renamed = build_world(tmp_path / "renamed", seed=0, **{**SMALL, "renamed_columns": 0.5})
    assert [q.question for q in renamed.questions] == [q.question for q in world.questions]
    assert [q.gold_answer for q in renamed.questions] == [q.gold_answer for q in world.questions]
    assert sum(q.gold_sql != p.gold_sql for q, p in zip(renamed.questions, world.questions)) > len(world.questions) / 3
    changed = labels_changed = 0
    for db_id in _db_ids(path):
        con, plain = sqlite3.connect(db_file(tmp_path / "renamed", db_id)), sqlite3.connect(db_file(path, db_id))
        try:
            tables, graph = _fk_graph(con)
            assert (tables, graph) == _fk_graph(plain)  # same tables, same foreign keys
            for t in tables:
                cols = [r[1] for r in con.execute(f"PRAGMA table_info({t})")]
                before = [r[1] for r in plain.execute(f"PRAGMA table_info({t})")]
                keys = {r[3] for r in con.execute(f"PRAGMA foreign_key_list({t})")}
                assert [c for c in cols if c in keys] == [c for c in before if c in keys] and cols[0] == before[0]
                assert con.execute(f"SELECT * FROM {t}").fetchall() == plain.execute(f"SELECT * FROM {t}").fetchall()
                changed += sum(a != b for a, b in zip(cols, before))
                labels_changed += before[1].lower().endswith("name") and cols[1] != before[1]
        finally:
            con.close(), plain.close()
        assert renamed.stats["databases"][db_id]["renamed_columns"] > 0
    n_columns = sum(len(t.columns) for d in SMALL["domains"] for t in get_domain(d).tables) * 2
    assert 0.25 * n_columns < changed < 0.75 * n_columns and labels_changed >= 5
    for q in renamed.questions[:60]:  # the oracle checked every gold query against the renamed database
        with Sandbox(db_file(tmp_path / "renamed", q.db_id)) as box:
            assert verify(q.gold_answer, box.execute(q.gold_sql).rows, q.ordered).correct, q


def test_other_seed_other_world(worlds):
    (pa, a), (pc, c) = worlds["a"], worlds["c"]
    assert _db_ids(pa) == _db_ids(pc)  # same ids, different contents
    assert [q.question for q in a.questions] != [q.question for q in c.questions]
    assert all(db_file(pa, d).read_bytes() != db_file(pc, d).read_bytes() for d in _db_ids(pa))


def test_subset_builds_the_same_databases(worlds, tmp_path):
    """A database is a function of (seed, db_id), not of which other domains were built."""
    pa, _ = worlds["a"]
    build_world(tmp_path / "w", seed=0, domains=["sports"], databases_per_domain=1, questions_per_db=3, side_tables=4)
    assert db_file(tmp_path / "w", "sports_1").read_bytes() == db_file(pa, "sports_1").read_bytes()


# --- schema ----------------------------------------------------------------------------------


def test_databases_have_keys_and_fk_chains(worlds):
    path, result = worlds["a"]
    assert _db_ids(path) == sorted(result.stats["databases"])
    for db_id in _db_ids(path):
        con = sqlite3.connect(db_file(path, db_id))
        try:
            assert con.execute("PRAGMA foreign_key_check").fetchall() == []
            tables, graph = _fk_graph(con)
            side = result.stats["databases"][db_id]["side_tables"]
            assert 3 <= len(tables) - len(side) <= 7 and len(side) <= 4, db_id
            for t in tables:
                assert any(r[5] for r in con.execute(f"PRAGMA table_info({t})")), f"{db_id}.{t} has no primary key"
                assert con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] > 0
            assert _longest_chain(graph) >= 2, db_id
            assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        finally:
            con.close()


def test_at_least_twelve_domains_each_valid():
    assert len(DOMAINS) >= 12 and len(set(DOMAINS)) == len(DOMAINS)
    for name in DOMAINS:
        get_domain(name).validate()


@pytest.mark.parametrize("style", STYLES, ids=lambda s: s.name)
@pytest.mark.parametrize("domain", ["retail", "sports", "bank", "airline"])
def test_naming_style_identifiers_are_usable(domain, style):
    naming = name_database(get_domain(domain), style)
    tables = list(naming.tables.values())
    assert len({t.lower() for t in tables}) == len(tables)
    for table, name in naming.tables.items():
        cols = [naming.pks[table]] + [v for (t, _), v in naming.columns.items() if t == table]
        assert len({c.lower() for c in cols}) == len(cols), (table, cols)
        for ident in [name, *cols]:
            assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", ident) and ident.lower() not in RESERVED, ident


def test_default_world_uses_many_naming_styles(tmp_path):
    # One question per database keeps this fast; the databases are the default world's.
    result = build_world(tmp_path / "w", seed=0, questions_per_db=1)
    assert result.stats["n_databases"] == 2 * len(DOMAINS)
    assert len(result.stats["naming_styles"]) >= 3
    assert set(result.stats["naming_styles"]) <= set(STYLE_NAMES)


# --- questions -------------------------------------------------------------------------------


def test_every_question_passes_the_oracle(worlds):
    path, result = worlds["a"]
    empty = 0
    for q in result.questions:
        with Sandbox(db_file(path, q.db_id)) as sb:
            res = sb.execute(q.gold_sql)
        assert res.ok and not res.truncated and len(res.rows) <= 20, q
        assert q.gold_answer == format_answer(res.columns, res.rows), q
        assert verify(q.gold_answer, res.rows, q.ordered).correct, q
        assert q.hardness == hardness(q.gold_sql), q
        assert q.tables == tuple(tables_used(q.gold_sql)) and q.ordered == is_ordered(q.gold_sql), q
        assert q.source == "synthetic" and q.id.startswith(f"{q.db_id}_q")
        empty += not res.rows
    assert empty == result.stats["empty_by_design"]


def test_questions_are_unique_and_fill_the_quota(worlds):
    _, result = worlds["a"]
    qs = result.questions
    assert len({q.id for q in qs}) == len(qs)
    assert len({(q.db_id, q.gold_sql) for q in qs}) == len(qs)
    assert len({(q.db_id, q.question) for q in qs}) == len(qs)
    assert Counter(q.db_id for q in qs) == {d: SMALL["questions_per_db"] for d in result.stats["databases"]}


def test_all_four_levels_at_least_ten_percent(worlds):
    _, result = worlds["a"]
    levels = Counter(q.hardness for q in result.questions)
    assert set(levels) == set(HARDNESS_LEVELS)
    assert all(levels[lvl] >= 0.10 * len(result.questions) for lvl in HARDNESS_LEVELS), levels
    assert result.stats["hardness"] == {lvl: levels[lvl] for lvl in HARDNESS_LEVELS}


@pytest.mark.parametrize("n", [1, 7, 40, 130])
def test_quotas_sum_to_n(n):
    q = quotas(n, {"easy": 0.25, "medium": 0.30, "hard": 0.25, "extra": 0.20})
    assert sum(q.values()) == n and set(q) == set(HARDNESS_LEVELS)


# --- the oracle gate -------------------------------------------------------------------------


@pytest.fixture
def tiny_db(tmp_path):
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, score INTEGER)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)",
                    [(1, "a", 9), (2, "b", 7), (3, "c", 7), (4, "d", 5), (5, "e", 5), (6, "f", 1)])
    con.commit()
    con.close()
    with Sandbox(path) as sb:
        yield sb


@pytest.mark.parametrize("sql, expected", [
    ("SELECT name FROM t ORDER BY score DESC LIMIT 1", False),  # unique top
    ("SELECT name FROM t ORDER BY score DESC LIMIT 2", True),  # b/c tie at the boundary
    ("SELECT name FROM t ORDER BY score DESC LIMIT 3", True),  # b/c tie inside the answer
    ("SELECT score FROM t ORDER BY score DESC LIMIT 2", False),  # tie, but identical answers
    ("SELECT name FROM t ORDER BY score DESC, name ASC LIMIT 2", False),  # tie broken
    ("SELECT name FROM t WHERE score < 7 ORDER BY score ASC LIMIT 1", False),  # f alone at 1
    ("SELECT name FROM t ORDER BY score ASC", True),  # d/e tie, no limit
])
def test_ambiguous_orderings(tiny_db, sql, expected):
    assert ambiguous(tiny_db, sql) is expected


@pytest.mark.parametrize("sql, empty_by_design, reason", [
    ("SELECT nope FROM t", False, "sql_error"),
    ("SELECT name FROM t WHERE score > 100", False, "empty"),
    ("SELECT name FROM t WHERE score = 9", True, "not_empty"),
    ("SELECT name FROM t", False, "too_many_rows"),  # 6 rows > max_rows=5
    ("SELECT max(score) FROM t WHERE score > 100", False, "null_only"),
    ("SELECT name FROM t ORDER BY score DESC LIMIT 2", False, "ambiguous_order"),
])
def test_check_rejects_with_reason(tiny_db, sql, empty_by_design, reason):
    assert check(tiny_db, sql, empty_by_design=empty_by_design, max_rows=5) == reason


def test_check_accepts_and_labels(tiny_db):
    acc = check(tiny_db, "SELECT name FROM t WHERE score > 100", empty_by_design=True, max_rows=5)
    assert not isinstance(acc, str) and acc.rows == 0 and acc.hardness == "easy" and acc.tables == ("t",)


# --- atomic writes ---------------------------------------------------------------------------


def test_failed_build_leaves_nothing_behind(tmp_path, monkeypatch):
    out = tmp_path / "world"
    build_world(out, seed=0, domains=["gym"], databases_per_domain=1, questions_per_db=2)
    before = {p.name: p.read_bytes() for p in out.rglob("*.sqlite")}
    calls = []

    def boom(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("injected failure")
        return real(*args, **kwargs)

    real = build_module.generate_questions
    monkeypatch.setattr(build_module, "generate_questions", boom)
    with pytest.raises(RuntimeError, match="injected"):
        build_world(out, seed=1, domains=["gym", "bank"], databases_per_domain=1, questions_per_db=2)
    assert {p.name: p.read_bytes() for p in out.rglob("*.sqlite")} == before  # old build intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["world"]  # no temp folders left
