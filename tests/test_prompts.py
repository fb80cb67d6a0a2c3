"""Guards what the model reads: prompt layout as TRL builds it, result/table rendering, tool-call messages."""

import json
from pathlib import Path

import pytest
import trl
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.utils.chat_template_utils import render_jinja_template

from sqlenv.env import prompts
from sqlenv.env.sandbox import ColumnInfo, ForeignKey, TableInfo
from sqlenv.types import QueryResult, Question

QWEN_TEMPLATE = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
Q = Question(id="1", db_id="concert", question="  How many singers?  ", gold_sql="SELECT count(*) FROM singer")


def test_system_prompt_names_tools_and_stopping_rule():
    verbose = prompts.system_prompt(style="verbose")
    for word in ("describe(table_name)", "sample(table_name)", "query(sql)", "answer(value)", "exactly once", "stop"):
        assert word in verbose
    compact = prompts.SYSTEM_PROMPT  # the default: the tools are named by their schemas only
    assert compact == prompts.system_prompt("hidden", "value", "compact")
    assert "describe(" not in compact and "exactly once" in compact and "stop" in compact
    for text in (verbose, compact):
        assert "CREATE TABLE" not in text  # schemas are discovered, never listed
    with pytest.raises(ValueError, match="prompt style"):
        prompts.system_prompt(style="terse")


@pytest.mark.parametrize("style, tokens", [("verbose", 716), ("compact", 522)])
def test_prompt_tokens_of_each_style(tiny_models, style, tokens):
    """The first prompt of a hidden-schema question as TRL renders it (Qwen2.5 tokenizer): the figures the
    params.yaml comment and prompts.PROMPT_STYLES quote. The compact schemas keep every tool and argument."""
    from sqlenv.env.environment import EnvConfig
    from sqlenv.env.trl_adapter import agent_env_class, tool_methods, tool_schemas

    tokenizer = tiny_models.tokenizer("qwen2_5")
    config = EnvConfig(prompt=style)
    env = agent_env_class(config)(config=config)
    messages = prompts.initial_messages(Q, prompts.tables_observation(["a", "b", "c"]), config.system_prompt)
    messages[1]["content"] = "How many x?\n\nTables in the database: a, b, c."
    ids = tokenizer.apply_chat_template(messages, tools=tool_methods(env), add_generation_prompt=True, tokenize=True,
                                        return_dict=True)["input_ids"]  # fmt: skip
    assert len(ids) == tokens
    schemas = {s["function"]["name"]: s["function"] for s in tool_schemas(config)}
    assert sorted(schemas) == ["answer", "describe", "query", "sample"]
    assert all(("return" in s) == (style == "verbose") for s in schemas.values())
    assert schemas["answer"]["parameters"]["properties"]["value"]["description"].startswith("The answer values")


def test_initial_messages_equal_trl_concatenation():
    # TRL appends reset()'s return to the dataset's last user message with no separator.
    tables = ["concert", "singer"]
    system, user = prompts.initial_messages(Q, prompts.tables_observation(tables))
    assert system == {"role": "system", "content": prompts.SYSTEM_PROMPT}
    assert user["content"] == prompts.user_message(Q)["content"] + prompts.tables_observation(tables)
    assert user["content"] == "How many singers?\n\nTables in the database: concert, singer."
    assert prompts.tables_observation([]).endswith("(none).")


def _result(columns, rows, **kw):
    return QueryResult(ok=True, columns=columns, rows=rows, **kw)


@pytest.mark.parametrize(
    "result, max_rows, max_chars, expected",
    [
        (_result(["n"], [(3,)]), 50, 4000, "n\n3\n(1 row)"),
        (_result(["a", "b"], [(1, "x"), (2, None)]), 50, 4000, "a | b\n1 | x\n2 | NULL\n(2 rows)"),
        (_result(["name", "age"], []), 50, 4000, "name | age\n(0 rows)"),
        (_result(["v"], [(1.5,), (2.0,), (0.1 + 0.2,)]), 50, 4000, "v\n1.5\n2.0\n0.3\n(3 rows)"),
        (_result(["t"], [("two\nlines",)]), 50, 4000, "t\ntwo\\nlines\n(1 row)"),
        (_result(["n"], [(i,) for i in range(5)]), 2, 4000, "n\n0\n1\n\u2026 3 more rows (5 rows in total)"),
        (_result(["n"], [(i,) for i in range(3)], truncated=True), 50, 4000,
         "n\n0\n1\n2\n\u2026 1+ more rows (more than 3 rows in total)"),
        (_result(["s"], [("x" * 10,), ("y" * 10,), ("z" * 10,)]), 50, 25, "s\n" + "x" * 10 + "\n"
         + "y" * 10 + "\n\u2026 1 more rows (3 rows in total)"),
        (QueryResult(ok=False, error="no such column: nope"), 50, 4000, "Error: no such column: nope"),
        (QueryResult(ok=False, timed_out=True, error="query timed out after 2.0 s"), 50, 4000,
         "Error: query timed out after 2.0 s"),
    ],
)
def test_render_result(result, max_rows, max_chars, expected):
    assert prompts.render_result(result, max_rows, max_chars) == expected


def test_render_result_cuts_a_single_huge_row_but_shows_it():
    text = prompts.render_result(_result(["s"], [("x" * 10_000,)]), 50, 200)
    lines = text.split("\n")
    assert lines[0] == "s" and lines[1].endswith("\u2026") and len(text) < 300
    assert lines[-1] == "(1 row)"


def _render_row_by_row(result, max_rows, max_chars):
    """render_result as it was before its all-text fast path: every row through _row_cells."""
    if not result.ok:
        return prompts.error(result.error or "the statement failed.")
    header = " | ".join(result.columns) if result.columns else "(no columns)"
    total, lines, used, shown = len(result.rows), [header], len(header), 0
    for row in result.rows[:max_rows]:
        line = " | ".join(prompts._row_cells(row))
        if used + 1 + len(line) > max_chars:
            if shown == 0:
                lines.append(line[: max(max_chars - used - 1, 20)] + "\u2026")
                shown = 1
            break
        lines.append(line)
        used += 1 + len(line)
        shown += 1
    hidden = total - shown
    if result.truncated:
        lines.append(f"\u2026 {hidden + 1}+ more rows (more than {total} rows in total)")
    elif hidden > 0:
        lines.append(f"\u2026 {hidden} more rows ({total} rows in total)")
    else:
        lines.append(f"({total} row{'s' if total != 1 else ''})")
    return "\n".join(lines)


_TEXT = st.text(st.sampled_from("ab |\n\r\u2026\x85\u2028"), max_size=6)
_CELL = _TEXT | _TEXT | st.integers(-5, 5) | st.none() | st.floats(allow_nan=False) | st.binary(max_size=3) | st.booleans()


@settings(max_examples=600, deadline=None)
@given(st.tuples(st.integers(0, 3), st.sampled_from([_TEXT, _CELL])).flatmap(  # all text, or anything
           lambda shape: st.lists(st.tuples(*[shape[1]] * shape[0]), max_size=8)),
       st.integers(-1, 9), st.integers(1, 60), st.booleans())
def test_render_result_is_the_row_by_row_rendering(rows, max_rows, max_chars, truncated):
    """The fast paths (one C join for all-text rows; a result of one row or none) render exactly what
    rendering row by row does: text with line breaks, non-text cells anywhere, rows cut by max_rows or
    max_chars, zero columns."""
    result = _result([f"c{i}" for i in range(len(rows[0]) if rows else 1)], rows, truncated=truncated)
    assert prompts.render_result(result, max_rows, max_chars) == _render_row_by_row(result, max_rows, max_chars)


def test_render_table_info():
    info = TableInfo(
        name="singer_in_concert",
        columns=(ColumnInfo("concert_id", "INTEGER", True), ColumnInfo("singer_id", "", True),
                 ColumnInfo("note", "TEXT", False)),
        foreign_keys=(ForeignKey("concert_id", "concert", "concert_id"), ForeignKey("singer_id", "singer", "singer_id")),
        row_count=1,
    )
    assert prompts.render_table_info(info) == (
        "Table singer_in_concert (1 row)\nColumns:\n  concert_id INTEGER PRIMARY KEY\n"
        "  singer_id (no type) PRIMARY KEY\n  note TEXT\nForeign keys:\n"
        "  concert_id -> concert.concert_id\n  singer_id -> singer.singer_id"
    )
    bare = TableInfo(name="t", columns=(ColumnInfo("x", "INT", False),), foreign_keys=(), row_count=0)
    assert prompts.render_table_info(bare) == "Table t (0 rows)\nColumns:\n  x INT"


def test_assistant_tool_calls_use_json_string_arguments():
    msg = prompts.assistant_tool_calls([("query", {"sql": "SELECT 'é'"}), ("describe", {"table_name": "t"})])
    assert msg["role"] == "assistant" and msg["content"] == ""
    calls = msg["tool_calls"]
    assert [c["type"] for c in calls] == ["function", "function"]
    assert calls[0]["function"] == {"name": "query", "arguments": '{"sql": "SELECT \'é\'"}'}
    assert json.loads(calls[1]["function"]["arguments"]) == {"table_name": "t"}
    assert prompts.assistant_tool_calls([("answer", '{"value": ')])["tool_calls"][0]["function"]["arguments"] == (
        '{"value": '
    )
    assert prompts.tool_message("query", "n\n3") == {"role": "tool", "name": "query", "content": "n\n3"}
    assert prompts.error("x") == "Error: x"


def test_messages_for_template_decodes_arguments_without_touching_input():
    stored = [prompts.assistant_tool_calls([("query", {"sql": "SELECT 1"}), ("answer", "{not json")])]
    decoded = prompts.messages_for_template(stored)
    assert decoded[0]["tool_calls"][0]["function"]["arguments"] == {"sql": "SELECT 1"}
    assert decoded[0]["tool_calls"][1]["function"]["arguments"] == "{not json"  # left visible
    assert isinstance(stored[0]["tool_calls"][0]["function"]["arguments"], str)


def test_qwen_template_renders_tool_calls_as_the_model_emits_them():
    # The model emits `"arguments": {...}`; rendering stored JSON strings directly would quote them.
    messages = [
        *prompts.initial_messages(Q, prompts.tables_observation(["singer"])),
        prompts.assistant_tool_calls([("query", {"sql": "SELECT count(*) FROM singer"})]),
        prompts.tool_message("query", "count(*)\n5\n(1 row)"),
        prompts.final_message(),
    ]
    raw, _ = render_jinja_template([messages], chat_template=QWEN_TEMPLATE)
    good, _ = render_jinja_template([prompts.messages_for_template(messages)], chat_template=QWEN_TEMPLATE)
    call = '<tool_call>\n{"name": "query", "arguments": {"sql": "SELECT count(*) FROM singer"}}\n</tool_call>'
    assert call in good[0] and call not in raw[0]
    assert "<|im_start|>user\n<tool_response>\ncount(*)\n5\n(1 row)\n</tool_response><|im_end|>" in good[0]
    assert good[0].endswith(f"<|im_start|>assistant\n{prompts.FINAL_REPLY}<|im_end|>\n")
