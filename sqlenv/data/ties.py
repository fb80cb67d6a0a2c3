"""When a gold result depends on how SQLite breaks ties: the one tie rule, for the world's gate and Spider's loader.

A question whose gold answer SQLite could return differently on another run (or another build) would
be noise for the reward and the accuracy, so the oracle gates drop it (the world) or drop/flag it
(Spider). `tie_reason(sandbox, sql)` says why, or None:
- top-level ORDER BY (the verifier then compares rows in order): the query is rerun without its
  LIMIT/OFFSET, its sort keys carried as columns; a group of rows with equal keys that reaches the kept
  range and holds different output rows makes the order (and, at a LIMIT boundary, membership)
  arbitrary — with or without a LIMIT;
- a LIMIT without ORDER BY (at top level or in a subquery) picks rows by storage order;
- a LIMIT with ORDER BY inside a subquery: only membership matters there, so only a tie cut by the
  LIMIT counts.
An ordered query that cannot be probed faithfully (a set operation, DISTINCT with a key outside the
output, a non-literal LIMIT, a correlated subquery) gets `unprobeable`: the world's generator passes a
reason (rejected: it can make another question), Spider's loader None (kept: the dataset is fixed).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlglot
from sqlglot import exp

from sqlenv.env.sandbox import Sandbox


def _int_literal(node: exp.Expr | None) -> int | None:
    expr = node.args.get("expression") if node is not None else None
    if isinstance(expr, exp.Literal) and not expr.is_string:
        try:
            return int(expr.this)
        except ValueError:
            return None
    return None


def _key_columns(query: exp.Query, columns: Sequence[str]) -> tuple[exp.Query, list[int]] | None:
    """A copy of `query` whose output carries every ORDER BY key, and each key's column index.

    A key that already is an output column (by position `ORDER BY 2`, by alias, by name, or as
    the same expression) is read from there; otherwise it is appended as an extra column.
    None when that cannot be done faithfully (appending to DISTINCT or to a set operation
    would change which rows come out)."""
    probe = query.copy()
    items = probe.expressions if isinstance(probe, exp.Select) else []
    if any(item.is_star for item in items):
        items = []  # `*` spans several output columns: item positions no longer line up
    n_out = len(columns)
    lowered = [c.lower() for c in columns]
    indexes: list[int] = []
    extra: list[exp.Expr] = []
    for ordered in probe.args["order"].expressions:
        key = ordered.this
        index = None
        if isinstance(key, exp.Literal) and not key.is_string and key.this.isdigit():
            index = int(key.this) - 1 if 1 <= int(key.this) <= n_out else None
        if index is None:
            for i, item in enumerate(items):
                if key == item or (isinstance(item, exp.Alias) and (key == item.this or (
                        isinstance(key, exp.Column) and not key.table and key.name.lower() == item.alias.lower()))):
                    index = i
                    break
        if index is None and isinstance(key, exp.Column) and not key.table and key.name.lower() in lowered:
            index = lowered.index(key.name.lower())
        if index is None:
            if not isinstance(probe, exp.Select) or probe.args.get("distinct"):
                return None
            index = n_out + len(extra)
            extra.append(exp.alias_(key.copy(), f"__sqlenv_key_{len(extra)}"))
        indexes.append(index)
    if extra:
        probe = probe.select(*extra, copy=False)
    return probe, indexes


def limit_tie(sandbox: Sandbox, query: exp.Query) -> str | None:
    """Why the LIMIT of `query` (run on its own) makes its result arbitrary, or None.

    The query is rerun without LIMIT/OFFSET, with its ORDER BY keys carried as columns. At
    each cut (before the first kept row, after the last) rows whose keys tie with the
    boundary can be kept or cut in any order; that only matters when those tied rows differ
    in the columns the query returns (`SELECT price ... ORDER BY price LIMIT 2` is fine with
    two 20s). Without ORDER BY every row is "tied". Queries it cannot probe (non-literal
    LIMIT, a correlated subquery, DISTINCT with a key outside the output) count as fine."""
    k, offset = _int_literal(query.args.get("limit")), _int_literal(query.args.get("offset")) or 0
    if k is None or k <= 0:  # LIMIT 0 keeps nothing; a negative LIMIT keeps everything
        return None
    base = query.copy()
    base.set("offset", None)
    base.set("limit", None)
    if base.args.get("order") is None:
        res = sandbox.execute(base.sql(dialect="sqlite"))
        if res.ok and len(res.rows) > offset + k and len(set(res.rows)) > 1:
            return f"LIMIT {k} without ORDER BY picks {k} of {len(res.rows)} different rows by storage order"
        return None
    # LIMIT 0 costs nothing and names the output columns, which ORDER BY keys may refer to.
    shape = sandbox.execute(base.limit(0, copy=True).sql(dialect="sqlite"))
    if not shape.ok:
        return None  # e.g. a correlated subquery cannot run on its own
    keyed = _key_columns(base, shape.columns)
    if keyed is None:
        return None
    probe, indexes = keyed
    res = sandbox.execute(probe.sql(dialect="sqlite"))
    if not res.ok:
        return None
    rows, width = res.rows, len(shape.columns)

    def key(row: tuple) -> list:
        return [row[i] for i in indexes]

    for cut in (offset, offset + k):
        if 0 < cut < len(rows) and key(rows[cut - 1]) == key(rows[cut]):
            tied = {row[:width] for row in rows if key(row) == key(rows[cut])}
            if len(tied) > 1:
                keys = ", ".join(repr(v) for v in key(rows[cut]))
                return (f"ORDER BY ... LIMIT {k} cuts through {len(tied)} different rows tied on the "
                        f"sort key ({keys})")
    return None


def _ordered_tie(sandbox: Sandbox, tree: exp.Expr) -> str | None | bool:
    """For a top-level ORDER BY: why ties make the ordered result arbitrary, None if they do not, False
    when the query cannot be probed."""
    if tree.args.get("limit") is not None and _int_literal(tree.args.get("limit")) is None:
        return False
    k, offset = _int_literal(tree.args.get("limit")), _int_literal(tree.args.get("offset")) or 0
    base = tree.copy()
    base.set("offset", None)
    base.set("limit", None)
    shape = sandbox.execute(base.limit(0, copy=True).sql(dialect="sqlite"))
    if not shape.ok:
        return False
    keyed = _key_columns(base, shape.columns)
    if keyed is None:
        return False
    probe, indexes = keyed
    res = sandbox.execute(probe.sql(dialect="sqlite"))
    if not res.ok or res.truncated:
        return False
    width, end_kept = len(shape.columns), (offset + k if k is not None else len(res.rows))
    start = 0
    while start < len(res.rows):
        key = [res.rows[start][i] for i in indexes]
        stop = start
        while stop < len(res.rows) and [res.rows[stop][i] for i in indexes] == key:
            stop += 1
        if start < end_kept and stop > offset:  # the tie group reaches the rows the answer holds
            tied = {row[:width] for row in res.rows[start:stop]}
            if len(tied) > 1:
                keys = ", ".join(repr(v) for v in key)
                return f"ORDER BY leaves {len(tied)} different rows tied on the sort key ({keys})"
        start = stop
    return None


def tie_reason(sandbox: Sandbox, sql: str | exp.Expr, *, unprobeable: str | None) -> str | None:
    """Why the result of `sql` depends on SQLite's tie breaking, `unprobeable` when that cannot be told,
    or None (see the module docstring)."""
    tree = sqlglot.parse_one(sql, read="sqlite") if isinstance(sql, str) else sql
    ordered_top = isinstance(tree, (exp.Select, exp.SetOperation)) and tree.args.get("order") is not None
    if ordered_top:
        reason = _ordered_tie(sandbox, tree)
        if reason is False:
            return unprobeable
        if reason:
            return reason
    for q in [tree] + [q for q in tree.find_all(exp.Select, exp.SetOperation) if q is not tree]:
        if q.args.get("limit") is None or (q is tree and ordered_top):
            continue
        reason = limit_tie(sandbox, q)
        if reason:
            return reason if q is tree else f"in a subquery: {reason}"
    return None
