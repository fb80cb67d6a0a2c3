"""What a forward costs by rows and tokens per row, in float32 on this CPU (exploratory).

(a) `linear`: one `F.linear` at the model's shapes by rows M (the weights hot in cache: a lower bound of a real
    forward, where every layer's weights come from memory).
(b) `forward`: one forward of the causal LM (models/sft by default) over R rows of t new tokens each after a
    900-token cache, with an explicit boolean 4D mask (what a verifying forward of prompt-lookup decoding
    would run: t = 1 + the draft length), the best of 3 after a warm-up; once with transformers' `sdpa`
    attention as installed and once with a packed grouped-query variant that folds each key/value head's 7
    query heads into the query length (transformers does this only for t = 1; for t > 1 with a mask it
    copies every key/value head 7 times, `repeat_kv`).

    .venv/bin/python experiments/spec_decode_34/costs.py --model models/sft   # -> costs.json beside it
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from pipeline import machine  # noqa: E402

CACHED = 900


def best_ms(f, reps: int = 3) -> float:
    f()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - start)
    return round(best * 1000, 1)


def linear_costs() -> dict:
    shapes = {"mlp_up": (4864, 896), "mlp_down": (896, 4864), "attn_o": (896, 896), "lm_head": (151936, 896)}
    out = {}
    for name, (n, k) in shapes.items():
        weight = torch.randn(n, k)
        out[name] = {str(m): best_ms(lambda m=m: torch.nn.functional.linear(torch.randn(m, k), weight))
                     for m in (1, 2, 3, 4, 5, 6, 8, 16, 32, 50)}  # fmt: skip
        print(name, out[name], flush=True)
    return out


def packed_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """transformers' `pack_gqa` generalised to t query tokens: [B, H, t, D] -> [B, KV, (H/KV)*t, D]."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups, t = getattr(module, "num_key_value_groups", 1), query.shape[2]
    if groups == 1 or t == 1 or attention_mask is None or attention_mask.dtype != torch.bool:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)  # fmt: skip
    b, h, _, d = query.shape
    q = query.reshape(b, h // groups, groups * t, d)
    mask = attention_mask.expand(b, 1, t, attention_mask.shape[-1]).repeat(1, 1, groups, 1)
    out = torch.nn.functional.scaled_dot_product_attention(q, key, value, attn_mask=mask, dropout_p=dropout, scale=scaling)
    return out.reshape(b, h, t, d).transpose(1, 2).contiguous(), None


def forward_costs(model) -> dict:
    from transformers import DynamicCache

    out = {}
    for rows in (1, 4, 8, 16, 32):
        cache = DynamicCache(config=model.config)
        model.model(input_ids=torch.randint(0, 150000, (rows, CACHED)), past_key_values=cache, use_cache=True)
        for t in (1, 2, 3, 5, 9):
            if rows * t > 160:
                continue
            ids = torch.randint(0, 150000, (rows, t))
            mask = torch.ones(t, CACHED + t, dtype=torch.bool).tril(CACHED)[None, None].expand(rows, 1, t, CACHED + t)
            positions = torch.arange(CACHED, CACHED + t)[None].expand(rows, t)

            def step():
                model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                      use_cache=True, logits_to_keep=t)  # fmt: skip
                cache.crop(-t)

            out[f"{rows}x{t}"] = best_ms(step)
            print(rows, t, out[f"{rows}x{t}"], flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(REPO / "models" / "sft"))
    args = parser.parse_args()
    machine.set_runtime()
    from transformers import AttentionInterface, AutoModelForCausalLM

    result = {"machine": machine.facts(), "torch_threads": torch.get_num_threads(), "cached_tokens": CACHED,
              "linear_ms_by_rows": linear_costs()}  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    with torch.no_grad():
        result["forward_ms_sdpa"] = forward_costs(model)
        AttentionInterface.register("sdpa", packed_sdpa)  # this process only
        result["forward_ms_packed_gqa"] = forward_costs(model)
    (HERE / "costs.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
