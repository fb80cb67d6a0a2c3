"""Copy this run's raw files into its folder (run once, after the runs): the stages' metrics and curves from the
scratch clone, `/usr/bin/time -v` from the stage logs, and from the evaluation's samples.jsonl each episode's
outcome (question id -> correct, end_reason, steps, hardness) and the file's sha256 (first 16 hex digits).
Seed 0's curves (the float32 chain of eval_memory_33: phase 1 from session 31, phase 2 from session 32) come
from session 30's workspace /work/run30, beside them.
    python3 experiments/grpo_seed_34/collect.py [/work/run34] [/tmp/r34] [/work/run30]"""
import hashlib
import json
import shutil
import sys
from pathlib import Path

D = Path(__file__).resolve().parent
RUN = Path(sys.argv[1] if len(sys.argv) > 1 else "/work/run34")
LOGS = Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/r34")
SEED0 = Path(sys.argv[3] if len(sys.argv) > 3 else "/work/run30")
for stage in ("grpo_phase1", "grpo_phase2"):
    shutil.copy(SEED0 / "reports" / stage / "metrics.json", D / f"seed0_{stage}_metrics.json")
    shutil.copy(SEED0 / "reports" / stage / "curve.csv", D / f"seed0_{stage}_curve.csv")
    shutil.copy(RUN / "reports" / stage / "metrics.json", D / f"{stage}_metrics.json")
    shutil.copy(RUN / "reports" / stage / "curve.csv", D / f"{stage}_curve.csv")
for log, name in (("grpo_phase1", "grpo_phase1"), ("grpo_phase2", "grpo_phase2"), ("eval", "grpo_phase2_n200")):
    text = (LOGS / f"{log}.err").read_text(errors="replace")
    (D / f"{name}_time_v.txt").write_text(text[text.rindex("\tCommand being timed") :])
evaluation = RUN / "reports" / "eval" / "grpo_phase2_n200"
shutil.copy(evaluation / "metrics.json", D / "grpo_phase2_n200_metrics.json")
samples = (evaluation / "samples.jsonl").read_bytes()
(D / "grpo_phase2_n200_samples.sha256").write_text(hashlib.sha256(samples).hexdigest()[:16] + "\n")
episodes = {}
for line in samples.decode().splitlines():
    r = json.loads(line)
    episodes[r["question_id"]] = {"correct": r["correct"], "end_reason": r["end_reason"], "hardness": r["hardness"],
                                  "steps": r["steps"]}
(D / "grpo_phase2_n200_episodes.json").write_text(json.dumps(dict(sorted(episodes.items())), indent=0) + "\n")
