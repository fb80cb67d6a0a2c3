"""Few-shot system prompts: the system prompt followed by k worked oracle episodes of training questions.

One builder for every user: the `base_1shot` / `base_3shot` policies and GRPO's `few_shot_steps`. The
episodes are played by the oracle through the real environment (`few_shot_examples`), chosen
deterministically (stable hash + seed) to cover different hardness levels and databases, and written
out as compact text with each call spelled as the Qwen2.5 template writes one — `<tool_call>` and the
`{"name", "arguments"}` JSON — which both parsers read (`sqlenv.env.tool_calls`: the strict one from the
tag tokens, the lenient one from the JSON alone, which is what a base checkpoint can imitate).

Not a guard against leakage by itself: pass training questions only (the evaluate stage's job), and
keep the shown questions out of any training set (GRPO drops them).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from sqlenv.data.oracle import oracle_calls, play
from sqlenv.env import prompts
from sqlenv.env.environment import EnvConfig, SQLEnv
from sqlenv.types import EpisodeRecord, Question, stable_hash

_ELLIPSIS = "\u2026"


def _preference(chosen: Sequence[Question], candidates: Sequence[Question], seed: int) -> list[Question]:
    """Candidates best first: a hardness not yet shown, then a database not yet shown, then the hash."""
    hardness = {q.hardness for q in chosen}
    dbs = {q.db_id for q in chosen}
    return sorted(
        candidates, key=lambda q: (q.hardness in hardness, q.db_id in dbs, stable_hash(seed, "shot:" + q.id))
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
        record = play(env, question, oracle_calls(question, env.sandbox_for(question.db_id), config=env_config))
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


def few_shot_system_prompt(
    k: int, examples: Sequence[EpisodeRecord], max_lines: int = 8, system: str = prompts.SYSTEM_PROMPT
) -> str:
    """The system prompt (`system`: the environment's, `EnvConfig.system_prompt`) plus the first k examples as
    worked trajectories (k = 0: the system prompt itself)."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if len(examples) < k:
        raise ValueError(f"{k} examples requested, {len(examples)} given")
    if k == 0:
        return system
    shown = "\n\n".join(render_example(r, i + 1, max_lines) for i, r in enumerate(examples[:k]))
    return (
        f"{system}\n\n"
        f"Worked example{'s' if k > 1 else ''} on other databases (yours differs: look at its tables first):\n\n"
        f"{shown}"
    )
