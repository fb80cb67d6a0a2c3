"""One MLflow run per stage execution, tagged so runs can be found and compared.

Where the store lives: `$MLFLOW_TRACKING_URI` if set, else a SQLite store `mlflow.db` at
the repository root resolved against `DVC_ROOT`. DVC runs queued and `--temp` experiments
in a throw-away copy of the repo; a store path relative to the working directory would be
created (and lost) inside that copy, so the root comes from DVC_ROOT, which DVC points
at the real workspace. Artifacts go to `mlartifacts/` beside a local store for the same reason;
with a tracking server (`MLFLOW_TRACKING_URI=http://…`) the experiment is created without an
artifact location, so the server's own (proxied `mlflow-artifacts:`) root takes the artifacts and
nothing is written to a local path (`make test` checks this against a real `mlflow server`).

The experiment carries `mlflow.experimentKind` = `custom_model_development`, so the MLflow UI opens it in
its model-training view. A stage stopped by SIGINT (Ctrl-C; `dvc queue kill` sends it to the experiment's
process group; `--force` SIGKILLs DVC's executor alone, not the stage) or SIGTERM (a shutdown) ends its run KILLED and
exits 130 / 143, also when its parent had the signal ignored (a job started in the background).

Tags on every run: `stage`, `git_commit` (+ `git_dirty`), `dvc_exp_name`,
`dvc_exp_baseline_rev`, `params_hash` (of exactly the params the stage read), `env_schema` and
`env_answer` (the environment mode, on every stage that reads it: results of two modes are never
comparable), and the machine
(`system/cpu_model`, CPUs, threads: `pipeline.machine`). Metrics on every run: the load average at
start and end and the peak RSS (`system/...`), so a timing says whether it was contended.

Grouping: the stage runs of one pipeline execution are nested under one parent run, so the
MLflow UI lists an experiment's stages together and its compare view lines two experiments
up. The parent is keyed by the DVC experiment name (`DVC_EXP_NAME`, set by `dvc exp run`,
which `make run` uses), else by `SQLENV_PIPELINE_RUN` (set it to group a plain `dvc repro`),
else by a hash of params.yaml (a plain `dvc repro` in the workspace: repros with the same
params share a parent). It is created by the first stage that actually runs — stages DVC
skips as cached create nothing — and carries params.yaml and dvc.lock as artifacts (re-logged
by each stage, so it holds the lock as of the last stage that started).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import mlflow
from mlflow.entities import Metric, RunTag

from pipeline import machine
from pipeline.params import flatten, params_hash, repo_root

EXPERIMENT_NAME = "sqlenv"
# MLflow's UI picks its layout from this experiment tag; without it, the traces the evaluation logs make the
# UI infer a GenAI experiment and list the stage runs under "Evaluations". These are training runs.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}


def tracking_uri() -> str:
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return f"sqlite:///{repo_root() / 'mlflow.db'}"


def git_commit() -> tuple[str, bool]:
    """(commit sha or 'unknown', whether tracked files other than dvc.lock and reports/ differ from it)."""
    root = repo_root()
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        # dvc.lock and the reports are what a running pipeline writes (DVC rewrites the lock after each
        # stage), not a change of the code that runs: they do not make a commit "dirty".
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)dvc.lock",
                 ":(exclude)reports"],
                cwd=root, capture_output=True, text=True, check=True,
            ).stdout.strip()
        )
        return sha, dirty
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False


def _experiment_id() -> str:
    exp = mlflow.get_experiment_by_name(EXPERIMENT_NAME)
    if exp is not None:
        for key, value in EXPERIMENT_KIND.items():  # a store made before the tag existed gets it too
            if exp.tags.get(key) != value:
                mlflow.MlflowClient().set_experiment_tag(exp.experiment_id, key, value)
        return exp.experiment_id
    served = tracking_uri().startswith(("http://", "https://", "databricks"))
    artifacts = None if served else (repo_root() / "mlartifacts").as_uri()
    try:
        return mlflow.create_experiment(EXPERIMENT_NAME, artifact_location=artifacts, tags=EXPERIMENT_KIND)
    except mlflow.exceptions.MlflowException:
        # Another stage created it between our lookup and create (parallel `dvc queue` workers).
        return mlflow.get_experiment_by_name(EXPERIMENT_NAME).experiment_id


def pipeline_key() -> tuple[str, str]:
    """(grouping key, parent run name) of the current pipeline execution."""
    exp = os.environ.get("DVC_EXP_NAME")
    if exp:
        return f"exp:{exp}", exp
    run = os.environ.get("SQLENV_PIPELINE_RUN")
    if run:
        return f"run:{run}", f"pipeline-{run}"
    params = repo_root() / "params.yaml"
    digest = hashlib.sha256(params.read_bytes()).hexdigest()[:10] if params.is_file() else "noparams"
    return f"workspace:{digest}", f"workspace-{digest}"


def _parent_run_id(experiment_id: str) -> str:
    key, name = pipeline_key()
    client = mlflow.MlflowClient()
    found = client.search_runs(
        [experiment_id], filter_string=f"tags.sqlenv_pipeline = '{key}'", max_results=1,
        order_by=["attributes.start_time DESC"],
    )
    if found:
        run_id = found[0].info.run_id
    else:
        sha, _ = git_commit()
        tags = {"sqlenv_pipeline": key, "git_commit": sha, "dvc_exp_name": os.environ.get("DVC_EXP_NAME", "")}
        run_id = client.create_run(experiment_id, run_name=name, tags=tags).info.run_id
    root = repo_root()
    for name in ("params.yaml", "dvc.lock"):
        if (root / name).is_file():
            client.log_artifact(run_id, str(root / name))
    client.set_terminated(run_id)
    return run_id


def run_tags(stage: str, params: dict[str, Any]) -> dict[str, str]:
    sha, dirty = git_commit()
    env = params.get("env") if isinstance(params.get("env"), dict) else {}
    return {
        **{f"env_{key}": str(env[key]) for key in ("schema", "answer") if key in env},
        "stage": stage,
        "git_commit": sha,
        "git_dirty": str(dirty).lower(),
        "dvc_exp_name": os.environ.get("DVC_EXP_NAME", ""),
        "dvc_exp_baseline_rev": os.environ.get("DVC_EXP_BASELINE_REV", ""),
        "params_hash": params_hash(params),
    }


class Terminated(SystemExit):
    """SIGTERM raised as an exception (exit status 128 + 15), so a stopped stage unwinds: its `finally` blocks
    run and its MLflow run ends KILLED instead of staying RUNNING forever (a shutdown, `kill`)."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated(128 + signum)


# SIGINT raises KeyboardInterrupt (Python's own handler: uncaught, Python then ends itself by SIGINT, 130 in a
# shell) and SIGTERM raises `Terminated`.
_STOP_HANDLERS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: _raise_terminated}


@contextlib.contextmanager
def _stop_signals_raise() -> Iterator[None]:
    """Within the block, SIGINT raises KeyboardInterrupt and SIGTERM raises `Terminated` (main thread only:
    Python runs handlers there), whatever the process inherited. Both are installed explicitly: a process whose
    parent ignored SIGINT — any job started in the background (`nohup … &`; a non-interactive shell's `&` sets
    SIGINT to SIG_IGN), a worker started from one — inherits it ignored, and Python then leaves it ignored, so
    Ctrl-C and `dvc queue kill` (SIGINT to the experiment's process group) would not stop the stage."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, handler) for signum, handler in _STOP_HANDLERS.items()}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _end_killed(run_id: str) -> None:
    """End the run KILLED, whether it is still the active run or a trainer's callback ended it already."""
    active = mlflow.active_run()
    if active is not None and active.info.run_id == run_id:
        mlflow.end_run("KILLED")
    else:
        mlflow.MlflowClient().set_terminated(run_id, "KILLED")


@contextlib.contextmanager
def stage_run(stage: str, params: dict[str, Any], run_name: str | None = None) -> Iterator[Any]:
    """Open the stage's MLflow run, log its params and tags; end it FAILED on error and KILLED when the stage is
    stopped (SIGINT: Ctrl-C, `dvc queue kill`; SIGTERM), also when the parent had those signals ignored.

    `params` is the nested dict of exactly the sections the stage read. The run id is also
    exported as MLFLOW_RUN_ID so a Hugging Face trainer's MLflow callback logs into it.
    """
    mlflow.set_tracking_uri(tracking_uri())
    experiment_id = _experiment_id()
    machine.set_runtime()
    tags = {**run_tags(stage, params), **machine.facts()}
    parent = _parent_run_id(experiment_id)
    with _stop_signals_raise(), mlflow.start_run(
        experiment_id=experiment_id, run_name=run_name or stage, tags=tags, parent_run_id=parent
    ) as run:
        mlflow.log_params(flatten(params))
        mlflow.log_metrics(machine.mark_start())
        previous = os.environ.get("MLFLOW_RUN_ID")
        os.environ["MLFLOW_RUN_ID"] = run.info.run_id
        try:
            yield run
        except (KeyboardInterrupt, Terminated):
            _end_killed(run.info.run_id)  # before the `with` would end it FAILED; `finally` still logs the end
            raise
        finally:
            _log_end(run.info.run_id)
            if previous is None:
                os.environ.pop("MLFLOW_RUN_ID", None)
            else:
                os.environ["MLFLOW_RUN_ID"] = previous


def _log_end(run_id: str) -> None:
    """Peak memory, the load at the end and the thread settings (torch is imported by then), logged into
    the run by id: a trainer's MLflow callback may have ended the active run already."""
    now = int(time.time() * 1000)
    end = {**machine.load("end"), **machine.peak_rss_mb()}
    mlflow.MlflowClient().log_batch(
        run_id,
        metrics=[Metric(k, float(v), now, 0) for k, v in end.items()],
        tags=[RunTag(k, v) for k, v in machine.threads().items()],
    )


def log_dtype(choice: Any) -> None:
    """The compute dtype a stage chose (`sqlenv.dtype.DtypeChoice`): a tag, and the timings behind `auto`."""
    mlflow.set_tags({"dtype": choice.dtype, "dtype_reason": choice.reason})
    timings = {f"dtype/{k}": v for k, v in (("bf16_ms", choice.bf16_ms), ("fp32_ms", choice.fp32_ms)) if v is not None}
    if timings:
        mlflow.log_metrics(timings)


def log_metrics(metrics: dict[str, Any], step: int | None = None, prefix: str = "") -> None:
    """Log the numeric leaves of a nested dict as `prefix/a/b` metrics (non-numbers skipped)."""
    flat = {}
    for key, value in flatten(metrics).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        name = (prefix + key).replace(".", "/")
        flat[name] = float(value)
    if flat:
        mlflow.log_metrics(flat, step=step)
