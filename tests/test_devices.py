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

from sqlenv.devices import DEVICES, DRAFT_TOKENS, POLICY, grpo_policy, policy_table, sft_policy

ROOT = Path(__file__).resolve().parents[1]


def policy(device: str, **overrides):
    cuda, processes, vllm = {"cpu": (False, 1, "none"), "cpu-ddp": (False, 2, "none"), "cuda": (True, 1, "none"),
                             "cuda-ddp": (True, 2, "none"), "vllm": (True, 1, "colocate")}[device]  # fmt: skip
    return grpo_policy(cuda=cuda, processes=processes, use_vllm=vllm, dtype=overrides.pop("dtype", "bfloat16"), **overrides)


def test_docs_show_the_code_table():
    assert policy_table() in (ROOT / "docs" / "gpu.md").read_text(encoding="utf-8")
    assert all(set(cells) == set(DEVICES) for _, _, cells in POLICY.values())


@pytest.mark.parametrize("device", DEVICES)
def test_row_grpo_episodes(device):
    want = "sqlenv" if device.startswith("cpu") else "trl"
    assert policy(device).rollout_decoder == want
    assert POLICY["GRPO episodes"][2][device].startswith("sqlenv" if want == "sqlenv" else "TRL")


def test_row_grpo_episodes_overrides():
    assert policy("cuda", rollout_decoder="sqlenv").rollout_decoder == "sqlenv"  # the loop runs on a GPU too
    assert policy("cpu", rollout_decoder="trl").rollout_decoder == "trl"
    with pytest.raises(ValueError, match="use_vllm"):
        policy("vllm", rollout_decoder="sqlenv")
    with pytest.raises(ValueError, match="rollout_decoder must be one of"):
        policy("cpu", rollout_decoder="cached")


@pytest.mark.parametrize("device", DEVICES)
def test_row_drafting(device):
    """Drafting runs in the sqlenv loop: on a CPU `auto` drafts DRAFT_TOKENS; on a GPU the policy says off, the sqlenv
    loop included, unless `grpo.draft_tokens` asks for a count; a count > 0 where TRL or vLLM generates is refused."""
    cpu = device.startswith("cpu")
    assert policy(device).draft_tokens == (DRAFT_TOKENS if cpu else 0)
    assert POLICY["drafting"][2][device].startswith("on" if cpu else "off")
    if device != "vllm":
        assert policy(device, rollout_decoder="sqlenv").draft_tokens == (DRAFT_TOKENS if cpu else 0)
        assert policy(device, rollout_decoder="sqlenv", draft_tokens=3).draft_tokens == 3  # asked for: honoured
        assert policy(device, rollout_decoder="sqlenv", draft_tokens=0).draft_tokens == 0
    assert policy(device, rollout_decoder="trl").draft_tokens == 0
    assert policy(device, rollout_decoder="trl", draft_tokens=0).draft_tokens == 0
    with pytest.raises(ValueError, match="draft_tokens"):
        policy(device, rollout_decoder="trl", draft_tokens=4)
    for bad in (-1, "8", True, 2.0):
        with pytest.raises(ValueError, match="draft_tokens"):
            policy(device, draft_tokens=bad)


@pytest.mark.parametrize("device", DEVICES)
def test_row_grpo_log_prob_passes(device):
    """The per-rollout passes are a CPU mechanism: `true` is refused on a GPU (as with several processes)."""
    assert policy(device).shared_prefix is (device == "cpu")
    assert policy(device, shared_prefix=False).shared_prefix is False
    if device == "cpu":
        assert policy(device, shared_prefix=True).shared_prefix is True
    else:
        with pytest.raises(ValueError, match="one process" if device.endswith("ddp") else "CPU mechanism"):
            policy(device, shared_prefix=True)


@pytest.mark.parametrize("device", ["cpu", "cpu-ddp", "cuda", "cuda-ddp"])
def test_rows_of_sft(device):
    """SFT's CPU mechanisms (the LM head on labelled positions, heap trims) follow the device, as GRPO's do."""
    cuda, processes = device.startswith("cuda"), 2 if device.endswith("ddp") else 1
    p, cpu = sft_policy(cuda=cuda, processes=processes), not cuda
    assert (p.device, p.compact_lm_head, p.heap_trim) == (device, cpu, cpu)
    for row in ("LM head on labelled positions", "heap trim"):
        assert "SFT" in POLICY[row][0] and POLICY[row][2][device].startswith("off") is not cpu


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


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda-sqlenv"])
def test_the_trainer_wires_the_policy(device, tmp_path, concert_db_dir):  # noqa: F811
    """build_trainer with the CPU row plays rollouts through sqlenv's rollout_func with drafting, runs the shared-prefix
    passes and trims the heap; with the (fake) CUDA row it leaves rollouts to TRL's environment_factory loop and its
    batched log-prob passes, and trims nothing: the GPU profile runs no per-rollout passes. The sqlenv loop asked for
    on CUDA plays without drafting (the drafting row), unless the params ask for a count."""
    from sqlenv.train.grpo import build_trainer, phase_sections, phase_settings
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
    # params.yaml leaves all three to the policy
    assert (settings.rollout_decoder, settings.shared_prefix, settings.draft_tokens) == ("auto", "auto", "auto")
    decoder = {"rollout_decoder": "sqlenv"} if device == "cuda-sqlenv" else {}
    row = policy(device.removesuffix("-sqlenv"), dtype="float32", **decoder)

    def ours(rollout_func):  # sqlenv's rollout_func (sqlenv.train.rollouts)
        return type(rollout_func).__module__ == "sqlenv.train.rollouts"

    def build(row, name):
        return build_trainer(settings, model_path=tiny, questions_file=questions, db_dir=concert_db_dir,
                             checkpoint_dir=tmp_path / name, policy=row)  # fmt: skip

    trainer = build(row, "ck")
    callbacks = [type(c).__name__ for c in trainer.callback_handler.callbacks]
    if device == "cpu":
        assert ours(trainer.rollout_func) and trainer.environment_factories is None
        assert trainer.rollout_func.draft_tokens == DRAFT_TOKENS
        assert trainer.shared_prefix and "TrimHeap" in callbacks
        assert trainer.reward_weights.tolist() == [0.0] * (len(trainer.reward_funcs) - 1) + [1.0]
    elif device == "cuda":
        assert trainer.rollout_func is None and trainer.environment_factories is not None
        assert not trainer.shared_prefix and "TrimHeap" not in callbacks
        assert trainer.reward_func_names[-1] == "SQLAgentEnv" and trainer.reward_weights[-1] == 1.0
    else:
        assert ours(trainer.rollout_func) and trainer.rollout_func.draft_tokens == 0
        assert not trainer.shared_prefix and "TrimHeap" not in callbacks
        asked = build(policy("cuda", dtype="float32", rollout_decoder="sqlenv", draft_tokens=4), "ck-asked")
        assert asked.rollout_func.draft_tokens == 4


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_sft_trainer_wires_the_policy(device, tmp_path):
    """SFT on the CPU row trims the heap after each step and trains inside the LM-head patch; on the (fake) CUDA row it
    does neither. In neither does it skip peft's LoRA input casts (measured under the project's bar in SFT)."""
    import trl.trainer.utils as trl_utils
    from peft.tuners.lora import LoraLayer
    from transformers import AutoTokenizer

    from sqlenv.data.questions import build_questions
    from sqlenv.data.sft_data import SFTDataConfig, build_sft_data
    from sqlenv.env.environment import EnvConfig
    from sqlenv.train import sft
    from sqlenv.train.tiny_model import build_tiny_model

    tiny = build_tiny_model(tmp_path / "tiny", dtype="float32")
    built = build_questions(tmp_path / "world", seed=0, source="synthetic", domains=["retail"], databases_per_domain=1,
                            questions_per_db=4)  # fmt: skip
    records = build_sft_data(built.questions, tmp_path / "world", EnvConfig(), SFTDataConfig()).records
    dataset, _ = sft.build_dataset(records[:1], AutoTokenizer.from_pretrained(tiny), max_length=4096)
    row = sft_policy(cuda=device == "cuda", processes=1)
    trainer = sft.build_trainer(tiny, dataset, sft.TrainConfig(max_steps=1, dtype="float32"), tmp_path / "out", policy=row)
    callbacks = [type(c).__name__ for c in trainer.callback_handler.callbacks]
    assert ("TrimHeap" in callbacks) is (device == "cpu")
    lora = [m for m in trainer.model.modules() if isinstance(m, LoraLayer)]
    assert lora and not any(getattr(m, "_sqlenv_cast_hook", False) for m in lora)
    original = trl_utils._use_triton
    with sft.training_patches(trainer.model, policy=row):
        assert (trl_utils._use_triton is not original) is (device == "cpu")
    assert trl_utils._use_triton is original
