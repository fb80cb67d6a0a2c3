"""Declarative vocabulary for describing a domain's schema at the level of *concepts*.

A domain (say "hospital") is a handful of tables; each table is a concept ("doctor",
"doctors") with typed columns, and each column carries what three later steps need:
how to fill it (`gen` + `params`), how to name it in SQL (`ident` words, re-styled per
database by `naming.py`) and how to say it in English (`concept`). Nothing here knows
about SQL identifiers, data or questions; the constructors (`label`, `cat`, `num`, ...)
only keep the catalogues in `catalog_*.py` short and readable.

Column kinds and what the question templates may do with them:
- label: the human name of a row ("name", "title", "flight number"); unique per table.
- cat:   a small categorical vocabulary ("status"), good for filters and GROUP BY.
- num:   int or real measure ("salary"), good for comparisons, aggregates and ORDER BY.
- date:  ISO text "YYYY-MM-DD", compared as text (ISO sorts chronologically).
- text:  free text noise (email, phone); never asked about, it makes schemas realistic.
- fk:    a reference to another table's primary key, with a popularity skew.
"""

from __future__ import annotations

from dataclasses import dataclass, field

KINDS = ("label", "cat", "num", "date", "text", "fk")


@dataclass(frozen=True)
class Column:
    concept: str  # English phrase used in questions ("hire date")
    kind: str
    ident: str = ""  # words of the SQL name before styling; defaults to the concept
    gen: str = ""  # value generator key (values.py) for label/text; "int"/"real" for num
    params: tuple = ()
    null_frac: float = 0.0  # share of NULLs in optional columns
    ref: str = ""  # fk: the referenced table's singular concept
    role: str = ""  # fk: English noun for the relation ("origin airport"); defaults to ref
    skew: float = 1.0  # fk/cat: Zipf exponent of target popularity (0 = uniform)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown column kind {self.kind!r} for {self.concept!r}")
        if self.kind == "fk" and not self.ref:
            raise ValueError(f"foreign key {self.concept!r} needs a referenced table")

    @property
    def words(self) -> list[str]:
        return (self.ident or self.concept).replace("-", " ").split()


@dataclass(frozen=True)
class Table:
    singular: str
    plural: str
    rows: tuple[int, int]  # inclusive range of row counts, drawn per database
    columns: tuple[Column, ...]
    abbrev: str = ""  # short form for abbreviating styles ("emp"); derived if empty
    optional: bool = False  # a database variant may drop it (only if nothing references it)

    @property
    def label(self) -> Column | None:
        return next((c for c in self.columns if c.kind == "label"), None)

    @property
    def fks(self) -> list[Column]:
        return [c for c in self.columns if c.kind == "fk"]


@dataclass(frozen=True)
class Domain:
    name: str
    tables: tuple[Table, ...] = field(default_factory=tuple)

    def table(self, singular: str) -> Table:
        for t in self.tables:
            if t.singular == singular:
                return t
        raise KeyError(f"{self.name}: no table {singular!r}")

    def validate(self) -> None:
        """Fail loudly on catalogue mistakes: unknown FK targets, cycles, too few tables."""
        names = [t.singular for t in self.tables]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: duplicate table concepts {names}")
        if not 3 <= len(self.tables) <= 7:
            raise ValueError(f"{self.name}: needs 3-7 tables, has {len(self.tables)}")
        order = {n: i for i, n in enumerate(names)}
        for t in self.tables:
            cols = [c.concept for c in t.columns]
            if len(set(cols)) != len(cols):
                raise ValueError(f"{self.name}.{t.singular}: duplicate column concepts")
            for c in t.fks:
                # Parents must be declared first: it makes population order the catalogue
                # order and rules out cycles without a separate check.
                if c.ref not in order or order[c.ref] >= order[t.singular]:
                    raise ValueError(f"{self.name}.{t.singular}: FK to {c.ref!r} must point to an earlier table")
        if longest_chain(self.tables) < 2:
            raise ValueError(f"{self.name}: needs a foreign-key chain of length >= 2")


def longest_chain(tables: tuple[Table, ...] | list[Table]) -> int:
    """Length (in hops) of the longest FK path child -> parent -> grandparent -> ..."""
    by_name = {t.singular: t for t in tables}
    memo: dict[str, int] = {}

    def depth(name: str) -> int:
        if name not in memo:
            memo[name] = max((1 + depth(c.ref) for c in by_name[name].fks if c.ref in by_name), default=0)
        return memo[name]

    return max((depth(t.singular) for t in tables), default=0)


# Constructors: one short line per column in the catalogues.


def label(concept: str = "name", gen: str = "person", *params, ident: str = "") -> Column:
    return Column(concept, "label", ident=ident, gen=gen, params=tuple(params))


def cat(concept: str, values: str | tuple, *, null: float = 0.0, skew: float = 1.0, ident: str = "") -> Column:
    """Categorical column; `values` as "A|B|C" keeps catalogue lines short."""
    vals = tuple(values.split("|")) if isinstance(values, str) else tuple(values)
    return Column(concept, "cat", ident=ident, params=vals, null_frac=null, skew=skew)


def num(concept: str, dist: str, *args: float, real: bool = False, null: float = 0.0, ident: str = "") -> Column:
    """Numeric column. dist: "uniform" lo hi | "lognorm" median spread lo hi | "normal" mean sd lo hi."""
    return Column(concept, "num", ident=ident, gen="real" if real else "int", params=(dist, *args), null_frac=null)


def date(concept: str, first_year: int, last_year: int, *, null: float = 0.0, ident: str = "") -> Column:
    return Column(concept, "date", ident=ident, params=(first_year, last_year), null_frac=null)


def text(concept: str, gen: str, *, null: float = 0.0, ident: str = "") -> Column:
    return Column(concept, "text", ident=ident, gen=gen, null_frac=null)


def fk(ref: str, *, role: str = "", skew: float = 1.0, null: float = 0.0, ident: str = "") -> Column:
    role = role or ref
    return Column(role, "fk", ident=ident or role, ref=ref, role=role, skew=skew, null_frac=null)


def table(singular: str, plural: str, rows: tuple[int, int], *columns: Column, abbrev: str = "",
          optional: bool = False) -> Table:
    return Table(singular, plural, rows, tuple(columns), abbrev=abbrev, optional=optional)
