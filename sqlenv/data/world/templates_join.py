"""Join templates: one foreign-key hop (child -> parent) and two-hop chains.

One hop gives Spider "medium" shapes (a join plus WHERE or GROUP BY / HAVING); two hops
(order -> customer -> city) give "hard" ones. Relations are phrased through the FK's
role ("whose origin airport is ..."), so a table referenced twice is never ambiguous.
SQL follows Spider's style: aliases T1 (child), T2 (parent), T3 (grandparent), grouping by
the parent's primary key because labels, though unique here, are not keys in general.
"""

from __future__ import annotations

from sqlenv.data.world.schema import Edge
from sqlenv.data.world.templates import (
    AGGS,
    Candidate,
    Ctx,
    child_counts,
    is_the_role_of,
    lab_pl,
    label_value,
    lit,
    parent_label,
    phrase,
    pick,
    rev,
    say,
    small_group_value,
    template,
)


def join1(e: Edge) -> str:
    return (f"FROM {e.child.name} AS T1 JOIN {e.parent.name} AS T2 "
            f"ON T1.{e.fk.name} = T2.{e.parent.pk}")


def join2(a: Edge, b: Edge) -> str:
    return join1(a) + f" JOIN {b.parent.name} AS T3 ON T2.{b.fk.name} = T3.{b.parent.pk}"


def fk_edges(ctx: Ctx, child_label: bool = False, parent_named: bool = True, child_kind: str = "") -> list[Edge]:
    return [e for e in ctx.db.edges
            if (not child_label or e.child.label) and (not parent_named or e.parent.label)
            and (not child_kind or e.child.of_kind(child_kind))]


def _parent_with_children(ctx: Ctx, e: Edge, lo: int, hi: int) -> str | None:
    ids = sorted(pid for pid, n in child_counts(e).items() if lo <= n <= hi)
    return parent_label(e, ctx.rng.choice(ids)) if ids else None


@template("medium", empty=True)
def children_of_parent(ctx: Ctx) -> Candidate | None:
    e = pick(ctx, fk_edges(ctx, child_label=True))
    if e is None:
        return None
    if ctx.empty:  # a parent nothing points at: "Which employees work in Legal?" -> none
        used = set(child_counts(e))
        x = label_value(ctx, e.parent, lambda r: r[0] not in used)
    else:
        x = _parent_with_children(ctx, e, 1, 15)
    if x is None:
        return None
    third = "Give the {clabs} of all {cpl} of the {psg} {x}." if e.role == e.parent.sg else \
        "Give the {clabs} of all {cpl} whose {role} is the {psg} {x}."
    text = phrase(ctx.rng, ("List the {clabs} of {cpl} whose {role} is {x}.",
                            "Which {cpl} have {x} as their {role}?", third),
                  clabs=lab_pl(e.child), cpl=e.child.pl, role=e.role, psg=e.parent.sg, x=x)
    sql = f"SELECT T1.{e.child.label.name} {join1(e)} WHERE T2.{e.parent.label.name} = {lit(x)}"
    return Candidate(text, sql, ctx.empty)


@template("medium")
def count_children(ctx: Ctx) -> Candidate | None:
    e = pick(ctx, fk_edges(ctx))
    x = _parent_with_children(ctx, e, 1, 10_000) if e else None
    if x is None:
        return None
    if e.role == e.parent.sg:
        opts = ("How many {cpl} have {psg} {x}?", "Count the {cpl} whose {psg} is {x}.",
                "How many {cpl} does the {psg} {x} have?")
    else:
        opts = ("How many {cpl} have {x} as their {role}?", "Count the {cpl} whose {role} is {x}.",
                "What is the number of {cpl} whose {role} is the {psg} {x}?")
    text = phrase(ctx.rng, opts, cpl=e.child.pl, role=e.role, psg=e.parent.sg, x=x)
    return Candidate(text, f"SELECT count(*) {join1(e)} WHERE T2.{e.parent.label.name} = {lit(x)}")


@template("medium")
def filter_by_parent_attribute(ctx: Ctx) -> Candidate | None:
    e = pick(ctx, [e for e in fk_edges(ctx, parent_named=False) if e.parent.of_kind("cat")])
    if e is None:
        return None
    c = pick(ctx, e.parent.of_kind("cat"))
    used = set(child_counts(e))
    v = pick(ctx, list(dict.fromkeys(r[c.index] for r in e.parent.rows if r[0] in used and r[c.index] is not None)))
    if v is None:
        return None
    if e.child.label and ctx.rng.random() < 0.5:
        text = phrase(ctx.rng, ("List the {clabs} of {cpl} whose {role} has {c} {v}.",
                                "Which {cpl} have a {role} with {c} {v}?",
                                "Give the {clabs} of {cpl} whose {role}'s {c} is {v}."),
                      clabs=lab_pl(e.child), cpl=e.child.pl, role=e.role, c=c.concept, v=v)
        return Candidate(text, f"SELECT T1.{e.child.label.name} {join1(e)} WHERE T2.{c.name} = {lit(v)}")
    text = phrase(ctx.rng, ("How many {cpl} have a {role} whose {c} is {v}?",
                            "Count the {cpl} whose {role} has {c} {v}.",
                            "What is the number of {cpl} linked to a {role} with {c} {v}?"),
                  cpl=e.child.pl, role=e.role, c=c.concept, v=v)
    return Candidate(text, f"SELECT count(*) {join1(e)} WHERE T2.{c.name} = {lit(v)}")


@template("medium")
def parent_of_child(ctx: Ctx) -> Candidate | None:
    e = pick(ctx, fk_edges(ctx, child_label=True))
    x = label_value(ctx, e.child, lambda r: r[e.fk.index] is not None) if e else None
    if x is None:
        return None
    text = phrase(ctx.rng, ("What is the {role} of the {csg} {x}?", "Which {psg} is the {role} of {csg} {x}?",
                            "Give the {plab} of the {role} of the {csg} {x}."),
                  role=e.role, csg=e.child.sg, psg=e.parent.sg, plab=e.parent.label.concept, x=x)
    return Candidate(text, f"SELECT T2.{e.parent.label.name} {join1(e)} WHERE T1.{e.child.label.name} = {lit(x)}")


@template("medium")
def count_per_parent(ctx: Ctx) -> Candidate | None:
    e = pick(ctx, [e for e in fk_edges(ctx) if len(child_counts(e)) <= 20])
    if e is None:
        return None
    text = phrase(ctx.rng, ("For each {psg}, how many {kids} are there?", "Count the {kids} of every {psg}.",
                            "Show each {psg}'s {plab} together with its number of {kids}."),
                  psg=e.parent.sg, kids=rev(e), plab=e.parent.label.concept)
    sql = f"SELECT T2.{e.parent.label.name}, count(*) {join1(e)} GROUP BY T2.{e.parent.pk}"
    return Candidate(text, sql)


@template("medium")
def parents_with_many(ctx: Ctx) -> Candidate | None:
    e = pick(ctx, fk_edges(ctx))
    sizes = sorted(child_counts(e).values(), reverse=True) if e else []
    if len(sizes) < 3:
        return None
    # Some parents have more than k; k >= 2 keeps "more than 1 vessels" out of the text.
    k = max(2, sizes[ctx.rng.randint(1, min(12, len(sizes) - 1))])
    at_least = ctx.rng.random() < 0.4
    if at_least:
        k += 1
    text = phrase(ctx.rng, ("Which {ppl} have {q} {k} {kids}?", "List the {plabs} of {ppl} with {q} {k} {kids}.",
                            "Find the {ppl} that have {q} {k} {kids}."),
                  ppl=e.parent.pl, plabs=lab_pl(e.parent), q="at least" if at_least else "more than", k=k, kids=rev(e))
    sql = (f"SELECT T2.{e.parent.label.name} {join1(e)} GROUP BY T2.{e.parent.pk} "
           f"HAVING count(*) {'>=' if at_least else '>'} {k}")
    return Candidate(text, sql)


@template("medium")
def aggregate_per_parent(ctx: Ctx) -> Candidate | None:
    e = pick(ctx, [e for e in fk_edges(ctx, child_kind="num") if len(child_counts(e)) <= 20])
    if e is None:
        return None
    n = pick(ctx, e.child.of_kind("num"))
    agg = ctx.rng.choice(sorted(AGGS))
    text = phrase(ctx.rng, ("What is the {w} {n} of {cpl} for each {role}?",
                            "For every {psg}, give the {w} {n} of its {kids}.",
                            "Show each {psg} with the {w} {n} of its {kids}."),
                  w=ctx.rng.choice(AGGS[agg]), n=n.concept, cpl=e.child.pl, role=e.role, psg=e.parent.sg, kids=rev(e))
    sql = f"SELECT T2.{e.parent.label.name}, {agg}(T1.{n.name}) {join1(e)} GROUP BY T2.{e.parent.pk}"
    return Candidate(text, sql)


def chain(ctx: Ctx, child_label: bool) -> tuple[Edge, Edge] | None:
    return pick(ctx, [(a, b) for a, b in ctx.db.chains() if b.parent.label and (a.child.label or not child_label)])


def grand_counts(a: Edge, b: Edge) -> dict[int, int]:
    """Grandchildren per grandparent id along the chain a (child->parent), b (parent->grandparent)."""
    parent_to_grand = {r[0]: r[b.fk.index] for r in b.child.rows}
    out: dict[int, int] = {}
    for pid in a.child.values(a.fk):
        gid = parent_to_grand.get(pid)
        if gid is not None:
            out[gid] = out.get(gid, 0) + 1
    return out


@template("hard", empty=True)
def two_hop_filter(ctx: Ctx) -> Candidate | None:
    listing = ctx.empty or ctx.rng.random() < 0.6
    ch = chain(ctx, child_label=listing)
    if ch is None:
        return None
    a, b = ch
    g = grand_counts(a, b)
    if ctx.empty:
        x = label_value(ctx, b.parent, lambda r: r[0] not in g)
    else:
        ids = sorted(i for i, n in g.items() if n <= (15 if listing else 10_000))
        x = parent_label(b, ctx.rng.choice(ids)) if ids else None
    if x is None:
        return None
    kw = dict(cpl=a.child.pl, clabs=lab_pl(a.child), r1=a.role, r2=b.role, x=x)
    if listing:
        text = phrase(ctx.rng, ("List the {clabs} of {cpl} whose {r1}'s {r2} is {x}.",
                                "Which {cpl} have a {r1} whose {r2} is {x}?",
                                "Find all {cpl} whose {r1} has {x} as {r2}."), **kw)
        select = f"T1.{a.child.label.name}"
    else:
        text = phrase(ctx.rng, ("How many {cpl} have a {r1} whose {r2} is {x}?",
                                "Count the {cpl} whose {r1}'s {r2} is {x}.",
                                "What is the number of {cpl} whose {r1} has {x} as {r2}?"), **kw)
        select = "count(*)"
    return Candidate(text, f"SELECT {select} {join2(a, b)} WHERE T3.{b.parent.label.name} = {lit(x)}", ctx.empty)


@template("hard")
def two_hop_count_per_grandparent(ctx: Ctx) -> Candidate | None:
    ch = chain(ctx, child_label=False)
    if ch is None:
        return None
    a, b = ch
    if len(grand_counts(a, b)) > 20:
        return None
    text = phrase(ctx.rng, ("For each {r2} of their {r1}, how many {cpl} are there?",
                            "Count the {cpl} per {r2} of their {r1}.",
                            "Show every {gsg} with the number of {cpl} whose {r1}'s {r2} it is."),
                  r1=a.role, r2=b.role, cpl=a.child.pl, gsg=b.parent.sg)
    return Candidate(text, f"SELECT T3.{b.parent.label.name}, count(*) {join2(a, b)} GROUP BY T3.{b.parent.pk}")


@template("hard")
def top_within_parent(ctx: Ctx) -> Candidate | None:
    e = pick(ctx, fk_edges(ctx, child_label=True, child_kind="num"))
    x = _parent_with_children(ctx, e, 3, 10_000) if e else None
    if x is None:
        return None
    n = pick(ctx, e.child.of_kind("num"))
    k = ctx.rng.choice((1, 2, 3))
    kw = dict(cpl=e.child.pl, csg=e.child.sg, role=e.role, x=x, k=k, n=n.concept, clabs=lab_pl(e.child))
    if k == 1:
        text = phrase(ctx.rng, ("Among the {cpl} whose {role} is {x}, which one has the highest {n}?",
                                "Which {csg} with {role} {x} has the largest {n}?",
                                "Find the {csg} of {role} {x} with the highest {n}."), **kw)
    else:
        text = phrase(ctx.rng, ("Among the {cpl} whose {role} is {x}, which {k} have the highest {n}?",
                                "List the {k} {cpl} with {role} {x} that have the largest {n}, highest first.",
                                "Give the {clabs} of the top {k} {cpl} by {n} among those whose {role} is {x}."), **kw)
    sql = (f"SELECT T1.{e.child.label.name} {join1(e)} WHERE T2.{e.parent.label.name} = {lit(x)} "
           f"ORDER BY T1.{n.name} DESC LIMIT {k}")
    return Candidate(text, sql)


@template("hard")
def listing_with_value(ctx: Ctx) -> Candidate | None:
    e = pick(ctx, fk_edges(ctx, child_label=True, child_kind="num"))
    x = _parent_with_children(ctx, e, 1, 12) if e else None
    if x is None:
        return None
    n = pick(ctx, e.child.of_kind("num"))
    text = phrase(ctx.rng, ("List the {clab} and {n} of each {csg} whose {role} is {x}.",
                            "For the {cpl} with {role} {x}, show their {clabs} and {n}.",
                            "Give every {csg} of {role} {x} with its {n}."),
                  clab=e.child.label.concept, clabs=lab_pl(e.child), n=n.concept, csg=e.child.sg, cpl=e.child.pl,
                  role=e.role, x=x)
    sql = f"SELECT T1.{e.child.label.name}, T1.{n.name} {join1(e)} WHERE T2.{e.parent.label.name} = {lit(x)}"
    return Candidate(text, sql)


@template("medium")
def filter_child_by_category(ctx: Ctx) -> Candidate | None:
    """A join whose filter sits on the child and whose answer is the parent: 'which customers
    placed a cancelled order' without a subquery (DISTINCT removes repeats)."""
    e = pick(ctx, fk_edges(ctx, child_kind="cat"))
    if e is None:
        return None
    c = pick(ctx, e.child.of_kind("cat"))
    v = small_group_value(ctx, e.child, c, 1, 12)
    if v is None:
        return None
    text = phrase(ctx.rng, ("Which {ppl} have at least one {csg} with {c} {v}? List each once.",
                            "List the distinct {plabs} of {ppl} that appear as {role} of a {csg} whose {c} is {v}.",
                            "Name every {psg} {link} with {c} {v}."),
                  ppl=e.parent.pl, psg=e.parent.sg, plabs=lab_pl(e.parent), role=e.role, c=c.concept, v=say(v),
                  csg=e.child.sg, link=is_the_role_of(e, e.child.sg))
    return Candidate(text, f"SELECT DISTINCT T2.{e.parent.label.name} {join1(e)} WHERE T1.{c.name} = {lit(v)}")
