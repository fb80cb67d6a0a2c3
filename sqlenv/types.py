"""Typed records shared across the domain library.

These dataclasses are the vocabulary every other module speaks: a `Question` is one
episode's task, a `QueryResult` is what the sandbox returns for one statement, a
`Verdict` is what the verifier decides, a `StepResult` is what one tool call does to an
episode, and an `EpisodeRecord` is a finished episode as evaluation and SFT data keep it.
They are plain data (JSON-friendly through `to_dict`/`from_dict`). Beside them, three helpers every
layer needs: `stable_hash` (seeded choices) and `strict_kwargs`/`unknown_key` (strict config reading).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HARDNESS_LEVELS: tuple[str, ...] = ("easy", "medium", "hard", "extra")


def stable_hash(*parts: object) -> int:
    """A 64-bit hash of `parts` joined by ':' (sha256): the one hash behind every seeded choice (splits, picks,
    database seeds, SFT subsets), the same across runs, machines and Python versions (unlike `hash()`)."""
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:8], "big")


def unknown_key(key: str, known: "Iterable[str]") -> str:
    """`'key'` with a "did you mean" hint from `known`, for an error message."""
    hint = difflib.get_close_matches(str(key), list(known), n=1)
    return f"'{key}'" + (f" (did you mean '{hint[0]}'?)" if hint else "")


def strict_kwargs(cls: type, d: "Mapping[str, Any]", what: str) -> dict[str, Any]:
    """The keys of `d` as constructor arguments of dataclass `cls`; ValueError naming any unknown key.

    The one strict reading of a config mapping (env, rewards, SFT training): a typo in a sweep must fail
    loudly instead of silently keeping a default.
    """
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in d if k not in known]
    if unknown:
        raise ValueError(f"unknown {what} key(s) {', '.join(unknown_key(k, known) for k in unknown)}")
    return dict(d)


TOOL_NAMES: tuple[str, ...] = ("describe", "sample", "query", "answer")


@dataclass(frozen=True)
class Question:
    """One natural-language question over one SQLite database.

    `gold_answer` is the canonical formatted gold result (see `verifier.format_answer`);
    `ordered` records whether the gold SQL orders its result at top level, which decides
    whether row order matters when judging. `tables` lists the tables the gold SQL reads.
    `domain` is what a held-out split keeps on one side: the synthetic world's domain (all its
    database variants share it); empty means the database is its own domain (Spider).
    """

    id: str
    db_id: str
    question: str
    gold_sql: str
    gold_answer: str = ""
    hardness: str = "easy"
    tables: tuple[str, ...] = ()
    ordered: bool = False
    source: str = ""
    domain: str = ""

    @property
    def group(self) -> str:
        """The split unit of a held-out-domain split: the domain, else the database."""
        return self.domain or self.db_id

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["tables"] = list(self.tables)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Question":
        known = {f.name for f in dataclasses.fields(cls)}
        missing = {"id", "db_id", "question", "gold_sql"} - d.keys()
        if missing:
            raise ValueError(f"question record lacks required field(s) {sorted(missing)}: {d!r:.200}")
        kwargs = {k: v for k, v in d.items() if k in known}
        kwargs["tables"] = tuple(kwargs.get("tables") or ())
        kwargs["id"] = str(kwargs["id"])
        return cls(**kwargs)


def blob_text(value: bytes | bytearray | memoryview) -> str:
    """How every view of a result (JSON, the model's observation, answers) writes a BLOB cell."""
    return f"<blob {memoryview(value).nbytes} bytes>"


def _json_cell(value: Any) -> Any:
    return blob_text(value) if type(value) is bytes else value


@dataclass(slots=True)
class QueryResult:
    """The outcome of running one SQL statement in the sandbox.

    `rows` holds at most the sandbox's fetch cap; `truncated` says more rows existed. Cells are as
    sqlite3 returns them (bytes for a BLOB; `to_dict` writes one as "<blob N bytes>").
    `error` is SQLite's own message (or the sandbox's, e.g. for a timeout) when `ok` is False.
    """

    ok: bool
    columns: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    truncated: bool = False
    timed_out: bool = False
    error: str | None = None
    elapsed_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "columns": list(self.columns),
            "rows": [[_json_cell(v) for v in r] for r in self.rows],
            "truncated": self.truncated,
            "timed_out": self.timed_out,
            "error": self.error,
            "elapsed_ms": round(self.elapsed_ms, 3),
        }


@dataclass(frozen=True)
class Verdict:
    """The verifier's decision on one submitted answer, with a short human-readable reason."""

    correct: bool
    reason: str


@dataclass(slots=True)
class StepResult:
    """What one tool call did: the observation text the model sees, the reward components
    earned by this call (name -> value), and whether the episode is over afterwards."""

    observation: str
    rewards: dict[str, float] = field(default_factory=dict)
    done: bool = False

    @property
    def reward(self) -> float:
        return float(sum(self.rewards.values()))


VERDICTS = ("correct", "wrong", "unanswered")


def verdict(answered: bool, correct: bool) -> str:
    """An episode's outcome in one word (`VERDICTS`): what GRPO logs per rollout and the served session reports."""
    return "correct" if correct else ("wrong" if answered else "unanswered")


@dataclass
class EpisodeRecord:
    """A finished (or abandoned) episode: the full chat transcript and its outcome.

    `messages` are chat messages exactly as rendered for the model (system, user, assistant
    with structured `tool_calls`, `role: "tool"` results). `reward_components` sums each
    named reward over the episode; `reward` is their total. `steps` counts the calls made while the
    episode ran, `parse_failures` those that were not a valid call (unknown tool, arguments that don't
    fit), `budget_exhausted` whether the step budget was used up; `turns`, `strict_call_turns`,
    `lenient_call_turns` and `end_reason` are filled by model rollouts (`sqlenv.eval.rollout`).
    `value_correct` is set in the sql answer mode only: whether the value verifier accepts the submitted
    SQL's rows (`correct` is then execution accuracy); None in the value mode. `failure` is why the episode
    ended as it did (`sqlenv.failures.Diagnosis.to_dict()`), written by the episode loop with the gold rows
    at hand; empty where nothing wrote it (it can be read off the transcript later).
    """

    question_id: str
    db_id: str
    hardness: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    answered: bool = False
    correct: bool = False
    verdict_reason: str = ""
    answer: str | None = None
    steps: int = 0
    parse_failures: int = 0
    calls_after_answer: int = 0
    budget_exhausted: bool = False
    reward: float = 0.0
    reward_components: dict[str, float] = field(default_factory=dict)
    tokens: int = 0
    turns: int = 0
    strict_call_turns: int = 0
    lenient_call_turns: int = 0
    end_reason: str = ""
    value_correct: bool | None = None
    failure: dict[str, Any] = field(default_factory=dict)  # `sqlenv.failures.diagnose`: outcome and habits

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "EpisodeRecord":
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def db_file(db_dir: "str | os.PathLike[str]", db_id: str) -> Path:
    """Where a database lives under a Spider-layout folder: `<db_dir>/<db_id>/<db_id>.sqlite`."""
    return Path(db_dir) / db_id / f"{db_id}.sqlite"
