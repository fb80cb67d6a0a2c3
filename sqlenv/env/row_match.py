"""Row lists compared as the verifier compares them: cell by cell in order, or as multisets (sorted pairing,
then a one-to-one matching), under some permutation of the columns; `_compare` grades a mismatch."""

from __future__ import annotations

from collections import Counter

from sqlenv.env.cells import _Cell, _cells_match, _show

_MAX_PERMUTATIONS = 2000  # column permutations tried per parse (Spider-style, bounded)
_MAX_BIPARTITE_ROWS = 60  # tolerant one-to-one row matching beyond sorting, up to this size


_Rows = list  # list[list[_Cell]]


def _multiset_match(answer: _Rows, gold: _Rows) -> tuple[bool, str]:
    """Unordered comparison of equally long row lists, tolerant cells, duplicates counted."""
    a_keys = [tuple(c.key() for c in r) for r in answer]
    g_keys = [tuple(c.key() for c in r) for r in gold]
    if Counter(a_keys) == Counter(g_keys):
        return True, ""
    if Counter(tuple(c.null_key() for c in r) for r in answer) == Counter(tuple(c.null_key() for c in r) for r in gold):
        return True, ""  # "null" answering every NULL
    # Tolerant path: pair rows after sorting by key (near-equal numbers sort next to each
    # other), then look for any one-to-one matching of the rows: of all of them when the result
    # is small, else of the rows left once rows with equal keys are paired off (equal keys match
    # cell by cell), so an ambiguous spelling ("None": a NULL or the text) never rests on where
    # sorting put it, whatever the size.
    first_bad = _sorted_pairing_mismatch(answer, gold)
    if first_bad is None:
        return True, ""
    if len(gold) > _MAX_BIPARTITE_ROWS:
        answer, gold = _unpaired(answer, a_keys, g_keys), _unpaired(gold, g_keys, a_keys)
    if len(gold) > _MAX_BIPARTITE_ROWS or not _bipartite_match(answer, gold):
        return False, f"value mismatch: got {_show(first_bad[0])}, expected {_show(first_bad[1])}"
    return True, ""


def _unpaired(rows: _Rows, keys: list, other_keys: list) -> _Rows:
    """The rows of `rows` left when each is paired off with a row of the other side with the same key."""
    shared = Counter(keys) & Counter(other_keys)
    left = []
    for row, key in zip(rows, keys):
        if shared[key]:
            shared[key] -= 1
        else:
            left.append(row)
    return left


def _sorted_pairing_mismatch(answer: _Rows, gold: _Rows) -> tuple[_Cell, _Cell] | None:
    """None when the rows pair up after sorting both sides by `key` (or by `null_key`), else the
    first pair of cells that differ in the `key` order."""
    first = None
    for cell_key in (_Cell.key, _Cell.null_key):
        def sort_key(row):
            return tuple(cell_key(c) for c in row)

        try:
            a_sorted, g_sorted = sorted(answer, key=sort_key), sorted(gold, key=sort_key)
        except TypeError:
            a_sorted, g_sorted = answer, gold
        bad = next(((ca, cg) for ra, rg in zip(a_sorted, g_sorted) for ca, cg in zip(ra, rg)
                    if not _cells_match(ca, cg)), None)  # fmt: skip
        if bad is None:
            return None
        first = first or bad
    return first


def _bipartite_match(answer: _Rows, gold: _Rows) -> bool:
    """A perfect matching between answer rows and gold rows under tolerant equality (Kuhn)."""
    n = len(gold)
    edges = [
        [i for i, ra in enumerate(answer) if all(_cells_match(ca, cg) for ca, cg in zip(ra, rg))]
        for rg in gold
    ]
    owner = [-1] * n  # answer row -> gold row

    def augment(g: int, seen: list[bool]) -> bool:
        for a in edges[g]:
            if not seen[a]:
                seen[a] = True
                if owner[a] < 0 or augment(owner[a], seen):
                    owner[a] = g
                    return True
        return False

    return all(augment(g, [False] * n) for g in range(n))


def _ordered_match(answer: _Rows, gold: _Rows) -> tuple[bool, str]:
    for r, (ra, rg) in enumerate(zip(answer, gold), start=1):
        for ca, cg in zip(ra, rg):
            if not _cells_match(ca, cg):
                return False, f"value mismatch in row {r}: got {_show(ca)}, expected {_show(cg)}"
    return True, ""


def _column_permutations(answer: _Rows, gold: _Rows, width: int):
    """Column orders to try (identity first): each answer column must hold the same
    multiset of values as the gold column it is mapped to."""
    identity = tuple(range(width))
    yield identity
    if width == 1:
        return
    # Each column sorted once; a pair of columns fits when their sorted values match.
    a_cols = [sorted((row[i] for row in answer), key=_Cell.key) for i in range(width)]
    g_cols = [sorted((row[j] for row in gold), key=_Cell.key) for j in range(width)]
    options = [
        [i for i in range(width) if all(map(_cells_match, a_cols[i], g_cols[j]))]
        for j in range(width)
    ]
    if any(not o for o in options):
        return
    tried = 0
    chosen: list[int] = []
    used = [False] * width

    def search(j: int):
        nonlocal tried
        if tried >= _MAX_PERMUTATIONS:
            return
        if j == width:
            tried += 1
            yield tuple(chosen)
            return
        for i in options[j]:
            if not used[i]:
                used[i] = True
                chosen.append(i)
                yield from search(j + 1)
                chosen.pop()
                used[i] = False

    for perm in search(0):
        if perm != identity:
            yield perm


def _compare(answer: _Rows, gold: _Rows, ordered: bool) -> tuple[int, str]:
    """(level, reason): level 3 = match; 2 = same shape, values differ; 1 = row count;
    0 = column count. Higher levels make better failure reasons."""
    width = len(gold[0]) if gold else 0
    if len(answer) != len(gold):
        expected = f"{len(gold)} row{'s' if len(gold) != 1 else ''}" if gold else "no rows"
        got = f"{len(answer)}" if answer else "none"
        return 1, f"expected {expected}, got {got}"
    if not gold:
        return 3, "empty result, as expected"
    widths = {len(r) for r in answer}
    if widths != {width}:
        got = ", ".join(str(w) for w in sorted(widths))
        return 0, f"expected {width} column{'s' if width != 1 else ''}, got {got}"
    first_reason = ""
    for perm in _column_permutations(answer, gold, width):
        permuted = answer if perm == tuple(range(width)) else [[row[i] for i in perm] for row in answer]
        ok, reason = (_ordered_match if ordered else _multiset_match)(permuted, gold)
        if ok:
            note = "" if perm == tuple(range(width)) else " (columns in another order)"
            return 3, note
        first_reason = first_reason or reason
    if ordered and _multiset_match(answer, gold)[0]:
        return 2, "right rows in the wrong order"
    return 2, first_reason
