"""One question played as an episode of the SQL environment, with TRL's tool-call semantics.

`Episode` is what a GRPO rollout and every evaluated episode play: the episode loop (`sqlenv.episode_loop`) feeds it
each parsed assistant turn, model-free policies (the random policy) drive it directly, so every policy's records
are counted the same way. It is what TRL 1.16's own `environment_factory` tool loop does with the same turns:

- prompt: `[system, user(question)]`, or the prompt TRL passes to `rollout_func`, with the string
  `SQLAgentEnv.reset(**row)` returns appended to its last (user) message, as TRL appends it;
- tools: the public methods of a `SQLAgentEnv` instance, called as `tool(**arguments)` in order; an
  exception becomes `{"error": str(e)}`, every result `{"role": "tool", "name", "content": str(result)}`,
  so tool results are byte-identical to TRL's loop;
- a turn without a tool call ends the episode, before the answer as after it; nothing is invented for the
  model to read; at most `max_turns` (default: the env's step budget; TRL's `max_tool_calling_iterations`)
  turns have their calls executed; calls after the env episode is over (after `answer`, or after the step
  budget) are executed as TRL does: each earns the post-episode penalty.

Stored transcripts (`EpisodeRecord.messages`) keep each assistant turn as TRL parses it (`content` plus
structured `tool_calls`, arguments as JSON strings, house style). Rendering them back with
`apply_chat_template(prompts.messages_for_template(messages), tools=...)` reproduces the loop's token
ids exactly (a test checks) except for (1) the template's newline after the final `<|im_end|>`, which
the model never generates, and (2) completions the parse normalises: argument JSON spelled with other
spacing, or an unparseable turn whose content is its text without special tokens. The loop itself
always continues from the raw generated ids.

Counting (EpisodeRecord): `turns` = assistant turns while the env episode ran (each should hold a call),
`strict_call_turns` / `lenient_call_turns` = those in which TRL's parser / the lenient parser reads a call
(both computed whichever parser plays); `steps` = calls made while the episode ran; `parse_failures` =
those calls that were not a valid call of one of the four tools (an unknown tool, arguments that don't
fit); `calls_after_answer` = calls made after the env episode was over; `budget_exhausted` = the env's
step budget was used up; `tokens` = tokens the model generated; `end_reason` = why the episode stopped:
`stopped` (a turn without a call after the answer), `no tool call` (one before it: the model stopped calling
tools, or wrote a call the parser cannot read), `token budget` (`max_total_tokens` ran out, inside a turn's
generation or with a tool result), `step budget` (the env's), `turn budget` (`max_turns`), `context length`.
`reward`/`reward_components` are the env's own sums.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlenv.env import prompts
from sqlenv.env.environment import EnvConfig
from sqlenv.env.trl_adapter import agent_env_class, tool_methods
from sqlenv.failures import diagnose
from sqlenv.types import EpisodeRecord, Question


class Episode:
    """One question played turn by turn through a `SQLAgentEnv`, with TRL's tool-call semantics.

    Feed it parsed assistant turns (`{"role": "assistant", "content": str, "tool_calls": [{"type":
    "function", "function": {"name", "arguments": dict}}]}`, the shape `parse_response` returns);
    `apply_turn` executes the calls and returns the tool messages that follow. Model-free policies (the
    random policy) drive it directly, so every policy's records are counted the same way.
    """

    def __init__(
        self,
        question: Question,
        *,
        db_dir: str | Path | None,
        env_config: EnvConfig = EnvConfig(),
        system_prompt: str | None = None,
        max_turns: int | None = None,
        prompt: Sequence[dict[str, Any]] | None = None,
    ):
        self.question = question
        self.env = agent_env_class(env_config)(db_dir=db_dir, config=env_config)
        self._sql = self.env._env  # the adapter keeps its SQLEnv private so TRL does not list it as a tool
        self.tools = tool_methods(self.env)
        self._tool_by_name = {tool.__name__: tool for tool in self.tools}  # TRL keys its tool dict by __name__
        self.max_turns = env_config.step_budget if max_turns is None else max_turns
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        observation = self.env.reset(**question.to_dict())  # raises for an unusable database or gold SQL
        if prompt is None:
            system = env_config.system_prompt if system_prompt is None else system_prompt
            prompt = [{"role": "system", "content": system}, prompts.user_message(question)]
        elif system_prompt is not None:
            raise ValueError("give a prompt or a system prompt, not both")
        if not prompt or not all(isinstance(m.get("content"), str) for m in prompt):
            raise ValueError(f"episode {question.id}: a prompt is a non-empty list of messages with text content")
        # As TRL: the reset string is appended to the last (user) message's content.
        self.messages: list[dict[str, Any]] = [*copy.deepcopy(list(prompt[:-1])),
                                               {**prompt[-1], "content": prompt[-1]["content"] + observation}]
        self.turns = 0  # turns whose calls were executed (TRL's tool-calling iterations)
        self.running_turns = 0  # assistant turns while the env episode ran
        self.strict_call_turns = 0
        self.lenient_call_turns = 0
        self.rejected_calls = 0  # calls TRL's loop itself rejected (unknown tool, arguments not a mapping)
        self.calls_after_end = 0
        self.tool_calls = self.tool_failures = 0  # every call run, and those that raised (TRL's tools/ metrics)
        self.done = False
        self.end_reason = ""

    @property
    def tables(self) -> list[str]:
        """The table names the first observation listed."""
        return list(self._sql.tables)

    @property
    def answered(self) -> bool:
        return self._sql.answered

    @property
    def answer_mode(self) -> str:
        """What `answer` takes: `value` (the answer text) or `sql` (the final query)."""
        return self._sql.config.answer

    @property
    def env_over(self) -> bool:
        """The env episode is over (answered, or its step budget used up): calls from now on are penalised."""
        return self._sql.done

    @property
    def sandbox(self) -> Any:
        """The episode database's (read-only) sandbox, for model-free policies that look up schema."""
        return self._sql.sandbox

    def end(self, reason: str) -> None:
        """Stop the episode (budget or context exhausted, or a turn without a call)."""
        if not self.done:
            self.done, self.end_reason = True, reason

    def apply_turn(
        self, message: dict[str, Any], strict_call: bool | None = None, lenient_call: bool | None = None,
        cut: bool = False,
    ) -> list[dict[str, Any]]:
        """Record one assistant turn, run its tool calls in order, return the tool messages appended.

        `strict_call` / `lenient_call` say whether TRL's / the lenient parser read a call in the turn
        (default: whether the message holds calls); they are counted for turns before the env episode ends.
        `cut`: the turn's generation used up its token budget. A turn without a call ends the episode either
        way (TRL's loop too), but a call cut off mid-way is the token budget's doing, not a choice to stop.
        """
        if self.done:
            raise RuntimeError(f"episode {self.question.id} is over ({self.end_reason})")
        calls = list(message.get("tool_calls") or [])
        if not self._sql.done:
            strict = bool(calls) if strict_call is None else strict_call
            self.running_turns += 1
            self.strict_call_turns += strict
            self.lenient_call_turns += strict if lenient_call is None else lenient_call
        self.messages.append(_stored_assistant(message, calls))
        if not calls:  # TRL's loop goes on only while the last turn holds calls
            self.end("stopped" if self._sql.answered else "step budget" if self._sql.done
                     else "token budget" if cut else "no tool call")  # fmt: skip
            return []
        results = []
        for call in calls:
            over = self._sql.done
            name, content, rejected = self._execute(call)
            self.tool_calls += 1
            self.tool_failures += rejected
            if over:
                self.calls_after_end += 1
            elif rejected:
                self.rejected_calls += 1
            results.append({"role": "tool", "name": name, "content": content})
        self.turns += 1
        self.messages.extend(results)
        if self.turns >= self.max_turns:
            self.end("turn budget")
        return results

    def summary(self) -> dict[str, Any]:
        """The environment's account of the episode (`SQLEnv.summary`): the same numbers TRL's loop leaves in
        the adapter (`SQLAgentEnv._episode`); plus the calls run and those that raised, which TRL's loop counts
        itself (`tools/call_frequency`, `tools/failure_frequency`)."""
        return {**self._sql.summary(), "tool_calls": self.tool_calls, "tool_failures": self.tool_failures}

    def note_unplayed_turn(self, message: dict[str, Any]) -> None:
        """Record the turn a training rollout generates after the turn budget: in the transcript, uncounted,
        its calls never run (TRL's loop generates it and stops)."""
        if not self.done:
            raise RuntimeError(f"episode {self.question.id} is still running: its turns are played (apply_turn)")
        self.messages.append(_stored_assistant(message, list(message.get("tool_calls") or [])))

    def _execute(self, call: dict[str, Any]) -> tuple[str, str, bool]:
        # As TRL's tool loop (sync branch): same lookup, same call, same error text.
        if call.get("type") != "function":
            name = call.get("name", "unknown")
            return name, str({"error": f"Unsupported tool call type: {call.get('type')}"}), True
        function = call["function"]
        name = function["name"]
        try:
            if name not in self._tool_by_name:
                raise ValueError(f"Tool {name} not found.")
            result = self._tool_by_name[name](**function["arguments"])
        except Exception as exc:  # noqa: BLE001 - TRL turns any tool exception into an error result
            return name, str({"error": str(exc)}), True
        return name, str(result), False

    def to_record(self, tokens: int = 0) -> EpisodeRecord:
        """The finished episode as an EpisodeRecord (see the module docstring for the counts)."""
        env = self._sql
        reason = env.verdict_reason if env.answered else f"not answered ({self.end_reason or 'unfinished'})"
        record = EpisodeRecord(
            question_id=self.question.id,
            db_id=self.question.db_id,
            hardness=self.question.hardness,
            messages=copy.deepcopy(self.messages),
            answered=env.answered,
            correct=env.correct,
            value_correct=env.value_correct,
            verdict_reason=reason,
            answer=env.answer,
            steps=env.steps + self.rejected_calls,
            parse_failures=env.parse_failures + self.rejected_calls,
            calls_after_answer=self.calls_after_end,
            budget_exhausted=env.budget_exhausted,
            reward=env.total_reward,
            reward_components=env.reward_components,
            tokens=tokens,
            turns=self.running_turns,
            strict_call_turns=self.strict_call_turns,
            lenient_call_turns=self.lenient_call_turns,
            end_reason=self.end_reason,
        )
        record.failure = diagnose(record, env.gold.rows if env.gold is not None else None).to_dict()
        return record


def _stored_assistant(message: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
    # House style for stored transcripts: arguments as JSON strings (prompts.messages_for_template turns
    # them back into objects for a chat template). Every value is encoded, strings too, so a call whose
    # "arguments" was a bare string renders back as the string the model wrote.
    stored: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    if calls:
        stored["tool_calls"] = []
        for call in calls:
            function = call.get("function") or call
            arguments = json.dumps(function.get("arguments"), ensure_ascii=False, default=str)
            name = function.get("name")
            stored["tool_calls"].append(
                {"type": call.get("type", "function"), "function": {"name": name, "arguments": arguments}}
            )
    return stored
