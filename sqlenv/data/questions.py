"""Question sets from either source, each question checked by the oracle.

`build_questions` is what the `prepare` stage calls: it produces the databases (Spider
layout) under `db_dir` and the questions over them, from the procedural world (default)
or from a Spider-format folder — one questions file, or (Spider's own protocol) training
files beside the evaluation file, each training question kept apart in `train_questions`
and none on a database the evaluation file uses —, applies the curated-subset filters, and then plays every
question's oracle episode through the real environment — describe the tables the gold SQL
reads, run the gold SQL, answer the formatted result — keeping only the questions the
verifier accepts. A question the agent could not possibly get right (gold SQL fails,
ties under LIMIT, a result that does not survive formatting) would be pure noise in both
the reward and the accuracy, so it is dropped here and counted by reason.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlenv.data.oracle import oracle_gate
from sqlenv.env.sandbox import SandboxLimits
from sqlenv.files import read_jsonl
from sqlenv.types import HARDNESS_LEVELS, Question, db_file


@dataclass
class BuiltQuestions:
    questions: list[Question]
    candidates: int
    drop_counts: dict[str, int] = field(default_factory=dict)
    dropped: list[tuple[str, str]] = field(default_factory=list)
    # Questions of the training files (Spider's protocol, `spider_train_questions`); None: one questions file.
    train_questions: list[Question] | None = None

    @property
    def verification_rate(self) -> float:
        """Share of candidates the oracle verified (1.0 when nothing was dropped), training files included."""
        kept = len(self.questions) + len(self.train_questions or ())
        return kept / self.candidates if self.candidates else 0.0


def build_questions(
    db_dir: str | os.PathLike[str],
    *,
    seed: int,
    source: str,
    spider_dir: str | os.PathLike[str] = "",
    spider_questions: str = "dev.json",
    spider_train_questions: Sequence[str] = (),
    databases: Sequence[str] = (),
    difficulties: Sequence[str] = (),
    domains: Sequence[str] = (),
    databases_per_domain: int = 2,
    questions_per_db: int = 130,
    side_tables: int = 0,
    renamed_columns: float = 0.0,
    sql_timeout_s: float = 2.0,
) -> BuiltQuestions:
    db_dir = Path(db_dir)
    unknown = sorted(set(difficulties) - set(HARDNESS_LEVELS))
    if unknown:
        raise ValueError(f"data.difficulties: unknown level(s) {unknown}; expected {list(HARDNESS_LEVELS)}")
    limits = SandboxLimits(timeout_s=sql_timeout_s)
    dropped: list[tuple[str, str]] = []
    train_candidates: list[Question] = []
    train_dropped: list[tuple[str, str]] = []
    if spider_train_questions and source != "spider":
        raise ValueError("training questions files (Spider's protocol) need data.source: spider")
    if source == "synthetic":
        from sqlenv.data.world import build_world

        world = build_world(
            db_dir / "world",
            seed=seed,
            domains=list(domains) or None,
            databases_per_domain=databases_per_domain,
            questions_per_db=questions_per_db,
            side_tables=side_tables,
            renamed_columns=renamed_columns,
        )
        # The world writes <db_dir>/world/<db>/<db>.sqlite; lift the databases one level up.
        for child in sorted((db_dir / "world").iterdir()):
            os.replace(child, db_dir / child.name)
        (db_dir / "world").rmdir()
        candidates = list(world.questions)
    elif source == "spider":
        from sqlenv.data.spider import load_spider

        if not Path(spider_dir).is_dir():
            raise FileNotFoundError(f"data.spider_dir: Spider folder not found: {spider_dir}")
        loaded = load_spider(
            spider_dir, questions_file=spider_questions, databases=list(databases) or None, sandbox_limits=limits
        )
        candidates = list(loaded.questions)
        dropped.extend(loaded.dropped)
        if spider_train_questions:
            train_candidates, train_dropped = _spider_train(spider_dir, spider_train_questions, candidates, limits)
        for db_id in sorted({q.db_id for q in candidates + train_candidates}):
            target = db_file(db_dir, db_id)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(db_file(Path(spider_dir) / "database", db_id), target)
    else:
        raise ValueError(f"data.source must be 'synthetic' or 'spider', got {source!r}")

    n_candidates = len(candidates) + len(dropped)
    if databases:
        missing = sorted(set(databases) - {q.db_id for q in candidates} - {i for i, _ in dropped})
        if source == "synthetic" and missing:
            raise ValueError(f"data.databases: no such database(s) in the synthetic world: {missing}")
        candidates = [q for q in candidates if q.db_id in set(databases)]
    if difficulties:
        candidates = [q for q in candidates if q.hardness in set(difficulties)]
    if databases or difficulties:
        n_candidates = len(candidates) + len(dropped)

    verified, rejected = oracle_gate(candidates, db_dir, sql_timeout_s)
    dropped.extend(rejected)
    train = None
    if spider_train_questions:
        if difficulties:
            train_candidates = [q for q in train_candidates if q.hardness in set(difficulties)]
        if databases:
            train_candidates = [q for q in train_candidates if q.db_id in set(databases)]
        n_candidates += len(train_candidates) + len(train_dropped)
        train, train_rejected = oracle_gate(train_candidates, db_dir, sql_timeout_s)
        dropped.extend(train_dropped + train_rejected)
        train = sorted(train, key=lambda q: q.id)
        if not train:
            raise ValueError(f"no training question of {list(spider_train_questions)} passed the loader and the oracle")
    # Reasons read "<category>: <detail>"; metrics count by category.
    counts = Counter(reason.split(":", 1)[0] for _, reason in dropped)
    return BuiltQuestions(
        questions=sorted(verified, key=lambda q: q.id),
        candidates=n_candidates,
        drop_counts=dict(sorted(counts.items())),
        dropped=dropped,
        train_questions=train,
    )


def _spider_train(
    spider_dir: str | os.PathLike[str], files: Sequence[str], eval_questions: Sequence[Question], limits: SandboxLimits
) -> tuple[list[Question], list[tuple[str, str]]]:
    """The training files' questions (ids prefixed with the file's stem: `train_spider:<db>_<index>`), without
    any on a database of the evaluation questions (dropped as `eval_database`, so evaluation stays held out)."""
    from sqlenv.data.spider import load_spider

    eval_dbs = {q.db_id for q in eval_questions}
    kept: list[Question] = []
    dropped: list[tuple[str, str]] = []
    for name in files:
        loaded = load_spider(spider_dir, questions_file=name, sandbox_limits=limits, id_prefix=Path(name).stem + ":")
        dropped.extend(loaded.dropped)
        for q in loaded.questions:
            if q.db_id in eval_dbs:
                dropped.append((q.id, f"eval_database: {q.db_id} is a database of the evaluation questions"))
            else:
                kept.append(q)
    return kept, dropped


def load_questions_file(path: str | os.PathLike[str], difficulties: Sequence[str] = (), allow_empty: bool = False) -> list[Question]:
    """Questions from a JSONL file in the `prepare` output format (one `Question` object per line), in file
    order, of the given hardness levels (all when empty); ValueError names a malformed line, and an empty
    result unless `allow_empty` (the in-domain probe under `data.indomain: 0`)."""
    path = Path(path)
    questions = []
    for lineno, record in enumerate(read_jsonl(path), 1):
        try:
            questions.append(Question.from_dict(record))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{path}: record {lineno}: not a question record ({exc})") from exc
    wanted = set(difficulties)
    picked = [q for q in questions if not wanted or q.hardness in wanted]
    if not picked and not allow_empty:
        raise ValueError(f"{path}: no questions" + (f" of hardness {sorted(wanted)}" if wanted else ""))
    return picked


def questions_summary(questions: Sequence[Question]) -> dict:
    """Counts by hardness (every level present, zeros included) and database count."""
    by = Counter(q.hardness for q in questions)
    return {
        "n": len(questions),
        "by_hardness": {h: by.get(h, 0) for h in HARDNESS_LEVELS},
        "databases": len({q.db_id for q in questions}),
    }
