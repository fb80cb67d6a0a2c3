"""Naming styles: how one database spells its tables and columns.

Real schemas disagree on spelling (`customers.customer_id`, `Customer.CustomerId`,
`tbl_cust.cust_id`, `EMPLOYEES.EMP_SALARY` ...), so each database gets one style, drawn
from the world seed, and the agent has to read the schema instead of guessing names.
Questions never see these names: they speak in concepts ("customers", "hire date").

Guards: every identifier is a plain `[A-Za-z][A-Za-z0-9_]*` word, is not an SQLite
keyword (a table called `order`, `match` or `transaction` would force quoting on the
agent), and is unique case-insensitively among tables and within its table (SQLite
compares names case-insensitively). What a style cannot satisfy falls back to a longer
spelling rather than failing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sqlenv.data.world.spec import Domain, Table

# SQLite's keyword list (sqlite.org/lang_keywords.html) plus type and function names a
# reader would trip over.
RESERVED = frozenset("""
abort action add after all alter always analyze and as asc attach autoincrement before begin between by
cascade case cast check collate column commit conflict constraint create cross current current_date
current_time current_timestamp database default deferrable deferred delete desc detach distinct do drop
each else end escape except exclude exclusive exists explain fail filter first following for foreign from
full generated glob group groups having if ignore immediate in index indexed initially inner insert instead
intersect into is isnull join key last left like limit match materialized natural no not nothing notnull
null nulls of offset on or order others outer over partition plan pragma preceding primary query raise
range recursive references regexp reindex release rename replace restrict returning right rollback row
rows savepoint select set table temp temporary then ties to transaction trigger unbounded union unique
update using vacuum values view virtual when where window with without
int integer real text blob numeric min max avg sum count
""".split())

# Abbreviations a schema author might use; other words of 8+ letters keep their first 4.
ABBREVIATIONS = {
    "customer": "cust", "department": "dept", "employee": "emp", "number": "num", "quantity": "qty",
    "amount": "amt", "date": "dt", "address": "addr", "category": "cat", "product": "prod", "order": "ord",
    "experience": "exp", "years": "yrs", "year": "yr", "population": "pop", "capacity": "cap",
    "transaction": "txn", "reservation": "resv", "appointment": "appt", "prescription": "rx",
    "passenger": "pax", "rating": "rtg", "registration": "regn", "hours": "hrs", "minutes": "mins",
    "seconds": "secs", "weekly": "wk", "vacation": "vac", "performance": "perf", "calories": "cal",
    "duration": "dur", "commission": "comm", "median": "med", "income": "inc", "annual": "ann",
    "visitors": "vstrs", "value": "val", "student": "stu", "teacher": "tchr", "enrollment": "enrl",
    "semester": "sem", "building": "bldg", "member": "mbr", "membership": "mbrshp", "branch": "br",
    "language": "lang", "publication": "pub", "distance": "dist", "elevation": "elev", "aircraft": "acft",
    "airport": "apt", "flight": "flt", "destination": "dest", "origin": "orig", "departure": "dep",
    "vessel": "ves", "voyage": "voy", "shipment": "shpmt", "tracking": "trk", "weight": "wt",
    "declared": "decl", "priority": "prio", "country": "ctry", "neighborhood": "nbhd", "property": "prop",
    "agency": "agcy", "agent": "agt", "listing": "lstg", "financing": "fin", "restaurant": "rest",
    "cuisine": "cuis", "vegetarian": "veg", "nightly": "ntly", "guest": "gst", "hotel": "htl",
    "loyalty": "loy", "channel": "chnl", "principal": "prin", "interest": "intr", "account": "acct",
    "balance": "bal", "segment": "seg", "credit": "cred", "museum": "mus", "artwork": "artwk",
    "exhibition": "exhib", "movement": "mvmt", "record": "rec", "label": "lbl", "album": "alb",
    "explicit": "expl", "formation": "form", "league": "lg", "team": "tm", "player": "plr",
    "position": "pos", "founding": "fndg", "jersey": "jsy", "stadium": "stad", "attendance": "attnd", "primary": "pri",
    "color": "clr", "coach": "cch", "salary": "sal", "studio": "stdo", "director": "dir", "budget": "bdgt",
    "casting": "cstg", "location": "loc", "parking": "pkg", "mileage": "mil", "plate": "plt",
    "license": "lic", "rental": "rntl", "total": "tot", "trainer": "trnr", "session": "sess",
    "specialty": "spec", "hourly": "hrly", "monthly": "mthly", "clinic": "clin", "species": "spcs",
    "owner": "ownr", "doctor": "doc", "patient": "pat", "insurer": "ins", "medication": "meds",
    "gender": "gndr", "status": "stat", "region": "rgn", "office": "ofc", "project": "proj",
    "assignment": "asgmt", "throughput": "thru", "operator": "oper", "advisor": "adv",
}


@dataclass(frozen=True)
class Style:
    name: str
    case: str  # snake | pascal | camel | upper
    plural: bool  # table names plural?
    prefix: str = ""  # table-name prefix ("tbl_")
    pk: str = "id"  # "id" or "table_id" (<table words>_id)
    abbreviate: bool = False  # abbreviate words in table and column names
    column_prefix: bool = False  # every column starts with the table's abbreviation


STYLES: tuple[Style, ...] = (
    Style("snake_plural", "snake", plural=True),
    Style("snake_singular", "snake", plural=False, pk="table_id"),
    Style("pascal", "pascal", plural=False, pk="table_id"),
    Style("camel", "camel", plural=True),
    Style("abbreviated", "snake", plural=False, pk="table_id", abbreviate=True),
    Style("tbl_prefix", "snake", plural=False, prefix="tbl_"),
    Style("column_prefix", "snake", plural=True, column_prefix=True),
    Style("upper", "upper", plural=True),
)
STYLE_NAMES = tuple(s.name for s in STYLES)


@dataclass
class Naming:
    """The SQL names of one database: tables, primary keys and columns by concept."""

    style: str
    tables: dict[str, str] = field(default_factory=dict)  # singular concept -> table name
    pks: dict[str, str] = field(default_factory=dict)  # singular concept -> pk column
    columns: dict[tuple[str, str], str] = field(default_factory=dict)  # (table, column concept) -> name


def _words(phrase: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9]+", phrase.lower()) if w]


def _join(words: list[str], case: str) -> str:
    if case == "snake":
        return "_".join(words)
    if case == "upper":
        return "_".join(words).upper()
    if case == "pascal":
        return "".join(w.capitalize() for w in words)
    if case == "camel":
        return words[0] + "".join(w.capitalize() for w in words[1:])
    raise ValueError(f"unknown case {case!r}")


def _abbrev(word: str) -> str:
    return ABBREVIATIONS.get(word, word[:4] if len(word) >= 8 else word)


def _table_abbrev(t: Table) -> list[str]:
    return [t.abbrev] if t.abbrev else [_abbrev(w) for w in _words(t.singular)]


def _ok(name: str, taken: set[str]) -> bool:
    return name.lower() not in RESERVED and name.lower() not in taken


def name_database(domain: Domain, style: Style, renames: dict[tuple[str, str], list[str]] | None = None) -> Naming:
    """Spell every table, primary key and column of `domain` in `style`; `renames` ((table, column concept) -> words,
    `synonyms.py`) spells those columns from other words than their own."""
    out = Naming(style.name)
    taken_tables: set[str] = set()
    table_case = "pascal" if style.case == "camel" else style.case  # camelCase tables read as Pascal
    for t in domain.tables:
        words = _words(t.plural if style.plural else t.singular)
        base = [_abbrev(w) for w in words] if style.abbreviate else words
        candidates = [style.prefix + _join(base, table_case), style.prefix + _join(_words(t.plural), table_case),
                      style.prefix + _join(words + ["info"], table_case)]
        name = next(c for c in candidates if _ok(c, taken_tables))
        taken_tables.add(name.lower())
        out.tables[t.singular] = name
        out.pks[t.singular], columns = _name_columns(t, style, renames or {})
        out.columns.update(columns)
    return out


def _name_columns(
    t: Table, style: Style, renames: dict[tuple[str, str], list[str]]
) -> tuple[str, dict[tuple[str, str], str]]:
    """Primary key name and column names of one table, unique within the table."""
    tab = _table_abbrev(t)
    own = [_abbrev(w) for w in _words(t.singular)] if style.abbreviate else _words(t.singular)

    def spell(words: list[str], abbreviate: bool) -> str:
        ws = [_abbrev(w) for w in words] if abbreviate else list(words)
        if style.column_prefix:
            # `orders.order_number` becomes `ord_number`, not `ord_order_number`.
            table_words = _words(t.singular)
            if ws[: len(table_words)] == table_words and len(ws) > len(table_words):
                ws = ws[len(table_words):]
            ws = tab + ws if ws[: len(tab)] != tab else ws
        return _join(ws, style.case)

    if style.column_prefix:
        pk = spell(["id"], False)
    else:
        pk = _join(own + ["id"] if style.pk == "table_id" else ["id"], style.case)
    taken = {pk.lower()}
    names: dict[tuple[str, str], str] = {}
    for c in t.columns:
        words = _words(" ".join(c.words)) + (["id"] if c.kind == "fk" else [])
        # Fallbacks, in order: a renamed spelling, the style's spelling, unabbreviated, with the table's
        # abbreviation in front (avoids keywords such as a bare `order`), then numbered.
        other = renames.get((t.singular, c.concept))
        candidates = [spell(other, style.abbreviate), spell(other, False)] if other else []
        candidates += [spell(words, style.abbreviate), spell(words, False), _join(tab + words, style.case)]
        candidates += [_join(tab + words + [str(i)], style.case) for i in range(2, 9)]
        name = next(n for n in candidates if _ok(n, taken))
        taken.add(name.lower())
        names[(t.singular, c.concept)] = name
    return pk, names
