"""levers_37: run.json from this folder's raw files (see README.md for how each was made).

    .venv/bin/python experiments/levers_37/summarise.py   # writes experiments/levers_37/run.json

Reads raw/ (py-spy profiles, bench_rollout JSONs, /usr/bin/time -v logs), parts_xeon207.json, and the
committed reference run (../make_run_36/run.json, reports/grpo_phase1/curve.csv) for the stage times the
candidate cuts are read from. Nothing here is typed in by hand except the lists of candidate cuts.
"""

from __future__ import annotations

import csv
import json
import lzma
import re
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
RAW = HERE / "raw"
REPO = HERE.parents[1]
# The reference run whose stage times the cuts and slowdowns are read against.
MAKE_RUN_36 = json.loads((HERE.parent / "make_run_36" / "run.json").read_text())


def _stacks(name: str):
    """(python frame names outermost first, sample count) per line of a py-spy raw profile."""
    with lzma.open(RAW / name, "rt") as f:
        for line in f:
            stack, _, count = line.rstrip().rpartition(" ")
            yield [frame.split(" (")[0] for frame in stack.split(";") if ".py:" in frame], int(count)


def _shares(counter: Counter, total: int) -> dict[str, float]:
    return {k: round(100 * v / total, 1) for k, v in counter.most_common()}


def eval_profile() -> dict:
    """Where evaluate@base_n50's samples went: the main thread by part of the decode loop; other threads apart."""
    parts, total = Counter(), 0
    for names, n in _stacks("pyspy_evaluate_base_n50.txt.xz"):
        total += n
        if names[:1] == ["Thread._bootstrap"]:
            parts["other threads (idle: tqdm monitor, MLflow queues)"] += n
        elif "ModelGenerator._decode" in names:
            if "Qwen2Model.forward" in names:
                parts["decode: transformer layers"] += n
            elif "Linear.forward" in names:
                parts["decode: LM head"] += n
            elif any("token_chooser" in x for x in names):
                parts["decode: token choice (argmax)"] += n
            else:
                parts["decode: cache bookkeeping and the rest"] += n
        elif "ModelGenerator._prefill_rows" in names:
            parts["prefill of tool results and next prompts"] += n
        elif "ModelGenerator._padded_batch" in names:
            parts["batch assembly (padded caches)"] += n
        elif "play_episodes" in names:
            parts["episode logic (parsing, environment, tokenising)"] += n
        else:
            parts["start-up, model load, dtype probe, logging"] += n
    return {"samples": total, "percent_of_samples": _shares(parts, total)}


def _has(names: list[str], method: str) -> bool:
    """Whether a frame of `names` is `method` (py-spy names a method `Class.method`)."""
    return any(x == method or x.endswith("." + method) for x in names)


def grpo_profile() -> dict:
    """Where two phase-1 GRPO steps' samples went: generating the rollouts against training on them."""
    parts, total = Counter(), 0
    for names, n in _stacks("pyspy_grpo_phase1_2steps.txt.xz"):
        total += n
        if names[:1] == ["Thread._bootstrap"]:
            parts["other threads"] += n
        elif _has(names, "_generate_and_score_completions"):
            if "ModelGenerator._decode" in names:
                parts["rollouts: decode"] += n
            elif "ModelGenerator._prefill_rows" in names:
                parts["rollouts: prefill"] += n
            elif _has(names, "_get_per_token_logps_and_entropies"):
                parts["rollouts: reference log-probs (beta 0.04)"] += n
            else:
                parts["rollouts: the rest (environment, tokenising, rewards)"] += n
        elif _has(names, "backward"):
            parts["training: backward"] += n
        elif _has(names, "compute_loss"):
            parts["training: log-prob forward"] += n
        else:
            parts["start-up, model load, merge, save"] += n
    main = total - parts["other threads"]
    generation = sum(v for k, v in parts.items() if k.startswith("rollouts"))
    training = sum(v for k, v in parts.items() if k.startswith("training"))
    return {
        "samples": total,
        "percent_of_samples": _shares(parts, total),
        "percent_of_main_thread": {"rollouts": round(100 * generation / main, 1), "training": round(100 * training / main, 1)},
    }


def grpo_slowdown() -> dict:
    """The profiled steps' times (py-spy --native pauses the process to read native stacks) against the reference
    run's first two phase-1 steps (the same questions, losses and seed)."""
    profiled = [float(x) for x in re.findall(r"'step_time': '([0-9.]+)'", (RAW / "grpo_phase1_2steps.log").read_text())]
    losses = re.findall(r"'loss': '([0-9.e-]+)'", (RAW / "grpo_phase1_2steps.log").read_text())
    with open(REPO / "reports" / "grpo_phase1" / "curve.csv") as f:
        rows = list(csv.DictReader(f))[:2]
    reference = [round(float(r["step_time"]), 1) for r in rows]
    return {"profiled_step_s": profiled, "reference_step_s": reference,
            "profiled_losses": losses, "reference_losses": [f"{float(r['loss']):.4g}" for r in rows],
            "slowdown": [round(p / r, 2) for p, r in zip(profiled, reference)]}  # fmt: skip


def eval_slowdown() -> dict:
    profiled = float(re.search(r"in (\d+) s;", (RAW / "evaluate_base_n50.log").read_text()).group(1))
    reference = MAKE_RUN_36["stages"]["evaluate@base_n50"]["wall_s"]
    return {"profiled_s": profiled, "reference_s": reference, "slowdown": round(profiled / reference, 2)}


def _rollout(name: str) -> dict:
    d = json.loads((RAW / name).read_text())
    b = d["batched"]
    return {"episodes": d["n"], "threads": d["torch_threads"], "seconds": b["seconds"], "accuracy": b["accuracy"],
            "generated_tokens": b["generated_tokens"], "loadavg_before": [round(x, 2) for x in d["loadavg_before"]]}  # fmt: skip


def processes() -> dict:
    """Two 1-thread processes against one 2-thread process, on grpo_phase1's n50 episodes."""
    one = _rollout("rollout_n50_1proc_2threads.json")
    twins = [_rollout(f"rollout_n50_2proc_1thread_{x}.json") for x in "ab"]
    shards = [_rollout(f"rollout_n50_shard_{x}_1thread.json") for x in ("even", "odd")]
    together = max(t["seconds"] for t in twins)
    ratio = (2 * one["episodes"] / together) / (one["episodes"] / one["seconds"])
    stages = MAKE_RUN_36["stages"]
    n200 = sum(v["wall_s"] for k, v in stages.items() if k.startswith("evaluate@") and k.endswith("_n200") and v["wall_s"] > 1)
    return {
        "one_process_2_threads_n50": one,
        "two_processes_1_thread_each_all_n50_each": twins,
        "throughput_ratio_two_processes_over_one": round(ratio, 3),
        "make_run_36_n200_evaluations_min": round(n200 / 60, 2),
        "n200_evaluations_min_saved_at_that_ratio": round(n200 / 60 * (1 - 1 / ratio), 1),
        "two_processes_1_thread_each_half_n50_each": shards,
        "n50_wall_sharded_over_one_process": round(max(s["seconds"] for s in shards) / one["seconds"], 3),
    }


def _time_v(path: Path) -> dict:
    text = path.read_text()
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text).group(1)
    seconds = sum(float(p) * 60**i for i, p in enumerate(reversed(wall.split(":"))))
    cpu = re.search(r"Percent of CPU this job got: (\d+)%", text).group(1)
    return {"wall_s": round(seconds, 1), "cpu_percent": int(cpu)}


def installs() -> dict:
    out = {"env": (RAW / "env.txt").read_text().strip(), "commit": (RAW / "install_commit.txt").read_text().strip()[:7]}
    for mode in ("compile", "no-compile"):
        out[mode] = {"pip_install": _time_v(RAW / f"install_{mode}.time"),
                     "stage_imports": [_time_v(RAW / f"import_{mode}_{i}.time")["wall_s"] for i in (1, 2)]}  # fmt: skip
    out["pip_compile_s"] = round(out["compile"]["pip_install"]["wall_s"] - out["no-compile"]["pip_install"]["wall_s"], 1)
    out["import_cost_without_compile_s"] = round(out["no-compile"]["stage_imports"][1] - out["compile"]["stage_imports"][1], 1)
    stages = MAKE_RUN_36["stages"]
    out["make_run_36_stage_processes"] = len(stages)
    out["import_cost_over_the_run_min"] = round(len(stages) * out["import_cost_without_compile_s"] / 60, 1)
    return out


def env_parts() -> dict:
    here = json.loads((HERE / "parts_xeon207.json").read_text())
    epyc = json.loads((HERE.parent / "env_overhead_33" / "parts.json").read_text())
    # What the mixed workload's ratio asks of this CPU: the env's query steps must lose this much per step to reach
    # 1.25, in each of session 36's three bench_env runs here (bench/results/env_xeon207/).
    needed = []
    for k in (1, 2, 3):
        mixed = json.loads((REPO / "bench" / "results" / "env_xeon207" / f"run{k}.json").read_text())["mixed"]
        excess_ms = mixed["query_env_ms_total"] - 1.25 * mixed["query_raw_ms_total"]
        needed.append(round(excess_ms / mixed["queries"] * 1000, 2))
    return {"xeon_207": here, "amd_epyc_session_33": epyc, "us_per_step_to_cut_for_1_25_xeon_207": needed}


# Candidate cuts of the default run, each with the committed stages it removes or shortens (reference run
# make_run_36). A step-count cut scales its stage's wall by the steps kept.
CUTS = [
    ("drop evaluate@base_1shot_n50 (zero-shot and 3-shot remain)", {"evaluate@base_1shot_n50": 1.0}),
    ("drop evaluate@grpo_phase1_n50 (phase 1 unevaluated by default)", {"evaluate@grpo_phase1_n50": 1.0}),
    ("GRPO 7 + 5 steps (48 distinct questions, the line's minimum)", {"grpo_phase1": 1 / 8, "grpo_phase2": 1 / 6}),
    ("SFT on 64 of 96 trajectories", {"sft": 1 / 3}),
]


def cuts() -> dict:
    run = MAKE_RUN_36
    total = run["make_run"]["time_v_wall"]
    minutes = sum(float(p) * 60**i for i, p in enumerate(reversed(total.split(":")))) / 60
    rows, left = [], minutes
    for what, shares in CUTS:
        saved = sum(run["stages"][stage]["wall_s"] * share for stage, share in shares.items()) / 60
        left -= saved
        rows.append({"cut": what, "saves_min": round(saved, 1), "make_run_min_after_this_and_the_above": round(left, 1)})
    return {"make_run_36_min": round(minutes, 1), "target_min": 40, "cumulative": rows}


def main() -> None:
    report = {
        "purpose": "Exploratory (not planned ahead): what is left to cut from the default run on this CPU, and "
                   "what bench_env's mixed ratio is made of here. Issue 15's 40-min and bench_env lines.",
        "cpu": [line.strip() for line in (HERE / "lscpu.txt").read_text().splitlines()
                if line.startswith(("Model name", "CPU family", "Model:", "CPU(s):"))],
        "evaluate_base_n50_profile": {**eval_profile(), "py_spy_slowdown": eval_slowdown()},
        "grpo_phase1_profile": {**grpo_profile(), "py_spy_slowdown": grpo_slowdown()},
        "evaluation_processes": processes(),
        "installs": installs(),
        "bench_env_parts_us_per_step": env_parts(),
        "default_cuts": cuts(),
    }  # fmt: skip
    (HERE / "run.json").write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
