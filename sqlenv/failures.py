"""Why an episode failed, read from its record: one outcome per episode and the habits that led there.

The same reading for every episode wherever it was played (evaluation, GRPO rollouts, SFT data, the
served environment), so a change to the world, the trajectories, the prompt or GRPO shows up as a
shift in the same counts. It reads only the `EpisodeRecord` (its transcript and counters) and, where
the caller has them, the gold rows; it never replays SQL.

Outcome (exactly one per episode, `OUTCOMES`):
- `right` — answered and the verifier accepted it;
- `wrong_answer` — answered, rejected;
- `unanswered_step_budget` — the environment's call budget ran out before an answer;
- `unanswered_token_budget` — the generation budget (tokens or the context) ran out before an answer;
- `unanswered_other` — the model stopped calling tools (or the turn budget ended) without answering.

Habits (any number per episode, `HABITS`):
- `loop` — a call repeated with the same normalised arguments (`rewards.call_key`) while the episode
  ran: its result could only repeat, so it brought no new information (a failing query sent again
  after the error, a table described twice);
- `repeated_failure` — the narrower case: a call that had failed, sent again unchanged;
- `missing_name` — a call met a table or column that does not exist (SQLite's "no such table/column",
  the environment's "unknown table");
- `empty_answered` — the answer came right after a query that returned no rows (the last query result
  before the answer was empty);
- `gold_in_last_result` (wrong answers only, when gold rows are given) — every gold value was shown in
  the last successful query's result: the agent had the answer on screen and copied something else
  (as opposed to never reaching the right rows).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from sqlenv.env import prompts, rewards
from sqlenv.types import EpisodeRecord

OUTCOMES: tuple[str, ...] = (
    "right",
    "wrong_answer",
    "unanswered_step_budget",
    "unanswered_token_budget",
    "unanswered_other",
)
HABITS: tuple[str, ...] = ("loop", "repeated_failure", "missing_name", "empty_answered", "gold_in_last_result")

_TOKEN_ENDS = ("token budget", "context length")
_MISSING = ("no such table", "no such column", "unknown table")
_EMPTY_FOOTER = "(0 rows)"


@dataclass(frozen=True)
class Diagnosis:
    """The outcome of one episode and its habits (see the module's docstring)."""

    outcome: str
    loop: bool = False
    repeated_failure: bool = False
    missing_name: bool = False
    empty_answered: bool = False
    gold_in_last_result: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Call:
    tool: str
    key: tuple[str, str]
    observation: str

    @property
    def failed(self) -> bool:
        return self.observation.startswith(prompts.ERROR_PREFIX)


def _arguments(raw: Any) -> Mapping[str, Any] | None:
    if isinstance(raw, Mapping):
        return raw
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, Mapping) else None


def calls(messages: Sequence[Mapping[str, Any]]) -> list[_Call]:
    """The tool calls of a transcript with the observation each got, in order.

    An assistant turn's calls are answered by the `role: tool` messages that follow it, one each, in the
    same order (the episode loop's and TRL's rendering). Calls the parser could not read, or whose
    arguments are not a JSON object, keep their raw text as the identity."""
    out: list[_Call] = []
    pending: list[tuple[str, tuple[str, str]]] = []
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            pending = []
            for call in message.get("tool_calls") or ():
                function = call.get("function", call)
                name = str(function.get("name", ""))
                raw = function.get("arguments", "")
                args = _arguments(raw)
                key = rewards.call_key(name, args) if args else (name, str(raw))
                pending.append((name, key))
        elif role == "tool" and pending:
            name, key = pending.pop(0)
            out.append(_Call(name, key, str(message.get("content", ""))))
    return out


def _gold_shown(observation: str, gold_rows: Sequence[Sequence[Any]]) -> bool:
    if not gold_rows:
        return prompts.without_notes(observation).endswith(_EMPTY_FOOTER)
    shown = set(prompts.result_cells(observation))
    gold = {prompts.render_cell(v) for row in gold_rows for v in row}
    return bool(gold) and gold <= shown


def diagnose(record: EpisodeRecord, gold_rows: Sequence[Sequence[Any]] | None = None) -> Diagnosis:
    """The outcome and habits of one finished episode.

    `gold_rows` (the gold query's rows, as the sandbox returns them) adds `gold_in_last_result` for a
    wrong answer; without them it stays None."""
    if record.answered:
        outcome = "right" if record.correct else "wrong_answer"
    elif record.budget_exhausted or record.end_reason == "step budget":
        outcome = "unanswered_step_budget"
    elif record.end_reason in _TOKEN_ENDS:
        outcome = "unanswered_token_budget"
    else:
        outcome = "unanswered_other"

    played = calls(record.messages)
    # Calls after the episode ended are answered by "the episode is over" errors; they are their own
    # counter (`calls_after_answer`), not exploration.
    if record.calls_after_answer:
        played = played[: max(len(played) - record.calls_after_answer, 0)]
    seen: set[tuple[str, str]] = set()
    failed: set[tuple[str, str]] = set()
    loop = repeated_failure = missing = False
    for call in played:
        if call.tool == "answer":
            continue
        if call.key in seen:
            loop = True
            repeated_failure |= call.key in failed
        seen.add(call.key)
        if call.failed:
            failed.add(call.key)
            missing |= any(m in call.observation for m in _MISSING)

    empty_answered = False
    last_result: str | None = None
    for call in played:
        if call.tool == "answer":
            empty_answered = last_result is not None and prompts.without_notes(last_result).endswith(_EMPTY_FOOTER)
            break
        if call.tool == "query" and not call.failed:
            last_result = call.observation

    gold_in_last = None
    if outcome == "wrong_answer" and gold_rows is not None:
        gold_in_last = last_result is not None and _gold_shown(last_result, gold_rows)
    return Diagnosis(outcome, loop, repeated_failure, missing, empty_answered, gold_in_last)


def summarise(diagnoses: Iterable[Diagnosis | Mapping[str, Any]]) -> dict[str, Any]:
    """Counts over episodes: `n`, `outcomes` (every outcome, zeros included, in `OUTCOMES` order),
    `habits` (episodes showing each habit; `gold_in_last_result` None when no wrong answer's was read) and
    `unanswered` (the three unanswered outcomes together)."""
    outcomes: Counter[str] = Counter()
    habits: Counter[str] = Counter()
    n = judged = 0  # judged: wrong answers whose `gold_in_last_result` was read (gold rows at hand)
    for d in diagnoses:
        row = d.to_dict() if isinstance(d, Diagnosis) else d
        n += 1
        outcomes[row["outcome"]] += 1
        judged += row.get("gold_in_last_result") is not None
        for habit in HABITS:
            habits[habit] += bool(row.get(habit))
    counts: dict[str, int | None] = {k: habits[k] for k in HABITS}
    if outcomes["wrong_answer"] and not judged:
        counts["gold_in_last_result"] = None  # not read (no gold rows): unknown, not zero
    return {
        "n": n,
        "outcomes": {k: outcomes[k] for k in OUTCOMES},
        "habits": counts,
        "unanswered": sum(outcomes[k] for k in OUTCOMES if k.startswith("unanswered")),
    }


def summarise_records(records: Iterable[EpisodeRecord]) -> dict[str, Any]:
    """`summarise` over records: each record's own diagnosis where it carries one (written by the episode loop with
    the gold rows at hand), else one read off its transcript now."""
    return summarise(r.failure or diagnose(r) for r in records)
