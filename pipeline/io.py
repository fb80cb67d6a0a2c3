"""Atomic writes: an output either appears whole or not at all.

A stage killed half-way (Ctrl-C, OOM, a crash in the middle of a dump) must never leave a
truncated JSONL that the next stage happily reads, or a folder DVC would cache. Files are
written to a temporary sibling and `os.replace`d into place (atomic on POSIX within one
filesystem); folders are built in a temporary sibling and swapped in with two renames, the
old copy removed only after the new one is in place (`sqlenv.files.atomic_dir`, re-exported).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqlenv.files import atomic_dir, read_jsonl  # noqa: F401  (re-exported for the stages)


def _tmp_sibling(path: Path, suffix: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{suffix}", dir=path.parent)
    os.close(fd)
    return Path(name)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    path = Path(path)
    tmp = _tmp_sibling(path)
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def to_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n"


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    return atomic_write_text(path, to_json(obj))


def print_json(obj: Any, out: str | os.PathLike[str] | None = None) -> None:
    """Print `obj` as indented JSON (a benchmark's result) and, given `out`, also write it there atomically."""
    text = json.dumps(obj, indent=2)
    print(text)
    if out is not None:
        atomic_write_text(out, text + "\n")


def atomic_write_jsonl(path: str | os.PathLike[str], records: Iterable[Any]) -> Path:
    """One JSON object per line, keys sorted, so equal records give byte-identical files."""
    lines = [json.dumps(r, sort_keys=True, ensure_ascii=False, default=str) + "\n" for r in records]
    return atomic_write_text(path, "".join(lines))
