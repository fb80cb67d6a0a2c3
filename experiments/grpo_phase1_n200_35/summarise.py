"""Summarise experiments/grpo_phase1_n200_35/ from its raw files (every number read, none typed):
.venv/bin/python experiments/grpo_phase1_n200_35/summarise.py > experiments/grpo_phase1_n200_35/run.json

sft and grpo_phase2 episodes are the committed ones of the same models on the same n200:
sft and seed 0's grpo_phase2 from eval_memory_33, seed 1's grpo_phase2 from grpo_seed_34."""
import csv
import json
import re
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

D = Path(__file__).resolve().parent
sys.path.insert(0, str(D.parents[1]))
from sqlenv.eval.evaluation import paired_comparisons  # noqa: E402  (the report's own pairing: Newcombe interval, exact McNemar)
from sqlenv.eval.stats import wilson_interval  # noqa: E402
from sqlenv.types import HARDNESS_LEVELS  # noqa: E402

RUNS = D.parent


def j(p):
    return json.loads(Path(p).read_text())


def describe(eps):
    n, k = len(eps), sum(e["correct"] for e in eps.values())
    low, high = wilson_interval(k, n)
    return {"correct": k, "n": n, "accuracy": round(k / n, 3), "wilson_95": [round(low, 3), round(high, 3)],
            "end_reasons": dict(sorted(Counter(e["end_reason"] for e in eps.values()).items())),
            "mean_steps": round(sum(e["steps"] for e in eps.values()) / n, 2),
            "correct_by_hardness": {h: sum(e["correct"] for e in eps.values() if e["hardness"] == h) for h in HARDNESS_LEVELS}}


def paired(a, b, name_a, name_b):
    """b against a on the same questions, through `paired_comparisons` (its row is b first, a second)."""
    records = lambda eps: [SimpleNamespace(question_id=q, correct=e["correct"]) for q, e in eps.items()]  # noqa: E731
    (row,) = paired_comparisons({name_b: records(b), name_a: records(a)})
    low, high = round(100 * row["difference_low"], 1), round(100 * row["difference_high"], 1)
    return {"n": row["n"], "points": round(100 * row["difference"], 1), "newcombe_95_points": [low, high],
            f"only_{name_a}_correct": row["only_b_correct"], f"only_{name_b}_correct": row["only_a_correct"],
            "mcnemar_exact_p": round(row["mcnemar_p"], 4),
            "reading": "loses points" if high < 0 else "gains points" if low > 0 else "unresolved (interval spans 0)"}


def stage_record(seed):
    m = j(D / f"{seed}_grpo_phase1_n200_metrics.json")
    time_v = (D / f"{seed}_grpo_phase1_n200_time_v.txt").read_text()
    field = lambda name: re.search(rf"{re.escape(name)}: (.+)", time_v).group(1).strip()  # noqa: E731
    return {"git_commit": m["git_commit"][:7], "model_fingerprint": m["model"]["fingerprint"], "dtype": m["dtype"]["dtype"],
            "cpu_isa": m["system"]["cpu_isa"], "wall_time_s": m["wall_time_s"],
            "peak_rss_gb": round(m["system"]["peak_rss_mb"] * 2**20 / 1e9, 2),
            "load1_start_end": [round(m["system"]["load1_start"], 2), round(m["system"]["load1_end"], 2)],
            "samples_sha256_16": (D / f"{seed}_grpo_phase1_n200_samples.sha256").read_text().strip(),
            "time_v": {"wall": field("Elapsed (wall clock) time (h:mm:ss or m:ss)"),
                       "max_rss_kib": int(field("Maximum resident set size (kbytes)")), "exit_status": int(field("Exit status"))}}


def curve_means(path):
    """Each training column's mean over the phase's steps (grpo_seed_34's copies of the phases' curve.csv)."""
    rows = list(csv.DictReader(Path(path).open()))
    keep = ("reward", "frac_reward_zero_std", "kl", "grad_norm", "episode/accuracy", "completions/clipped_ratio",
            "completions/mean_length", "episode/turns")
    return {k: round(sum(float(r[k]) for r in rows) / len(rows), 4) for k in keep if all(r[k] for r in rows)}


sft = j(RUNS / "eval_memory_33" / "sft_n200_episodes.json")
phase2 = {"seed0": j(RUNS / "eval_memory_33" / "grpo_phase2_n200_episodes.json"),
          "seed1": j(RUNS / "grpo_seed_34" / "grpo_phase2_n200_episodes.json")}
out = {"plan": "PLAN.md (written before the results)", "date": "2026-12-05",
       "machine": {"lscpu": "AMD EPYC, family 25 model 17, 2 vCPUs (KVM), flags up to avx2/fma (lscpu.txt)", "nproc": 2,
                   "memory": "24 GiB", "torch": "2.13.0+cpu", "note": "quiet machine, one evaluation at a time"},
       "sft_n200": describe(sft)}
for seed in ("seed0", "seed1"):
    phase1 = j(D / f"{seed}_grpo_phase1_n200_episodes.json")
    assert set(phase1) == set(sft) == set(phase2[seed]), "not the same n200"
    out[seed] = {"grpo_phase1_n200": {**stage_record(seed), **describe(phase1)},
                 "grpo_phase2_n200": describe(phase2[seed]),
                 "phase1_vs_sft": paired(sft, phase1, "sft", "grpo_phase1"),
                 "phase2_vs_phase1": paired(phase1, phase2[seed], "grpo_phase1", "grpo_phase2"),
                 "phase2_vs_sft": paired(sft, phase2[seed], "sft", "grpo_phase2"),
                 "training_curve_means": {stage: curve_means(RUNS / "grpo_seed_34" / f"{'seed0_' if seed == 'seed0' else ''}{stage}_curve.csv")
                                          for stage in ("grpo_phase1", "grpo_phase2")}}
print(json.dumps(out, indent=1))
