"""Drop from the in-domain probe every question the reference run's models trained on, and keep a hardness-stratified
200 of the rest (the n200 draw), rewriting the file in place. Prints what it did as JSON.

    python clean_set.py <reference workspace> data/questions/indomain.jsonl
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from sqlenv.data.questions import load_questions_file
from sqlenv.data.splits import stratified_sample
from sqlenv.train.sft import select_examples

ref, probe_file = Path(sys.argv[1]), Path(sys.argv[2])
records = [json.loads(line) for line in (ref / "data/sft/train.jsonl").read_text().splitlines()]
sft_ids = {r["id"] for r in select_examples(records, 192, 0)}
main = Path("/work/main")
grpo_ids = {q for stage in ("grpo_phase1", "grpo_phase2")
            for row in csv.DictReader((main / "reports" / stage / "curve.csv").open()) for q in (row["questions"] or "").split()}
probe = load_questions_file(probe_file)
clean = [q for q in probe if q.id not in sft_ids | grpo_ids]
chosen = stratified_sample(clean, 200, 0)
probe_file.write_text("".join(json.dumps(q.to_dict()) + "\n" for q in chosen))
print(json.dumps({"probe": len(probe), "sft_ids": len(sft_ids), "grpo_ids": len(grpo_ids),
                  "trained_on_in_probe": len(probe) - len(clean), "clean": len(clean), "chosen": len(chosen),
                  "chosen_by_hardness": {h: sum(q.hardness == h for q in chosen) for h in ("easy", "medium", "hard", "extra")}}))
