"""DVC stage `evaluate@<policy>_<set>`: play one policy's episodes on one question set and score them.

    python -m stages.evaluate --policy sft --set n200 --source models/sft
    python -m stages.evaluate --policy sft --set n50 --source reports/eval/sft_n200/samples.jsonl

(params: seed, env, evaluate, model.dtype; not `rewards`: evaluation scores verdicts, so its episodes
carry the binary reward and a reward ablation does not rerun the baselines.) `--source` is what the
entry plays and depends on: the model folder (the base policies play `models/base`, trained ones their
stage's out; any other folder works and is recorded by its fingerprint), `data/databases` for the
random policy, or — for n50 ⊂ n200 — the policy's n200 samples, whose episodes on the n50 questions are
the n50 result (no second run). Outs: reports/eval/<policy>_<set>/{samples.jsonl, metrics.json}.
An empty set (the in-domain probe, `--set indomain`, under `data.indomain: 0`) is recorded with n = 0 and no
episode; the report says the probe was off. `evaluate.backend` (hf | vllm) picks what decodes a model policy's episodes; metrics.json records it
(`settings.backend`) and the MLflow run carries it as the `backend` tag.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import mlflow

from pipeline import machine, paths
from pipeline.io import read_jsonl
from pipeline.params import load_params, section_dict
from pipeline.results import log_result, write_result
from pipeline.stage import run_stage
from pipeline.tracking import git_commit, log_dtype, stage_run
from sqlenv.sampling import GenerationSettings
from sqlenv.data.splits import INDOMAIN
from sqlenv.dtype import choose_dtype
from sqlenv.env.environment import EnvConfig
from sqlenv.eval.evaluation import subset
from sqlenv.eval.harness import EvalSettings, load_questions_file, play, result_document
from sqlenv.eval.policies import POLICIES, run_random
from sqlenv.eval.policies import policy as get_policy
from sqlenv.eval.vllm_backend import require_vllm
from sqlenv.provenance import chat_template_kwargs, model_fingerprint
from sqlenv.train import heap
from sqlenv.types import EpisodeRecord

STAGE = "evaluate"
log = logging.getLogger(STAGE)
# A model policy's process hands freed heap memory back to the OS after a batch of decoding when it holds more
# than this (`heap.Trimmer`; its counts go to metrics.json as `heap`). With continuous batching the per-episode
# caches fragment glibc's heap: evaluate@base_3shot_n50 peaked at 7.1-8.6 GB untrimmed, 5.8 GB with this budget
# (7 trims in 43 batches, 235 against 232 s), 5.2 GB trimmed after every batch (at 3-7 % of a stage's time).
TRIM_ABOVE_BYTES = 5 * 2**30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policy", required=True, choices=list(POLICIES))
    parser.add_argument("--set", required=True, dest="set_name", help="a question set of prepare: data/questions/<set>.jsonl")
    parser.add_argument("--source", required=True, help="model folder, data/databases (random), or n200 samples.jsonl")
    args = parser.parse_args()
    pol, set_name, source = get_policy(args.policy), args.set_name, Path(args.source)
    params = load_params()
    ev = params.evaluate
    questions = load_questions_file(paths.questions_file(set_name), allow_empty=set_name == INDOMAIN)
    read = section_dict(params, "seed", "env", "evaluate")
    config = EnvConfig.from_dict({**read["env"], "rewards": {"mode": "binary"}})  # verdicts, not the training reward
    read["model"] = {"dtype": params.model.dtype}
    gen = GenerationSettings(do_sample=ev.do_sample, temperature=ev.temperature, top_p=ev.top_p, seed=params.seed)
    from_samples = source.suffix == ".jsonl"
    plays = pol.model is not None and not from_samples
    dtype = choose_dtype(params.model.dtype, source) if plays else None
    settings = EvalSettings(max_total_tokens=ev.max_total_tokens, batch_size=ev.batch_size, gen=gen, parser=pol.parser,
                            shots=pol.shots, few_shot_seed=ev.few_shot_seed, dtype=dtype.dtype if dtype else "bfloat16",
                            backend=ev.backend, draft_tokens=ev.draft_tokens)  # fmt: skip
    if from_samples and not source.is_file():
        raise FileNotFoundError(f"episodes to read {set_name} off not found: {source}")
    if pol.model is not None and not from_samples and not (source / "config.json").is_file():
        raise FileNotFoundError(f"model for policy {pol.name!r} not found: {source} (run its stage first)")
    if pol.model is not None and not from_samples and ev.backend == "vllm":
        try:  # before the MLflow run opens: a missing extra is bad input, not a failed evaluation
            require_vllm()
        except ImportError as exc:
            raise ValueError(f"evaluate.backend: {exc}") from exc

    with stage_run(STAGE, read, run_name=f"{STAGE}@{pol.name}_{set_name}") as run:
        mlflow.set_tags({"policy": pol.name, "eval_set": set_name, "source": str(source), "parser": pol.parser})
        start = time.perf_counter()
        model_info: dict = {"path": None, "fingerprint": None}
        played_on = set_name
        trimmer = heap.Trimmer(TRIM_ABOVE_BYTES)
        if from_samples:  # n50 ⊂ n200: the same episodes, no second run
            played = json.loads((source.parent / "metrics.json").read_text())
            model_info, played_on, described = played["model"], played["set"], played.get("settings")
            records = subset([EpisodeRecord.from_dict(r) for r in read_jsonl(source)], [q.id for q in questions])
        elif pol.model is None:
            records = run_random(questions, db_dir=paths.DATABASES, env_config=config, seed=params.seed)
            described = None
        elif not questions:  # an empty set (the in-domain probe under data.indomain: 0): nothing to play
            records, described = [], settings.describe()
            model_info = {"path": str(source), "fingerprint": model_fingerprint(source)}
            log.info("%s: the set %s is empty; no episode played", pol.name, set_name)
        else:
            # Template kwargs (Qwen3's enable_thinking) were fixed when the base model was prepared;
            # every trained model descends from it and must be rendered the same way.
            records, model_info = play(
                source, questions, db_dir=paths.DATABASES, env_config=config, settings=settings,
                few_shot_pool=load_questions_file(paths.questions_file("train")) if pol.shots else (),
                template_kwargs=chat_template_kwargs(paths.MODELS / "base"),
                after_batch=trimmer,  # freed caches back to the OS: bounds the peak RSS (play_rollouts)
            )  # fmt: skip
            described = settings.describe()
        wall = time.perf_counter() - start
        # What decoded these episodes (the n200 run's for n50; results before the key existed were HF's).
        mlflow.set_tag("backend", described.get("backend", "hf") if described else "none")
        out = paths.REPORTS / "eval" / f"{pol.name}_{set_name}"
        document = result_document(
            pol.name, set_name, records, model=model_info, settings=described, env_config=config,
            played_on=played_on, seed=params.seed, git_commit=git_commit()[0], wall_time_s=round(wall, 1),
        )  # fmt: skip
        document["system"] = machine.summary()
        if dtype is not None:
            document["dtype"] = dtype.as_dict()
            log_dtype(dtype)
        if plays:
            document["heap"] = trimmer.stats()
            mlflow.log_metrics({"heap_trims": trimmer.trims, "heap_trim_s": trimmer.seconds})
        write_result(out, records, document)
        log_result(out, records, document)
        mlflow.log_metric("wall_time_s", wall)
        m = document["metrics"]
        log.info("%s on %s: accuracy %.3f (n=%d) in %.0f s; mlflow run %s", pol.name, set_name,
                 m["accuracy"] or 0.0, len(records), wall, run.info.run_id)


if __name__ == "__main__":
    run_stage(STAGE, main)
