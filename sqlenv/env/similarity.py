"""How close a query result is to the gold result: the potential behind the progress reward.

`result_similarity(pred_rows, gold_rows)` is in [0, 1]: 1.0 iff the results match as multisets after
aligning columns (the best column mapping of the predicted onto the gold columns), partial credit
otherwise (an F1 over normalised cells). It shapes the reward only (`env.rewards.progress`, paid with
the answer); correctness is `env.verifier.verify`'s alone. Cells are normalised as the verifier reads
numbers (ints and floats compare by value) but no answer text is parsed here.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from typing import Any

from sqlenv.env.verifier import (  # the verifier's cell rules
    fold_text,
    parse_number,
    round_sig,
)
from sqlenv.types import blob_text


def _sim_key(v: Any):
    kind = type(v)
    if kind is int:
        return ("n", v)
    if kind is str:
        s = v.strip()
        if s and s[0] in "+-.0123456789":
            num, exact, _ = parse_number(s)
            if exact is not None:
                return ("n", exact)
            if num is not None:
                return ("n", round_sig(num))
        return ("t", fold_text(s))
    if kind is float:
        return ("n", round_sig(v))
    if v is None:
        return ("z",)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return ("t", blob_text(v))
    if isinstance(v, (bool, int)):
        return ("n", int(v))
    return ("t", fold_text(str(v)))


def _f1(a: Counter, b: Counter) -> float:
    """F1 of two multisets: 2 |a & b| / (|a| + |b|), without building the intersection."""
    total = sum(a.values()) + sum(b.values())
    if total == 0:
        return 1.0
    if len(a) > len(b):
        a, b = b, a
    get = b.get
    return 2.0 * sum([min(n, get(k, 0)) for k, n in a.items()]) / total


def result_similarity(pred_rows: Sequence[Sequence], gold_rows: Sequence[Sequence]) -> float:
    """How close a query result is to the gold result, in [0, 1]; 1.0 iff they match as
    multisets of rows (cells normalised as `verify` reads them, columns aligned).

    score = 0.5 * column-count agreement * row-level F1 + 0.5 * cell-level F1, where the
    row-level F1 compares rows on the aligned columns only (so a result with the right rows
    but a missing or extra column still earns row credit) and the cell-level F1 compares the
    multisets of all cells (partial credit whatever the shapes). Rows compare as multisets,
    never in order. O(cells), plus a few alignments of columns (greedy by column-value F1,
    and only among columns with identical values when that is needed for a 1.0)."""
    if not pred_rows and not gold_rows:
        return 1.0
    if not pred_rows or not gold_rows:
        return 0.0
    pred = [tuple(map(_sim_key, row)) for row in pred_rows]
    gold = [tuple(map(_sim_key, row)) for row in gold_rows]
    cell_f1 = _f1(Counter(itertools.chain.from_iterable(pred)), Counter(itertools.chain.from_iterable(gold)))
    if cell_f1 == 0.0:
        return 0.0  # not one value in common: no row can match either
    kp, kg = max(map(len, pred)), max(map(len, gold))
    col_f1 = 2.0 * min(kp, kg) / (kp + kg)
    return 0.5 * col_f1 * _best_row_f1(pred, gold, kp, kg) + 0.5 * cell_f1


def _project(rows: list, columns: Sequence[int]) -> Counter:
    return Counter(tuple(row[i] if i < len(row) else None for i in columns) for row in rows)


def _best_row_f1(pred: list, gold: list, kp: int, kg: int) -> float:
    """Row-level multiset F1 under the best column pairing found (pred column -> gold column)."""
    if kp == kg:
        best = _f1(Counter(pred), Counter(gold))
        if best == 1.0:
            return best
    else:
        best = 0.0
    pred_cols = [Counter(row[i] for row in pred if i < len(row)) for i in range(kp)]
    gold_cols = [Counter(row[j] for row in gold if j < len(row)) for j in range(kg)]
    # Pair columns greedily by how many distinct values they share (set overlap: C speed).
    pred_sets, gold_sets = [set(c) for c in pred_cols], [set(c) for c in gold_cols]
    score = {
        (i, j): 2 * len(pred_sets[i] & gold_sets[j]) / (len(pred_sets[i]) + len(gold_sets[j]))
        for i in range(kp)
        for j in range(kg)
    }
    greedy: dict[int, int] = {}  # gold column -> pred column
    for (i, j), _ in sorted(score.items(), key=lambda item: (-item[1], abs(item[0][0] - item[0][1]))):
        if j not in greedy and i not in greedy.values():
            greedy[j] = i
    g_idx = sorted(greedy)
    if g_idx:
        best = max(best, _f1(_project(pred, [greedy[j] for j in g_idx]), _project(gold, g_idx)))
    if best < 1.0 and kp == kg and all(pred_cols[greedy[j]] == gold_cols[j] for j in g_idx):
        # Every column has a twin with the same values but the rows differ: columns with
        # identical value multisets may be paired the wrong way round. Try those pairings.
        options = [[i for i in range(kp) if pred_cols[i] == gold_cols[j]] for j in range(kg)]
        gold_counter = Counter(gold)
        for tried, perm in enumerate(itertools.product(*options)):
            if tried >= 120:
                break
            if len(set(perm)) == kg:
                best = max(best, _f1(_project(pred, perm), gold_counter))
                if best == 1.0:
                    break
    return best
