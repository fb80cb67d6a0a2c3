"""How many tokens a prompt-lookup draft would have given per forward in committed evaluations (exploratory).

For every assistant turn of a samples.jsonl, the turn's tokens are what the policy generated (greedy) after
its context (the conversation rendered as the runner renders it). Prompt-lookup decoding drafts the next k
tokens by finding the last `n` context tokens (n = 3, 2, 1, longest first) earlier in the context and copying
what followed them; a verifying forward over the draft keeps the matching prefix plus one token of its own.
So with greedy decoding the tokens a forward yields are 1 + the draft's matching prefix, and this counts them
exactly from the transcripts, with no model: tokens / forwards is the ceiling of what drafting could save.

    .venv/bin/python experiments/spec_decode_34/accept.py   # -> accept.json beside it
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from transformers import AutoTokenizer  # noqa: E402

from sqlenv.env import prompts  # noqa: E402
from sqlenv.env.environment import EnvConfig  # noqa: E402
from sqlenv.env.trl_adapter import agent_env_class, tool_methods  # noqa: E402

SETS = ("sft_n200", "grpo_phase2_n200", "base_n50", "base_3shot_n50")
DRAFTS = (1, 2, 4, 8)
NGRAM = 3


def draft(context: list[int], k: int) -> list[int]:
    for n in range(NGRAM, 0, -1):
        if len(context) <= n:
            continue
        tail = context[-n:]
        for start in range(len(context) - n - 1, -1, -1):
            if context[start : start + n] == tail:
                return context[start + n : start + n + k]
    return []


def turns(tokenizer, tools, path: Path):
    """(context ids, generated ids) of every assistant turn in a samples.jsonl."""
    newline = tokenizer.encode("\n")[0]
    for line in path.read_text(encoding="utf-8").splitlines():
        messages = json.loads(line)["messages"]
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            render = lambda msgs, gen: tokenizer.apply_chat_template(  # noqa: E731
                prompts.messages_for_template(msgs), tools=tools, add_generation_prompt=gen, tokenize=True,
                return_dict=False)  # fmt: skip
            before, after = render(messages[:i], True), render(messages[: i + 1], False)
            generated = after[len(before) :]
            if generated and generated[-1] == newline:  # the template's newline after <|im_end|>
                generated = generated[:-1]
            yield before, generated


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", default=str(REPO / "models" / "base"), help="a Qwen2.5 model folder")
    parser.add_argument("--eval-dir", default=str(REPO / "reports" / "eval"))
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    tools = tool_methods(agent_env_class(EnvConfig())(config=EnvConfig()))
    out = {"what": "tokens per forward with a prompt-lookup draft of k tokens (n-gram 3..1), counted from the "
                   "greedy transcripts: 1 + the draft's matching prefix per forward", "ngram": NGRAM, "sets": {}}
    for name in SETS:
        path = Path(args.eval_dir) / name / "samples.jsonl"
        pairs = list(turns(tokenizer, tools, path))
        tokens = sum(len(g) for _, g in pairs)
        row = {"source": str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path),
               "turns": len(pairs), "tokens": tokens, "tokens_per_forward": {}}
        for k in DRAFTS:
            forwards = 0
            for context, generated in pairs:
                t = 0
                while t < len(generated):
                    d = draft(context + generated[:t], k)
                    ok = 0
                    while ok < len(d) and t + ok < len(generated) and d[ok] == generated[t + ok]:
                        ok += 1
                    t += ok + 1
                    forwards += 1
            row["tokens_per_forward"][str(k)] = round(tokens / forwards, 3)
        out["sets"][name] = row
        print(name, row, flush=True)
    (HERE / "accept.json").write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
