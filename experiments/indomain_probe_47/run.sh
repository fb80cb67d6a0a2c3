#!/bin/bash
# The reference run's sft and grpo_phase2 on the in-domain probe, through the new stages. Usage: run.sh <rev>
set -euo pipefail
rev=$1 W=/tmp/ind REF=/tmp/refrun/main
HERE=/work/main/experiments/indomain_probe_47
rm -rf "$W" && mkdir -p "$W"
git -C /work/main worktree add -f "$W/main" "$rev"
cd "$W/main" && ln -s /work/main/.venv .venv && ln -s /work/shared ../shared
export PATH=/work/main/.venv/bin:$PATH PYTHONPATH=$PWD MLFLOW_TRACKING_URI=sqlite:///$PWD/mlflow.db
lscpu > "$W/lscpu.txt"
# the reference run's models, out of its DVC cache (its workspace last held an experiment's)
(cd "$REF" && git checkout -q 863f47a -- dvc.lock && dvc checkout -q models/sft models/grpo_phase2 models/base)
mkdir -p models && cp -r "$REF/models/sft" "$REF/models/grpo_phase2" "$REF/models/base" models/
python -m stages.prepare > "$W/prepare.log" 2>&1
cp data/questions/indomain.jsonl "$W/indomain_400.jsonl"
python "$HERE/clean_set.py" "$REF" data/questions/indomain.jsonl > "$W/clean_set.json"
for policy in sft grpo_phase2; do
  /usr/bin/time -v -o "$W/$policy.time" python -m stages.evaluate --policy $policy --set indomain --source models/$policy > "$W/$policy.log" 2>&1
done
python -m stages.report > "$W/report.log" 2>&1 || true
echo done
