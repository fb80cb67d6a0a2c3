"""indomain_37: the 200 training-domain questions that neither SFT nor GRPO trained on (ids.json), and their JSONL.

    .venv/bin/python experiments/indomain_37/pick_questions.py --workspace /work/run36 --out /tmp/indomain200.jsonl
    # PLAN-3.md's second set: 200 more, none of the first's
    .venv/bin/python experiments/indomain_37/pick_questions.py --workspace /work/run36 --out /tmp/indomain200b.jsonl \
        --seed 1 --exclude experiments/indomain_37/ids.json --ids-out ids_2.json

`--workspace`: a workspace of the reference run (its data/questions/train.jsonl and data/sft/train.jsonl, as
`prepare` and `sft_data` wrote them). Left out: the 96 trajectories' questions SFT trained on (the `sft` stage's
own choice, `select_examples` at the master seed) and every question the reference run's GRPO phases drew
(the `questions` columns of reports/grpo_phase{1,2}/curve.csv). From the rest, per hardness level as many as
n200 holds (reports/prepare/metrics.json), drawn with random.Random(--seed, default 0) from the ids in sorted
order, leaving out the ids of `--exclude` (an ids.json of an earlier draw). Writes `--ids-out` (default ids.json)
beside this file and the questions, in the prepare format, to `--out`.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from sqlenv.train.sft import select_examples  # noqa: E402


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def drawn_questions(curves: list[Path]) -> set[str]:
    """The question ids GRPO drew: the `questions` column of each step of its phases' curve.csv."""
    drawn: set[str] = set()
    for path in curves:
        with open(path) as f:
            for row in csv.DictReader(f):
                drawn.update(row["questions"].split())
    return drawn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workspace", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--exclude", type=Path, help="an ids.json whose questions are left out too")
    parser.add_argument("--ids-out", default="ids.json")
    args = parser.parse_args()
    train = _jsonl(args.workspace / "data" / "questions" / "train.jsonl")
    sft_records = _jsonl(args.workspace / "data" / "sft" / "train.jsonl")
    sft_chosen = select_examples(sft_records, 96, 0)
    sft_ids = {r["id"] for r in sft_chosen}
    grpo_ids = drawn_questions([REPO / "reports" / f"grpo_phase{phase}" / "curve.csv" for phase in (1, 2)])
    prepared = json.loads((REPO / "reports" / "prepare" / "metrics.json").read_text())
    wanted = prepared["splits"]["n200"]["by_hardness"]
    excluded = set(json.loads(args.exclude.read_text())["ids"]) if args.exclude else set()
    eligible = [q for q in train if q["id"] not in sft_ids | grpo_ids | excluded]
    rng = random.Random(args.seed)
    chosen: list[dict] = []
    for level in sorted(wanted):
        pool = sorted((q for q in eligible if q["hardness"] == level), key=lambda q: q["id"])
        chosen += rng.sample(pool, wanted[level])
    chosen.sort(key=lambda q: q["id"])
    by_level = {level: sum(q["hardness"] == level for q in chosen) for level in sorted(wanted)}
    sft_levels = {level: sum(r["hardness"] == level for r in sft_chosen) for level in sorted(wanted)}
    summary = {
        "train_questions": len(train),
        "left_out_sft": len(sft_ids),
        "sft_by_hardness": sft_levels,  # must equal reports/sft/metrics.json's dataset.by_hardness
        "left_out_grpo": len(grpo_ids),
        "left_out_both": len(sft_ids & grpo_ids),
        "left_out_earlier_draw": len(excluded),
        "seed": args.seed,
        "eligible": len(eligible),
        "chosen_by_hardness": by_level,
        "chosen_databases": len({q["db_id"] for q in chosen}),
        "ids": [q["id"] for q in chosen],
    }
    (HERE / args.ids_out).write_text(json.dumps(summary, indent=1) + "\n")
    args.out.write_text("".join(json.dumps(q, sort_keys=True) + "\n" for q in chosen))


if __name__ == "__main__":
    main()
