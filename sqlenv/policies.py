"""Policies without a trained model: the random baseline, and few-shot system prompts for the base model.

- `run_random`: an agent that picks one of the four tools uniformly at random each turn, with plausible
  arguments built only from what it has seen — table names from the first observation, column names of
  tables it has described, cells of results it has been shown (a `count(*)` it ran can be right by
  luck, which is the point of a floor). It plays through the very same `rollout.Episode` as the models,
  so its records are counted identically (steps, parse failures, rewards). Seeded per question by a
  stable hash, so a question's episode does not depend on the order of the set.
- `few_shot_system_prompt`: SYSTEM_PROMPT followed by k worked trajectories, for `base_1shot` and
  `base_3shot`. The trajectories are oracle episodes of *training* questions played through the real
  environment (`few_shot_examples`), chosen deterministically (stable hash + seed) to cover different
  hardness levels and databases, and rendered as compact text with tool calls spelled exactly as the
  model must emit them (`<tool_call>` JSON) — the base model otherwise tends to write bare JSON, which
  TRL's parser (and ours) does not accept as a call.

Not a guard against leakage by itself: pass training questions only (the evaluate stage's job).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from pathlib import Path
from sqlenv import prompts
from sqlenv.environment import EnvConfig, SQLEnv
from sqlenv.oracle import oracle_calls, play
from sqlenv.rollout import Episode
from sqlenv.types import TOOL_NAMES, EpisodeRecord, Question

_ELLIPSIS = "\u2026"


def _stable_hash(seed: int, text: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}\x1f{text}".encode()).digest()[:8], "big")


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _result_cells(observation: str) -> list[str]:
    """Cells of a rendered result (header line, rows, footer); nothing for errors and table descriptions."""
    if observation.startswith(prompts.ERROR_PREFIX) or observation.startswith("Table "):
        return []
    lines = observation.split("\n")
    rows = [line for line in lines[1:-1] if not line.startswith(_ELLIPSIS)]
    return [cell for row in rows for cell in row.split(" | ")]


class _RandomAgent:
    def __init__(self, episode: Episode, rng: random.Random):
        self.episode, self.rng = episode, rng
        self.tables = episode.tables
        self.columns: dict[str, list[str]] = {}
        self.cells: list[str] = []

    def call(self) -> tuple[str, dict[str, str]]:
        tool = self.rng.choice(TOOL_NAMES)
        if tool == "answer":
            value = self.rng.choice(self.cells) if self.cells else str(self.rng.randint(0, 100))
            return tool, {"value": value}
        if not self.tables:  # an empty database: only answering is meaningful
            return "answer", {"value": str(self.rng.randint(0, 100))}
        table = self.rng.choice(self.tables)
        if tool in ("describe", "sample"):
            return tool, {"table_name": table}
        limit = self.rng.randint(1, 5)
        forms = [f"SELECT * FROM {_quote(table)} LIMIT {limit}", f"SELECT count(*) FROM {_quote(table)}"]
        if self.columns.get(table):
            column = _quote(self.rng.choice(self.columns[table]))
            forms += [
                f"SELECT {column} FROM {_quote(table)} LIMIT {limit}",
                f"SELECT DISTINCT {column} FROM {_quote(table)} LIMIT {limit}",
            ]
        return tool, {"sql": self.rng.choice(forms)}

    def observe(self, tool: str, arguments: dict[str, str], observation: str) -> None:
        if tool == "describe" and not observation.startswith(prompts.ERROR_PREFIX):
            info = self.episode.sandbox.table_info(arguments["table_name"])  # the columns describe just showed
            if info is not None:
                self.columns[arguments["table_name"]] = [c.name for c in info.columns]
        elif tool in ("sample", "query"):
            self.cells.extend(_result_cells(observation))


def run_random(
    questions: Sequence[Question],
    *,
    db_dir: str | Path | None,
    env_config: EnvConfig = EnvConfig(),
    seed: int = 0,
    max_turns: int | None = None,
) -> list[EpisodeRecord]:
    """The random policy on every question (one call per turn; a plain closing turn after `answer`)."""
    records = []
    for question in questions:
        rng = random.Random(_stable_hash(seed, question.id))
        episode = Episode(question, db_dir=db_dir, env_config=env_config, max_turns=max_turns)
        agent = _RandomAgent(episode, rng)
        while not episode.done:
            if episode.answered:
                episode.apply_turn(prompts.final_message())
                continue
            tool, arguments = agent.call()
            turn = {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": tool, "arguments": arguments}}
            ]}
            (result,) = episode.apply_turn(turn)
            agent.observe(tool, arguments, result["content"])
        records.append(episode.to_record(tokens=0))
    return records


# ------------------------------------------------------------------------------------------- few-shot
def _preference(chosen: Sequence[Question], candidates: Sequence[Question], seed: int) -> list[Question]:
    """Candidates best first: a hardness not yet shown, then a database not yet shown, then the hash."""
    hardness = {q.hardness for q in chosen}
    dbs = {q.db_id for q in chosen}
    return sorted(
        candidates, key=lambda q: (q.hardness in hardness, q.db_id in dbs, _stable_hash(seed, q.id))
    )


def few_shot_examples(
    questions: Sequence[Question],
    k: int,
    *,
    db_dir: str | Path,
    env_config: EnvConfig = EnvConfig(),
    seed: int = 0,
) -> list[EpisodeRecord]:
    """k oracle episodes of (training) questions, deterministic in `seed`, diverse in hardness and database.

    Questions are tried best first; one whose oracle episode is not judged correct is skipped. Raises
    ValueError if fewer than k examples can be made.
    """
    env = SQLEnv(db_dir, env_config)
    chosen: list[Question] = []
    records: list[EpisodeRecord] = []
    remaining = list(questions)
    while len(records) < k and remaining:
        question = _preference(chosen, remaining, seed)[0]
        remaining.remove(question)
        record = play(env, question, oracle_calls(question, env.sandbox_for(question.db_id)))
        if record.correct:
            chosen.append(question)
            records.append(record)
    if len(records) < k:
        raise ValueError(f"only {len(records)} of {k} few-shot examples could be made from {len(questions)} questions")
    return records


def _clip(text: str, max_lines: int) -> str:
    lines = text.split("\n")
    if len(lines) <= max_lines:
        return text
    return "\n".join(lines[:max_lines] + [f"{_ELLIPSIS} ({len(lines) - max_lines} more lines)"])


def render_example(record: EpisodeRecord, number: int, max_lines: int = 8) -> str:
    """One trajectory as compact text: the user turn, each call as the model writes it, each result."""
    parts = [f"### Example {number}"]
    for message in record.messages:
        role = message["role"]
        if role == "user":
            parts.append(f"User: {message['content']}")
        elif role == "assistant":
            calls = message.get("tool_calls") or []
            texts = [message["content"]] if message.get("content") else []
            for call in calls:
                function = call["function"]
                arguments = function["arguments"]
                arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
                payload = json.dumps({"name": function["name"], "arguments": arguments}, ensure_ascii=False)
                texts.append(f"<tool_call>\n{payload}\n</tool_call>")
            parts.append("Assistant: " + "\n".join(texts))
        elif role == "tool":
            parts.append(f"Tool result:\n{_clip(message['content'], max_lines)}")
    return "\n".join(parts)


def few_shot_system_prompt(k: int, examples: Sequence[EpisodeRecord], max_lines: int = 8) -> str:
    """SYSTEM_PROMPT plus the first k examples as worked trajectories (k = 0: SYSTEM_PROMPT itself)."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if len(examples) < k:
        raise ValueError(f"{k} examples requested, {len(examples)} given")
    if k == 0:
        return prompts.SYSTEM_PROMPT
    shown = "\n\n".join(render_example(r, i + 1, max_lines) for i, r in enumerate(examples[:k]))
    return (
        f"{prompts.SYSTEM_PROMPT}\n\n"
        f"Worked example{'s' if k > 1 else ''} on other databases (yours differs: look at its tables first):\n\n"
        f"{shown}"
    )


def shots_for(policy: str) -> int:
    """Few-shot examples a policy tag uses: `base_1shot` -> 1, `base_3shot` -> 3, any other tag -> 0."""
    return {"base_1shot": 1, "base_3shot": 3}.get(policy, 0)
