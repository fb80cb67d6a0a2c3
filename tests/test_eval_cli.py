"""Guards `sqlenv eval`: any model folder on a questions file or a Spider folder, the evaluate stage's result
files, MLflow logging when a tracking URI is set, and clear errors (exit 2) for bad input."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest
from fixtures_env import QUESTIONS, concert_db_dir, spider_dir  # noqa: F401  (fixtures)

from sqlenv.train.tiny_model import build_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("eval-cli") / "tiny")


@pytest.fixture
def questions_file(tmp_path) -> Path:
    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps(q.to_dict()) + "\n" for q in QUESTIONS))
    return path


def run(argv, capsys):
    out = io.StringIO()
    code = _main_with(out, ["eval", *argv, "--no-progress", "--batch-size", "4", "--max-total-tokens", "24"])
    return code, out.getvalue(), capsys.readouterr().err


def _main_with(out, argv):
    from pipeline.cli import EVAL
    from sqlenv import cli as domain_cli

    return domain_cli.main(argv, stdout=out, extra={"eval": EVAL})


def test_questions_file_writes_the_evaluate_stage_result(tiny, questions_file, concert_db_dir, tmp_path, capsys):  # noqa: F811
    out_dir = tmp_path / "result"
    code, out, err = run(["--model", str(tiny), "--questions", str(questions_file), "--db-dir", str(concert_db_dir),
                          "--out", str(out_dir), "--name", "tiny_fixture"], capsys)
    assert code == 0, err
    summary = json.loads(out)
    doc = json.loads((out_dir / "metrics.json").read_text())
    samples = [json.loads(line) for line in (out_dir / "samples.jsonl").read_text().splitlines()]
    assert summary["n"] == doc["n"] == len(samples) == 3 and doc["policy"] == "tiny_fixture"
    assert doc["question_ids"] == [q.id for q in QUESTIONS] == [s["question_id"] for s in samples]
    m = doc["metrics"]
    assert m["accuracy"] == 0.0 and m["accuracy_low"] == 0.0 and 0.5 < m["accuracy_high"] < 0.6  # Wilson 0/3
    assert doc["model"]["path"] == str(tiny) and len(doc["model"]["fingerprint"]) == 12
    assert doc["settings"]["parser"] == "strict" and doc["settings"]["max_total_tokens"] == 24
    assert doc["reward_mode"] == "binary" and doc["env"]["step_budget"] == 15


def test_subset_and_mlflow_logging(tiny, questions_file, concert_db_dir, tmp_path, capsys):  # noqa: F811
    store = tmp_path / "mlflow.db"
    code, out, err = run(["--model", str(tiny), "--questions", str(questions_file), "--db-dir", str(concert_db_dir),
                          "--n", "2", "--out", str(tmp_path / "r"), "--tracking-uri", f"sqlite:///{store}",
                          "--parser", "lenient"], capsys)  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["n"] == 2
    con = sqlite3.connect(store)
    (run_id,) = con.execute("SELECT run_uuid FROM runs WHERE name = ?", (f"{tiny.name}_questions",)).fetchone()
    metrics = dict(con.execute("SELECT key, value FROM latest_metrics WHERE run_uuid = ?", (run_id,)).fetchall())
    assert metrics["n"] == 2 and "accuracy_high" in metrics and "by_hardness/easy/n" in metrics
    params = dict(con.execute("SELECT key, value FROM params WHERE run_uuid = ?", (run_id,)).fetchall())
    assert params["settings.parser"] == "lenient"


def test_spider_folder_through_the_loader_and_oracle_gate(tiny, spider_dir, tmp_path, capsys):  # noqa: F811
    code, out, err = run(["--model", str(tiny), "--data", str(spider_dir), "--n", "4", "--out", str(tmp_path / "s")],
                         capsys)  # fmt: skip
    assert code == 0, err
    doc = json.loads((tmp_path / "s" / "metrics.json").read_text())
    assert doc["n"] == 4 and doc["set"] == spider_dir.resolve().name and doc["data"]["pool"] > 500


@pytest.mark.parametrize(
    "case, needle",
    [
        ("missing model", "no model folder at"),
        ("not a model", "is not a model folder"),
        ("unknown db_id", "no database for db_id(s) ['nowhere']"),
        ("malformed line", "questions.jsonl:2: not valid JSON"),
        ("no source", "give --data DIR"),
        ("agent shots", "--shots is for --protocol text_to_sql"),
        ("text_to_sql schema", "--schema and --metric are the agent's"),
    ],
)
def test_bad_input_is_a_clear_error(tiny, questions_file, concert_db_dir, tmp_path, capsys, case, needle):  # noqa: F811
    model, qfile = str(tiny), questions_file
    if case == "missing model":
        model = str(tmp_path / "nothing-here")
    elif case == "not a model":
        model = str(tmp_path)
    elif case == "unknown db_id":
        qfile.write_text(json.dumps({**QUESTIONS[0].to_dict(), "db_id": "nowhere"}) + "\n")
    elif case == "malformed line":
        qfile.write_text(json.dumps(QUESTIONS[0].to_dict()) + "\n{not json\n")
    source = [] if case == "no source" else ["--questions", str(qfile), "--db-dir", str(concert_db_dir)]
    source += {"agent shots": ["--shots", "2"], "text_to_sql schema": ["--protocol", "text_to_sql", "--metric", "ex"]
               }.get(case, [])  # fmt: skip
    code, out, err = run(["--model", model, *source, "--out", str(tmp_path / "bad")], capsys)
    assert code == 2 and needle in err and out == ""
    assert not (tmp_path / "bad").exists()  # nothing half-written


def test_full_schema_and_ex_metric_play_the_agent_in_that_mode(tiny, questions_file, concert_db_dir, tmp_path, capsys):  # noqa: F811
    code, out, err = run(["--model", str(tiny), "--questions", str(questions_file), "--db-dir", str(concert_db_dir),
                          "--schema", "full", "--metric", "ex", "--out", str(tmp_path / "full_ex")], capsys)  # fmt: skip
    assert code == 0, err
    summary = json.loads(out)
    assert summary["name"] == f"{tiny.name}_questions_full_ex" and summary["mode"] == "schema=full answer=sql"
    assert summary["metric"] == "ex" and "value_accuracy" in summary
    doc = json.loads((Path(summary["out"]) / "metrics.json").read_text())
    assert (doc["env"]["schema"], doc["env"]["answer"]) == ("full", "sql")
    assert {"value_accuracy", "value_accuracy_low", "value_accuracy_high"} <= set(doc["metrics"])
    samples = [json.loads(x) for x in (Path(summary["out"]) / "samples.jsonl").read_text().splitlines()]
    assert all("Database schema:\nCREATE TABLE" in s["messages"][1]["content"] for s in samples)
    from sqlenv.env import prompts

    assert all(s["messages"][0]["content"] == prompts.system_prompt("full", "sql") for s in samples)


def test_models_load_on_the_device_evaluation_picks(tiny, monkeypatch):
    """One device choice for every evaluation load: CUDA when torch sees a GPU, `SQLENV_DEVICE` overriding."""
    import torch

    from sqlenv.eval.harness import device, load_model

    monkeypatch.delenv("SQLENV_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert device() == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device() == "cpu"
    monkeypatch.setenv("SQLENV_DEVICE", "meta")  # a device every torch build has: the load must honour it
    model, _ = load_model(tiny, "float32")
    assert model.device.type == "meta"
