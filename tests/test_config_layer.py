"""Guards the one config layer: each domain config reads exactly its params section (same fields), and where a
domain config has defaults they are params.yaml's, so the library and the pipeline cannot mean different runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from pipeline import params as schema
from sqlenv.data.sft_data import SFTDataConfig
from sqlenv.env.environment import EnvConfig
from sqlenv.env.rewards import RewardConfig
from sqlenv.eval.harness import EvalSettings
from sqlenv.train.sft import TrainConfig

PARAMS = yaml.safe_load((Path(__file__).resolve().parents[1] / "params.yaml").read_text())
# section -> (its schema class, the domain config it becomes, fields the domain config adds beyond it)
PAIRS = {
    "env": (schema.EnvParams, EnvConfig, {"rewards"}),
    "rewards": (schema.RewardParams, RewardConfig, set()),
    "sft": (schema.SFTParams, TrainConfig, {"seed", "dtype", "max_steps", "report_to", "warmup_ratio"}),
    "sft_data": (schema.SFTDataParams, SFTDataConfig, {"seed"}),
}


def _names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("section", list(PAIRS))
def test_domain_config_fields_are_the_section(section):
    params_cls, config_cls, extra = PAIRS[section]
    assert _names(config_cls) == _names(params_cls) | extra
    assert set(PARAMS[section]) == _names(params_cls)


@pytest.mark.parametrize("section", list(PAIRS))
def test_domain_defaults_are_params_yaml(section):
    _, config_cls, _ = PAIRS[section]
    defaults = {f.name: f.default for f in dataclasses.fields(config_cls) if f.name in PARAMS[section]}
    assert defaults == PARAMS[section]


def test_eval_settings_defaults_are_params_yaml():
    """EvalSettings is not the evaluate section (policies add parser and shots, decoding sits in `gen`), but the
    knobs it shares with it by name default to params.yaml's values (`backend: hf` among them)."""
    shared = _names(EvalSettings) & _names(schema.EvaluateParams)
    assert shared == {"batch_size", "max_total_tokens", "few_shot_seed", "backend", "draft_tokens"}
    defaults = {f.name: f.default for f in dataclasses.fields(EvalSettings) if f.name in shared}
    assert defaults == {name: PARAMS["evaluate"][name] for name in shared}
