"""Guards bench/bench_onednn_cache.py: each side runs in its own process at its own capacity, on the same
trajectories, and the JSON holds what the README quotes."""

import json

from bench_scripts import load_bench


def test_bench_runs_each_capacity_in_its_own_process_on_the_same_trajectories(tmp_path):
    bench = load_bench("bench_onednn_cache")
    out = tmp_path / "onednn.json"
    result = bench.main(["--model", "tiny", "--data", str(tmp_path / "no-data"), "--steps", "1", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    for key in ("git_commit", "cpu_model", "nproc", "loadavg_before", "loadavg_after", "capacities", "runs", "median",
                "ratio_bounded_over_default"):  # fmt: skip
        assert key in result, key
    default, bounded = result["runs"]  # the first repeat runs the default first
    assert (default["capacity"], bounded["capacity"]) == (1024, 64)  # as set in each child process
    assert default["trajectory_tokens"] == bounded["trajectory_tokens"] and default["steps"] == bounded["steps"] == 1
    assert abs(default["train_loss"] - bounded["train_loss"]) <= 1e-6 * abs(default["train_loss"])
    assert len(default["step_peak_rss_gib"]) == 1 and default["peak_rss_gib"] > 0
    ratio = result["ratio_bounded_over_default"]["peak_rss_gib"]
    assert ratio == result["median"]["bounded"]["peak_rss_gib"] / result["median"]["default"]["peak_rss_gib"]
