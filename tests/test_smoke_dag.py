"""The whole DAG on the smoke profile (tiny world, tiny random model): repro, a no-op repro, a GRPO sweep, a run in
the other environment mode (full schema, SQL answers scored by EX) — every stage logging to a real `mlflow server`
(runs, metrics and proxied artifacts found through its REST API, nothing written to a local MLflow path) — and the
results shared through a DVC remote (`dvc push`, then `dvc pull` into a fresh clone restores them byte for byte)."""

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
STAGES = {"prepare", "prepare_model", "sft_data", "sft", "grpo_phase1", "grpo_phase2", "report"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.loads(r.read())


@pytest.fixture
def mlflow_server(tmp_path):
    """`mlflow server` on 127.0.0.1 with its own backend store and artifact root; stopped and removed after."""
    home = tmp_path / "mlflow-server"
    home.mkdir()
    port = _free_port()
    cmd = [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
           "--backend-store-uri", f"sqlite:///{home / 'store.db'}", "--artifacts-destination", str(home / "artifacts"),
           "--workers", "1"]  # fmt: skip
    log = (home / "server.log").open("w")  # a file, not a pipe: an unread pipe fills and blocks the server
    proc = subprocess.Popen(cmd, cwd=home, stdout=log, stderr=subprocess.STDOUT, text=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"mlflow server exited: {(home / 'server.log').read_text()[-2000:]}")
                time.sleep(1)
        else:
            pytest.fail("mlflow server did not answer /health within 120 s")
        yield uri, home
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        shutil.rmtree(home, ignore_errors=True)


def test_smoke_dag(tmp_path, mlflow_server):
    uri, server_home = mlflow_server
    out = tmp_path / "smoke.json"
    repo = tmp_path / "repo"
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.smoke", "--keep", str(repo), "--json", str(out), "--tracking-uri", uri,
         "--remote", str(tmp_path / "dvc-remote")],
        cwd=REPO, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    result = json.loads(out.read_text())
    ran = set(result["stages_run"])
    assert STAGES <= ran
    assert {"evaluate@random_n200", "evaluate@random_n50", "evaluate@sft_n50", "evaluate@grpo_phase2_n50"} <= ran
    assert "grpo_phase1" in result["sweep_stages_run"] and "prepare" not in result["sweep_stages_run"]
    assert {"sft_data", "sft", "grpo_phase2", "report"} <= set(result["modes_stages_run"])
    assert "prepare" not in result["modes_stages_run"]
    report = (repo / "reports" / "report.md").read_text()
    assert "grpo_phase2" in report and "| Environment mode | schema=full answer=sql |" in report
    assert "SQL answers, accuracy = execution accuracy (EX)" in report
    costs = report.split("## Cost per stage", 1)[1].split("\n## ", 1)[0]
    assert all(f"| {stage} | " in costs for stage in ("prepare", "prepare_model", "sft_data", "sft"))  # every stage's time

    # The DVC remote: pushed and pulled into a fresh clone, every output byte-identical (checked by the runner).
    assert result["remote"]["files"] > 20 and (repo.parent / "repo-clone" / "models" / "grpo_phase2").is_dir()

    # MLflow: everything went through the server; nothing local in the repo.
    for local in ("mlflow.db", "mlartifacts", "mlruns"):
        assert not (repo / local).exists(), f"{local} written locally despite MLFLOW_TRACKING_URI={uri}"
    api = f"{uri}/api/2.0/mlflow"
    experiment = _get(f"{api}/experiments/get-by-name?experiment_name=sqlenv")["experiment"]
    assert experiment["artifact_location"].startswith("mlflow-artifacts:")
    runs = _post(f"{api}/runs/search", {"experiment_ids": [experiment["experiment_id"]], "max_results": 500})["runs"]
    tags = [{t["key"]: t["value"] for t in r["data"].get("tags", [])} for r in runs]
    assert STAGES <= {t.get("stage") for t in tags}
    assert {t.get("env_schema") for t in tags if t.get("stage") == "sft_data"} == {"hidden", "full"}
    sft = next(r for r, t in zip(runs, tags) if t.get("stage") == "sft")
    assert any(m["key"] == "train_loss" or m["key"].startswith("loss") for m in sft["data"].get("metrics", []))
    report_run = next(r for r, t in zip(runs, tags) if t.get("stage") == "report" and t.get("env_schema") == "full")
    run_id = report_run["info"]["run_id"]
    listed = _get(f"{api}/artifacts/list?run_id={run_id}")
    assert "report.md" in {f["path"] for f in listed.get("files", [])}
    query = urllib.parse.urlencode({"path": "report.md", "run_uuid": run_id})
    with urllib.request.urlopen(f"{uri}/get-artifact?{query}", timeout=30) as r:
        assert r.read().decode().startswith("# sqlenv report")
    assert any((server_home / "artifacts").rglob("report.md"))  # stored by the server, under its own root
