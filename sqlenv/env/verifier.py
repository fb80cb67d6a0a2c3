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
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from sqlenv.types import Verdict, blob_text

VERIFIER_VERSION = "1.1"

REL_TOL = 1e-6
ABS_TOL = 1e-9
_MAX_PERMUTATIONS = 2000  # column permutations tried per parse (Spider-style, bounded)
_MAX_BIPARTITE_ROWS = 60  # tolerant one-to-one row matching beyond sorting, up to this size

# How models say "no rows" (compared after folding case/whitespace and a final "." or "!").
_EMPTY_SPELLINGS = frozenset(
    [
        "", "[]", "()", "{}", "[[]]", "none", "null", "nil", "nothing", "empty", "n/a",
        "no results", "no result", "no rows", "no row", "no data", "no records", "no record",
        "no matches", "no match", "no matching rows", "no matching records", "empty set",
        "empty result", "empty list", "empty table", "zero rows", "0 rows", "there are none",
        "none found", "no values", "no value",
    ]
)  # fmt: skip
_NULL_SPELLINGS = frozenset({"null", "none"})

_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_GROUPED_NUMBER = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")  # "1,234.5" inside a cell
_PREFIX = re.compile(
    r"^(?:the\s+)?(?:final\s+)?(?:answer|result)s?\s*(?:(?:is|are|was)\b\s*[:=]?|[:=])\s*",
    re.IGNORECASE,
)
_FENCE = re.compile(r"^```[\w+-]*[ \t]*\n?(.*?)\n?[ \t]*```$", re.DOTALL)
_BOXED = re.compile(r"^\\boxed\{(.*)\}$", re.DOTALL)
_MARKDOWN_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(?:\|\s*:?-{2,}:?\s*)*\|?\s*$")
_QUOTE_PAIRS = (('"', '"'), ("'", "'"), ("`", "`"), ("\u201c", "\u201d"), ("\u2018", "\u2019"))


# ============================================================================ cells
class _Cell:
    """A normalised cell: its folded text, its number (if it reads as one), NULL-ness."""

    __slots__ = ("text", "alt", "num", "exact", "decimals", "null", "raw")

    def __init__(self, text: str, num: float | None, exact: int | None, decimals: int | None,
                 null: bool, alt: str | None, raw: str):
        self.text = text  # casefolded, trimmed, inner whitespace collapsed
        self.alt = alt  # the same without one pair of surrounding quotes (answer side)
        self.num = num
        self.exact = exact  # the integer, when the cell is one (exact comparison)
        self.decimals = decimals  # digits shown after the point (answer side rounding rule)
        self.null = null
        self.raw = raw  # for messages

    def key(self):
        """Hashable key that equal cells share in the common (exactly equal) case. A NULL keys as the text
        "none", the spelling `format_answer` gives it; an answer cell spelled "null" or "none" keys as that
        text, never as NULL: the spelling may as well be the text 'Null' (a city), and the matching decides."""
        if self.exact is not None:
            return ("n", self.exact)
        if self.num is not None:
            return ("n", round_sig(self.num))
        return ("t", self.text)

    def null_key(self):
        """`key`, except that every cell read as NULL (an answer's "null"/"none" too) keys as NULL."""
        return ("z",) if self.null else self.key()


def round_sig(x: float) -> float:
    if x == 0 or math.isinf(x) or math.isnan(x):
        return x
    if x.is_integer() and abs(x) < 2**53:
        return int(x)
    return float(f"{x:.9g}")


def fold_text(text: str) -> str:
    """Trimmed, inner whitespace collapsed to one space, casefolded."""
    return " ".join(text.split()).casefold()


def parse_number(text: str) -> tuple[float | None, int | None, int | None]:
    """(value, exact integer or None, decimals shown) of a numeric string, else Nones."""
    s = text.strip()
    if not s or len(s) > 400:
        return None, None, None
    if s[0] not in "+-.0123456789":
        if s.lower() in ("inf", "infinity"):
            return math.inf, None, None
        return None, None, None
    if _NUMBER.fullmatch(s) is None:
        if _GROUPED_NUMBER.fullmatch(s) is None:
            if s.lower() in ("-inf", "-infinity", "+inf"):
                return (-math.inf if s[0] == "-" else math.inf), None, None
            return None, None, None
        s = s.replace(",", "")
    mantissa = s.split("e")[0].split("E")[0]
    if "." not in mantissa and "e" not in s.lower():
        value = int(s)
        return float(value), value, 0
    decimals = len(mantissa.split(".", 1)[1]) if "." in mantissa and "e" not in s.lower() else None
    try:
        value = float(s)
    except (ValueError, OverflowError):
        return None, None, None
    exact = int(value) if value.is_integer() and abs(value) < 2**63 else None
    return value, exact, decimals


def _gold_cell(value: Any) -> _Cell:
    if value is None:
        return _Cell("none", None, None, None, True, None, "NULL")
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        return _Cell(str(value), float(value), value, 0, False, None, str(value))
    if isinstance(value, float):
        exact = int(value) if value.is_integer() and abs(value) < 2**63 else None
        return _Cell(fold_text(repr(value)), value, exact, None, False, None, format_float(value))
    if isinstance(value, (bytes, bytearray, memoryview)):
        text = blob_text(value)
        return _Cell(text, None, None, None, False, None, text)
    text = value if isinstance(value, str) else str(value)
    num, exact, decimals = parse_number(text)
    return _Cell(fold_text(text), num, exact, decimals, False, None, text)


def _answer_cell(value: Any) -> _Cell:
    if not isinstance(value, str):
        if value is None or isinstance(value, (int, float)):
            cell = _gold_cell(value)
            if isinstance(value, float) and not math.isinf(value):
                cell.decimals = _shown_decimals(repr(value))
            return cell
        value = json.dumps(value) if isinstance(value, (list, dict, tuple)) else str(value)
    text = value.strip()
    alt = _strip_quotes(text)
    folded = fold_text(text)
    num, exact, decimals = parse_number(alt if alt is not None else text)
    null = folded in _NULL_SPELLINGS or (alt is not None and fold_text(alt) in _NULL_SPELLINGS)
    return _Cell(folded, num, exact, decimals, null, fold_text(alt) if alt is not None else None, text)


def _shown_decimals(text: str) -> int | None:
    if "e" in text.lower() or "." not in text:
        return 0 if "e" not in text.lower() else None
    return len(text.split(".", 1)[1])


def _strip_quotes(text: str) -> str | None:
    if len(text) >= 2:
        for left, right in _QUOTE_PAIRS:
            if text[0] == left and text[-1] == right:
                return text[1:-1].strip()
    return None


def _numbers_match(answer: _Cell, gold: _Cell) -> bool:
    a, g = answer.num, gold.num
    if gold.exact is not None and gold.decimals == 0:
        # An integer gold (count, sum of integers, id): the answer must be that integer.
        return answer.exact is not None and answer.exact == gold.exact
    if a == g:
        return True
    if math.isinf(a) or math.isinf(g):
        return False
    if math.isclose(a, g, rel_tol=REL_TOL, abs_tol=ABS_TOL):
        return True
    # A float answered rounded to the digits it shows (at least two decimals): 3.14159 <- 3.14.
    d = answer.decimals
    if d is not None and d >= 2:
        return abs(a - g) <= 0.5 * 10.0 ** (-d) + 1e-12 * max(1.0, abs(g))
    return False


def _cells_match(answer: _Cell, gold: _Cell) -> bool:
    if gold.null:
        return answer.null or answer.text == ""
    if gold.num is not None and answer.num is not None:
        if _numbers_match(answer, gold):
            return True
    return answer.text == gold.text or (answer.alt is not None and answer.alt == gold.text)


def _show(cell: _Cell) -> str:
    raw = cell.raw if len(cell.raw) <= 60 else cell.raw[:57] + "..."
    return repr(raw)


# ============================================================================ rows
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


# ============================================================================ parsing
def _unwrap_variants(text: str) -> list[str]:
    """The answer text and the texts left after peeling off each wrapping models add."""
    variants = [text.strip()]
    current = text.strip()
    for _ in range(8):
        nxt = _peel(current)
        if nxt == current:
            break
        current = nxt
        if current not in variants:
            variants.append(current)
    return variants


def _peel(text: str) -> str:
    t = text.strip()
    m = _FENCE.match(t)
    if m:
        return m.group(1).strip()
    m = _BOXED.match(t)
    if m:
        return m.group(1).strip()
    if t.startswith("**") and t.endswith("**") and len(t) > 4:
        return t[2:-2].strip()
    if t.startswith("**"):  # "**Answer:** 42"
        m = re.match(r"^\*\*([^*]{1,40})\*\*\s*", t)
        if m and _PREFIX.match(m.group(1) + " "):
            return t[m.end():].strip()
    m = _PREFIX.match(t)
    if m and m.end() > 0 and m.end() < len(t):
        return t[m.end():].strip()
    quoted = _strip_quotes(t)
    if quoted is not None and t[0] not in t[1:-1] and t[-1] not in t[1:-1]:
        return quoted  # one pair of quotes around everything (not "'a', 'b'")
    if t.endswith(".") and not t.endswith("..") and len(t) > 1:
        return t[:-1].rstrip()
    return t


def _literal(text: str) -> Any:
    t = text.strip()
    if not t or t[0] not in "[({\"'" and not (t[0].isdigit() or t[0] in "-+"):
        return _NO_LITERAL
    if len(t) > 2_000_000:
        return _NO_LITERAL
    try:
        return json.loads(t)
    except (ValueError, RecursionError):
        pass
    try:
        return ast.literal_eval(t)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _NO_LITERAL


_NO_LITERAL = object()
_SCALARS = (str, int, float, bool, type(None))


def _literal_tables(value: Any) -> list[list[list[Any]]]:
    """Row lists a parsed literal can stand for."""
    if isinstance(value, _SCALARS):
        return [[[value]]]
    if isinstance(value, dict):
        return [[list(value.values())]]
    if isinstance(value, (list, tuple, set)):
        items = list(value)
        if not items:
            return [[]]
        if all(isinstance(v, _SCALARS) for v in items):
            return [[[v] for v in items], [items]]  # a column, or a single row
        if all(isinstance(v, (list, tuple, dict)) for v in items):
            return [[list(v.values()) if isinstance(v, dict) else list(v) for v in items]]
    return []


def _split_cells(line: str, seps: str, markdown: bool = True) -> list[str]:
    """Cells of one row: split at '|' if there is one, else at the first of `seps` present.
    With `markdown`, "| a | b |" loses its outer pipes (read without, a row whose first or
    last cell is empty keeps it)."""
    s = line.strip()
    if "|" in s:
        if markdown:
            s = s[1:] if s.startswith("|") else s
            s = s[:-1] if s.endswith("|") else s
        return s.split("|")
    for sep in seps:
        if sep in s:
            return s.split(sep)
    return [s]


def _text_tables(text: str, n_gold: int, width: int) -> list[list[list[Any]]]:
    """Row lists from delimiter-based readings of the text."""
    tables = []
    all_lines = [ln for ln in text.splitlines() if ln.strip()]
    lines = [ln for ln in all_lines if not _MARKDOWN_RULE.match(ln)]
    # A Markdown table's header is the line above its |---| rule; nothing else is a header
    # (dropping an arbitrary first line would accept an answer with one extra wrong row).
    header = len(all_lines) > 1 and _MARKDOWN_RULE.match(all_lines[1]) is not None
    if len(lines) > 1:
        for seps, markdown in (("\t", True), ("\t,", True), ("\t", False)):
            rows = [_split_cells(ln, seps, markdown) for ln in lines]
            tables.append(rows)
            if header:
                tables.append(rows[1:])
        tables.append([[ln] for ln in lines])
    if ";" in text:
        parts = [p for p in text.split(";") if p.strip()]
        tables.append([_split_cells(p, "\t,") for p in parts])
        tables.append([_split_cells(p, "\t") for p in parts])
    if "|" in text and len(lines) == 1:
        tables.append([_split_cells(text, "")])
        tables.append([_split_cells(text, "", markdown=False)])
    if "," in text:
        cells = text.split(",")
        tables.append([[c] for c in cells])
        tables.append([cells])
        if width == 1 and n_gold >= 2:  # "a, b and c" / "a, b, and c"
            parts = re.split(r",\s*(?:and\s+)?|\s+and\s+", text)
            tables.append([[p] for p in parts])
    elif "\t" in text and len(lines) == 1:
        tables.append([text.split("\t")])
    if width == 1 and n_gold >= 2 and " and " in text and "," not in text:
        tables.append([[p] for p in text.split(" and ")])
    return tables


def _readings(answer: str, n_gold: int, width: int):
    """Every (raw) table the answer text can be read as, most literal readings first."""
    for variant in _unwrap_variants(answer):
        if fold_text(variant).rstrip(".!") in _EMPTY_SPELLINGS:
            yield []
        literal = _literal(variant)
        if literal is not _NO_LITERAL:
            yield from _literal_tables(literal)
        yield [[variant]]
        yield from _text_tables(variant, n_gold, width)
        t = variant.strip()
        if len(t) >= 2 and t[0] + t[-1] in ("[]", "()", "{}"):  # [a, b] without quotes
            yield from _text_tables(t[1:-1], n_gold, width)


# ============================================================================ public API
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


# A float whose repr is at most this long is written as its repr; a longer one to 10 significant
# digits (0.1 + 0.2 shows as 0.3), which the verifier's tolerance accepts.
SHORT_FLOAT_CHARS = 12


def format_float(x: float) -> str:
    """A float as answers and tool results write it (the one rule, shared with `prompts`)."""
    if math.isinf(x) or math.isnan(x):
        return repr(x)
    r = repr(x)
    if len(r) <= SHORT_FLOAT_CHARS:
        return r
    short = f"{x:.10g}"
    return short if math.isfinite(float(short)) else r  # near the float limit, rounding up would read as inf


def _format_value(v: Any) -> str:
    if v is None:
        return "None"
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return format_float(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return blob_text(v)
    return str(v)


def _json_value(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return blob_text(v)
    if isinstance(v, float) and (math.isinf(v) or math.isnan(v)):
        return format_float(v)
    return v


def _one_line(text: str) -> bool:
    """No line break anywhere, a trailing one included (what the reader splits rows on)."""
    return text.splitlines() == [text] or text == ""


def format_answer(columns: Sequence[str], rows: Sequence[Sequence]) -> str:
    """Canonical answer text: one value as itself; one column as "a, b, c"; several columns
    as one row per line with cells joined by " | "; no rows as "[]". When values contain the
    delimiters (or anything else the reader would split or skip, such as a line "--"), one value
    per line, else JSON: the plain text is kept only if `verify` reads it back as `rows`."""
    rows = [list(r) for r in rows]
    text = _plain_text(rows)
    if text is not None and verify(text, rows, True).correct:
        return text
    return json.dumps([[_json_value(v) for v in r] for r in rows], ensure_ascii=False)


def _plain_text(rows: list[list[Any]]) -> str | None:
    """The human spelling of `rows` (see `format_answer`), or None when only JSON can hold them."""
    if not rows:
        return "[]"
    width = len(rows[0])
    if len(rows) == 1 and width == 1:
        return _format_value(rows[0][0])
    texts = [[_format_value(v) for v in r] for r in rows]
    if width == 1:
        column = [r[0] for r in texts]
        if all("," not in t and _one_line(t) for t in column):
            return ", ".join(column)
        if all(t.strip() and _one_line(t) for t in column):
            return "\n".join(column)
    elif all("|" not in t and t.strip() and _one_line(t) for r in texts for t in r):
        return "\n".join(" | ".join(r) for r in texts)
    return None
