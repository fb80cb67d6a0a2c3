"""Answer text read into tables: the wrappings models add peeled off, then every reading of the text as rows
(JSON or Python literals, the whole text as one value, lines, cells split at `|`, tab, `,` or `;`)."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from sqlenv.env.cells import _strip_quotes, fold_text

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

_PREFIX = re.compile(
    r"^(?:the\s+)?(?:final\s+)?(?:answer|result)s?\s*(?:(?:is|are|was)\b\s*[:=]?|[:=])\s*",
    re.IGNORECASE,
)

_FENCE = re.compile(r"^```[\w+-]*[ \t]*\n?(.*?)\n?[ \t]*```$", re.DOTALL)
_BOXED = re.compile(r"^\\boxed\{(.*)\}$", re.DOTALL)
_MARKDOWN_RULE = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(?:\|\s*:?-{2,}:?\s*)*\|?\s*$")


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
