"""Print one SFT trajectory as the trainer tokenises it, with the trained (assistant) tokens marked.

    python -m sqlenv.train.inspect_sft [--data data/sft/train.jsonl] [--model models/base] [--index N] [--plain]

The text is rendered through TRL's training chat template (`trl.chat_template_utils.
get_training_chat_template`, what `SFTTrainer(assistant_only_loss=True)` swaps in) with
`return_assistant_tokens_mask=True` and the model folder's recorded chat-template variables (Qwen3's
`enable_thinking`), exactly as `sqlenv.train.sft.tokenize_record` does for training. Tokens
that carry loss are shown inside «…» (green on a terminal); everything else is context the model reads
but is not trained to produce. A footer counts tokens, trained tokens and the template used.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sqlenv.provenance import chat_template_kwargs
from sqlenv.train.sft import tokenize_record, training_chat_template

_GREEN, _RESET = "\033[32m", "\033[0m"


def render_masked(tokenizer, input_ids: list[int], mask: list[int], color: bool = False) -> str:
    """The decoded text with each run of masked (trained) tokens wrapped in «…» (and coloured if asked)."""
    out: list[str] = []
    i = 0
    while i < len(input_ids):
        j = i
        while j < len(input_ids) and mask[j] == mask[i]:
            j += 1
        text = tokenizer.decode(input_ids[i:j], skip_special_tokens=False)
        if mask[i]:
            text = f"{_GREEN}«{text}»{_RESET}" if color else f"«{text}»"
        out.append(text)
        i = j
    return "".join(out)


def read_record(path: Path, index: int) -> dict:
    count = 0
    with path.open(encoding="utf-8") as f:
        for count, line in enumerate(f, 1):
            if count - 1 == index:
                return json.loads(line)
    raise IndexError(f"{path} has no record {index} (it has {count})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sqlenv.train.inspect_sft", description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data/sft/train.jsonl"))
    parser.add_argument("--model", type=Path, default=Path("models/base"), help="model folder (for its tokenizer)")
    parser.add_argument("--index", type=int, default=0, help="record number (0-based line of --data)")
    parser.add_argument("--train-on-mistakes", action="store_true",
                        help="show the teacher's deliberate mistakes as trained (sft.train_on_mistakes: true)")
    parser.add_argument("--plain", action="store_true", help="no terminal colours")
    args = parser.parse_args(argv)

    from transformers import AutoTokenizer

    for path in (args.data, args.model):
        if not path.exists():
            print(f"inspect_sft: error: {path} not found", file=sys.stderr)
            return 1
    try:
        record = read_record(args.data, args.index)
    except IndexError as exc:
        print(f"inspect_sft: error: {exc}", file=sys.stderr)
        return 1
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    template = training_chat_template(tokenizer)
    kwargs = chat_template_kwargs(args.model)
    ids = tokenize_record(tokenizer, record, template, kwargs, train_on_mistakes=args.train_on_mistakes)
    color = not args.plain and sys.stdout.isatty()
    print(render_masked(tokenizer, ids["input_ids"], ids["assistant_masks"], color=color))
    trained = sum(ids["assistant_masks"])
    turns = sum(1 for m in record["messages"] if m["role"] == "assistant")
    from sqlenv.chat_templates import trl_template_name

    variables = "".join(f" {k}={v}" for k, v in sorted(kwargs.items()))  # the template variables, if any
    print(
        f"--- record {args.index}: id={record['id']} kind={record.get('kind')} hardness={record.get('hardness')} | "
        f"{len(ids['input_ids'])} tokens, {trained} trained («…») in {turns} assistant turns | "
        f"template {trl_template_name(template) or 'custom'}{variables}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
