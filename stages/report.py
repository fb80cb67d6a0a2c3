"""DVC stage `report`: the evaluation matrix, paired comparisons, curves and transcripts as one report.

    python -m stages.report   (params: data.source, model.base, env.schema, env.answer — in the header and the
                               live-mode check; grpo_phase{1,2}.max_completion_length)

Reads reports/eval/<policy>_<set>/{metrics.json,samples.jsonl}, reports/sft/loss.csv,
reports/grpo_phase{1,2}/curve.csv and the metrics.json of prepare, prepare_model, sft_data and the
training stages (the cost table: wall time, peak RSS, dtype, threads and load per stage) — whichever
exist; the report says what is missing. A result enters only if its model fingerprint is the live
model's (models/<model of the policy>) and its questions are the live set's
(data/questions/<set>.jsonl); others are listed as stale. Writes reports/plots/ (PNGs and the CSV behind each, declared as DVC plots) and reports/report.md, and logs
both, the tables and the headline numbers to the stage's MLflow run. The plots folder is built aside
and swapped in whole; report.md is written after it, so a failure leaves the previous report intact.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone

import mlflow
import pandas as pd

from pipeline import paths
from pipeline.io import atomic_dir, atomic_write_text
from pipeline.params import load_params
from pipeline.stage import run_stage
from pipeline.tracking import git_commit, stage_run
from sqlenv.eval.harness import load_questions_file
from sqlenv.eval.policies import POLICIES
from sqlenv.provenance import model_fingerprint
from sqlenv.report.markdown import machine_description, render_report
from sqlenv.report.plots import write_plots
from sqlenv.report.taxonomy import taxonomy_section
from sqlenv.report.transfer import load_transfer, transfer_metrics, transfer_section
from sqlenv.report.results import (
    SETS,
    Live,
    comparisons_table,
    curve_files,
    curve_summary,
    hardness_table,
    load_inputs,
    results_table,
    stage_costs,
    stage_documents,
)

STAGE = "report"
EVAL_DIR = paths.report_dir("eval")
TRANSFER_DIR = paths.report_dir("transfer")
REPORT_MD = paths.REPORTS / "report.md"
PLOTS_DIR = paths.REPORTS / "plots"
log = logging.getLogger(STAGE)


def headline_metrics(inputs) -> dict[str, float]:
    """Accuracies with intervals per set/policy, and each pair's difference and p-value, MLflow-named."""
    out = {}
    for row in results_table(inputs.results).itertuples():
        for key in ("accuracy", "accuracy_low", "accuracy_high", "parse_rate", "lenient_parse_rate", "steps_mean"):
            value = getattr(row, key)
            if pd.notna(value):  # an undefined rate (no actions, none answered) is not a number to log
                out[f"{row.set}/{row.policy}/{key}"] = float(value)
    for row in comparisons_table(inputs.results).itertuples():
        out[f"{row.set}/{row.a}-vs-{row.b}/difference"] = float(row.difference)
        out[f"{row.set}/{row.a}-vs-{row.b}/mcnemar_p"] = float(row.mcnemar_p)
    for row in curve_summary(inputs.curves).itertuples():
        for key in ("first_quarter", "last_quarter"):
            out[f"curves/{row.curve}/{row.column}/{key}"] = float(getattr(row, key))  # CURVE_SUMMARY names are valid
    return out


def live_state(mode: str) -> Live:
    """Each policy's live model fingerprint (policies whose model folder is missing are absent), set ids and the
    environment mode (`schema=… answer=…`)."""
    fingerprints: dict[str, str | None] = {}
    for name, policy in POLICIES.items():
        if policy.model is None:
            fingerprints[name] = None
        elif (paths.MODELS / policy.model / "config.json").is_file():
            fingerprints[name] = model_fingerprint(paths.MODELS / policy.model)
    questions = {s: load_questions_file(paths.questions_file(s), allow_empty=True) for s in SETS
                 if paths.questions_file(s).is_file()}  # fmt: skip
    groups = {q.id: q.group for qs in questions.values() for q in qs}  # the held-out unit, for the domain bootstrap
    return Live(fingerprints, {s: [q.id for q in qs] for s, qs in questions.items()}, mode, groups)


def main() -> None:
    params = load_params()
    training = {"grpo_phase1": params.grpo_phase1.max_completion_length,
                "grpo_phase2": params.grpo_phase2.max_completion_length}  # fmt: skip
    read = {"data": {"source": params.data.source}, "model": {"base": params.model.base},
            "env": {"schema": params.env.schema, "answer": params.env.answer},
            **{stage: {"max_completion_length": n} for stage, n in training.items()}}  # fmt: skip
    mode = f"schema={params.env.schema} answer={params.env.answer}"
    with stage_run(STAGE, read):
        inputs = load_inputs(EVAL_DIR, curve_files(paths.REPORTS), live_state(mode))
        sha, dirty = git_commit()
        header = {
            "Date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "Machine": machine_description(),
            "Git commit": f"{sha}{' (uncommitted changes)' if dirty else ''}",
            "Data source": params.data.source,
            "Model base": params.model.base,
            "Environment mode": mode,
        }
        costs = stage_costs(stage_documents(paths.REPORTS))
        transfer = load_transfer(TRANSFER_DIR)
        with atomic_dir(PLOTS_DIR) as tmp:  # rendered inside: a failure before report.md keeps the old plots too
            drawn = write_plots(inputs, tmp)
            text = render_report(inputs, header, {key: f"plots/{name}" for key, name in drawn.items()}, training,
                                 costs, transfer_section(transfer), taxonomy_section(inputs.results))  # fmt: skip
        atomic_write_text(REPORT_MD, text)

        mlflow.log_artifact(str(REPORT_MD))
        mlflow.log_artifacts(str(PLOTS_DIR), "plots")
        for name, frame in (("results", results_table(inputs.results)), ("hardness", hardness_table(inputs.results)),
                            ("comparisons", comparisons_table(inputs.results))):  # fmt: skip
            if not frame.empty:
                mlflow.log_table(frame, artifact_file=f"tables/{name}.json")
        metrics = {**headline_metrics(inputs), **transfer_metrics(transfer)}
        if metrics:
            mlflow.log_metrics(metrics)
        mlflow.log_dict({"evaluated": [f"{r.policy}_{r.set}" for r in inputs.results], "curves": sorted(inputs.curves),
                         "notes": inputs.notes, "stale": inputs.stale,
                         "provenance": {f"{r.policy}_{r.set}": r.info for r in inputs.results}},
                        "inputs.json")  # fmt: skip
        log.info("report: %d evaluation runs, %d curves, %d plots -> %s", len(inputs.results), len(inputs.curves),
                 len(drawn), REPORT_MD)  # fmt: skip


if __name__ == "__main__":
    run_stage(STAGE, main)
