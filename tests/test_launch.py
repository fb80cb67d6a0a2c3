"""Training stages in several processes: the `accelerate launch` command, and SFT/GRPO really run in two.

The two-process runs use accelerate's torchrun launcher on the CPU (gloo), the tiny model and the same
params as the one-process stage tests, and check the same kind of outputs plus what only a multi-process
run can get wrong: the batch plan sees the world size (TRL raises its divisibility error otherwise), a
step sees every process's sequences, exactly one MLflow run and one set of outs come from the main process.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest
import yaml
from fixtures_env import QUESTIONS, make_concert_db
from stage_harness import run_stage as run_sft_stage
from test_stage_grpo import check_outputs, stage_runs, tiny_params
from test_stage_grpo import run_stage as run_grpo_stage
from test_stage_sft import _runs, sft_params

from pipeline.launch import launch_command
from pipeline.params import LaunchParams
from sqlenv.train.grpo import plan_batches
from sqlenv.train.tiny_model import build_tiny_model

REPO = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------------ the command
def test_launch_command_runs_the_module_in_n_processes():
    cmd = launch_command("stages.sft", [], LaunchParams(num_processes=2, config=""))
    assert Path(cmd[0]).name == "accelerate" and cmd[1] == "launch"
    assert cmd[cmd.index("--num_processes") + 1] == "2" and "--multi_gpu" in cmd  # torchrun: gloo on CPU
    assert cmd[-2:] == ["-m", "stages.sft"]
    cmd = launch_command("stages.grpo", ["--phase", "2"], LaunchParams(num_processes=4, config=""))
    assert cmd[-4:] == ["-m", "stages.grpo", "--phase", "2"]


def test_a_config_file_replaces_the_ddp_defaults(tmp_path):
    config = REPO / "configs" / "accelerate" / "deepspeed_zero2.yaml"
    cmd = launch_command("stages.sft", [], LaunchParams(num_processes=2, config=str(config)))
    assert cmd[cmd.index("--config_file") + 1] == str(config) and "--multi_gpu" not in cmd
    with pytest.raises(FileNotFoundError, match="no accelerate config file"):
        launch_command("stages.sft", [], LaunchParams(num_processes=2, config=str(tmp_path / "nope.yaml")))


def test_the_shipped_deepspeed_config_is_zero2_and_leaves_the_process_count_to_params():
    config = yaml.safe_load((REPO / "configs" / "accelerate" / "deepspeed_zero2.yaml").read_text())
    assert config["distributed_type"] == "DEEPSPEED" and config["deepspeed_config"]["zero_stage"] == 2
    assert "num_processes" not in config  # launch.num_processes says it, on the command line


def test_batch_plan_scales_with_the_world_size():
    one, two = plan_batches(2, 1, 2), plan_batches(2, 1, 2, world_size=2)
    assert (one.generation_batch_size, two.generation_batch_size) == (2, 4)
    assert two.prompts_per_step == 2 and two.world_size == 2
    # batch 1 per process x 3 processes, 4 generations: accumulate 4 so a step holds whole groups
    three = plan_batches(1, 1, 4, world_size=3)
    assert three.gradient_accumulation_steps == 4 and three.generation_batch_size % 4 == 0


def test_a_bad_process_count_fails_the_stage_clearly(tmp_path):
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["launch"]["num_processes"] = 0
    proc = run_sft_stage(tmp_path, "sft", params=params, expect_ok=False)
    assert proc.returncode == 1 and "launch.num_processes must be >= 1" in proc.stderr


# ------------------------------------------------------------------------------------------ two processes
@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny-qwen2")


def test_sft_in_two_processes(tmp_path, tiny_model):
    work = tmp_path / "w"
    params = sft_params(tiny_model)
    run_sft_stage(work, "prepare", params=params)
    run_sft_stage(work, "prepare_model")
    run_sft_stage(work, "sft_data")
    params["launch"]["num_processes"] = 2
    proc = run_sft_stage(work, "sft", params=params)
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("launch") >= 1 and "--num_processes 2" in proc.stderr

    out = work / "models/sft"
    assert (out / "model.safetensors").is_file() and not list(out.glob("adapter_*"))
    assert not list((work / "models").glob(".sft*"))  # the other process left no folder behind
    metrics = json.loads((work / "reports/sft/metrics.json").read_text())
    # 6 examples, batch 1 x accumulation 2 per process, 2 processes: 4 per step -> 2 steps (1 process: 3)
    assert metrics["processes"] == 2 and metrics["dataset"]["examples"] == 6 and metrics["steps"] == 2
    assert metrics["fingerprint"] == json.loads((out / "provenance.json").read_text())["fingerprint"]
    (run,) = _runs(work, "sft")  # the main process's run only
    assert run.info.status == "FINISHED" and run.data.params["launch.num_processes"] == "2"
    assert [m.step for m in mlflow.MlflowClient().get_metric_history(run.info.run_id, "loss")] == [1, 2]


def test_grpo_in_two_processes(tmp_path):
    root = tmp_path / "g"
    make_concert_db(root / "data" / "databases")
    rows = [{**q.to_dict(), "hardness": "easy"} for q in QUESTIONS]
    (root / "data" / "questions").mkdir(parents=True)
    (root / "data" / "questions" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    build_tiny_model(root / "models" / "sft", dtype="float32")
    params = tiny_params()
    params["launch"]["num_processes"] = 2
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    proc = run_grpo_stage(root, 1)
    assert "Traceback" not in proc.stderr and "--num_processes 2" in proc.stderr

    metrics = check_outputs(root, "grpo_phase1", 2)
    # batch 2 per process x 2 processes, 2 generations: 4 rollouts (2 questions) per step
    assert metrics["processes"] == 2 and metrics["rollouts_per_step"] == 4
    (run,) = stage_runs(root, "grpo_phase1")
    assert run.info.status == "FINISHED" and run.data.params["derived.processes"] == "2"
    assert run.data.params["derived.prompts_per_step"] == "2"
    client = mlflow.MlflowClient()
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "reward")) == [1, 2]
    transcripts = client.list_artifacts(run.info.run_id, "transcripts")  # logged once, by the main process
    assert [a.path for a in transcripts] == ["transcripts/step_00001.jsonl", "transcripts/step_00002.jsonl"]
