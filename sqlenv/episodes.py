"""The one episode loop: a policy plays the SQL environment turn by turn, as GRPO trains and evaluation scores.

GRPO's rollouts (`sqlenv.train.rollouts`, through TRL 1.16's public `GRPOTrainer(rollout_func=...)`) and
every model evaluation (`sqlenv.eval.rollout.run_episodes`) call `play_rollouts` below; only the
`TurnGenerator` differs (sampled or greedy, HF cached decoder or vLLM). A rollout is what TRL's own
`environment_factory` tool loop would have produced for the same turns (`grpo.rollout_decoder: trl` keeps
that loop as the library-native option; a test replays scripted turns through both and compares the
completion ids, the environment mask, each reward component and the verdict):

- prompt: `[system, user(question)]`, the string `SQLAgentEnv.reset(**row)` returns appended to the user
  message, then `apply_chat_template([prompt], tools=<the env's bound tool methods>,
  add_generation_prompt=True, chat_template=<TRL's choice>)`, as GRPOTrainer tokenizes prompts;
- chat template: the tokenizer's own when it is prefix-preserving, else TRL's training template;
  tool-call parsing: `trl.chat_template_utils.add_response_schema` + `parse_response(tokenizer, ids,
  prefix=<context ids>, tools=...)`, TRL's public functions;
- tools: the public methods of a `SQLAgentEnv` instance, called as `tool(**arguments)` in order; an
  exception becomes `{"error": str(e)}`, every result `{"role": "tool", "name", "content": str(result)}`,
  so tool results are byte-identical to TRL's loop;
- token sequence: by concatenation, `context + completion_ids + tool_suffix_ids(tool_messages)`, never by
  re-tokenising the conversation; the tool-result tokens are the environment's (`env_mask` 0), the
  model's turns the policy's (1);
- stop tokens: `tokenizer.eos_token_id` plus the model's `generation_config.eos_token_id`; a completion
  keeps its stop token and nothing after it.

Episodes end where a GRPO rollout ends:
- a turn without a tool call ends the episode, before the answer as after it; nothing is invented for the
  model to read;
- `max_turns` (default: the env's step budget) is TRL's `max_tool_calling_iterations`: at most that many
  turns have their calls executed. TRL then generates once more without executing anything: a training
  rollout does too (`final_turn=True`: those tokens are trained on); evaluation skips that generation
  (nothing it does can change the calls, observations, reward or verdict);
- `max_total_tokens` is `max_completion_length` (everything after the prompt, tool results included), and
  each turn may use what is left of it (`max_new_tokens_per_turn` is an optional extra cap, off by
  default). Tool results that would push a rollout past it (or past the model's context) are left out of
  its tokens and the episode ends; the env has run the calls either way, so the transcript keeps them;
- calls after the env episode is over (after `answer`, or after the step budget) are executed as TRL
  does: each earns the post-episode penalty.
With `parser="lenient"` (base checkpoints, see `sqlenv.env.tool_calls`) a turn's calls may also be JSON
written as text; that is the one, stated departure from a training rollout, and only base policies use it.

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

Batching: a rolling pool of `batch_size` episodes; each turn, the next completion of every running
episode comes from ONE batched generation (`sqlenv.decode.ModelGenerator`, which keeps each episode's
key/value cache between turns; or vLLM through `sqlenv.eval.vllm_backend.VLLMGenerator`), then tools
run, then finished episodes leave and queued ones take their slots. With `ModelGenerator` the batch is
handed back once a quarter of it has ended its turn (continuous batching): an episode's next turn does
not wait for the longest turn of the batch, and the tokens are the ones a whole-turn batch (or one
episode at a time) gives.
"""

from __future__ import annotations

import copy
import json
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlenv.decode import TurnGenerator, common_prefix_length
from sqlenv.env import prompts
from sqlenv.env.environment import EnvConfig
from sqlenv.env.tool_calls import parse_turn
from sqlenv.env.trl_adapter import agent_env_class, tool_methods
from sqlenv.types import EpisodeRecord, Question


# ------------------------------------------------------------------------------------------- TRL mirror
def ensure_response_parser(tokenizer: Any) -> None:
    """Give the tokenizer TRL's response template/schema unless it has one (as `GRPOTrainer.__init__`)."""
    from trl.chat_template_utils import add_response_schema

    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        add_response_schema(tokenizer)


def rollout_chat_template(tokenizer: Any) -> str | None:
    """The `chat_template` GRPOTrainer renders with: None (the tokenizer's own) when it is prefix-preserving,
    else TRL's training template."""
    from trl.chat_template_utils import (
        get_training_chat_template,
        is_chat_template_prefix_preserving,
    )

    return None if is_chat_template_prefix_preserving(tokenizer) else get_training_chat_template(tokenizer)


def generation_eos_ids(model: Any, tokenizer: Any) -> list[int]:
    """Stop tokens as GRPOTrainer collects them: the tokenizer's eos first, then the model's generation eos."""
    ids = model.generation_config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    if tokenizer.eos_token_id not in ids:
        ids = [tokenizer.eos_token_id, *ids]
    return ids


def prompt_token_ids(
    tokenizer: Any,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[Callable[..., Any]],
    chat_template: str | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
) -> list[int]:
    """The prompt ids as GRPOTrainer tokenizes a conversational prompt with an environment_factory."""
    tokenized = tokenizer.apply_chat_template(
        conversation=[list(messages)],
        tools=list(tools) or None,
        chat_template=chat_template,
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        **(chat_template_kwargs or {}),
    )
    return list(tokenized["input_ids"][0])


def tool_suffix_ids(
    tokenizer: Any,
    tool_messages: Sequence[dict[str, Any]],
    chat_template: str | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
) -> list[int]:
    """The tokens appended after a completion for its tool results (and the next assistant header).

    TRL 1.16's text-only rule: render a dummy conversation with and without the tool messages and keep
    the difference, with the prefix cut right after its last EOS (Qwen templates put a newline after
    `<|im_end|>`; the completion ends at EOS). The parity tests compare it with TRL's own result.
    """
    kwargs = chat_template_kwargs or {}
    dummy = [
        {"role": "user", "content": "dummy"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}],
        },
    ]
    prefix_ids = tokenizer.apply_chat_template(
        dummy, add_generation_prompt=False, tokenize=True, chat_template=chat_template, return_dict=False, **kwargs
    )
    full_ids = tokenizer.apply_chat_template(
        dummy + list(tool_messages),
        add_generation_prompt=True,
        tokenize=True,
        chat_template=chat_template,
        return_dict=False,
        **kwargs,
    )
    eos_positions = [i for i, tok in enumerate(prefix_ids) if tok == tokenizer.eos_token_id]
    if eos_positions:
        prefix_ids = prefix_ids[: eos_positions[-1] + 1]
    if list(full_ids[: len(prefix_ids)]) != list(prefix_ids):
        raise ValueError("Unexpected tokenization: the EOS-trimmed prefix IDs are not a prefix of the full IDs.")
    return list(full_ids[len(prefix_ids) :])


# ---------------------------------------------------------------------------------------------- episode
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
        user = prompts.user_message(question)
        system = env_config.system_prompt if system_prompt is None else system_prompt
        # As TRL: the reset string is appended to the last (user) message's content.
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            {**user, "content": user["content"] + observation},
        ]
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
        return EpisodeRecord(
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


def shared_prompt_prefix(
    tokenizer: Any,
    system_prompt: str | None,
    chat_template: str | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
    env_config: EnvConfig = EnvConfig(),
) -> list[int]:
    """The prompt tokens every episode shares: two renders that differ only in the user text."""
    tools = tool_methods(agent_env_class(env_config)(config=env_config))
    system = {"role": "system", "content": env_config.system_prompt if system_prompt is None else system_prompt}
    renders = [[system, {"role": "user", "content": text}] for text in ("a", "b")]
    a, b = (prompt_token_ids(tokenizer, r, tools, chat_template, chat_template_kwargs) for r in renders)
    return a[: common_prefix_length([a, b])]


# ----------------------------------------------------------------------------------------------- runner
@dataclass
class Rollout:
    """One played episode: its record, and its tokens as a GRPO rollout (`prompt_ids` then `completion_ids`,
    every model turn and tool result after the prompt; `env_mask[i]` is 0 where completion token i is the
    environment's, 1 where the policy generated it)."""

    record: EpisodeRecord
    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]
    summary: dict[str, Any]  # the environment's own account (`SQLEnv.summary`), what GRPO's reward functions read


def play_episodes(generator: TurnGenerator, tokenizer: Any, questions: Sequence[Question], **kwargs: Any) -> list[EpisodeRecord]:
    """`play_rollouts`, records only (evaluation)."""
    return [rollout.record for rollout in play_rollouts(generator, tokenizer, questions, **kwargs)]


def play_rollouts(
    generator: TurnGenerator,
    tokenizer: Any,
    questions: Sequence[Question],
    *,
    db_dir: str | Path | None,
    env_config: EnvConfig = EnvConfig(),
    system_prompt: str | None = None,
    batch_size: int = 8,
    max_turns: int | None = None,
    max_new_tokens_per_turn: int | None = None,
    max_total_tokens: int = 4096,
    max_positions: int | None = None,
    progress: bool = True,
    chat_template_kwargs: dict[str, Any] | None = None,
    parser: str = "strict",
    after_batch: Callable[[], Any] | None = None,
    final_turn: bool = False,
) -> list[Rollout]:
    """The episode loop over any `TurnGenerator`; rollouts come back in question order.

    A rolling pool: up to `batch_size` episodes run at once, each turn is one `generator.generate` call
    over all of them, finished episodes leave and queued ones take their place. A generator that can hand
    a batch back early (`ModelGenerator.generate_some`) is asked to once a quarter of its rows have ended
    their turn: those episodes run their tools, queued ones start, and the rest go on from the tokens they
    have, all in the next batch (continuous batching: the same tokens, fewer decode steps).

    `final_turn`: after the turn budget, generate the one turn TRL's loop still generates (its calls are
    not run); training rollouts want its tokens, evaluation does not.

    `after_batch` is called after every batch call. Each call leaves per-episode caches of new sizes behind,
    and glibc keeps the memory the old ones freed resident: with a hand-back every quarter of the rows the
    heap fragmented, and `evaluate@base_3shot_n50` (the longest prompts) peaked at 7.1-8.6 GiB; the
    evaluation stage passes a `sqlenv.train.heap.Trimmer`, which hands free pages back to the OS once the
    process holds more than 5 GiB (5.8 GiB peak, 7 trims in 43 batches).
    """
    from tqdm.auto import tqdm

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if (max_new_tokens_per_turn is not None and max_new_tokens_per_turn < 1) or max_total_tokens < 1:
        raise ValueError("max_new_tokens_per_turn and max_total_tokens must be >= 1")
    per_turn = max_new_tokens_per_turn or max_total_tokens
    ensure_response_parser(tokenizer)
    template = rollout_chat_template(tokenizer)
    kwargs = chat_template_kwargs or {}
    max_positions = max_positions or 10**9

    generate_some = getattr(generator, "generate_some", None)
    episodes: dict[int, Episode] = {}
    contexts: dict[int, list[int]] = {}  # the episode's context, with the current turn's tokens so far
    prompt_len: dict[int, int] = {}
    turn_start: dict[int, int] = {}  # length of the context the current turn continues
    tokens: dict[int, int] = {}
    completion: dict[int, list[int]] = {}  # the rollout's tokens after its prompt, and whose they are
    env_mask: dict[int, list[int]] = {}
    last_turn: set[int] = set()  # episodes past the turn budget, generating the turn TRL still generates
    results: list[Rollout | None] = [None] * len(questions)
    queue = deque(range(len(questions)))
    running: list[int] = []
    with tqdm(total=len(questions), desc="episodes", unit="ep", disable=not progress) as bar:
        while queue or running:
            while queue and len(running) < batch_size:
                key = queue.popleft()
                episode = Episode(
                    questions[key],
                    db_dir=db_dir,
                    env_config=env_config,
                    system_prompt=system_prompt,
                    max_turns=max_turns,
                )
                ids = prompt_token_ids(tokenizer, episode.messages, episode.tools, template, kwargs)
                episodes[key], contexts[key], prompt_len[key], turn_start[key], tokens[key] = (
                    episode, ids, len(ids), len(ids), 0)  # fmt: skip
                completion[key], env_mask[key] = [], []
                generator.start(key, ids)
                running.append(key)
            # Each completion fits the turn's and the episode's token budget (TRL: max_completion_length).
            budgets = [min(per_turn - (len(contexts[k]) - turn_start[k]), max_total_tokens - (len(contexts[k]) - prompt_len[k]))
                       for k in running]  # fmt: skip
            batch = [contexts[k] for k in running]
            if generate_some is None:
                new, stopped = generator.generate(running, batch, budgets), [True] * len(running)
            else:
                new, stopped = generate_some(running, batch, budgets, min_stopped=-(-len(running) // 4))
            if after_batch is not None:
                after_batch()
            still = []
            for key, ids_new, turn_over, budget in zip(running, new, stopped, budgets):
                tokens[key] += len(ids_new)
                if not turn_over:  # goes on in the next batch
                    contexts[key] = contexts[key] + ids_new
                    still.append(key)
                    continue
                cut = len(ids_new) >= budget  # this call's part of the turn used up what was left
                episode, context = episodes[key], contexts[key][: turn_start[key]]
                turn = contexts[key][turn_start[key] :] + ids_new
                completion[key] += turn
                env_mask[key] += [1] * len(turn)
                parsed, strict, lenient = parse_turn(tokenizer, turn, context, episode.tools, parser)
                if key in last_turn:  # TRL's turn after the turn budget: kept, its calls never run
                    episode.note_unplayed_turn(parsed)
                    last_turn.discard(key)
                elif tool_messages := episode.apply_turn(parsed, strict, lenient, cut=cut):
                    # the results follow the turn, unless they would not fit (TRL leaves them out then)
                    suffix = tool_suffix_ids(tokenizer, tool_messages, template, kwargs)
                    ids = context + turn + suffix
                    used = len(ids) - prompt_len[key]
                    if used > max_total_tokens:
                        episode.end("token budget")
                    elif len(ids) >= max_positions:
                        episode.end("context length")
                    else:
                        completion[key] += suffix
                        env_mask[key] += [0] * len(suffix)
                        if used == max_total_tokens:
                            episode.end("token budget")  # nothing is left for a next turn
                        elif not episode.done or (final_turn and episode.end_reason == "turn budget"):
                            contexts[key], turn_start[key] = ids, len(ids)
                            if episode.done:
                                last_turn.add(key)
                if episode.done and key not in last_turn:
                    prompt = contexts[key][: prompt_len[key]]
                    results[key] = Rollout(episode.to_record(tokens=tokens[key]), prompt, completion[key], env_mask[key],
                                           episode.summary())  # fmt: skip
                    generator.finish(key)
                    for store in (episodes, contexts, prompt_len, turn_start, tokens, completion, env_mask):
                        del store[key]
                    bar.update(1)
                else:
                    still.append(key)
            running = still
    return [r for r in results if r is not None]
