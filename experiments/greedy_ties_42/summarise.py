"""Summarise experiments/greedy_ties_42/ from its raw files (every number read, none typed):
python3 experiments/greedy_ties_42/summarise.py > experiments/greedy_ties_42/run.json

raw/ties_at_divergence.txt: per episode, the two transcripts' tokens where they part, their bf16 logits and
their float32 logits from the same hidden state (`ties_at_divergence.py`). raw/{off,on}_b{50,32}.txt: what
`batch_probe.py` printed — mode, batch size, seconds, right answers, a hash of all, then one hash per episode
(the first 100 questions of n200, in order); `off` is 65c13ae's decoding, `on` the change in change.diff."""
import json
import math
from pathlib import Path

D = Path(__file__).resolve().parent


def bf16_step(x):
    return 2.0 ** (math.floor(math.log2(abs(x))) - 7)


ties = []
for line in (D / "raw/ties_at_divergence.txt").read_text().splitlines():
    t = line.split()
    b, f = t.index("bf16"), t.index("fp32")
    ref_b, new_b, ref_f, new_f = float(t[b + 2]), float(t[b + 3]), float(t[f + 2]), float(t[f + 3])
    steps = abs(ref_b - new_b) / bf16_step(max(ref_b, new_b))
    ties.append({"question_id": t[0], "bf16_steps_apart": steps, "fp32_gap": round(abs(ref_f - new_f), 3)})
near = [x for x in ties if x["bf16_steps_apart"] <= 1]
probe = {}
for path in sorted((D / "raw").glob("o*_b*.txt")):
    t = path.read_text().split()
    probe[path.stem] = {"batch_size": int(t[1]), "seconds": int(t[2]), "correct": int(t[3]), "episodes": t[5:]}


def differ(a, b):
    return sum(x != y for x, y in zip(probe[a]["episodes"], probe[b]["episodes"]))


print(json.dumps({
    "cpu": next(line.split(":", 1)[1].strip() for line in (D / "lscpu.txt").read_text().splitlines() if line.startswith("Model name")),
    "divergences_examined": len(ties),
    "at_a_bf16_tie": sum(x["bf16_steps_apart"] == 0 for x in ties),
    "one_bf16_step_apart": sum(x["bf16_steps_apart"] == 1 for x in ties),
    "further_apart": [{k: x[k] for k in ("question_id", "fp32_gap")} for x in ties if x["bf16_steps_apart"] > 1],
    "fp32_gap_range_of_the_near_ones": [min(x["fp32_gap"] for x in near), max(x["fp32_gap"] for x in near)],
    "batch_probe": {name: {k: v for k, v in p.items() if k != "episodes"} | {"n": len(p["episodes"])} for name, p in probe.items()},
    "episodes_differing_between_batch_50_and_32": {"off": differ("off_b50", "off_b32"), "on": differ("on_b50", "on_b32")},
    "episodes_the_change_moved": {"batch_50": differ("off_b50", "on_b50"), "batch_32": differ("off_b32", "on_b32")},
    "wall_on_over_off": {"batch_50": round(probe["on_b50"]["seconds"] / probe["off_b50"]["seconds"], 3),
                         "batch_32": round(probe["on_b32"]["seconds"] / probe["off_b32"]["seconds"], 3)},
}, indent=1))
