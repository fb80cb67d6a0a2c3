"""Reading tool calls out of a completion: TRL's strict parser, and a lenient one for base checkpoints.

- strict: `trl.chat_template_utils.parse_response`, exactly what a GRPO rollout uses. With the Qwen2.5
  template it finds calls only between `<tool_call>` / `</tool_call>` *tokens*.
- lenient: also any JSON object naming a tool and its arguments, `{"name": ..., "arguments": {...}}`,
  found anywhere in the turn's text: in a ```json fence, bare, several per turn, or between the tags
  spelled as plain text. That is how the offline base checkpoint writes calls (its `<tool_call>`
  embedding rows are untrained, so it never emits the tag token; see `sqlenv.models`), so a base policy
  read strictly scores 0 % by construction and measures a tokenizer fact, not SQL skill.

The lenient reading only decides *which calls run*; the episode goes on from the model's raw tokens with
the same environment, tool results and verifier. A lenient call is shaped as TRL's are
(`{"type": "function", "function": {"name", "arguments"}}`), so an unknown tool name or arguments that
do not fit get TRL's and the environment's own error texts. What it does not accept: JSON with syntax
errors (trailing commas, single quotes), other key names, or calls described in prose.
"""

from __future__ import annotations

import json
from typing import Any

PARSERS = ("strict", "lenient")
_DECODER = json.JSONDecoder()


def lenient_tool_calls(text: str) -> list[dict[str, Any]]:
    """Every `{"name": str, "arguments": object | JSON string}` object in `text`, in order, as TRL-shaped calls."""
    calls: list[dict[str, Any]] = []
    at = text.find("{")
    while at != -1:
        try:
            value, end = _DECODER.raw_decode(text, at)
        except json.JSONDecodeError:
            at = text.find("{", at + 1)
            continue
        call = _as_call(value)
        if call is None:  # not a call itself: look inside it (e.g. a call nested in another object)
            at = text.find("{", at + 1)
            continue
        calls.append(call)
        at = text.find("{", end)
    return calls


def _as_call(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or "arguments" not in value:
        return None
    arguments = value["arguments"]
    if isinstance(arguments, str):  # arguments written as a JSON string, as some templates do
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            pass
    return {"type": "function", "function": {"name": value["name"], "arguments": arguments}}


def parse_turn(
    tokenizer: Any, completion: list[int], prefix: list[int], tools: list[Any], parser: str = "strict"
) -> tuple[dict[str, Any], bool, bool]:
    """One completion as an assistant message, and whether the strict / the lenient parser reads a call in it.

    The message is TRL's parse; with `parser="lenient"` and no strict call, it carries the lenient calls.
    Both flags are computed whichever parser plays, so every policy reports both parse rates.
    """
    from trl.chat_template_utils import parse_response

    if parser not in PARSERS:
        raise ValueError(f"unknown tool-call parser {parser!r}; expected one of {PARSERS}")
    if completion:
        message = parse_response(tokenizer, completion, prefix=prefix, tools=tools)
    else:  # TRL does not parse an empty completion: no content, no tool call
        message = {"role": "assistant", "content": ""}
    strict = bool(message.get("tool_calls"))
    lenient = [] if strict else lenient_tool_calls(message.get("content") or "")
    if parser == "lenient" and lenient:
        message = {**message, "tool_calls": lenient}
    return message, strict, strict or bool(lenient)
