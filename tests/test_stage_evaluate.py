"""The evaluate and report stages end to end on a small world: random and a tiny-model `base`, then the report."""

import importlib.util
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
import yaml
from stage_harness import run_stage, small_params, stage_env

from sqlenv.train.tiny_model import build_tiny_model


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("eval")
    params = small_params()
    params["evaluate"].update(batch_size=8, max_total_tokens=48)
    params["env"]["step_budget"] = 4
    run_stage(root, "prepare", params=params)
    build_tiny_model(root / "models" / "base")
    return root


RANDOM_N200 = ("--policy", "random", "--set", "n200", "--source", "data/databases")
RANDOM_N50 = ("--policy", "random", "--set", "n50", "--source", "reports/eval/random_n200/samples.jsonl")


def test_random_on_n200_and_n50_read_off_it(workdir):
    run_stage(workdir, "evaluate", *RANDOM_N200)
    run_stage(workdir, "evaluate", *RANDOM_N50)
    for name, n in (("random_n200", 30), ("random_n50", 10)):
        metrics = json.loads((workdir / "reports/eval" / name / "metrics.json").read_text())
        samples = (workdir / "reports/eval" / name / "samples.jsonl").read_text().splitlines()
        assert metrics["n"] == n == len(samples)
        assert metrics["metrics"]["n"] == n and metrics["question_ids"] == [json.loads(s)["question_id"] for s in samples]
        assert metrics["model"]["path"] is None and metrics["verifier_version"] and metrics["reward_mode"] == "binary"
    n50 = {json.loads(s)["question_id"]: s for s in (workdir / "reports/eval/random_n50/samples.jsonl").open()}
    n200 = {json.loads(s)["question_id"]: s for s in (workdir / "reports/eval/random_n200/samples.jsonl").open()}
    assert set(n50) < set(n200)
    assert all(n50[q] == n200[q] for q in n50)  # the same episodes, not a second run
    assert json.loads((workdir / "reports/eval/random_n50/metrics.json").read_text())["played_on"] == "n200"


def test_every_episode_is_an_mlflow_trace_of_its_run(workdir):
    """A trace per evaluated episode, linked to the evaluate run: a TOOL span per executed call with its
    arguments and observation, the verdict and reward as assessments."""
    import mlflow

    run_stage(workdir, "evaluate", *RANDOM_N200)
    mlflow.set_tracking_uri(f"sqlite:///{workdir / 'mlflow.db'}")
    client = mlflow.MlflowClient()
    experiment = client.get_experiment_by_name("sqlenv")
    (run,) = client.search_runs([experiment.experiment_id], "tags.policy = 'random' and tags.eval_set = 'n200'",
                                order_by=["attributes.start_time DESC"], max_results=1)  # fmt: skip
    traces = mlflow.search_traces(locations=[experiment.experiment_id], run_id=run.info.run_id, return_type="list")
    samples = [json.loads(s) for s in (workdir / "reports/eval/random_n200/samples.jsonl").read_text().splitlines()]
    assert len(traces) == len(samples) == 30
    by_question = {t.info.tags["question_id"]: t for t in traces}
    sample = samples[0]
    trace = by_question[sample["question_id"]]
    tools = [s for s in trace.data.spans if s.span_type == "TOOL"]
    executed = [c for m in sample["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
    assert [s.name for s in tools] == [c["function"]["name"] for c in executed][: len(tools)] and tools
    tool_messages = [m["content"] for m in sample["messages"] if m["role"] == "tool"]
    assert [s.outputs for s in tools] == tool_messages[: len(tools)]
    assessments = {a.name: a for a in trace.info.assessments}
    assert assessments["correct"].value is sample["correct"] and assessments["reward"].value == sample["reward"]
    assert trace.info.tags["policy"] == "random" and trace.info.tags["set"] == "n200"


def test_model_policy_and_report(workdir):
    run_stage(workdir, "evaluate", "--policy", "base", "--set", "n50", "--source", "models/base")
    metrics = json.loads((workdir / "reports/eval/base_n50/metrics.json").read_text())
    assert metrics["set"] == "n50" and metrics["n"] == 10
    assert metrics["model"]["fingerprint"] and metrics["settings"]["gen"]["do_sample"] is False
    assert metrics["settings"]["parser"] == "lenient" and metrics["settings"]["max_total_tokens"] == 48
    assert metrics["settings"]["backend"] == "hf"
    with sqlite3.connect(workdir / "mlflow.db") as con:
        tags = con.execute("SELECT t.value FROM tags t JOIN runs r ON r.run_uuid = t.run_uuid "
                           "WHERE r.name = 'evaluate@base_n50' AND t.key = 'backend'").fetchall()  # fmt: skip
    assert tags == [("hf",)]
    record = json.loads((workdir / "reports/eval/base_n50/samples.jsonl").read_text().splitlines()[0])
    assert [m["role"] for m in record["messages"][:2]] == ["system", "user"]
    assert not (workdir / "reports/eval/base_n200").exists()

    run_stage(workdir, "evaluate", *RANDOM_N200)  # random_n50 pairs with base_n50
    run_stage(workdir, "evaluate", *RANDOM_N50)
    run_stage(workdir, "report")
    report = (workdir / "reports/report.md").read_text()
    table = report.split("## Accuracy and behaviour by policy")[1].split("## Paired comparisons")[0]
    m = metrics["metrics"]
    row = next(line for line in table.splitlines() if line.startswith("| n50 | base |"))
    assert f"| {m['n']} | {100 * m['accuracy']:.1f} % [" in row and "| lenient |" in row
    assert "| n50 | random |" in table and "Stale" not in report
    assert "every model policy was evaluated at 48 completion tokens" in report


def test_missing_model_fails_cleanly(workdir):
    proc = run_stage(workdir, "evaluate", "--policy", "sft", "--set", "n200", "--source", "models/sft",
                     expect_ok=False)
    assert proc.returncode == 1 and "models/sft" in proc.stderr and "Traceback" not in proc.stderr
    assert not (workdir / "reports/eval/sft_n200").exists()
    proc = run_stage(workdir, "evaluate", "--policy", "sft", "--set", "n50",
                     "--source", "reports/eval/sft_n200/samples.jsonl", expect_ok=False)
    assert proc.returncode == 1 and "sft_n200/samples.jsonl" in proc.stderr


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_vllm_backend_without_vllm_fails_before_the_run(workdir):
    params = yaml.safe_load((workdir / "params.yaml").read_text())
    try:
        proc = run_stage(workdir, "evaluate", "--policy", "base", "--set", "n50", "--source", "models/base",
                         params={**params, "evaluate": {**params["evaluate"], "backend": "vllm"}}, expect_ok=False)  # fmt: skip
    finally:
        (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "evaluate.backend: backend 'vllm' needs vLLM" in proc.stderr and 'pip install -e ".[vllm]"' in proc.stderr


def test_source_is_the_model_played_and_a_foreign_model_is_stale(workdir):
    """`--source` is honoured: `sft` played from the base folder records that folder, and the report, whose
    live sft model is another one, leaves it out as stale."""
    from sqlenv.provenance import model_fingerprint
    from sqlenv.train.tiny_model import build_tiny_model

    build_tiny_model(workdir / "models" / "sft", seed=1)
    run_stage(workdir, "evaluate", "--policy", "sft", "--set", "n50", "--source", "models/base")
    metrics = json.loads((workdir / "reports/eval/sft_n50/metrics.json").read_text())
    # The base folder's own fingerprint, not base_n50's metrics: under xdist another worker may have played that.
    base = model_fingerprint(workdir / "models" / "base")
    assert metrics["model"]["path"] == "models/base" and metrics["model"]["fingerprint"] == base
    run_stage(workdir, "report")
    report = (workdir / "reports/report.md").read_text()
    assert "Stale, left out: `sft_n50`: model fingerprint" in report
    assert "| n50 | sft |" not in report


def test_a_model_policy_returns_freed_heap_memory_after_every_batch(workdir, monkeypatch):
    """The stage passes a `sqlenv.train.heap.Trimmer` as `after_batch` (evaluate@base_3shot_n50: 7.1-8.6 GiB
    untrimmed, 5.2 trimmed after every batch; `play_rollouts` calls it,
    tests/test_rollout.py::test_after_batch_runs_after_every_batch)."""
    import sys

    import stages.evaluate as stage
    from sqlenv.train import heap

    class Played(Exception):
        pass

    seen = {}

    def play(*args, **kwargs):
        seen.update(kwargs)
        raise Played

    monkeypatch.chdir(workdir)
    for name, value in stage_env(workdir).items():  # the environment run_stage gives a stage's process
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(stage, "play", play)
    monkeypatch.setattr(sys, "argv", ["stages.evaluate", "--policy", "base_1shot", "--set", "n50", "--source", "models/base"])
    with pytest.raises((Played, SystemExit)):
        stage.main()
    trimmer = seen["after_batch"]
    assert isinstance(trimmer, heap.Trimmer) and trimmer.above_bytes == stage.TRIM_ABOVE_BYTES > 0


def test_an_empty_indomain_probe_is_recorded_without_playing(workdir, tmp_path):
    """data.indomain: 0 leaves data/questions/indomain.jsonl empty: the evaluation records n = 0 (no model run) and
    the report notes the probe was off; any other empty set is still an error."""
    probe = workdir / "data/questions/indomain.jsonl"
    kept = probe.read_text()
    try:
        probe.write_text("")
        run_stage(workdir, "evaluate", "--policy", "base", "--set", "indomain", "--source", "models/base")
        metrics = json.loads((workdir / "reports/eval/base_indomain/metrics.json").read_text())
        assert metrics["n"] == 0 and metrics["model"]["fingerprint"] and metrics["metrics"]["n"] == 0
        assert (workdir / "reports/eval/base_indomain/samples.jsonl").read_text() == ""
        empty = workdir / "data/questions/empty.jsonl"
        empty.write_text("")
        proc = run_stage(workdir, "evaluate", "--policy", "base", "--set", "empty", "--source", "models/base", expect_ok=False)
        assert proc.returncode != 0 and "no questions" in proc.stderr
    finally:
        probe.write_text(kept)
        (workdir / "data/questions/empty.jsonl").unlink(missing_ok=True)
        shutil.rmtree(workdir / "reports/eval/base_indomain", ignore_errors=True)
