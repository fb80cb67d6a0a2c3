"""Copy this run's raw files into its folder (run once, after both evaluations): per seed, the evaluation's
metrics.json, its `/usr/bin/time -v` output, the samples.jsonl's sha256 (first 16 hex digits) and each
episode's outcome (question id -> correct, end_reason, hardness, steps, tokens, answered); and lscpu.
    python3 experiments/grpo_phase1_n200_35/collect.py [/tmp]   (the folder holding p1_<workspace>_time_v.txt)"""
import hashlib
import json
import shutil
import sys
from pathlib import Path

D = Path(__file__).resolve().parent
LOGS = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp")
shutil.copy(LOGS / "p1_lscpu.txt", D / "lscpu.txt")
for seed, workspace in (("seed0", "run30"), ("seed1", "run34")):
    evaluation = Path("/work") / workspace / "reports" / "eval" / "grpo_phase1_n200"
    shutil.copy(evaluation / "metrics.json", D / f"{seed}_grpo_phase1_n200_metrics.json")
    shutil.copy(LOGS / f"p1_{workspace}_time_v.txt", D / f"{seed}_grpo_phase1_n200_time_v.txt")
    samples = (evaluation / "samples.jsonl").read_bytes()
    (D / f"{seed}_grpo_phase1_n200_samples.sha256").write_text(hashlib.sha256(samples).hexdigest()[:16] + "\n")
    episodes = {}
    for line in samples.decode().splitlines():
        r = json.loads(line)
        episodes[r["question_id"]] = {k: r[k] for k in ("correct", "end_reason", "hardness", "steps", "tokens", "answered")}
    (D / f"{seed}_grpo_phase1_n200_episodes.json").write_text(json.dumps(dict(sorted(episodes.items())), indent=0) + "\n")
