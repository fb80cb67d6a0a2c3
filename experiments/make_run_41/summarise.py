"""Summarise experiments/make_run_41/ from its raw files (every number read, none typed):
.venv/bin/python experiments/make_run_41/summarise.py > experiments/make_run_41/run.json

Reads what was copied here from the run's clone (/work/run41) after `make run`: its dvc.lock (`run_dvc.lock`),
every stage's metrics file, the GRPO curves, SFT's loss curve and report.md (under `outputs/`, at their paths in
the clone), DVC's stage lines of the log (`dvc_stages.txt`), the clone's commit (`commit.txt`), `lscpu.txt`, `start.txt`/`end.txt` and the
`/usr/bin/time -v` log (`time_v.txt`). The reference is main's at REFERENCE (make_run_39's outputs, `dvc.lock`
re-recorded for code changes only), read with `git show`.

Per output of every stage: is its hash in the run's dvc.lock the reference's? For those that differ and are
small files here: which fields or lines differ (a metrics file's timings, say, against its results).

DVC reused the ten committed evaluations in `make run` (the models came out bit-identical, so their
dependencies had not changed). They were then forced in the same clone (`dvc repro -f -s` of the ten and
`report`): `forced/` holds that step's dvc.lock, outputs, log lines and `time -v` log, compared the same way."""
import csv
import functools
import io
import json
import lzma
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import yaml

D = Path(__file__).resolve().parent
ROOT = D.parents[1]
sys.path.insert(0, str(ROOT))
from sqlenv.eval.evaluation import paired_comparisons  # noqa: E402  (the report's own pairing: Newcombe interval, exact McNemar)
REFERENCE = "64d0263"  # main when the run was cloned (make_run_41's PLAN.md): make_run_39's outputs
TRAINING = ("prepare", "prepare_model", "sft_data", "sft", "grpo_phase1", "grpo_phase2")


@functools.cache  # dvc.lock and sft_n200's episodes are read by more than one comparison
def reference(path):
    out = subprocess.run(["git", "-C", str(ROOT), "show", f"{REFERENCE}:{path}"], capture_output=True, text=True)
    return out.stdout if out.returncode == 0 else None


def outs(lock_text):
    return {o["path"]: o.get("md5") for v in yaml.safe_load(lock_text)["stages"].values() for o in v.get("outs", [])}


def flat(x, prefix=""):
    if isinstance(x, dict):
        return {k2: v2 for k, v in x.items() for k2, v2 in flat(v, f"{prefix}{k}.").items()}
    if isinstance(x, list):
        return {k2: v2 for i, v in enumerate(x) for k2, v2 in flat(v, f"{prefix}{i}.").items()}
    return {prefix[:-1]: x}


def differing_fields(a_text, b_text):
    a, b = flat(json.loads(a_text)), flat(json.loads(b_text))
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def differing_columns(a_text, b_text):
    a, b = (list(csv.DictReader(io.StringIO(t))) for t in (a_text, b_text))
    if len(a) != len(b):
        return {"rows": [len(a), len(b)]}
    return sorted({k for ra, rb in zip(a, b) for k in ra.keys() | rb.keys() if ra.get(k) != rb.get(k)})


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


@functools.cache
def forced_episodes(path):
    """A forced evaluation's episodes, kept here xz-compressed (only the two that moved)."""
    return episodes(lzma.open(D / "forced" / "outputs" / f"{path}.xz", "rt").read())


def moved_episodes(path):
    """A forced evaluation's episodes against the reference's: how many took another path,
    where each first differs (the role of the first differing message), and the paired verdicts."""
    ref, run = episodes(reference(path)), forced_episodes(path)
    first = {}
    for q, e in ref.items():
        a, b = e["messages"], run[q]["messages"]
        if a != b:
            i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            role = a[i]["role"] if i < len(a) else "end"
            first[role] = first.get(role, 0) + 1
    return {"episodes_with_other_path": sum(first.values()), "first_differing_message_role": first,
            **paired(ref, run, "reference", "this_run")}


def gb(mb):
    return round(mb * 2**20 / 1e9, 2)


def _seconds(clock):
    parts = [float(x) for x in clock.split(":")]
    return sum(x * 60**i for i, x in enumerate(reversed(parts)))


def compare(folder):
    """Which outputs of `folder`'s dvc.lock have the reference's hash, and what differs in those that do not."""
    run_outs, ref_outs = outs((folder / "run_dvc.lock").read_text()), outs(reference("dvc.lock"))
    same = {p: run_outs.get(p) == ref_outs.get(p) for p in sorted(ref_outs.keys() | run_outs.keys())}
    why = {}
    for path, equal in same.items():
        local = folder / "outputs" / path
        if equal or not local.is_file():
            continue
        ref = reference(path)
        if path.endswith(".json"):
            why[path] = {"fields_that_differ": differing_fields(ref, local.read_text())}
        elif path.endswith(".csv"):
            why[path] = {"columns_that_differ": differing_columns(ref, local.read_text())}
        else:
            a, b = ref.splitlines(), local.read_text().splitlines()
            why[path] = {"lines_that_differ": [i + 1 for i, (x, y) in enumerate(zip(a, b)) if x != y]
                         + ([f"length {len(a)} vs {len(b)}"] if len(a) != len(b) else [])}
    return {"same": sum(same.values()), "of": len(same), "differ": sorted(p for p, s in same.items() if not s)}, why


def stage_records(folder):
    """Per stage whose metrics file is under `folder`/outputs: [reference, this run] wall, peak RSS, results."""
    stages = {}
    for path in sorted((folder / "outputs" / "reports").rglob("metrics.json")):
        rel = path.relative_to(folder / "outputs")
        name = rel.parent.name if rel.parts[1] != "eval" else f"evaluate@{rel.parent.name}"
        m, r = json.loads(path.read_text()), json.loads(reference(str(rel)))
        rec = {"wall_s": [r["wall_time_s"], m["wall_time_s"]],
               "peak_rss_gb": [gb(r["system"]["peak_rss_mb"]), gb(m["system"]["peak_rss_mb"])],
               "load1_start_end": [round(m["system"]["load1_start"], 2), round(m["system"]["load1_end"], 2)]}
        if "dtype" in m:
            rec["dtype"] = m["dtype"]["dtype"]
        for k in ("fingerprint", "model_fingerprint", "train_loss", "distinct_questions"):
            if k in m:
                rec[k] = [r.get(k), m[k]]
        if "metrics" in m:
            rec["correct_of_n"] = [[r["metrics"]["correct"], r["metrics"]["n"]], [m["metrics"]["correct"], m["metrics"]["n"]]]
        stages[name] = rec
    return stages


def time_v(folder):
    text = (folder / "time_v.txt").read_text()
    field = lambda name: re.search(rf"{re.escape(name)}: (.+)", text).group(1).strip()  # noqa: E731
    elapsed = field("Elapsed (wall clock) time (h:mm:ss or m:ss)")
    return {"started_utc": (folder / "start.txt").read_text().strip(), "ended_utc": (folder / "end.txt").read_text().strip(),
            "time_v_wall": elapsed, "time_v_wall_s": round(_seconds(elapsed), 1),
            "time_v_max_rss_gb": round(int(field("Maximum resident set size (kbytes)")) * 1024 / 1e9, 2),
            "exit_status": int(field("Exit status"))}


def dvc_lines(folder):
    text = (folder / "dvc_stages.txt").read_text()
    return (re.findall(r"^Running stage '(\S+)':$", text, flags=re.M),
            re.findall(r"^Stage '(\S+)' didn't change, skipping$", text, flags=re.M))


def main():
    same, why = compare(D)
    stages = stage_records(D)
    ran, skipped = dvc_lines(D)
    run = time_v(D)
    forced_dir = D / "forced"
    forced_same, forced_why = compare(forced_dir)
    forced_stages = stage_records(forced_dir)
    forced_ran, _ = dvc_lines(forced_dir)
    forced = time_v(forced_dir)
    moved = {p: moved_episodes(p) for p in forced_same["differ"] if p.endswith("samples.jsonl")}
    g2 = episodes(reference("reports/eval/grpo_phase2_n200/samples.jsonl"))
    sft_ref = episodes(reference("reports/eval/sft_n200/samples.jsonl"))
    sft_run = forced_episodes("reports/eval/sft_n200/samples.jsonl")
    paid = lambda names, table: round(sum(table[n]["wall_s"][1] for n in names), 1)  # noqa: E731
    evals = [n for n in forced_stages if n.startswith("evaluate@")]
    out = {
        "purpose": "make run on a fresh clone at HEAD, every stage paid, on a quiet day: its time, and whether it reproduces "
                   "make_run_39's outputs (the committed reference) byte for byte. PLAN.md has the predictions.",
        "date": (D / "start.txt").read_text().strip()[:10],
        "commit": (D / "commit.txt").read_text().strip()[:7],
        "command": "git clone /work/main /work/run41 && cd /work/run41 && /usr/bin/time -v make run",
        "machine": {"lscpu": [ln for ln in (D / "lscpu.txt").read_text().splitlines()
                              if ln.split(":")[0].strip() in ("Model name", "CPU family", "Model", "CPU(s)", "Thread(s) per core")],
                    "note": "quiet machine: nothing else ran during the run (load1 at each stage's start and end below)"},
        "make_run": {
            **run, "time_v_wall_min": round(run["time_v_wall_s"] / 60, 1),
            "stages_run_by_dvc": ran, "stages_reused_by_dvc": skipped,
            "reused_note": "DVC reused the committed outputs of these stages: their dependencies (code, params, the models' "
                           "hashes) were the lock's, because every model came out bit-identical",
            "training_wall_s": {n: stages[n]["wall_s"] for n in TRAINING},
            "training_wall_s_total": [round(sum(stages[n]["wall_s"][0] for n in TRAINING), 1), paid(TRAINING, stages)],
            "every_stage_under_8_gb": all(stages[n]["peak_rss_gb"][1] <= 8 for n in TRAINING),
            "largest_peak_rss_gb": max(stages[n]["peak_rss_gb"][1] for n in TRAINING),
            "dtypes_chosen": sorted({stages[n]["dtype"] for n in TRAINING if "dtype" in stages[n]}),
            "outputs_same_hash_as_reference": same,
            "what_differs": why,
            "reading": "[make_run_39 (the reference), this run] where a pair is given",
        },
        "evaluations_forced": {
            "command": "in the clone after make run: /usr/bin/time -v dvc repro -f -s <the ten evaluate@ stages> report",
            **forced, "stages_run_by_dvc": forced_ran,
            "evaluations_wall_s": [round(sum(forced_stages[n]["wall_s"][0] for n in evals), 1), paid(evals, forced_stages)],
            "every_stage_under_8_gb": all(r["peak_rss_gb"][1] <= 8 for r in forced_stages.values()),
            "largest_peak_rss_gb": max(r["peak_rss_gb"][1] for r in forced_stages.values()),
            "dtypes_chosen": sorted({r["dtype"] for r in forced_stages.values() if "dtype" in r}),
            "outputs_same_hash_as_reference": forced_same,
            "what_differs": forced_why,
            "episodes_that_moved": moved,
            "headline_grpo_phase2_vs_sft_n200": {
                "reference": paired(sft_ref, g2, "sft", "grpo_phase2"),
                "this_run": paired(sft_run, g2, "sft", "grpo_phase2"),
                "note": "grpo_phase2_n200's episodes are the reference's in both (byte-identical); only sft_n200's moved"},
        },
        "every_stage_paid_min": round((run["time_v_wall_s"] + forced["time_v_wall_s"]) / 60, 1),
        "every_stage_paid_note": "make run's wall plus the forced evaluations' (each with its own DVC and process start-up), "
                                 "the same day, one after the other",
        "stages": {**{n: stages[n] for n in TRAINING}, **forced_stages},
    }
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
