"""run.json of dynamic_sampling_47 from the stage records in this folder and ../make_run_46/run.json (the baseline).

    python experiments/dynamic_sampling_47/summarise.py
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASELINE = json.loads((HERE.parent / "make_run_46" / "run.json").read_text())["grpo"]


def floats(rows, key):
    return [None if r.get(key) in (None, "") else round(float(r[key]), 4) for r in rows]


def phase(stage: str) -> dict:
    metrics = json.loads((HERE / f"{stage}_metrics.json").read_text())
    rows = list(csv.DictReader((HERE / f"{stage}_curve.csv").open()))
    wall = metrics["wall_time_s"]
    informative = metrics["informative_rollouts"]
    per_min = informative / (wall / 60)
    base = BASELINE[stage]
    played = floats(rows, "sampling/groups_played")
    mixed = floats(rows, "sampling/groups_mixed")
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", (HERE / f"{stage.replace('grpo_', '')}.time").read_text())
    return {
        "steps": metrics["steps"], "wall_s": wall, "seconds_per_step": metrics["seconds_per_step"],
        "rollouts_trained": metrics["rollouts_per_step"] * metrics["steps"], "groups_played": metrics["groups_played"],
        "groups_played_by_step": played, "groups_mixed_by_step": mixed,
        "mixed_share_of_played": round(sum(mixed) / sum(played), 3),
        "mixed_correctness_trained_by_step": floats(rows, "episode/mixed_correctness"),
        "informative_rollouts": informative, "informative_rollouts_per_cpu_minute": round(per_min, 2),
        "baseline_informative_rollouts_per_cpu_minute": base["informative_rollouts_per_cpu_minute"],
        "ratio_to_baseline": round(per_min / base["informative_rollouts_per_cpu_minute"], 2),
        "baseline_seconds_per_step": round(base["wall_s"] / base["steps"], 1),
        "reward_by_step": floats(rows, "reward"), "accuracy_by_step": floats(rows, "episode/accuracy"),
        "distinct_questions": metrics["distinct_questions"], "model_fingerprint": metrics["model_fingerprint"],
        "peak_rss_gb": round(int(peak.group(1)) / 1e6, 2) if peak else None,
        "cpu": metrics["system"].get("cpu_model"), "dtype": metrics["dtype"]["dtype"],
    }


if __name__ == "__main__":
    out = {stage: phase(stage) for stage in ("grpo_phase1", "grpo_phase2") if (HERE / f"{stage}_metrics.json").is_file()}
    (HERE / "run.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
