"""The device policy (`sqlenv.devices`): one test per row of the table, and the table in docs/gpu.md is the code's.

Rows that need a GPU run against a fake CUDA device: the policy is resolved for `cuda=True`, and the trainer is
built on the CPU with that policy, so what it wires (rollout_func or environment_factory, which log-prob passes,
precision, heap trims) is the CUDA choice.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from fixtures_env import concert_db_dir  # noqa: F401  (fixture)

from sqlenv.devices import DEVICES, POLICY, grpo_policy, policy_table

ROOT = Path(__file__).resolve().parents[1]


def policy(device: str, **overrides):
    cuda, processes, vllm = {"cpu": (False, 1, "none"), "cpu-ddp": (False, 2, "none"), "cuda": (True, 1, "none"),
                             "cuda-ddp": (True, 2, "none"), "vllm": (True, 1, "colocate")}[device]  # fmt: skip
    return grpo_policy(cuda=cuda, processes=processes, use_vllm=vllm, dtype=overrides.pop("dtype", "bfloat16"), **overrides)


def test_docs_show_the_code_table():
    assert policy_table() in (ROOT / "docs" / "gpu.md").read_text(encoding="utf-8")
    assert all(set(cells) == set(DEVICES) for _, cells in POLICY.values())


@pytest.mark.parametrize("device", DEVICES)
def test_row_grpo_episodes(device):
    want = "sqlenv" if device.startswith("cpu") else "trl"
    assert policy(device).rollout_decoder == want
    assert POLICY["GRPO episodes"][1][device].startswith("sqlenv" if want == "sqlenv" else "TRL")


def test_row_grpo_episodes_overrides():
    assert policy("cuda", rollout_decoder="sqlenv").rollout_decoder == "sqlenv"  # the loop runs on a GPU too
    assert policy("cpu", rollout_decoder="trl").rollout_decoder == "trl"
    with pytest.raises(ValueError, match="use_vllm"):
        policy("vllm", rollout_decoder="sqlenv")
    with pytest.raises(ValueError, match="rollout_decoder must be one of"):
        policy("cpu", rollout_decoder="cached")


@pytest.mark.parametrize("device", DEVICES)
def test_row_grpo_log_prob_passes(device):
    assert policy(device).shared_prefix is (device == "cpu")
    assert policy(device, shared_prefix=False).shared_prefix is False
    if device in ("cpu-ddp", "cuda-ddp"):
        with pytest.raises(ValueError, match="one process"):
            policy(device, shared_prefix=True)
    else:
        assert policy(device, shared_prefix=True).shared_prefix is True


@pytest.mark.parametrize("device", DEVICES)
def test_row_bf16_and_heap_trim(device):
    p, cpu = policy(device), device.startswith("cpu")
    assert (p.loss_autocast, p.mixed_precision_bf16, p.heap_trim, p.compact_lm_head) == (cpu, not cpu, cpu, cpu)
    f32 = policy(device, dtype="float32")
    assert not f32.loss_autocast and not f32.mixed_precision_bf16


def test_row_lm_head_patch_acts_on_cpu_devices_only():
    """`compact_lm_head` answers "labelled positions only" for a CPU device and leaves TRL's answer elsewhere."""
    import trl.trainer.utils as trl_utils

    from sqlenv.train.trl_patches import compact_lm_head

    original = trl_utils._use_triton
    with compact_lm_head():
        assert trl_utils._use_triton(torch.device("cpu")) is True
        assert trl_utils._use_triton(torch.device("cuda")) == original(torch.device("cuda"))
    assert trl_utils._use_triton is original


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_trainer_wires_the_policy(device, tmp_path, concert_db_dir):  # noqa: F811
    """build_trainer with the CPU row plays rollouts through EpisodeRollouts, runs the shared-prefix passes and
    trims the heap; with the (fake) CUDA row it leaves rollouts to TRL's environment_factory loop and its batched
    log-prob passes, and trims nothing: the GPU profile runs no per-rollout passes."""
    from sqlenv.train.grpo import build_trainer, phase_sections, phase_settings
    from sqlenv.train.rollouts import EpisodeRollouts
    from sqlenv.train.tiny_model import build_tiny_model
    from test_grpo import COUNT_QUESTIONS, repo_params

    tiny = build_tiny_model(tmp_path / "tiny", dtype="float32")
    questions = tmp_path / "train.jsonl"
    questions.write_text("".join(json.dumps(q.to_dict()) + "\n" for q in COUNT_QUESTIONS))
    p = repo_params()
    p["model"]["dtype"] = "float32"
    p["grpo"].update(batch_size=2, lora_r=4, lora_alpha=8)
    p["grpo_phase1"].update(max_steps=1, num_generations=2)
    settings = phase_settings(phase_sections(p, 1), 1)
    assert (settings.rollout_decoder, settings.shared_prefix) == ("auto", "auto")  # params.yaml leaves it to the policy
    row = policy(device, dtype="float32")
    trainer = build_trainer(settings, model_path=tiny, questions_file=questions, db_dir=concert_db_dir,
                            checkpoint_dir=tmp_path / "ck", policy=row)  # fmt: skip
    callbacks = [type(c).__name__ for c in trainer.callback_handler.callbacks]
    if device == "cpu":
        assert isinstance(trainer.rollout_func, EpisodeRollouts) and trainer.environment_factories is None
        assert trainer.shared_prefix and "TrimHeap" in callbacks
        assert trainer.reward_weights.tolist() == [0.0] * (len(trainer.reward_funcs) - 1) + [1.0]
    else:
        assert trainer.rollout_func is None and trainer.environment_factories is not None
        assert not trainer.shared_prefix and "TrimHeap" not in callbacks
        assert trainer.reward_func_names[-1] == "SQLAgentEnv" and trainer.reward_weights[-1] == 1.0
