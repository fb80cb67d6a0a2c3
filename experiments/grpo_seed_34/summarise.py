"""Summarise experiments/grpo_seed_34/ from its raw files (every number read, none typed):
.venv/bin/python experiments/grpo_seed_34/summarise.py > experiments/grpo_seed_34/run.json"""
import csv
import json
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

D = Path(__file__).resolve().parent
sys.path.insert(0, str(D.parents[1]))
from sqlenv.eval.evaluation import paired_comparisons  # noqa: E402  (the report's own pairing: Newcombe interval, exact McNemar)
from sqlenv.eval.stats import wilson_interval  # noqa: E402
from sqlenv.types import HARDNESS_LEVELS  # noqa: E402

SEED0 = D.parent / "eval_memory_33"  # seed 0: the same SFT model and n200, evaluated at 9950594


def j(p):
    return json.loads(Path(p).read_text())


def time_v(p):
    lines = dict(l.strip().rsplit(": ", 1) for l in Path(p).read_text().splitlines() if ": " in l)
    return {"command": lines["Command being timed"].strip('"'), "wall": lines["Elapsed (wall clock) time (h:mm:ss or m:ss)"],
            "max_rss_kib": int(lines["Maximum resident set size (kbytes)"]), "exit_status": int(lines["Exit status"])}


def curve(p):
    rows = list(csv.DictReader(Path(p).open()))
    keep = ("reward", "frac_reward_zero_std", "episode/accuracy", "completions/clipped_ratio", "step_time")
    return {"steps": [{"step": int(r["step"]), **{k: round(float(r[k]), 3) for k in keep}, "questions": r["questions"].split()}
                      for r in rows],
            "mean_frac_reward_zero_std": round(sum(float(r["frac_reward_zero_std"]) for r in rows) / len(rows), 3)}


def training(prefix):
    out = {}
    for stage in ("grpo_phase1", "grpo_phase2"):
        m = j(D / f"{prefix}{stage}_metrics.json")
        c = curve(D / f"{prefix}{stage}_curve.csv")
        out[stage] = {k: m[k] for k in ("steps", "seconds_per_step", "wall_time_s", "distinct_questions", "reward_mean",
                                        "accuracy_mean", "start_fingerprint", "model_fingerprint", "activation_checkpointing")}
        out[stage].update(dtype=m["dtype"]["dtype"], cpu_isa=m["system"]["cpu_isa"], peak_rss_gb=round(m["system"]["peak_rss_mb"] * 2**20 / 1e9, 2),
                          load1_start_end=[round(m["system"]["load1_start"], 2), round(m["system"]["load1_end"], 2)],
                          mean_frac_reward_zero_std=c["mean_frac_reward_zero_std"], curve=c["steps"])
        if not prefix:
            out[stage]["time_v"] = time_v(D / f"{stage}_time_v.txt")
    return out


def describe(eps):
    n, k = len(eps), sum(e["correct"] for e in eps.values())
    low, high = wilson_interval(k, n)
    return {"correct": k, "n": n, "accuracy": round(k / n, 3), "wilson_95": [round(low, 3), round(high, 3)],
            "end_reasons": dict(Counter(e["end_reason"] for e in eps.values())),
            "mean_steps": round(sum(e["steps"] for e in eps.values()) / n, 2),
            "correct_by_hardness": {h: sum(e["correct"] for e in eps.values() if e["hardness"] == h) for h in HARDNESS_LEVELS}}


def paired(a, b, name_a, name_b):
    """b against a on the same questions, through `paired_comparisons` (its row is b first, a second)."""
    records = lambda eps: [SimpleNamespace(question_id=q, correct=e["correct"]) for q, e in eps.items()]  # noqa: E731
    (row,) = paired_comparisons({name_b: records(b), name_a: records(a)})
    return {"n": row["n"], f"{name_b}_minus_{name_a}_points": round(100 * row["difference"], 1),
            "newcombe_95_points": [round(100 * row["difference_low"], 1), round(100 * row["difference_high"], 1)],
            f"only_{name_a}_correct": row["only_b_correct"], f"only_{name_b}_correct": row["only_a_correct"],
            "mcnemar_exact_p": round(row["mcnemar_p"], 4)}


seed1 = training("")
seed0 = training("seed0_")
sft = j(SEED0 / "sft_n200_episodes.json")
g0 = j(SEED0 / "grpo_phase2_n200_episodes.json")
g1 = j(D / "grpo_phase2_n200_episodes.json")
ev = j(D / "grpo_phase2_n200_metrics.json")
questions = {s: {stage: {q for step in run[stage]["curve"] for q in step["questions"]} for stage in run}
             for s, run in (("seed0", seed0), ("seed1", seed1))}
out = {
    "plan": "PLAN.md (written before the results)",
    "date": "2026-12-05",
    "machine": {"lscpu": "AMD EPYC, family 25 model 17, 2 vCPUs (KVM), flags up to avx2/fma (lscpu.txt)", "nproc": 2,
                "memory": "24 GiB", "torch": "2.13.0+cpu",
                "note": "one job at a time; a niced (nice 19) tokenizer-only script, spec_decode_34/accept.py, ran beside the start of grpo_phase1"},
    "where": "python -m stages.<stage> in a scratch clone of 8289ddc with seed: 1, on session 30's data/ and session 31's float32 SFT model",
    "seed1": {**seed1, "grpo_phase2_n200": {"git_commit": ev["git_commit"][:7], "dtype": ev["dtype"]["dtype"], "wall_time_s": ev["wall_time_s"],
                                            "peak_rss_gb": round(ev["system"]["peak_rss_mb"] * 2**20 / 1e9, 2),
                                            "samples_sha256_16": (D / "grpo_phase2_n200_samples.sha256").read_text().strip(),
                                            "time_v": time_v(D / "grpo_phase2_n200_time_v.txt"), **describe(g1)}},
    "seed0": {**seed0, "grpo_phase2_n200": describe(g0)},
    "sft_n200": describe(sft),
    "questions_trained_on": {s: {stage: len(q) for stage, q in v.items()} | {"both_phases": len(v["grpo_phase1"] | v["grpo_phase2"])}
                             for s, v in questions.items()},
    "questions_shared_by_the_seeds": {stage: len(questions["seed0"][stage] & questions["seed1"][stage]) for stage in ("grpo_phase1", "grpo_phase2")},
    "n200": {"seed1_vs_sft": paired(sft, g1, "sft", "seed1"), "seed0_vs_sft": paired(sft, g0, "sft", "seed0"),
             "seed1_vs_seed0": paired(g0, g1, "seed0", "seed1")},
}
print(json.dumps(out, indent=1))
