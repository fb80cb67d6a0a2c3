"""Load Spider-format questions as `Question`s the oracle can verify, and say why others drop.

A Spider-format folder holds a questions JSON file (a list of {db_id, question, query, ...};
`dev.json`, `train_spider.json`, ...), `tables.json` and `database/<db_id>/<db_id>.sqlite`.
`load_spider` reads the questions, runs every gold query once in the sandbox (one `Sandbox`
per database, reused) and keeps a question only if its gold answer is well defined:

- the gold SQL parses (sqlglot) and runs without error, timeout or truncation;
- its database file exists, opens, and holds at least one row;
- the result does not depend on how SQLite breaks ties: every LIMIT (top-level, and in any
  subquery that runs on its own) either does not bind, or sits under an ORDER BY whose keys
  separate the rows kept from the rows cut, or the tied rows return identical values. A
  binding LIMIT without ORDER BY picks rows by storage order and is dropped too;
- the canonical answer round-trips: `verify(format_answer(cols, rows), rows, ordered)`.

Everything else is dropped with a reason "<category>: <detail>" (`LoadResult.drop_counts`
tallies the categories). Malformed inputs (missing folder, unreadable questions file, records
without db_id/question/query, missing tables.json) raise, naming the path.

Not detected, on purpose (dropping them would cost real questions): ties *inside* an
ordered result (rows with equal keys all kept; the verifier then demands SQLite's order
between them: 12 of the 118 ordered questions kept from Spider dev), bare columns next to
MAX/MIN when several rows reach the extreme, and ORDER BY ... COLLATE ties (keys compare
as Python values). SQLite answers all of these deterministically for a given file.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from sqlenv.data.hardness import hardness, is_ordered, tables_used
from sqlenv.data.ties import tie_reason
from sqlenv.env import verifier
from sqlenv.env.sandbox import Sandbox, SandboxError, SandboxLimits
from sqlenv.types import HARDNESS_LEVELS, Question, db_file

__all__ = ["LoadResult", "load_spider", "load_tables_json", "normalize_sql"]

REQUIRED_FIELDS = ("db_id", "question", "query")


@dataclass
class LoadResult:
    """Kept questions (file order) and dropped ones as (id, "<category>: <detail>")."""

    questions: list[Question] = field(default_factory=list)
    dropped: list[tuple[str, str]] = field(default_factory=list)
    # Kept despite a nondeterministic gold result (only with keep_nondeterministic=True):
    # (id, reason). Their gold answer is what *this* SQLite returns for the tie.
    flagged: list[tuple[str, str]] = field(default_factory=list)

    @property
    def considered(self) -> int:
        """Questions that passed the filters: kept + dropped."""
        return len(self.questions) + len(self.dropped)

    def drop_counts(self) -> dict[str, int]:
        """Dropped questions per reason category, most frequent first."""
        return dict(Counter(reason.split(":", 1)[0] for _, reason in self.dropped).most_common())


def normalize_sql(sql: str) -> str:
    """Collapse whitespace runs to one space and trim, leaving quoted text untouched.

    Only whitespace changes: 'New  York' inside a literal keeps its two spaces."""
    closing = {"'": "'", '"': '"', "`": "`", "[": "]"}
    out: list[str] = []
    quote: str | None = None
    pending_space = False
    for ch in sql:
        if quote is not None:
            out.append(ch)
            if ch == quote:  # a doubled '' closes and reopens: same text, same result
                quote = None
        elif ch.isspace():
            pending_space = bool(out)
        else:
            if pending_space:
                out.append(" ")
                pending_space = False
            out.append(ch)
            quote = closing.get(ch)
    return "".join(out)


def load_tables_json(path: "str | os.PathLike[str]") -> dict[str, dict[str, Any]]:
    """Spider's tables.json as {db_id: record}; raises naming the path if absent or malformed."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Spider tables file not found: {path}")
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"malformed Spider tables file {path}: {e}") from e
    if not isinstance(records, list) or not all(isinstance(r, dict) and "db_id" in r for r in records):
        raise ValueError(f"malformed Spider tables file {path}: expected a list of records with a db_id")
    return {r["db_id"]: r for r in records}


def _read_questions(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise FileNotFoundError(f"Spider questions file not found: {path}")
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"malformed Spider questions file {path}: {e}") from e
    if not isinstance(records, list):
        raise ValueError(f"malformed Spider questions file {path}: expected a JSON list, got {type(records).__name__}")
    for i, r in enumerate(records):
        if not isinstance(r, dict):
            raise ValueError(f"malformed Spider questions file {path}: record {i} is not an object")
        bad = [k for k in REQUIRED_FIELDS if not isinstance(r.get(k), str) or not r[k].strip()]
        if bad:
            raise ValueError(f"malformed Spider questions file {path}: record {i} lacks {bad}")
    return records


# --------------------------------------------------------------------------- tie detection
# --------------------------------------------------------------------------- loader
def _check_filters(databases: Iterable[str] | None, difficulties: Iterable[str] | None):
    # An empty list means "no filter" (what `databases: []` in a params file means), and a
    # lone string is one name, not a sequence of one-letter names.
    if isinstance(databases, str):
        databases = [databases]
    if isinstance(difficulties, str):
        difficulties = [difficulties]
    dbs = list(dict.fromkeys(databases)) if databases else None
    levels = set(difficulties) if difficulties else None
    if levels is not None and not levels <= set(HARDNESS_LEVELS):
        raise ValueError(f"unknown difficulty level(s) {sorted(levels - set(HARDNESS_LEVELS))}; use {HARDNESS_LEVELS}")
    return dbs, levels


def _open(stack: ExitStack, path: Path, limits: SandboxLimits) -> tuple[Sandbox | None, str | None]:
    """The database's sandbox, or None and the reason every question on it is dropped."""
    if not path.is_file():
        return None, f"missing_database: {path}"
    try:
        box = stack.enter_context(Sandbox(path, limits))
    except SandboxError as e:  # a corrupt or non-SQLite file: its questions cannot be checked
        return None, f"bad_database: {e}"
    if all(box.table_info(t).row_count == 0 for t in box.table_names()):
        return None, f"empty_database: every table of {path.stem} is empty"
    return box, None


def load_spider(
    spider_dir: "str | os.PathLike[str]",
    questions_file: str = "dev.json",
    databases: Iterable[str] | None = None,
    difficulties: Iterable[str] | None = None,
    sandbox_limits: SandboxLimits | None = None,
    keep_nondeterministic: bool = False,
    id_prefix: str = "",
) -> LoadResult:
    """Questions of `questions_file` whose gold answer the verifier can check.

    Args:
        spider_dir: a Spider-format folder (questions file, tables.json, database/).
        questions_file: file name inside `spider_dir` (dev.json, train_spider.json, ...).
        databases: keep only these db_ids; a named db whose file is missing raises.
            None or empty: every database.
        difficulties: keep only these hardness levels (easy / medium / hard / extra).
            None or empty: every level.
        sandbox_limits: limits for running the gold SQL (default `SandboxLimits()`).
        keep_nondeterministic: keep questions whose gold result depends on how SQLite breaks
            a tie (listed in `flagged` instead of `dropped`). Right for checking the oracle
            end to end (`sqlenv validate`); wrong for training or evaluation sets, where a
            model answering the other tied row would be marked wrong.
        id_prefix: put before every question id (`<db_id>_<index>`), so that the questions of
            several files (Spider's train and dev) never share an id.

    Returns:
        LoadResult with kept questions in file order and (id, reason) for dropped ones.
    """
    root = Path(spider_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"Spider folder not found: {root}")
    records = _read_questions(root / questions_file)
    load_tables_json(root / "tables.json")  # validated so a broken download fails loudly here
    db_root = root / "database"
    dbs, levels = _check_filters(databases, difficulties)
    if dbs is not None:
        missing = [d for d in dbs if not db_file(db_root, d).is_file()]
        if missing:
            raise FileNotFoundError(f"database file(s) not found: {[str(db_file(db_root, d)) for d in missing]}")
        absent = sorted(set(dbs) - {r["db_id"] for r in records})
        if absent:
            raise ValueError(f"no question of {root / questions_file} uses database(s) {absent}")
    limits = sandbox_limits or SandboxLimits()

    result = LoadResult()
    sandboxes: dict[str, Sandbox | None] = {}
    unusable: dict[str, str | None] = {}  # db_id -> drop reason shared by all its questions
    with ExitStack() as stack:
        for index, record in enumerate(records):
            db_id = record["db_id"]
            if dbs is not None and db_id not in dbs:
                continue
            qid = f"{id_prefix}{db_id}_{index:04d}"
            sql = normalize_sql(record["query"])
            try:
                level, tables = hardness(sql), tables_used(sql)
            except ValueError as e:
                result.dropped.append((qid, f"unparsable_sql: {e}"))
                continue
            if levels is not None and level not in levels:
                continue
            if db_id not in sandboxes:
                sandboxes[db_id], unusable[db_id] = _open(stack, db_file(db_root, db_id), limits)
            box = sandboxes[db_id]
            if box is None:
                result.dropped.append((qid, unusable[db_id]))
                continue
            reason, kept = _judge(box, sql, keep_nondeterministic)
            if kept is not None and reason:
                result.flagged.append((qid, reason))
            elif reason:
                result.dropped.append((qid, reason))
                continue
            answer, ordered = kept
            result.questions.append(
                Question(
                    id=qid,
                    db_id=db_id,
                    question=record["question"].strip(),
                    gold_sql=sql,
                    gold_answer=answer,
                    hardness=level,
                    tables=tuple(tables),
                    ordered=ordered,
                    source="spider",
                )
            )
    return result


def _judge(
    box: Sandbox, sql: str, keep_nondeterministic: bool = False
) -> tuple[str | None, tuple[str, bool] | None]:
    """(drop reason, None), (None, (gold answer, ordered)), or — for a kept nondeterministic
    question — (flag reason, (gold answer, ordered)) for one gold query."""
    res = box.execute(sql)
    if res.timed_out:
        return f"timeout: {res.error}", None
    if not res.ok:
        return f"sql_error: {res.error}", None
    if res.truncated:
        return f"too_many_rows: more than {box.limits.max_fetch_rows} rows", None
    tie = tie_reason(box, sql, unprobeable=None)  # the dataset is fixed: keep what cannot be probed
    if tie and not keep_nondeterministic:
        return f"nondeterministic: {tie}", None
    ordered = is_ordered(sql)
    answer = verifier.format_answer(res.columns, res.rows)
    verdict = verifier.verify(answer, res.rows, ordered)
    if not verdict.correct:
        return f"not_round_trip: {verdict.reason}", None
    return (f"nondeterministic: {tie}" if tie else None), (answer, ordered)
