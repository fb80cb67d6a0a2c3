"""Tokens as TRL 1.16's `GRPOTrainer` renders an episode: the prompt, the stop ids, the tool-result suffix.

The episode loop (`sqlenv.episode_loop`) builds every rollout's token sequence with these, so a rollout is
token for token what TRL's own `environment_factory` tool loop gives (the parity tests compare):

- prompt: `apply_chat_template([prompt], tools=<the env's bound tool methods>, add_generation_prompt=True,
  chat_template=<TRL's choice>)`, as GRPOTrainer tokenizes a conversational prompt;
- chat template: the tokenizer's own when it is prefix-preserving, else TRL's training template; tool-call
  parsing: `trl.chat_template_utils.add_response_schema` + `parse_response`, TRL's public functions;
- stop tokens: `tokenizer.eos_token_id` plus the model's `generation_config.eos_token_id`;
- tool results: appended by concatenation (`tool_suffix_ids`), never by re-tokenising the conversation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlenv.decode import common_prefix_length
from sqlenv.env.environment import EnvConfig
from sqlenv.env.trl_adapter import agent_env_class, tool_methods


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
