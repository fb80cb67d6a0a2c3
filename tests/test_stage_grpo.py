"""The grpo_phase1/grpo_phase2 stages as DVC runs them: outs, metrics, MLflow run contents, kill-and-resume."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import yaml
from fixtures_env import QUESTIONS, make_concert_db

from sqlenv.env.rewards import COMPONENTS
from sqlenv.train.grpo_outputs import CHECKPOINT_MARKER, CURVE_COLUMNS
from sqlenv.train.tiny_model import build_tiny_model

REPO = Path(__file__).resolve().parent.parent
MODEL_FILES = {"config.json", "generation_config.json", "model.safetensors", "provenance.json", "tokenizer.json",
               "tokenizer_config.json", "chat_template.jinja"}  # fmt: skip


def tiny_params(**grpo) -> dict:
    p = yaml.safe_load((REPO / "params.yaml").read_text())
    p["model"]["dtype"] = "float32"
    p["grpo"].update({"batch_size": 2, "gradient_accumulation_steps": 1, "checkpoint_every": 1, "transcripts_every": 1,
                      "transcripts_per_log": 2, "lora_r": 4, "lora_alpha": 8, **grpo})  # fmt: skip
    for phase in ("grpo_phase1", "grpo_phase2"):
        p[phase].update(max_steps=2, num_generations=2, max_completion_length=24)
    return p


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A repo-shaped folder (params, questions, the concert database, a tiny model standing in for
    models/sft) after an uninterrupted phase 1."""
    root = tmp_path_factory.mktemp("grpo_stage")
    make_concert_db(root / "data" / "databases")
    rows = [{**q.to_dict(), "hardness": "medium" if q.id == "q_join" else "easy"} for q in QUESTIONS]
    (root / "data" / "questions").mkdir(parents=True)
    (root / "data" / "questions" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    build_tiny_model(root / "models" / "sft", dtype="float32")
    (root / "params.yaml").write_text(yaml.safe_dump(tiny_params()))
    run_stage(root, 1)
    return root


def stage_env(root: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO), "DVC_ROOT": str(root),
            "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}", "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip


def run_stage(root: Path, phase: int, command: list[str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([*(command or [sys.executable, "-m", "stages.grpo"]), "--phase", str(phase)], cwd=root,
                          env=stage_env(root), capture_output=True, text=True, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def stage_runs(root: Path, stage: str):
    mlflow.set_tracking_uri(f"sqlite:///{root / 'mlflow.db'}")
    return mlflow.search_runs(experiment_names=["sqlenv"], filter_string=f"tags.stage = '{stage}'", output_format="list")


def check_outputs(root: Path, stage: str, steps: int) -> dict:
    files = {p.name for p in (root / "models" / stage).iterdir()}
    assert MODEL_FILES <= files and not any(f.startswith("adapter") for f in files), files
    curve = pd.read_csv(root / "reports" / stage / "curve.csv")
    assert list(curve.columns) == list(CURVE_COLUMNS)
    assert curve["step"].tolist() == list(range(1, steps + 1))
    metrics = json.loads((root / "reports" / stage / "metrics.json").read_text())
    assert metrics["steps"] == steps and metrics["model_fingerprint"]
    for key in ("reward_final", "reward_first_quarter", "reward_last_quarter", "accuracy_mean", "wall_time_s"):
        assert key in metrics
    assert not (root / "checkpoints" / stage).exists()  # removed once the outs are written
    return metrics


def test_phase1_outs_and_mlflow_run(workspace):
    root = workspace
    m1 = check_outputs(root, "grpo_phase1", 2)
    assert m1["resumed_from_step"] == 0

    (run,) = stage_runs(root, "grpo_phase1")  # one run per stage execution: TRL did not open a second one
    assert run.info.status == "FINISHED"
    metric_keys = set(run.data.metrics)
    for c in COMPONENTS:
        assert f"rewards/{c}/mean" in metric_keys
    for key in ("reward", "reward_std", "frac_reward_zero_std", "loss", "kl", "entropy", "tools/call_frequency",
                "tools/failure_frequency", "episode/turns", "episode/tokens", "episode/calls_after_answer"):
        assert key in metric_keys, key
    client = mlflow.MlflowClient()
    history = client.get_metric_history(run.info.run_id, "reward")
    assert sorted(m.step for m in history) == [1, 2]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"transcripts", "transcripts.json", "metrics.json", "curve.csv"} <= artifacts
    transcripts = client.list_artifacts(run.info.run_id, "transcripts")
    assert [a.path for a in transcripts] == ["transcripts/step_00001.jsonl", "transcripts/step_00002.jsonl"]
    record = json.loads(Path(client.download_artifacts(run.info.run_id, transcripts[0].path)).read_text().splitlines()[0])
    assert record["messages"][0]["role"] == "system" and record["verdict"] in ("correct", "wrong", "unanswered")
    assert set(record["reward_components"]) == set(COMPONENTS)
    assert run.data.params["grpo.beta"] == "0.04" and run.data.params["derived.beta"] == "0.04"  # phase 1: grpo.beta
    assert "grpo_phase2.beta" not in run.data.params


def test_phase2_starts_from_phase1(workspace):
    root = workspace
    m1 = json.loads((root / "reports" / "grpo_phase1" / "metrics.json").read_text())
    run_stage(root, 2)
    m2 = check_outputs(root, "grpo_phase2", 2)
    assert m2["start_fingerprint"] == m1["model_fingerprint"]  # phase 2 starts where phase 1 ended
    provenance = json.loads((root / "models" / "grpo_phase2" / "provenance.json").read_text())
    assert [t["stage"] for t in provenance["training"]] == ["grpo_phase1", "grpo_phase2"]
    (run2,) = stage_runs(root, "grpo_phase2")
    assert "kl" not in run2.data.metrics or run2.data.metrics["kl"] == 0.0  # beta 0: no reference model
    assert "grpo_phase1.max_steps" not in run2.data.params


def test_killed_phase_resumes_from_its_checkpoint(workspace, tmp_path):
    root = tmp_path / "ws"
    shutil.copytree(workspace / "data", root / "data")
    shutil.copytree(workspace / "models" / "sft", root / "models" / "sft")
    params = tiny_params(transcripts_every=0)
    params["grpo_phase1"]["max_steps"] = 3  # two steps of margin to kill it after the first checkpoint
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    ckpt = root / "checkpoints" / "grpo_phase1"
    proc = subprocess.Popen([sys.executable, "-m", "stages.grpo", "--phase", "1"], cwd=root, env=stage_env(root),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 600
    while not (ckpt / "checkpoint-1" / CHECKPOINT_MARKER).exists():
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint after 10 minutes"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # a crash: no cleanup, no outs
    proc.wait()
    assert not (root / "models" / "grpo_phase1").exists()

    result = run_stage(root, 1)
    assert "resuming from" in result.stderr
    metrics = check_outputs(root, "grpo_phase1", 3)
    assert metrics["resumed_from_step"] == 1
    reference = json.loads((workspace / "reports" / "grpo_phase1" / "metrics.json").read_text())
    assert set(metrics) == set(reference)  # same shape as the uninterrupted run
    runs = sorted(stage_runs(root, "grpo_phase1"), key=lambda r: r.info.start_time)
    assert len(runs) == 2 and runs[1].data.tags["resumed_from_step"] == "1"
    steps = [m.step for m in mlflow.MlflowClient().get_metric_history(runs[1].info.run_id, "reward")]
    assert sorted(steps) == [1, 2, 3]  # the resumed run replays step 1 from the checkpoint's log history


def test_missing_start_model_fails_cleanly(tmp_path):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(tiny_params()))
    proc = subprocess.run([sys.executable, "-m", "stages.grpo", "--phase", "2"], cwd=tmp_path, env=stage_env(tmp_path),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "models/grpo_phase1" in proc.stderr



SCRIPTED_STAGE = [sys.executable, str(REPO / "tests" / "scripted_stage.py")]


def _weights(root: Path, stage: str = "grpo_phase1") -> dict:
    from safetensors.torch import load_file

    return load_file(root / "models" / stage / "model.safetensors")


def test_killed_phase_resumes_to_the_same_weights(workspace, tmp_path):
    """Resumed from its step-2 checkpoint in a fresh process, a 4-step phase ends with exactly the weights
    of an uninterrupted 4-step run: the resumed steps see the same prompts, draw the same completions and
    take the same optimizer steps.

    The uninterrupted run is paused (SIGSTOP) as its step-2 checkpoint is marked complete, that folder is
    copied into a second workspace, and the run continues: the copy is what a kill at that moment leaves
    (the SIGKILL itself: `test_killed_phase_resumes_from_its_checkpoint`), and the rerun there resumes
    from it. The policy's sampling is scripted (`scripted_stage.py`: the tiny random model alone earns no
    reward variance, so its weights would never move); the draws come from torch's global generator, as
    HF sampling's do. Two questions and one prompt per step make step 2 an epoch boundary, so steps 3-4
    come from the sampler's second epoch."""
    import torch

    params = tiny_params(transcripts_every=0, checkpoint_every=2)
    params["grpo_phase1"].update(max_steps=4, max_completion_length=256)
    roots = {}
    for name in ("straight", "resumed"):
        root = roots[name] = tmp_path / name
        shutil.copytree(workspace / "data", root / "data")
        shutil.copytree(workspace / "models" / "sft", root / "models" / "sft")
        (root / "params.yaml").write_text(yaml.safe_dump(params))

    straight = roots["straight"]
    checkpoint = Path("checkpoints") / "grpo_phase1" / "checkpoint-2"
    log = tmp_path / "straight.log"  # a file, not a pipe: a run left to finish must never block on a full pipe
    with log.open("w") as stderr:
        proc = subprocess.Popen([*SCRIPTED_STAGE, "--phase", "1"], cwd=straight, env=stage_env(straight),
                                stdout=subprocess.DEVNULL, stderr=stderr)  # fmt: skip
    deadline = time.monotonic() + 600
    while not (straight / checkpoint / CHECKPOINT_MARKER).exists():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint after 10 minutes"
        time.sleep(0.02)
    proc.send_signal(signal.SIGSTOP)
    try:
        shutil.copytree(straight / checkpoint, roots["resumed"] / checkpoint)
    finally:
        proc.send_signal(signal.SIGCONT)
    assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]
    assert "resuming from" in run_stage(roots["resumed"], 1, SCRIPTED_STAGE).stderr

    metrics = {name: check_outputs(root, "grpo_phase1", 4) for name, root in roots.items()}
    assert metrics["resumed"]["resumed_from_step"] == 2 and metrics["straight"]["resumed_from_step"] == 0
    curves = {name: pd.read_csv(root / "reports" / "grpo_phase1" / "curve.csv") for name, root in roots.items()}
    start, want, got = _weights(workspace, "sft"), _weights(straight), _weights(roots["resumed"])
    assert any(not torch.equal(start[name], want[name]) for name in want)  # training moved them: the test means something
    assert curves["straight"]["reward_std"].gt(0).any()
    assert set(got) == set(want)
    differ = sorted(name for name in want if not torch.equal(want[name], got[name]))
    assert not differ, f"{len(differ)}/{len(want)} tensors differ after the resume, e.g. {differ[:3]}"
    assert metrics["resumed"]["model_fingerprint"] == metrics["straight"]["model_fingerprint"]
    for column in ("reward", "reward_std", "loss", "kl", "grad_norm", "completions/mean_length"):  # every step alike
        assert curves["resumed"][column].tolist() == curves["straight"][column].tolist(), column


def test_a_phase_at_learning_rate_zero_saves_its_start_model_unchanged(workspace, tmp_path):
    """The null control of a GRPO phase: with the optimizer's step size at zero and everything else real
    (scripted sampling with reward variance, so advantages and gradients are non-zero; beta 0.04, so a
    reference model is loaded), the saved model holds the start model's tensors bit for bit. Whatever a
    phase changes in a model comes from its updates, not from loading, LoRA's set-up, merging or saving
    (a dtype round trip, a non-zero LoRA init, a touched embedding row would all fail here)."""
    import torch

    root = tmp_path / "ws"
    shutil.copytree(workspace / "data", root / "data")
    shutil.copytree(workspace / "models" / "sft", root / "models" / "sft")
    params = tiny_params(transcripts_every=0)
    params["grpo_phase1"].update(learning_rate=0.0, max_completion_length=256)
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    run_stage(root, 1, SCRIPTED_STAGE)

    check_outputs(root, "grpo_phase1", 2)
    curve = pd.read_csv(root / "reports" / "grpo_phase1" / "curve.csv")
    assert curve["reward_std"].gt(0).any() and curve["grad_norm"].gt(0).any()  # there was something to learn
    start, end = _weights(workspace, "sft"), _weights(root)
    assert set(end) == set(start)
    differ = sorted(name for name in start if not (start[name].dtype == end[name].dtype and torch.equal(start[name], end[name])))
    assert not differ, f"{len(differ)}/{len(start)} tensors changed at learning rate 0, e.g. {differ[:3]}"
