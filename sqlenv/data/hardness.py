"""Spider's hardness levels (easy / medium / hard / extra) and other facts about a gold SQL, on a sqlglot parse.

Besides `hardness`: `tables_used` (the tables a query reads) and `is_ordered` (whether its top-level
query orders the result, which decides whether the verifier compares rows in order).

The rules are those of Spider's official `evaluation.py` (`Evaluator.eval_hardness`), which
scores three counts on the *top-level* SELECT of a query and thresholds them:

- component1 (clauses): +1 each for WHERE, GROUP BY, ORDER BY, LIMIT; +1 per joined table
  (FROM table units - 1); +1 per OR and +1 per LIKE in the ON / WHERE / HAVING conditions.
- component2 (nesting): +1 per subquery that is a condition value in ON / WHERE / HAVING,
  +1 when the query is an INTERSECT / UNION / EXCEPT (once, however long the chain).
- others: +1 each for "more than one aggregate", "more than one SELECT column", "more than
  one WHERE condition", "more than one GROUP BY key".

Spider's script computes these on its own parse; here they come from sqlglot's AST (dialect
sqlite), and the official quirks are kept on purpose because they decide labels (checked
against Spider's published dev labels by `bench/hardness_agreement.py`):

- Only the left-most SELECT of a set operation is scored; the right-hand side (and any
  ORDER BY / LIMIT that sqlglot hangs on the set operation node) is one nested query.
- A derived table in FROM is a table unit, *not* a nested query (Spider labels
  `SELECT count(*) FROM (A INTERSECT B)` easy).
- `count_agg` reads element 0 of each unit. For SELECT items, ORDER BY keys and GROUP BY
  keys that is the aggregate, but WHERE/HAVING conditions store their `not` flag there and
  HAVING's list also holds its "and"/"or" connector strings. So an aggregate inside HAVING
  does not count, a negated condition (NOT IN, NOT LIKE, NOT BETWEEN) in WHERE or HAVING
  counts as one "aggregate", and so does every AND/OR connector in HAVING.

One known divergence in the counts, never in a dev label: Spider's own parse drops the
second half of `JOIN ... ON a = b OR c = d` (dev #133-136), so its component1 is one lower
there; this module counts that OR, as count_component1's rules say.

Spider's grammar has no CTEs, scalar subqueries in SELECT/ORDER BY or arithmetic on
aggregates; for those this module generalises in the obvious direction (each CTE and each
such subquery is one more nested query; every aggregate call counts) and says so here
rather than pretending Spider defined it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

__all__ = ["HardnessComponents", "hardness", "hardness_components", "is_ordered", "level_from_components", "tables_used"]


@dataclass(frozen=True)
class HardnessComponents:
    """The three counts Spider's `eval_hardness` thresholds."""

    component1: int
    component2: int
    others: int


def _parse(sql: str) -> exp.Expr:
    """Parse one SELECT statement (sqlite dialect) or raise ValueError saying why not."""
    if not isinstance(sql, str) or not sql.strip():
        raise ValueError("cannot parse SQL: empty statement")
    try:
        statements = [s for s in sqlglot.parse(sql, read="sqlite") if s is not None]
    except SqlglotError as e:
        raise ValueError(f"cannot parse SQL: {str(e).splitlines()[0]}: {sql!r:.200}") from e
    if len(statements) != 1:
        raise ValueError(f"expected exactly one SQL statement, got {len(statements)}: {sql!r:.200}")
    tree = statements[0]
    if not isinstance(tree, exp.Query):
        raise ValueError(f"not a query (SELECT / set operation): {sql!r:.200}")
    return tree


def _children(node: exp.Expr):
    for value in node.args.values():
        for child in value if isinstance(value, list) else [value]:
            if isinstance(child, exp.Expr):
                yield child


def _count_outside_queries(node: exp.Expr | None, kind: type) -> int:
    """Count nodes of `kind` in `node` without descending into nested queries: what belongs
    to a subquery is scored (or not) as that subquery, never as part of the outer query."""
    if node is None:
        return 0
    if isinstance(node, kind):
        return 1
    if isinstance(node, exp.Query):
        return 0
    return sum(_count_outside_queries(c, kind) for c in _children(node))


def _subqueries(node: exp.Expr | None) -> int:
    """Nested queries directly inside `node` (an IN (...) list, a comparison value, EXISTS)."""
    if node is None:
        return 0
    if isinstance(node, exp.Query):
        return 1
    return sum(_subqueries(c) for c in _children(node))


def _aggregates(node: exp.Expr | None) -> int:
    return _count_outside_queries(node, exp.AggFunc)


@dataclass
class _Conditions:
    """A flattened AND/OR condition list, as Spider stores it: leaves and connectors."""

    leaves: list[exp.Expr]
    ors: int

    @property
    def connectors(self) -> int:
        return max(len(self.leaves) - 1, 0)


def _flatten(node: exp.Expr | None) -> _Conditions:
    out = _Conditions([], 0)

    def walk(n: exp.Expr) -> None:
        # Parentheses only group; Spider's flat list keeps every leaf and every connector.
        if isinstance(n, exp.Paren):
            walk(n.this)
        elif isinstance(n, (exp.And, exp.Or)):
            out.ors += isinstance(n, exp.Or)
            walk(n.this)
            walk(n.expression)
        else:
            out.leaves.append(n)

    if node is not None:
        walk(node)
    return out


def _strip(leaf: exp.Expr) -> tuple[exp.Expr, bool]:
    """The predicate inside a condition and whether it is negated (Spider's `not_op`)."""
    negated = False
    while isinstance(leaf, (exp.Not, exp.Paren)):
        # `x IS NOT NULL` parses as NOT(IS): Spider has no `not` flag for IS, so it isn't one.
        if isinstance(leaf, exp.Not) and not isinstance(leaf.this, exp.Is):
            negated = not negated
        leaf = leaf.this
    # sqlglot writes `x NOT LIKE y` as Like(negate=True) rather than wrapping it in NOT.
    if leaf.args.get("negate"):
        negated = not negated
    return leaf, negated


def _is_like(predicate: exp.Expr) -> bool:
    return isinstance(predicate, (exp.Like, exp.ILike))


def _main_select(tree: exp.Expr) -> tuple[exp.Select | None, int]:
    """The SELECT that Spider scores and the number of set-operation nestings (0 or 1).

    sqlglot nests `A UNION B UNION C` left-deep; Spider parses it as A with union = (B UNION C),
    so the left-most SELECT is scored and the chain counts once."""
    set_ops = 0
    node = tree
    while True:
        if isinstance(node, exp.Subquery):
            node = node.this
        elif isinstance(node, exp.SetOperation):
            set_ops = 1
            node = node.this
        else:
            break
    return (node if isinstance(node, exp.Select) else None), set_ops


def _ctes(tree: exp.Expr) -> list[exp.CTE]:
    return list(tree.find_all(exp.CTE))


def hardness_components(sql: str) -> HardnessComponents:
    """Spider's component1 / component2 / others for one query; ValueError if unparsable."""
    tree = _parse(sql)
    select, set_ops = _main_select(tree)
    ctes = len(_ctes(tree))
    if select is None:  # e.g. a bare VALUES list: nothing Spider would score
        return HardnessComponents(0, set_ops + ctes, 0)

    from_ = select.args.get("from_")
    joins = select.args.get("joins") or []
    where = select.args.get("where")
    group = select.args.get("group")
    having = select.args.get("having")
    order = select.args.get("order")
    items = select.expressions
    group_keys = group.expressions if group is not None else []
    order_keys = [o.this if isinstance(o, exp.Ordered) else o for o in (order.expressions if order else [])]

    on_conds = [_flatten(j.args.get("on")) for j in joins]
    where_conds = _flatten(where.this if where is not None else None)
    having_conds = _flatten(having.this if having is not None else None)
    all_conds = [*on_conds, where_conds, having_conds]
    stripped = [[_strip(leaf) for leaf in c.leaves] for c in all_conds]

    # component1: clauses, joins, ORs and LIKEs.
    table_units = (1 if from_ is not None else 0) + len(joins)
    c1 = sum(x is not None for x in (where, group, order, select.args.get("limit")))
    c1 += max(table_units - 1, 0)
    c1 += sum(c.ors for c in all_conds)
    c1 += sum(_is_like(pred) for leaves in stripped for pred, _ in leaves)

    # component2: nested queries as condition values, plus the set operation.
    c2 = set_ops + sum(_subqueries(leaf) for c in all_conds for leaf in c.leaves)
    # Outside Spider's grammar (see module docstring): CTEs and scalar subqueries elsewhere.
    c2 += ctes + sum(_subqueries(e) for e in [*items, *group_keys, *order_keys])

    # others. The WHERE/HAVING terms reproduce Spider's count_agg quirk (module docstring).
    where_not = sum(neg for _, neg in stripped[len(on_conds)])
    having_not = sum(neg for _, neg in stripped[len(on_conds) + 1])
    aggs = sum(_aggregates(e) for e in [*items, *group_keys, *order_keys])
    aggs += where_not + having_not + having_conds.connectors
    others = int(aggs > 1) + int(len(items) > 1) + int(len(where_conds.leaves) > 1) + int(len(group_keys) > 1)
    return HardnessComponents(c1, c2, others)


def level_from_components(c: HardnessComponents) -> str:
    """Spider's thresholds, verbatim in meaning (evaluation.py `eval_hardness`)."""
    c1, c2, o = c.component1, c.component2, c.others
    if c1 <= 1 and o == 0 and c2 == 0:
        return "easy"
    if (o <= 2 and c1 <= 1 and c2 == 0) or (c1 <= 2 and o < 2 and c2 == 0):
        return "medium"
    if (o > 2 and c1 <= 2 and c2 == 0) or (2 < c1 <= 3 and o <= 2 and c2 == 0) or (c1 <= 1 and o == 0 and c2 <= 1):
        return "hard"
    return "extra"


def hardness(sql: str) -> str:
    """Spider hardness level of one SQL query: "easy" | "medium" | "hard" | "extra"."""
    return level_from_components(hardness_components(sql))


def tables_used(sql: str) -> list[str]:
    """Real tables the query reads, lower-cased, deduplicated, in order of first appearance.

    CTE names are not tables; aliases never appear because sqlglot keeps a table's name and
    its alias apart. Raises ValueError for unparsable SQL."""
    tree = _parse(sql)
    cte_names = {c.alias_or_name.lower() for c in _ctes(tree)}
    found: list[tuple[float, int, str]] = []
    for i, table in enumerate(tree.find_all(exp.Table, bfs=False)):
        name = table.name.lower()
        if not name or (name in cte_names and not table.args.get("db")):
            continue
        # Token offsets give text order; the depth-first index breaks ties and stands in
        # when a node carries no position.
        start = table.this.meta.get("start") if isinstance(table.this, exp.Expr) else None
        found.append((start if start is not None else float("inf"), i, name))
    if any(f[0] == float("inf") for f in found):
        found.sort(key=lambda f: f[1])
    else:
        found.sort()
    return list(dict.fromkeys(name for _, _, name in found))


@lru_cache(maxsize=4096)
def is_ordered(sql: str) -> bool:
    """True iff the top-level query orders its result (ORDER BY on the outer SELECT, or at
    the end of a UNION/INTERSECT/EXCEPT); ORDER BY inside subqueries or CTEs does not count.
    False when the SQL does not parse."""
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except Exception:  # noqa: BLE001 - unparsable SQL is simply "not ordered"
        return False
    while isinstance(tree, (exp.Subquery, exp.Paren)):
        if tree.args.get("order"):
            return True
        tree = tree.this
    if isinstance(tree, (exp.Select, exp.SetOperation)):
        return bool(tree.args.get("order"))
    return False
