#!/bin/bash
# GRPO phase 1 then phase 2 with grpo.oversample: 3, from the reference run's models/sft and data/ (../make_run_46/),
# in a worktree of the commit that has the knob. Usage: run.sh <rev> <workdir> <reference workspace>
set -euo pipefail
rev=$1 work=$2 ref=$3
rm -rf "$work" && mkdir -p "$work"
git -C /work/main worktree add -f "$work/main" "$rev"
cd "$work/main"
ln -s /work/main/.venv .venv && ln -s /work/shared ../shared
cp -r "$ref/data" data && mkdir -p models && cp -r "$ref/models/sft" models/sft && cp -r "$ref/models/base" models/base
python - <<'PY'
import yaml
p = yaml.safe_load(open("params.yaml"))
p["grpo"]["oversample"] = 3
yaml.safe_dump(p, open("params.yaml", "w"), sort_keys=False)
PY
export PATH=/work/main/.venv/bin:$PATH PYTHONPATH=$PWD MLFLOW_TRACKING_URI=sqlite:///$PWD/mlflow.db
lscpu > "$work/lscpu.txt"
for phase in 1 2; do
  echo "phase $phase start $(date -u +%FT%TZ)"
  /usr/bin/time -v -o "$work/phase$phase.time" python -m stages.grpo --phase $phase > "$work/phase$phase.log" 2> "$work/phase$phase.err"
  cp reports/grpo_phase$phase/metrics.json "$work/grpo_phase${phase}_metrics.json"
  cp reports/grpo_phase$phase/curve.csv "$work/grpo_phase${phase}_curve.csv"
  echo "phase $phase end $(date -u +%FT%TZ)"
done
