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
