"""The smoke profile: the whole DAG with a tiny random model, in a throw-away copy of the repo.

    python -m pipeline.smoke [--keep DIR] [--json FILE] [--tracking-uri URI] [--remote DIR]

Copies the repository's files (tracked and untracked-but-not-ignored: no venv, data or
models) into a temporary folder, builds a tiny random Qwen2 model with the real tokenizer
there, writes params.yaml = the repo's params.yaml + the overrides in params-smoke.yaml
(+ model.base = the tiny model), makes it a git repo, and runs `make run` (with this venv). Then it checks
the report exists, that the run changed no tracked file but dvc.lock and reports/ (no documentation), that a
second `dvc repro` has nothing to do, that a sweep
(`dvc exp run -S grpo.beta=…`, the users' own command) reruns only stages downstream of GRPO, and that the other
environment mode (`-S env.schema=full -S env.answer=sql`: the full schema shown, SQL answers scored
by execution accuracy) goes through everything after `prepare` and reports in that mode.

`--tracking-uri` runs every stage against that MLflow tracking server instead of the copy's own
SQLite store (the test suite starts a real `mlflow server` for it). `--remote DIR` then shares the
result through a DVC remote, as a team would: a local-directory remote is added and committed,
`dvc push` sends the outputs, a fresh `git clone` of the copy runs `dvc pull`, and every file under
`models/`, `data/` and `reports/` must come back byte-identical (`dvc status` clean in the clone). It proves the DAG
wires up — every stage runs its real code path end to end — not that anything learns.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from pipeline.params import load_params, read_yaml, repo_root


def deep_update(base: dict, overrides: dict) -> dict:
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            deep_update(base[key], value)
        else:
            base[key] = value
    return base


def copy_repo(src: Path, dst: Path) -> None:
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=src, capture_output=True, text=True, check=True,
    ).stdout.split("\0")
    for rel in filter(None, files):
        if (src / rel).is_file():  # ls-files still lists files deleted in the work tree
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / rel, dst / rel)


def _run(cmd: list[str], cwd: Path, env: dict) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"smoke: `{' '.join(cmd)}` failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return time.perf_counter() - start, proc.stdout + proc.stderr


def run_smoke(workdir: Path, tracking_uri: str | None = None, remote: Path | None = None) -> dict:
    from sqlenv.train.tiny_model import build_tiny_model

    root = repo_root()
    copy_repo(root, workdir)
    tiny = build_tiny_model(workdir / ".smoke" / "tiny-base")
    params = deep_update(read_yaml((root / "params.yaml").read_text()), read_yaml((root / "params-smoke.yaml").read_text()))
    params["model"]["base"] = str(tiny)
    # The copy has no ../shared beside it: the transfer set's folder is named by its absolute path (or, where
    # this checkout has none, a path that does not exist, and the transfer stages record their skip).
    params["transfer"]["spider_dir"] = str((root / params["transfer"]["spider_dir"]).resolve())
    (workdir / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    load_params(workdir / "params.yaml")  # the overlay must itself be valid params

    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": venv_bin + os.pathsep + os.environ.get("PATH", "")}
    for var in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "DVC_ROOT", "SQLENV_PARAMS"):
        env.pop(var, None)
    if tracking_uri:
        env["MLFLOW_TRACKING_URI"] = tracking_uri
    git = ["git", "-c", "user.name=smoke", "-c", "user.email=smoke@localhost"]
    _run(git + ["init", "-q"], workdir, env)
    _run(git + ["add", "-A"], workdir, env)
    _run(git + ["commit", "-qm", "smoke"], workdir, env)
    # The README's `make run`, with this venv (its install stamp taken as done: `-o`, nothing is installed).
    venv = Path(sys.executable).parent.parent
    repro_s, log = _run(["make", "run", f"VENV={venv}", "-o", f"{venv}/.model"], workdir, env)
    report = workdir / "reports" / "report.md"
    if not report.is_file():
        raise SystemExit("smoke: make run finished but reports/report.md is missing")
    touched = _tracked_changes(workdir)
    if touched:
        raise SystemExit(f"smoke: make run changed tracked files other than dvc.lock and reports/: {touched}")
    noop_s, noop_log = _run(["dvc", "repro"], workdir, env)
    if [s for s in _stages_run(noop_log) if s not in ALWAYS_CHANGED]:
        raise SystemExit(f"smoke: a second dvc repro reran stages: {_stages_run(noop_log)}")
    _run(git + ["add", "-A"], workdir, env)
    _run(git + ["commit", "-qm", "smoke baseline"], workdir, env)
    beta = params["grpo"]["beta"]
    sweep_s, sweep_log = _run(["dvc", "exp", "run", "-S", f"grpo.beta={beta / 2 if beta else 0.01}"], workdir, env)
    swept = _stages_run(sweep_log)
    upstream = [s for s in swept if not (s.startswith(("grpo_", "evaluate@grpo_", "transfer@grpo_"))
                                         or s in ("report", *ALWAYS_CHANGED))]
    if "grpo_phase1" not in swept or upstream:
        raise SystemExit(f"smoke: a grpo.beta sweep should rerun GRPO and what follows only; it ran {swept}")
    modes_s, modes_log = _run(["dvc", "exp", "run", "-S", "env.schema=full", "-S", "env.answer=sql"], workdir, env)
    moded = _stages_run(modes_log)
    expected = {"sft_data", "sft", "grpo_phase1", "grpo_phase2", "report", "evaluate@sft_n50"}
    if not expected <= set(moded) or "prepare" in moded or "prepare_model" in moded:
        raise SystemExit(f"smoke: an env.schema/env.answer run should rerun everything after prepare; it ran {moded}")
    if "| Environment mode | schema=full answer=sql |" not in report.read_text():
        raise SystemExit("smoke: the full-schema, SQL-answer run's report does not state its mode")
    result = {
        "repro_s": round(repro_s, 1), "noop_repro_s": round(noop_s, 1), "stages_run": _stages_run(log),
        "sweep_s": round(sweep_s, 1), "sweep_stages_run": swept, "modes_s": round(modes_s, 1),
        "modes_stages_run": moded,
    }
    if remote is not None:
        result["remote"] = remote_round_trip(workdir, remote, git, env)
    return result


SHARED = ("models", "data", "reports")
ALWAYS_CHANGED = ("transfer_data",)  # stages DVC runs on every repro (dvc.yaml `always_changed`); cheap by design


def _files(root: Path) -> dict[str, str]:
    import hashlib

    return {str(p.relative_to(root)): hashlib.md5(p.read_bytes()).hexdigest()
            for top in SHARED for p in sorted((root / top).rglob("*")) if p.is_file()}  # fmt: skip


def remote_round_trip(workdir: Path, remote: Path, git: list[str], env: dict) -> dict:
    """`dvc push` the workspace's outputs to a local-directory remote and `dvc pull` them into a fresh clone:
    every file under SHARED must come back byte-identical. Returns counts and timings."""
    _run(["dvc", "remote", "add", "-d", "shared", str(remote)], workdir, env)
    _run(git + ["add", "-A"], workdir, env)
    _run(git + ["commit", "-qm", "smoke: results and the shared remote"], workdir, env)
    push_s, _ = _run(["dvc", "push"], workdir, env)
    clone = workdir.parent / (workdir.name + "-clone")
    _run(["git", "clone", "-q", str(workdir), str(clone)], workdir.parent, env)
    pull_s, _ = _run(["dvc", "pull"], clone, env)
    _, status = _run(["dvc", "status"], clone, env)
    theirs, ours = _files(clone), _files(workdir)
    missing = sorted(ours.keys() - theirs.keys())
    differ = sorted(k for k in ours.keys() & theirs.keys() if theirs[k] != ours[k])
    if missing or differ:
        raise SystemExit(f"smoke: dvc pull in a fresh clone did not restore the outputs: missing {missing[:5]}, "
                         f"different {differ[:5]}")  # fmt: skip
    status = "\n".join(line for line in status.splitlines()
                       if not line.startswith(ALWAYS_CHANGED) and "always changed" not in line)
    if status.strip() and "up to date" not in status.lower():
        raise SystemExit(f"smoke: dvc status in the pulled clone is not clean:\n{status[-2000:]}")
    return {"files": len(theirs), "push_s": round(push_s, 1), "pull_s": round(pull_s, 1), "clone": str(clone)}


def _tracked_changes(workdir: Path) -> list[str]:
    """Tracked files a run changed, besides what the DAG writes (dvc.lock, reports/)."""
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=workdir, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    paths = [line[3:] for line in out.splitlines()]
    return [p for p in paths if p != "dvc.lock" and not p.startswith("reports/")]


def _stages_run(log: str) -> list[str]:
    return [line.split("'")[1] for line in log.splitlines() if line.startswith("Running stage '")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, help="run in this (new) folder and keep it, instead of a temp folder")
    parser.add_argument("--json", type=Path, help="also write the result JSON here")
    parser.add_argument("--tracking-uri", help="run the stages against this MLflow tracking server")
    parser.add_argument("--remote", type=Path, help="then push to this (new) local DVC remote and pull into a fresh clone")
    args = parser.parse_args(argv)
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=False)
        result = run_smoke(args.keep, args.tracking_uri, args.remote)
    else:
        with tempfile.TemporaryDirectory(prefix="sqlenv-smoke-") as tmp:
            result = run_smoke(Path(tmp) / "repo", args.tracking_uri, args.remote)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
