"""The SQL environment as an OpenEnv `Environment`: the same episodes, tools and rewards, served to other processes.

One `SQLServeEnvironment` per client session (OpenEnv's server creates one per WebSocket connection, each on its own
thread). It plays episodes through `SQLAgentEnv`, the very adapter TRL trains with, so a served episode and a
training rollout see the same observation text, the same `Error: ...` texts and the same reward components:
- actions are OpenEnv's MCP actions: `ListToolsAction` returns the four tools with the schemas TRL derives from the
  adapter's methods (`served_tools`), `CallToolAction(tool_name, arguments)` calls one of them;
- `reset(split=, index=, question_id=, seed=)` starts an episode on a question of the server's own set, chosen by
  id, by index or by seed (OpenEnv's task API lists the splits and tasks), and returns the first observation: the
  system prompt and the user message exactly as the model sees them;
- the episode ends at `answer` or when the step budget is spent; the observation that ends it carries the verdict
  (`correct`/`wrong`/`unanswered`) and the reward components, never the gold SQL or answer. Calls after the end
  are answered with the environment's own error text and penalised, as in training.

What it guards: no observation, state or task description contains a gold SQL, a gold answer or a file path; each
session opens its own sandboxes (`own_sandboxes`), so one session's runaway query never delays another's, and
closing the session closes them. What it does not: authenticate clients (the server binds 127.0.0.1 by default).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    Tool,
    ToolError,
    ToolErrorType,
)
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field

from sqlenv.env import prompts
from sqlenv.env.environment import EnvConfig, GoldQueryError
from sqlenv.env.sandbox import SandboxError
from sqlenv.env.trl_adapter import SQLAgentEnv, agent_env_class, tool_functions
from sqlenv.types import Question, verdict

NAME = "sqlenv"


class TaskNotFound(ValueError):
    """A split or task index the server does not have: the task API answers 404 with this message."""


class SQLResetObservation(Observation):
    """The start of an episode: the conversation as the model first sees it."""

    question_id: str = Field(description="Id of the question in the server's set")
    split: str = Field(description="The split the question was chosen from")
    index: int = Field(description="Index of the question in its split")
    db_id: str = Field(description="The database the question is about")
    question: str = Field(description="The question, as the user asks it")
    messages: list[dict[str, str]] = Field(description="System prompt and first user message, as the model sees them")
    observation: str = Field(description="What the environment's reset showed (the table names, or the schema), "
                             "the end of the first user message: what TRL appends to a dataset's prompt")


class SQLState(State):
    """Where the session's episode stands; the verdict only once it has ended."""

    question_id: str | None = Field(default=None)
    split: str | None = Field(default=None)
    index: int | None = Field(default=None)
    db_id: str | None = Field(default=None)
    done: bool = Field(default=False)
    answered: bool = Field(default=False)
    verdict: str | None = Field(default=None, description="correct | wrong | unanswered, once the episode ended")
    reward: float = Field(default=0.0, description="The episode's reward so far (sum of its components)")
    reward_components: dict[str, float] = Field(default_factory=dict)


@dataclass(frozen=True)
class QuestionSet:
    """The questions a server serves, by split, and where their databases are."""

    splits: Mapping[str, Sequence[Question]]
    db_dir: Path

    @classmethod
    def load(cls, data: str | Path) -> "QuestionSet":
        """A prepared folder (the pipeline's `data/`: `questions/<split>.jsonl` + `databases/`) or a Spider-format
        folder (`dev.json`, `tables.json`, `database/`: one split, `dev`). ValueError for anything else."""
        from sqlenv.data.questions import load_questions_file

        data = Path(data)
        if (data / "questions").is_dir() and (data / "databases").is_dir():
            splits = {p.stem: load_questions_file(p) for p in sorted((data / "questions").glob("*.jsonl"))}
            splits = {name: qs for name, qs in splits.items() if qs}
            if not splits:
                raise ValueError(f"{data}/questions holds no questions (run the prepare stage first)")
            return cls(splits, data / "databases")
        if (data / "tables.json").is_file() and (data / "database").is_dir():
            from sqlenv.data.spider import load_spider

            return cls({"dev": list(load_spider(data).questions)}, data / "database")
        raise ValueError(f"{data} is neither a prepared data folder (questions/, databases/) nor a Spider folder "
                         "(tables.json, database/)")  # fmt: skip

    def pick(self, split: str | None, index: int | None, question_id: str | None, seed: int | None) -> tuple[str, int]:
        """(split, index) of the question asked for: by id (any split), else by index, else drawn with the seed."""
        if question_id is not None:
            for name, questions in self.splits.items():
                for i, q in enumerate(questions):
                    if q.id == question_id:
                        return name, i
            raise ValueError(f"no question with id {question_id!r} on this server")
        name = split if split is not None else self.default_split
        count = len(self.split(name))
        if index is None:
            index = random.Random(seed).randrange(count)
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            raise ValueError(f"index must be an integer in [0, {count}) for split {name!r}, got {index!r}")
        return name, index

    def split(self, name: str) -> Sequence[Question]:
        """The questions of split `name`; ValueError naming the splits there are."""
        if name not in self.splits:
            raise TaskNotFound(f"no split {name!r} on this server (splits: {', '.join(self.splits)})")
        return self.splits[name]

    @property
    def default_split(self) -> str:
        return "n200" if "n200" in self.splits else next(iter(self.splits))


def task_spec(question: Question, split: str, index: int) -> dict[str, Any]:
    """What a client may know of a task before playing it: no gold, no path."""
    return {"id": question.id, "split": split, "index": index, "db_id": question.db_id, "question": question.question,
            "hardness": question.hardness}  # fmt: skip


def served_tools(config: EnvConfig = EnvConfig()) -> list[Tool]:
    """The four tools with the JSON schemas TRL derives from the adapter's methods (`get_json_schema`, which
    `apply_chat_template(tools=...)` uses): the tool list a served client sees is the one a trained model saw."""
    from transformers.utils import get_json_schema

    tools = []
    for func in tool_functions(agent_env_class(config)):
        schema = get_json_schema(func)["function"]
        parameters = dict(schema["parameters"])
        parameters["properties"] = {k: v for k, v in parameters["properties"].items() if k != "self"}
        parameters["required"] = [k for k in parameters.get("required", []) if k != "self"]
        tools.append(Tool(name=schema["name"], description=schema["description"], input_schema=parameters))
    return tools


class SQLServeEnvironment(Environment[Action, Observation, SQLState]):
    """One client session: episodes over the server's question set (see the module docstring)."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session has its own adapter, environment state and sandboxes

    def __init__(self, questions: QuestionSet, config: EnvConfig = EnvConfig(), own_sandboxes: bool = True):
        """`own_sandboxes=False` shares one sandbox per database between sessions, as in-process training does:
        only for the benchmark that shows what per-session sandboxes buy (bench/bench_serve.py)."""
        super().__init__()
        self._questions, self._config = questions, config
        self._agent: SQLAgentEnv = agent_env_class(config)(questions.db_dir, config, own_sandboxes=own_sandboxes)
        self._tools = {f.__name__ for f in tool_functions(type(self._agent))}
        self._state = SQLState()

    # ------------------------------------------------------------------ OpenEnv's Environment
    def reset(self, seed: int | None = None, episode_id: str | None = None, split: str | None = None,
              index: int | None = None, question_id: str | None = None, **kwargs: Any) -> SQLResetObservation:  # fmt: skip
        """Start an episode on the question asked for (by `question_id`, by `split` + `index`, else drawn with
        `seed`). Raises ValueError for a question the server does not have."""
        if kwargs:
            raise ValueError(f"unknown reset argument(s) {sorted(kwargs)}: give split, index, question_id or seed")
        name, i = self._questions.pick(split, index, question_id, seed)
        question = self._questions.splits[name][i]
        try:
            observation = self._agent.reset(**question.to_dict())
        except (SandboxError, GoldQueryError) as exc:
            # The data's fault, not the client's; the message may name a file path, so it is not passed on.
            raise ValueError(f"question {question.id} cannot be played on this server ({type(exc).__name__})") from exc
        self._state = SQLState(episode_id=episode_id, step_count=0, question_id=question.id, split=name, index=i,
                               db_id=question.db_id)  # fmt: skip
        messages = prompts.initial_messages(question, observation, self._config.system_prompt)
        return SQLResetObservation(question_id=question.id, split=name, index=i, db_id=question.db_id,
                                   question=question.question, messages=messages, observation=observation,
                                   done=False, reward=0.0)  # fmt: skip

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        if isinstance(action, ListToolsAction):
            return ListToolsObservation(tools=served_tools(self._config))
        if not isinstance(action, CallToolAction):
            return CallToolObservation(tool_name="", error=ToolError(
                error_type=ToolErrorType.INVALID_ARGS, message=f"unsupported action {type(action).__name__}"))  # fmt: skip
        name = action.tool_name
        if self._state.question_id is None:
            return CallToolObservation(tool_name=name, error=ToolError(
                error_type=ToolErrorType.EXECUTION_ERROR, message="no episode: call reset first"))  # fmt: skip
        if name not in self._tools:
            return CallToolObservation(tool_name=name, error=ToolError(error_type=ToolErrorType.TOOL_NOT_FOUND,
                                       message=f"unknown tool {name!r}; the tools are {', '.join(sorted(self._tools))}"))  # fmt: skip
        env = self._agent._env  # the adapter's environment: its step result carries the call's reward components
        before = env.total_reward
        # Through the adapter's tool, as TRL calls it: badly shaped arguments become the environment's error text.
        text = getattr(self._agent, name)(**action.arguments)
        self._state.step_count += 1
        self._state.done, self._state.answered = env.done, env.answered
        self._state.reward, self._state.reward_components = env.total_reward, env.reward_components
        metadata: dict[str, Any] = {"reward_total": env.total_reward}  # the episode's so far: no extra state request
        if env.done:
            self._state.verdict = verdict(env.answered, env.correct)
            metadata.update(verdict=self._state.verdict, reward_components=env.reward_components, steps=env.steps)
        return CallToolObservation(tool_name=name, result=text, done=env.done, reward=env.total_reward - before,
                                   metadata=metadata)  # fmt: skip

    @property
    def state(self) -> SQLState:
        return self._state

    def close(self) -> None:
        """The session ended (closed, disconnected, reaped, server stopped): its sandboxes close with it."""
        self._agent._env.close()

    def get_metadata(self) -> EnvironmentMetadata:
        from sqlenv.serve import README

        return EnvironmentMetadata(name=NAME, description="Answer questions about a SQLite database by exploring it "
                                   "with describe, sample and query, then answer.", version="0.1.0",
                                   readme_content=README)  # fmt: skip

    # ------------------------------------------------------------------ OpenEnv's task API
    def list_splits(self) -> list[str]:
        return list(self._questions.splits)

    def num_tasks(self, split: str) -> int:
        return len(self._questions.split(split))

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        return [task_spec(q, split, i) for i, q in enumerate(self._questions.split(split))]

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        questions = self._questions.split(split)
        if not 0 <= index < len(questions):
            raise TaskNotFound(f"index {index} out of range for split {split!r} ({len(questions)} tasks)")
        return task_spec(questions[index], split, index)

    def get_task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[dict[str, Any]]:
        """Tasks `[start, stop)` of `split`, with a Python slice's bounds (as OpenEnv's task protocol says)."""
        questions = self._questions.split(split)
        indices = range(len(questions))[slice(start, stop)]
        return [task_spec(questions[i], split, i) for i in indices]
