"""The page for people at `/web` (`sqlenv serve --web`): pick a question, call the tools, answer, see the verdict.

A Gradio page mounted by OpenEnv's `create_web_interface_app` (its `gradio_builder` hook). Each browser session
plays its own `SQLServeEnvironment` (made by the server's factory and kept in the session's `gr.State`), so two
people never share an episode. The page shows exactly what a model is shown: the system prompt, the question with
the table names, and every tool result as text; the verdict and reward appear when the episode ends.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import gradio as gr
from openenv.core.env_server.mcp_types import CallToolAction

from sqlenv.serve.environment import SQLServeEnvironment

ARGUMENT = {"describe": "table_name", "sample": "table_name", "query": "sql", "answer": "value"}


def _quote(text: str) -> str:
    return "\n".join("    " + line for line in str(text).splitlines()) or "    "


def _transcript(log: list[str]) -> str:
    return "\n\n".join(log) if log else "_Pick a question and start an episode._"


def build_page(factory: Callable[[], SQLServeEnvironment], web_manager: Any, action_fields: Any, metadata: Any,
               is_chat_env: bool, title: str, quick_start_md: str) -> gr.Blocks:  # fmt: skip
    """The page's blocks (the signature OpenEnv's `gradio_builder` hook calls, with the factory bound first)."""
    probe = factory()
    splits = probe.list_splits()
    probe.close()

    def start(split: str, index: float | None, env: SQLServeEnvironment | None) -> tuple:
        env = env or factory()
        try:
            first = env.reset(split=split, index=None if index is None else int(index))
        except ValueError as exc:
            return env, [], _transcript([f"**Error:** {exc}"]), "", gr.update()
        system, user = first.messages
        log = [f"**System**\n\n{_quote(system['content'])}", f"**Question** `{first.question_id}` "
               f"(database `{first.db_id}`)\n\n{_quote(user['content'])}"]  # fmt: skip
        return env, log, _transcript(log), f"Episode started: question {first.index} of `{split}`.", first.index

    def call(tool: str, argument: str, env: SQLServeEnvironment | None, log: list[str]) -> tuple:
        if env is None or env.state.question_id is None:
            return env, log, _transcript(log), "Start an episode first."
        result = env.step(CallToolAction(tool_name=tool, arguments={ARGUMENT[tool]: argument}))
        log = [*log, f"**{tool}**(`{json.dumps(argument)}`)\n\n{_quote(result.result)}"]
        state = env.state
        if state.done:
            status = (f"**Verdict: {state.verdict}** — reward {state.reward:+.3f} after {state.step_count} calls "
                      f"({', '.join(f'{k} {v:+.3f}' for k, v in state.reward_components.items() if v)}).")  # fmt: skip
        else:
            status = f"{state.step_count} calls so far; reward {state.reward:+.3f}."
        return env, log, _transcript(log), status

    with gr.Blocks(title=title) as page:
        gr.Markdown("# sqlenv\nAnswer a question about a SQLite database: explore it with `describe`, `sample` and "
                    "`query`, then `answer` with the values from a query result. You see what the model sees.")  # fmt: skip
        env_state, log_state = gr.State(None), gr.State([])
        with gr.Row():
            split = gr.Dropdown(splits, value=splits[0], label="question set", elem_id="split")
            index = gr.Number(value=0, precision=0, label="question index", elem_id="index")
            new = gr.Button("Start episode", variant="primary", elem_id="start")
        transcript = gr.Markdown(_transcript([]), elem_id="transcript")
        with gr.Row():
            tool = gr.Radio(list(ARGUMENT), value="describe", label="tool", elem_id="tool")
            argument = gr.Textbox(label="argument (table name, SQL or answer)", elem_id="argument", scale=3)
            send = gr.Button("Call", elem_id="call")
        status = gr.Markdown("", elem_id="status")
        new.click(start, [split, index, env_state], [env_state, log_state, transcript, status, index])
        send.click(call, [tool, argument, env_state, log_state], [env_state, log_state, transcript, status])
        argument.submit(call, [tool, argument, env_state, log_state], [env_state, log_state, transcript, status])
    return page
