"""Summarise experiments/make_run_46/ from its raw files (every number read, none typed):
.venv/bin/python experiments/make_run_46/summarise.py      -> experiments/make_run_46/run.json

Reads this run's outputs from the working tree (reports/**, dvc.lock, as copied from the run's clone), the
`/usr/bin/time -v` tail of its log (time_v.txt) and, for comparison, the committed records of
../sft_signal_45/ (v3: the same SFT settings) and ../exploring_teacher_44/ (the baseline issue 57 measures from).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from sqlenv.report.results import read_records  # noqa: E402

_spec = importlib.util.spec_from_file_location("teacher_44", HERE.parent / "exploring_teacher_44" / "summarise.py")
teacher_44 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(teacher_44)
accuracy, pair, load_gz = teacher_44.accuracy, teacher_44.pair, teacher_44.load
BASELINE = HERE.parent / "exploring_teacher_44" / "baseline"
V3 = HERE.parent / "sft_signal_45" / "v3"


def records(path: Path) -> dict:
    return {r.question_id: r for r in read_records(path)}


def brief(p: dict) -> dict:
    r = p["all"]
    return {"n": r["n"], "points": round(100 * r["difference"], 1),
            "newcombe_95_points": [round(100 * r["difference_low"], 1), round(100 * r["difference_high"], 1)],
            "discordant": [r["only_a_correct"], r["only_b_correct"]], "mcnemar_exact_p": round(r["mcnemar_p"], 4)}


def stage_record(m: dict) -> dict:
    s = m.get("system", {})
    rec = {"wall_s": m.get("wall_time_s"), "peak_rss_gb": round(s.get("peak_rss_mb", 0) * 2**20 / 1e9, 2)}
    if isinstance(m.get("dtype"), dict):
        rec["dtype"] = m["dtype"].get("dtype")
    for k in ("seconds_per_step", "steps", "distinct_questions", "model_fingerprint", "train_loss"):
        if k in m:
            rec[k] = m[k]
    if "metrics" in m:
        rec["correct"], rec["n"] = m["metrics"]["correct"], m["metrics"]["n"]
    if isinstance(m.get("model"), dict):
        rec["model_fingerprint"] = m["model"].get("fingerprint")
    return rec


def metrics_file(stage: str) -> Path:
    if stage.startswith("evaluate@"):
        return ROOT / f"reports/eval/{stage.split('@', 1)[1]}/metrics.json"
    if stage.startswith("transfer@"):
        return ROOT / f"reports/transfer/{stage.split('@', 1)[1]}/metrics.json"
    return ROOT / f"reports/{stage}/metrics.json"


def informative(stage: str) -> dict:
    """Rollouts in groups of mixed correctness, over the phase's wall time (issue 58's rate)."""
    rows = list(csv.DictReader((ROOT / f"reports/{stage}/curve.csv").open()))
    m = json.loads((ROOT / f"reports/{stage}/metrics.json").read_text())
    per_step = m["rollouts_per_step"]
    share = [float(r["episode/informative_rollouts"]) for r in rows]
    mixed = [float(r["episode/mixed_correctness"]) for r in rows]
    count = sum(s * per_step for s in share)
    return {"steps": len(rows), "rollouts": per_step * len(rows), "mixed_correctness_by_step": mixed,
            "mixed_correctness_mean": round(sum(mixed) / len(mixed), 3), "informative_rollouts": round(count),
            "wall_s": m["wall_time_s"], "informative_rollouts_per_cpu_minute": round(count / (m["wall_time_s"] / 60), 2)}


def main() -> None:
    stages = re.findall(r"^  (\S+):$", (ROOT / "dvc.lock").read_text(), flags=re.M)
    out: dict = {"stages": {}}
    for st in stages:
        f = metrics_file(st)
        if f.exists():
            out["stages"][st] = stage_record(json.loads(f.read_text()))
    time_v = (HERE / "time_v.txt").read_text()
    clock = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", time_v).group(1)
    parts = [float(x) for x in clock.split(":")]
    out["dvc_exp_run_wall_s"] = round(sum(x * 60**i for i, x in enumerate(reversed(parts))), 1)
    out["dvc_exp_run_max_rss_gb"] = round(int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", time_v).group(1)) * 1024 / 1e9, 2)
    out["stage_wall_sum_s"] = round(sum(r["wall_s"] or 0 for r in out["stages"].values()), 1)

    t = {p: records(ROOT / f"reports/transfer/{p}/samples.jsonl") for p in ("base_sql", "sft", "grpo_phase2")}
    t["baseline_sft"], t["v3_sft"] = load_gz(BASELINE / "transfer_sft"), load_gz(V3 / "transfer_sft")
    h = {p: records(ROOT / f"reports/eval/{p}_n200/samples.jsonl") for p in ("sft", "grpo_phase2")}
    h["v3_sft_fixed_v1"], h["baseline_sft_fixed_v1"] = load_gz(V3 / "heldout_v1"), load_gz(BASELINE / "heldout_v1")
    out["transfer"] = {k: accuracy(list(v.values())) for k, v in t.items() if k in ("base_sql", "sft", "grpo_phase2")}
    out["heldout_n200"] = {k: accuracy(list(v.values())) for k, v in h.items() if k in ("sft", "grpo_phase2")}
    out["heldout_is_fixed_v1"] = set(h["sft"]) == set(h["v3_sft_fixed_v1"])
    out["transfer_pairs"] = {
        "sft_vs_issue_baseline": brief(pair(t["sft"], t["baseline_sft"], "sft", "baseline")),
        "sft_vs_v3": brief(pair(t["sft"], t["v3_sft"], "sft", "v3")),
        "sft_vs_single_shot": brief(pair(t["sft"], t["base_sql"], "sft", "base_sql")),
        "grpo_phase2_vs_sft": brief(pair(t["grpo_phase2"], t["sft"], "grpo_phase2", "sft")),
        "grpo_phase2_vs_single_shot": brief(pair(t["grpo_phase2"], t["base_sql"], "grpo_phase2", "base_sql")),
    }
    out["transfer_same_episodes_as_v3"] = sum(t["sft"][q].messages == t["v3_sft"][q].messages for q in t["sft"])
    out["heldout_pairs"] = {"grpo_phase2_vs_sft": brief(pair(h["grpo_phase2"], h["sft"], "grpo_phase2", "sft"))}
    if out["heldout_is_fixed_v1"]:
        out["heldout_pairs"]["sft_vs_v3"] = brief(pair(h["sft"], h["v3_sft_fixed_v1"], "sft", "v3"))
        out["heldout_pairs"]["sft_vs_issue_baseline"] = brief(pair(h["sft"], h["baseline_sft_fixed_v1"], "sft", "baseline"))
    out["grpo"] = {s: informative(s) for s in ("grpo_phase1", "grpo_phase2")}
    (HERE / "run.json").write_text(json.dumps(out, indent=1, sort_keys=True, default=str) + "\n")
    print(json.dumps({k: out[k] for k in ("transfer_pairs", "heldout_pairs", "grpo", "dvc_exp_run_wall_s")}, indent=1))


if __name__ == "__main__":
    main()
