"""One populated database as the question templates see it: names, concepts and rows.

A `DbView` joins the three things a template needs in one place: the SQL names (from
`naming.py`), the English concepts (from the domain spec) and the rows that were
written (from `populate.py`), so a template can draw a value that exists, phrase the
question in concepts and write gold SQL in this database's spelling. It is an in-memory
mirror of what is on disk; the oracle still runs every gold query against the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlenv.data.world.spec import Column, Table


@dataclass
class ColumnView:
    name: str  # SQL name in this database
    spec: Column
    index: int  # position in the table's row tuples (0 is the primary key)

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def concept(self) -> str:
        return self.spec.concept


@dataclass
class TableView:
    spec: Table
    name: str
    pk: str
    columns: list[ColumnView]
    rows: list[tuple] = field(default_factory=list)

    @property
    def key(self) -> str:
        return self.spec.singular

    @property
    def sg(self) -> str:
        return self.spec.singular

    @property
    def pl(self) -> str:
        return self.spec.plural

    @property
    def label(self) -> ColumnView | None:
        return next((c for c in self.columns if c.kind == "label"), None)

    def of_kind(self, kind: str) -> list[ColumnView]:
        return [c for c in self.columns if c.kind == kind]

    def values(self, col: ColumnView) -> list[Any]:
        return [r[col.index] for r in self.rows]

    def present(self, col: ColumnView) -> list[Any]:
        """Distinct non-NULL values in first-seen order (deterministic, unlike a set)."""
        return list(dict.fromkeys(v for v in self.values(col) if v is not None))


@dataclass(frozen=True)
class Edge:
    """One foreign key: `child.fk` references `parent`'s primary key."""

    child: TableView
    fk: ColumnView
    parent: TableView

    @property
    def role(self) -> str:
        return self.fk.spec.role


@dataclass
class DbView:
    db_id: str
    domain: str
    style: str
    tables: dict[str, TableView]  # by singular concept, in creation order

    @property
    def edges(self) -> list[Edge]:
        return [Edge(t, c, self.tables[c.spec.ref]) for t in self.tables.values() for c in t.of_kind("fk")]

    def children(self, parent: TableView) -> list[Edge]:
        return [e for e in self.edges if e.parent.key == parent.key]

    def chains(self) -> list[tuple[Edge, Edge]]:
        """Two-hop FK paths child -> parent -> grandparent."""
        return [(a, b) for a in self.edges for b in self.edges if b.child.key == a.parent.key]

    def longest_chain(self) -> int:
        memo: dict[str, int] = {}

        def depth(t: TableView) -> int:
            if t.key not in memo:
                memo[t.key] = max((1 + depth(self.tables[c.spec.ref]) for c in t.of_kind("fk")), default=0)
            return memo[t.key]

        return max((depth(t) for t in self.tables.values()), default=0)

    def summary(self) -> dict[str, Any]:
        """What the stats and metrics files report for this database."""
        return {
            "domain": self.domain,
            "naming_style": self.style,
            "tables": len(self.tables),
            "table_names": [t.name for t in self.tables.values()],
            "rows": {t.name: len(t.rows) for t in self.tables.values()},
            "total_rows": sum(len(t.rows) for t in self.tables.values()),
            "foreign_keys": len(self.edges),
            "fk_chain_max": self.longest_chain(),
        }
