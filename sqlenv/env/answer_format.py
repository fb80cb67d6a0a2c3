"""The canonical answer text of a result (`format_answer`): the one answer formatter, chosen so that
`verify(format_answer(columns, rows), rows, ordered)` always holds."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from sqlenv.env.cells import format_float
from sqlenv.types import blob_text


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
    from sqlenv.env.verifier import verify  # verify reads answers; it does not write them

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
