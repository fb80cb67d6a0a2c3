"""The SQL-agent environment: one episode is one question over one SQLite database.

`reset(question)` shows only the table names (`schema: hidden`, the default: the agent has to
discover the schema) or the whole schema as CREATE TABLE statements (`schema: full`, as published
text-to-SQL work prompts); `step(tool, arguments)` runs one of the four tools — `describe`,
`sample`, `query`, `answer` — and returns a `StepResult` with the observation text and the reward
components that call earned (see `sqlenv.env.rewards`).

Two answer modes (`answer`):
- `value` (default): `answer(value)` submits the answer text, judged by the lenient value verifier
  (`sqlenv.env.verifier`) against the gold result;
- `sql`: `answer(sql)` submits the final SQL; the sandbox runs it and execution accuracy
  (`sqlenv.env.execution_match`, Spider's official rules: both statements without DISTINCT unless
  `keep_distinct`) judges its rows against the gold SQL's. The
  value verifier also reads the canonical text of those rows (`value_correct`), so one episode gives
  both numbers. The progress term then scores the answer's own rows.

What it guards:
- Every model mistake (unknown tool or table, bad SQL, missing, extra or ill-typed
  arguments, arguments that are not a JSON object) becomes readable observation text
  starting with `Error: `. Never an exception, never an empty string.
- The episode ends at `answer` or when `step_budget` calls have been made. Later calls get
  an `Error:` observation and the post-episode penalty, and are counted.
- The `answer` observation is neutral ("Answer recorded …"): it does not say whether the
  answer was right. Nothing can be learned from it in RL (the episode is over), and
  keeping it identical for right and wrong answers means SFT transcripts and evaluation
  transcripts never contain the verdict in the model's context.

Sandboxes and gold results are cached at module level (small LRUs keyed by the database
file's identity and the limits): TRL creates one environment per concurrent rollout and resets each many
times, so per-instance caches would reopen databases and rerun gold SQL constantly. An
evicted sandbox is not closed explicitly — an environment may still hold it — and is
closed by garbage collection once nobody does.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlenv.env import prompts, rewards
from sqlenv.env.execution_match import ex_sql, execution_verdict, order_matters
from sqlenv.env.rewards import RewardConfig
from sqlenv.env.sandbox import Sandbox, SandboxError, SandboxLimits
from sqlenv.env.similarity import result_similarity
from sqlenv.env.verifier import format_answer, verify
from sqlenv.types import (
    TOOL_NAMES,
    QueryResult,
    Question,
    StepResult,
    db_file,
    strict_kwargs,
)

# The single parameter of each tool, in the adapter's signatures too (a test checks); `answer` takes
# `sql` instead of `value` in the sql answer mode (`tool_params`).
TOOL_PARAMS: dict[str, tuple[str, ...]] = {
    "describe": ("table_name",),
    "sample": ("table_name",),
    "query": ("sql",),
    "answer": ("value",),
}
assert tuple(TOOL_PARAMS) == TOOL_NAMES
SCHEMA_MODES: tuple[str, ...] = ("hidden", "full")
ANSWER_MODES: tuple[str, ...] = ("value", "sql")
_TOOL_PARAMS_BY_ANSWER = {"value": TOOL_PARAMS, "sql": {**TOOL_PARAMS, "answer": ("sql",)}}


def tool_params(answer: str = "value") -> dict[str, tuple[str, ...]]:
    """Each tool's parameter names in an answer mode (`value` or `sql`)."""
    return _TOOL_PARAMS_BY_ANSWER[answer]

_SANDBOX_CACHE_SIZE = 32
_GOLD_CACHE_SIZE = 8192
_cache_lock = threading.Lock()
_sandboxes: OrderedDict[tuple[tuple, SandboxLimits], Sandbox] = OrderedDict()
_gold: OrderedDict[tuple[tuple, str, SandboxLimits], QueryResult] = OrderedDict()
_schemas: OrderedDict[tuple, str] = OrderedDict()  # db key -> its CREATE TABLE text (schema: full)


class GoldQueryError(ValueError):
    """The question's gold SQL does not run on its database: a data problem, not a model one."""


@dataclass(frozen=True)
class EnvConfig:
    """Episode limits, observation caps, what the agent is shown and submits, and reward weights."""

    step_budget: int = 15
    sql_timeout_s: float = 2.0
    max_rows_shown: int = 50
    max_chars_shown: int = 4000
    sample_rows: int = 3
    schema: str = "hidden"  # hidden: table names only | full: CREATE TABLE statements in the first message
    answer: str = "value"  # value: answer(value), the value verifier | sql: answer(sql), execution accuracy
    prompt: str = "compact"  # compact: no tool list in the system prompt, no Returns in tool schemas | verbose (round 1)
    keep_distinct: bool = False  # answer=sql: EX runs both statements as written, not without DISTINCT (official)
    loop_notice: bool = False  # a call that fails again exactly as before gets `prompts.REPEATED_FAILURE_NOTICE`
    budget_notice_at: int = 0  # from this many calls left, each observation says how many remain (0: never)
    error_hints: bool = False  # a query that names a missing column or table is told where that name lives (`name_hint`)
    rewards: RewardConfig = field(default_factory=RewardConfig)

    def __post_init__(self) -> None:
        if self.step_budget < 1:
            raise ValueError(f"step_budget must be >= 1, got {self.step_budget}")
        if self.budget_notice_at < 0:
            raise ValueError(f"budget_notice_at must be >= 0, got {self.budget_notice_at}")
        if self.max_rows_shown < 1 or self.max_chars_shown < 1 or self.sample_rows < 1:
            raise ValueError("max_rows_shown, max_chars_shown and sample_rows must be >= 1")
        if self.schema not in SCHEMA_MODES:
            raise ValueError(f"schema must be one of {SCHEMA_MODES}, got {self.schema!r}")
        if self.answer not in ANSWER_MODES:
            raise ValueError(f"answer must be one of {ANSWER_MODES}, got {self.answer!r}")
        if self.prompt not in prompts.PROMPT_STYLES:
            raise ValueError(f"prompt must be one of {prompts.PROMPT_STYLES}, got {self.prompt!r}")

    @property
    def system_prompt(self) -> str:
        """The system prompt of this schema and answer mode and prompt style (`prompts.system_prompt`)."""
        return prompts.system_prompt(self.schema, self.answer, self.prompt)

    @property
    def mode(self) -> str:
        """`schema=<hidden|full> answer=<value|sql>`: what every table title and run tag states."""
        return f"schema={self.schema} answer={self.answer}"

    @property
    def limits(self) -> SandboxLimits:
        return SandboxLimits(timeout_s=self.sql_timeout_s)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "EnvConfig":
        """Build from a params section (with an optional nested `rewards` mapping); unknown keys fail."""
        kwargs = strict_kwargs(cls, d, "env config")
        if isinstance(kwargs.get("rewards"), Mapping):
            kwargs["rewards"] = RewardConfig.from_dict(kwargs["rewards"])
        return cls(**kwargs)


_MISSING_NAME = re.compile(r"^(no such column|ambiguous column name|no such table): (.+)$")


def name_hint(sandbox: Sandbox, message: str) -> str:
    """The note a failed query's SQLite `message` gets under `EnvConfig.error_hints` ("" for other errors):
    for a column, the tables that have one of that name (case-insensitive) or, where none has, up to three
    `table.column` names like it (one name inside the other first, then by `difflib`'s similarity; none: no note);
    for a table, the database's tables. Read from the schema only: nothing about the question or its gold query."""
    found = _MISSING_NAME.match(message.strip())
    if found is None:
        return ""
    kind, name = found.groups()
    tables = sandbox.table_names()
    if kind == "no such table":
        return prompts.name_hint(name, (), (), tables)
    column = name.rsplit(".", 1)[-1].strip("\"'`[]")
    by_table = [(t, [c.name for c in info.columns]) for t in tables if (info := sandbox.table_info(t)) is not None]
    owners = [t for t, columns in by_table if any(c.casefold() == column.casefold() for c in columns)]
    close: list[str] = []
    if not owners:
        spelled = {f"{t}.{c}": c.casefold() for t, columns in by_table for c in columns}
        want = column.casefold()
        inside = [f for f in dict.fromkeys(spelled.values()) if len(f) >= 3 and (f in want or want in f)]
        near = inside + difflib.get_close_matches(want, sorted(set(spelled.values()) - set(inside)), n=3, cutoff=0.6)
        close = [full for folded in near for full, f in spelled.items() if f == folded][:3]
        if not close:
            return ""
    return prompts.name_hint(column, owners, close, tables)


@functools.lru_cache(maxsize=4096)
def _resolved(path: str) -> str:
    # Path.resolve stats every component: ~50 us, paid on every reset without this cache.
    return str(Path(path).resolve())


def _db_key(db_path: str | Path) -> tuple[str, int, int, int]:
    """The database file's identity: path plus inode, mtime and size, so that a file rebuilt
    in place (a re-run of data preparation in the same process) never hits a stale
    connection or a stale gold result. One stat per reset."""
    path = _resolved(str(db_path))
    try:
        st = os.stat(path)
    except OSError as exc:
        raise SandboxError(f"database file not found: {path}") from exc
    return path, st.st_ino, st.st_mtime_ns, st.st_size


def shared_sandbox(db_path: str | Path, limits: SandboxLimits) -> Sandbox:
    """The process-wide sandbox for a database file (opened on first use, LRU-cached)."""
    return _sandbox_for(_db_key(db_path), limits)


def _sandbox_for(db_key: tuple[str, int, int, int], limits: SandboxLimits) -> Sandbox:
    key = (db_key, limits)
    with _cache_lock:
        box = _sandboxes.get(key)
        if box is not None:
            _sandboxes.move_to_end(key)
            return box
    box = Sandbox(db_key[0], limits)  # raises SandboxError for a file that is not SQLite
    with _cache_lock:
        _sandboxes[key] = box
        while len(_sandboxes) > _SANDBOX_CACHE_SIZE:
            _sandboxes.popitem(last=False)
    return box


def close_shared_sandboxes() -> None:
    """Close and forget every cached sandbox and gold result (end of a run, tests)."""
    with _cache_lock:
        boxes = list(_sandboxes.values())
        _sandboxes.clear()
        _gold.clear()
        _schemas.clear()
    for box in boxes:
        box.close()


def gold_result(sandbox: Sandbox, db_key: tuple, sql: str, limits: SandboxLimits) -> QueryResult:
    """The gold SQL's result, run once per (database, SQL, limits) in the same sandbox as the agent."""
    key = (db_key, sql, limits)
    with _cache_lock:
        hit = _gold.get(key)
        if hit is not None:
            _gold.move_to_end(key)
            return hit
    result = sandbox.execute(sql)
    if result.ok and not result.timed_out:  # a timeout may be load, not the query: don't pin it
        with _cache_lock:
            _gold[key] = result
            while len(_gold) > _GOLD_CACHE_SIZE:
                _gold.popitem(last=False)
    return result


def schema_text(sandbox: Sandbox, db_key: tuple) -> str:
    """The database's tables as CREATE TABLE statements (`prompts.schema_ddl`), built once per database file."""
    with _cache_lock:
        hit = _schemas.get(db_key)
    if hit is not None:
        return hit
    infos = [info for info in map(sandbox.table_info, sandbox.table_names()) if info is not None]
    text = prompts.schema_ddl(infos)
    with _cache_lock:
        _schemas[db_key] = text
        while len(_schemas) > _SANDBOX_CACHE_SIZE * 4:
            _schemas.popitem(last=False)
    return text


def _potential(rows: list[tuple], gold_rows: list[tuple]) -> float:
    """Φ for progress shaping: `result_similarity`, short-cut when the rows equal the gold rows.

    The similarity normalises every cell and searches column alignments, which on Spider
    costs several times the query itself; a result identical to the gold one (the common
    last query of a good episode) is 1.0 by definition, and list/Counter equality of the
    raw rows decides that at C speed.
    """
    if rows == gold_rows:
        return 1.0
    if rows and len(rows) == len(gold_rows):
        try:
            if Counter(rows) == Counter(gold_rows):  # same rows in another order
                return 1.0
        except TypeError:  # an unhashable cell cannot come from sqlite3, but don't bet the step on it
            pass
    return result_similarity(rows, gold_rows)


def _check_arguments(tool: str, arguments: Any, params: tuple[str, ...]) -> tuple[dict[str, str] | None, str | None]:
    """Validate a call's arguments against the tool's parameters: (clean args, None) or (None, error)."""
    if type(arguments) is dict and len(arguments) == 1 and type(arguments.get(params[0])) is str:
        return arguments, None  # the well-formed call: skip the diagnosis below
    usage, example = f"{tool}({', '.join(params)})", json.dumps({p: "..." for p in params})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return None, f"malformed call: the arguments are not valid JSON ({exc.msg}). Use {tool} with {example}."
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, Mapping):
        return None, f"malformed call: the arguments must be a JSON object like {example}."
    missing = [p for p in params if p not in arguments]
    extra = sorted(str(k) for k in arguments if k not in params)
    if missing or extra:
        problems = []
        if missing:
            problems.append(f"missing argument {', '.join(repr(m) for m in missing)}")
        if extra:
            problems.append(f"unexpected argument {', '.join(repr(e) for e in extra)}")
        return None, f"{'; '.join(problems)}. Usage: {usage}."
    clean = {}
    for p in params:
        value = arguments[p]
        # A JSON number is unambiguous text (an answer of 42 means "42"); bool, null, lists
        # and objects are not, and the schema says string.
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = json.dumps(value)
        if not isinstance(value, str):
            return None, f"argument '{p}' of {tool} must be a string, got {_json_type(value)}. Usage: {usage}."
        clean[p] = value
    return clean, None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "an array"
    return type(value).__name__


class SQLEnv:
    """One question over one SQLite database per episode; see the module docstring."""

    def __init__(self, db_dir: str | Path | None = None, config: EnvConfig = EnvConfig(), own_sandboxes: bool = False):
        """`own_sandboxes`: open this environment's own sandbox per database instead of the process-wide shared
        one, closed by `close()` — for environments running in parallel threads (served sessions), so one
        episode's statement never waits behind another's."""
        self.db_dir = Path(db_dir) if db_dir is not None else None
        self.config = config
        self._own: dict[tuple, Sandbox] | None = {} if own_sandboxes else None
        self.tool_params = tool_params(config.answer)
        self.question: Question | None = None
        self.sandbox: Sandbox | None = None
        self.gold: QueryResult | None = None
        self.tables: list[str] = []
        self._reset_state()

    def _reset_state(self) -> None:
        self.done = False
        self.answered = False
        self.correct = False
        # sql answers: the value verifier on the answer's rows (False until a right one); None in value mode
        self.value_correct: bool | None = False if self.config.answer == "sql" else None
        self.answer: str | None = None
        self.verdict_reason = ""
        self.steps = 0
        self.calls_after_end = 0
        self.parse_failures = 0
        self.budget_exhausted = False
        self._components = rewards.zero_components()
        self._reach = 0.0  # sum of |every term earned|: |shaping| <= this (`rewards.bound`)
        self._recent: list[tuple[str, str]] = []
        self._failed: set[tuple[str, str]] = set()  # calls whose observation was an error (the loop notice)
        self.repeated_failures = 0  # calls that failed again exactly as an earlier one had
        self._seen_results = rewards.SeenResults()
        self._last_rows: list[tuple] | None = None  # the last successful query's rows (for progress)

    def sandbox_for(self, db_id: str) -> Sandbox:
        """The (shared) sandbox of database `db_id` under `db_dir`, opened with this env's limits."""
        if self.db_dir is None:
            raise ValueError("SQLEnv.sandbox_for needs db_dir")
        return shared_sandbox(db_file(self.db_dir, db_id), self.config.limits)

    def close(self) -> None:
        """Drop this environment's references and close its own sandboxes. Shared sandboxes stay open for other
        instances; `close_shared_sandboxes()` closes them all."""
        self.sandbox = self.gold = self.question = None
        for box in (self._own or {}).values():
            box.close()
        if self._own is not None:
            self._own.clear()

    def _sandbox(self, db_key: tuple[str, int, int, int], limits: SandboxLimits) -> Sandbox:
        if self._own is None:
            return _sandbox_for(db_key, limits)
        if db_key not in self._own:
            self._own[db_key] = Sandbox(db_key[0], limits)
        return self._own[db_key]

    # ----------------------------------------------------------------------------- episode
    def reset(self, question: Question, db_path: str | Path | None = None) -> str:
        """Start an episode on `question`; returns the tables observation.

        The database is `db_path` if given, else `<db_dir>/<db_id>/<db_id>.sqlite`. Raises
        `SandboxError` for an unusable database and `GoldQueryError` when the gold SQL fails:
        both are data problems that must surface, not be trained on.
        """
        if db_path is None:
            if self.db_dir is None:
                raise ValueError("SQLEnv needs db_dir (Spider layout) or an explicit db_path")
            db_path = db_file(self.db_dir, question.db_id)
        limits, db_key = self.config.limits, _db_key(db_path)
        self.sandbox = self._sandbox(db_key, limits)
        gold = gold_result(self.sandbox, db_key, question.gold_sql, limits)
        if not gold.ok:
            raise GoldQueryError(f"gold SQL of question {question.id} fails on {question.db_id}: {gold.error}")
        self.question, self.gold = question, gold
        self.tables = self.sandbox.table_names()
        self._reset_state()
        if self.config.schema == "full":
            return prompts.schema_observation(schema_text(self.sandbox, db_key))
        return prompts.tables_observation(self.tables)

    @property
    def reward_components(self) -> dict[str, float]:
        """Each reward component summed over the episode so far."""
        return dict(self._components)

    @property
    def total_reward(self) -> float:
        return float(sum(self._components.values()))

    def summary(self) -> dict[str, Any]:
        """The episode's outcome and diagnostics, JSON-friendly (for logging callbacks)."""
        q = self.question
        return {
            "question_id": q.id if q else None,
            "db_id": q.db_id if q else None,
            "hardness": q.hardness if q else None,
            "steps": self.steps,
            "answered": self.answered,
            "correct": self.correct,
            "value_correct": self.value_correct,
            "budget_exhausted": self.budget_exhausted,
            "calls_after_end": self.calls_after_end,
            "parse_failures": self.parse_failures,
            "repeated_failures": self.repeated_failures,
            "reward": self.total_reward,
            "reward_components": self.reward_components,
        }

    # -------------------------------------------------------------------------------- step
    def step(self, tool: str, arguments: Any) -> StepResult:
        """Run one tool call. Mistakes come back as `Error: ...` observations, never raised."""
        if self.gold is None:  # set by reset together with question and sandbox
            raise RuntimeError("SQLEnv.step called before reset")
        cfg = self.config.rewards.applied
        if self.done:
            self.calls_after_end += 1
            why = "the answer was already submitted" if self.answered else "the step budget is used up"
            obs = prompts.error(f"the episode is over ({why}). Reply with a short plain sentence and no tool call.")
            return self._result(obs, {"post_episode_penalty": rewards.post_episode_penalty(cfg)})

        self.steps += 1
        if type(tool) is str and tool in TOOL_PARAMS:
            args, problem = _check_arguments(tool, arguments, self.tool_params[tool])
        else:
            args, problem = None, f"unknown tool {tool!r}. Available tools: {', '.join(TOOL_NAMES)}."
        key = rewards.call_key(tool, args) if args is not None else (str(tool), repr(arguments))
        earned = {"repeat_penalty": rewards.repeat_penalty(key, self._recent, cfg)}
        self._recent.append(key)
        new_result = False
        if problem is not None:
            self.parse_failures += 1
            obs = prompts.error(problem)
        elif tool == "query":
            obs, new_result = self._query(args["sql"])
        elif tool == "answer":
            obs = self._answer(args[self.tool_params["answer"][0]], earned)
        else:
            obs = self._table_tool(tool, args["table_name"])
        earned["operational"] = rewards.operational(new_result, cfg)
        if obs.startswith(prompts.ERROR_PREFIX):
            if key in self._failed:
                self.repeated_failures += 1
                if self.config.loop_notice:
                    obs += prompts.REPEATED_FAILURE_NOTICE
            self._failed.add(key)
        left = self.config.step_budget - self.steps
        if left <= 0 and not self.done:
            self.done = self.budget_exhausted = True
            obs += (
                f"\n\nError: the step budget ({self.config.step_budget} calls) is used up; "
                "the episode is over without an answer."
            )
        elif not self.done and left <= self.config.budget_notice_at:
            obs += prompts.budget_notice(left, self.tool_params["answer"][0])
        return self._result(obs, earned)

    def _result(self, observation: str, earned: dict[str, float]) -> StepResult:
        components, reach = self._components, self._reach
        for name, value in earned.items():
            components[name] += value
            reach += abs(value)
        self._reach = reach
        clip = rewards.bound(components, self.config.rewards.applied, reach)
        if clip:
            components["bound"] += clip
            earned["bound"] = earned.get("bound", 0.0) + clip
        return StepResult(observation, earned, self.done)

    def _table_tool(self, tool: str, name: str) -> str:
        table = self.sandbox.resolve_table(name)
        if table is None:
            return prompts.error(f"unknown table {name!r}. Tables in this database: {', '.join(self.tables)}.")
        if tool == "describe":
            info = self.sandbox.table_info(table)
            if info is None:  # resolve_table found it, so only a concurrent schema change gets here
                return prompts.error(f"cannot describe table {table!r}.")
            return prompts.render_table_info(info)
        result = self.sandbox.sample(table, self.config.sample_rows)
        return prompts.render_result(result, self.config.max_rows_shown, self.config.max_chars_shown)

    def _query(self, sql: str) -> tuple[str, bool]:
        cfg = self.config
        result = self.sandbox.execute(sql)  # an empty statement is the sandbox's error to report
        obs = prompts.render_result(result, cfg.max_rows_shown, cfg.max_chars_shown)
        if not result.ok:
            if cfg.error_hints:
                obs += name_hint(self.sandbox, result.error or "")
            return obs, False
        self._last_rows = result.rows
        return obs, self._seen_results.add_if_new(result.rows)

    def progress_potential(self) -> float:
        """Φ of the episode so far: the last successful query's result against the gold result (0 if none)."""
        return 0.0 if self._last_rows is None else _potential(self._last_rows, self.gold.rows)

    def _answer(self, value: str, earned: dict[str, float]) -> str:
        cfg = self.config.rewards.applied
        if self.config.answer == "sql":
            verdict = self._judge_sql(value)
        else:
            verdict = verify(value, self.gold.rows, self.question.ordered)
        self.done = self.answered = True
        self.answer, self.correct, self.verdict_reason = value, verdict.correct, verdict.reason
        earned["correctness"] = rewards.correctness(verdict.correct, cfg)
        earned["format"] = rewards.format_reward(True, cfg)
        if cfg.progress_weight:  # the similarity search is the costly part of a step: only when it pays
            earned["progress"] = rewards.progress(self.progress_potential(), cfg)
        shown = value if len(value) <= self.config.max_chars_shown else value[: self.config.max_chars_shown] + "\u2026"
        return f"Answer recorded: {shown}\nThe episode is over. Reply with a short plain sentence and no tool call."

    def _judge_sql(self, sql: str):
        """EX of the submitted SQL (run in the episode's sandbox) against the gold SQL's rows; the value
        verifier's reading of the same rows goes to `value_correct`. A failing statement is wrong on both."""
        result = self.sandbox.execute(sql)
        if result.ok:
            self._last_rows = result.rows  # the final query of the episode: what progress scores
            as_value = verify(format_answer(result.columns, result.rows), self.gold.rows, self.question.ordered)
            self.value_correct = as_value.correct and not result.truncated
        else:
            self.value_correct = False
        ordered = order_matters(self.question.gold_sql)
        gold_sql, pred_sql = (ex_sql(q, self.config.keep_distinct) for q in (self.question.gold_sql, sql))
        if gold_sql == self.question.gold_sql and pred_sql == sql:
            return execution_verdict(result, self.gold, ordered)
        limits = self.config.limits
        gold = gold_result(self.sandbox, _db_key(self.sandbox.path), gold_sql, limits)
        if not gold.ok:  # only a gold SQL that uses IS DISTINCT FROM fails once DISTINCT is removed
            raise GoldQueryError(f"gold SQL of question {self.question.id} fails without DISTINCT: {gold.error}")
        return execution_verdict(result if pred_sql == sql else self.sandbox.execute(pred_sql), gold, ordered)
