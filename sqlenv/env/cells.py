"""Cells as the verifier compares them: a value read into its folded text, its number and its NULL-ness, and
the rules by which an answer cell matches a gold cell (numbers numerically, with the tolerance and the rounding
rule of `sqlenv.env.verifier`'s docstring; text case- and whitespace-insensitively; NULL against its spellings).
`format_float` is how answers and tool results write a float."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from sqlenv.types import blob_text

REL_TOL = 1e-6
ABS_TOL = 1e-9
_NULL_SPELLINGS = frozenset({"null", "none"})

_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_GROUPED_NUMBER = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")  # "1,234.5" inside a cell
_QUOTE_PAIRS = (('"', '"'), ("'", "'"), ("`", "`"), ("\u201c", "\u201d"), ("\u2018", "\u2019"))


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
