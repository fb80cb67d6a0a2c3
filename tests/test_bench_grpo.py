"""Guards bench/bench_grpo.py: both configurations really train, counts come from the rollouts seen, ratios and projections from them."""

import json
from pathlib import Path

import pytest
import yaml

from bench_scripts import load_bench

REPO = Path(__file__).resolve().parent.parent


def test_overrides_edit_a_copy_and_reject_unknown_keys():
    bench = load_bench("bench_grpo")
    params = {"grpo": {"batch_size": 2}, "grpo_phase1": {"max_steps": 3}}
    out = bench.with_overrides(params, {"grpo": {"batch_size": 4}})
    assert out == {"grpo": {"batch_size": 4}, "grpo_phase1": {"max_steps": 3}} and params["grpo"]["batch_size"] == 2
    with pytest.raises(KeyError):
        bench.with_overrides(params, {"grpo": {"batch_sise": 4}})


def test_bench_measures_both_configs_and_derives_ratios(tmp_path):
    bench = load_bench("bench_grpo")
    # A "default" unlike the baseline: 2 questions x 2 generations per step (batch 2, accumulation 2),
    # 3 + 5 steps; the baseline is 1 question x 4 generations, 6 + 4 steps. 4 rollouts per step in both.
    p = yaml.safe_load((REPO / "params.yaml").read_text())
    p["model"]["dtype"] = "float32"
    p["grpo"].update(batch_size=2, gradient_accumulation_steps=2, lora_r=4, lora_alpha=8)
    p["grpo_phase1"].update(num_generations=2, max_steps=3)
    p["grpo_phase2"].update(num_generations=2, max_steps=5)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(p))
    out = tmp_path / "bench.json"
    result = bench.main(["--model", "tiny", "--params", str(params), "--data", str(tmp_path / "no-data"), "--steps", "1",
                         "--max-completion-length", "8", "--out", str(out)])  # fmt: skip

    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    for key in ("model", "git_commit", "cpu_model", "nproc", "torch_threads", "loadavg_before", "loadavg_after",
                "peak_rss_mb_process", "questions", "configs", "ratio_default_over_baseline"):  # fmt: skip
        assert key in result, key
    base, default = result["configs"]["baseline"], result["configs"]["default"]
    assert base["batch"]["prompts_per_step"] == 1 and default["batch"]["prompts_per_step"] == 2
    assert base["max_completion_length"] == default["max_completion_length"] == 8
    for run, questions in ((base, 1), (default, 2)):
        assert len(run["seconds_per_step"]) == 1 and run["seconds_per_step"][0] > 0
        assert run["rollouts_per_step"] == [4]  # counted from the generation, not from the plan
        assert run["distinct_questions_per_step"] == [len(set(run["question_ids"][0]))] == [questions]
        minutes = sum(run["seconds_per_step"]) / 60
        assert run["rollouts_per_min"] == pytest.approx(4 / minutes)
        assert run["distinct_questions_per_min"] == pytest.approx(questions / minutes)
        assert run["peak_rss_mb"] is None or run["peak_rss_mb"] > 0
        # each step split into generating + scoring its rollouts and the rest (loss passes, optimizer)
        assert len(run["generation_s_per_step"]) == 1 and 0 < run["generation_s_per_step"][0] < run["seconds_per_step"][0]
        assert run["training_s_per_step"][0] == pytest.approx(run["seconds_per_step"][0] - run["generation_s_per_step"][0], abs=1e-3)

    ratio = result["ratio_default_over_baseline"]
    assert ratio["rollouts_per_min"] == pytest.approx(base["seconds_per_step_mean"] / default["seconds_per_step_mean"])
    assert ratio["distinct_questions_per_min"] == pytest.approx(
        default["distinct_questions_per_min"] / base["distinct_questions_per_min"]
    )
    # Fixture pools: 16 easy questions (phase 1), 24 easy + medium (phase 2).
    assert base["projected"]["wall_s"] == pytest.approx(base["seconds_per_step_mean"] * (6 + 4))
    assert default["projected"]["wall_s"] == pytest.approx(default["seconds_per_step_mean"] * (3 + 5))
    assert base["projected"]["distinct_questions_expected"] == pytest.approx(6 + 4 * (1 - 6 / 24))
    assert default["projected"]["distinct_questions_expected"] == pytest.approx(6 + 10 * (1 - 6 / 24))
    assert default["projected"]["distinct_questions_upper"] == 16
