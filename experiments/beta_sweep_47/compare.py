"""The MLflow side of the worked sweep: each GRPO phase's per-step curves of two DVC experiments, side by side.

    python experiments/beta_sweep_47/compare.py --store /tmp/refrun/main/mlflow.db \
        --runs run-20261207-120522 beta0 --out experiments/beta_sweep_47

Reads, through MLflow's public client, the parent run of each DVC experiment (named after it) in the `sqlenv`
experiment, its child runs tagged `stage` = grpo_phase1 / grpo_phase2 (the latest of each), and their metric
histories; writes curves.csv (one row per experiment, phase and step) and curves.md (the table docs/tracking.md
shows), and prints the run ids (what the MLflow UI's compare view is opened on).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from mlflow import MlflowClient

METRICS = ("reward", "kl", "rewards/correctness/mean", "episode/mixed_correctness", "episode/accuracy")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True, help="the mlflow.db of the workspace the experiments ran in")
    ap.add_argument("--runs", nargs=2, required=True, help="two DVC experiment names (their MLflow parent runs)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    client = MlflowClient(tracking_uri=f"sqlite:///{args.store}")
    exp = client.get_experiment_by_name("sqlenv")
    rows, ids = [], {}
    for name in args.runs:
        (parent,) = client.search_runs([exp.experiment_id], f"attributes.run_name = '{name}'", max_results=1)
        for stage in ("grpo_phase1", "grpo_phase2"):
            runs = client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}' and "
                                      f"tags.stage = '{stage}'", order_by=["attributes.start_time DESC"], max_results=1)  # fmt: skip
            if not runs:
                continue
            run = runs[0]
            ids[name, stage] = run.info.run_id
            history = {m: {h.step: h.value for h in client.get_metric_history(run.info.run_id, m)} for m in METRICS}
            for step in sorted({s for h in history.values() for s in h}):
                rows.append({"experiment": name, "stage": stage, "step": step,
                             **{m: history[m].get(step) for m in METRICS}})  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "curves.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, ["experiment", "stage", "step", *METRICS])
        w.writeheader()
        w.writerows(rows)
    a, b = args.runs
    fmt = lambda v: "—" if v is None else f"{v:.4f}"  # noqa: E731
    lines = []
    for stage in ("grpo_phase1", "grpo_phase2"):
        lines += [f"{stage}:", "", f"| step | reward {a} | reward {b} | kl {a} | kl {b} | mixed {a} | mixed {b} |",
                  "|---|---|---|---|---|---|---|"]  # fmt: skip
        by = {(r["experiment"], r["step"]): r for r in rows if r["stage"] == stage}
        for step in sorted({r["step"] for r in rows if r["stage"] == stage}):
            ra, rb = by.get((a, step), {}), by.get((b, step), {})
            lines.append(f"| {step} | {fmt(ra.get('reward'))} | {fmt(rb.get('reward'))} | {fmt(ra.get('kl'))} | "
                         f"{fmt(rb.get('kl'))} | {fmt(ra.get('episode/mixed_correctness'))} | "
                         f"{fmt(rb.get('episode/mixed_correctness'))} |")  # fmt: skip
        lines.append("")
    (args.out / "curves.md").write_text("\n".join(lines) + "\n")
    for (name, stage), run_id in sorted(ids.items()):
        print(f"{name} {stage} {run_id}")


if __name__ == "__main__":
    main()
