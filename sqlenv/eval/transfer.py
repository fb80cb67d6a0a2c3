"""The transfer set: a fixed, hardness-stratified set of a real Spider-format folder's questions, played by
the trained agents (the episode loop, value answers) and by the base model's single-shot SQL (EX) alike.

Which questions: the committed ids file (`configs/transfer/spider_dev_n200.json`) names them by a content
key — sha256 of `db_id`, question text and gold SQL, not the file position — so a full Spider download
finds the same questions as the 12-database slice they were drawn from; the file holds no question text.
They were drawn once (`draw`) from the questions the agent can be scored on (`prepare`'s loader and oracle
gate) with `stratified_sample`, the draw of `sqlenv eval --n`, and are fed to every policy, so the
agent-against-single-shot comparison is paired. With no ids file (`transfer.ids: null`) the set is drawn
from the folder at run time instead (another Spider-format folder of your own).

`prepare_transfer` writes the set as a DVC out: `questions.jsonl` (the kept questions, in the ids' order)
and `databases/<db_id>/<db_id>.sqlite` (copies of the databases they use) and `manifest.json` (where they
came from, sha256 of every input, the ids not found). Where the folder is missing it writes only a
manifest whose `skipped` says so: the run goes on offline and every transfer result says "skipped".
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlenv.data.splits import stratified_sample
from sqlenv.types import HARDNESS_LEVELS, Question, db_file

SET_NAME = "transfer"
POLICIES = ("base_sql", "sft", "grpo_phase2")  # the single-shot baseline first, then the trained agents
IDS_FORMAT = 1


def content_key(db_id: str, question: str, gold_sql: str) -> str:
    """A question's identity across copies of Spider (16 hex digits of sha256 over db_id, text, gold SQL)."""
    text = "\x1f".join((db_id, " ".join(question.split()), " ".join(gold_sql.split())))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def question_key(q: Question) -> str:
    return content_key(q.db_id, q.question, q.gold_sql)


def draw(questions: Sequence[Question], n: int, seed: int) -> list[Question]:
    """n questions stratified by hardness (`stratified_sample`: what `sqlenv eval --n` draws), in id order."""
    if n <= 0 or n >= len(questions):
        return sorted(questions, key=lambda q: q.id)
    return stratified_sample(questions, n, seed)


def ids_document(chosen: Sequence[Question], source: str, questions_file: str, seed: int, pool: int) -> dict[str, Any]:
    """The committed ids file: content keys in draw order, with the draw's description and hardness counts."""
    hardness = Counter(q.hardness for q in chosen)
    return {
        "format": IDS_FORMAT,
        "source": source,
        "questions_file": questions_file,
        "drawn_from": f"{pool} questions that pass prepare's loader and oracle gate",
        "draw": f"sqlenv.data.splits.stratified_sample(n={len(chosen)}, seed={seed})",
        "n": len(chosen),
        "hardness": {h: hardness[h] for h in HARDNESS_LEVELS if hardness[h]},
        "keys": [question_key(q) for q in chosen],
        "positions": [q.id for q in chosen],  # where each was in the folder it was drawn from (for reading only)
    }


def read_ids(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A committed ids file, checked; ValueError naming what is wrong."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"transfer ids file not found: {path}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON: {exc.msg}") from exc
    keys = doc.get("keys") if isinstance(doc, dict) else None
    if doc.get("format") != IDS_FORMAT or not isinstance(keys, list) or not keys:
        raise ValueError(f"{path}: not a transfer ids file (format {IDS_FORMAT}, a non-empty 'keys' list)")
    if len(set(keys)) != len(keys):
        raise ValueError(f"{path}: a key appears twice")
    return doc


def select(questions: Sequence[Question], keys: Sequence[str]) -> tuple[list[Question], list[str]]:
    """(the questions whose content key is listed, in the keys' order; the keys not found)."""
    by_key: dict[str, Question] = {}
    for q in questions:
        by_key.setdefault(question_key(q), q)
    return [by_key[k] for k in keys if k in by_key], [k for k in keys if k not in by_key]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def skipped_reason(spider_dir: str | os.PathLike[str], questions_file: str) -> str | None:
    """Why the transfer set cannot be built from `spider_dir` (None: it can)."""
    if not (Path(spider_dir) / questions_file).is_file():
        return f"no transfer data at {spider_dir}"
    return None


def prepare_transfer(
    spider_dir: str | os.PathLike[str],
    out_dir: Path,
    *,
    questions_file: str = "dev.json",
    ids: dict[str, Any] | None = None,
    n: int = 200,
    seed: int = 0,
    limit: int = 0,
    sql_timeout_s: float = 2.0,
) -> dict[str, Any]:
    """Write the transfer set into `out_dir` (an empty folder) and return its manifest.

    `ids`: a committed ids document (`read_ids`), or None to draw `n` from the folder with `seed`.
    `limit`: keep a hardness-stratified `limit` of the set (0: all; the smoke profile's knob).
    A missing folder gives a manifest with `skipped` and nothing else written."""
    from sqlenv.eval.harness import load_spider_questions  # the loader + oracle gate of `sqlenv eval --data`

    reason = skipped_reason(spider_dir, questions_file)
    manifest: dict[str, Any] = {"spider_dir": str(spider_dir), "questions_file": questions_file,
                                "ids": "committed" if ids else f"drawn (n={n}, seed={seed})", "limit": limit}
    if reason is not None:
        manifest["skipped"] = reason
        (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        return manifest
    pool, db_dir, drops = load_spider_questions(spider_dir, questions_file, sql_timeout_s)
    if ids is not None:
        chosen, missing = select(pool, ids["keys"])
    else:
        chosen, missing = draw(pool, n, seed), []
    if limit:
        chosen = draw(chosen, limit, seed)  # a stratified subset of the set (the smoke profile, a slow CPU)
    if not chosen:
        raise ValueError(f"none of the transfer set's {len(ids['keys']) if ids else n} questions is in "
                         f"{Path(spider_dir) / questions_file} (set transfer.ids: null to draw from this folder)")
    with (out_dir / "questions.jsonl").open("w", encoding="utf-8") as f:
        for q in chosen:
            f.write(json.dumps(q.to_dict(), ensure_ascii=False, sort_keys=True) + "\n")
    used = sorted({q.db_id for q in chosen})
    for db_id in used:
        target = db_file(out_dir / "databases", db_id)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(db_file(db_dir, db_id), target)
    hardness = Counter(q.hardness for q in chosen)
    manifest.update({
        "n": len(chosen),
        "pool": len(pool),
        "dropped_by_gate": drops,
        "missing_keys": missing,
        "hardness": {h: hardness[h] for h in HARDNESS_LEVELS if hardness[h]},
        "databases": {d: _sha256(db_file(out_dir / "databases", d)) for d in used},
        "questions_sha256": _sha256(Path(spider_dir) / questions_file),
    })  # fmt: skip
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return manifest


def load_questions(folder: str | os.PathLike[str]) -> list[Question]:
    """The questions of a written transfer set, in its order."""
    lines = (Path(folder) / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    return [Question.from_dict(json.loads(line)) for line in lines if line.strip()]


def read_manifest(folder: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(folder) / "manifest.json"
    if not path.is_file():
        raise FileNotFoundError(f"no transfer set at {folder} (run the transfer_data stage)")
    return json.loads(path.read_text(encoding="utf-8"))


def write_ids(spider_dir: str | os.PathLike[str], out: str | os.PathLike[str], *, questions_file: str = "dev.json",
              n: int = 200, seed: int = 0, sql_timeout_s: float = 2.0) -> dict[str, Any]:
    """Draw the transfer set from `spider_dir` and write its ids file (maintainers, once: the ids are committed).

        python -m sqlenv.eval.transfer ../shared/spider configs/transfer/spider_dev_n200.json
    """
    from sqlenv.eval.harness import load_spider_questions

    pool, _, _ = load_spider_questions(spider_dir, questions_file, sql_timeout_s)
    doc = ids_document(draw(pool, n, seed), Path(spider_dir).name, questions_file, seed, len(pool))
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return doc


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3:
        sys.exit("usage: python -m sqlenv.eval.transfer SPIDER_DIR OUT.json")
    written = write_ids(sys.argv[1], sys.argv[2])
    print(f"{written['n']} questions ({written['hardness']}) of {written['drawn_from']} -> {sys.argv[2]}")
