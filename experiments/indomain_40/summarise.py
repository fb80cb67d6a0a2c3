"""indomain_40: run.json from the evaluations in eval/ and raw/ (PLAN.md), beside indomain_37's make_run_36 numbers.

    .venv/bin/python experiments/indomain_40/summarise.py   # writes experiments/indomain_40/run.json

Paired tests are the report's own (`sqlenv.eval.evaluation.paired_comparisons`: Newcombe's interval, exact
McNemar), every difference GRPO − SFT in points.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from sqlenv.eval.evaluation import paired_comparisons  # noqa: E402
from sqlenv.eval.stats import wilson_interval  # noqa: E402
from sqlenv.types import EpisodeRecord  # noqa: E402

POLICIES = ("sft", "grpo_phase1", "grpo_phase2")
SETS = {"set1": "ids.json", "set2": "ids_2.json"}
INDOMAIN_37 = REPO / "experiments" / "indomain_37"
FINGERPRINTS = {"sft": "e8b06319b803", "grpo_phase1": "df891c2e2429", "grpo_phase2": "d9c91faac3ae"}  # make_run_39


def _records(folder: Path) -> list[EpisodeRecord]:
    return [EpisodeRecord.from_dict(json.loads(line)) for line in (folder / "samples.jsonl").read_text().splitlines()]


def _accuracy(records: list[EpisodeRecord]) -> dict:
    k, n = sum(r.correct for r in records), len(records)
    low, high = wilson_interval(k, n)
    answered = sum(r.answered for r in records)
    ends: dict[str, int] = {}
    for r in records:
        ends[r.end_reason] = ends.get(r.end_reason, 0) + 1
    return {"n": n, "correct": k, "accuracy": round(k / n, 4), "wilson_95": [round(low, 3), round(high, 3)],
            "answered_rate": round(answered / n, 3), "right_of_answered": round(k / answered, 3) if answered else None,
            "end_reasons": dict(sorted(ends.items()))}  # fmt: skip


def _pair(sft: list[EpisodeRecord], grpo: list[EpisodeRecord], name: str) -> dict:
    (row,) = paired_comparisons({name: grpo, "sft": sft})  # a = the GRPO model: difference = GRPO − SFT
    return {
        "n": row["n"],
        "grpo_minus_sft_points": round(100 * row["difference"], 1),
        "newcombe_95_points": [round(100 * row["difference_low"], 1), round(100 * row["difference_high"], 1)],
        "only_grpo_correct": row["only_a_correct"], "only_sft_correct": row["only_b_correct"],
        "mcnemar_exact_p": round(row["mcnemar_p"], 4),
    }  # fmt: skip


def _time_v(path: Path) -> dict:
    text = path.read_text()
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text).group(1)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    return {"wall_s": round(sum(float(p) * 60**i for i, p in enumerate(reversed(wall.split(":")))), 1),
            "max_rss_gb": round(rss * 1024 / 1e9, 2)}  # fmt: skip


def main() -> None:
    records: dict[str, dict[str, list[EpisodeRecord]]] = {}
    out: dict = {"purpose": "make_run_39's GRPO against its SFT on indomain_37's two training-domain draws (PLAN.md)",
                 "cpu": [line.strip() for line in (HERE / "lscpu.txt").read_text().splitlines()
                         if line.startswith(("Model name", "CPU family", "Model:", "CPU(s):"))]}  # fmt: skip
    for s, ids_file in SETS.items():
        ids = sorted(json.loads((INDOMAIN_37 / ids_file).read_text())["ids"])
        records[s] = {}
        for p in POLICIES:
            folder = HERE / "eval" / f"{s}_{p}"
            got = _records(folder)
            if sorted(r.question_id for r in got) != ids:
                raise SystemExit(f"{s} {p}: not the questions of {ids_file}")
            fingerprint = json.loads((folder / "metrics.json").read_text())["model"]["fingerprint"]
            if fingerprint != FINGERPRINTS[p]:
                raise SystemExit(f"{s} {p}: model {fingerprint}, not make_run_39's {FINGERPRINTS[p]}")
            records[s][p] = sorted(got, key=lambda r: r.question_id)
    pooled = {p: records["set1"][p] + records["set2"][p] for p in POLICIES}
    out["fingerprints"] = FINGERPRINTS
    out["accuracy"] = {s: {p: _accuracy(records[s][p]) for p in POLICIES} for s in SETS}
    out["accuracy"]["pooled_400"] = {p: _accuracy(pooled[p]) for p in POLICIES}
    out["pairs"] = {s: {p: _pair(records[s]["sft"], records[s][p], p) for p in POLICIES[1:]} for s in SETS}
    out["pairs"]["pooled_400"] = {p: _pair(pooled["sft"], pooled[p], p) for p in POLICIES[1:]}
    (p2_vs_p1,) = paired_comparisons({"grpo_phase2": pooled["grpo_phase2"], "grpo_phase1": pooled["grpo_phase1"]})
    out["pooled_400_phase2_minus_phase1"] = {"points": round(100 * p2_vs_p1["difference"], 1),
                                             "discordant": [p2_vs_p1["only_a_correct"], p2_vs_p1["only_b_correct"]],
                                             "mcnemar_exact_p": round(p2_vs_p1["mcnemar_p"], 4)}  # fmt: skip

    # The two planned tests, Holm over both: T1 phase 2 − SFT, T2 phase 1 − SFT, pooled over 400.
    tests = {"T1_grpo_phase2_minus_sft": out["pairs"]["pooled_400"]["grpo_phase2"],
             "T2_grpo_phase1_minus_sft": out["pairs"]["pooled_400"]["grpo_phase1"]}  # fmt: skip
    ordered = sorted(tests, key=lambda t: tests[t]["mcnemar_exact_p"])
    holm, running = {}, 0.0
    for i, t in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - i) * tests[t]["mcnemar_exact_p"]))
        holm[t] = round(running, 4)
    out["planned_tests"] = {t: {**tests[t], "holm_p": holm[t]} for t in tests}

    # make_run_36's models on the same sets (indomain_37), for comparison.
    before = json.loads((INDOMAIN_37 / "run.json").read_text())
    p3, p4 = before["part3_second_draw"], before["part4_second_draw"]
    out["make_run_36_same_sets"] = {
        "sft_correct": {"set1": before["indomain200"]["sft"]["correct"], "set2": p3["summaries"]["sft"]["correct"]},
        "grpo_phase1_correct": {"set1": before["indomain200"]["grpo_phase1"]["correct"],
                                "set2": p3["summaries"]["grpo_phase1"]["correct"]},
        "grpo_phase2_correct": {"set1": before["indomain200"]["grpo_phase2"]["correct"], "set2": p4["correct"]["grpo_phase2"]},
        "pooled_sft_vs_grpo_phase1": p3["pooled_400_sft_vs_grpo_phase1"],
        "pooled_sft_vs_grpo_phase2": p4["pooled_sft_vs_grpo_phase2"],
        "note": "indomain_37's pairs have a = sft: their `points` are SFT − GRPO",
    }  # fmt: skip
    # make_run_39's held-out n200 (committed), the same SFT and phase 2 models.
    heldout = {p: _records(REPO / "reports" / "eval" / f"{p}_n200") for p in ("sft", "grpo_phase2")}
    out["heldout_n200_grpo_phase2_minus_sft"] = _pair(heldout["sft"], heldout["grpo_phase2"], "grpo_phase2")

    acc, t = out["accuracy"]["pooled_400"], out["planned_tests"]
    t1, t2 = t["T1_grpo_phase2_minus_sft"], t["T2_grpo_phase1_minus_sft"]
    out["predictions_held"] = {
        "1_sft_pooled_43_to_55_percent": 0.43 <= acc["sft"]["accuracy"] <= 0.55,
        "2_T2_phase1_ahead_by_0_to_9_points": 0.0 <= t2["grpo_minus_sft_points"] <= 9.0,
        "3_T1_phase2_within_minus2_to_plus6_and_p_over_0_01":
            -2.0 <= t1["grpo_minus_sft_points"] <= 6.0 and t1["mcnemar_exact_p"] > 0.01,
        "4_both_grpo_answer_more_than_sft":
            min(acc["grpo_phase1"]["answered_rate"], acc["grpo_phase2"]["answered_rate"]) > acc["sft"]["answered_rate"],
    }  # fmt: skip
    out["timing"] = {
        f"{s}_{p}": {**_time_v(HERE / "raw" / f"{s}_{p}.time"),
                     "load1_start_end": [float((HERE / "raw" / f"{s}_{p}.load_{w}").read_text().split()[0]) for w in ("start", "end")]}
        for s in SETS for p in POLICIES
    }  # fmt: skip
    (HERE / "run.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: out[k] for k in ("planned_tests", "predictions_held")}, indent=1))


if __name__ == "__main__":
    main()
