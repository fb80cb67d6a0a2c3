"""Guards bench/bench_rollout.py: every side plays the same episodes, the JSON holds what the README quotes and
says where it was measured, and timing the whole-turn batch leaves the runner's continuous batching on."""

import json

from sqlenv.decode import ModelGenerator
from sqlenv.train.tiny_model import build_tiny_model

from bench_scripts import load_bench


def test_bench_plays_the_same_episodes_on_every_side(tmp_path):
    bench = load_bench("bench_rollout")
    tiny = build_tiny_model(tmp_path / "tiny")
    out = tmp_path / "rollout.json"
    result = bench.main(["--model", str(tiny), "--dtype", "float32", "--n", "3", "--batch-size", "2",
                         "--max-new-tokens", "8", "--max-turns", "2", "--turns", "--out", str(out)])  # fmt: skip
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    for key in ("git_commit", "cpu_model", "nproc", "torch_threads", "loadavg_before", "loadavg_after",
                "sequential", "batched", "batched_turns", "ratio", "continuous_ratio"):  # fmt: skip
        assert key in result, key
    assert result["n"] == 3 and result["batched"]["generated_tokens"] > 0
    # fp32: greedy tokens do not depend on the batch, so every side plays the very same episodes
    assert result["transcript_agreement"] == result["turns_transcript_agreement"] == 1.0
    assert ModelGenerator.generate_some is not None  # restored after the whole-turn side


def test_bench_times_drafting_against_none_on_the_same_episodes(tmp_path):
    bench = load_bench("bench_rollout")
    tiny = build_tiny_model(tmp_path / "tiny")
    result = bench.main(["--model", str(tiny), "--dtype", "float32", "--n", "3", "--batch-size", "2",
                         "--max-new-tokens", "8", "--max-turns", "2", "--skip-sequential", "--drafting", "2"])  # fmt: skip
    assert result["draft_tokens"] == 8 and len(result["drafting_pairs"]) == 2 and result["draft_ratio"] > 0
    # fp32, greedy: drafting keeps the argmax tokens, so both sides play the very same episodes
    assert all(p["transcript_agreement"] == 1.0 for p in result["drafting_pairs"])
    sampled = bench.main(["--model", str(tiny), "--dtype", "float32", "--n", "3", "--batch-size", "2",
                          "--max-new-tokens", "8", "--max-turns", "2", "--skip-sequential", "--temperature", "0.9"])  # fmt: skip
    assert sampled["temperature"] == 0.9 and sampled["batched"]["generated_tokens"] > 0


def test_bench_refuses_a_missing_questions_file(tmp_path):
    bench = load_bench("bench_rollout")
    try:
        bench.main(["--questions", str(tmp_path / "none.jsonl")])
    except SystemExit as exc:
        assert "no questions file" in str(exc.code)
    else:
        raise AssertionError("a missing questions file must fail")
