"""Renamed columns: SQL names a question's words do not give away.

The world's questions speak in concepts ("hire date", "name") and, without this, every style spells the column from
the same words (`hire_date`, `HireDate`, `emp_hire_dt`): a model can write a query from the question alone, and
every table's label column is `name`, so `T1.name` runs whichever table T1 is. Real schemas are not like that: a
concert's name is `concert_Name`, a singer's nationality `Citizenship`, a department's budget
`Budget_in_Billions`. The dominant failure of the synthetic-trained agent on real databases is exactly that guess
(a column under a table that lacks it: `experiments/error_hints_48/`).

With `world.renamed_columns: p` a share p of each database's columns takes another spelling (a stable draw from the
database's seed, its own random stream: rows, values and questions stay what they are without it): a column called
`name` becomes `<table> name` (or, for a person, `full name`); another column swaps one of its words for a synonym
(`salary` -> `pay`, `birth date` -> `born date`, `population` -> `inhabitants`), or, where no word has one, puts its
table's name in front (`gpa` -> `student gpa`). The questions do not change; only reading the schema tells the agent
what a column is called. Key columns (`id`, foreign keys) keep their names.
"""

from __future__ import annotations

import random

from sqlenv.data.world.spec import Column, Table

# One word -> words that could stand for it in a column name. Chosen to read naturally in any column it occurs in
# (`start date` -> `start day`, `shipping cost` -> `shipping charge`); a renamed column that would be an SQLite
# keyword or clash with another column falls back to its usual spelling (`naming.py`).
SYNONYMS: dict[str, tuple[str, ...]] = {
    "date": ("day",), "year": ("yr",), "birth": ("born",), "salary": ("pay", "wage"),
    "price": ("cost", "amount"), "cost": ("charge", "expense"), "fee": ("charge",), "rate": ("tariff",),
    "rating": ("score", "grade"), "score": ("points",), "number": ("no", "code", "ref"), "count": ("total", "num"),
    "capacity": ("max occupancy", "size"), "population": ("inhabitants", "residents"), "country": ("nation",),
    "nationality": ("citizenship",), "city": ("town",), "status": ("state", "condition"), "phone": ("telephone",),
    "email": ("mail", "email address"), "experience": ("seniority",), "budget": ("funding", "allocation"),
    "opening": ("opened",), "founding": ("founded",), "formation": ("formed",), "built": ("constructed",),
    "genre": ("style", "kind"), "days": ("day count",), "seats": ("places", "seat count"), "gender": ("sex",),
    "address": ("street",), "reason": ("cause", "purpose"), "role": ("part", "function"),
    "specialty": ("field", "speciality"), "weight": ("mass",), "continent": ("world region",),
    "title": ("heading",), "position": ("post",), "level": ("tier",), "grade": ("mark",), "credits": ("points",),
    "language": ("tongue", "lang"), "pages": ("page count",), "medium": ("material",), "value": ("worth",),
    "type": ("kind", "category"), "amount": ("sum",), "balance": ("funds",), "quantity": ("units", "qty"),
    "calories": ("energy",), "stars": ("star rating",), "nights": ("night count",), "attendance": ("crowd",),
    "goals": ("goal count",), "plays": ("play count", "listens"), "mileage": ("odometer",), "color": ("colour",),
    "runtime": ("length",), "duration": ("length",), "distance": ("length",), "elevation": ("altitude",),
    "income": ("earnings",), "principal": ("loan amount",), "bedrooms": ("rooms",), "model": ("make",),
    "insurer": ("insurance",), "medication": ("drug",), "diet": ("dietary",), "comment": ("remark", "text"),
    "age": ("years old",), "minutes": ("mins",), "district": ("area",), "region": ("area",), "chain": ("brand",),
    "channel": ("source",), "segment": ("tier",), "mood": ("feeling",), "format": ("form",), "plan": ("package",),
    "membership": ("subscription",), "category": ("group",), "cuisine": ("food style",), "course": ("dish type",),
    "total": ("overall",), "floor": ("storey",), "building": ("block",), "semester": ("term",),
    "job": ("work",), "hours": ("hrs",), "visitors": ("guests",), "species": ("animal kind",),
}


def renamed_words(table: Table, column: Column, rng: random.Random) -> list[str] | None:
    """Other words for `column`'s SQL name in `table`, or None where it keeps its own (keys, and nothing to swap)."""
    if column.kind == "fk":
        return None
    words = [w.lower() for w in column.words]
    own = table.singular.lower().split()
    if words == ["name"]:  # a concert's name is `concert_name`, a person's perhaps `full_name`
        return rng.choice([own + words, ["full", "name"]]) if column.gen == "person" else own + words
    swappable = [i for i, w in enumerate(words) if w in SYNONYMS]
    if not swappable:
        return own + words if words[: len(own)] != own else None
    i = rng.choice(swappable)
    return words[:i] + rng.choice(SYNONYMS[words[i]]).split() + words[i + 1:]


def draw_renames(tables: tuple[Table, ...], share: float, seed: int, db_id: str) -> dict[tuple[str, str], list[str]]:
    """(table, column concept) -> the words its SQL name is spelled from instead of its own, for about `share` of
    the database's columns; the same draw for the same (seed, db_id, share) and table list."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"world.renamed_columns must be between 0 and 1, got {share}")
    if share == 0.0:
        return {}
    rng = random.Random(f"sqlenv-world-renames:{seed}:{db_id}")
    out: dict[tuple[str, str], list[str]] = {}
    for t in tables:
        for c in t.columns:
            if rng.random() < share:
                words = renamed_words(t, c, rng)
                if words:
                    out[(t.singular, c.concept)] = words
    return out
