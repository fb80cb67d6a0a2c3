"""Teacher moves of an agent that does not know the answer: which tables to look at, and the values a filter names.

The scripted SFT teacher (`sqlenv.data.sft_data`) knows the gold SQL; these helpers make its trajectories show what a
model has to do without it, each step a real call through the environment:

- `table_relevance` / `distractor_table`: rank a database's tables by how much their names share with the question's
  words (`passenger_id` and "passengers" share "passenger"). An `explore` trajectory describes the tables in that
  order, one of them outside the gold query (the most question-like one: what a model would open too), and moves on;
- `text_filters`: the `column = 'text'` comparisons of the gold SQL with the table each column belongs to;
- `value_check_sql`: the query that shows how a filtered column spells its values (`SELECT DISTINCT col FROM t`,
  narrowed by `LIKE` on the word of the value that leaves the fewest when the column has many) — a `value_check`
  trajectory runs it before filtering;
- `misspelled_filter`: the gold SQL with one text value in the case a question might write it (`'delayed'` for
  `'Delayed'`), kept only if the database really returns no rows for it. An `empty_recovery` trajectory runs that
  first, sees `(0 rows)`, checks the column's values, and runs the corrected query — what a value spelled otherwise
  asks for on a real database ('USA' vs 'United States', 'F' vs 'female'), never a repeat of the query that came
  back empty;
- `wrong_join`: the gold SQL with one side of a join condition moved to another key column of its table
  (`T1.flight_id = T2.aircraft_id` for `T1.flight_id = T2.flight_id`), kept only if the database really returns
  nothing for it. A `wrong_join` trajectory runs that before describing the table whose foreign key names the
  join, sees `(0 rows)`, describes it and runs the corrected query: a query that runs but is wrong, recovered by
  reading the schema, not by repeating it;
- `wrong_aliases`: the gold SQL with a column under another table's alias (`T2.Name` for `T1.Name`), for the
  `recovery` kind: the name error real-database episodes met most.

Nothing here reads the question's answer; every choice is a stable hash of (seed, question id) or a property of the
names, so the same data comes out on every machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from sqlenv.env import prompts
from sqlenv.env.sandbox import Sandbox
from sqlenv.types import Question, stable_hash

VALUE_LIST_MAX = 20  # a column with at most this many distinct values is listed whole by the value check
_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> set[str]:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", text)  # camelCase -> camel Case
    return {singular(w) for w in _WORD.findall(spaced.lower().replace("_", " ")) if len(w) > 1}


def singular(word: str) -> str:
    """A lower-case English word's singular, roughly: "flights" -> "flight", "countries" -> "country", "classes" ->
    "class" (so a question's plural meets a table's singular)."""
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "ches", "xes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


def table_relevance(question: str, table: str) -> int:
    """How many words (singular and plural alike) a table's name shares with the question."""
    return len(_words(question) & _words(table))


def distractor_table(question: Question, sandbox: Sandbox, gold_tables: list[str], seed: int) -> str | None:
    """The table outside the gold query a model would most likely open: the most question-like name, ties broken by
    a stable hash. None when every table is a gold one."""
    gold = {t.lower() for t in gold_tables}
    others = [t for t in sandbox.table_names() if t.lower() not in gold]
    if not others:
        return None
    return max(others, key=lambda t: (table_relevance(question.question, t), -stable_hash(seed, f"sft-distractor:{question.id}:{t}")))


def exploration_order(question: Question, tables: list[str], seed: int) -> list[str]:
    """`tables` in the order a reader of the question would open them: most shared words first, then a stable hash."""
    return sorted(tables, key=lambda t: (-table_relevance(question.question, t), stable_hash(seed, f"sft-order:{question.id}:{t}")))


@dataclass(frozen=True)
class TextFilter:
    table: str  # the real table the column belongs to
    column: str  # as written in the gold SQL
    value: str  # the compared text, unquoted


def text_filters(question: Question, sandbox: Sandbox) -> list[TextFilter]:
    """The gold SQL's `column = 'text'` comparisons (either side) whose column resolves to one of its tables."""
    try:
        tree = sqlglot.parse_one(question.gold_sql, read="sqlite")
    except SqlglotError:
        return []
    aliases, owners = {}, {}
    for node in tree.find_all(exp.Table):
        real = sandbox.resolve_table(node.name)
        if real is None:
            continue
        aliases[node.alias_or_name.lower()] = real
        for column in (sandbox.table_info(real).columns if sandbox.table_info(real) else ()):
            owners.setdefault(column.name.lower(), real)
    out: list[TextFilter] = []
    for eq in tree.find_all(exp.EQ):
        column, literal = eq.this, eq.expression
        if isinstance(column, exp.Literal):
            column, literal = literal, column
        if not (isinstance(column, exp.Column) and isinstance(literal, exp.Literal) and literal.is_string):
            continue
        if not any(c.isalpha() for c in literal.this):
            continue
        table = aliases.get(column.table.lower()) if column.table else owners.get(column.name.lower())
        if table is not None:
            out.append(TextFilter(table, column.name, literal.this))
    return list(dict.fromkeys(out))


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else '"' + name.replace('"', '""') + '"'


def value_check_sql(sandbox: Sandbox, flt: TextFilter) -> str | None:
    """A query whose result shows `flt.value` as the database spells it, or None when none would (the value is not
    in the column, or no word of it narrows the column enough)."""
    table, column = _ident(flt.table), _ident(flt.column)
    count = sandbox.execute(f"SELECT count(DISTINCT {column}) FROM {table}")
    if not count.ok or not count.rows:
        return None
    if count.rows[0][0] <= VALUE_LIST_MAX:
        candidates = [f"SELECT DISTINCT {column} FROM {table}"]
    else:
        words = sorted({w for w in re.findall(r"[A-Za-z0-9]{3,}", flt.value)}, key=lambda w: (-len(w), w))
        candidates = [f"SELECT DISTINCT {column} FROM {table} WHERE {column} LIKE {_quote('%' + w.lower() + '%')} LIMIT {VALUE_LIST_MAX}"
                      for w in words]  # fmt: skip
    shown = []  # (rows, sql) of each candidate whose whole result holds the value: the narrowest wins
    for sql in candidates:
        result = sandbox.execute(sql)
        if result.ok and not result.truncated and len(result.rows) <= VALUE_LIST_MAX and (flt.value,) in result.rows:
            shown.append((len(result.rows), sql))
    return min(shown)[1] if shown else None


def case_variants(value: str) -> list[str]:
    """The value as a question might write it: lower case, Title Case, UPPER CASE (those that differ from it)."""
    variants = [value.lower(), value.title(), value.upper()]
    return [v for v in dict.fromkeys(variants) if v != value]


def misspelled_filter(question: Question, sandbox: Sandbox, flt: TextFilter, seed: int) -> str | None:
    """The gold SQL with `flt.value` in another letter case, if the value occurs once in it and the database returns
    nothing for the changed statement (no rows, or only zeros and NULLs: `looks_empty`) while the gold returns
    something; else None."""
    literal = _quote(flt.value)
    if question.gold_sql.count(literal) != 1:
        return None
    gold = sandbox.execute(question.gold_sql)
    if not gold.ok or looks_empty(gold.rows):
        return None  # the gold result must differ from what the changed statement returns
    variants = sorted(case_variants(flt.value), key=lambda v: stable_hash(seed, f"sft-case:{question.id}:{v}"))
    for variant in variants:
        sql = question.gold_sql.replace(literal, _quote(variant))
        result = sandbox.execute(sql)
        if result.ok and looks_empty(result.rows):
            return sql
    return None


def looks_empty(rows: list[tuple]) -> bool:
    """No rows, or only zeros and NULLs (`count(*)` of nothing is 0, `max` of nothing NULL): a result to doubt."""
    return all(all(cell in (None, 0) for cell in row) for row in rows)


def shows_nothing(observation: str) -> bool:
    """A rendered result `looks_empty` would accept: "(0 rows)", or cells that are all zeros and NULLs."""
    if prompts.without_notes(observation).endswith("(0 rows)"):
        return True
    cells = prompts.result_cells(observation)  # none for an error or a table description
    return bool(cells) and all(cell in ("0", "NULL", "0.0") for cell in cells)


def splice(sql: str, ident: exp.Identifier, replacement: str) -> str | None:
    """`sql` with the identifier `ident` (located by sqlglot) replaced in place; None without reliable offsets."""
    start, end = ident.meta.get("start"), ident.meta.get("end")
    if start is None or end is None or sql[start : end + 1] != ident.name:
        return None  # no reliable offsets: better no corruption than a corrupted statement we can't explain
    return sql[:start] + replacement + sql[end + 1 :]


@dataclass(frozen=True)
class WrongJoin:
    sql: str
    table: str  # the real table whose foreign key names the right join (the one to describe after the empty result)


def wrong_join(question: Question, sandbox: Sandbox, seed: int) -> WrongJoin | None:
    """The gold SQL with one column of a `JOIN ... ON a = b` moved to another key column (the primary key or an
    `*_id` column) of the same table, if the database returns nothing for it while the gold returns something."""
    try:
        tree = sqlglot.parse_one(question.gold_sql, read="sqlite")
    except SqlglotError:
        return None
    gold = sandbox.execute(question.gold_sql)
    if not gold.ok or looks_empty(gold.rows):
        return None
    aliases = {}
    for node in tree.find_all(exp.Table):
        real = sandbox.resolve_table(node.name)
        if real is not None:
            aliases[node.alias_or_name.lower()] = real
    options: list[WrongJoin] = []
    for join in tree.find_all(exp.Join):
        on = join.args.get("on")
        if not (isinstance(on, exp.EQ) and isinstance(on.this, exp.Column) and isinstance(on.expression, exp.Column)):
            continue
        sides = [(c, aliases.get(c.table.lower())) for c in (on.this, on.expression)]
        if any(t is None or not c.table for c, t in sides):
            continue
        infos = {t: sandbox.table_info(t) for _, t in sides}
        # the table holding the foreign key that names this join: describing it shows the right pair
        owner = next((t for c, t in sides if infos[t] and any(fk.column.lower() == c.name.lower()
                                                                  for fk in infos[t].foreign_keys)), sides[0][1])  # fmt: skip
        for column, table in sides:
            info = infos[table]
            if info is None or column.this.quoted:
                continue
            keys = [c.name for c in info.columns if c.name.lower() != column.name.lower()
                    and (c.primary_key or c.name.lower().endswith("id"))]  # fmt: skip
            for key in sorted(keys, key=lambda k: stable_hash(seed, f"sft-join:{question.id}:{k}")):
                sql = splice(question.gold_sql, column.this, key)
                if sql is None:
                    continue
                result = sandbox.execute(sql)
                if result.ok and looks_empty(result.rows):
                    options.append(WrongJoin(sql, owner))
                    break
    if not options:
        return None
    return min(options, key=lambda w: stable_hash(seed, f"sft-join-pick:{question.id}:{w.sql}"))


@dataclass(frozen=True)
class WrongQuery:
    """A corruption of the gold SQL that fails with a real name error (`sft_data.wrong_queries`, `wrong_aliases`)."""

    sql: str
    kind: str  # "column" | "table" | "alias" (a column qualified by another table's alias: `T2.name` for `T1.name`)
    original: str
    guess: str
    table: str  # the real table the renamed reference belongs to (the one to describe after the error)


def wrong_aliases(
    tree: exp.Expression, sql: str, sandbox: Sandbox, aliases: dict[str, str], tables: dict
) -> list[WrongQuery]:
    """Single-qualifier corruptions of `sql`: a column qualified by the alias of a query table that lacks it
    (`T2.Name` where `Name` belongs to T1's table) — the name error Spider episodes met most. `aliases`: alias (lower
    case) -> real table; `tables`: real table -> its TableInfo (both as `sft_data.wrong_queries` builds them)."""
    columns = {t: {c.name.lower() for c in info.columns} for t, info in tables.items() if info}
    out = []
    for node in tree.find_all(exp.Column):
        qualifier = node.args.get("table")
        if not isinstance(qualifier, exp.Identifier) or qualifier.quoted or not isinstance(node.this, exp.Identifier):
            continue
        owner = aliases.get(qualifier.name.lower())
        if owner is None:
            continue
        for alias, table in sorted(aliases.items()):
            if table != owner and node.name.lower() not in columns.get(table, set()) and alias != qualifier.name.lower():
                spelled = next((t.alias_or_name for t in tree.find_all(exp.Table) if t.alias_or_name.lower() == alias), alias)
                wrong = splice(sql, qualifier, spelled)
                if wrong:
                    out.append(WrongQuery(wrong, "alias", f"{qualifier.name}.{node.name}", f"{spelled}.{node.name}", owner))
                    break
    return out
