"""How much of a LoRA phase's learned change survives being merged into bfloat16 weights.

A training stage trains LoRA adapters (peft keeps them in float32) on a bfloat16 model, then merges them
(`sqlenv.train.merge.save_trained`: W += B @ A * scaling, in place, in the model's dtype) and saves the
merged model. Where an element of the update is smaller than half the spacing of bfloat16 numbers around
its weight, the merge rounds it away. This script measures, for a checkpointed adapter and the model it
started from:

- weights: the share of the update's squared norm the bf16 merge keeps (projection of what changed onto
  the update), the relative error of the merged update, the share of elements left exactly unchanged;
  and whether the saved model holds exactly those merged weights;
- behaviour, teacher-forced on `--n` trajectories of `data/sft/train.jsonl`: the mean per-token KL of the
  trained policy (bf16 base + the float32 adapter, unmerged, as it played its rollouts) to the saved
  (merged) model, to the starting model, and to a merge rounded stochastically instead of to nearest
  (each element rounds up with the probability of its remainder: the update kept in expectation), and
  how often their greedy next tokens agree.

Usage (repository root, after a phase whose checkpoint adapter was copied before the stage deleted it):
    python experiments/bf16_merge_46/merge_rounding.py --start models/sft \
        --adapter CKPT/checkpoint-8 --saved models/grpo_phase1 --out experiments/bf16_merge_46/phase1.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import load_file


def stochastic_bf16(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """float32 -> bfloat16, rounded up or down in magnitude with the probability of the dropped bits."""
    bits = x.float().contiguous().view(torch.int32)
    noise = torch.randint(0, 1 << 16, bits.shape, dtype=torch.int32, generator=generator)
    return ((bits + noise) & -65536).view(torch.float32).to(torch.bfloat16)


def lora_updates(adapter_dir: Path) -> dict[str, torch.Tensor]:
    """{weight name: B @ A * scaling} in float32, for every LoRA-adapted linear layer."""
    cfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    scaling = cfg["lora_alpha"] / cfg["r"]
    ad = load_file(str(adapter_dir / "adapter_model.safetensors"))
    out = {}
    for key, a in ad.items():
        if ".lora_A." in key:
            b = ad[key.replace(".lora_A.", ".lora_B.")]
            out[key.replace("base_model.model.", "", 1).split(".lora_A.")[0] + ".weight"] = (b.float() @ a.float()) * scaling
    return out


def weight_stats(start_sd: dict, adapter_dir: Path, saved_sd: dict | None) -> dict:
    tot = {"d2": 0.0, "kept_proj": 0.0, "err2": 0.0, "elems": 0, "unchanged": 0, "modules": 0,
           "saved_mismatch_max": 0.0, "fp32_err2": 0.0}
    per_kind: dict[str, dict] = {}
    gen = torch.Generator().manual_seed(0)
    sr_kept_proj = 0.0
    for name, d in lora_updates(adapter_dir).items():
        w = start_sd[name].float()
        sr_kept_proj += float(((stochastic_bf16(w + d, gen).float() - w) * d).sum())
        merged = (start_sd[name].clone() .float() + d).to(torch.bfloat16).float()  # what peft's in-place bf16 add stores
        kept = merged - w
        d2 = float((d * d).sum())
        kind = name.split(".")[-2]
        k = per_kind.setdefault(kind, {"d2": 0.0, "kept_proj": 0.0})
        k["d2"] += d2
        k["kept_proj"] += float((kept * d).sum())
        tot["d2"] += d2
        tot["kept_proj"] += float((kept * d).sum())
        tot["err2"] += float(((kept - d) ** 2).sum())
        tot["elems"] += d.numel()
        tot["unchanged"] += int((kept == 0).sum())
        tot["modules"] += 1
        tot["fp32_err2"] += float((((w + d) - w) - d).pow(2).sum())
        if saved_sd is not None:
            tot["saved_mismatch_max"] = max(tot["saved_mismatch_max"], float((saved_sd[name].float() - merged).abs().max()))
    return {
        "modules": tot["modules"],
        "update_rms": (tot["d2"] / tot["elems"]) ** 0.5,
        "kept_share_of_update": tot["kept_proj"] / tot["d2"],
        "relative_error_of_merged_update": (tot["err2"] / tot["d2"]) ** 0.5,
        "kept_share_of_update_stochastic_rounding": sr_kept_proj / tot["d2"],
        "relative_error_fp32_merge": (tot["fp32_err2"] / tot["d2"]) ** 0.5,
        "elements_unchanged_share": tot["unchanged"] / tot["elems"],
        "saved_equals_bf16_merge_max_abs_diff": tot["saved_mismatch_max"] if saved_sd is not None else None,
        "kept_share_by_module": {k: v["kept_proj"] / v["d2"] for k, v in sorted(per_kind.items())},
    }


@torch.no_grad()
def behaviour(start: Path, adapter_dir: Path, saved: Path, trajectories: Path, n: int) -> dict:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sqlenv.env import prompts  # records keep arguments as JSON strings; the template wants objects

    tok = AutoTokenizer.from_pretrained(start)
    policy = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(start, torch_dtype=torch.bfloat16), str(adapter_dir))
    merged = AutoModelForCausalLM.from_pretrained(saved, torch_dtype=torch.bfloat16)
    sr = AutoModelForCausalLM.from_pretrained(start, torch_dtype=torch.bfloat16)
    gen = torch.Generator().manual_seed(0)
    sr_sd = sr.state_dict()
    for name, d in lora_updates(adapter_dir).items():
        sr_sd[name].copy_(stochastic_bf16(sr_sd[name].float() + d, gen))
    policy.eval(), merged.eval(), sr.eval()
    records = [json.loads(line) for line in trajectories.read_text().splitlines()[:n]]
    sums = {"kl_policy_sr": 0.0, "agree_policy_sr": 0, "kl_policy_merged": 0.0, "kl_policy_start": 0.0, "kl_merged_start": 0.0,
            "agree_policy_merged": 0, "agree_policy_start": 0, "tokens": 0}
    for r in records:
        ids = tok.apply_chat_template(prompts.messages_for_template(r["messages"]), tools=json.loads(r["tools"]),
                                      tokenize=True, return_tensors="pt")
        if not isinstance(ids, torch.Tensor):
            ids = ids["input_ids"]
        lp = policy(input_ids=ids).logits.float().log_softmax(-1)[0]
        with policy.disable_adapter():
            ls = policy(input_ids=ids).logits.float().log_softmax(-1)[0]
        lm = merged(input_ids=ids).logits.float().log_softmax(-1)[0]
        lr = sr(input_ids=ids).logits.float().log_softmax(-1)[0]

        def kl(p, q):
            return float((p.exp() * (p - q)).sum(-1).sum())

        sums["kl_policy_merged"] += kl(lp, lm)
        sums["kl_policy_start"] += kl(lp, ls)
        sums["kl_merged_start"] += kl(lm, ls)
        sums["kl_policy_sr"] += kl(lp, lr)
        sums["agree_policy_sr"] += int((lp.argmax(-1) == lr.argmax(-1)).sum())
        sums["agree_policy_merged"] += int((lp.argmax(-1) == lm.argmax(-1)).sum())
        sums["agree_policy_start"] += int((lp.argmax(-1) == ls.argmax(-1)).sum())
        sums["tokens"] += ids.shape[1]
    t = sums["tokens"]
    return {"trajectories": len(records), "tokens": t,
            "mean_kl_policy_to_merged": sums["kl_policy_merged"] / t,
            "mean_kl_policy_to_start": sums["kl_policy_start"] / t,
            "mean_kl_merged_to_start": sums["kl_merged_start"] / t,
            "mean_kl_policy_to_stochastic_merge": sums["kl_policy_sr"] / t,
            "greedy_agreement_policy_stochastic_merge": sums["agree_policy_sr"] / t,
            "greedy_agreement_policy_merged": sums["agree_policy_merged"] / t,
            "greedy_agreement_policy_start": sums["agree_policy_start"] / t}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--start", type=Path, required=True)
    p.add_argument("--adapter", type=Path, required=True)
    p.add_argument("--saved", type=Path, default=None)
    p.add_argument("--trajectories", type=Path, default=Path("data/sft/train.jsonl"))
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    start_sd = load_file(str(a.start / "model.safetensors"))
    saved_sd = load_file(str(a.saved / "model.safetensors")) if a.saved else None
    result = {"start": str(a.start), "adapter": str(a.adapter), "saved": str(a.saved),
              "start_dtype": str(next(iter(start_sd.values())).dtype),
              "weights": weight_stats(start_sd, a.adapter, saved_sd)}
    del saved_sd
    if a.saved and a.n:
        result["behaviour"] = behaviour(a.start, a.adapter, a.saved, a.trajectories, a.n)
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
