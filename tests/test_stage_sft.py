"""The prepare_model → sft_data → sft stages as DVC runs them, on a tiny model: outs, metrics, MLflow runs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import mlflow
import pytest
from stage_harness import run_stage, small_params

from sqlenv.data.sft_data import KINDS
from sqlenv.train.tiny_model import build_tiny_model


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-qwen2")


def sft_params(tiny: Path, **overrides) -> dict:
    p = small_params(**overrides)
    p["model"]["base"] = str(tiny)  # a local HF folder instead of the offline GGUF
    p["sft"].update(max_examples=6, epochs=1, batch_size=1, gradient_accumulation_steps=2, max_length=4096,
                    logging_steps=1)
    return p


def _runs(workdir: Path, stage: str):
    mlflow.set_tracking_uri(f"sqlite:///{workdir / 'mlflow.db'}")
    return mlflow.search_runs(experiment_names=["sqlenv"], filter_string=f"tags.stage = '{stage}'", output_format="list")


def test_prepare_model_sft_data_sft(tmp_path, tiny_model):
    work = tmp_path / "w"
    params = sft_params(tiny_model)
    run_stage(work, "prepare", params=params)

    run_stage(work, "prepare_model")
    base = json.loads((work / "reports/prepare_model/metrics.json").read_text())
    assert (work / "models/base/config.json").is_file()
    assert base["source"] == "local" and base["chat_template"] == "qwen2_5" and base["parameters"] > 0
    assert len(base["fingerprint"]) == 12
    # every stage's seconds under one name (the report's cost table reads `wall_time_s` only)
    assert base["wall_time_s"] >= 0 and base["saved_dtype"] and "dtype" not in base

    run_stage(work, "sft_data")
    records = [json.loads(line) for line in (work / "data/sft/train.jsonl").read_text().splitlines()]
    data = json.loads((work / "reports/sft_data/metrics.json").read_text())
    assert data["kept"] == len(records) == data["candidates"] - sum(data["dropped"].values())
    assert set(data["by_kind"]) == set(KINDS) and data["by_kind"]["recovery"] > 0
    assert {k for k, n in data["by_kind"].items() if n} <= {"plain", "sample", "recovery"}  # the exploring kinds: off by default

    proc = run_stage(work, "sft")
    assert "Traceback" not in proc.stderr
    out = work / "models/sft"
    assert (out / "model.safetensors").is_file() and (out / "chat_template.jinja").is_file()
    assert not list(out.glob("adapter_*")), "adapter files must not be left in the merged model"
    assert not list((work / "models").glob(".sft*")), "no temporary folder left next to the out"
    metrics = json.loads((work / "reports/sft/metrics.json").read_text())
    assert metrics["dataset"]["examples"] == 6 and metrics["steps"] == 3
    assert metrics["wall_time_s"] > 0 and metrics["seconds_per_step"] > 0 and metrics["dtype"]["dtype"]
    assert "post_check" not in metrics  # training never plays evaluation questions (evaluate@sft_n200 does)
    assert metrics["fingerprint"] == json.loads((out / "provenance.json").read_text())["fingerprint"]
    with open(work / "reports/sft/loss.csv") as f:
        curve = list(csv.DictReader(f))
    assert [int(r["step"]) for r in curve] == [1, 2, 3] and all(float(r["loss"]) > 0 for r in curve)

    # One run per stage; the trainer's loss curve landed in the sft stage's own run, which finished.
    (run,) = _runs(work, "sft")
    assert run.info.status == "FINISHED"
    history = mlflow.MlflowClient().get_metric_history(run.info.run_id, "loss")
    assert [m.step for m in history] == [1, 2, 3]
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert "metrics.json" in artifacts and not [a for a in artifacts if "post_check" in a]
    everything = mlflow.search_runs(experiment_names=["sqlenv"], output_format="list")
    parents = {r.data.tags.get("mlflow.parentRunId") for r in everything}
    stray = [r.info.run_name for r in everything if "stage" not in r.data.tags and r.info.run_id not in parents]
    assert stray == []  # the trainer's callback started no run of its own
    for stage in ("prepare_model", "sft_data"):
        assert len(_runs(work, stage)) == 1


def test_prepare_model_fails_clearly_on_a_missing_folder(tmp_path, tiny_model):
    params = sft_params(tiny_model)
    params["model"]["base"] = str(tmp_path / "no-such-model")
    proc = run_stage(tmp_path / "w", "prepare_model", params=params, expect_ok=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "no-such-model" in proc.stderr
    assert not (tmp_path / "w/models/base").exists()


def test_sft_fails_clearly_without_the_base_model(tmp_path, tiny_model):
    work = tmp_path / "w"
    (work / "data/sft").mkdir(parents=True)
    (work / "data/sft/train.jsonl").write_text("")
    proc = run_stage(work, "sft", params=sft_params(tiny_model), expect_ok=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "models/base" in proc.stderr and "prepare_model" in proc.stderr
    assert not (work / "models/sft").exists()
