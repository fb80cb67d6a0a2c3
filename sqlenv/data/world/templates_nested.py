"""Nested and combined templates: subqueries, set operations, ranking over joins.

These target Spider's "hard" and "extra" levels: IN / NOT IN subqueries, comparisons with
a subquery aggregate ("above the average"), EXCEPT / INTERSECT, and combinations such as
join + GROUP BY + ORDER BY + LIMIT over a two-hop chain. NOT IN subqueries filter out NULL
foreign keys on purpose: `x NOT IN (..., NULL)` is never true in SQL, a classic trap that
would silently make the gold answer empty.
"""

from __future__ import annotations

from sqlenv.data.world.schema import Edge
from sqlenv.data.world.templates import (
    AGGS,
    Candidate,
    Ctx,
    child_counts,
    counts,
    is_the_role_of,
    lab_pl,
    lit,
    phrase,
    pick,
    plural,
    rev,
    small_group_value,
    tables_with,
    template,
)
from sqlenv.data.world.templates_join import chain, fk_edges, grand_counts, join1, join2


def _fk_values(e: Edge) -> str:
    where = f" WHERE {e.fk.name} IS NOT NULL" if e.fk.spec.null_frac else ""
    return f"SELECT {e.fk.name} FROM {e.child.name}{where}"


@template("hard", empty=True)
def parents_without_children(ctx: Ctx) -> Candidate | None:
    e = pick(ctx, fk_edges(ctx))
    if e is None:
        return None
    orphans = len(e.parent.rows) - len(child_counts(e))
    # Empty exactly when every parent is referenced; that is a fine question only by design.
    if (orphans == 0) != ctx.empty or orphans > 20:
        return None
    text = phrase(ctx.rng, ("Which {ppl} have no {kids}?", "List the {plabs} of {ppl} without any {kids}.",
                            "Find the {ppl} that no {csg} has as its {role}."),
                  ppl=e.parent.pl, plabs=lab_pl(e.parent), kids=rev(e), csg=e.child.sg, role=e.role)
    sql = f"SELECT {e.parent.label.name} FROM {e.parent.name} WHERE {e.parent.pk} NOT IN ({_fk_values(e)})"
    return Candidate(text, sql, ctx.empty)


@template("hard", empty=True)
def parents_with_child_value(ctx: Ctx) -> Candidate | None:
    e = pick(ctx, fk_edges(ctx, child_kind="cat"))
    if e is None:
        return None
    c = pick(ctx, e.child.of_kind("cat"))
    if ctx.empty:
        v = next((x for x in c.spec.params if x not in set(e.child.present(c))), None)
    else:
        v = small_group_value(ctx, e.child, c, 1, 15)
    if v is None:
        return None
    text = phrase(ctx.rng, ("Which {ppl} have at least one {csg} with {c} {v}?",
                            "List every {psg} {link} whose {c} is {v}.",
                            "Find the {plabs} of {ppl} having a {csg} with {c} {v}."),
                  ppl=e.parent.pl, psg=e.parent.sg, plabs=lab_pl(e.parent), csg=e.child.sg, c=c.concept, v=v,
                  link=is_the_role_of(e, e.child.sg))
    sql = (f"SELECT {e.parent.label.name} FROM {e.parent.name} WHERE {e.parent.pk} IN "
           f"(SELECT {e.fk.name} FROM {e.child.name} WHERE {c.name} = {lit(v)})")
    return Candidate(text, sql, ctx.empty)


@template("hard")
def parents_lacking_child_value(ctx: Ctx) -> Candidate | None:
    e = pick(ctx, [e for e in fk_edges(ctx, child_kind="cat") if len(e.parent.rows) <= 30])
    if e is None:
        return None
    c = pick(ctx, e.child.of_kind("cat"))
    v = pick(ctx, e.child.present(c))
    text = phrase(ctx.rng, ("Which {ppl} have no {csg} with {c} {v}?",
                            "List the {ppl} none of whose {kids} has {c} {v}.",
                            "Find the {plabs} of {ppl} that {link} whose {c} is {v}."),
                  ppl=e.parent.pl, plabs=lab_pl(e.parent), csg=e.child.sg, kids=rev(e), c=c.concept, v=v,
                  link=(f"have no {e.child.sg}" if e.role == e.parent.sg
                        else f"are not the {e.role} of any {e.child.sg}"))
    sql = (f"SELECT {e.parent.label.name} FROM {e.parent.name} EXCEPT SELECT T2.{e.parent.label.name} {join1(e)} "
           f"WHERE T1.{c.name} = {lit(v)}")
    return Candidate(text, sql)


@template("hard")
def above_average(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, tables_with(ctx, "num", label=False))
    n = pick(ctx, t.of_kind("num")) if t else None
    if n is None:
        return None
    above = ctx.rng.random() < 0.6
    cmp_word, op = ("above", ">") if above else ("below", "<")
    sub = f"(SELECT avg({n.name}) FROM {t.name})"
    vals = [v for v in t.values(n) if v is not None]
    mean = sum(vals) / len(vals)
    hits = sum((v > mean) if above else (v < mean) for v in vals)
    if t.label is not None and hits <= 15:
        text = phrase(ctx.rng, ("Which {pl} have a {n} {w} the average? Give their {labs}.",
                                "List the {labs} of {pl} whose {n} is {w} the average {n} of all {pl}.",
                                "Find the {pl} with a {n} {w} the mean {n}."),
                      pl=t.pl, n=n.concept, w=cmp_word, labs=lab_pl(t))
        return Candidate(text, f"SELECT {t.label.name} FROM {t.name} WHERE {n.name} {op} {sub}")
    text = phrase(ctx.rng, ("How many {pl} have a {n} {w} the average?",
                            "Count the {pl} whose {n} is {w} the average {n} of all {pl}.",
                            "How many {pl} have a {n} {w} the mean {n}?"), pl=t.pl, n=n.concept, w=cmp_word)
    return Candidate(text, f"SELECT count(*) FROM {t.name} WHERE {n.name} {op} {sub}")


@template("hard")
def extreme_with_ties(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, tables_with(ctx, "num"))
    n = pick(ctx, t.of_kind("num")) if t else None
    if n is None:
        return None
    agg, word = ctx.rng.choice((("max", "highest"), ("min", "lowest")))
    text = phrase(ctx.rng, ("Find the {sg} (or {pl}, if tied) with the {w} {n}.",
                            "Which {pl} share the {w} {n}? List all of them.",
                            "List every {sg} whose {n} equals the {w} {n} among all {pl}."),
                  sg=t.sg, pl=t.pl, w=word, n=n.concept)
    sql = f"SELECT {t.label.name} FROM {t.name} WHERE {n.name} = (SELECT {agg}({n.name}) FROM {t.name})"
    return Candidate(text, sql)


@template("hard")
def shared_values(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, [t for t in ctx.db.tables.values() if len(t.of_kind("cat")) >= 2])
    if t is None:
        return None
    c, f = ctx.rng.sample(t.of_kind("cat"), 2)
    values = t.present(f)
    if len(values) < 2:
        return None
    v1, v2 = ctx.rng.sample(values, 2)
    text = phrase(ctx.rng, ("Which {cs} occur both among {pl} with {f} {a} and among {pl} with {f} {b}?",
                            "List the {cs} shared by {pl} whose {f} is {a} and {pl} whose {f} is {b}.",
                            "Find each {c} that has {pl} with {f} {a} as well as {pl} with {f} {b}."),
                  cs=plural(c.concept), c=c.concept, pl=t.pl, f=f.concept, a=v1, b=v2)
    known = f" AND {c.name} IS NOT NULL" if c.spec.null_frac else ""  # NULL is no shared value
    sql = (f"SELECT {c.name} FROM {t.name} WHERE {f.name} = {lit(v1)}{known} INTERSECT "
           f"SELECT {c.name} FROM {t.name} WHERE {f.name} = {lit(v2)}{known}")
    return Candidate(text, sql)


@template("hard")
def most_common_value(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, tables_with(ctx, "cat", label=False))
    c = pick(ctx, t.of_kind("cat")) if t else None
    if c is None:
        return None
    fewest = ctx.rng.random() < 0.3
    text = phrase(ctx.rng, ("What is the {m} common {c} among {pl}?", "Which {c} do the {f} {pl} have?",
                            "Which {c} is the {m} frequent among {pl}?"),
                  m="least" if fewest else "most", f="fewest" if fewest else "most", c=c.concept, pl=t.pl)
    where = f" WHERE {c.name} IS NOT NULL" if c.spec.null_frac else ""
    direction = "ASC" if fewest else "DESC"
    sql = f"SELECT {c.name} FROM {t.name}{where} GROUP BY {c.name} ORDER BY count(*) {direction} LIMIT 1"
    return Candidate(text, sql)


@template("extra")
def grandparent_with_most(ctx: Ctx) -> Candidate | None:
    ch = chain(ctx, child_label=False)
    if ch is None:
        return None
    a, b = ch
    text = phrase(ctx.rng, ("Which {gsg} is the {r1}'s {r2} for the most {cpl}?",
                            "Among {cpl}, which {gsg} appears most often as their {r1}'s {r2}?",
                            "Find the {gsg} with the most {cpl}, going through each {csg}'s {r1}."),
                  gsg=b.parent.sg, r1=a.role, r2=b.role, cpl=a.child.pl, csg=a.child.sg)
    sql = f"SELECT T3.{b.parent.label.name} {join2(a, b)} GROUP BY T3.{b.parent.pk} ORDER BY count(*) DESC LIMIT 1"
    return Candidate(text, sql)


@template("extra")
def top_parents_by_total(ctx: Ctx) -> Candidate | None:
    e = pick(ctx, fk_edges(ctx, child_kind="num"))
    if e is None:
        return None
    n = pick(ctx, e.child.of_kind("num"))
    agg = ctx.rng.choice(("sum", "avg", "max"))
    w = ctx.rng.choice(AGGS[agg][:1] if agg == "max" else AGGS[agg])  # not "highest highest"
    k = ctx.rng.choice((1, 1, 2, 3))
    kw = dict(k=k, ppl=e.parent.pl, psg=e.parent.sg, w=w, n=n.concept, kids=rev(e))
    if k == 1:
        text = phrase(ctx.rng, ("Which {psg} has the highest {w} {n} across its {kids}?",
                                "Name the {psg} whose {kids} have the highest {w} {n}.",
                                "Find the {psg} with the greatest {w} {n} of {kids}."), **kw)
    else:
        text = phrase(ctx.rng, ("Which {k} {ppl} have the highest {w} {n} across their {kids}?",
                                "Name the top {k} {ppl} by {w} {n} of their {kids}, highest first.",
                                "List the {k} {ppl} whose {kids} have the greatest {w} {n}."), **kw)
    sql = (f"SELECT T2.{e.parent.label.name} {join1(e)} GROUP BY T2.{e.parent.pk} "
           f"ORDER BY {agg}(T1.{n.name}) DESC LIMIT {k}")
    return Candidate(text, sql)


@template("extra")
def filtered_above_average(ctx: Ctx) -> Candidate | None:
    t = pick(ctx, tables_with(ctx, "num", "cat"))
    if t is None:
        return None
    n, f = pick(ctx, t.of_kind("num")), pick(ctx, t.of_kind("cat"))
    v = small_group_value(ctx, t, f, 2, 30)
    if v is None:
        return None
    text = phrase(ctx.rng, ("Which {pl} with {f} {v} have a {n} above the average {n} of all {pl}?",
                            "Among {pl} whose {f} is {v}, list those whose {n} exceeds the overall average {n}.",
                            "Find the {labs} of {pl} with {f} {v} and a {n} higher than the mean over all {pl}."),
                  pl=t.pl, f=f.concept, v=v, n=n.concept, labs=lab_pl(t))
    sql = (f"SELECT {t.label.name} FROM {t.name} WHERE {f.name} = {lit(v)} AND "
           f"{n.name} > (SELECT avg({n.name}) FROM {t.name})")
    return Candidate(text, sql)


@template("extra")
def busier_than_average(ctx: Ctx) -> Candidate | None:
    e = pick(ctx, [e for e in fk_edges(ctx) if len(e.parent.rows) <= 40])
    if e is None:
        return None
    text = phrase(ctx.rng, ("Which {ppl} have more {kids} than the average {psg}?",
                            "List the {ppl} whose number of {kids} is above the average over all {ppl}.",
                            "Find the {plabs} of {ppl} with an above-average number of {kids}."),
                  ppl=e.parent.pl, psg=e.parent.sg, plabs=lab_pl(e.parent), kids=rev(e))
    # The average counts every parent, also those with no children (count(fk) skips NULLs).
    avg = f"(SELECT count({e.fk.name}) * 1.0 / (SELECT count(*) FROM {e.parent.name}) FROM {e.child.name})"
    sql = f"SELECT T2.{e.parent.label.name} {join1(e)} GROUP BY T2.{e.parent.pk} HAVING count(*) > {avg}"
    return Candidate(text, sql)


@template("extra")
def two_hop_breakdown(ctx: Ctx) -> Candidate | None:
    ch = pick(ctx, [(a, b) for a, b in ctx.db.chains() if b.parent.label and a.child.of_kind("cat")])
    if ch is None:
        return None
    a, b = ch
    g = grand_counts(a, b)
    ids = sorted(i for i, n in g.items() if n >= 3)
    if not ids:
        return None
    x = b.parent.rows[ctx.rng.choice(ids) - 1][b.parent.label.index]
    c = pick(ctx, a.child.of_kind("cat"))
    text = phrase(ctx.rng, ("For {cpl} whose {r1}'s {r2} is {x}, how many are there of each {c}?",
                            "Break down the {cpl} whose {r1} has {r2} {x} by {c}, with a count for each.",
                            "Among {cpl} whose {r1}'s {r2} is {x}, count how many have each {c}."),
                  cpl=a.child.pl, r1=a.role, r2=b.role, x=x, c=c.concept)
    sql = (f"SELECT T1.{c.name}, count(*) {join2(a, b)} WHERE T3.{b.parent.label.name} = {lit(x)} "
           f"AND T1.{c.name} IS NOT NULL GROUP BY T1.{c.name}")
    return Candidate(text, sql)


@template("extra")
def busiest_parents_ranked(ctx: Ctx) -> Candidate | None:
    e = pick(ctx, fk_edges(ctx))
    sizes = sorted(child_counts(e).values(), reverse=True) if e else []
    if len(sizes) < 4:
        return None
    k = max(2, sizes[ctx.rng.randint(2, min(10, len(sizes) - 1))])
    text = phrase(ctx.rng, ("Which {ppl} have more than {k} {kids}? Show each with its count, largest first.",
                            "List the {ppl} with over {k} {kids} and how many they have, from most to fewest.",
                            "For {ppl} having more than {k} {kids}, give the {plab} and the number of {kids}, "
                            "sorted by that number descending."),
                  ppl=e.parent.pl, plab=e.parent.label.concept, k=k, kids=rev(e))
    sql = (f"SELECT T2.{e.parent.label.name}, count(*) {join1(e)} GROUP BY T2.{e.parent.pk} "
           f"HAVING count(*) > {k} ORDER BY count(*) DESC")
    return Candidate(text, sql)


@template("extra")
def top_category_in_parent(ctx: Ctx) -> Candidate | None:
    e = pick(ctx, fk_edges(ctx, child_kind="cat"))
    if e is None:
        return None
    c = pick(ctx, e.child.of_kind("cat"))
    pc = child_counts(e)
    ids = sorted(pid for pid, n in pc.items() if n >= 4)
    if not ids:
        return None
    pid = ctx.rng.choice(ids)
    x = e.parent.rows[pid - 1][e.parent.label.index]
    sub = counts(e.child, c)
    if len(sub) < 2:
        return None
    text = phrase(ctx.rng, ("Among the {cpl} whose {role} is {x}, which {c} is the most common?",
                            "What is the most frequent {c} of {cpl} with {role} {x}?",
                            "For the {psg} {x}, which {c} occurs most often among its {kids}?"),
                  cpl=e.child.pl, role=e.role, x=x, c=c.concept, psg=e.parent.sg, kids=rev(e))
    sql = (f"SELECT T1.{c.name} {join1(e)} WHERE T2.{e.parent.label.name} = {lit(x)} AND T1.{c.name} IS NOT NULL "
           f"GROUP BY T1.{c.name} ORDER BY count(*) DESC LIMIT 1")
    return Candidate(text, sql)
