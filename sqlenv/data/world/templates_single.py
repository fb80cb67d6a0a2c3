"""Single-table question templates: counts, filters, lookups, aggregates, grouping, top-k.

These are mostly Spider "easy" and "medium" shapes (one table; WHERE / GROUP BY / ORDER BY
+ LIMIT). Every template has at least three phrasings and draws its values from the
rows, e.g. a category value shared by a handful of rows so that a listing stays short.
The labeller, not this file, decides each question's level.
"""

from __future__ import annotations

from sqlenv.data.world.templates import (
    AGGS,
    Candidate,
    Ctx,
    absent_value,
    counts,
    lab_pl,
    label_value,
    lit,
    phrase,
    pick,
    plural,
    say,
    small_group_value,
    tables_with,
    template,
    threshold,
)


def round_above(top: float, is_year: bool) -> int:
    """The next 'round' number above `top` (2 significant digits), or the next year."""
    if is_year:
        return int(top) + 1
    step = 10 ** max(len(str(int(abs(top)))) - 2, 0)
    return (int(top) // step + 1) * step


@template("easy")
def count_all(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, list(ctx.db.tables.values()))
    text = phrase(ctx.rng, ("How many {pl} are there?", "Count the {pl}.", "What is the total number of {pl}?",
                            "How many {pl} are recorded?"), pl=t.pl)
    return Candidate(text, f"SELECT count(*) FROM {t.name}")


@template("easy")
def count_cat(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, tables_with(ctx, "cat", label=False))
    c = pick(ctx, t.of_kind("cat")) if t else None
    v = pick(ctx, t.present(c)) if c else None
    if v is None:
        return None
    text = phrase(ctx.rng, ("How many {pl} have {c} {v}?", "Count the {pl} whose {c} is {v}.",
                            "What is the number of {pl} with a {c} of {v}?"), pl=t.pl, c=c.concept, v=v)
    return Candidate(text, f"SELECT count(*) FROM {t.name} WHERE {c.name} = {lit(v)}")


@template("easy", empty=True)
def list_by_cat(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, tables_with(ctx, "cat"))
    c = pick(ctx, t.of_kind("cat")) if t else None
    if c is None:
        return None
    v = absent_value(t, c) if ctx.empty else small_group_value(ctx, t, c)
    if v is None:
        return None
    text = phrase(ctx.rng, ("List the {labs} of {pl} whose {c} is {v}.", "Which {pl} have {c} {v}? Give their {labs}.",
                            "What are the {labs} of all {pl} with {c} {v}?",
                            "Show the {lab} of every {sg} whose {c} is {v}."),
                  labs=lab_pl(t), lab=t.label.concept, pl=t.pl, sg=t.sg, c=c.concept, v=v)
    return Candidate(text, f"SELECT {t.label.name} FROM {t.name} WHERE {c.name} = {lit(v)}", ctx.empty)


@template("easy", empty=True)
def list_by_number(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, tables_with(ctx, "num"))
    c = pick(ctx, t.of_kind("num")) if t else None
    if c is None:
        return None
    above = ctx.empty or ctx.rng.random() < 0.6
    if ctx.empty:  # a round number beyond the largest value: nothing qualifies
        v = round_above(max(v for v in t.values(c) if v is not None), "year" in c.concept)
    else:
        v = threshold(ctx, t, c, above)
    if v is None:
        return None
    word = ctx.rng.choice(("greater than", "above", "more than") if above else ("less than", "below", "under"))
    text = phrase(ctx.rng, ("Which {pl} have a {c} {w} {v}? Give their {labs}.",
                            "List the {labs} of {pl} whose {c} is {w} {v}.",
                            "Find the {pl} with a {c} {w} {v} and list their {labs}."),
                  pl=t.pl, c=c.concept, w=word, v=say(v), labs=lab_pl(t))
    op = ">" if above else "<"
    return Candidate(text, f"SELECT {t.label.name} FROM {t.name} WHERE {c.name} {op} {lit(v)}", ctx.empty)


@template("easy")
def aggregate(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, tables_with(ctx, "num", label=False))
    c = pick(ctx, t.of_kind("num")) if t else None
    if c is None:
        return None
    agg = ctx.rng.choice(sorted(AGGS))
    text = phrase(ctx.rng, ("What is the {w} {c} of all {pl}?", "Find the {w} {c} among {pl}.",
                            "Across all {pl}, what is the {w} {c}?"), w=ctx.rng.choice(AGGS[agg]), c=c.concept, pl=t.pl)
    return Candidate(text, f"SELECT {agg}({c.name}) FROM {t.name}")


@template("easy")
def aggregate_filtered(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, tables_with(ctx, "num", "cat", label=False))
    if t is None:
        return None
    c, f = pick(ctx, t.of_kind("num")), pick(ctx, t.of_kind("cat"))
    v = pick(ctx, t.present(f))
    agg = ctx.rng.choice(sorted(AGGS))
    text = phrase(ctx.rng, ("What is the {w} {c} of {pl} whose {f} is {v}?",
                            "Among {pl} with {f} {v}, what is the {w} {c}?",
                            "For {pl} with {f} {v}, give the {w} {c}."),
                  w=ctx.rng.choice(AGGS[agg]), c=c.concept, pl=t.pl, f=f.concept, v=v)
    return Candidate(text, f"SELECT {agg}({c.name}) FROM {t.name} WHERE {f.name} = {lit(v)}")


@template("easy")
def lookup(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, [t for t in tables_with(ctx) if t.of_kind("num") + t.of_kind("cat") + t.of_kind("date")])
    if t is None:
        return None
    c = pick(ctx, t.of_kind("num") + t.of_kind("cat") + t.of_kind("date"))
    x = label_value(ctx, t, lambda r: r[c.index] is not None)
    if x is None:
        return None
    text = phrase(ctx.rng, ("What is the {c} of the {sg} {x}?", "Give the {c} of {sg} {x}.",
                            "Find the {c} recorded for the {sg} {x}.", "What {c} does the {sg} {x} have?"),
                  c=c.concept, sg=t.sg, x=x)
    return Candidate(text, f"SELECT {c.name} FROM {t.name} WHERE {t.label.name} = {lit(x)}")


@template("easy")
def distinct_values(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, tables_with(ctx, "cat", label=False))
    c = pick(ctx, t.of_kind("cat")) if t else None
    if c is None:
        return None
    text = phrase(ctx.rng, ("What are the distinct {c} values of {pl}?", "List the different {cs} that {pl} have.",
                            "Which {cs} appear among the {pl}?"), c=c.concept, cs=plural(c.concept), pl=t.pl)
    where = f" WHERE {c.name} IS NOT NULL" if c.spec.null_frac else ""
    return Candidate(text, f"SELECT DISTINCT {c.name} FROM {t.name}{where}")


@template("easy")
def count_distinct(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, tables_with(ctx, "cat", label=False))
    c = pick(ctx, t.of_kind("cat")) if t else None
    if c is None:
        return None
    text = phrase(ctx.rng, ("How many different {cs} do the {pl} have?", "Count the distinct {cs} among {pl}.",
                            "How many distinct {c} values are there among {pl}?"),
                  c=c.concept, cs=plural(c.concept), pl=t.pl)
    return Candidate(text, f"SELECT count(DISTINCT {c.name}) FROM {t.name}")


@template("easy")
def count_missing(ctx: Ctx) -> Candidate | None:
    options = [(t, c) for t in ctx.db.tables.values() for c in t.columns
               if c.spec.null_frac and c.kind != "text" and None in t.values(c)]
    if not options:
        return None
    t, c = ctx.rng.choice(options)
    text = phrase(ctx.rng, ("How many {pl} have no {c} recorded?", "How many {pl} are missing a {c}?",
                            "Count the {pl} whose {c} is unknown."), pl=t.pl, c=c.concept)
    return Candidate(text, f"SELECT count(*) FROM {t.name} WHERE {c.name} IS NULL")


@template("easy")
def by_year(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, tables_with(ctx, "date", label=False))
    d = pick(ctx, t.of_kind("date")) if t else None
    if d is None:
        return None
    years = counts(t, d)
    by_year_counts: dict[str, int] = {}
    for v, n in years.items():
        by_year_counts[v[:4]] = by_year_counts.get(v[:4], 0) + n
    listing = t.label is not None and ctx.rng.random() < 0.5
    options = sorted(y for y, n in by_year_counts.items() if not listing or n <= 15)
    year = pick(ctx, options)
    if year is None:
        return None
    span = f"{d.name} BETWEEN '{year}-01-01' AND '{year}-12-31'"
    if listing:
        text = phrase(ctx.rng, ("Which {pl} have a {d} in {y}? List their {labs}.",
                                "List the {labs} of {pl} whose {d} falls in {y}.",
                                "Give the {labs} of all {pl} with a {d} during {y}."),
                      pl=t.pl, d=d.concept, y=year, labs=lab_pl(t))
        return Candidate(text, f"SELECT {t.label.name} FROM {t.name} WHERE {span}")
    text = phrase(ctx.rng, ("How many {pl} have a {d} in {y}?", "Count the {pl} whose {d} is in {y}.",
                            "What is the number of {pl} with a {d} during {y}?"), pl=t.pl, d=d.concept, y=year)
    return Candidate(text, f"SELECT count(*) FROM {t.name} WHERE {span}")


@template("easy")
def between(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, tables_with(ctx, "num"))
    c = pick(ctx, t.of_kind("num")) if t else None
    vals = sorted({v for v in t.values(c) if v is not None}) if c else []
    if len(vals) < 6:
        return None
    i = ctx.rng.randrange(len(vals) - 3)
    lo, hi = vals[i], vals[min(i + ctx.rng.randint(1, 6), len(vals) - 1)]
    text = phrase(ctx.rng, ("Which {pl} have a {c} between {lo} and {hi}? Give their {labs}.",
                            "List the {labs} of {pl} whose {c} is from {lo} to {hi} inclusive.",
                            "Find the {pl} with {c} in the range {lo} to {hi}."),
                  pl=t.pl, c=c.concept, lo=say(lo), hi=say(hi), labs=lab_pl(t))
    return Candidate(text, f"SELECT {t.label.name} FROM {t.name} WHERE {c.name} BETWEEN {lit(lo)} AND {lit(hi)}")


@template("medium")
def top_k(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, tables_with(ctx, "num"))
    c = pick(ctx, t.of_kind("num")) if t else None
    if c is None:
        return None
    k, high = ctx.rng.choice((1, 1, 2, 3, 3, 5)), ctx.rng.random() < 0.65
    most = "highest" if high else "lowest"
    if k == 1:
        opts = ("Which {sg} has the {m} {c}?", "What is the {lab} of the {sg} with the {m} {c}?",
                "Name the {sg} with the {m} {c}.")
    else:
        opts = ("Which {k} {pl} have the {m} {c}? List them from {m} down.",
                "List the {labs} of the {k} {pl} with the {m} {c}, in order.",
                "Name the {k} {pl} with the {m} {c}, starting with the {m}.")
    text = phrase(ctx.rng, opts, sg=t.sg, pl=t.pl, k=k, m=most, c=c.concept, lab=t.label.concept, labs=lab_pl(t))
    # ASC would put NULLs first in SQLite, so the lowest-k excludes unknown values explicitly.
    where = f" WHERE {c.name} IS NOT NULL" if not high and c.spec.null_frac else ""
    direction = "DESC" if high else "ASC"
    return Candidate(text, f"SELECT {t.label.name} FROM {t.name}{where} ORDER BY {c.name} {direction} LIMIT {k}")


@template("medium")
def two_columns(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, [t for t in tables_with(ctx, "cat") if t.of_kind("num") + t.of_kind("date")])
    if t is None:
        return None
    c, f = pick(ctx, t.of_kind("num") + t.of_kind("date")), pick(ctx, t.of_kind("cat"))
    v = small_group_value(ctx, t, f)
    if v is None:
        return None
    text = phrase(ctx.rng, ("List the {lab} and {c} of every {sg} whose {f} is {v}.",
                            "For {pl} with {f} {v}, show each {lab} and {c}.",
                            "Give the {labs} and {cs} of {pl} whose {f} is {v}."),
                  lab=t.label.concept, labs=lab_pl(t), c=c.concept, cs=plural(c.concept), sg=t.sg, pl=t.pl,
                  f=f.concept, v=v)
    return Candidate(text, f"SELECT {t.label.name}, {c.name} FROM {t.name} WHERE {f.name} = {lit(v)}")


@template("medium")
def sorted_listing(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, [t for t in tables_with(ctx, "cat") if t.of_kind("num") + t.of_kind("date")])
    if t is None:
        return None
    c, f = pick(ctx, t.of_kind("num") + t.of_kind("date")), pick(ctx, t.of_kind("cat"))
    v = small_group_value(ctx, t, f, 2, 12)
    if v is None:
        return None
    desc = ctx.rng.random() < 0.5
    order = ("from highest to lowest", "in descending order", "largest first") if desc else \
        ("from lowest to highest", "in ascending order", "smallest first")
    text = phrase(ctx.rng, ("List the {labs} of {pl} with {f} {v}, ordered by {c} {o}.",
                            "Sort the {pl} whose {f} is {v} by {c} {o} and give their {labs}.",
                            "Which {pl} have {f} {v}? Order them by {c}, {o}."),
                  labs=lab_pl(t), pl=t.pl, f=f.concept, v=v, c=c.concept, o=ctx.rng.choice(order))
    direction = "DESC" if desc else "ASC"
    sql = f"SELECT {t.label.name} FROM {t.name} WHERE {f.name} = {lit(v)} ORDER BY {c.name} {direction}"
    return Candidate(text, sql)


@template("medium")
def count_per_category(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, tables_with(ctx, "cat", label=False))
    c = pick(ctx, t.of_kind("cat")) if t else None
    if c is None:
        return None
    text = phrase(ctx.rng, ("How many {pl} are there for each {c}?", "Count the {pl} in each {c}.",
                            "For every {c}, give the number of {pl}.",
                            "Show each {c} and how many {pl} have it."), pl=t.pl, c=c.concept)
    where = f" WHERE {c.name} IS NOT NULL" if c.spec.null_frac else ""
    return Candidate(text, f"SELECT {c.name}, count(*) FROM {t.name}{where} GROUP BY {c.name}")


@template("medium")
def aggregate_per_category(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, tables_with(ctx, "cat", "num", label=False))
    if t is None:
        return None
    c, n = pick(ctx, t.of_kind("cat")), pick(ctx, t.of_kind("num"))
    agg = ctx.rng.choice(sorted(AGGS))
    text = phrase(ctx.rng, ("What is the {w} {n} of {pl} for each {c}?",
                            "For each {c}, what is the {w} {n} of the {pl}?",
                            "Show every {c} together with the {w} {n} of its {pl}."),
                  w=ctx.rng.choice(AGGS[agg]), n=n.concept, pl=t.pl, c=c.concept)
    where = f" WHERE {c.name} IS NOT NULL" if c.spec.null_frac else ""
    return Candidate(text, f"SELECT {c.name}, {agg}({n.name}) FROM {t.name}{where} GROUP BY {c.name}")


@template("medium")
def two_conditions(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, tables_with(ctx, "cat", "num", label=False))
    if t is None:
        return None
    f, n = pick(ctx, t.of_kind("cat")), pick(ctx, t.of_kind("num"))
    v = pick(ctx, t.present(f))
    subset = sorted(r[n.index] for r in t.rows if r[f.index] == v and r[n.index] is not None)
    if len(subset) < 2:
        return None
    x = subset[len(subset) // 2]
    if t.label is not None and len(subset) <= 24 and ctx.rng.random() < 0.5:
        text = phrase(ctx.rng, ("Which {pl} have {f} {v} and a {n} above {x}? Give their {labs}.",
                                "List the {labs} of {pl} whose {f} is {v} and whose {n} exceeds {x}.",
                                "Find the {pl} with {f} {v} and {n} greater than {x}."),
                      pl=t.pl, f=f.concept, v=v, n=n.concept, x=say(x), labs=lab_pl(t))
        select = t.label.name
    else:
        text = phrase(ctx.rng, ("How many {pl} have {f} {v} and a {n} above {x}?",
                                "Count the {pl} whose {f} is {v} and whose {n} exceeds {x}.",
                                "Among {pl} with {f} {v}, how many have a {n} greater than {x}?"),
                      pl=t.pl, f=f.concept, v=v, n=n.concept, x=say(x))
        select = "count(*)"
    return Candidate(text, f"SELECT {select} FROM {t.name} WHERE {f.name} = {lit(v)} AND {n.name} > {lit(x)}")


@template("medium")
def either_value(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, tables_with(ctx, "cat", label=False))
    c = pick(ctx, t.of_kind("cat")) if t else None
    values = t.present(c) if c else []
    if len(values) < 3:
        return None
    v1, v2 = ctx.rng.sample(values, 2)
    text = phrase(ctx.rng, ("How many {pl} have {c} {a} or {b}?", "Count the {pl} whose {c} is either {a} or {b}.",
                            "What is the number of {pl} with a {c} of {a} or {b}?"), pl=t.pl, c=c.concept, a=v1, b=v2)
    return Candidate(text, f"SELECT count(*) FROM {t.name} WHERE {c.name} = {lit(v1)} OR {c.name} = {lit(v2)}")


@template("medium")
def name_contains(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, [t for t in tables_with(ctx) if t.label.spec.gen not in ("code", "pick")])
    if t is None:
        return None
    labels = t.values(t.label)
    words = sorted({w for v in labels for w in v.replace(",", " ").split() if len(w) >= 4 and w.isalpha()})
    good = [w for w in words if 1 <= sum(w.lower() in v.lower() for v in labels) <= 10]
    w = pick(ctx, good)
    if w is None:
        return None
    text = phrase(ctx.rng, ("Which {pl} have a {lab} containing '{w}'?",
                            "List the {pl} whose {lab} includes the text '{w}'.",
                            "Find all {pl} with '{w}' in their {lab}."), pl=t.pl, lab=t.label.concept, w=w)
    return Candidate(text, f"SELECT {t.label.name} FROM {t.name} WHERE {t.label.name} LIKE {lit('%' + w + '%')}")
