"""The `sqlenv` console script: the domain commands of `sqlenv.cli`, plus `sqlenv eval` and `sqlenv publish`.

    sqlenv eval --model models/sft --data ../shared/spider --n 200
    sqlenv eval --model DIR --questions data/questions/n200.jsonl --db-dir data/databases --name sft_n200
    sqlenv eval --model models/base --data ../shared/spider --protocol text_to_sql   # base_sql: full schema, EX
    sqlenv eval --model models/base --data ../shared/spider --protocol text_to_sql --shots 3   # few-shot base_sql
    sqlenv eval --model models/sft --questions data/questions/n200.jsonl --db-dir data/databases --schema full --metric ex

`eval` is lm-eval-harness style: any model folder (or a Hub id, downloaded by `huggingface_hub`) on any
question set — a Spider-format folder (its questions file through the same loader and oracle gate as
the `prepare` stage; databases under `<data>/database`) or a questions JSONL in the `prepare` output
format (one `Question` object per line: id, db_id, question, gold_sql, and optionally gold_answer,
hardness, tables, ordered, source, domain) with its databases in Spider layout. `--n` draws a
hardness-stratified subset by stable hash. It plays and scores exactly as the `evaluate` stage does
(`sqlenv.eval.harness.play`, `result_document`, `pipeline.results.write_result`) and writes the same
`metrics.json` + `samples.jsonl` to `--out` (default `eval/<name>/`). With a tracking URI
(`--tracking-uri` or `$MLFLOW_TRACKING_URI`) the run is also logged to MLflow (experiment `sqlenv-eval`).
The agent plays in the environment mode given: `--schema hidden|full` (what its first message shows) and
`--metric value|ex` (value: `answer(value)` judged by the value verifier; ex: `answer(sql)`, the final SQL
scored by execution accuracy, with the value verifier's reading of the same rows as `value_accuracy`) —
the mode a model was trained in (`env.schema`, `env.answer`) is the one to evaluate it in.
`--backend vllm` decodes the agent's episodes with vLLM's offline engine instead of transformers (a GPU,
the `vllm` extra), through the same episode loop; metrics.json records the backend.
`--protocol text_to_sql` plays the classic single-turn protocol instead of the agent
(`sqlenv.eval.text_to_sql`: full schema in the prompt, one reply, its SQL scored by execution accuracy;
with `--data`, every question whose gold SQL runs, as published Spider numbers count them; `--shots k`
puts k worked examples from other databases of the set before each question).
It lives here, not in `sqlenv/`, because the domain library never imports MLflow.

`sqlenv publish` (`pipeline.publish`) writes a model folder with a card generated from the committed
results, validates it offline (`--dry-run` stops there) and uploads it to the Hub.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from pipeline.publish import PUBLISH
from sqlenv import cli as domain_cli
from sqlenv.cli import Command, UsageError
from sqlenv.dtype import DTYPES, choose_dtype

EVAL_EXPERIMENT = "sqlenv-eval"


def _add_eval_arguments(p: argparse.ArgumentParser) -> None:
    from sqlenv.eval.vllm_backend import BACKENDS

    p.add_argument("--model", required=True, help="model folder (Hugging Face layout) or a Hub id")
    p.add_argument("--data", help="Spider-format folder (questions file, tables.json, database/)")
    p.add_argument("--questions-file", default="dev.json", help="questions file inside --data (default dev.json)")
    p.add_argument("--questions", help="questions JSONL in the prepare output format, instead of --data")
    p.add_argument("--db-dir", help="databases in Spider layout <dir>/<db_id>/<db_id>.sqlite (with --questions)")
    p.add_argument("--protocol", choices=("agent", "text_to_sql"), default="agent",
                   help="agent: the multi-turn tool episode, value answers (default); text_to_sql: full schema, "
                   "one reply, its SQL scored by execution accuracy (EX)")
    p.add_argument("--schema", choices=("hidden", "full"), default="hidden",
                   help="agent: table names only (default) or the full schema in the first message")
    p.add_argument("--metric", choices=("value", "ex"), default="value",
                   help="agent: value answers and the value verifier (default), or SQL answers scored by EX")
    p.add_argument("--keep-distinct", action="store_true",
                   help="EX (text_to_sql, or the agent's --metric ex): run both statements as written; by default "
                   "DISTINCT is removed from both first, as Spider's official evaluator does unless given --keep_distinct")
    p.add_argument("--shots", type=int, default=0, help="text_to_sql: worked examples from other databases (default 0)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="reply budget of text_to_sql (default 256)")
    p.add_argument("--n", type=int, default=0, help="evaluate a hardness-stratified subset of this size (0: all)")
    p.add_argument("--name", help="name of the result (default <model folder>_<data name>)")
    p.add_argument("--out", help="output folder (default eval/<name>)")
    p.add_argument("--parser", choices=("strict", "lenient"), default="strict",
                   help="tool-call parser: strict = TRL's (trained models), lenient = also JSON as text (base models)")
    p.add_argument("--batch-size", type=int, default=50, help="episodes generated together (default 50)")
    p.add_argument("--max-total-tokens", type=int, default=768, help="completion budget per episode (default 768)")
    p.add_argument("--step-budget", type=int, default=15, help="tool calls per episode (default 15)")
    p.add_argument("--timeout", type=float, default=2.0, help="per-statement SQL limit in seconds (default 2)")
    p.add_argument("--dtype", choices=DTYPES, default="auto",
                   help="compute dtype; auto (default) times bf16 against fp32 at the model's shapes and takes the faster")
    p.add_argument("--backend", choices=BACKENDS, default="hf",
                   help="agent: what decodes the episodes, hf (transformers, default) or vllm (a GPU, needs "
                   "`pip install -e \".[vllm]\"`); recorded in metrics.json")
    p.add_argument("--draft-tokens", type=int, default=8,
                   help="agent, hf, greedy: tokens guessed per episode and decode step from its own context and "
                   "checked in the same forward (prompt lookup; 0 = off; default 8)")
    p.add_argument("--seed", type=int, default=0, help="subset and decoding seed (default 0)")
    p.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI"),
                   help="MLflow tracking URI to log the run to (default $MLFLOW_TRACKING_URI; unset: no logging)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _questions(args: argparse.Namespace) -> tuple[list[Any], Path, str, dict[str, int]]:
    from sqlenv.eval.harness import (
        check_databases,
        load_questions_file,
        load_spider_questions,
    )

    try:
        if args.data:
            if args.questions:
                raise UsageError("give --data or --questions, not both")
            questions, db_dir, drops = load_spider_questions(args.data, args.questions_file, args.timeout,
                                                             for_sql=args.protocol == "text_to_sql")
            name = Path(args.data).resolve().name
        elif args.questions and args.db_dir:
            questions, db_dir, drops = load_questions_file(args.questions), Path(args.db_dir), {}
            name = Path(args.questions).stem
        else:
            raise UsageError("give --data DIR (Spider layout), or --questions FILE.jsonl with --db-dir DIR")
        check_databases(questions, db_dir)
    except (FileNotFoundError, ValueError) as exc:
        raise UsageError(str(exc)) from exc
    if not questions:
        raise UsageError("no question passed the loader and the oracle gate")
    return questions, db_dir, name, drops


def _model_dir(model: str) -> Path:
    path = Path(model)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UsageError(f"{path} is not a model folder (no config.json)")
        return path
    if path.exists() or model.count("/") != 1:
        raise UsageError(f"no model folder at {model} (nor a Hub id of the form org/name)")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model))
    except Exception as exc:  # noqa: BLE001 - offline, unknown id, gated: all mean "no such model here"
        raise UsageError(f"model {model!r} is neither a local folder nor downloadable from the Hub: {exc}") from exc


def run_eval(args: argparse.Namespace, out: TextIO) -> int:
    from pipeline.results import write_result
    from sqlenv.data.splits import stratified_sample
    from sqlenv.sampling import GenerationSettings
    from sqlenv.env.environment import EnvConfig
    from sqlenv.env.rewards import RewardConfig
    from sqlenv.eval.harness import EvalSettings, play, result_document
    from sqlenv.provenance import chat_template_kwargs

    if args.backend == "vllm":
        from sqlenv.eval.vllm_backend import require_vllm

        if args.protocol == "text_to_sql":
            raise UsageError("--backend vllm is the agent's: text_to_sql decodes with transformers")
        try:
            require_vllm()
        except ImportError as exc:
            raise UsageError(str(exc)) from exc
    questions, db_dir, data_name, drops = _questions(args)
    if args.n < 0:
        raise UsageError("--n must be >= 0")
    pool = len(questions)
    if args.n and args.n < pool:
        questions = stratified_sample(questions, args.n, args.seed)
    model_dir = _model_dir(args.model)
    if args.protocol == "text_to_sql":
        suffix = "_sql" + (f"_{args.shots}shot" if args.shots else "")
    else:
        suffix = ("_full" if args.schema == "full" else "") + ("_ex" if args.metric == "ex" else "")
        if args.shots:
            raise UsageError("--shots is for --protocol text_to_sql (the agent's few-shot policies are the evaluate stage's)")
    name = args.name or f"{model_dir.resolve().name}_{data_name}{suffix}"
    out_dir = Path(args.out) if args.out else Path("eval") / name
    data = {"data": args.data, "questions_file": args.questions_file if args.data else args.questions,
            "db_dir": str(db_dir), "pool": pool, "dropped": drops, "subset_seed": args.seed if args.n else None}  # fmt: skip
    if args.protocol == "text_to_sql":
        return _run_text_to_sql(args, out, questions, db_dir, data_name, data, model_dir, name, out_dir)
    try:
        if args.keep_distinct and args.metric != "ex":
            raise UsageError("--keep-distinct is for EX: --metric ex or --protocol text_to_sql")
        env = EnvConfig(step_budget=args.step_budget, sql_timeout_s=args.timeout, schema=args.schema,
                        answer="sql" if args.metric == "ex" else "value", rewards=RewardConfig(mode="binary"),
                        keep_distinct=args.keep_distinct)  # fmt: skip
        settings = EvalSettings(max_total_tokens=args.max_total_tokens, batch_size=args.batch_size,
                                gen=GenerationSettings(seed=args.seed), parser=args.parser,
                                dtype=choose_dtype(args.dtype, model_dir).dtype,
                                backend=args.backend, draft_tokens=args.draft_tokens)  # fmt: skip
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    start = time.perf_counter()
    records, model_info = play(model_dir, questions, db_dir=db_dir, env_config=env, settings=settings,
                               template_kwargs=chat_template_kwargs(model_dir), progress=not args.no_progress)  # fmt: skip
    wall = time.perf_counter() - start
    document = result_document(name, data_name, records, model=model_info, settings=settings.describe(),
                               env_config=env, data=data, wall_time_s=round(wall, 1))  # fmt: skip
    write_result(out_dir, records, document)
    if args.tracking_uri:
        _log_to_mlflow(args, name, out_dir, records, document)
    m = document["metrics"]
    summary = {"name": name, "mode": env.mode, "metric": args.metric, "n": m["n"], "accuracy": m["accuracy"],
               "accuracy_low": m["accuracy_low"], "accuracy_high": m["accuracy_high"],
               **{k: m[k] for k in ("value_accuracy", "value_accuracy_low", "value_accuracy_high") if k in m},
               "parse_rate": m["parse_rate"],
               "lenient_parse_rate": m["lenient_parse_rate"], "wall_time_s": round(wall, 1), "out": str(out_dir)}  # fmt: skip
    out.write(json.dumps(summary) + "\n")
    return domain_cli.EXIT_OK


def _run_text_to_sql(args, out, questions, db_dir, data_name, data, model_dir, name, out_dir) -> int:
    from pipeline.results import write_result
    from sqlenv.eval.harness import load_model, result_document
    from sqlenv.eval.text_to_sql import play_text_to_sql, text_to_sql_metrics
    from sqlenv.provenance import chat_template_kwargs, model_fingerprint

    if args.max_new_tokens < 1 or args.batch_size < 1 or args.shots < 0:
        raise UsageError("--max-new-tokens and --batch-size must be >= 1, --shots >= 0")
    if args.schema != "hidden" or args.metric != "value":
        raise UsageError("--schema and --metric are the agent's: text_to_sql always shows the full schema and scores EX")
    args.dtype = choose_dtype(args.dtype, model_dir).dtype
    model, tokenizer = load_model(model_dir, args.dtype)
    start = time.perf_counter()
    try:
        records = play_text_to_sql(model, tokenizer, questions, db_dir=db_dir, max_new_tokens=args.max_new_tokens,
                                   batch_size=args.batch_size, sql_timeout_s=args.timeout,
                                   chat_template_kwargs=chat_template_kwargs(model_dir), progress=not args.no_progress,
                                   shots=args.shots, seed=args.seed, keep_distinct=args.keep_distinct)  # fmt: skip
    except ValueError as exc:  # too few examples on other databases
        raise UsageError(str(exc)) from exc
    wall = time.perf_counter() - start
    settings = {"protocol": "text_to_sql", "metric": "ex", "max_new_tokens": args.max_new_tokens, "batch_size":
                args.batch_size, "decoding": "greedy", "dtype": args.dtype, "schema": "full", "sql_timeout_s": args.timeout,
                "shots": args.shots, "few_shot_seed": args.seed if args.shots else None,
                "keep_distinct": args.keep_distinct}  # fmt: skip
    document = result_document(name, data_name, records, model={"path": str(model_dir),
                               "fingerprint": model_fingerprint(model_dir)}, settings=settings, env_config=None,
                               data=data, wall_time_s=round(wall, 1))  # fmt: skip
    document["metrics"].update(text_to_sql_metrics(records))
    write_result(out_dir, records, document)
    if args.tracking_uri:
        _log_to_mlflow(args, name, out_dir, records, document)
    m = document["metrics"]
    summary = {"name": name, "protocol": "text_to_sql", "metric": "ex", "n": m["n"], "ex": m["accuracy"],
               "ex_low": m["accuracy_low"], "ex_high": m["accuracy_high"], "sql_extracted_rate": m["sql_extracted_rate"],
               "sql_executable_rate": m["sql_executable_rate"], "wall_time_s": round(wall, 1), "out": str(out_dir)}  # fmt: skip
    out.write(json.dumps(summary) + "\n")
    return domain_cli.EXIT_OK


def _log_to_mlflow(args, name, out_dir, records, document) -> None:
    import mlflow

    from pipeline.params import flatten
    from pipeline.results import log_result

    mlflow.set_tracking_uri(args.tracking_uri)
    mlflow.set_experiment(EVAL_EXPERIMENT)
    env = document["env"] or {}
    mode = {"env_schema": env.get("schema"), "env_answer": env.get("answer")} if env else {"protocol": "text_to_sql"}
    with mlflow.start_run(run_name=name, tags={"stage": "eval", "model": args.model, "data": document["set"], **mode}):
        mlflow.log_params(flatten({"model": document["model"], "settings": document["settings"],
                                   "data": document["data"], "env": document["env"]}))  # fmt: skip
        log_result(out_dir, records, document)


EVAL = Command(help="evaluate a model on a question set (Spider folder or questions JSONL)",
               add_arguments=_add_eval_arguments, run=run_eval)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    return domain_cli.main(argv, extra={"eval": EVAL, "publish": PUBLISH})


if __name__ == "__main__":
    sys.exit(main())
