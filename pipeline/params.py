"""Load and validate params.yaml, the single place for the pipeline's knobs.

The schema is a tree of dataclasses *without defaults*: params.yaml must spell out every
key, so the file a user reads is the whole truth about a run (no hidden default in code).
Validation is strict because a typo in a sweep (`-S grpo.beta=0.04` vs `-S grpo.btea=…`)
otherwise silently trains the default: an unknown key, a missing key or a value of the
wrong type raises `ParamsError` naming the dotted key (with a "did you mean" hint).

Each stage calls `load_params()` and reads only its own sections; DVC's `params:` lists in
dvc.yaml mirror exactly those sections so a stage reruns only when what it reads changes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from sqlenv.types import unknown_key


class ParamsError(ValueError):
    """params.yaml is missing, unreadable, or does not match the schema."""


# --------------------------------------------------------------------------------------
# Schema. Field comments live in params.yaml (the file users edit); here only the types.
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataParams:
    source: Literal["synthetic", "spider"]
    spider_dir: str
    spider_questions: str
    spider_train_questions: list[str]
    databases: list[str]
    difficulties: list[str]
    split: Literal["by_domain", "by_database", "by_question", "by_file"]
    eval_fraction: float
    n50: int
    n200: int
    indomain: int


@dataclass(frozen=True)
class WorldParams:
    domains: list[str]
    databases_per_domain: int
    questions_per_db: int
    side_tables: int
    renamed_columns: float


@dataclass(frozen=True)
class RewardParams:
    mode: Literal["dense", "binary"]
    correctness_weight: float
    progress_weight: float
    new_query_bonus: float
    step_cost: float
    repeat_penalty: float
    repeat_window: int
    post_episode_penalty: float
    format_reward: float
    shaping_bound: float


@dataclass(frozen=True)
class EnvParams:
    step_budget: int
    sql_timeout_s: float
    max_rows_shown: int
    max_chars_shown: int
    sample_rows: int
    schema: Literal["hidden", "full"]
    answer: Literal["value", "sql"]
    keep_distinct: bool
    loop_notice: bool
    budget_notice_at: int
    error_hints: bool
    prompt: Literal["compact", "verbose"]


@dataclass(frozen=True)
class ModelParams:
    base: str
    dtype: Literal["auto", "bfloat16", "float32"]
    enable_thinking: bool


@dataclass(frozen=True)
class SFTDataParams:
    error_recovery_fraction: float
    sample_fraction: float
    explore_fraction: float
    value_check_fraction: float
    empty_recovery_fraction: float
    wrong_join_fraction: float
    repeat_fraction: float
    qualify: Literal["alias", "table"]


@dataclass(frozen=True)
class SFTParams:
    max_examples: int
    epochs: int
    learning_rate: float
    batch_size: int
    gradient_accumulation_steps: int
    max_length: int
    lora: bool
    lora_r: int
    lora_alpha: int
    lora_dropout: float
    logging_steps: int
    shared_prefix: bool
    activation_checkpointing: Literal["auto", True, False]
    train_on_mistakes: bool


@dataclass(frozen=True)
class GRPOParams:
    seed: int | None
    beta: float
    lora: bool
    lora_r: int
    lora_alpha: int
    batch_size: int
    gradient_accumulation_steps: int
    top_p: float
    logging_steps: int
    checkpoint_every: int
    transcripts_every: int
    transcripts_per_log: int
    few_shot_steps: int
    use_vllm: Literal["none", "colocate", "server"]
    activation_checkpointing: Literal["auto", True, False]
    shared_prefix: Literal["auto", True, False]
    rollout_decoder: Literal["auto", "sqlenv", "trl"]
    draft_tokens: Literal["auto"] | int
    oversample: int
    mask_truncated_completions: bool


@dataclass(frozen=True)
class GRPOPhaseParams:
    beta: float | None  # None: grpo.beta
    difficulties: list[str]
    max_steps: int
    num_generations: int
    learning_rate: float
    temperature: float
    max_completion_length: int


@dataclass(frozen=True)
class EvaluateParams:
    batch_size: int
    max_total_tokens: int
    do_sample: bool
    temperature: float
    top_p: float
    few_shot_seed: int
    backend: Literal["hf", "vllm"]
    draft_tokens: int


@dataclass(frozen=True)
class TransferParams:
    spider_dir: str
    questions_file: str
    ids: str | None  # None: draw `n` from the folder at run time
    n: int
    limit: int
    single_shot_max_new_tokens: int


@dataclass(frozen=True)
class LaunchParams:
    num_processes: int
    config: str


@dataclass(frozen=True)
class Params:
    seed: int
    data: DataParams
    world: WorldParams
    env: EnvParams
    rewards: RewardParams
    model: ModelParams
    sft_data: SFTDataParams
    sft: SFTParams
    grpo: GRPOParams
    grpo_phase1: GRPOPhaseParams
    grpo_phase2: GRPOPhaseParams
    evaluate: EvaluateParams
    transfer: TransferParams
    launch: LaunchParams

    def section(self, name: str) -> Any:
        return getattr(self, name)


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------


def repo_root() -> Path:
    """The project root: DVC_ROOT inside a DVC stage (also in queued/temp experiments,
    which run in a throw-away copy), else the folder holding this package."""
    env = os.environ.get("DVC_ROOT")
    return Path(env).resolve() if env else Path(__file__).resolve().parent.parent


def params_path() -> Path:
    return Path(os.environ.get("SQLENV_PARAMS", Path.cwd() / "params.yaml"))


class _Yaml12Floats(yaml.SafeLoader):
    """PyYAML's safe loader, reading floats as YAML 1.2 does.

    PyYAML follows YAML 1.1, where a float needs a dot: `1e-05` is the *string* "1e-05". DVC writes
    params.yaml through ruamel (YAML 1.2), and `dvc exp run -S grpo_phase1.learning_rate=0.00001`
    writes exactly `1e-05`; read as a string, the sweep failed its own type check.
    """


_Yaml12Floats.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$"), list("-+0123456789."))


def read_yaml(text: str) -> Any:
    """Parse params YAML (params.yaml, an overlay) with YAML 1.2 floats, as DVC writes them."""
    return yaml.load(text, Loader=_Yaml12Floats)  # a SafeLoader subclass: safe


def load_params(path: str | os.PathLike[str] | None = None) -> Params:
    """Read and validate params.yaml (default: ./params.yaml, or $SQLENV_PARAMS)."""
    p = Path(path) if path is not None else params_path()
    if not p.is_file():
        raise ParamsError(f"params file not found: {p}")
    try:
        raw = read_yaml(p.read_text())
    except yaml.YAMLError as e:
        raise ParamsError(f"{p}: not valid YAML: {e}") from e
    if not isinstance(raw, dict):
        raise ParamsError(f"{p}: expected a mapping at the top level, got {type(raw).__name__}")
    return _build(Params, raw, prefix="", source=str(p))


def _build(cls: type, raw: Any, prefix: str, source: str) -> Any:
    where = prefix.rstrip(".") or "<top level>"
    if not isinstance(raw, dict):
        raise ParamsError(f"{source}: '{where}' must be a mapping, got {raw!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    for key in raw:
        if key not in fields:
            raise ParamsError(f"{source}: unknown key {unknown_key(prefix + str(key), [prefix + f for f in fields])}")
    missing = [name for name in fields if name not in raw]
    if missing:
        raise ParamsError(f"{source}: missing key(s) {', '.join(prefix + m for m in missing)}")
    values = {name: _coerce(hints[name], raw[name], f"{prefix}{name}", source) for name in fields}
    return cls(**values)


def _coerce(tp: Any, value: Any, key: str, source: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, prefix=key + ".", source=source)
    if origin is Literal:
        choices = typing.get_args(tp)
        if not any(value == c and type(value) is type(c) for c in choices):  # 1 is not True
            raise ParamsError(f"{source}: '{key}' must be one of {list(choices)}, got {value!r}")
        return value
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if value is None:
            value = []
        if not isinstance(value, list):
            raise ParamsError(f"{source}: '{key}' must be a list, got {value!r}")
        return [_coerce(item_tp, v, f"{key}[{i}]", source) for i, v in enumerate(value)]
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        wanted = []  # e.g. Literal["auto"] | int: the first member that takes the value
        for member in inner:
            try:
                return _coerce(member, value, key, source)
            except ParamsError as exc:
                wanted.append(str(exc).split(" must be ", 1)[-1].rsplit(", got ", 1)[0])
        raise ParamsError(f"{source}: '{key}' must be {' or '.join(wanted)}, got {value!r}")
    # bool is a subclass of int: reject True for an int knob and 1 for a bool knob.
    if tp is bool:
        if not isinstance(value, bool):
            raise ParamsError(f"{source}: '{key}' must be true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ParamsError(f"{source}: '{key}' must be an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ParamsError(f"{source}: '{key}' must be a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ParamsError(f"{source}: '{key}' must be a string, got {value!r}")
        return value
    raise TypeError(f"unsupported schema type {tp!r} for {key}")  # a bug in the schema, not in params


def section_dict(params: Params, *names: str) -> dict[str, Any]:
    """The named sections as plain dicts (`seed` is a scalar section)."""
    out: dict[str, Any] = {}
    for name in names:
        value = params.section(name)
        out[name] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
    return out


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'data': {'seed': 1}} -> {'data.seed': 1}; lists become JSON text (for MLflow params)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        elif isinstance(v, list):
            out[key] = json.dumps(v)
        else:
            out[key] = v
    return out


def params_hash(d: dict[str, Any]) -> str:
    """Short stable hash of the params a stage read (order-independent)."""
    blob = json.dumps(d, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:12]
