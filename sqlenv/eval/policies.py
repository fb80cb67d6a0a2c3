"""The evaluated policies, and the one that needs no model: the random baseline.

`POLICIES` names every policy the pipeline evaluates, with the model it plays (`None` for random, `base`
for the base checkpoint, else its own training stage), its few-shot examples and its tool-call parser
(`lenient` for the base checkpoint, whose calls are JSON written as text; `strict`, TRL's parser, for
the trained policies, as in training). Few-shot prompts are `sqlenv.data.few_shot`'s.

- `run_random`: an agent that picks one of the four tools uniformly at random each turn, with plausible
  arguments built only from what it has seen — table names from the first observation, column names of
  tables it has described, cells of results it has been shown (a `count(*)` it ran can be right by
  luck, which is the point of a floor). It plays through the very same `rollout.Episode` as the models,
  so its records are counted identically (steps, parse failures, rewards). Seeded per question by a
  stable hash, so a question's episode does not depend on the order of the set.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlenv.env import prompts
from sqlenv.env.environment import EnvConfig
from sqlenv.env.sandbox import quote_identifier
from sqlenv.episodes import Episode
from sqlenv.types import TOOL_NAMES, EpisodeRecord, Question, stable_hash


@dataclass(frozen=True)
class Policy:
    """An evaluated policy: the model folder it plays (None: no model), its few-shot examples, its parser."""

    name: str
    model: str | None
    shots: int = 0
    parser: str = "strict"


POLICIES: dict[str, Policy] = {p.name: p for p in (
    Policy("random", None),
    Policy("base", "base", 0, "lenient"),
    Policy("base_1shot", "base", 1, "lenient"),
    Policy("base_3shot", "base", 3, "lenient"),
    Policy("sft", "sft"),
    Policy("grpo_phase1", "grpo_phase1"),
    Policy("grpo_phase2", "grpo_phase2"),
)}  # fmt: skip
TRAINED = ("sft", "grpo_phase1", "grpo_phase2")


def policy(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}") from None


class _RandomAgent:
    def __init__(self, episode: Episode, rng: random.Random):
        self.episode, self.rng = episode, rng
        self.tables = episode.tables
        self.columns: dict[str, list[str]] = {}
        self.cells: list[str] = []

    def call(self) -> tuple[str, dict[str, str]]:
        tool = self.rng.choice(TOOL_NAMES)
        if self.episode.answer_mode == "sql" and (tool == "answer" or not self.tables):
            return "answer", {"sql": self._query() if self.tables else "SELECT 1"}  # a random query as the answer
        if tool == "answer":
            value = self.rng.choice(self.cells) if self.cells else str(self.rng.randint(0, 100))
            return tool, {"value": value}
        if not self.tables:  # an empty database: only answering is meaningful
            return "answer", {"value": str(self.rng.randint(0, 100))}
        if tool in ("describe", "sample"):
            return tool, {"table_name": self.rng.choice(self.tables)}
        return tool, {"sql": self._query()}

    def _query(self) -> str:
        table = self.rng.choice(self.tables)
        limit = self.rng.randint(1, 5)
        name = quote_identifier(table)
        forms = [f"SELECT * FROM {name} LIMIT {limit}", f"SELECT count(*) FROM {name}"]
        if self.columns.get(table):
            column = quote_identifier(self.rng.choice(self.columns[table]))
            forms += [
                f"SELECT {column} FROM {name} LIMIT {limit}",
                f"SELECT DISTINCT {column} FROM {name} LIMIT {limit}",
            ]
        return self.rng.choice(forms)

    def observe(self, tool: str, arguments: dict[str, str], observation: str) -> None:
        if tool == "describe" and not observation.startswith(prompts.ERROR_PREFIX):
            info = self.episode.sandbox.table_info(arguments["table_name"])  # the columns describe just showed
            if info is not None:
                self.columns[arguments["table_name"]] = [c.name for c in info.columns]
        elif tool in ("sample", "query"):
            self.cells.extend(prompts.result_cells(observation))


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
        rng = random.Random(stable_hash(seed, "random:" + question.id))
        episode = Episode(question, db_dir=db_dir, env_config=env_config, max_turns=max_turns)
        agent = _RandomAgent(episode, rng)
        while not episode.done:
            if episode.env_over:  # answered or out of budget: stop with a plain turn
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
