"""Files of the project: `atomic_dir`, the one atomic folder swap, and `read_jsonl`, the one JSONL reader.

A folder is built in a temporary sibling and swapped in with two renames (the old copy moved aside, the
new one moved in, the old one removed only after the new one is in place), so a crash at any moment
leaves either the old folder or the new one, never a mix; on an error inside the block the temporary
folder vanishes and the old folder stays. The base-model preparation, the procedural world and every
stage's folder outs (`pipeline.io` re-exports it) use it. Renames are atomic within one filesystem:
the temporary folder is a sibling of the destination for that reason. `read_jsonl` names the file and
line of anything malformed (`pipeline.io` re-exports both).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty temporary folder; on success it replaces `path`, on error it vanishes.

        with atomic_dir("data/databases") as tmp:
            build_into(tmp)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if path.exists() or path.is_symlink():
        old = path.with_name(f".{path.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(path, old)
    os.replace(tmp, path)
    if old is not None:
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a JSONL file; a malformed line raises ValueError naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"file not found: {path}")
    out = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON: {e.msg}") from e
            if not isinstance(rec, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
            out.append(rec)
    return out
