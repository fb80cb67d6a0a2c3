"""The addendum's raw files (PLAN-2.md): the reference run's own phase 1 (seed 0) on n200, evaluated in /work/run36
after `dvc checkout grpo_phase1` (collect.py's seed-1 files are not touched: the workspace holds seed 0's now).
    python3 experiments/grpo_seed1_bf16_36/collect_2.py [/work/run36] [/tmp]"""
import shutil
import sys
from pathlib import Path

from collect import D, outcomes  # noqa: E402  (importing collect.py copies nothing)

RUN = Path(sys.argv[1] if len(sys.argv) > 1 else "/work/run36")
LOGS = Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp")
evaluation = RUN / "reports" / "eval" / "grpo_phase1_n200"
shutil.copy(evaluation / "metrics.json", D / "seed0_grpo_phase1_n200_metrics.json")
outcomes(evaluation, "seed0_grpo_phase1_n200")
text = (LOGS / "s36b_eval.err").read_text(errors="replace")
(D / "seed0_grpo_phase1_n200_time_v.txt").write_text(text[text.rindex("\tCommand being timed"):])
