"""The oracle gate every generated question passes: run, size, determinism, round-trip.

A candidate's gold SQL runs in `sqlenv.env.sandbox.Sandbox` (the same sandbox the agent uses)
and is rejected, with a named reason, when the question would be noise for training or
evaluation:
- sql_error: the statement fails (a template bug; counted, never silently kept);
- empty / not_empty: the result is empty but not meant to be, or meant to be but isn't;
- null_only: every value is NULL (an aggregate over nothing), not a useful answer;
- too_many_rows: more rows than an agent can reasonably type back;
- ambiguous_order: the result depends on how SQLite breaks ties (`sqlenv.data.ties`, the one
  tie rule, which Spider's loader applies too), or cannot be probed;
- roundtrip: the verifier does not accept the formatted gold result for the gold rows.
Accepted candidates get the labeller's hardness, the tables read and the gold answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlenv.data.hardness import hardness, is_ordered, tables_used
from sqlenv.data.ties import tie_reason
from sqlenv.env.sandbox import Sandbox
from sqlenv.env.verifier import format_answer, verify

REASONS = ("sql_error", "empty", "not_empty", "null_only", "too_many_rows", "ambiguous_order", "roundtrip",
           "duplicate", "unlabelled")


@dataclass(frozen=True)
class Accepted:
    gold_answer: str
    hardness: str
    tables: tuple[str, ...]
    ordered: bool
    rows: int


def ambiguous(sandbox: Sandbox, sql: str) -> bool:
    """True when the ordered result of `sql` depends on SQLite's tie breaking (`data.ties.tie_reason`),
    or cannot be probed (a generated question that cannot be checked is not trusted)."""
    return tie_reason(sandbox, sql, unprobeable="cannot be probed") is not None


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
