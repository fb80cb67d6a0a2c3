"""What a prepared or trained model folder records about itself, read by every stage that plays a model.

- `model_fingerprint`: a short stable hash of the files that define a model's behaviour (weights, config,
  tokenizer, chat template), wherever the folder lives; results carry it, and the report compares it with
  the live model's before it uses a result.
- `read_provenance` / `chat_template_kwargs` / `untrained_token_ids`: what `prepare_model` (and training)
  wrote into `provenance.json`: the template variables every descendant must be rendered with, the token
  rows the base checkpoint never trained.
- `readable_files`: saved files get the umask's modes (safetensors shards are written 0600).

Kept apart from `sqlenv.models` (GGUF parsing and preparation) so that training and evaluation do not
depend on the preparation code.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

PROVENANCE_FILE = "provenance.json"
_CHUNK = 8 << 20  # bytes per read (8 MiB)


# Files that define a model's behaviour; provenance.json (times, sizes) and READMEs are excluded.
_FINGERPRINT_PATTERNS = (
    "config.json", "generation_config.json", "*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin",
    "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "chat_template.json", "vocab.json",
    "merges.txt", "special_tokens_map.json", "added_tokens.json", "adapter_config.json",
)  # fmt: skip


def model_fingerprint(path: str | os.PathLike[str], length: int = 12) -> str:
    """Short stable hash of a model folder's weights, config and tokenizer files (names and contents).

    Same files -> same fingerprint, wherever the folder lives; provenance.json is not part of it.
    """
    folder = Path(path)
    files = sorted({f for pat in _FINGERPRINT_PATTERNS for f in folder.glob(pat) if f.is_file()})
    if not files:
        raise FileNotFoundError(f"no model files in {folder}")
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode("utf-8") + b"\0")
        digest.update(_file_sha256(f).encode("ascii") + b"\n")
    return digest.hexdigest()[:length]


def read_provenance(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The provenance.json of a prepared folder ({} when there is none, e.g. a trainer's output)."""
    f = Path(path) / PROVENANCE_FILE
    return json.loads(f.read_text(encoding="utf-8")) if f.is_file() else {}


def chat_template_kwargs(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Extra `apply_chat_template` kwargs recorded at preparation (e.g. {"enable_thinking": False} for Qwen3)."""
    return dict(read_provenance(path).get("chat_template_kwargs", {}))


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def untrained_token_ids(path: str | os.PathLike[str]) -> list[int]:
    """Ids recorded as untrained at preparation (see `untrained_added_tokens`); [] when none or unknown."""
    return sorted(read_provenance(path).get("untrained_tokens", {}).values())


def readable_files(folder: Path) -> None:
    """Give saved files the umask's usual modes (safetensors shards are written 0600 via a temp file)."""
    umask = os.umask(0)
    os.umask(umask)
    for f in folder.iterdir():
        if f.is_file():
            f.chmod(0o666 & ~umask)
