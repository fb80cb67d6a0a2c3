"""Guards bench/bench_sft.py: both sides train the same trajectories, the shared-prefix side runs fewer tokens, the JSON holds what the README quotes."""

import json

from bench_scripts import load_bench


def test_bench_trains_both_sides_on_the_same_trajectories(tmp_path):
    bench = load_bench("bench_sft")
    out = tmp_path / "sft.json"
    result = bench.main(["--model", "tiny", "--data", str(tmp_path / "no-data"), "--steps", "1", "--repeats", "1",
                         "--out", str(out)])  # fmt: skip
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    for key in ("git_commit", "cpu_model", "nproc", "torch_threads", "loadavg_before", "loadavg_after", "dtype",
                "runs", "seconds_per_step_median", "ratio_shared_over_plain"):  # fmt: skip
        assert key in result, key
    plain, shared = sorted(result["runs"], key=lambda r: r["shared_prefix"])
    assert (plain["shared_prefix"], shared["shared_prefix"]) == (False, True)
    assert plain["trajectory_tokens"] == shared["trajectory_tokens"] == plain["tokens_run"]  # the same trajectories
    # one step of 2 trajectories (params.yaml: batch 1 x accumulation 2): the prefix runs once instead of twice
    assert shared["prefix_tokens"] > 100 and shared["tokens_run"] == plain["tokens_run"] - shared["prefix_tokens"]
    assert abs(shared["train_loss"] - plain["train_loss"]) < 1e-3 * abs(plain["train_loss"])
    assert len(plain["seconds_per_step"]) == len(shared["seconds_per_step"]) == 1
    assert result["ratio_shared_over_plain"]["tokens_run"] == shared["tokens_run"] / plain["tokens_run"]


def test_bench_varies_activation_checkpointing_with_the_shared_prefix_on(tmp_path):
    """`--vary activation_checkpointing`: both sides run the shared prefix (params.yaml), one with checkpointing; the
    same tokens and loss, a peak-memory ratio."""
    bench = load_bench("bench_sft")
    result = bench.main(["--model", "tiny", "--data", str(tmp_path / "no-data"), "--steps", "1", "--repeats", "1",
                         "--vary", "activation_checkpointing"])  # fmt: skip
    plain, on = sorted(result["runs"], key=lambda r: r["activation_checkpointing"])
    assert (plain["activation_checkpointing"], on["activation_checkpointing"]) == (False, True)
    assert plain["shared_prefix"] and on["shared_prefix"] and on["tokens_run"] == plain["tokens_run"]
    assert abs(on["train_loss"] - plain["train_loss"]) < 1e-3 * abs(plain["train_loss"])
    ratio = result["ratio_checkpointing_over_plain"]
    assert set(result["seconds_per_step_median"]) == {"checkpointing", "plain"} and ratio["tokens_run"] == 1.0
    assert ratio["peak_rss_mb"] == on["peak_rss_mb"] / plain["peak_rss_mb"]
