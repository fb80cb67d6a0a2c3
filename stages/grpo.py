"""DVC stages `grpo_phase1` and `grpo_phase2`: GRPO of the SQL agent through the real environment.

    python -m stages.grpo --phase 1   (models/sft         -> models/grpo_phase1; easy questions)
    python -m stages.grpo --phase 2   (models/grpo_phase1 -> models/grpo_phase2; easy + medium)

Params: seed, env, rewards, model.dtype, model.enable_thinking, grpo, grpo_phase<N> (never the
other phase's section), launch (`launch.num_processes > 1`: the stage runs under `accelerate launch`,
`pipeline.launch`; every process trains, the main one writes the outs, checkpoint markers and MLflow). Outs: models/<stage>/ (merged plain model), reports/<stage>/metrics.json and
curve.csv (one row per step). Crash safety: checkpoints in checkpoints/<stage>/ (outside the DVC
outs); a rerun after a kill resumes from the newest compatible one (same params hash and starting
model fingerprint), else starts fresh and says why; they are removed once the outs are written.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import shutil
import time

import mlflow
import pandas as pd

from pipeline import machine, paths
from pipeline.grpo_logging import MLflowGRPOLogger
from pipeline.io import atomic_dir, atomic_write_json, atomic_write_text
from pipeline.launch import main_stage_run, run_training_stage
from pipeline.params import load_params, params_hash
from pipeline.tracking import log_dtype, log_metrics
from sqlenv.dtype import choose_dtype
from sqlenv.provenance import model_fingerprint
from sqlenv.train.grpo import (
    STAGES,
    build_trainer,
    phase_policy,
    phase_sections,
    phase_settings,
    plan_batches,
)
from sqlenv.train.grpo_outputs import (
    CURVE_COLUMNS,
    checkpoint_marker_callback,
    curve_rows,
    informative_rollouts,
    prepare_checkpoints,
    save_final_model,
    summarize_curve,
)
from sqlenv.train.processes import is_main_process, world_size
from sqlenv.train.trl_patches import compact_lm_head

START_MODEL = {1: paths.MODELS / "sft", 2: paths.MODELS / STAGES[1]}
log = logging.getLogger("grpo")


def main(phase: int) -> None:
    stage = STAGES[phase]
    params = load_params()
    read = phase_sections(dataclasses.asdict(params), phase)
    read["launch"] = dataclasses.asdict(params.launch)  # in the resume key too: a step's batch depends on it
    settings = phase_settings(read, phase)
    start = START_MODEL[phase]
    dtype = choose_dtype(settings.dtype, paths.MODELS / "base")
    settings = dataclasses.replace(settings, dtype=dtype.dtype)  # what it computes in; the resume key keeps the param
    if not (start / "config.json").is_file():
        raise FileNotFoundError(f"starting model not found: {start} (run the stage that makes it first)")
    questions, ckpt_dir = paths.questions_file("train"), paths.CHECKPOINTS / stage
    start_fp = model_fingerprint(start)
    run_key = {"params_hash": params_hash(read), "start_fingerprint": start_fp}
    plan = plan_batches(settings.batch_size, settings.gradient_accumulation_steps, settings.num_generations, world_size())
    main_process = is_main_process()
    policy = phase_policy(settings)

    with main_stage_run(stage, read):
        # Every process picks the same checkpoint; only the main one removes the others.
        resume = prepare_checkpoints(ckpt_dir, run_key, remove=main_process)
        log.info("%s", resume.reason)
        logger = MLflowGRPOLogger(settings.transcripts_every, settings.transcripts_per_log, settings.seed)
        callbacks = [logger, checkpoint_marker_callback(run_key, resume.elapsed_s)] if main_process else []
        if main_process:
            mlflow.set_tags({"start_model": str(start), "start_fingerprint": start_fp, "resume": resume.reason})
            mlflow.log_params({"derived.gradient_accumulation_steps": plan.gradient_accumulation_steps,
                               "derived.generation_batch_size": plan.generation_batch_size,
                               "derived.prompts_per_step": plan.prompts_per_step,
                               "derived.processes": plan.world_size,
                               "derived.beta": settings.beta,  # grpo.beta or the phase's own
                               # what the device policy chose here (sqlenv/devices.py)
                               "derived.device": policy.device, "derived.rollout_decoder": policy.rollout_decoder,
                               "derived.shared_prefix": policy.shared_prefix})  # fmt: skip
        trainer = build_trainer(
            settings, model_path=start, questions_file=questions, db_dir=paths.DATABASES, checkpoint_dir=ckpt_dir,
            callbacks=callbacks, policy=policy,
        )  # fmt: skip
        logger.attach(trainer)
        t0 = time.monotonic()
        # the LM head on labelled positions only where the device policy says so (a CPU; elsewhere TRL decides)
        with compact_lm_head() if policy.compact_lm_head else contextlib.nullcontext():
            trainer.train(resume_from_checkpoint=str(resume.checkpoint) if resume.checkpoint else None)
        train_s = time.monotonic() - t0
        if not main_process:
            return
        wall = resume.elapsed_s + train_s  # training time across resumes (to the last checkpoint before a kill)

        info = {"stage": stage, "steps": trainer.state.global_step, "params_hash": run_key["params_hash"],
                "dtype": settings.dtype, "lora": settings.lora}  # fmt: skip
        with atomic_dir(paths.MODELS / stage) as tmp:
            fingerprint = save_final_model(trainer, start, tmp, info)

        rows = curve_rows(trainer.state.log_history)
        report = paths.report_dir(stage)
        atomic_write_text(report / "curve.csv", pd.DataFrame(rows, columns=list(CURVE_COLUMNS)).to_csv(index=False))
        steps_run = trainer.state.global_step - resume.step
        # the yardstick for where rollouts go: informative rollouts per minute of the phase's wall time
        informative = informative_rollouts(rows, plan.generation_batch_size)
        metrics = {
            **summarize_curve(rows),
            **informative,
            "informative_rollouts_per_minute": round(informative["informative_rollouts"] / (wall / 60), 3) if wall else None,
            "oversample": settings.oversample,
            "steps": trainer.state.global_step,
            "resumed_from_step": resume.step,
            "wall_time_s": round(wall, 1),
            "seconds_per_step": round(train_s / steps_run, 2) if steps_run else None,
            "rollouts_per_step": plan.generation_batch_size,
            "processes": plan.world_size,
            "model_fingerprint": fingerprint,
            "start_fingerprint": start_fp,
            "dtype": dtype.as_dict(),
            "activation_checkpointing": bool(trainer.args.activation_checkpointing),
            "system": machine.summary(),
        }
        atomic_write_json(paths.metrics_file(stage), metrics)
        log_dtype(dtype)
        mlflow.set_tag("activation_checkpointing", metrics["activation_checkpointing"])
        log_metrics({k: v for k, v in metrics.items() if k not in ("steps", "dtype", "system")}, prefix="final/")
        mlflow.log_dict(metrics, "metrics.json")
        mlflow.log_artifact(str(report / "curve.csv"))
        shutil.rmtree(ckpt_dir, ignore_errors=True)  # a finished phase must never be "resumed" by a later run
        log.info("%s: %d steps in %.0f s, reward %s -> %s (first/last quarter), model %s", stage,
                 metrics["steps"], wall, metrics["reward_first_quarter"], metrics["reward_last_quarter"], fingerprint)  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", type=int, choices=sorted(STAGES), required=True)
    phase = parser.parse_args().phase
    run_training_stage(STAGES[phase], "stages.grpo", lambda: main(phase))
