"""Everything the model reads besides the tool schemas: system prompt, question rendering, tool results.

SFT data, GRPO rollouts, evaluation and the interactive `sqlenv play` all render through
this module, so the text a model is trained on and the text it is evaluated on cannot
drift apart. The layout mirrors what TRL 1.16's `GRPOTrainer(environment_factory=...)`
does at rollout time:

- the dataset's `prompt` is `[system, user(question)]`; TRL appends the string returned by
  `reset()` to the last user message *without a separator*, so `tables_observation` (schema
  hidden) and `schema_observation` (schema full) start with their own blank line;
- the system prompt depends on the environment's schema and answer modes (`system_prompt`);
- each assistant turn carries structured `tool_calls`, and each call's result follows as
  a `{"role": "tool", "name": ..., "content": ...}` message;
- tool schemas are not written here: TRL derives them from the adapter's public methods
  (`env.trl_adapter.tool_schemas`), so the adapter is their one source.

Arguments in stored transcripts are JSON *strings* (a HF dataset would otherwise unify the
per-tool argument dicts into one struct with nulls for the other tools' parameters).
The Qwen2.5 chat template renders `arguments | tojson`, which would quote such a string,
so anything that renders stored transcripts through a chat template must first call
`messages_for_template` to turn the strings back into objects — that is what the model
itself emits and what TRL parses at GRPO time.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Sequence
from typing import Any

from sqlenv.env.sandbox import TableInfo, quote_identifier
from sqlenv.env.verifier import SHORT_FLOAT_CHARS, format_float
from sqlenv.types import QueryResult, Question, blob_text

_INTRO = "You answer questions about a SQLite database by calling tools. "
_SCHEMA_LINE = {
    "hidden": "You are told the table names; the columns are hidden until you look.\n",
    "full": "You are shown the database schema as CREATE TABLE statements.\n",
}
_TOOLS = (
    "Tools:\n"
    "- describe(table_name): the table's columns with types, primary key and foreign keys.\n"
    "- sample(table_name): a few rows of the table.\n"
    "- query(sql): run one read-only SQLite SELECT statement and see its rows.\n"
)
_ANSWER_TOOL = {
    "value": "- answer(value): submit the final answer. The episode ends after it.\n",
    "sql": "- answer(sql): submit the SQL query whose result answers the question. The episode ends after it.\n",
}
_EXPLORE = {
    "hidden": "Explore the schema with describe (and sample when values matter) before you write a query. ",
    "full": "Look at values with sample (or a query) when they matter before you write the final query. ",
}
_HOW_TO_ANSWER = {
    "value": "When a query returns the rows that answer the question, call answer exactly once, "
    "copying the values from that query result: a single value as it is, one column as "
    "'a, b, c', several columns as one row per line with ' | ' between values. ",
    "sql": "When a query returns exactly the rows that answer the question, call answer exactly once "
    "with that query: its result is your answer. ",
}
# The answer tool's argument description states the value format; compact prompts do not repeat it.
_HOW_TO_ANSWER_COMPACT = {
    "value": "When a query returns the rows that answer the question, call answer exactly once with the values "
    "copied from that query result. ",
    "sql": _HOW_TO_ANSWER["sql"],
}
_STOP = "After answering, stop: reply with a short plain sentence and no tool call."


# Prompt styles. `verbose` (round 1) lists the tools in the system prompt although the chat template
# prints their JSON schemas right below it, and every schema carries a `return` description; `compact`
# drops both (the schemas keep each tool's description and argument docs: `trl_adapter.agent_env_class`).
# The Qwen2.5 prompt of a hidden-schema question falls from 716 to 522 tokens (a test pins both); SFT
# trajectories, GRPO log-prob passes and evaluation prefill all pay for it on every episode.
PROMPT_STYLES = ("compact", "verbose")


def system_prompt(schema: str = "hidden", answer: str = "value", style: str = "compact") -> str:
    """The system prompt of a schema mode (`hidden` | `full`), an answer mode (`value` | `sql`) and a
    prompt style (`compact` | `verbose`, see PROMPT_STYLES)."""
    if style not in PROMPT_STYLES:
        raise ValueError(f"prompt style must be one of {PROMPT_STYLES}, got {style!r}")
    if style == "verbose":
        return _INTRO + _SCHEMA_LINE[schema] + _TOOLS + _ANSWER_TOOL[answer] + _EXPLORE[schema] + _HOW_TO_ANSWER[answer] + _STOP
    return _INTRO + _SCHEMA_LINE[schema] + _EXPLORE[schema] + _HOW_TO_ANSWER_COMPACT[answer] + _STOP


SYSTEM_PROMPT = system_prompt()  # the default modes (schema hidden, value answers, compact), as EnvConfig()

# The plain assistant turn that closes a scripted (SFT) episode after `answer`; TRL only
# stops a rollout when the model produces a turn without a tool call, so the model must
# learn to emit one.
FINAL_REPLY = "I have submitted the answer."

ERROR_PREFIX = "Error: "
NOTE_PREFIX = "\n\nNote: "  # what the environment adds to an observation about the episode itself (never a result row)

# Added to an error when the very same call already failed in this episode: the commonest way an episode ran out of
# budget was sending a failing query again unchanged after describing its table (sqlenv/failures.py: repeated_failure).
REPEATED_FAILURE_NOTICE = (
    NOTE_PREFIX + "this exact call already failed in this episode. Sending it again gives the same error: change it "
    "(use the names a describe showed) or try another way."
)


def name_hint(missing: str, owners: Sequence[str], close: Sequence[str], tables: Sequence[str]) -> str:
    """What a failed query's error adds under `EnvConfig.error_hints`: where the name it did not find lives.

    `missing` is a column (`owners`: the tables that have a column of that name; `close`: `table.column`
    names spelled like it, when no table has it) or, with no owners and no close names, a table (`tables`:
    every table of the database). What a describe of each table would show, in one line, so a failing query is
    changed rather than sent again (sqlenv/failures.py counts those that were).
    """
    if owners:
        where = ", ".join(owners)
        return f"{NOTE_PREFIX}a column {missing} is in: {where}. Use the alias of that table, or join it."
    if close:
        return f"{NOTE_PREFIX}no table has a column {missing}; names like it: {', '.join(close)}."
    return f"{NOTE_PREFIX}tables in this database: {', '.join(tables)}."


def budget_notice(calls_left: int, answer_param: str = "value") -> str:
    """What an observation adds once few calls are left (`EnvConfig.budget_notice_at`)."""
    calls = "1 call is" if calls_left == 1 else f"{calls_left} calls are"
    return f"{NOTE_PREFIX}{calls} left in this episode. Answer with your best {answer_param} before they run out."


_COLUMN_SEP = " | "
_ELLIPSIS = "\u2026"  # "…": one token-cheap character for "more follows"


def user_message(question: Question) -> dict[str, str]:
    """The user turn as stored in a dataset's `prompt` column (before `reset` appends tables)."""
    return {"role": "user", "content": question.question.strip()}


def tables_observation(tables: Sequence[str]) -> str:
    """What `reset` returns. Starts with a blank line because TRL concatenates it directly
    onto the user message content."""
    listed = ", ".join(tables) if tables else "(none)"
    return f"\n\nTables in the database: {listed}."


def schema_observation(ddl: str) -> str:
    """What `reset` returns with the full schema shown: the CREATE TABLE statements, after a blank line."""
    return f"\n\nDatabase schema:\n{ddl}"


def initial_messages(question: Question, observation: str, system: str = SYSTEM_PROMPT) -> list[dict[str, str]]:
    """`[system, user(question + observation)]`: the conversation as the model first sees it, where
    `observation` is what the environment's `reset` returned (appended as TRL appends it)."""
    user = user_message(question)
    return [{"role": "system", "content": system}, {"role": "user", "content": user["content"] + observation}]


def error(message: str) -> str:
    """An observation reporting a model mistake. Always starts with `Error: `."""
    return ERROR_PREFIX + message


def _cell(value: Any) -> str:
    # One row per line and ' | ' between columns, so embedded newlines are escaped and
    # floats get the shortest round-tripping repr; the model copies these into `answer`.
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return value.replace("\r", "\\r").replace("\n", "\\n") if ("\n" in value or "\r" in value) else value
    if isinstance(value, float):
        return format_float(value)  # as the verifier writes answers, so the model can copy it
    if isinstance(value, (bytes, bytearray, memoryview)):
        return blob_text(value)
    return str(value)


def render_cell(value: Any) -> str:
    """One cell as a query result shows it to the model (and as the model must copy it into `answer`)."""
    return _cell(value)


def _row_cells(row: Sequence[Any]) -> list[str]:
    # Inlined fast path for the types nearly every cell has (text, integers, NULL, short floats);
    # everything else (text with line breaks, long floats, blobs) goes through `_cell`. Rendering
    # is a third of a step's own cost.
    cells = []
    for v in row:
        kind = type(v)
        if kind is str and "\n" not in v and "\r" not in v:
            cells.append(v)
        elif kind is int:
            cells.append(str(v))
        elif v is None:
            cells.append("NULL")
        elif kind is float and len(text := repr(v)) <= SHORT_FLOAT_CHARS:  # `format_float`, inlined
            cells.append(text)
        else:
            cells.append(_cell(v))
    return cells


def _text_block(rows: Sequence[Sequence[Any]]) -> str | None:
    """The lines of `rows` joined by newlines when every cell is text without a line break (a line
    is then the row joined, as `_row_cells` would give it), else None. All in C: a text result of
    50 rows costs a fifth of rendering it row by row."""
    for v in rows[0]:  # most results that are not all text show it in their first row
        if type(v) is not str:
            return None
    try:
        block = "\n".join(map(_COLUMN_SEP.join, rows))
    except TypeError:  # a later cell that is not text
        return None
    if block.count("\n") != len(rows) - 1 or "\r" in block:
        return None  # a cell with a line break: it must be escaped
    return block


def without_notes(observation: str) -> str:
    """An observation without what the environment added after it (its notes, the step budget's end)."""
    return observation.split(NOTE_PREFIX, 1)[0].split("\n\n" + ERROR_PREFIX, 1)[0]


def result_cells(observation: str) -> list[str]:
    """The cells `render_result` showed (rows between its header and its count footer, split on the column
    separator); nothing for an error or a table description."""
    if observation.startswith(ERROR_PREFIX) or observation.startswith("Table "):
        return []
    observation = without_notes(observation)
    rows = [line for line in observation.split("\n")[1:-1] if not line.startswith(_ELLIPSIS)]
    return [cell for row in rows for cell in row.split(_COLUMN_SEP)]


def render_result(result: QueryResult, max_rows: int, max_chars: int) -> str:
    """A query result as the model sees it: header line, one line per row, a count footer.

    At most `max_rows` rows and roughly `max_chars` characters are shown (whole lines only;
    a single over-long line is cut). Whatever is hidden is announced with a
    "… N more rows" notice so the model knows the result is partial. A failed statement
    renders as `Error: <SQLite's message>`; an empty result as its header and "(0 rows)".
    """
    if not result.ok:
        return error(result.error or "the statement failed.")
    header = _COLUMN_SEP.join(result.columns) if result.columns else "(no columns)"
    total = len(result.rows)
    if total <= 1 and not result.truncated and max_rows >= 1:
        # Most queries return one row or none (Spider's gold results: 333 of 565): the same text as
        # the general path below, without its line list (~0.4 us of a query step's ~9 us over sqlite3).
        if not total:
            return header + "\n(0 rows)"
        line = _COLUMN_SEP.join(_row_cells(result.rows[0]))
        if len(header) + 1 + len(line) <= max_chars:
            return f"{header}\n{line}\n(1 row)"
    head = result.rows[:max_rows] if total > max_rows else result.rows
    block = _text_block(head) if len(head) > 1 else None
    lines = [header]
    used = len(header)
    shown = 0
    if block is not None and used + 1 + len(block) <= max_chars:
        lines.append(block)  # every line fits
        shown = len(head)
    else:
        if block is not None:
            head = block.split("\n")  # its lines, one per row (no cell has a line break)
        for row in head:
            line = row if block is not None else _COLUMN_SEP.join(_row_cells(row))
            if used + 1 + len(line) > max_chars:
                if shown == 0:  # never show zero rows only because the first one is long
                    room = max(max_chars - used - 1, 20)
                    lines.append(line[:room] + _ELLIPSIS)
                    shown = 1
                break
            lines.append(line)
            used += 1 + len(line)
            shown += 1
    hidden = total - shown
    if result.truncated:  # the sandbox stopped fetching at its cap: at least one more row exists
        lines.append(f"{_ELLIPSIS} {hidden + 1}+ more rows (more than {total} rows in total)")
    elif hidden > 0:
        lines.append(f"{_ELLIPSIS} {hidden} more rows ({total} rows in total)")
    else:
        lines.append(f"({total} row{'s' if total != 1 else ''})")
    return "\n".join(lines)


def render_table_info(info: TableInfo) -> str:
    """A table's columns (type, primary key), foreign keys and row count, as `describe` shows them."""
    lines = [f"Table {info.name} ({info.row_count} row{'s' if info.row_count != 1 else ''})", "Columns:"]
    for col in info.columns:
        kind = col.type or "(no type)"
        lines.append(f"  {col.name} {kind}{' PRIMARY KEY' if col.primary_key else ''}")
    if info.foreign_keys:
        lines.append("Foreign keys:")
        for fk in info.foreign_keys:
            lines.append(f"  {fk.column} -> {fk.ref_table}.{fk.ref_column}")
    return "\n".join(lines)


def _identifier(name: str) -> str:
    """A name as written in DDL: bare when it is a plain word, quoted otherwise."""
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else quote_identifier(name)


def schema_ddl(infos: Sequence[TableInfo]) -> str:
    """Tables as CREATE TABLE statements (column types, primary key, foreign keys), as full-schema
    text-to-SQL prompts show a database; in the order given."""
    statements = []
    for info in infos:
        lines = [f"  {_identifier(c.name)}{' ' + c.type if c.type else ''}" for c in info.columns]
        keys = [_identifier(c.name) for c in info.columns if c.primary_key]
        if keys:
            lines.append(f"  PRIMARY KEY ({', '.join(keys)})")
        lines += [f"  FOREIGN KEY ({_identifier(fk.column)}) REFERENCES {_identifier(fk.ref_table)}"
                  f"({_identifier(fk.ref_column)})" for fk in info.foreign_keys]  # fmt: skip
        statements.append(f"CREATE TABLE {_identifier(info.name)} (\n" + ",\n".join(lines) + "\n);")
    return "\n\n".join(statements)


def assistant_tool_calls(calls: Sequence[tuple[str, dict[str, Any]]], content: str = "") -> dict[str, Any]:
    """One assistant turn making `calls`, with each call's arguments as a JSON string."""
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"type": "function", "function": {"name": name, "arguments": _json_arguments(args)}}
            for name, args in calls
        ],
    }


def _json_arguments(args: Any) -> str:
    # A string is taken as already-encoded (possibly malformed on purpose, in tests and replays).
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def tool_message(name: str, content: str) -> dict[str, str]:
    """A tool result turn, in the exact shape TRL appends after executing a call."""
    return {"role": "tool", "name": name, "content": content}


def final_message(content: str = FINAL_REPLY) -> dict[str, str]:
    """The plain assistant turn (no tool call) that ends an episode's conversation."""
    return {"role": "assistant", "content": content}


def messages_for_template(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of `messages` with JSON-string tool arguments decoded into objects.

    Chat templates (Qwen2.5's included) render `arguments | tojson`; a string would come
    out quoted and escaped, unlike what the model generates. Undecodable strings are left
    as they are so that a malformed stored call stays visible rather than vanishing.
    """
    out = copy.deepcopy(list(messages))
    for message in out:
        for call in message.get("tool_calls") or ():
            function = call.get("function", call)
            args = function.get("arguments")
            if isinstance(args, str):
                try:
                    function["arguments"] = json.loads(args)
                except json.JSONDecodeError:
                    pass
    return out
