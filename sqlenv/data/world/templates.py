"""Shared machinery for question templates: the registry, SQL literals and English phrasing.

A template is a function `(ctx) -> Candidate | None` that picks tables, columns and values
from a `DbView`, then writes one question in concepts and its gold SQL in the database's
spelling. It returns None when the database lacks the material (no numeric column, no
two-hop chain, ...). Its registered level is only an *intention* used to steer sampling;
the label every question carries comes from `sqlenv.data.hardness.hardness(gold_sql)`.

Values are drawn from the rows actually written, so most answers are non-empty; a template
registered with `empty=True` can also produce an empty-by-design question (a value that
exists in the vocabulary but not in the data) when `ctx.empty` asks for one.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlenv.data.world.schema import ColumnView, DbView, Edge, TableView


@dataclass(frozen=True)
class Candidate:
    text: str
    sql: str
    empty: bool = False  # the gold result is meant to be empty


@dataclass
class Ctx:
    db: DbView
    rng: random.Random
    empty: bool = False  # this draw should be empty by design (only for empty=True templates)


@dataclass(frozen=True)
class Template:
    name: str
    level: str  # intended Spider level; steering only, never the label
    fn: Callable[[Ctx], Candidate | None]
    empty: bool  # can produce empty-by-design questions


TEMPLATES: list[Template] = []


def template(level: str, *, empty: bool = False):
    def register(fn: Callable[[Ctx], Candidate | None]):
        TEMPLATES.append(Template(fn.__name__, level, fn, empty))
        return fn

    return register


# --- SQL and English formatting -----------------------------------------------------------


def lit(v: Any) -> str:
    """SQL literal; strings quoted with '' escaping (names like O'Brien occur)."""
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, float):
        return repr(v)
    return str(int(v))


def say(v: Any) -> str:
    """A value as a question writes it: exactly what the data holds, without float noise."""
    if isinstance(v, float):
        return f"{v:.2f}".rstrip("0").rstrip(".")
    return str(v)


def plural(noun: str) -> str:
    """English plural of a concept phrase: 'city' -> 'cities', 'number of pages' -> 'numbers of
    pages', 'years of experience' and 'goals' unchanged (already plural)."""
    head, sep, tail = (re.split(r"( of | in | per )", noun, maxsplit=1) + ["", ""])[:3]
    if head.endswith("s") and not head.endswith(("ss", "us", "is")):
        return noun
    if head.endswith("y") and head[-2:-1] not in "aeiou":
        head = head[:-1] + "ies"
    elif head.endswith(("s", "sh", "ch", "x")):
        head += "es"
    else:
        head += "s"
    return head + sep + tail


_AN = re.compile(r"\b([Aa]) (?=[aeiouAEIOU])")


def phrase(rng: random.Random, options: Sequence[str], **kw: Any) -> str:
    text = _AN.sub(lambda m: m.group(1) + "n ", rng.choice(options).format(**kw))  # "a enrollment date"
    return text[0].upper() + text[1:]


def rel(e: Edge, name: str) -> str:
    """'whose department is Sales' / 'whose origin airport is X': the child -> parent link."""
    return f"whose {e.role} is {name}"


def rev(e: Edge) -> str:
    """The children of one parent as a noun phrase: 'employees' or 'flights (as origin airport)'."""
    return e.child.pl if e.role == e.parent.sg else f"{e.child.pl} (as {e.role})"


def is_the_role_of(e: Edge, some: str) -> str:
    """'that is the operator of some vessel' / 'that has some book' (no 'author of ... author')."""
    return f"that has some {some}" if e.role == e.parent.sg else f"that is the {e.role} of some {some}"


def lab_pl(t: TableView) -> str:
    return plural(t.label.concept) if t.label else ""


# --- picking material -----------------------------------------------------------------------


def tables_with(ctx: Ctx, *kinds: str, label: bool = True) -> list[TableView]:
    out = []
    for t in ctx.db.tables.values():
        if label and t.label is None:
            continue
        if all(t.of_kind(k) for k in kinds):
            out.append(t)
    return out


def pick(ctx: Ctx, seq: Sequence[Any]) -> Any | None:
    return ctx.rng.choice(seq) if seq else None


def counts(t: TableView, col: ColumnView) -> Counter:
    return Counter(v for v in t.values(col) if v is not None)


def absent_value(t: TableView, col: ColumnView) -> Any | None:
    """A vocabulary value the column never takes (for empty-by-design filters)."""
    present = set(t.present(col))
    missing = [v for v in col.spec.params if v not in present]
    return missing[0] if missing else None


def small_group_value(ctx: Ctx, t: TableView, col: ColumnView, lo: int = 1, hi: int = 15) -> Any | None:
    """A value of `col` shared by lo..hi rows (so a listing question stays typeable)."""
    options = [v for v, n in counts(t, col).items() if lo <= n <= hi]
    return pick(ctx, sorted(options, key=str))


def threshold(ctx: Ctx, t: TableView, col: ColumnView, above: bool, most: int = 12) -> Any | None:
    """A data value such that 1..`most` rows lie strictly above (or below) it."""
    vals = sorted({v for v in t.values(col) if v is not None}, reverse=above)
    if len(vals) < 3:
        return None
    j = ctx.rng.randint(1, min(most, len(vals) - 1))
    return vals[j]


def label_value(ctx: Ctx, t: TableView, where: Callable[[tuple], bool] | None = None) -> str | None:
    rows = [r for r in t.rows if where is None or where(r)]
    return pick(ctx, rows)[t.label.index] if rows and t.label else None


def child_counts(e: Edge) -> Counter:
    """Number of children per parent id through the FK `e` (parents with none are absent)."""
    return Counter(v for v in e.child.values(e.fk) if v is not None)


def parent_label(e: Edge, pid: int) -> str:
    return e.parent.rows[pid - 1][e.parent.label.index]


AGGS = {
    "max": ("maximum", "highest", "largest"),
    "min": ("minimum", "lowest", "smallest"),
    "avg": ("average", "mean"),
    "sum": ("total", "combined"),
}
