"""run.json of indomain_probe_47 from the two evaluations' records (copied here: metrics.json, episodes.json and the
samples' sha256) and clean_set.json.

    python experiments/indomain_probe_47/summarise.py /tmp/ind/main
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from sqlenv.eval.evaluation import paired_comparisons  # noqa: E402
from sqlenv.types import EpisodeRecord  # noqa: E402


def main() -> None:
    run = Path(sys.argv[1])
    recs = {}
    for policy in ("sft", "grpo_phase2"):
        folder = run / "reports/eval" / f"{policy}_indomain"
        shutil.copy(folder / "metrics.json", HERE / f"{policy}_indomain_metrics.json")
        samples = folder / "samples.jsonl"
        (HERE / f"{policy}_indomain_samples.sha256").write_text(hashlib.sha256(samples.read_bytes()).hexdigest() + "\n")
        recs[policy] = [EpisodeRecord.from_dict(json.loads(line)) for line in samples.read_text().splitlines()]
        episodes = {r.question_id: {"correct": r.correct, "end_reason": r.end_reason, "hardness": r.hardness,
                                    "steps": r.steps} for r in recs[policy]}  # fmt: skip
        (HERE / f"{policy}_indomain_episodes.json").write_text(json.dumps(dict(sorted(episodes.items())), indent=0) + "\n")
    (row,) = paired_comparisons({"grpo_phase2": recs["grpo_phase2"], "sft": recs["sft"]})
    out = {"set": json.loads((HERE / "clean_set.json").read_text()),
           "accuracy": {p: json.loads((HERE / f"{p}_indomain_metrics.json").read_text())["metrics"] for p in recs},
           "grpo_phase2_minus_sft": {"n": row["n"], "difference_points": round(100 * row["difference"], 1),
                                     "interval_points": [round(100 * row["difference_low"], 1), round(100 * row["difference_high"], 1)],
                                     "grpo_only": row["only_a_correct"], "sft_only": row["only_b_correct"],
                                     "mcnemar_p": round(row["mcnemar_p"], 4)}}  # fmt: skip
    out["accuracy"] = {p: {k: m[k] for k in ("n", "correct", "accuracy", "accuracy_low", "accuracy_high", "answered_rate")}
                       for p, m in out["accuracy"].items()}  # fmt: skip
    for policy in recs:
        out[f"{policy}_wall_s"] = json.loads((HERE / f"{policy}_indomain_metrics.json").read_text())["wall_time_s"]
    (HERE / "run.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
