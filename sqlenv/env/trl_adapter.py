"""`SQLAgentEnv`: the SQL environment in the shape TRL 1.16's `GRPOTrainer` expects.

How TRL uses it (trl/trainer/grpo_trainer.py, `environment_factory`):
- the factory is called with no arguments, once per concurrent rollout, and instances are
  pooled and reset many times — so configuration goes through constructor defaults, e.g.
  `functools.partial(SQLAgentEnv, db_dir=..., config=...)`;
- `reset(**row)` receives every dataset column (`prompt` included); its string return is
  appended to the last user message;
- every public function on the class other than `reset`/`get_reward` becomes a tool: TRL
  lists `inspect.getmembers(type(env), inspect.isfunction)`, passes the bound methods to
  `apply_chat_template(tools=...)` (which derives schemas with `get_json_schema` from the
  type hints and Google-style docstrings) and calls `method(**arguments)`;
- `get_reward()` is called once per finished rollout.

So the public surface is exactly the four tools plus `reset` and `get_reward`; everything
else is `_private`. Because TRL calls `tool(**arguments)`, a missing or unexpected
argument would raise `TypeError` before any of our code ran. Each tool is therefore
wrapped by `_tool`, which binds the arguments against the real signature first and, when
they don't fit, hands the raw arguments to `SQLEnv.step` — so training sees the very same
`Error: ...` text that evaluation sees. `functools.wraps` keeps the signature, annotations
and docstring visible to `get_json_schema` (a test checks).

In the `sql` answer mode the answer tool takes the final SQL: `SQLAnswerAgentEnv` (a subclass whose
`answer(sql)` replaces `answer(value)`); `agent_env_class(config)` picks the class of a config, and
each class refuses a config of the other mode, so the tool schema a model is shown always matches
what the environment judges.

Tool docstrings say what a tool does and what its arguments are, not what it returns (the model reads the
result anyway): that is the compact prompt (`env.prompt: compact`, the default). `agent_env_class` of a
`verbose` config gives round 1's schemas back, with `return` entries (`verbose_tools`).

Diagnostics for logging callbacks: `env._episode` (a property, so TRL does not list it)
returns `SQLEnv.summary()` — component sums, steps, calls after the end, answered, correct.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlenv.env.environment import EnvConfig, SQLEnv
from sqlenv.types import TOOL_NAMES, Question

_QUESTION_FIELDS = tuple(f.name for f in dataclasses.fields(Question))


def _tool(method: Callable[..., str]) -> Callable[..., str]:
    """Make a tool method total: badly-shaped arguments become the environment's error text."""
    signature = inspect.signature(method)
    params = list(signature.parameters)[1:]  # without self
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self: "SQLAgentEnv", *args: Any, **kwargs: Any) -> str:
        try:
            signature.bind(self, *args, **kwargs)
        except TypeError:
            # TRL only passes keywords; positional arguments come from Python callers. Give
            # them their parameter's name, or a placeholder the env reports as unexpected.
            raw = {(params[i] if i < len(params) else f"<positional {i}>"): a for i, a in enumerate(args)}
            raw.update(kwargs)
            return self._step(name, raw)
        return method(self, *args, **kwargs)

    return wrapper


class SQLAgentEnv:
    """A SQLite database you can explore and query to answer one question."""

    _answer_mode = "value"

    def __init__(self, db_dir: str | Path | None = None, config: EnvConfig | None = None, own_sandboxes: bool = False):
        config = EnvConfig(answer=self._answer_mode) if config is None else config
        if config.answer != self._answer_mode:
            raise ValueError(f"{type(self).__name__} answers by {self._answer_mode}, the config by {config.answer}: "
                             "use agent_env_class(config)")  # fmt: skip
        self._env = SQLEnv(db_dir, config, own_sandboxes=own_sandboxes)

    def reset(self, **row: Any) -> str:
        """Start an episode from one dataset row; returns the tables observation.

        Args:
            row: The dataset columns: id, db_id, question, gold_sql, ordered, tables, ... and
                optionally db_path (else the constructor's db_dir is used). Others are ignored.

        Returns:
            The table names, appended by TRL to the user message.
        """
        fields = {k: row[k] for k in _QUESTION_FIELDS if k in row and row[k] is not None}
        fields["ordered"] = bool(fields.get("ordered", False))
        question = Question.from_dict(fields)
        return self._env.reset(question, db_path=row.get("db_path") or None)

    @_tool
    def describe(self, table_name: str):
        """Show a table's columns with their types, its primary key and foreign keys, and its row count.

        Args:
            table_name: Name of a table in the database.
        """
        return self._step("describe", {"table_name": table_name})

    @_tool
    def sample(self, table_name: str):
        """Show a few rows of a table.

        Args:
            table_name: Name of a table in the database.
        """
        return self._step("sample", {"table_name": table_name})

    @_tool
    def query(self, sql: str):
        """Run one read-only SQLite SELECT statement and show its result rows.

        Args:
            sql: The SQLite query to run.
        """
        return self._step("query", {"sql": sql})

    @_tool
    def answer(self, value: str):
        """Submit the final answer and end the episode. Call it exactly once.

        Args:
            value: The answer values copied from the query result: one value as it is, one column as "a, b, c", several columns as one row per line with " | " between values.
        """
        return self._step("answer", {"value": value})

    def get_reward(self) -> float:
        """The episode's total reward (sum of the named components).

        Returns:
            The total reward.
        """
        return self._env.total_reward

    def _step(self, tool: str, arguments: Any) -> str:
        return self._env.step(tool, arguments).observation

    @property
    def _episode(self) -> dict[str, Any]:
        """The current episode's diagnostics (see `SQLEnv.summary`), for trainer callbacks."""
        return self._env.summary()


class SQLAnswerAgentEnv(SQLAgentEnv):
    """A SQLite database you can explore and query; the answer is the SQL query that answers the question."""

    _answer_mode = "sql"

    @_tool
    def answer(self, sql: str):
        """Submit the final SQL query and end the episode: its result is the answer. Call it exactly once.

        Args:
            sql: The SQLite SELECT statement whose result answers the question.
        """
        return self._step("answer", {"sql": sql})


def agent_env_class(config: EnvConfig | str = EnvConfig()) -> type[SQLAgentEnv]:
    """The adapter class of a config's answer mode (or of the mode's name, compact prompt): what TRL's
    factory builds. A verbose-prompt config (round 1's) gets the same class with its tools' `Returns:`
    docs and return type back (`verbose_tools`), so TRL's schemas carry `return` entries again."""
    answer = config if isinstance(config, str) else config.answer
    cls = SQLAnswerAgentEnv if answer == "sql" else SQLAgentEnv
    return verbose_tools(cls) if not isinstance(config, str) and config.prompt == "verbose" else cls


# What round 1's tool docstrings said under `Returns:` (env.prompt: verbose); the compact default leaves it out
# (the tool result is shown anyway), 27 tokens per tool in the rendered schemas.
VERBOSE_RETURNS = {
    "describe": "The table description, or an error message.",
    "sample": "The first rows of the table, or an error message.",
    "query": "The result rows (long results are cut), or SQLite's error message.",
    "answer": "A confirmation that the answer was recorded.",
}


@functools.cache
def verbose_tools(cls: type[SQLAgentEnv]) -> type[SQLAgentEnv]:
    """A subclass of the same name whose tools document what they return (`Returns:` and `-> str`), as
    round 1's did. Same name: TRL names the reward column after the class (`rewards/SQLAgentEnv/mean`)."""
    namespace: dict[str, Any] = {"__doc__": cls.__doc__, "__module__": cls.__module__, "__qualname__": cls.__qualname__}
    for func in tool_functions(cls):

        def make(method: Callable[..., str]) -> Callable[..., str]:
            @functools.wraps(method)
            def tool(self: SQLAgentEnv, *args: Any, **kwargs: Any) -> str:
                return method(self, *args, **kwargs)

            doc = (method.__doc__ or "").rstrip()
            tool.__doc__ = f"{doc}\n\n        Returns:\n            {VERBOSE_RETURNS[method.__name__]}\n        "
            tool.__annotations__ = {**method.__annotations__, "return": "str"}
            return tool

        namespace[func.__name__] = make(func)
    return type(cls.__name__, (cls,), namespace)


# ------------------------------------------------------------------------------------------- the tools
def tool_functions(cls: type = SQLAgentEnv) -> list[Callable[..., str]]:
    """The tools as TRL finds them: public functions of the class except `reset`/`get_reward`, by name."""
    return [
        func
        for name, func in inspect.getmembers(cls, predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    ]


def tool_methods(env: Any) -> list[Callable[..., str]]:
    """An instance's tools, bound, in TRL's order (what `GRPOTrainer` passes to `apply_chat_template(tools=...)`)."""
    return [getattr(env, func.__name__) for func in tool_functions(type(env))]


def tool_schemas(config: EnvConfig | str = EnvConfig()) -> list[dict[str, Any]]:
    """The tool schemas exactly as TRL derives them (`get_json_schema` of each tool, via `apply_chat_template`),
    for a config's answer mode (or the mode's name)."""
    from transformers.utils import get_json_schema

    schemas = [get_json_schema(func) for func in tool_functions(agent_env_class(config))]
    names = sorted(s["function"]["name"] for s in schemas)
    if names != sorted(TOOL_NAMES):  # the adapter must expose exactly the four tools
        raise RuntimeError(f"the adapter exposes tools {names}, expected {sorted(TOOL_NAMES)}")
    return schemas
