"""Copy this run's raw files into its folder (run once, after the runs, from the main checkout at ab43183 or later,
whose reports/ still hold the reference run, seed 0): the seed-1 stages' metrics and curves from the reference
run's workspace, `/usr/bin/time -v` from the logs, and from each evaluation's samples.jsonl every episode's outcome
(question id -> correct, end_reason, steps, hardness) and the file's sha256 (first 16 hex digits); the same for
the reference run's sft_n200 and grpo_phase2_n200 (seed 0) and its GRPO curves.
    python3 experiments/grpo_seed1_bf16_36/collect.py [/work/run36] [/tmp]"""
import hashlib
import json
import shutil
import sys
from pathlib import Path

D = Path(__file__).resolve().parent
MAIN = D.parents[1]


def outcomes(evaluation: Path, name: str) -> None:
    samples = (evaluation / "samples.jsonl").read_bytes()
    (D / f"{name}_samples.sha256").write_text(hashlib.sha256(samples).hexdigest()[:16] + "\n")
    episodes = {}
    for line in samples.decode().splitlines():
        r = json.loads(line)
        episodes[r["question_id"]] = {"correct": r["correct"], "end_reason": r["end_reason"], "hardness": r["hardness"],
                                      "steps": r["steps"]}
    (D / f"{name}_episodes.json").write_text(json.dumps(dict(sorted(episodes.items())), indent=0) + "\n")


def main() -> None:
    run = Path(sys.argv[1] if len(sys.argv) > 1 else "/work/run36")
    logs = Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp")
    for stage in ("grpo_phase1", "grpo_phase2"):
        shutil.copy(run / "reports" / stage / "metrics.json", D / f"{stage}_metrics.json")
        shutil.copy(run / "reports" / stage / "curve.csv", D / f"{stage}_curve.csv")
        shutil.copy(MAIN / "reports" / stage / "metrics.json", D / f"seed0_{stage}_metrics.json")
        shutil.copy(MAIN / "reports" / stage / "curve.csv", D / f"seed0_{stage}_curve.csv")
    for name in ("grpo_phase1_n50", "grpo_phase2_n200", "grpo_phase1_n200"):
        shutil.copy(run / "reports" / "eval" / name / "metrics.json", D / f"{name}_metrics.json")
        outcomes(run / "reports" / "eval" / name, name)
    for name in ("sft_n200", "grpo_phase2_n200", "grpo_phase1_n50"):
        outcomes(MAIN / "reports" / "eval" / name, f"seed0_{name}")
    for log, name in (("s36_exp.err", "dvc_exp_run"), ("s36_eval.err", "grpo_phase1_n200")):
        text = (logs / log).read_text(errors="replace")
        (D / f"{name}_time_v.txt").write_text(text[text.rindex("\tCommand being timed"):])
    keep = ("Reproducing", "Stage '", "Running stage", "> python", "Ran experiment", "rc=")  # DVC's lines, not the stages' output
    log = (logs / "s36_exp.log").read_text(errors="replace").splitlines()
    (D / "dvc_exp_run_log.txt").write_text("".join(line + "\n" for line in log if line.startswith(keep)))
    for name in ("s36_start.txt", "s36_end.txt"):
        shutil.copy(logs / name, D / name[4:])


if __name__ == "__main__":
    main()
