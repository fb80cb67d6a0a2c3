"""MLflow tracking: one run per stage, tagged, nested under one parent per pipeline execution."""

import mlflow
import pytest

from pipeline import tracking


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    (tmp_path / "params.yaml").write_text("seed: 0\n")
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\n")
    for var in ("DVC_EXP_NAME", "SQLENV_PIPELINE_RUN", "MLFLOW_RUN_ID"):
        monkeypatch.delenv(var, raising=False)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")  # a test that only reads the store reads this one
    return tmp_path


def _runs():
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name(tracking.EXPERIMENT_NAME)
    return client.search_runs([exp.experiment_id])


def test_stage_runs_nest_under_one_parent_per_experiment(store, monkeypatch):
    monkeypatch.setenv("DVC_EXP_NAME", "exp-a")
    with tracking.stage_run("prepare", {"seed": 0}) as run:
        assert mlflow.active_run().info.run_id == run.info.run_id
        import os

        assert os.environ["MLFLOW_RUN_ID"] == run.info.run_id
    with tracking.stage_run("sft", {"sft": {"epochs": 1}}):
        tracking.log_metrics({"loss": {"final": 0.5}, "note": "text is skipped"})
    monkeypatch.setenv("DVC_EXP_NAME", "exp-b")
    with tracking.stage_run("prepare", {"seed": 1}):
        pass

    runs = _runs()
    parents = {r.info.run_id: r for r in runs if "sqlenv_pipeline" in r.data.tags}
    stages = [r for r in runs if "stage" in r.data.tags]
    assert {p.info.run_name for p in parents.values()} == {"exp-a", "exp-b"}
    assert len(stages) == 3
    by_parent = {}
    for r in stages:
        by_parent.setdefault(parents[r.data.tags["mlflow.parentRunId"]].info.run_name, []).append(r.data.tags["stage"])
    assert sorted(by_parent["exp-a"]) == ["prepare", "sft"] and by_parent["exp-b"] == ["prepare"]
    sft = next(r for r in stages if r.data.tags["stage"] == "sft")
    assert sft.data.metrics["loss/final"] == 0.5 and sft.data.params["sft.epochs"] == "1"
    for tag in ("git_commit", "params_hash", "dvc_exp_name", "dvc_exp_baseline_rev"):
        assert tag in sft.data.tags
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(next(iter(parents)))}
    assert artifacts == {"params.yaml", "dvc.lock"}


def test_failed_stage_run_is_marked_failed(store):
    with pytest.raises(RuntimeError):
        with tracking.stage_run("prepare", {"seed": 0}):
            raise RuntimeError("boom")
    (stage,) = [r for r in _runs() if "stage" in r.data.tags]
    assert stage.info.status == "FAILED"


def test_a_running_pipeline_does_not_make_its_commit_dirty(tmp_path, monkeypatch):
    """DVC rewrites dvc.lock and the stages write reports/ during a run: only other tracked files count."""
    import subprocess

    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@localhost"]
    (tmp_path / "reports").mkdir()
    for name in ("dvc.lock", "code.py", "reports/metrics.json"):
        (tmp_path / name).write_text("0\n")
    subprocess.run(git + ["init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(git + ["add", "-A"], cwd=tmp_path, check=True)
    subprocess.run(git + ["commit", "-qm", "c"], cwd=tmp_path, check=True)
    (tmp_path / "dvc.lock").write_text("1\n")
    (tmp_path / "reports/metrics.json").write_text("1\n")
    sha, dirty = tracking.git_commit()
    assert len(sha) == 40 and not dirty
    (tmp_path / "code.py").write_text("1\n")
    assert tracking.git_commit()[1]


def test_every_stage_run_records_the_machine_its_load_and_its_peak_memory(store):
    """Timings need their context: CPU model and threads as tags, load at start and end, peak RSS."""
    with tracking.stage_run("prepare", {"seed": 0}) as run:
        import torch  # noqa: F401  (imported during the stage, as the training stages do)
    data = mlflow.MlflowClient().get_run(run.info.run_id).data
    assert data.tags["system/cpu_model"] and int(data.tags["system/logical_cpus"]) >= 1
    assert int(data.tags["system/torch_threads"]) >= 1
    for key in ("system/load1_start", "system/load1_end", "system/load5_end"):
        assert data.metrics[key] >= 0
    assert data.metrics["system/peak_rss_mb"] >= 50  # this process holds torch by now


def test_a_failed_stage_still_records_its_peak_memory(store):
    with pytest.raises(RuntimeError), tracking.stage_run("sft", {"sft": {}}):
        raise RuntimeError("boom")
    (run,) = [r for r in _runs() if r.data.tags.get("stage") == "sft"]
    assert run.info.status == "FAILED" and run.data.metrics["system/peak_rss_mb"] > 0


def test_the_experiment_opens_in_the_model_training_view(store):
    """MLflow's UI reads `mlflow.experimentKind`; untagged, the evaluation's traces make it infer a GenAI
    experiment and list the stage runs under "Evaluations"."""
    with tracking.stage_run("prepare", {"seed": 0}):
        pass
    exp = mlflow.MlflowClient().get_experiment_by_name(tracking.EXPERIMENT_NAME)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    # A store made before the tag existed is tagged by the next stage that runs.
    mlflow.MlflowClient().delete_experiment_tag(exp.experiment_id, "mlflow.experimentKind")
    with tracking.stage_run("sft", {"seed": 0}):
        pass
    assert mlflow.MlflowClient().get_experiment(exp.experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"


_STOPPABLE = """
import sys, time
from pipeline import tracking
with tracking.stage_run("grpo_phase1", {"seed": 0}):
    print("ready", flush=True)
    time.sleep(60)
"""


def _with_parent_dispositions(ignored: bool):
    """The child's SIGINT and SIGTERM as its parent leaves them: ignored (a job started in the background —
    `nohup … &`, a non-interactive shell's `&` — starts with SIGINT ignored, and an ignored signal stays
    ignored across exec), or at their defaults (a foreground command). Set explicitly, so the test does not
    depend on how the suite itself was started."""
    import signal

    disposition = signal.SIG_IGN if ignored else signal.SIG_DFL

    def preexec() -> None:
        signal.signal(signal.SIGINT, disposition)
        signal.signal(signal.SIGTERM, disposition)

    return preexec


@pytest.mark.parametrize("how, parent", [("SIGTERM", "default"), ("SIGINT", "default"), ("SIGTERM", "ignored"),
                                         ("SIGINT", "ignored")])  # fmt: skip
def test_a_stopped_stage_ends_its_run_killed(store, how, parent):
    """`dvc queue kill` or Ctrl-C (SIGINT) and a shutdown (SIGTERM) end the stage's MLflow run KILLED, not
    RUNNING forever, and the process exits as a stopped process does (130 / 143) — also when its parent had
    the signal ignored (a background job: the stage would otherwise sleep on through Ctrl-C)."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-c", _STOPPABLE], cwd=root, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(root)},
                            preexec_fn=_with_parent_dispositions(parent == "ignored"))  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(getattr(signal, how))
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        code = None  # still running: the signal did not stop it
    finally:
        proc.kill()
    # SIGTERM exits 143 (`Terminated`); an unhandled KeyboardInterrupt makes Python end itself by SIGINT (a
    # shell reports 130).
    assert code == {"SIGTERM": 143, "SIGINT": -signal.SIGINT}[how], f"{how} with the parent's {parent}: exit {code}"
    (stage,) = [r for r in _runs() if "stage" in r.data.tags]
    assert stage.info.status == "KILLED"
    assert "system/peak_rss_mb" in stage.data.metrics
