"""Records and run.json of beta_sweep_47: the beta0 experiment's changed results against the reference run's.

    python experiments/beta_sweep_47/summarise.py /tmp/refrun/main     # the workspace the experiment ran in

Copies the experiment's GRPO metrics/curves and per-episode verdicts (episodes.json; samples.jsonl by sha256) here,
and pairs them (Newcombe interval, exact McNemar) with the reference run's committed results (reports/ at the
repository root) and with sft (unchanged, cached by DVC).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from sqlenv.eval.evaluation import paired_comparisons  # noqa: E402
from sqlenv.types import EpisodeRecord  # noqa: E402

RESULTS = {"heldout_n200": "eval/{p}_n200", "heldout_n50": "eval/{p}_n50", "transfer": "transfer/{p}"}


def records(path: Path) -> list[EpisodeRecord]:
    return [EpisodeRecord.from_dict(json.loads(line)) for line in path.read_text().splitlines()]


def keep(run: Path, rel: str, name: str) -> list[EpisodeRecord]:
    folder = run / "reports" / rel
    shutil.copy(folder / "metrics.json", HERE / f"{name}_metrics.json")
    samples = folder / "samples.jsonl"
    (HERE / f"{name}_samples.sha256").write_text(hashlib.sha256(samples.read_bytes()).hexdigest() + "\n")
    recs = records(samples)
    episodes = {r.question_id: {"correct": r.correct, "end_reason": r.end_reason, "hardness": r.hardness, "steps": r.steps}
                for r in recs}  # fmt: skip
    (HERE / f"{name}_episodes.json").write_text(json.dumps(dict(sorted(episodes.items())), indent=0) + "\n")
    return recs


def pair(a: list[EpisodeRecord], b: list[EpisodeRecord]) -> dict:
    (row,) = paired_comparisons({"a": a, "b": b})
    return {"a_correct": sum(r.correct for r in a), "b_correct": sum(r.correct for r in b), "n": row["n"],
            "difference_points": round(100 * row["difference"], 1),
            "interval_points": [round(100 * row["difference_low"], 1), round(100 * row["difference_high"], 1)],
            "a_only": row["only_a_correct"], "b_only": row["only_b_correct"], "mcnemar_p": round(row["mcnemar_p"], 4)}  # fmt: skip


def main() -> None:
    run = Path(sys.argv[1])
    for stage in ("grpo_phase1", "grpo_phase2"):
        shutil.copy(run / "reports" / stage / "metrics.json", HERE / f"beta0_{stage}_metrics.json")
        shutil.copy(run / "reports" / stage / "curve.csv", HERE / f"beta0_{stage}_curve.csv")
    out: dict = {"grpo": {}, "pairs": {}}
    for stage in ("grpo_phase1", "grpo_phase2"):
        m = json.loads((HERE / f"beta0_{stage}_metrics.json").read_text())
        ref = json.loads((ROOT / "reports" / stage / "metrics.json").read_text())
        out["grpo"][stage] = {k: {"beta0": m.get(k), "reference": ref.get(k)} for k in
                              ("wall_time_s", "seconds_per_step", "reward_mean", "accuracy_mean", "model_fingerprint")}  # fmt: skip
    beta0_p1_n50 = keep(run, "eval/grpo_phase1_n50", "beta0_grpo_phase1_n50")
    out["pairs"]["grpo_phase1_n50: beta0 - reference"] = pair(beta0_p1_n50, records(ROOT / "reports/eval/grpo_phase1_n50/samples.jsonl"))
    for name, rel in (("heldout_n200", "eval/grpo_phase2_n200"), ("transfer", "transfer/grpo_phase2")):
        ours = keep(run, rel, f"beta0_{rel.replace('/', '_')}")
        ref = records(ROOT / "reports" / rel / "samples.jsonl")
        sft = records(ROOT / "reports" / rel.replace("grpo_phase2", "sft") / "samples.jsonl")
        out["pairs"][f"{name} grpo_phase2: beta0 - reference"] = pair(ours, ref)
        out["pairs"][f"{name} grpo_phase2 - sft: beta0"] = pair(ours, sft)
        out["pairs"][f"{name} grpo_phase2 - sft: reference"] = pair(ref, sft)
    (HERE / "run.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
