"""Summarise experiments/make_run_39/ from its raw files (every number read, none typed):
.venv/bin/python experiments/make_run_39/summarise.py > experiments/make_run_39/run.json

Reads this run's stage outputs from the working tree (reports/**, dvc.lock, as copied from the run's clone; dvc_stages.txt: which stages DVC ran and skipped),
the previous reference run's from git (PREVIOUS, the commit before they were replaced: make_run_38's outputs, and
make_run_36's for the five baseline evaluations make_run_38 reused),
and the `/usr/bin/time -v` log of `make run` kept beside this file (time_v.txt)."""
import functools
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

D = Path(__file__).resolve().parent
ROOT = D.parents[1]
sys.path.insert(0, str(ROOT))
from sqlenv.eval.evaluation import paired_comparisons  # noqa: E402  (the report's own pairing: Newcombe interval, exact McNemar)

PREVIOUS = "adeb430"  # main before this run's outputs were copied in: make_run_38's reference outputs
TRAINING = ("prepare", "prepare_model", "sft_data", "sft", "grpo_phase1", "grpo_phase2")


def now(path):
    return (ROOT / path).read_text()


@functools.cache  # the same old file is read for the stage table, the fingerprints and the episodes
def before(path):
    out = subprocess.run(["git", "-C", str(ROOT), "show", f"{PREVIOUS}:{path}"], capture_output=True, text=True)
    return out.stdout if out.returncode == 0 else None


def episodes(text):
    return {r["question_id"]: r for r in map(json.loads, text.splitlines()) if r}


def paired(a, b, name_a, name_b):
    """b against a on the same questions, through `paired_comparisons` (its row is b first, a second)."""
    records = lambda eps: [SimpleNamespace(question_id=q, correct=e["correct"]) for q, e in eps.items()]  # noqa: E731
    (row,) = paired_comparisons({name_b: records(b), name_a: records(a)})
    return {"n": row["n"], "points": round(100 * row["difference"], 1),
            "newcombe_95_points": [round(100 * row["difference_low"], 1), round(100 * row["difference_high"], 1)],
            f"only_{name_a}_correct": row["only_b_correct"], f"only_{name_b}_correct": row["only_a_correct"],
            "mcnemar_exact_p": round(row["mcnemar_p"], 4)}


def stage_names():
    lock = now("dvc.lock")
    return re.findall(r"^  (\S+):$", lock, flags=re.M)


def metrics_path(stage):
    if stage.startswith("evaluate@"):
        return f"reports/eval/{stage.split('@', 1)[1]}/metrics.json"
    return f"reports/{stage}/metrics.json"


def gb(mb):
    return round(mb * 2**20 / 1e9, 2)


def record(m):
    s = m["system"]
    rec = {"wall_s": m["wall_time_s"], "peak_rss_gb": gb(s["peak_rss_mb"]),
           "load1_start_end": [round(s["load1_start"], 2), round(s["load1_end"], 2)]}
    if "dtype" in m:
        rec["dtype"] = {k: m["dtype"][k] for k in ("dtype", "bf16_ms", "fp32_ms") if k in m["dtype"]}
    for k in ("seconds_per_step", "steps", "distinct_questions", "fingerprint", "model_fingerprint", "train_loss"):
        if k in m:
            rec[k] = m[k]
    if "metrics" in m:
        rec["correct"], rec["n"] = m["metrics"]["correct"], m["metrics"]["n"]
    if "heap" in m:
        rec["heap_trims"] = m["heap"]["trims"]
    return rec


def _seconds(clock):
    """`time -v`'s elapsed wall clock (h:mm:ss or m:ss.ss) in seconds."""
    parts = [float(x) for x in clock.split(":")]
    return sum(x * 60 ** i for i, x in enumerate(reversed(parts)))


def main():
    time_v = (D / "time_v.txt").read_text()
    field = lambda name: re.search(rf"{re.escape(name)}: (.+)", time_v).group(1).strip()  # noqa: E731
    stages, vs_previous, reused = {}, {}, {}
    # dvc_stages.txt: DVC's "Running stage" / "didn't change, skipping" lines of the run's log
    skipped = set(re.findall(r"^Stage '(\S+)' didn't change, skipping$", (D / "dvc_stages.txt").read_text(), flags=re.M))
    for stage in stage_names():
        path = metrics_path(stage)
        if not (ROOT / path).exists():
            continue  # `report` writes no metrics file (its time is in no record; time_v's total includes it)
        m = json.loads(now(path))
        if stage in skipped:  # its dependencies unchanged: DVC kept its committed outputs
            reused[stage] = {"commit": m["git_commit"][:7], "wall_s": m["wall_time_s"]}
            continue
        stages[stage] = record(m)
        old = before(path)
        if old is not None:
            p = record(json.loads(old))
            vs_previous[stage] = {"wall_s": [p["wall_s"], stages[stage]["wall_s"]],
                                  "peak_rss_gb": [p["peak_rss_gb"], stages[stage]["peak_rss_gb"]]}
    first = json.loads(now(metrics_path("sft")))
    isa = first["system"].get("cpu_isa")
    eval_dirs = sorted(p.parent.name for p in (ROOT / "reports/eval").glob("*/samples.jsonl"))
    eval_dirs = [d for d in eval_dirs if f"evaluate@{d}" in stages]  # the reused ones are the previous files themselves
    identical = {d: now(f"reports/eval/{d}/samples.jsonl") == before(f"reports/eval/{d}/samples.jsonl") for d in eval_dirs}
    moved = {}
    for d in eval_dirs:
        old = before(f"reports/eval/{d}/samples.jsonl")
        if old is not None and not identical[d]:
            a, b = episodes(old), episodes(now(f"reports/eval/{d}/samples.jsonl"))
            differ = sum(a[q]["messages"] != b[q]["messages"] for q in a)
            moved[d] = {"episodes_with_other_path": differ, **paired(a, b, "previous", "this_run")}
    sft, g2 = (episodes(now(f"reports/eval/{d}/samples.jsonl")) for d in ("sft_n200", "grpo_phase2_n200"))
    sft_old, g2_old = (episodes(before(f"reports/eval/{d}/samples.jsonl")) for d in ("sft_n200", "grpo_phase2_n200"))
    stage_wall = sum(r["wall_s"] for r in stages.values())
    training = {k: stages[k]["wall_s"] for k in TRAINING}
    evals = sum(r["wall_s"] for k, r in stages.items() if k.startswith("evaluate@"))
    largest = max(stages, key=lambda k: stages[k]["peak_rss_gb"])
    g1, g2m = stages["grpo_phase1"], stages["grpo_phase2"]
    out = {
        "purpose": "The reference run at HEAD (reports/, dvc.lock): issue 15's `make run` on a fresh clone at the defaults, "
                   "every stage paid, after 8c1e41e/d2a27da (prompt-lookup drafting in evaluation and in GRPO's rollouts), on the "
                   "Intel Xeon model of make_run_36 and make_run_38. PLAN.md has the predictions.",
        "date": (D / "start.txt").read_text().strip()[:10],
        "commit": json.loads(now(metrics_path("evaluate@sft_n200")))["git_commit"][:7],
        "command": "git clone /work/main /work/run39 && cd /work/run39 && /usr/bin/time -v make run; then the clone's "
                   "dvc.lock, reports/ (stage outputs) and README block copied to main",
        "machine": {"lscpu": [ln for ln in (D / "lscpu.txt").read_text().splitlines()
                              if ln.split(":")[0].strip() in ("Model name", "CPU family", "Model", "CPU(s)", "Thread(s) per core")],
                    "cpu_isa": isa,
                    "note": "quiet machine: nothing else ran during the run (load1 at each stage's start and end below)"},
        "make_run": {
            "started_utc": (D / "start.txt").read_text().strip(), "ended_utc": (D / "end.txt").read_text().strip(),
            "time_v_wall": field("Elapsed (wall clock) time (h:mm:ss or m:ss)"),
            "time_v_max_rss_kib": int(field("Maximum resident set size (kbytes)")),
            "time_v_max_rss_gb": round(int(field("Maximum resident set size (kbytes)")) * 1024 / 1e9, 2),
            "exit_status": int(field("Exit status")),
            "stages_wall_s": round(stage_wall, 1), "stages_wall_min": round(stage_wall / 60, 1),
            "stages_reused_by_dvc": reused,
            "reused_note": "DVC skipped these stages (dependencies unchanged: code, params, the base model's hash) and kept "
                           "their committed outputs; their wall is the run that made them",
            "every_stage_paid_estimate_min": round((_seconds(field("Elapsed (wall clock) time (h:mm:ss or m:ss)"))
                                                    + sum(r["wall_s"] for r in reused.values())) / 60, 1),
            "training_wall_s": training, "evaluations_wall_s": round(evals, 1),
            "largest_stage": {"stage": largest, "peak_rss_gb": stages[largest]["peak_rss_gb"]},
            "every_stage_under_8_gb": all(r["peak_rss_gb"] <= 8 for r in stages.values()),
            "dtypes_chosen": sorted({r["dtype"]["dtype"] for r in stages.values() if "dtype" in r}),
            "grpo": {"wall_s": round(g1["wall_s"] + g2m["wall_s"], 1),
                     "distinct_questions": [g1.get("distinct_questions"), g2m.get("distinct_questions")]},
        },
        "fingerprints": {"sft": [json.loads(before(metrics_path("sft")))["fingerprint"], stages["sft"]["fingerprint"]],
                         "grpo_phase1": [json.loads(before(metrics_path("grpo_phase1")))["model_fingerprint"], g1["model_fingerprint"]],
                         "grpo_phase2": [json.loads(before(metrics_path("grpo_phase2")))["model_fingerprint"], g2m["model_fingerprint"]],
                         "reading": "[previous reference (make_run_38), this run]"},
        "headline": paired(sft, g2, "sft", "grpo_phase2"),
        "headline_previous": paired(sft_old, g2_old, "sft", "grpo_phase2"),
        "episodes_byte_identical_to_previous": identical,
        "episodes_that_moved": moved,
        "stages": stages,
        "vs_previous_reference": {"reading": "[previous reference (make_run_38 at ccd7019; its five reused baseline evaluations make_run_36's at 13e4548: "
                                             "the same Xeon model 207), this run]", **vs_previous},
    }
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
