"""bench/gpu_check.py, the script prepared for a lent GPU machine, runs here on the CPU part for part, so the day a
GPU is lent it is not the first run. On the CPU the policy picks the episode loop; the script also trains the
other path's step."""

from __future__ import annotations

import json

from bench_scripts import load_bench


def test_gpu_check_runs_every_part_on_the_cpu(tmp_path):
    out = tmp_path / "gpu_check.json"
    assert load_bench("gpu_check").main(["--out", str(out), "--device", "cpu"]) == 0
    result = json.loads(out.read_text())
    for part in ("policy", "evaluate", "sft", "grpo"):
        assert "error" not in result[part] and "skipped" not in result[part], (part, result[part])
    assert result["policy"]["rows"]["1proc_none"]["rollout_decoder"] == "sqlenv"
    assert result["policy"]["rows"]["1proc_colocate"]["rollout_decoder"] == "trl"
    assert result["evaluate"]["episodes"] == 24 and result["evaluate"]["episodes_per_s"] > 0
    assert result["sft"]["steps"] == 2 and all(loss > 0 for loss in result["sft"]["loss"])
    assert result["grpo"]["auto"]["rollout_decoder"] == "sqlenv" and result["grpo"]["sqlenv"]["step_s"] > 0
