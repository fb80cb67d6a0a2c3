"""Scripted episodes: the oracle policy and a player that runs any scripted calls.

`oracle_calls` writes what a competent agent would do with the gold SQL in hand:
describe every table the gold SQL reads (not when the schema is shown: `schema: full`),
optionally sample one, run the gold SQL, and answer with the canonical formatting of its
result — or, in the sql answer mode, with the gold SQL itself. `play` runs scripted calls through the
*real* `SQLEnv` and records the conversation through `sqlenv.env.prompts`, in the message
layout TRL produces at GRPO time: `[system, user(question + tables)]`, then per call one
assistant message with `tool_calls` followed by its `role: "tool"` result, and — once the
answer is in — a short plain assistant turn, because a TRL rollout only ends on a turn
without a tool call. These transcripts become SFT data, so the oracle proves two things
at once: the gold answers verify, and the data we train on is what GRPO will show.

The oracle is not a model of how people query: it never makes a mistake or recovers from
one, so SFT data made from it teaches the happy path only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from sqlenv.env import prompts
from sqlenv.env.environment import EnvConfig, GoldQueryError, SQLEnv
from sqlenv.env.sandbox import Sandbox
from sqlenv.env.verifier import format_answer
from sqlenv.types import EpisodeRecord, Question


def _gold_tables(question: Question, sandbox: Sandbox) -> list[str]:
    names = list(question.tables)
    if not names:
        from sqlenv.data.hardness import (
            tables_used,  # lazy: only questions without `tables` need a parse
        )

        try:
            names = tables_used(question.gold_sql)
        except ValueError:
            names = []
    resolved: list[str] = []
    for name in names:
        table = sandbox.resolve_table(name)
        if table is not None and table not in resolved:
            resolved.append(table)
    return resolved


def oracle_calls(
    question: Question, sandbox: Sandbox, sample: bool = False, config: EnvConfig = EnvConfig()
) -> list[tuple[str, dict[str, Any]]]:
    """describe each gold table (schema hidden) → (sample the first) → query the gold SQL → answer its
    result (answer mode value) or the gold SQL (answer mode sql)."""
    tables = _gold_tables(question, sandbox)
    describe = config.schema == "hidden"
    calls: list[tuple[str, dict[str, Any]]] = [("describe", {"table_name": t}) for t in tables if describe]
    if sample and tables:
        calls.append(("sample", {"table_name": tables[0]}))
    calls.append(("query", {"sql": question.gold_sql}))
    if config.answer == "sql":
        calls.append(("answer", {"sql": question.gold_sql}))
        return calls
    result = sandbox.execute(question.gold_sql)
    # A failing gold SQL still yields a script (its answer is the empty result); the
    # environment refuses such a question at reset, which is where it must surface.
    calls.append(("answer", {"value": format_answer(result.columns, result.rows) if result.ok else ""}))
    return calls


def play(
    env: SQLEnv,
    question: Question,
    calls: Sequence[tuple[str, Any]],
    final_reply: str = prompts.FINAL_REPLY,
) -> EpisodeRecord:
    """Run `calls` through `env` on `question` and record the transcript and outcome.

    Every call is played, including calls after the episode ended (they earn the
    post-episode penalty, as they would in training). The closing plain assistant turn is
    added only when the episode was answered. A question whose gold SQL fails comes back
    as an empty, unanswered record whose `verdict_reason` says so; an unusable database
    still raises `SandboxError`.
    """
    try:
        observation = env.reset(question)
    except GoldQueryError as exc:
        # Not playable: report it like a failed episode so validators can count it by reason.
        return EpisodeRecord(question.id, question.db_id, question.hardness, verdict_reason=str(exc))
    # Identical to TRL's prompt: the dataset's user message + the string `reset` returned.
    messages: list[dict[str, Any]] = prompts.initial_messages(question, observation, env.config.system_prompt)
    for tool, arguments in calls:
        messages.append(prompts.assistant_tool_calls([(tool, arguments)]))
        result = env.step(tool, arguments)
        messages.append(prompts.tool_message(tool, result.observation))
    if env.answered:
        messages.append(prompts.final_message(final_reply))
    return EpisodeRecord(
        question_id=question.id,
        db_id=question.db_id,
        hardness=question.hardness,
        messages=messages,
        answered=env.answered,
        correct=env.correct,
        value_correct=env.value_correct,
        verdict_reason=env.verdict_reason,
        answer=env.answer,
        steps=env.steps,
        parse_failures=env.parse_failures,
        calls_after_answer=env.calls_after_end,
        budget_exhausted=env.budget_exhausted,
        reward=env.total_reward,
        reward_components=env.reward_components,
        turns=env.steps,
        strict_call_turns=env.steps,
        lenient_call_turns=env.steps,
        end_reason="stopped" if env.answered else "step budget" if env.budget_exhausted else "unfinished",
    )


def oracle_gate(
    questions: Sequence[Question], db_dir: str | os.PathLike[str], sql_timeout_s: float = 2.0
) -> tuple[list[Question], list[tuple[str, str]]]:
    """(the questions whose oracle episode the verifier accepts, (id, reason) of the others)."""
    verified, dropped = [], []
    env = SQLEnv(db_dir, EnvConfig(sql_timeout_s=sql_timeout_s))
    for q in questions:
        record = play(env, q, oracle_calls(q, env.sandbox_for(q.db_id)))
        if record.correct:
            verified.append(q)
        else:
            dropped.append((q.id, f"oracle_rejected: {record.verdict_reason}"))
    env.close()
    return verified, dropped
