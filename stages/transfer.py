"""DVC stage `transfer@<policy>`: one policy on the transfer set — real databases the training never saw.

    python -m stages.transfer --policy sft --source models/sft
    python -m stages.transfer --policy base_sql --source models/base

(params: seed, env, evaluate, transfer.single_shot_max_new_tokens, model.dtype.) The trained agents
(`sft`, `grpo_phase2`) play the episode loop exactly as `evaluate` does — same environment mode, budgets and
greedy decoding — on data/transfer's questions and databases; `base_sql` is the base model given the full
schema and asked once for SQL, scored by execution accuracy (`sqlenv.eval.text_to_sql`, as `sqlenv eval
--protocol text_to_sql`), on the same questions, so the report pairs them. Where `transfer_data` skipped
(no folder), the result says "skipped: ..." and holds no episode.
Outs: reports/transfer/<policy>/{samples.jsonl, metrics.json}.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import mlflow

from pipeline import machine, paths
from pipeline.io import atomic_write_json, atomic_write_text
from pipeline.params import load_params, section_dict
from pipeline.results import log_result, write_result
from pipeline.stage import run_stage
from pipeline.tracking import git_commit, log_dtype, stage_run
from sqlenv.sampling import GenerationSettings
from sqlenv.dtype import choose_dtype
from sqlenv.env.environment import EnvConfig
from sqlenv.eval import transfer
from sqlenv.eval.harness import EvalSettings, load_model, load_questions_file, play, result_document
from sqlenv.eval.text_to_sql import play_text_to_sql, text_to_sql_metrics
from sqlenv.provenance import chat_template_kwargs, model_fingerprint

STAGE = "transfer"
log = logging.getLogger(STAGE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policy", required=True, choices=transfer.POLICIES)
    parser.add_argument("--source", required=True, help="the model folder the policy plays")
    args = parser.parse_args()
    params = load_params()
    ev, source, out = params.evaluate, Path(args.source), paths.REPORTS / STAGE / args.policy
    read = section_dict(params, "seed", "env", "evaluate")
    read["transfer"] = {"single_shot_max_new_tokens": params.transfer.single_shot_max_new_tokens}
    read["model"] = {"dtype": params.model.dtype}
    manifest = transfer.read_manifest(paths.TRANSFER)
    if "skipped" not in manifest and not (source / "config.json").is_file():
        raise FileNotFoundError(f"model for policy {args.policy!r} not found: {source} (run its stage first)")

    with stage_run(STAGE, read, run_name=f"{STAGE}@{args.policy}"):
        mlflow.set_tags({"policy": args.policy, "eval_set": transfer.SET_NAME, "source": str(source)})
        if "skipped" in manifest:
            mlflow.set_tag("skipped", manifest["skipped"])
            out.mkdir(parents=True, exist_ok=True)
            atomic_write_text(out / "samples.jsonl", "")
            atomic_write_json(out / "metrics.json", {"policy": args.policy, "set": transfer.SET_NAME,
                                                     "skipped": manifest["skipped"]})  # fmt: skip
            log.warning("%s: skipped (%s)", args.policy, manifest["skipped"])
            return
        questions = load_questions_file(paths.TRANSFER / "questions.jsonl")
        db_dir = paths.TRANSFER / "databases"
        dtype = choose_dtype(params.model.dtype, source)
        log_dtype(dtype)
        start = time.perf_counter()
        if args.policy == "base_sql":
            model, tokenizer = load_model(source, dtype.dtype)
            records = play_text_to_sql(model, tokenizer, questions, db_dir=db_dir,
                                       max_new_tokens=params.transfer.single_shot_max_new_tokens,
                                       batch_size=ev.batch_size, sql_timeout_s=params.env.sql_timeout_s,
                                       chat_template_kwargs=chat_template_kwargs(paths.MODELS / "base"))  # fmt: skip
            settings = {"protocol": "text_to_sql", "metric": "ex", "schema": "full", "decoding": "greedy",
                        "max_new_tokens": params.transfer.single_shot_max_new_tokens, "batch_size": ev.batch_size,
                        "dtype": dtype.dtype, "sql_timeout_s": params.env.sql_timeout_s, "shots": 0}  # fmt: skip
            model_info, env_config = {"path": str(source), "fingerprint": model_fingerprint(source)}, None
        else:
            env_config = EnvConfig.from_dict({**read["env"], "rewards": {"mode": "binary"}})
            gen = GenerationSettings(do_sample=ev.do_sample, temperature=ev.temperature, top_p=ev.top_p, seed=params.seed)
            eval_settings = EvalSettings(max_total_tokens=ev.max_total_tokens, batch_size=ev.batch_size, gen=gen,
                                         parser="strict", dtype=dtype.dtype, backend=ev.backend,
                                         draft_tokens=ev.draft_tokens)  # fmt: skip
            records, model_info = play(source, questions, db_dir=db_dir, env_config=env_config, settings=eval_settings,
                                       template_kwargs=chat_template_kwargs(paths.MODELS / "base"))  # fmt: skip
            settings = eval_settings.describe()
        wall = time.perf_counter() - start
        document = result_document(
            args.policy, transfer.SET_NAME, records, model=model_info, settings=settings, env_config=env_config,
            data={k: manifest[k] for k in ("spider_dir", "questions_file", "ids", "n", "pool", "hardness")},
            seed=params.seed, git_commit=git_commit()[0], wall_time_s=round(wall, 1),
        )  # fmt: skip
        if args.policy == "base_sql":
            document["metrics"].update(text_to_sql_metrics(records))
        document["system"] = machine.summary()
        document["dtype"] = dtype.as_dict()
        write_result(out, records, document)
        log_result(out, records, document)
        mlflow.log_metric("wall_time_s", wall)
        m = document["metrics"]
        log.info("%s on the transfer set: accuracy %.3f (n=%d) in %.0f s", args.policy, m["accuracy"] or 0.0,
                 len(records), wall)


if __name__ == "__main__":
    run_stage(STAGE, main)
