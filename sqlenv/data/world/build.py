"""Build the whole procedural world: databases in Spider layout plus checked questions.

`build_world` makes `databases_per_domain` databases for each chosen domain, writes them
as `<out_dir>/<db_id>/<db_id>.sqlite` and generates oracle-checked questions over each.
A database is a pure function of (seed, db_id): its naming style, dropped optional tables, side tables
(`side_tables.py`: tables no question reads), renamed columns (`synonyms.py`), row counts, values and questions
all derive from a hash of both, so building a subset of domains yields exactly the databases the full world has
under those ids.

Writes are atomic (`sqlenv.files.atomic_dir`): everything is built in a temporary sibling
folder and swapped into place at the end (replacing an earlier build); on any error the
temporary folder is removed and `out_dir` is left as it was. Nothing but database folders
goes into `out_dir`.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlenv.data.world.domains import DOMAINS, select_domains
from sqlenv.data.world.generate import generate_questions
from sqlenv.data.world.naming import STYLES, name_database
from sqlenv.data.world.populate import fill, write_sqlite
from sqlenv.data.world.schema import DbView
from sqlenv.data.world.side_tables import pick_side_tables
from sqlenv.data.world.spec import Domain, longest_chain
from sqlenv.data.world.synonyms import draw_renames
from sqlenv.data.world.values import ValueSource
from sqlenv.files import atomic_dir
from sqlenv.types import HARDNESS_LEVELS, Question, db_file, stable_hash


@dataclass
class WorldResult:
    questions: list[Question]
    stats: dict[str, Any] = field(default_factory=dict)


def db_seed(seed: int, db_id: str) -> int:
    """A 63-bit seed for one database; stable across runs and Python versions (no hash())."""
    return stable_hash("sqlenv-world", seed, db_id) >> 1


def _variant(domain: Domain, rng: random.Random) -> Domain:
    """Drop some optional leaf tables, keeping 3+ tables and a 2-hop FK chain."""
    tables = list(domain.tables)
    for t in [t for t in domain.tables if t.optional]:
        referenced = any(c.ref == t.singular for other in tables for c in other.fks)
        rest = [x for x in tables if x is not t]
        if rng.random() < 0.35 and not referenced and len(rest) >= 3 and longest_chain(rest) >= 2:
            tables = rest
    return Domain(domain.name, tuple(tables))


def _style(seed: int, domain: str, variant: int):
    # Styles rotate through a seed-shuffled order so that any few databases already differ;
    # the position depends only on the domain and variant, not on which domains are built.
    order = list(STYLES)
    random.Random(f"sqlenv-world-styles:{seed}").shuffle(order)
    return order[(DOMAINS.index(domain) + 3 * (variant - 1)) % len(order)]


def build_world(
    out_dir: str | os.PathLike[str],
    *,
    seed: int = 0,
    domains: Sequence[str] | None = None,
    databases_per_domain: int = 2,
    questions_per_db: int = 130,
    max_answer_rows: int = 20,
    level_shares: dict[str, float] | None = None,
    side_tables: int = 0,
    renamed_columns: float = 0.0,
) -> WorldResult:
    """Write the world's databases under `out_dir` and return its questions and stats.

    `side_tables`: each database also gets 0..this many tables no question reads (`side_tables.py`).
    `renamed_columns`: about this share of each database's columns is spelled from other words than the questions
    use (`synonyms.py`)."""
    if databases_per_domain < 1 or questions_per_db < 1:
        raise ValueError("databases_per_domain and questions_per_db must be >= 1")
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    specs = select_domains(domains)
    questions: list[Question] = []
    per_db: dict[str, dict[str, Any]] = {}
    rejected: Counter = Counter()
    empty = 0
    with atomic_dir(out_dir) as tmp:
        for domain in specs:
            for v in range(1, databases_per_domain + 1):
                db_id = f"{domain.name}_{v}"
                s = db_seed(seed, db_id)
                spec = _variant(domain, random.Random(s))
                side = pick_side_tables(seed, db_id, side_tables, {t.singular for t in spec.tables})
                written = Domain(spec.name, spec.tables + side)  # side tables last: the domain's names and rows stay
                renames = draw_renames(written.tables, renamed_columns, seed, db_id)
                naming = name_database(written, _style(seed, domain.name, v), renames)
                view = fill(db_id, written, naming, ValueSource(s))
                path = db_file(tmp, db_id)
                write_sqlite(view, path)
                asked = DbView(view.db_id, view.domain, view.style,
                               {k: t for k, t in view.tables.items() if k in {x.singular for x in spec.tables}})
                made = generate_questions(asked, path, n=questions_per_db, seed=s, max_rows=max_answer_rows,
                                          shares=level_shares)
                questions += made.questions
                rejected.update(made.rejected)
                empty += made.empty_by_design
                per_db[db_id] = {
                    **view.summary(),
                    "side_tables": [t.name for k, t in view.tables.items() if k not in asked.tables],
                    "renamed_columns": len(renames),
                    "questions": len(made.questions),
                    "hardness": dict(Counter(q.hardness for q in made.questions)),
                    "empty_by_design": made.empty_by_design,
                    "rejected": dict(made.rejected),
                    "attempts": made.attempts,
                }
    return WorldResult(questions, _stats(seed, specs, per_db, questions, rejected, empty))


def _stats(seed: int, specs: list[Domain], per_db: dict, questions: list[Question], rejected: Counter,
           empty: int) -> dict[str, Any]:
    levels = Counter(q.hardness for q in questions)
    n = len(questions)
    return {
        "seed": seed,
        "domains": [d.name for d in specs],
        "n_databases": len(per_db),
        "n_questions": n,
        "hardness": {lvl: levels.get(lvl, 0) for lvl in HARDNESS_LEVELS},
        "hardness_share": {lvl: round(levels.get(lvl, 0) / n, 4) if n else 0.0 for lvl in HARDNESS_LEVELS},
        "empty_by_design": empty,
        "rejected": dict(sorted(rejected.items())),
        "naming_styles": sorted({d["naming_style"] for d in per_db.values()}),
        "databases": per_db,
    }
