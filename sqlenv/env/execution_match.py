"""Execution accuracy (EX) as Spider's official test-suite evaluator scores it: the rows of a predicted SQL
against the rows of the gold SQL, both executed on the same database.

This is the metric every published text-to-SQL number uses, kept apart from the lenient value verifier
(`sqlenv.env.verifier`), which reads an answer *text*. The rules, written from the published description
of `test-suite-sql-eval` (`exec_eval.result_eq`, Zhong et al. 2020):
- order matters iff the gold SQL contains `order by` anywhere (`order_matters`; a substring test, as the
  official evaluator does: an ORDER BY inside a subquery counts too);
- two empty results match, whatever their columns; otherwise the row counts and column counts must agree;
- columns are matched by permutation: some reordering of the predicted columns must make the results equal;
  column names play no part;
- with order: the permuted rows equal the gold rows in sequence; without: as multisets (duplicates count);
- values compare as Python compares what sqlite3 returns: `1 == 1.0` (an INTEGER and a REAL), but
  `'1' != 1` (text is not a number), no tolerance on floats, NULL only equals NULL, bytes equal bytes;
- a quick rejection first, as the official code has it: the rows with their cells sorted (by `str(v)` plus
  the type name) must agree as a sequence (ordered) or as a set (unordered);
- DISTINCT is removed from both statements before they run unless `keep_distinct` (the official
  `eval_exec_match(..., keep_distinct=False)`, its `--keep_distinct` flag off by default): `ex_sql` drops
  every word token `distinct` outside string literals, quoted names and comments, as the official
  `remove_distinct` drops every sqlparse token that reads `distinct` — `COUNT(DISTINCT x)` included, which
  becomes `COUNT( x)` there and here. So `SELECT city` and `SELECT DISTINCT city` match by default;
  `keep_distinct=True` is the stricter reading (the rows each statement returns as written).

Where this differs from the official code, on purpose and without changing a verdict: it prunes column
permutations with every predicted row (the official one samples 20 rows at random for results of more than
three columns; pruning with all rows only removes permutations that could not match), so it is deterministic.
What it does not do: execute SQL (the caller runs both statements through the sandbox; `execution_verdict`
scores the results, a predicted SQL that failed as 0), or the test-suite's distilled extra databases (Spider ships one database per db_id here).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Sequence
from itertools import product
from typing import Any

from sqlenv.types import QueryResult, Verdict

Row = tuple[Any, ...]


# One lexical token of SQL: a string literal, a quoted name, a comment, a word, or any other character.
_TOKEN = re.compile(
    r"""'(?:[^']|'')*'?|"(?:[^"]|"")*"?|`[^`]*`?|\[[^\]]*\]?|--[^\n]*|/\*.*?(?:\*/|\Z)|[^\W\d]\w*|\d\w*|.""",
    re.DOTALL,
)


def strip_distinct(sql: str) -> str:
    """`sql` without its DISTINCT keywords, as Spider's official evaluator removes them (module docstring):
    every word token `distinct` (any case) goes, the text around it stays; one inside a string literal,
    a quoted name or a comment is part of that token and stays too."""
    return "".join(t for t in _TOKEN.findall(sql) if t.lower() != "distinct")


def ex_sql(sql: str, keep_distinct: bool = False) -> str:
    """The statement EX executes for `sql`: as written with `keep_distinct`, else without DISTINCT."""
    return sql if keep_distinct else strip_distinct(sql)


def order_matters(gold_sql: str) -> bool:
    """The official rule for whether row order counts: `order by` appears in the gold SQL (any case)."""
    return "order by" in gold_sql.lower()


def _unorder_row(row: Row) -> Row:
    return tuple(sorted(row, key=lambda v: str(v) + str(type(v))))


def _quick_reject(gold: list[Row], pred: list[Row], ordered: bool) -> bool:
    g, p = [_unorder_row(r) for r in gold], [_unorder_row(r) for r in pred]
    return g != p if ordered else set(g) != set(p)


def _permutations(gold: list[Row], pred: list[Row], width: int) -> Iterator[tuple[int, ...]]:
    """Column maps perm (gold column i <- predicted column perm[i]) whose predicted values all occur in the
    gold column: the only ones that can make the results equal."""
    gold_columns = [{r[i] for r in gold} for i in range(width)]
    allowed = [[j for j in range(width) if all(r[j] in gold_columns[i] for r in pred)] for i in range(width)]
    for perm in product(*allowed):
        if len(set(perm)) == width:
            yield perm


def execution_match(pred_rows: Sequence[Sequence[Any]], gold_rows: Sequence[Sequence[Any]], ordered: bool) -> Verdict:
    """Whether the predicted SQL's rows match the gold SQL's under the official EX rules (module docstring).

    `ordered` is normally `order_matters(gold_sql)`.
    """
    gold, pred = [tuple(r) for r in gold_rows], [tuple(r) for r in pred_rows]
    if not gold and not pred:
        return Verdict(True, "match: both results empty")
    if len(gold) != len(pred):
        return Verdict(False, f"expected {len(gold)} rows, got {len(pred)}")
    width = len(gold[0])
    if len(pred[0]) != width:
        return Verdict(False, f"expected {width} columns, got {len(pred[0])}")
    if _quick_reject(gold, pred, ordered):
        return Verdict(False, "rows differ" + (" (in order)" if ordered else ""))
    gold_counts = Counter(gold)
    in_order = " (in order)" if ordered else ""
    for perm in _permutations(gold, pred, width):
        permuted = pred if width == 1 else [tuple(r[j] for j in perm) for r in pred]
        if (permuted == gold) if ordered else (Counter(permuted) == gold_counts):
            moved = "" if perm == tuple(range(width)) else f" (columns {list(perm)})"
            return Verdict(True, "match" + in_order + moved)
    return Verdict(False, "no column order makes the rows equal" + in_order)


def execution_verdict(pred: QueryResult, gold: QueryResult, ordered: bool) -> Verdict:
    """EX of an executed prediction against the executed gold: a prediction that failed scores 0, and a result
    cut at the sandbox's fetch limit is not compared (its rows are not all there)."""
    if not pred.ok:
        return Verdict(False, f"predicted SQL failed: {pred.error}")
    if gold.truncated or pred.truncated:
        which = "gold" if gold.truncated else "predicted"
        return Verdict(False, f"the {which} result passed the fetch limit: rows not compared")
    return execution_match(pred.rows, gold.rows, ordered)
