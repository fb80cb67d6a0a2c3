#!/usr/bin/env bash
# indomain_40: make_run_39's models on indomain_37's two training-domain draws (PLAN.md). One evaluation at a time.
# Run from the repository root: bash experiments/indomain_40/run.sh
set -euo pipefail
HERE=experiments/indomain_40
WS=/work/run39
export PATH=$PWD/.venv/bin:$PATH
mkdir -p $HERE/raw $HERE/eval
lscpu > $HERE/lscpu.txt
# The sets: regenerated from the run's workspace; their ids must equal indomain_37's (pick_questions writes its
# ids file beside itself, so to a scratch name that is compared and removed).
python experiments/indomain_37/pick_questions.py --workspace $WS --out /tmp/indomain_set1.jsonl --ids-out ids_check_40.json
python experiments/indomain_37/pick_questions.py --workspace $WS --out /tmp/indomain_set2.jsonl \
    --seed 1 --exclude experiments/indomain_37/ids.json --ids-out ids_check_40_2.json
python - <<'PY'
import json
from pathlib import Path
d = Path("experiments/indomain_37")
for new, old in (("ids_check_40.json", "ids.json"), ("ids_check_40_2.json", "ids_2.json")):
    a, b = json.loads((d / new).read_text())["ids"], json.loads((d / old).read_text())["ids"]
    assert a == b, f"{new}: not the ids of {old}"
    (d / new).unlink()
print("sets: the ids of indomain_37")
PY
for set in set1 set2; do
  for policy in sft grpo_phase1 grpo_phase2; do
    name=${set}_${policy}
    cat /proc/loadavg > $HERE/raw/$name.load_start
    /usr/bin/time -v -o $HERE/raw/$name.time sqlenv eval --model $WS/models/$policy --questions /tmp/indomain_$set.jsonl \
        --db-dir $WS/data/databases --name ${policy}_indomain_$set --out $HERE/eval/$name --no-progress > $HERE/raw/$name.log 2>&1
    cat /proc/loadavg > $HERE/raw/$name.load_end
    echo "$name done: $(python -c "import json; m=json.load(open('$HERE/eval/$name/metrics.json'))['metrics']; print(m['correct'], '/', m['n'])")"
  done
done
