"""The oracle gate every generated question passes: run, size, determinism, round-trip.

A candidate's gold SQL runs in `sqlenv.sandbox.Sandbox` (the same sandbox the agent uses)
and is rejected, with a named reason, when the question would be noise for training or
evaluation:
- sql_error: the statement fails (a template bug; counted, never silently kept);
- empty / not_empty: the result is empty but not meant to be, or meant to be but isn't;
- null_only: every value is NULL (an aggregate over nothing), not a useful answer;
- too_many_rows: more rows than an agent can reasonably type back;
- ambiguous_order: the result depends on how SQLite breaks ties. For a top-level ORDER BY
  the query is re-run projecting the sort keys next to the answer columns, without LIMIT;
  rows with equal keys but different answers make the order (and, at a LIMIT boundary,
  membership) arbitrary;
- roundtrip: the verifier does not accept the formatted gold result for the gold rows.
Accepted candidates get the labeller's hardness, the tables read and the gold answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby

import sqlglot
from sqlglot import exp

from sqlenv.hardness import hardness, tables_used
from sqlenv.sandbox import Sandbox
from sqlenv.verifier import format_answer, is_ordered, verify

REASONS = ("sql_error", "empty", "not_empty", "null_only", "too_many_rows", "ambiguous_order", "roundtrip",
           "duplicate", "unlabelled")


@dataclass(frozen=True)
class Accepted:
    gold_answer: str
    hardness: str
    tables: tuple[str, ...]
    ordered: bool
    rows: int


def _probe(sql: str) -> tuple[str, int, int | None] | None:
    """(probe SQL, number of key columns, LIMIT k) for a top-level ORDER BY; None if not probeable."""
    tree = sqlglot.parse_one(sql, read="sqlite")
    order = tree.args.get("order")
    if not isinstance(tree, exp.Select) or order is None or tree.args.get("distinct"):
        return None
    keys = [o.this.copy() for o in order.expressions]
    limit = tree.args.get("limit")
    k = None
    if limit is not None:
        value = limit.expression
        if not isinstance(value, exp.Literal) or not value.is_int:
            return None
        k = int(value.this)
    probe = tree.copy()
    probe.set("expressions", keys + [e.copy() for e in tree.expressions])
    probe.set("limit", None)
    return probe.sql(dialect="sqlite"), len(keys), k


def ambiguous(sandbox: Sandbox, sql: str) -> bool:
    """True when the ordered result of `sql` is not determined by its ORDER BY keys."""
    probe = _probe(sql)
    if probe is None:
        return True  # an ordered query we cannot probe is not trusted
    probe_sql, nk, k = probe
    res = sandbox.execute(probe_sql)
    if not res.ok or res.truncated:
        return True
    position = 0
    for _, group in groupby(res.rows, key=lambda r: tuple(r[:nk])):
        rows = list(group)
        start, position = position, position + len(rows)
        if k is not None and start >= k:
            break  # tie groups wholly after the limit never reach the answer
        if len({tuple(r[nk:]) for r in rows}) > 1:
            return True  # equal keys, different answers: order or LIMIT membership is arbitrary
    return False


def check(sandbox: Sandbox, sql: str, *, empty_by_design: bool, max_rows: int) -> Accepted | str:
    """An `Accepted` record, or the name of the reason the candidate is rejected."""
    res = sandbox.execute(sql)
    if not res.ok:
        return "sql_error"
    if res.truncated or len(res.rows) > max_rows:
        return "too_many_rows"
    if not res.rows:
        if not empty_by_design:
            return "empty"
    elif empty_by_design:
        return "not_empty"
    elif all(v is None for row in res.rows for v in row):
        return "null_only"
    ordered = is_ordered(sql)
    if ordered and ambiguous(sandbox, sql):
        return "ambiguous_order"
    answer = format_answer(res.columns, res.rows)
    if not verify(answer, res.rows, ordered).correct:
        return "roundtrip"
    try:
        level = hardness(sql)
        tables = tuple(tables_used(sql))
    except ValueError:
        return "unlabelled"
    return Accepted(answer, level, tables, ordered, len(res.rows))
