"""params.yaml validation: the real file loads; unknown, missing and mistyped keys fail naming the key."""

from pathlib import Path

import pytest
import yaml

from pipeline.params import ParamsError, flatten, load_params, params_hash, section_dict

REPO = Path(__file__).resolve().parent.parent


def test_repo_params_load():
    p = load_params(REPO / "params.yaml")
    assert p.data.source in ("synthetic", "spider")
    assert p.env.step_budget > 0
    assert isinstance(p.data.eval_fraction, float)


def _write(tmp_path, mutate):
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    mutate(raw)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _del(d, *keys):
    for k in keys[:-1]:
        d = d[k]
    del d[keys[-1]]


def _set(d, value, *keys):
    for k in keys[:-1]:
        d = d[k]
    d[keys[-1]] = value


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r: _set(r, "synthetic", "data", "sorce"), "unknown key 'data.sorce' (did you mean 'data.source'?)"),
        (lambda r: _set(r, 1, "bogus_section"), "unknown key 'bogus_section'"),
        (lambda r: _del(r, "env", "step_budget"), "missing key(s) env.step_budget"),
        (lambda r: _del(r, "rewards"), "missing key(s) rewards"),
        (lambda r: _set(r, "15", "env", "step_budget"), "'env.step_budget' must be an integer"),
        (lambda r: _set(r, True, "env", "step_budget"), "'env.step_budget' must be an integer"),
        (lambda r: _set(r, "fast", "env", "sql_timeout_s"), "'env.sql_timeout_s' must be a number"),
        (lambda r: _set(r, "bird", "data", "source"), "'data.source' must be one of ['synthetic', 'spider']"),
        (lambda r: _set(r, "easy", "data", "difficulties"), "'data.difficulties' must be a list"),
        (lambda r: _set(r, [1], "data", "databases"), "'data.databases[0]' must be a string"),
        (lambda r: _set(r, [], "env"), "'env' must be a mapping"),
        (lambda r: _set(r, "vLLM", "evaluate", "backend"), "'evaluate.backend' must be one of ['hf', 'vllm']"),
        (lambda r: _del(r, "evaluate", "backend"), "missing key(s) evaluate.backend"),
    ],
)
def test_invalid_params_name_the_key(tmp_path, mutate, message):
    path = _write(tmp_path, mutate)
    with pytest.raises(ParamsError) as err:
        load_params(path)
    assert message in str(err.value)


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(ParamsError, match="params file not found"):
        load_params(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: [unclosed\n")
    with pytest.raises(ParamsError, match="not valid YAML"):
        load_params(bad)


def test_int_accepted_for_float_and_flatten_hash():
    p = load_params(REPO / "params.yaml")
    d = section_dict(p, "seed", "env")
    flat = flatten(d)
    assert flat["env.step_budget"] == p.env.step_budget
    assert params_hash(d) == params_hash(dict(reversed(list(d.items()))))
    assert params_hash(d) != params_hash({**d, "seed": d["seed"] + 1})


def test_yaml_1_2_floats_read_as_numbers():
    """PyYAML (YAML 1.1) reads `1e-05` as a string; params read it as YAML 1.2 does. Quoted stays a string."""
    from pipeline.params import read_yaml

    doc = read_yaml("a: 1e-05\nb: 8\nc: 2.5\nd: '1e-05'\ne: 1.0e+3\nf: -2E4\ng: v1e5\n")
    assert doc == {"a": 1e-05, "b": 8, "c": 2.5, "d": "1e-05", "e": 1000.0, "f": -20000.0, "g": "v1e5"}
    assert isinstance(doc["b"], int)


def test_a_dvc_sweep_value_loads_as_a_number(tmp_path):
    """`dvc exp run -S grpo_phase1.learning_rate=0.00001` rewrites params.yaml through DVC's own override code, which
    writes `1e-05`: the stages must read a number (they failed with "must be a number, got '1e-05'")."""
    from dvc.utils.hydra import apply_overrides

    path = tmp_path / "params.yaml"
    path.write_text((REPO / "params.yaml").read_text())
    apply_overrides(path, ["grpo_phase1.learning_rate=0.00001", "grpo_phase2.learning_rate=0.000006"])
    assert "learning_rate: 1e-05" in path.read_text()  # DVC's spelling, a string to a YAML 1.1 reader
    p = load_params(path)
    assert (p.grpo_phase1.learning_rate, p.grpo_phase2.learning_rate) == (1e-05, 6e-06)


def test_the_library_defaults_are_params_yaml_defaults():
    """`sqlenv eval`, `sqlenv serve` and the page build `EnvConfig()` and `SFTDataConfig()` without params.yaml: what
    an agent trained by the default pipeline met must be what they show it (a note on in training and off there
    would be an evaluation the training never saw)."""
    from dataclasses import asdict

    from sqlenv.data.sft_data import SFTDataConfig
    from sqlenv.env.environment import EnvConfig
    from sqlenv.env.rewards import RewardConfig

    p = load_params(REPO / "params.yaml")
    for section, library in (("env", EnvConfig()), ("rewards", RewardConfig()), ("sft_data", SFTDataConfig())):
        shown, defaults = section_dict(p, section)[section], asdict(library)
        assert {k: defaults[k] for k in shown} == shown, section
