"""DVC stage `evaluate@<policy>_<set>`: play one policy's episodes on one question set and score them.

    python -m stages.evaluate --policy sft --set n200 --source models/sft
    python -m stages.evaluate --policy sft --set n50 --source reports/eval/sft_n200/samples.jsonl

(params: seed, env, rewards, evaluate, grpo.format_reward, model.dtype.) `--source` is what
the entry depends on: the policy's model folder (played), `data/databases` for the random
policy, or — for n50 ⊂ n200 — the policy's n200 samples, whose greedy episodes on the n50
questions are the n50 result (no second run). Outs: reports/eval/<policy>_<set>/
{samples.jsonl, metrics.json}; samples first, so a folder with a metrics file is complete.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from pathlib import Path

import mlflow
import pandas as pd

from pipeline import paths
from pipeline.io import atomic_write_json, atomic_write_jsonl, read_jsonl
from pipeline.params import env_config, load_params, section_dict
from pipeline.stage import run_stage
from pipeline.tracking import git_commit, log_metrics, stage_run
from sqlenv.evaluation import episode_metrics, subset
from sqlenv.policies import few_shot_examples, few_shot_system_prompt, run_random, shots_for
from sqlenv.rollout import GenerationSettings, run_episodes
from sqlenv.types import EpisodeRecord, Question
from sqlenv.verifier import VERIFIER_VERSION

STAGE = "evaluate"
POLICIES = ("random", "base", "base_1shot", "base_3shot", "sft", "grpo_phase1", "grpo_phase2")
log = logging.getLogger(STAGE)


def model_dir(policy: str):
    """The model a policy plays: base* share models/base; trained policies their own stage's out."""
    return None if policy == "random" else paths.MODELS / ("base" if policy.startswith("base") else policy)


def load_questions(split: str) -> list[Question]:
    return [Question.from_dict(r) for r in read_jsonl(paths.questions_file(split))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policy", required=True, choices=POLICIES)
    parser.add_argument("--set", required=True, choices=paths.EVAL_SETS, dest="set_name")
    parser.add_argument("--source", required=True, help="model folder, data/databases (random), or n200 samples.jsonl")
    args = parser.parse_args()
    policy, set_name = args.policy, args.set_name
    params = load_params()
    ev = params.evaluate
    questions = load_questions(set_name)
    from_samples = args.source.endswith(".jsonl")
    config = env_config(params)
    read = section_dict(params, "seed", "env", "rewards", "evaluate")
    read["grpo"] = {"format_reward": params.grpo.format_reward}
    read["model"] = {"dtype": params.model.dtype}
    gen = GenerationSettings(do_sample=ev.do_sample, temperature=ev.temperature, top_p=ev.top_p, seed=params.seed)
    mdir = model_dir(policy)
    if from_samples and not Path(args.source).is_file():
        raise FileNotFoundError(f"episodes to read {set_name} off not found: {args.source}")
    if not from_samples and mdir is not None and not (mdir / "config.json").is_file():
        raise FileNotFoundError(f"model for policy {policy!r} not found: {mdir} (run its stage first)")

    with stage_run(STAGE, read, run_name=f"{STAGE}@{policy}_{set_name}") as run:
        mlflow.set_tags({"policy": policy, "eval_set": set_name, "source": args.source})
        start = time.perf_counter()
        model_info: dict = {"path": None, "fingerprint": None}
        played_on = set_name
        if from_samples:  # n50 ⊂ n200: the same greedy episodes, no second run
            source_metrics = json.loads((Path(args.source).parent / "metrics.json").read_text())
            model_info, played_on = source_metrics["model"], source_metrics["set"]
            played = [EpisodeRecord.from_dict(r) for r in read_jsonl(args.source)]
            records = subset(played, [q.id for q in questions])
        elif mdir is None:
            records = run_random(questions, db_dir=paths.DATABASES, env_config=config, seed=params.seed)
        else:
            records, model_info = _play_model(policy, mdir, questions, params, config, gen)
        wall = time.perf_counter() - start

        out = paths.REPORTS / "eval" / f"{policy}_{set_name}"
        metrics = episode_metrics(records)
        atomic_write_jsonl(out / "samples.jsonl", [r.to_dict() for r in records])
        atomic_write_json(out / "metrics.json", {
            "policy": policy,
            "set": set_name,
            "n": len(records),
            "played_on": played_on,
            "model": model_info,
            "verifier_version": VERIFIER_VERSION,
            "generation": {**dataclasses.asdict(gen), "batch_size": ev.batch_size,
                           "max_new_tokens": ev.max_new_tokens, "max_total_tokens": ev.max_total_tokens},
            "seed": params.seed,
            "git_commit": git_commit()[0],
            "wall_time_s": round(wall, 1),
            "metrics": metrics,
        })
        log_metrics(metrics)
        mlflow.log_artifact(str(out / "samples.jsonl"))
        mlflow.log_table(_table(records), artifact_file="transcripts.json")
        mlflow.log_metric("wall_time_s", wall)
        log.info("%s on %s: accuracy %.3f (n=%d) in %.0f s; mlflow run %s", policy, set_name,
                 metrics["accuracy"] or 0.0, len(records), wall, run.info.run_id)


def _play_model(policy, mdir, questions, params, config, gen):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sqlenv.models import chat_template_kwargs, model_fingerprint

    ev = params.evaluate
    torch.manual_seed(params.seed)
    tokenizer = AutoTokenizer.from_pretrained(mdir)
    model = AutoModelForCausalLM.from_pretrained(mdir, dtype=getattr(torch, params.model.dtype))
    system_prompt = None
    k = shots_for(policy)
    if k:
        examples = few_shot_examples(load_questions("train"), k, db_dir=paths.DATABASES,
                                     env_config=config, seed=ev.few_shot_seed)
        system_prompt = few_shot_system_prompt(k, examples)
    # Template kwargs (Qwen3's enable_thinking) were fixed when the base model was prepared;
    # every trained model descends from it and must be rendered the same way.
    kwargs = chat_template_kwargs(paths.MODELS / "base")
    records = run_episodes(
        model, tokenizer, questions, db_dir=paths.DATABASES, env_config=config, gen=gen,
        system_prompt=system_prompt, batch_size=ev.batch_size, max_new_tokens_per_turn=ev.max_new_tokens,
        max_total_tokens=ev.max_total_tokens, chat_template_kwargs=kwargs or None,
    )
    return records, {"path": str(mdir), "fingerprint": model_fingerprint(mdir)}


def _table(records) -> pd.DataFrame:
    rows = [{
        "question_id": r.question_id, "hardness": r.hardness, "correct": r.correct, "answer": r.answer or "",
        "steps": r.steps, "reward": round(r.reward, 4), "verdict": r.verdict_reason,
        "transcript": "\n".join(f"[{m['role']}] {m.get('content') or ''} {m.get('tool_calls') or ''}".strip()
                                for m in r.messages[2:]),
    } for r in records]
    return pd.DataFrame(rows)


if __name__ == "__main__":
    run_stage(STAGE, main)
