"""Guards the `sqlenv` command line: query, judge, validate and play, their outputs and exit codes."""

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures_env import Q_COUNT, Q_FRANCE, Q_JOIN, QUESTIONS, concert_db_dir, spider_dir  # noqa: F401
from sqlenv.cli import main, parse_command
from sqlenv.env import prompts

REPO = Path(__file__).resolve().parents[1]


def run(argv, stdin=""):
    out = io.StringIO()
    code = main(argv, stdin=io.StringIO(stdin), stdout=out)
    return code, out.getvalue()


def test_every_subcommand_has_help():
    for sub in ("query", "judge", "validate", "play"):
        proc = subprocess.run([sys.executable, "-m", "sqlenv", sub, "--help"], capture_output=True, text=True, cwd=REPO)
        assert proc.returncode == 0 and "usage: sqlenv " + sub in proc.stdout


@pytest.mark.parametrize(
    "sql, ok, rows, error",
    [
        ("SELECT count(*) FROM singer", True, [[5]], None),
        ("SELECT nope FROM singer", False, [], "no such column: nope"),
        ("DROP TABLE singer", False, [], "not authorized"),
    ],
)
def test_query(concert_db_dir, sql, ok, rows, error):
    code, out = run(["query", "--db", str(concert_db_dir / "concert" / "concert.sqlite"), "--sql", sql])
    result = json.loads(out)
    assert code == 0
    assert set(result) == {"ok", "columns", "rows", "truncated", "timed_out", "error", "elapsed_ms"}
    assert result["ok"] is ok and result["rows"] == rows
    assert (result["error"] or "").startswith(error or "")


def test_query_missing_db_exits_2_via_console_entry(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "sqlenv", "query", "--db", str(tmp_path / "x.sqlite"),
                           "--sql", "SELECT 1"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and "no database file" in proc.stderr and proc.stdout == ""


def test_judge(concert_db_dir):
    lines = [
        {"id": "a", "db_id": "concert", "gold_sql": Q_COUNT.gold_sql, "answer": "5"},
        {"id": "b", "db_id": "concert", "gold_sql": Q_COUNT.gold_sql, "answer": "6"},
        {"id": "c", "db_id": "concert", "gold_sql": Q_COUNT.gold_sql, "pred_sql": "SELECT count(singer_id) FROM singer"},
        {"id": "d", "db_id": "concert", "gold_sql": Q_FRANCE.gold_sql,
         "pred_sql": "SELECT name FROM singer WHERE country = 'France' ORDER BY age"},  # order matters here
        {"id": "e", "db_id": "concert", "gold_sql": Q_JOIN.gold_sql, "pred_sql": "SELECT nonsense"},
        {"id": "f", "db_id": "concert", "gold_sql": Q_COUNT.gold_sql, "answer": 5},
    ]
    stdin = "\n".join(json.dumps(x) for x in lines) + "\n\n"
    code, out = run(["judge", "--db-dir", str(concert_db_dir)], stdin)
    results = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    assert [(r["id"], r["correct"]) for r in results] == [
        ("a", True), ("b", False), ("c", True), ("d", False), ("e", False), ("f", True)
    ]
    assert results[4]["reason"].startswith("predicted SQL failed: no such column")
    assert all(isinstance(r["reason"], str) and r["reason"] for r in results)


def test_judge_metric_ex(concert_db_dir):
    """--metric ex scores predicted SQL by execution match: no value leniency, columns by permutation."""
    lines = [
        {"id": "a", "db_id": "concert", "gold_sql": Q_COUNT.gold_sql, "pred_sql": "SELECT count(singer_id) FROM singer"},
        {"id": "b", "db_id": "concert", "gold_sql": Q_COUNT.gold_sql, "pred_sql": "SELECT count(*) + 0.0 FROM singer"},
        {"id": "c", "db_id": "concert", "gold_sql": Q_COUNT.gold_sql, "pred_sql": "SELECT '5'"},  # text, not 5
        {"id": "d", "db_id": "concert", "gold_sql": "SELECT name, age FROM singer",
         "pred_sql": "SELECT age, name FROM singer ORDER BY name"},  # columns swapped, order free
        {"id": "e", "db_id": "concert", "gold_sql": Q_FRANCE.gold_sql,
         "pred_sql": "SELECT name FROM singer WHERE country = 'France' ORDER BY age"},  # gold says ORDER BY
        {"id": "f", "db_id": "concert", "gold_sql": Q_JOIN.gold_sql, "pred_sql": "SELECT nonsense"},
    ]
    stdin = "\n".join(json.dumps(x) for x in lines) + "\n"
    code, out = run(["judge", "--db-dir", str(concert_db_dir), "--metric", "ex"], stdin)
    results = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    assert [(r["id"], r["correct"]) for r in results] == [
        ("a", True), ("b", True), ("c", False), ("d", True), ("e", False), ("f", False)
    ]
    # the value verifier accepts the text '5' for a count of 5; execution match does not
    code, out = run(["judge", "--db-dir", str(concert_db_dir)], json.dumps(lines[2]) + "\n")
    assert json.loads(out)["correct"] is True


def test_judge_metric_ex_needs_sql(concert_db_dir):
    line = json.dumps({"id": "x", "db_id": "concert", "gold_sql": Q_COUNT.gold_sql, "answer": "5"})
    code, out = run(["judge", "--db-dir", str(concert_db_dir), "--metric", "ex"], line + "\n")
    assert code == 1 and json.loads(out)["reason"] == "malformed input: --metric ex judges SQL: 'pred_sql' is required"


def test_judge_metric_ex_gold_against_gold_on_spider(spider_dir):
    """Every Spider dev question's gold SQL, judged against itself by execution match: 100 %."""
    records = json.loads((spider_dir / "dev.json").read_text())
    lines = [{"id": i, "db_id": r["db_id"], "gold_sql": r["query"], "pred_sql": r["query"]} for i, r in enumerate(records)]
    stdin = "".join(json.dumps(x) + "\n" for x in lines)
    code, out = run(["judge", "--db-dir", str(spider_dir / "database"), "--metric", "ex"], stdin)
    results = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(results) == len(records) == 603
    assert [r for r in results if not r["correct"]] == []


@pytest.mark.parametrize(
    "line, reason",
    [
        ("{not json", "malformed input: not JSON"),
        ("[1, 2]", "malformed input: not a JSON object"),
        ('{"id": "x", "db_id": "concert", "answer": "5"}', "malformed input: missing ['gold_sql']"),
        ('{"id": "x", "db_id": "concert", "gold_sql": "SELECT 1"}', "malformed input: exactly one of"),
        ('{"id": "x", "db_id": "nowhere", "gold_sql": "SELECT 1", "answer": "1"}', "malformed input: no usable database"),
    ],
)
def test_judge_malformed_lines_keep_going_and_exit_1(concert_db_dir, line, reason):
    good = json.dumps({"id": "ok", "db_id": "concert", "gold_sql": "SELECT 1", "answer": "1"})
    code, out = run(["judge", "--db-dir", str(concert_db_dir)], f"{line}\n{good}\n")
    first, second = (json.loads(x) for x in out.splitlines())
    assert code == 1
    assert first["correct"] is False and first["reason"].startswith(reason)
    assert second == {"id": "ok", "correct": True, "reason": second["reason"]}


def _questions_file(tmp_path, questions):
    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps(q.to_dict()) + "\n" for q in questions))
    return path


def test_validate_questions_file(concert_db_dir, tmp_path):
    path = _questions_file(tmp_path, QUESTIONS)
    code, out = run(["validate", "--questions", str(path), "--db-dir", str(concert_db_dir)])
    assert code == 0 and json.loads(out) == {"n": 3, "verified": 3, "rate": 1.0, "failures": [], "warnings": []}


def test_validate_reports_failures(concert_db_dir, tmp_path):
    from fixtures_env import Q_BROKEN

    path = _questions_file(tmp_path, [Q_COUNT, Q_BROKEN])
    code, out = run(["validate", "--questions", str(path), "--db-dir", str(concert_db_dir)])
    summary = json.loads(out)
    assert code == 1 and summary["n"] == 2 and summary["verified"] == 1
    assert summary["failures"][0]["id"] == "q_broken" and "no such column" in summary["failures"][0]["reason"]


def test_validate_usage_errors(tmp_path):
    assert run(["validate", "--data", str(tmp_path / "nope")])[0] == 2
    assert run(["validate", "--questions", str(tmp_path / "q.jsonl")])[0] == 2


@pytest.mark.parametrize(
    "line, call",
    [
        ("describe singer", ("describe", {"table_name": "singer"})),
        ("  query SELECT a, b FROM t WHERE x = 'a b'  ", ("query", {"sql": "SELECT a, b FROM t WHERE x = 'a b'"})),
        ("answer 42", ("answer", {"value": "42"})),
        ("answer", ("answer", {})),
        ("dance now", ("dance", {})),
        ('{"name": "sample", "arguments": {"table_name": "t"}}', ("sample", {"table_name": "t"})),
        ('{"name": "query", "arguments": "not an object"}', ("query", "not an object")),
        ('{"name": "query"', None),
    ],
)
def test_parse_command(line, call):
    assert parse_command(line) == call


def test_play_by_piping_stdin(concert_db_dir, tmp_path):
    path = _questions_file(tmp_path, QUESTIONS)
    stdin = "describe singer\n\nquery SELECT count(*) FROM singer\n{\"name\": \"query\"\nanswer 5\ndescribe singer\n"
    code, out = run(["play", "--questions", str(path), "--db-dir", str(concert_db_dir), "--question", "q_count"], stdin)
    assert code == 0
    assert out.startswith("=== system ===\n" + prompts.SYSTEM_PROMPT)
    assert "=== user ===\nHow many singers are there?\n\nTables in the database: concert, numbers, singer" in out
    assert "=== tool: query ===\ncount(*)\n5\n(1 row)\n" in out
    assert "(not a valid JSON call; nothing was sent)" in out
    summary = json.loads(out.split("=== episode ===\n")[1])
    assert summary["correct"] and summary["steps"] == 3 and summary["calls_after_end"] == 0  # stops at the answer


def test_play_by_index_and_bad_question(concert_db_dir, tmp_path):
    path = _questions_file(tmp_path, QUESTIONS)
    code, out = run(["play", "--questions", str(path), "--db-dir", str(concert_db_dir), "--question", "1"], "quit\n")
    assert code == 0 and "oldest first" in out and json.loads(out.split("=== episode ===\n")[1])["steps"] == 0
    assert run(["play", "--questions", str(path), "--db-dir", str(concert_db_dir), "--question", "99"])[0] == 2


def test_play_spider_subprocess(spider_dir):
    proc = subprocess.run(
        [sys.executable, "-m", "sqlenv", "play", "--data", str(spider_dir), "--question", "0"],
        input="describe singer\nquery SELECT count(*) FROM singer\nanswer 6\n", capture_output=True, text=True,
        cwd=REPO, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "How many singers do we have?" in proc.stdout
    assert json.loads(proc.stdout.split("=== episode ===\n")[1])["correct"] is True


def test_validate_spider(spider_dir):
    # The oracle must verify >= 99 % of the 603 questions. Gold answers that depend on how
    # SQLite breaks ties under LIMIT are played like the rest and listed as warnings.
    code, out = run(["validate", "--data", str(spider_dir)])
    summary = json.loads(out)
    assert summary["n"] == 603
    assert summary["verified"] / summary["n"] >= 0.99
    assert all(f["reason"] for f in summary["failures"])
    assert all(w["reason"].startswith("nondeterministic: ") for w in summary["warnings"])
    assert summary["warnings"], "the 12-database slice has known ties under LIMIT"
    assert code == (1 if summary["failures"] else 0)


def test_judge_metric_ex_removes_distinct_unless_kept(concert_db_dir):
    """Pairs that differ only by DISTINCT: a match under the official default, a mismatch with --keep-distinct; a
    DISTINCT inside a string literal is text, never removed."""
    pairs = [
        ("a", "SELECT country FROM singer", "SELECT DISTINCT country FROM singer"),
        ("b", "SELECT count(country) FROM singer", "SELECT count(DISTINCT country) FROM singer"),  # official: COUNT( x)
        ("c", "SELECT 'DISTINCT France'", "SELECT ' France'"),  # not a keyword: the texts differ
        ("d", "SELECT name FROM singer", "SELECT DISTINCT name FROM singer"),  # no duplicates: the same either way
    ]
    stdin = "".join(json.dumps({"id": i, "db_id": "concert", "gold_sql": g, "pred_sql": p}) + "\n" for i, g, p in pairs)
    verdicts = {}
    for flags in ([], ["--keep-distinct"]):
        code, out = run(["judge", "--db-dir", str(concert_db_dir), "--metric", "ex", *flags], stdin)
        assert code == 0
        verdicts[bool(flags)] = [(r["id"], r["correct"]) for r in map(json.loads, out.splitlines())]
    assert verdicts[False] == [("a", True), ("b", True), ("c", False), ("d", True)]
    assert verdicts[True] == [("a", False), ("b", False), ("c", False), ("d", True)]


def test_keep_distinct_is_for_ex_only(concert_db_dir):
    line = json.dumps({"id": "x", "db_id": "concert", "gold_sql": Q_COUNT.gold_sql, "answer": "5"})
    code, out = run(["judge", "--db-dir", str(concert_db_dir), "--keep-distinct"], line + "\n")
    assert code == 2 and out == ""
