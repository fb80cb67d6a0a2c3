"""indomain_37: run.json from the evaluations in eval/, the check in check/, ids.json and raw/ (PLAN.md, PLAN-2.md).

    .venv/bin/python experiments/indomain_37/summarise.py   # writes experiments/indomain_37/run.json

The held-out-domain numbers beside them are the committed reference run's (reports/eval/*_n200); the paired
tests are the report's own (`sqlenv.eval.evaluation.paired_comparisons`).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO))

from sqlenv.eval.evaluation import paired_comparisons  # noqa: E402
from sqlenv.types import EpisodeRecord  # noqa: E402

sys.path.insert(0, str(HERE))  # pick_questions.py beside it, however this file is run
from pick_questions import drawn_questions  # noqa: E402

POLICIES = ("sft", "grpo_phase1", "grpo_phase2")


def _records(folder: Path) -> list[EpisodeRecord]:
    return [EpisodeRecord.from_dict(json.loads(line)) for line in (folder / "samples.jsonl").read_text().splitlines()]


def _summary(metrics: dict) -> dict:
    m = metrics["metrics"]
    return {
        "fingerprint": metrics["model"]["fingerprint"],
        "n": m["n"],
        "correct": m["correct"],
        "accuracy": round(m["accuracy"], 3),
        "wilson_95": [round(m["accuracy_low"], 3), round(m["accuracy_high"], 3)],
        "answered_rate": round(m["answered_rate"], 3),
        "right_of_answered": round(m["correct"] / (m["answered_rate"] * m["n"]), 3) if m["answered_rate"] else None,
        "calls_mean": round(m["steps_mean"], 2),
        "tokens_mean": round(m["tokens_mean"], 1),
        "end_reasons": m["end_reasons"],
        "correct_by_hardness": {k: v["correct"] for k, v in m["by_hardness"].items()},
    }


def _pairs(results: dict[str, list[EpisodeRecord]]) -> list[dict]:
    rows = []
    for row in paired_comparisons(results):
        rows.append({
            "a": row["a"], "b": row["b"], "n": row["n"],
            "points": round(100 * row["difference"], 1),
            "newcombe_95_points": [round(100 * row["difference_low"], 1), round(100 * row["difference_high"], 1)],
            "only_a_correct": row["only_a_correct"], "only_b_correct": row["only_b_correct"],
            "mcnemar_exact_p": round(row["mcnemar_p"], 4),
        })  # fmt: skip
    return rows


def _time_v(path: Path) -> dict:
    text = path.read_text()
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text).group(1)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    return {"wall_s": round(sum(float(p) * 60**i for i, p in enumerate(reversed(wall.split(":")))), 1),
            "max_rss_gb": round(rss * 1024 / 1e9, 2)}  # fmt: skip


SEED1_RUN = REPO / "experiments" / "grpo_seed1_bf16_36"
SEED1_CURVES = [SEED1_RUN / f"grpo_phase{phase}_curve.csv" for phase in (1, 2)]


def seed1(indomain_sft: list[EpisodeRecord], heldout_sft: list[EpisodeRecord]) -> dict:
    """The addendum (PLAN-2.md): the second GRPO seed's phases against SFT, on the training-domain questions seed 1
    did not train on, and on n200 (its verdicts kept by grpo_seed1_bf16_36)."""
    trained = drawn_questions(SEED1_CURVES)
    keep = [r for r in indomain_sft if r.question_id not in trained]
    kept = {r.question_id for r in keep}
    out: dict = {"left_out_trained_by_seed1": len(indomain_sft) - len(keep), "n": len(keep)}
    expected = json.loads((SEED1_RUN / "run.json").read_text())["seed1"]
    predictions = {}
    for phase in ("grpo_phase1", "grpo_phase2"):
        folder = HERE / "eval" / f"seed1_{phase}"
        metrics = json.loads((folder / "metrics.json").read_text())
        if metrics["model"]["fingerprint"] != expected[phase]["model_fingerprint"][:12]:
            raise SystemExit(f"seed1 {phase}: not grpo-seed1-36's model")
        records = [r for r in _records(folder) if r.question_id in kept]
        answered = sum(r.answered for r in records) / len(records)
        heldout_metrics = json.loads((SEED1_RUN / f"{phase}_n200_metrics.json").read_text())
        if heldout_metrics["model"]["fingerprint"] != metrics["model"]["fingerprint"]:
            raise SystemExit(f"seed1 {phase}: the n200 verdicts are another model's")
        verdicts = json.loads((SEED1_RUN / f"{phase}_n200_episodes.json").read_text())
        heldout = [SimpleNamespace(question_id=q, correct=v["correct"]) for q, v in verdicts.items()]
        (indomain_pair,) = _pairs({"sft": keep, phase: records})
        (heldout_pair,) = _pairs({"sft": heldout_sft, phase: heldout})
        out[phase] = {
            "fingerprint": metrics["model"]["fingerprint"],
            "indomain_correct": sum(r.correct for r in records),
            "sft_indomain_correct": sum(r.correct for r in keep),
            "indomain_answered_rate": round(answered, 3),
            "sft_indomain_answered_rate": round(sum(r.answered for r in keep) / len(keep), 3),
            "heldout_answered_rate": round(heldout_metrics["metrics"]["answered_rate"], 3),
            "indomain_vs_sft": indomain_pair,
            "heldout_n200_vs_sft": heldout_pair,
            **_time_v(HERE / "raw" / f"seed1_{phase}.time"),
        }
    p1, p2 = out["grpo_phase1"], out["grpo_phase2"]
    # a = sft in every pair: "points" is SFT minus GRPO, so GRPO's side is its negative.
    predictions["5_phase1_more_favourable_in_domain_than_heldout"] = -p1["indomain_vs_sft"]["points"] > -p1["heldout_n200_vs_sft"]["points"]
    predictions["6_phase1_answers_more_than_sft_in_domain"] = p1["indomain_answered_rate"] > p1["sft_indomain_answered_rate"]
    predictions["7_phase1_not_ahead_with_p_under_0_05"] = not (
        p1["indomain_vs_sft"]["points"] < 0 and p1["indomain_vs_sft"]["mcnemar_exact_p"] < 0.05)
    predictions["8_phase2_within_4_points_p_over_0_05"] = (
        abs(p2["indomain_vs_sft"]["points"]) <= 4.0 and p2["indomain_vs_sft"]["mcnemar_exact_p"] > 0.05)
    out["predictions_held"] = predictions
    return out


def set2(first: dict[str, list[EpisodeRecord]]) -> dict:
    """Part 3 (PLAN-3.md): the reference run's SFT and phase 1 on a second draw of 200 (ids_2.json), and both
    draws pooled."""
    ids = json.loads((HERE / "ids_2.json").read_text())["ids"]
    second = {p: _records(HERE / "eval" / f"set2_{p}") for p in ("sft", "grpo_phase1")}
    for p, records in second.items():
        if sorted(r.question_id for r in records) != sorted(ids):
            raise SystemExit(f"set2 {p}: not the questions of ids_2.json")
    metrics = {p: json.loads((HERE / "eval" / f"set2_{p}" / "metrics.json").read_text()) for p in second}
    if metrics["grpo_phase1"]["model"]["fingerprint"] != first["fingerprints"]["grpo_phase1"]:
        raise SystemExit("set2: not the reference run's phase 1")
    (pair,) = _pairs(second)
    (pooled,) = _pairs({p: first["records"][p] + second[p] for p in second})
    out = {
        "set": {k: v for k, v in json.loads((HERE / "ids_2.json").read_text()).items() if k != "ids"},
        "summaries": {p: _summary(m) for p, m in metrics.items()},
        "sft_vs_grpo_phase1": pair,
        "pooled_400_sft_vs_grpo_phase1": pooled,
        "timing": {p: _time_v(HERE / "raw" / f"set2_{p}.time") for p in second},
    }
    summaries = out["summaries"]
    # a = sft: "points" is SFT minus phase 1.
    out["predictions_held"] = {
        "9_phase1_ahead_on_the_second_set": pair["points"] < 0,
        "10_phase1_answers_more_than_sft": summaries["grpo_phase1"]["answered_rate"] > summaries["sft"]["answered_rate"],
        "11_pooled_phase1_over_3_points_p_under_0_05": pooled["points"] < -3.0 and pooled["mcnemar_exact_p"] < 0.05,
    }
    return out


def part4(part3: dict) -> dict:
    """Part 4 (PLAN-4.md): the reference run's phase 2 and GRPO seed 1's phase 1 on the second draw."""
    ids = set(json.loads((HERE / "ids_2.json").read_text())["ids"])
    sft = [r for r in _records(HERE / "eval" / "set2_sft")]
    phase2 = _records(HERE / "eval" / "set2_grpo_phase2")
    seed1 = _records(HERE / "eval" / "set2_seed1_grpo_phase1")
    for name, records in (("grpo_phase2", phase2), ("seed1_grpo_phase1", seed1)):
        if {r.question_id for r in records} != ids or len(records) != len(ids):
            raise SystemExit(f"set2 {name}: not the questions of ids_2.json")
    expected = json.loads((SEED1_RUN / "run.json").read_text())["seed1"]["grpo_phase1"]["model_fingerprint"][:12]
    fingerprints = {n: json.loads((HERE / "eval" / f"set2_{n}" / "metrics.json").read_text())["model"]["fingerprint"]
                    for n in ("grpo_phase2", "seed1_grpo_phase1")}  # fmt: skip
    if fingerprints["seed1_grpo_phase1"] != expected or fingerprints["grpo_phase2"] != part3["reference_phase2"]:
        raise SystemExit(f"part 4: unexpected models {fingerprints}")
    trained = drawn_questions(SEED1_CURVES)
    keep = {q for q in ids if q not in trained}
    (phase2_pair,) = _pairs({"sft": sft, "grpo_phase2": phase2})
    first, first_ids = part3["first_draw"], set(json.loads((HERE / "ids.json").read_text())["ids"])
    first_keep = {q for q in first_ids if q not in trained}
    seed1_first = [r for r in _records(HERE / "eval" / "seed1_grpo_phase1") if r.question_id in first_keep]
    (phase2_pooled,) = _pairs({"sft": first["sft"] + sft, "grpo_phase2": first["grpo_phase2"] + phase2})
    (seed1_pooled,) = _pairs({
        "sft": [r for r in first["sft"] if r.question_id in first_keep] + [r for r in sft if r.question_id in keep],
        "seed1_grpo_phase1": seed1_first + [r for r in seed1 if r.question_id in keep],
    })
    (seed1_pair,) = _pairs({"sft": [r for r in sft if r.question_id in keep],
                            "seed1_grpo_phase1": [r for r in seed1 if r.question_id in keep]})  # fmt: skip
    counts = {"sft": sum(r.correct for r in sft), "grpo_phase2": sum(r.correct for r in phase2),
              "grpo_phase1": part3["summaries"]["grpo_phase1"]["correct"]}  # fmt: skip
    return {
        "fingerprints": fingerprints,
        "correct": counts,
        "answered_rate": {"grpo_phase2": round(sum(r.answered for r in phase2) / len(phase2), 3),
                          "seed1_grpo_phase1": round(sum(r.answered for r in seed1) / len(seed1), 3)},  # fmt: skip
        "sft_vs_grpo_phase2": phase2_pair,
        "seed1_left_out_trained": len(ids) - len(keep),
        "sft_vs_seed1_grpo_phase1": seed1_pair,
        "pooled_sft_vs_grpo_phase2": phase2_pooled,
        "pooled_sft_vs_seed1_grpo_phase1": seed1_pooled,
        "timing": {n: _time_v(HERE / "raw" / f"set2_{n}.time") for n in ("grpo_phase2", "seed1_grpo_phase1")},
        "predictions_held": {
            "12_phase2_between_sft_and_phase1": counts["sft"] <= counts["grpo_phase2"] <= counts["grpo_phase1"],
            "13_seed1_phase1_within_4_points_p_over_0_05":
                abs(seed1_pair["points"]) <= 4.0 and seed1_pair["mcnemar_exact_p"] > 0.05,
        },
    }


def by_phase1_databases(first: dict[str, list[EpisodeRecord]]) -> dict:
    """Post hoc (not planned): the pooled 400's seed-0 phase 1 − SFT split by whether the question's database is
    one phase 1 drew its 32 training questions from (the curve's `questions` column; ids are <db_id>_q<n>)."""
    drawn = {q.rsplit("_q", 1)[0] for q in drawn_questions([REPO / "reports" / "grpo_phase1" / "curve.csv"])}
    second = {p: _records(HERE / "eval" / f"set2_{p}") for p in ("sft", "grpo_phase1")}
    pooled = {p: first[p] + second[p] for p in ("sft", "grpo_phase1")}
    out = {"phase1_databases": sorted(drawn)}
    for label, keep in (("databases_phase1_drew_from", True), ("other_training_databases", False)):
        part = {p: [r for r in records if (r.question_id.rsplit("_q", 1)[0] in drawn) == keep] for p, records in pooled.items()}
        (out[label],) = _pairs(part)
        out[label]["databases"] = len({r.question_id.rsplit("_q", 1)[0] for r in part["sft"]})
    return out


def main() -> None:
    ids = json.loads((HERE / "ids.json").read_text())["ids"]
    indomain = {p: _records(HERE / "eval" / p) for p in POLICIES}
    for p, records in indomain.items():
        if sorted(r.question_id for r in records) != sorted(ids):
            raise SystemExit(f"{p}: not the questions of ids.json")
    metrics = {p: json.loads((HERE / "eval" / p / "metrics.json").read_text()) for p in POLICIES}
    heldout_folders = {"sft": "sft_n200", "grpo_phase2": "grpo_phase2_n200"}
    heldout = {p: _records(REPO / "reports" / "eval" / f) for p, f in heldout_folders.items()}
    # The same phase-1 model on n200, played in session 36 (grpo_seed1_bf16_36's addendum keeps its verdicts).
    phase1_run = REPO / "experiments" / "grpo_seed1_bf16_36"
    phase1_verdicts = json.loads((phase1_run / "seed0_grpo_phase1_n200_episodes.json").read_text())
    phase1_model = json.loads((phase1_run / "seed0_grpo_phase1_n200_metrics.json").read_text())["model"]["fingerprint"]
    if phase1_model != metrics["grpo_phase1"]["model"]["fingerprint"]:
        raise SystemExit("the n200 phase-1 verdicts are another model's")
    heldout["grpo_phase1"] = [SimpleNamespace(question_id=q, correct=v["correct"]) for q, v in phase1_verdicts.items()]
    heldout_metrics = {p: json.loads((REPO / "reports" / "eval" / f / "metrics.json").read_text()) for p, f in heldout_folders.items()}
    heldout_metrics["grpo_phase1"] = json.loads((phase1_run / "seed0_grpo_phase1_n200_metrics.json").read_text())

    check_new = {r.question_id: r for r in _records(HERE / "check")}
    check_stage = {r.question_id: r for r in _records(REPO / "reports" / "eval" / "grpo_phase1_n50")}
    check = {
        "what": "sqlenv eval of grpo_phase1 on data/questions/n50.jsonl against the committed evaluate@grpo_phase1_n50",
        "same_questions": check_new.keys() == check_stage.keys(),
        "same_verdicts": all(check_new[q].correct == check_stage[q].correct for q in check_stage),
        "same_messages": sum(check_new[q].messages == check_stage[q].messages for q in check_stage),
        "n": len(check_stage),
    }

    summaries = {p: _summary(metrics[p]) for p in POLICIES}
    pairs = _pairs(indomain)
    by_pair = {(r["a"], r["b"]): r for r in pairs}
    sft_vs = {p: by_pair[("sft", p)] for p in ("grpo_phase1", "grpo_phase2")}  # a = sft: points are sft - grpo
    predictions = {
        "1_sft_accuracy_55_to_70": 0.55 <= summaries["sft"]["accuracy"] <= 0.70,
        "2_grpo_phase2_vs_sft_within_4_points_p_over_0_05":
            abs(sft_vs["grpo_phase2"]["points"]) <= 4.0 and sft_vs["grpo_phase2"]["mcnemar_exact_p"] > 0.05,
        "3_grpo_phase1_vs_sft_within_4_points_p_over_0_05":
            abs(sft_vs["grpo_phase1"]["points"]) <= 4.0 and sft_vs["grpo_phase1"]["mcnemar_exact_p"] > 0.05,
        "4_grpo_phase2_answers_more_than_sft": summaries["grpo_phase2"]["answered_rate"] > summaries["sft"]["answered_rate"],
    }  # fmt: skip
    timing = {}
    for p in POLICIES:
        timing[p] = {**_time_v(HERE / "raw" / f"{p}.time"), "wall_in_eval_s": metrics[p]["wall_time_s"],
                     "load1_start_end": [float((HERE / "raw" / f"{p}.load_{w}").read_text().split()[0]) for w in ("start", "end")]}  # fmt: skip
    report = {
        "purpose": "GRPO against SFT on 200 training-domain questions neither trained on (PLAN.md)",
        "cpu": [line.strip() for line in (HERE / "lscpu.txt").read_text().splitlines()
                if line.startswith(("Model name", "CPU family", "Model:", "CPU(s):"))],  # fmt: skip
        "set": {k: v for k, v in json.loads((HERE / "ids.json").read_text()).items() if k != "ids"},
        "check_cli_plays_as_the_stage": check,
        "indomain200": summaries,
        "indomain200_pairs": pairs,
        "heldout_n200": {p: _summary(m) for p, m in heldout_metrics.items()},
        "heldout_n200_pairs": _pairs(heldout),
        "predictions_held": predictions,
        "timing": timing,
        "seed1_addendum": seed1(indomain["sft"], heldout["sft"]),
        "part3_second_draw": set2({"records": indomain, "fingerprints": {p: m["model"]["fingerprint"] for p, m in metrics.items()}}),
    }
    report["post_hoc_by_phase1_databases"] = by_phase1_databases(indomain)
    report["part4_second_draw"] = part4({**report["part3_second_draw"], "first_draw": indomain,
                                         "reference_phase2": summaries["grpo_phase2"]["fingerprint"]})
    (HERE / "run.json").write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
