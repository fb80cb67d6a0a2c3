"""Guards bench/bench_serve.py: served oracle episodes equal the in-process ones (no error, no mismatch), the JSON
holds what docs/serving.md quotes, and per-session sandboxes keep fast queries off a runaway's clock where a shared
sandbox makes them wait (the comparison the benchmark exists for)."""

import json
from pathlib import Path

import pytest

pytest.importorskip("openenv", reason="the serve extra is not installed")

from bench_scripts import load_bench  # noqa: E402
from test_serve import write_data  # noqa: E402


def test_bench_serve_small(tmp_path):
    data = write_data(tmp_path / "data")
    bench = load_bench("bench_serve")
    out = tmp_path / "serve.json"
    code = bench.main(["--data", str(data), "--split", "n50", "--sessions", "3", "--seconds", "2",
                       "--isolation-seconds", "1.5", "--timeout", "0.5", "--out", str(out)])  # fmt: skip
    result = json.loads(out.read_text())
    assert code == 0 and result["load"]["errors"] == 0 and result["load"]["mismatches"] == 0
    assert result["load"]["episodes"] > 0 and result["load"]["server_exit"] == 0
    assert {"p50", "p99", "max"} <= result["load"]["step_latency_ms"].keys() and result["cpu_model"]
    own, shared = result["isolation"]["own_sandboxes"]["fast"], result["isolation"]["shared_sandboxes"]["fast"]
    assert own["timed_out"] == shared["timed_out"] == 0
    # A shared sandbox: some fast query waited out most of a runaway's 0.5 s budget; own sandboxes: none did.
    assert shared["latency_ms"]["max"] >= 400 > own["latency_ms"]["p99"]


SPIDER = Path("/work/shared/spider")


@pytest.mark.skipif(not (SPIDER / "tables.json").is_file(), reason="no Spider folder at /work/shared/spider")
def test_bench_serve_takes_a_spider_folder(tmp_path):
    """`--data <a Spider folder>`: its one split (dev) is served without naming it; an unknown --split is a clear
    error naming the splits there are."""
    bench = load_bench("bench_serve")
    out = tmp_path / "serve.json"
    code = bench.main(["--data", str(SPIDER), "--questions", "3", "--sessions", "2", "--seconds", "1",
                       "--isolation-seconds", "1", "--timeout", "0.5", "--out", str(out)])  # fmt: skip
    result = json.loads(out.read_text())
    assert code == 0 and result["split"] == "dev" and result["questions"] == 3
    assert result["load"]["episodes"] > 0 and result["load"]["errors"] == result["load"]["mismatches"] == 0
    with pytest.raises(SystemExit, match="no split 'n200'.*dev"):
        bench.main(["--data", str(SPIDER), "--split", "n200", "--questions", "3"])
