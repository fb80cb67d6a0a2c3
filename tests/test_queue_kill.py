"""`dvc queue kill` on a real queued experiment ends the stage's MLflow run KILLED.

A throw-away git + DVC project with one stage whose command runs a stage body under `pipeline.tracking.stage_run`
(the code path every real stage uses) against a SQLite MLflow store, and sleeps until it is stopped. It is queued
with `dvc exp run --queue`, run by a real celery worker (`dvc queue start`) and stopped with `dvc queue kill`,
which interrupts the experiment's process group with SIGINT (dvc-task's `ProcessManager.interrupt`; `--force`
SIGKILLs DVC's executor alone and leaves the stage running). The queue is started with SIGINT ignored,
as it is under a background job (`nohup make test &`, a non-interactive shell's `&`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow

from pipeline import tracking

ROOT = Path(__file__).resolve().parents[1]

STAGE = """
import os, time
from pathlib import Path
from pipeline import tracking

with tracking.stage_run("sleeper", {"seed": 0}):
    Path(os.environ["SLEEPER_PID_FILE"]).write_text(str(os.getpid()))
    time.sleep(120)  # far beyond the test's own bounded waits: only a stop ends it early
Path("out.txt").write_text("done\\n")
"""

DVC_YAML = """stages:
  sleeper:
    cmd: python stage.py
    deps: [stage.py]
    outs: [out.txt]
"""


def _wait_for(what: str, check, timeout: float, proc_log: Path | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    log = proc_log.read_text()[-3000:] if proc_log is not None and proc_log.is_file() else ""
    raise AssertionError(f"gave up waiting {timeout:.0f} s for {what}\n{log}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").is_dir() and "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_dvc_queue_kill_ends_the_stage_run_killed(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "stage.py").write_text(STAGE)
    (repo / "dvc.yaml").write_text(DVC_YAML)
    (repo / "params.yaml").write_text("seed: 0\n")
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    pid_file = tmp_path / "sleeper.pid"
    inherited = ("MLFLOW_RUN_ID", "DVC_ROOT", "DVC_EXP_NAME", "SQLENV_PIPELINE_RUN", "SQLENV_PARAMS")
    env = {key: value for key, value in os.environ.items() if key not in inherited}
    env.update(
        PATH=str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""),
        PYTHONPATH=str(ROOT), MLFLOW_TRACKING_URI=store, SLEEPER_PID_FILE=str(pid_file), DVC_NO_ANALYTICS="1",
        GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@localhost", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@localhost",
    )

    def run(*cmd: str, **kwargs) -> str:
        proc = subprocess.run(cmd, cwd=repo, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=60, **kwargs)  # fmt: skip
        assert proc.returncode == 0, f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout + proc.stderr

    run("git", "init", "-q")
    run("dvc", "init", "-q")
    run("git", "add", "-A")
    run("git", "commit", "-qm", "one stage")
    run("dvc", "exp", "run", "--queue", "-n", "sleepy")
    log = tmp_path / "queue-start.log"
    try:
        # The worker it spawns keeps the inherited stdout open: a pipe would wait for the worker to exit.
        with log.open("w") as out:
            started = subprocess.run(
                ["dvc", "queue", "start"], cwd=repo, env=env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, timeout=60, preexec_fn=_ignore_sigint,
            )
        assert started.returncode == 0, log.read_text()
        pid = int(_wait_for("the queued stage to start its MLflow run", lambda: pid_file.is_file()
                            and pid_file.read_text(), timeout=45, proc_log=log))  # fmt: skip
        client = mlflow.MlflowClient(tracking_uri=store)
        experiment = client.get_experiment_by_name(tracking.EXPERIMENT_NAME)

        def stage_run():
            (found,) = client.search_runs([experiment.experiment_id], filter_string="tags.stage = 'sleeper'")
            return found

        assert stage_run().info.status == "RUNNING"
        assert "has been killed" in run("dvc", "queue", "kill", "sleepy")
        _wait_for("the stage to exit after `dvc queue kill`", lambda: not _alive(pid), timeout=30)
        stopped = stage_run()
        assert stopped.info.status == "KILLED", stopped.info.status
        assert stopped.data.tags["dvc_exp_name"] == "sleepy"
    finally:
        subprocess.run(["dvc", "queue", "stop", "--kill"], cwd=repo, env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=60)  # fmt: skip
        # `--kill` SIGKILLs the experiment's executor alone: a stage the kill did not stop would outlive it.
        if pid_file.is_file() and _alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
