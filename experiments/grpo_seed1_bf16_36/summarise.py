"""Summarise experiments/grpo_seed1_bf16_36/ from its raw files (every number read, none typed):
.venv/bin/python experiments/grpo_seed1_bf16_36/summarise.py > experiments/grpo_seed1_bf16_36/run.json

Seed 1 is this run; seed 0 is the reference run (make_run_36), whose files collect.py copied as seed0_*.
The float32 seed 1 of grpo_seed_34 is read from its folder, for the questions drawn."""
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

FP32_SEED1 = D.parent / "grpo_seed_34"
STAGES = ("grpo_phase1", "grpo_phase2")


def j(p):
    return json.loads(Path(p).read_text())


def time_v(p):
    lines = dict(ln.strip().rsplit(": ", 1) for ln in Path(p).read_text().splitlines() if ": " in ln)
    return {"command": lines["Command being timed"].strip('"'), "wall": lines["Elapsed (wall clock) time (h:mm:ss or m:ss)"],
            "max_rss_kib": int(lines["Maximum resident set size (kbytes)"]), "exit_status": int(lines["Exit status"])}


def curve(p):
    rows = list(csv.DictReader(Path(p).open()))
    keep = ("reward", "frac_reward_zero_std", "episode/accuracy", "completions/clipped_ratio", "step_time")
    return {"steps": [{"step": int(r["step"]), **{k: round(float(r[k]), 3) for k in keep}, "questions": r["questions"].split()}
                      for r in rows],
            "mean_frac_reward_zero_std": round(sum(float(r["frac_reward_zero_std"]) for r in rows) / len(rows), 3),
            "mean_episode_accuracy": round(sum(float(r["episode/accuracy"]) for r in rows) / len(rows), 3)}


def training(prefix):
    out = {}
    for stage in STAGES:
        m = j(D / f"{prefix}{stage}_metrics.json")
        c = curve(D / f"{prefix}{stage}_curve.csv")
        out[stage] = {k: m[k] for k in ("steps", "seconds_per_step", "wall_time_s", "distinct_questions", "reward_mean",
                                        "accuracy_mean", "start_fingerprint", "model_fingerprint")}
        out[stage].update(dtype=m["dtype"]["dtype"], cpu_isa=m["system"]["cpu_isa"],
                          peak_rss_gb=round(m["system"]["peak_rss_mb"] * 2**20 / 1e9, 2),
                          load1_start_end=[round(m["system"]["load1_start"], 2), round(m["system"]["load1_end"], 2)],
                          mean_frac_reward_zero_std=c["mean_frac_reward_zero_std"],
                          mean_episode_accuracy=c["mean_episode_accuracy"], curve=c["steps"])
    return out


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
    return {"n": row["n"], f"{name_b}_minus_{name_a}_points": round(100 * row["difference"], 1), "newcombe_95_points": [low, high],
            f"only_{name_a}_correct": row["only_b_correct"], f"only_{name_b}_correct": row["only_a_correct"],
            "mcnemar_exact_p": round(row["mcnemar_p"], 4),
            "reading": "loses points" if high < 0 else "gains points" if low > 0 else "unresolved (interval spans 0)"}


def evaluation(name):
    m = j(D / f"{name}_metrics.json")
    return {"git_commit": m["git_commit"][:7], "model_fingerprint": m["model"]["fingerprint"], "dtype": m["dtype"]["dtype"],
            "wall_time_s": m["wall_time_s"], "peak_rss_gb": round(m["system"]["peak_rss_mb"] * 2**20 / 1e9, 2),
            "samples_sha256_16": (D / f"{name}_samples.sha256").read_text().strip(), **describe(j(D / f"{name}_episodes.json"))}


def questions(run):
    return {stage: [step["questions"] for step in run[stage]["curve"]] for stage in STAGES}


seed1, seed0 = training(""), training("seed0_")
fp32_seed1 = {stage: [r["questions"].split() for r in csv.DictReader((FP32_SEED1 / f"{stage}_curve.csv").open())] for stage in STAGES}
ep = {name: j(D / f"{name}_episodes.json") for name in ("grpo_phase1_n200", "grpo_phase2_n200", "grpo_phase1_n50")}
s0 = {name: j(D / f"seed0_{name}_episodes.json") for name in ("sft_n200", "grpo_phase2_n200", "grpo_phase1_n50", "grpo_phase1_n200")}
log = (D / "dvc_exp_run_log.txt").read_text()
drawn = {s: {stage: {q for step in qs for q in step} for stage, qs in questions(run).items()} for s, run in (("seed0", seed0), ("seed1", seed1))}
out = {
    "plan": "PLAN.md (written before the results)",
    "started_utc": (D / "start.txt").read_text().strip(), "ended_utc": (D / "end.txt").read_text().strip(),
    "machine": {"lscpu": "Intel(R) Xeon(R) Processor, family 6 model 207 (../make_run_36/lscpu.txt)", "nproc": 2,
                "note": "quiet machine, one job at a time"},
    "dvc_exp_run": {"stages_run": re.findall(r"Running stage '([^']+)'", log),
                    "stages_skipped": re.findall(r"Stage '([^']+)' didn't change", log),
                    "time_v": time_v(D / "dvc_exp_run_time_v.txt")},
    "seed1": {**seed1, "grpo_phase1_n50": evaluation("grpo_phase1_n50"), "grpo_phase1_n200": evaluation("grpo_phase1_n200"),
              "grpo_phase2_n200": evaluation("grpo_phase2_n200"), "grpo_phase1_n200_time_v": time_v(D / "grpo_phase1_n200_time_v.txt")},
    "seed0": {**seed0, "grpo_phase1_n50": describe(s0["grpo_phase1_n50"]), "grpo_phase2_n200": describe(s0["grpo_phase2_n200"]),
              "grpo_phase1_n200 (PLAN-2.md)": {**evaluation("seed0_grpo_phase1_n200"),
                                               "time_v": time_v(D / "seed0_grpo_phase1_n200_time_v.txt")}},
    "sft_n200": describe(s0["sft_n200"]),
    "questions": {
        "seed1_draws_as_float32_seed1": {stage: questions(seed1)[stage] == fp32_seed1[stage] for stage in STAGES},
        "distinct": {s: {stage: len(q) for stage, q in v.items()} | {"both_phases": len(v["grpo_phase1"] | v["grpo_phase2"])}
                     for s, v in drawn.items()},
        "shared_by_the_seeds": {stage: len(drawn["seed0"][stage] & drawn["seed1"][stage]) for stage in STAGES},
    },
    "n200": {
        "seed1_phase2_vs_sft": paired(s0["sft_n200"], ep["grpo_phase2_n200"], "sft", "seed1_phase2"),
        "seed1_phase1_vs_sft": paired(s0["sft_n200"], ep["grpo_phase1_n200"], "sft", "seed1_phase1"),
        "seed1_phase2_vs_seed1_phase1": paired(ep["grpo_phase1_n200"], ep["grpo_phase2_n200"], "seed1_phase1", "seed1_phase2"),
        "seed1_phase2_vs_seed0_phase2": paired(s0["grpo_phase2_n200"], ep["grpo_phase2_n200"], "seed0_phase2", "seed1_phase2"),
        "seed0_phase2_vs_sft": paired(s0["sft_n200"], s0["grpo_phase2_n200"], "sft", "seed0_phase2"),
        "seed0_phase1_vs_sft (PLAN-2.md)": paired(s0["sft_n200"], s0["grpo_phase1_n200"], "sft", "seed0_phase1"),
        "seed0_phase2_vs_seed0_phase1 (PLAN-2.md)": paired(s0["grpo_phase1_n200"], s0["grpo_phase2_n200"], "seed0_phase1", "seed0_phase2"),
    },
    "n50": {"seed1_phase1_vs_seed0_phase1": paired(s0["grpo_phase1_n50"], ep["grpo_phase1_n50"], "seed0_phase1", "seed1_phase1")},
}
print(json.dumps(out, indent=1))
