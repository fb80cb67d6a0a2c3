"""Summarise experiments/sft_n200_repeat_42/ from its raw files (every number read, none typed):
.venv/bin/python experiments/sft_n200_repeat_42/summarise.py > experiments/sft_n200_repeat_42/run.json

Outcomes of the SFT model's n200 evaluation compared episode by episode (the `messages` of each question):
- `reference`: make_run_39's, main's reports/eval/sft_n200/samples.jsonl at REFERENCE (`git show`);
- `make_run_41_forced`: experiments/make_run_41/forced/outputs/.../samples.jsonl.xz;
- `probe_1`: raw/probe_1.txt, the per-episode hashes `play_probe.py` printed (exploratory, before PLAN.md);
- `stage_1`, `stage_2`: raw/stage_<i>/, `dvc repro -f -s evaluate@sft_n200` in make_run_41's clone.
An episode is identified by the first 6 hex digits of sha256(json.dumps(messages, sort_keys=True)), as the
probe printed them. The headline (grpo_phase2 against sft on n200) is recomputed with each outcome's verdicts
and the reference's grpo_phase2 episodes (which make_run_41 reproduced byte for byte), through the report's own
statistics (`sqlenv.eval.stats`: Newcombe's paired interval, exact McNemar)."""
import hashlib
import json
import lzma
import re
import subprocess
import sys
from pathlib import Path

D = Path(__file__).resolve().parent
ROOT = D.parents[1]
sys.path.insert(0, str(ROOT))
from sqlenv.eval.stats import mcnemar_exact, paired_difference  # noqa: E402

REFERENCE = "fdd3cde"  # main when PLAN.md was written: make_run_39's evaluation outputs
SET = "reports/eval/sft_n200/samples.jsonl"


def reference(path):
    return subprocess.run(["git", "-C", str(ROOT), "show", f"{REFERENCE}:{path}"],
                          capture_output=True, text=True, check=True).stdout


def records(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def tag(messages):
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:6]


def outcome(recs):
    return {"tags": [tag(r["messages"]) for r in recs], "correct": [bool(r["correct"]) for r in recs],
            "ids": [r["question_id"] for r in recs]}


def seconds(clock):
    return round(sum(float(x) * 60**i for i, x in enumerate(reversed(clock.split(":")))), 1)


ref = outcome(records(reference(SET)))
ids = ref["ids"]
outcomes = {"reference": ref,
            "make_run_41_forced": outcome(records(lzma.open(D.parent / "make_run_41/forced/outputs" / f"{SET}.xz", "rt").read()))}
probe = (D / "raw/probe_1.txt").read_text().split()
outcomes["probe_1"] = {"tags": probe[4:], "correct_count": int(probe[2]), "ids": ids}
stages = {}
for folder in sorted((D / "raw").glob("stage_*")):
    outcomes[folder.name] = outcome(records(lzma.open(folder / "samples.jsonl.xz", "rt").read()))
    time_v = (folder / "time_v.txt").read_text()
    metrics = json.loads((folder / "metrics.json").read_text())
    stages[folder.name] = {
        "start": (folder / "start.txt").read_text().strip(),
        "wall_s_time_v": seconds(re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", time_v).group(1)),
        "stage_wall_time_s": metrics["wall_time_s"],
        "peak_rss_gb": round(int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", time_v).group(1)) * 1024 / 1e9, 2),
        "heap_trims": metrics["heap"]["trims"],
        "dtype": metrics["dtype"],
        "load1_start_end": [metrics["system"]["load1_start"], metrics["system"]["load1_end"]],
        "model_fingerprint": metrics["model"]["fingerprint"],
    }
for name, o in outcomes.items():
    if o["ids"] != ids:
        raise SystemExit(f"{name}: other questions or order than the reference")

names = list(outcomes)
agreement = {a: {b: sum(x == y for x, y in zip(outcomes[a]["tags"], outcomes[b]["tags"])) for b in names} for a in names}
grpo = {r["question_id"]: bool(r["correct"]) for r in records(reference("reports/eval/grpo_phase2_n200/samples.jsonl"))}
headline = {}
for name, o in outcomes.items():
    if "correct" not in o:
        continue  # the probe kept hashes only
    sft = o["correct"]
    phase2 = [grpo[q] for q in ids]
    only_sft, only_phase2, p = mcnemar_exact(phase2, sft)
    diff = paired_difference(phase2, sft)
    headline[name] = {"sft_correct": sum(sft), "grpo_phase2_correct": sum(phase2),
                      "points": round(100 * diff["difference"], 1),
                      "newcombe_95_points": [round(100 * diff["low"], 1), round(100 * diff["high"], 1)],
                      "only_grpo_phase2_correct": only_phase2, "only_sft_correct": only_sft, "mcnemar_exact_p": round(p, 4)}
print(json.dumps({
    "cpu": next(line.split(":", 1)[1].strip() for line in (D / "lscpu.txt").read_text().splitlines() if line.startswith("Model name")),
    "n": len(ids),
    "correct": {name: (sum(o["correct"]) if "correct" in o else o["correct_count"]) for name, o in outcomes.items()},
    "episodes_equal": agreement,
    "stage_runs": stages,
    "headline_grpo_phase2_vs_sft": headline,
}, indent=1))
