"""The one function that decides correctness: a submitted answer string vs. the gold SQL's rows.

SFT filtering, the GRPO reward and evaluation all call `verify`, so they cannot disagree;
`VERIFIER_VERSION` is recorded with every metric it produced and must change whenever a
verdict could change.

How an answer is read. Models wrap and punctuate answers in many ways, so `verify` strips
the usual wrappings (code fences, quotes, backticks, `Answer:` / `The answer is` prefixes,
`\\boxed{}`, bold markers, a trailing period), then tries several *parses* of the text and
accepts when any of them matches the gold rows:
- an empty-result spelling (`[]`, `none`, `no results`, `empty`, ``, ...), only for empty gold
  (or a single NULL);
- a JSON or Python literal (a scalar, a list, a list of lists/tuples/dicts);
- the whole text as one value (so "Smith, John" matches a single gold value with a comma);
- one row per line (a Markdown table's header and |---| rule are skipped), cells split by
  `|`, tab or `,`; rows split by `;`; one comma-separated list (as a column or as one row,
  "a, b and c" included).
Cells compare case-insensitively after trimming (and collapsing inner whitespace); numbers
compare numerically ("5" == 5 == "5.0"): integers exactly (a count of 1000001 is not
1000000), other numbers with a relative tolerance of 1e-6 (absolute 1e-9 near zero), and an
answer that is the gold number correctly rounded to the digits it shows, at least two
decimals, is accepted (3.14159 <- "3.14", not "3.1"). NULL matches "null"/"none" (and an
empty cell); a single NULL gold also accepts an empty-result spelling.

How rows compare. Row order matters only when `ordered` (the gold SQL orders at top level,
see `sqlenv.data.hardness.is_ordered`); otherwise rows compare as multisets (duplicates count). Columns of a
multi-column answer may come in any order, provided one permutation fits every row, as in
Spider's execution match (the search is pruned per column and bounded for wide results).

What it does not do: it cannot know whether the *question* called for an ordering, and a
candidate parse that happens to match is accepted even if the model meant something else.
Every parse is tied to the gold shape, so accepting a wrong answer needs the same values.

`format_answer` writes the canonical answer text, chosen so that
`verify(format_answer(cols, rows), rows, ordered)` always holds (tests check many shapes).
Whether a gold SQL orders its result is `data.hardness.is_ordered`'s (SQL analysis); the
similarity behind the progress reward is `env.similarity`'s (shaping, not judging).

Where the parts live: the cell rules in `env.cells`, the row comparison in `env.row_match`, the
readings of an answer text in `env.answer_reading`, the canonical text in `env.answer_format`;
`verify` here ties them together, and the names callers import from here stay importable here.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlenv.env.answer_format import format_answer
from sqlenv.env.answer_reading import _EMPTY_SPELLINGS, _readings
from sqlenv.env.cells import (
    ABS_TOL,
    REL_TOL,
    SHORT_FLOAT_CHARS,
    _NULL_SPELLINGS,
    _answer_cell,
    _gold_cell,
    fold_text,
    format_float,
    parse_number,
    round_sig,
)
from sqlenv.env.row_match import _compare
from sqlenv.types import Verdict

__all__ = ["ABS_TOL", "REL_TOL", "SHORT_FLOAT_CHARS", "VERIFIER_VERSION", "fold_text", "format_answer", "format_float",
           "parse_number", "round_sig", "verify"]  # fmt: skip

VERIFIER_VERSION = "1.1"


def verify(answer: str, gold_rows: Sequence[Sequence], ordered: bool) -> Verdict:
    """Decide whether `answer` states the result `gold_rows`; the reason says what matched
    or what did not (e.g. "expected 3 rows, got 2", "value mismatch: got '41', expected '42'")."""
    if answer is None:
        return Verdict(False, "no answer given")
    if not isinstance(answer, str):
        answer = str(answer)
    gold = [[_gold_cell(v) for v in row] for row in gold_rows]
    n_gold, width = len(gold), (len(gold[0]) if gold else 0)
    best, best_reason = (-1, 0), "answer could not be read"
    if n_gold == 1 and width == 1 and gold[0][0].null:
        if fold_text(answer).strip("`'\". ") in _EMPTY_SPELLINGS | _NULL_SPELLINGS:
            return Verdict(True, "matched: NULL")
    seen: list = []
    for raw in _readings(answer, n_gold, width):
        # A vector read the other way round: a one-column gold answered as one row, etc.
        if n_gold and len(raw) == 1 and width == 1 and len(raw[0]) == n_gold and n_gold > 1:
            raw = [[v] for v in raw[0]]
        elif n_gold == 1 and width > 1 and len(raw) == width and all(len(r) == 1 for r in raw):
            raw = [[r[0] for r in raw]]
        if len(raw) != n_gold or any(len(r) != width for r in raw):
            level, reason = _compare(raw, gold, ordered)  # a shape reason, cells not needed
        else:
            if any(raw == earlier for earlier in seen):  # another reading, same cells
                continue
            seen.append(raw)
            level, reason = _compare([[_answer_cell(v) for v in row] for row in raw], gold, ordered)
        if level == 3:
            what = "empty result" if not gold else f"{n_gold} row{'s' if n_gold != 1 else ''}"
            return Verdict(True, reason if not gold else f"matched {what}{reason}")
        # Among shape errors report the nearest reading, except that an answer spelled as
        # "no rows" is reported as such.
        rank = (level, 1 if not raw else -abs(len(raw) - n_gold))
        if rank > best:
            best, best_reason = rank, reason
    return Verdict(False, best_reason)
