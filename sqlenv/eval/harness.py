"""The evaluation harness: one model folder (or no model: the random policy) × one question set → episodes.

What the `evaluate` stage and `sqlenv eval` share, so a number from either means the same thing:
`play` loads the model, builds the few-shot system prompt when asked, and plays every question through
`rollout.play_model` (ended exactly as a TRL GRPO rollout ends); `result_document` is the
`metrics.json` both write beside `samples.jsonl` — the metrics (`evaluation.episode_metrics`) with
everything needed to tell two results apart: the model's fingerprint, the question set, the parser,
the shots, the budgets, the decoding and its backend (`hf` or `vllm`), the verifier version.

Questions for a custom set come from `load_questions_file` (the `prepare` output format: one
`Question.to_dict()` JSON object per line) or `load_spider_questions` (a Spider-format folder through
the same loader and oracle gate as `prepare`). Errors are `ValueError`/`FileNotFoundError` naming the
culprit (line number, missing database), so the callers can report them as bad input.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlenv.data.questions import load_questions_file  # noqa: F401  (re-exported: the harness's inputs)
from sqlenv.sampling import GenerationSettings
from sqlenv.env.environment import EnvConfig
from sqlenv.env.tool_calls import PARSERS
from sqlenv.env.verifier import VERIFIER_VERSION
from sqlenv.eval.evaluation import episode_metrics
from sqlenv.eval.vllm_backend import check_backend, require_vllm
from sqlenv.types import EpisodeRecord, Question, db_file


@dataclass(frozen=True)
class EvalSettings:
    """How episodes are played: one completion budget for every policy, the parser, the few-shot examples."""

    max_total_tokens: int = 768
    batch_size: int = 50
    gen: GenerationSettings = field(default_factory=GenerationSettings)
    parser: str = "strict"
    shots: int = 0
    few_shot_seed: int = 0
    dtype: str = "bfloat16"
    backend: str = "hf"  # what decodes: hf (transformers, `ModelGenerator`) | vllm (`VLLMGenerator`)
    draft_tokens: int = 8  # hf, greedy: tokens guessed per row and step by prompt lookup (`sqlenv.prompt_lookup`)

    def __post_init__(self) -> None:
        check_backend(self.backend)
        if self.parser not in PARSERS:
            raise ValueError(f"parser must be one of {PARSERS}, got {self.parser!r}")
        if self.shots < 0 or self.batch_size < 1 or self.max_total_tokens < 1 or self.draft_tokens < 0:
            raise ValueError("shots and draft_tokens must be >= 0, batch_size and max_total_tokens >= 1")

    def describe(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "gen": dataclasses.asdict(self.gen)}


def check_databases(questions: Sequence[Question], db_dir: str | os.PathLike[str]) -> None:
    """Every question's database exists under `db_dir` (Spider layout), else ValueError naming the db_ids."""
    missing = sorted({q.db_id for q in questions if not db_file(db_dir, q.db_id).is_file()})
    if missing:
        raise ValueError(f"no database for db_id(s) {missing} under {db_dir} (expected <db_dir>/<db_id>/<db_id>.sqlite)")


def load_spider_questions(
    spider_dir: str | os.PathLike[str], questions_file: str = "dev.json", sql_timeout_s: float = 2.0,
    for_sql: bool = False,
) -> tuple[list[Question], Path, dict[str, int]]:
    """A Spider folder's questions kept by `prepare`'s loader and oracle gate: (questions, db dir, drop counts).

    `for_sql`: questions scored by execution accuracy (`text_to_sql`) need neither the oracle's value answer
    nor a deterministic row order, so only gold SQL that fails (or a missing database) drops a question, as
    in published Spider numbers."""
    from sqlenv.data.oracle import oracle_gate
    from sqlenv.data.spider import load_spider
    from sqlenv.env.sandbox import SandboxLimits

    spider_dir = Path(spider_dir)
    if not (spider_dir / questions_file).is_file():
        raise FileNotFoundError(f"no Spider questions file {questions_file} in {spider_dir}")
    loaded = load_spider(spider_dir, questions_file=questions_file, sandbox_limits=SandboxLimits(timeout_s=sql_timeout_s),
                         keep_nondeterministic=for_sql)  # fmt: skip
    db_dir = spider_dir / "database"
    verified, dropped = (loaded.questions, []) if for_sql else oracle_gate(loaded.questions, db_dir, sql_timeout_s)
    counts: dict[str, int] = {}
    for _, reason in [*loaded.dropped, *dropped]:
        counts[reason.split(":", 1)[0]] = counts.get(reason.split(":", 1)[0], 0) + 1
    return verified, db_dir, dict(sorted(counts.items()))


def device() -> str:
    """Where evaluation runs: `$SQLENV_DEVICE` if set, else CUDA when torch sees a GPU, else the CPU. The decode
    loop creates every tensor on `model.device`, so this one choice moves the whole evaluation."""
    import torch

    return os.environ.get("SQLENV_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu")


def model_folder(model_dir: str | os.PathLike[str]) -> Path:
    """`model_dir` as a Path, FileNotFoundError unless it is a Hugging Face model folder."""
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"no model at {model_dir} (a Hugging Face folder with config.json)")
    return model_dir


def load_model(model_dir: str | os.PathLike[str], dtype: str) -> tuple[Any, Any]:
    """(model, tokenizer) of a Hugging Face model folder, the model in `dtype` on `device()`; FileNotFoundError
    without one."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = model_folder(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).to(device())
    return model, AutoTokenizer.from_pretrained(model_dir)


def play(
    model_dir: str | os.PathLike[str],
    questions: Sequence[Question],
    *,
    db_dir: str | os.PathLike[str],
    env_config: EnvConfig,
    settings: EvalSettings,
    few_shot_pool: Sequence[Question] = (),
    template_kwargs: dict[str, Any] | None = None,
    progress: bool = True,
    after_batch: Callable[[], Any] | None = None,
) -> tuple[list[EpisodeRecord], dict[str, Any]]:
    """Play every question with the model in `model_dir`: (records in question order, model info).

    `few_shot_pool` holds the (training) questions the examples come from when `settings.shots` > 0.
    `template_kwargs` are extra chat-template variables (Qwen3's `enable_thinking`); `after_batch` is
    called after every batch of decoding (`play_model`; the evaluation stage returns freed heap memory).
    """
    from sqlenv.data.few_shot import few_shot_examples, few_shot_system_prompt
    from sqlenv.eval.rollout import play_model
    from sqlenv.provenance import model_fingerprint

    model_dir = Path(model_dir)
    if settings.backend == "vllm":  # vLLM loads the weights itself: only the tokenizer here
        from transformers import AutoTokenizer

        require_vllm()
        model, tokenizer = model_dir, AutoTokenizer.from_pretrained(model_folder(model_dir))
    else:
        model, tokenizer = load_model(model_dir, settings.dtype)
    check_databases(questions, db_dir)
    system_prompt = None
    if settings.shots:
        examples = few_shot_examples(few_shot_pool, settings.shots, db_dir=db_dir, env_config=env_config,
                                     seed=settings.few_shot_seed)  # fmt: skip
        system_prompt = few_shot_system_prompt(settings.shots, examples, system=env_config.system_prompt)
    records = play_model(
        model, tokenizer, questions, db_dir=db_dir, env_config=env_config, gen=settings.gen,
        system_prompt=system_prompt, batch_size=settings.batch_size, max_total_tokens=settings.max_total_tokens,
        chat_template_kwargs=template_kwargs or None, parser=settings.parser, progress=progress,
        backend=settings.backend, llm_kwargs={"dtype": settings.dtype} if settings.backend == "vllm" else None,
        after_batch=after_batch, draft_tokens=settings.draft_tokens,
    )  # fmt: skip
    return records, {"path": str(model_dir), "fingerprint": model_fingerprint(model_dir)}


def result_document(
    name: str,
    set_name: str,
    records: Sequence[EpisodeRecord],
    *,
    model: dict[str, Any],
    settings: dict[str, Any] | None,
    env_config: EnvConfig | None,
    **extra: Any,
) -> dict[str, Any]:
    """The `metrics.json` of one result: who played what, how, and the metrics (`episode_metrics`).

    `env_config` None: the result was not played in the environment (the text-to-SQL protocol)."""
    return {
        "policy": name,
        "set": set_name,
        "n": len(records),
        "question_ids": [r.question_id for r in records],
        "model": model,
        "verifier_version": VERIFIER_VERSION,
        "settings": settings,  # EvalSettings.describe() of the run that played the episodes; None: no model
        "env": None if env_config is None else {k: v for k, v in dataclasses.asdict(env_config).items() if k != "rewards"},
        "reward_mode": None if env_config is None else env_config.rewards.mode,
        **extra,
        "metrics": episode_metrics(records),
    }
