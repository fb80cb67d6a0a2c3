"""Guards sqlenv.train.grpo and grpo_outputs: batch plan, per-phase params, reward components as TRL logs them, checkpoints, few-shot, final model."""

import contextlib
import copy
import dataclasses
import hashlib
import json
import math
import statistics
from pathlib import Path

import pytest
import torch
import yaml
from fixtures_env import Q_COUNT, concert_db_dir  # noqa: F401  (fixture)
from scripted_turns import replaying

from sqlenv.env import prompts
from sqlenv.env.environment import EnvConfig
from sqlenv.env.rewards import COMPONENTS
from sqlenv.env.trl_adapter import SQLAgentEnv
from sqlenv.train.grpo import (
    ENV_REWARD_NAMES,
    EPISODE_METRICS,
    PhaseSettings,
    build_trainer,
    component_reward_funcs,
    episode_diagnostics,
    grpo_config,
    phase_sections,
    phase_settings,
    plan_batches,
    vllm_arguments,
)
from sqlenv.train.grpo_trainer import (
    EpochRepeatSampler,
    batch_prompt_prefix,
    rollout_log_probs,
    sampler_epoch_callback,
    stack_rows,
)
from sqlenv.train.grpo_outputs import (
    CHECKPOINT_MARKER,
    checkpoint_marker_callback,
    curve_rows,
    informative_rollouts,
    prepare_checkpoints,
    sample_transcripts,
    save_final_model,
    summarize_curve,
)
from sqlenv.train.trl_patches import compact_lm_head
from sqlenv.types import Question

REPO = Path(__file__).resolve().parent.parent


def repo_params() -> dict:
    return yaml.safe_load((REPO / "params.yaml").read_text())


# ------------------------------------------------------------------------------------------ batch plan
@pytest.mark.parametrize(
    "batch, accum, gens, world, want_accum, want_gen",
    [
        (4, 1, 4, 1, 1, 4),    # round 1: one question per step
        (2, 4, 2, 1, 4, 8),    # the default: 4 questions x 2 generations in 4 micro-batches of 2
        (3, 1, 4, 1, 4, 12),   # 3 rollouts per micro-batch never hold a group of 4 -> 4 micro-batches
        (2, 3, 4, 1, 4, 8),    # accumulation raised to the next value that holds whole groups
        (6, 1, 4, 1, 2, 12),
        (5, 2, 3, 1, 3, 15),
        (1, 1, 7, 1, 7, 7),
        (2, 1, 6, 2, 3, 12),   # two processes: the global micro-batch counts
        (8, 2, 4, 1, 2, 16),   # already fine: unchanged
    ],
)  # fmt: skip
def test_plan_batches_holds_whole_groups(batch, accum, gens, world, want_accum, want_gen):
    plan = plan_batches(batch, accum, gens, world)
    assert (plan.gradient_accumulation_steps, plan.generation_batch_size) == (want_accum, want_gen)
    assert plan.steps_per_generation == plan.gradient_accumulation_steps  # one generation per optimizer step
    assert plan.generation_batch_size % gens == 0
    assert plan.generation_batch_size % (batch * world) == 0
    assert plan.prompts_per_step == want_gen // gens


@pytest.mark.parametrize("batch, accum, gens", [(0, 1, 4), (4, 0, 4), (4, 1, 1)])
def test_plan_batches_rejects_impossible_settings(batch, accum, gens):
    with pytest.raises(ValueError):
        plan_batches(batch, accum, gens)


def test_trl_accepts_the_plan_on_odd_settings(tmp_path):
    p = repo_params()
    p["grpo"].update(batch_size=3, gradient_accumulation_steps=2)
    p["grpo_phase1"]["num_generations"] = 5
    config = grpo_config(phase_settings(phase_sections(p, 1), 1), tmp_path)
    assert config.generation_batch_size == 15 and config.steps_per_generation == config.gradient_accumulation_steps == 5


@pytest.mark.parametrize("use_vllm, expected", [("none", (False, None)), ("colocate", (True, "colocate")),
                                                 ("server", (True, "server"))])
def test_use_vllm_maps_onto_trls_use_vllm_and_vllm_mode(tmp_path, use_vllm, expected):
    p = repo_params()
    p["grpo"]["use_vllm"] = use_vllm
    config = grpo_config(phase_settings(phase_sections(p, 1), 1), tmp_path)
    assert (config.use_vllm, config.vllm_mode if config.use_vllm else None) == expected
    with pytest.raises(ValueError, match="grpo.use_vllm must be one of"):
        vllm_arguments("on")


def test_use_vllm_without_vllm_installed_is_a_clear_error(tmp_path):
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    p = repo_params()
    p["grpo"]["use_vllm"] = "colocate"
    with pytest.raises(ValueError, match="needs vLLM"):
        build_trainer(phase_settings(phase_sections(p, 1), 1), model_path=tmp_path, questions_file=tmp_path / "q.jsonl",
                      db_dir=tmp_path, checkpoint_dir=tmp_path / "ck")  # fmt: skip


# ------------------------------------------------------------------------------------- phase params
def test_phase_params_never_leak_across_phases(tmp_path):
    p = repo_params()
    assert set(phase_sections(p, 1)) == {"seed", "env", "rewards", "model", "grpo", "grpo_phase1"}
    assert set(phase_sections(p, 2)) == {"seed", "env", "rewards", "model", "grpo", "grpo_phase2"}
    one, two = phase_settings(phase_sections(p, 1), 1), phase_settings(phase_sections(p, 2), 2)
    assert p["grpo_phase1"]["beta"] is None and one.beta == p["grpo"]["beta"] == 0.04  # the recipe: phase 1 at 0.04
    assert two.beta == p["grpo_phase2"]["beta"] == 0.0  # phase 2 keeps its own 0.0
    assert (one.max_completion_length, two.max_completion_length) == (512, 768)
    assert one.difficulties == ("easy",) and set(two.difficulties) == {"easy", "medium"}

    # Any change to phase 2's section leaves phase 1's settings and GRPOConfig untouched, and vice versa.
    q = copy.deepcopy(p)
    q["grpo_phase2"].update(beta=0.7, max_steps=99, num_generations=9, learning_rate=0.5, temperature=0.1,
                            max_completion_length=7, difficulties=["extra"])  # fmt: skip
    assert phase_settings(phase_sections(q, 1), 1) == one
    assert grpo_config(one, tmp_path).to_dict() == grpo_config(phase_settings(phase_sections(q, 1), 1), tmp_path).to_dict()
    r = copy.deepcopy(p)
    r["grpo_phase1"].update(max_steps=99, num_generations=9, difficulties=["extra"])
    assert phase_settings(phase_sections(r, 2), 2) == two
    # The shared section reaches both phases; grpo.beta reaches a phase unless its own beta is set.
    s = copy.deepcopy(p)
    s["grpo"].update(lora_r=8, beta=0.1)
    assert phase_settings(phase_sections(s, 1), 1).lora_r == phase_settings(phase_sections(s, 2), 2).lora_r == 8
    assert (phase_settings(phase_sections(s, 1), 1).beta, phase_settings(phase_sections(s, 2), 2).beta) == (0.1, 0.0)
    s["grpo_phase1"]["beta"], s["grpo_phase2"]["beta"] = 0.2, None
    assert (phase_settings(phase_sections(s, 1), 1).beta, phase_settings(phase_sections(s, 2), 2).beta) == (0.2, 0.1)


@pytest.mark.parametrize("override, want", [("grpo.beta=0.04", (0.04, 0.0)), ("grpo.beta=0.1", (0.1, 0.0)),
                                            ("grpo_phase2.beta=0.02", (0.04, 0.02))])  # fmt: skip
def test_a_dvc_set_param_reaches_the_phase_grpo_config(tmp_path, override, want):
    """`dvc exp run -S grpo.beta=0.04`, the users' sweep, applied to params.yaml exactly as DVC applies `-S`
    (its Hydra override code, struct mode: an unknown key is refused), then loaded and validated as a stage
    loads it: the value is the KL coefficient in each phase's GRPOConfig."""
    from dvc_params import params_with

    loaded = params_with([override], tmp_path)  # what stages/grpo.py reads
    configs = [grpo_config(phase_settings(phase_sections(loaded, n), n), tmp_path / "ck") for n in (1, 2)]
    assert (configs[0].beta, configs[1].beta) == want


def test_dvc_refuses_a_key_params_yaml_lacks(tmp_path):
    """The other side of the sweep test: DVC's `-S` refuses a key params.yaml does not have, as it refused
    `grpo.beta` before the key existed."""
    from dvc.exceptions import InvalidArgumentError
    from dvc_params import params_with

    with pytest.raises(InvalidArgumentError):
        params_with(["grpo.btea=0.04"], tmp_path)


@pytest.mark.parametrize("section, key", [("grpo", "draft_tokens"), ("grpo", "few_shot_steps"),
                                          ("grpo", "checkpoint_every"), ("grpo_phase1", "max_steps")])  # fmt: skip
def test_phase_settings_reject_out_of_range_counts(section, key):
    """A negative guess count must fail the stage, not be read as 0 (as evaluate.draft_tokens fails too)."""
    p = repo_params()
    p[section][key] = -1
    with pytest.raises(ValueError, match=key):
        phase_settings(phase_sections(p, 1), 1)


def test_phase_settings_are_the_params_sections_and_nothing_else():
    """PhaseSettings is the grpo + grpo_phaseN sections merged (plus what the stage adds): no knob lives in
    one and not the other, so a params key can neither be ignored nor defaulted by the builder."""
    from pipeline.params import GRPOParams, GRPOPhaseParams

    fields = {f.name for f in dataclasses.fields(PhaseSettings)}
    sections = {f.name for f in dataclasses.fields(GRPOParams)} | {f.name for f in dataclasses.fields(GRPOPhaseParams)}
    assert fields == sections | {"stage", "seed", "dtype", "enable_thinking", "env"}
    p = repo_params()
    p["grpo"]["temperature"] = 0.5  # a phase key in the shared section
    with pytest.raises(ValueError, match="keys in both grpo and grpo_phase1"):
        phase_settings(phase_sections(p, 1), 1)


def test_grpo_seed_overrides_the_master_seed_for_both_phases_and_nothing_else(tmp_path):
    p = repo_params()
    assert p["grpo"]["seed"] is None  # the default: the master seed, as before the key existed
    master = [phase_settings(phase_sections(p, n), n) for n in (1, 2)]
    assert [s.seed for s in master] == [p["seed"], p["seed"]]
    q = copy.deepcopy(p)
    q["grpo"]["seed"] = p["seed"] + 7
    own = [phase_settings(phase_sections(q, n), n) for n in (1, 2)]
    assert [s.seed for s in own] == [p["seed"] + 7] * 2
    assert [dataclasses.replace(s, seed=p["seed"]) for s in own] == master  # nothing else moves
    assert grpo_config(own[0], tmp_path).seed == p["seed"] + 7  # what TRL seeds with (sampler, set_seed)


def test_phase_rewards_are_the_rewards_section():
    p = repo_params()
    p["rewards"].update(format_reward=0.05, mode="binary")
    rewards = phase_settings(phase_sections(p, 1), 1).env.rewards
    assert (rewards.format_reward, rewards.mode) == (0.05, "binary")


def test_grpo_config_carries_the_phase(tmp_path):
    p = repo_params()
    settings = phase_settings(phase_sections(p, 2), 2)
    config = grpo_config(settings, tmp_path / "ck", {"enable_thinking": False})
    assert config.beta == p["grpo_phase2"]["beta"]
    assert config.max_completion_length == p["grpo_phase2"]["max_completion_length"]
    assert config.max_tool_calling_iterations == p["env"]["step_budget"]
    assert config.mask_truncated_completions is p["grpo"]["mask_truncated_completions"]
    p["grpo"]["mask_truncated_completions"] = not p["grpo"]["mask_truncated_completions"]
    flipped = grpo_config(phase_settings(phase_sections(p, 2), 2), tmp_path / "ck")
    assert flipped.mask_truncated_completions is p["grpo"]["mask_truncated_completions"]
    assert config.scale_rewards == "none"
    # on this CPU the episode loop plays: the env's total comes as the last reward function, weight 1 (with
    # TRL's own loop TRL appends it, tests/test_devices.py)
    assert config.reward_weights == [0.0] * len(COMPONENTS) + [1.0]
    assert config.model_init_kwargs == {"dtype": p["model"]["dtype"]}
    assert config.chat_template_kwargs == {"enable_thinking": False}
    assert config.output_dir == str(tmp_path / "ck") and config.save_steps == p["grpo"]["checkpoint_every"]
    assert config.report_to == [] or config.report_to == "none"


# ------------------------------------------------------------------------------ reward components
def _row(q: Question) -> dict:
    return {**q.to_dict(), "prompt": [{"role": "system", "content": prompts.SYSTEM_PROMPT}, prompts.user_message(q)]}


def _played_envs(db_dir) -> list[SQLAgentEnv]:
    config = EnvConfig(rewards=dataclasses.replace(EnvConfig().rewards, format_reward=0.05))
    right, sloppy = SQLAgentEnv(db_dir, config), SQLAgentEnv(db_dir, config)
    for env in (right, sloppy):
        env.reset(**_row(Q_COUNT))
    right.describe(table_name="singer")
    right.query(sql="SELECT count(*) FROM singer")
    right.answer(value="5")
    sloppy.query(sql="SELECT count(*) FROM concert")
    sloppy.query(sql="SELECT count(*) FROM concert")  # a repeat
    sloppy.answer(value="3")
    sloppy.sample(table_name="singer")  # after the end
    return [right, sloppy]


def test_component_funcs_return_the_env_components(concert_db_dir):
    envs = _played_envs(concert_db_dir)
    funcs = component_reward_funcs()
    assert [f.__name__ for f in funcs] == list(COMPONENTS)
    columns = {f.__name__: f(environments=envs, completions=[[], []], completion_ids=[[], []]) for f in funcs}
    for i, env in enumerate(envs):
        assert {c: columns[c][i] for c in COMPONENTS} == env._episode["reward_components"]
        assert sum(columns[c][i] for c in COMPONENTS) == pytest.approx(env.get_reward())
    assert columns["correctness"] == [1.0, 0.0]
    assert columns["repeat_penalty"][1] < 0 and columns["post_episode_penalty"][1] < 0
    assert columns["format"] == [0.05, 0.05]


def test_first_component_reports_diagnostics(concert_db_dir):
    envs = _played_envs(concert_db_dir)
    metrics, extra = {}, {}
    component_reward_funcs()[0](
        environments=envs, completions=[[], []], completion_ids=[[1, 2], [3]],
        log_metric=metrics.__setitem__, log_extra=extra.__setitem__,
    )  # fmt: skip
    assert set(metrics) == set(EPISODE_METRICS)
    assert metrics["episode/accuracy"] == 0.5 and metrics["episode/calls_after_answer"] == 0.5
    assert metrics["episode/tokens"] == 1.5
    assert extra["verdict"] == ["correct", "wrong"] and extra["question_id"] == ["q_count", "q_count"]
    metrics.clear()
    component_reward_funcs()[1](environments=envs, completions=[[], []], completion_ids=[[], []], log_metric=metrics.__setitem__)
    assert metrics == {}  # reported once per batch, not once per component


def test_episode_diagnostics_parse_rate_and_turns():
    episode = {"steps": 2, "correct": False, "answered": True, "parse_failures": 1, "calls_after_end": 0,
               "budget_exhausted": False}  # fmt: skip
    completions = [
        [
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "query"}}]},
            {"role": "tool", "name": "query", "content": "x"},
            {"role": "assistant", "content": '<tool_call>\n{"name": "answer", "arguments": {"value": </tool_call>'},
        ],
        [{"role": "assistant", "content": "I cannot help."}],
    ]
    d = episode_diagnostics([episode, episode], completions, [[0] * 10, [0] * 4])
    assert d["episode/tool_call_parse_rate"] == 0.5  # one parsed, one that fell back to text
    assert d["episode/turns"] == 1.5 and d["episode/tokens"] == 7 and d["episode/argument_error_rate"] == 0.5
    nothing = episode_diagnostics([episode], [[{"role": "assistant", "content": "hi"}]], [[0]])
    assert nothing["episode/tool_call_parse_rate"] != nothing["episode/tool_call_parse_rate"]  # NaN: nothing tried
    assert nothing["episode/mixed_correctness"] != nothing["episode/mixed_correctness"]  # NaN: no group


def test_episode_diagnostics_count_groups_of_mixed_correctness():
    """Only a group whose episodes differ in correctness gives the correctness term an advantage."""
    def ep(qid, correct):
        return {"question_id": qid, "steps": 1, "correct": correct, "answered": True, "parse_failures": 0,
                "calls_after_end": 0, "budget_exhausted": False}  # fmt: skip

    episodes = [ep("a", True), ep("a", False), ep("b", True), ep("b", True), ep("c", False), ep("c", False),
                ep("d", False), ep("d", True)]  # fmt: skip
    d = episode_diagnostics(episodes, [[]] * 8, [[0]] * 8)
    assert d["episode/mixed_correctness"] == 0.5 and d["episode/informative_rollouts"] == 0.5
    d = episode_diagnostics(episodes[2:6], [[]] * 4, [[0]] * 4)
    assert d["episode/mixed_correctness"] == 0.0 and d["episode/informative_rollouts"] == 0.0


# ----------------------------------------------------------------------------------- checkpoints
def _fake_checkpoint(root: Path, step: int, run_key: dict | None, state_step: int | None = None):
    folder = root / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    if state_step is not None:
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": state_step}))
    if run_key is not None:
        (folder / CHECKPOINT_MARKER).write_text(json.dumps({"run_key": run_key, "step": step, "elapsed_s": 12.5}))
    return folder


def test_prepare_checkpoints_resumes_only_complete_same_run(tmp_path):
    key = {"params_hash": "abc", "start_fingerprint": "f00"}
    root = tmp_path / "ck"
    assert prepare_checkpoints(root, key).checkpoint is None
    _fake_checkpoint(root, 2, key, 2)
    _fake_checkpoint(root, 4, key, 4)
    _fake_checkpoint(root, 6, None, 6)  # killed before our marker: incomplete
    _fake_checkpoint(root, 8, key, None)  # killed before trainer_state.json
    resume = prepare_checkpoints(root, key)
    assert (resume.checkpoint, resume.step, resume.elapsed_s) == (root / "checkpoint-4", 4, 12.5)
    assert sorted(p.name for p in root.iterdir()) == ["checkpoint-2", "checkpoint-4"]
    other = prepare_checkpoints(root, {**key, "start_fingerprint": "new model"})
    assert other.checkpoint is None and "starting fresh" in other.reason and not root.exists()


def test_epoch_sampler_gives_each_epoch_trls_order_in_a_fresh_process():
    from trl.trainer.utils import RepeatSampler

    kwargs = dict(data_source=list(range(5)), mini_repeat_count=2, batch_size=2, repeat_count=2, seed=0)
    trl = RepeatSampler(**kwargs)
    trl_epochs = [list(trl) for _ in range(4)]  # an uninterrupted run: one sampler, iterated once per epoch
    assert len({tuple(e) for e in trl_epochs}) > 1
    assert list(RepeatSampler(**kwargs)) == trl_epochs[0]  # TRL's, built afresh (a resumed run): epoch 0's order

    sampler_class = EpochRepeatSampler
    continued = sampler_class(**kwargs)
    assert [list(continued) for _ in range(4)] == trl_epochs  # iterated on without set_epoch: TRL's order
    for epoch in (3, 1, 1, 0, 2):
        continued.set_epoch(epoch)
        assert list(continued) == trl_epochs[epoch]
        fresh = sampler_class(**kwargs)
        fresh.set_epoch(epoch)
        assert list(fresh) == trl_epochs[epoch]
    unshuffled = sampler_class(**{**kwargs, "shuffle": False})
    unshuffled.set_epoch(2)
    assert list(unshuffled) == list(RepeatSampler(**{**kwargs, "shuffle": False}))


def test_sampler_epoch_callback_sets_the_epoch_from_the_trainer_state():
    from types import SimpleNamespace

    trainer = SimpleNamespace(_epoch_sampler=EpochRepeatSampler(data_source=[0, 1], mini_repeat_count=2))
    callback = sampler_epoch_callback(trainer)
    for state_epoch, epoch in ((0, 0), (None, 0), (2.0, 2), (1.5, 1), (3 + 2 / 3, 3)):
        callback.on_epoch_begin(None, SimpleNamespace(epoch=state_epoch), None)
        assert trainer._epoch_sampler.epoch == epoch
    sampler_epoch_callback(SimpleNamespace()).on_epoch_begin(None, SimpleNamespace(epoch=1.0), None)  # no sampler yet


def test_completion_only_logprobs_match_trl_default(tmp_path):
    import torch
    import trl.trainer.utils as trl_utils
    from transformers import AutoModelForCausalLM

    from sqlenv.train.tiny_model import build_tiny_model

    model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "tiny", dtype="float32"))
    trl_utils.add_fused_lm_head(model, temperature=0.9, outputs=("log_probs", "entropy"))
    ids = torch.randint(0, 151_000, (2, 40), generator=torch.Generator().manual_seed(0))
    labels = ids.clone()
    labels[:, :30] = -100  # a prompt of 30 tokens, 10 completion tokens scored
    original = trl_utils._use_triton
    default = model(input_ids=ids, labels=labels, fused_lm_head=True)
    with compact_lm_head():
        assert trl_utils._use_triton(torch.device("cpu"))
        compact = model(input_ids=ids, labels=labels, fused_lm_head=True)
    assert trl_utils._use_triton is original
    assert torch.allclose(default.log_probs, compact.log_probs, atol=1e-5)
    assert torch.allclose(default.entropy, compact.entropy, atol=1e-4)
    assert (compact.log_probs[:, :29] == 0).all() and (compact.log_probs[:, 30:] != 0).all()


def test_compact_lm_head_sends_only_labelled_positions_to_the_head_kernel(tmp_path, monkeypatch):
    """What the `_use_triton` swap is for, counted where it pays: the positions TRL's fused head hands its chunked
    log-prob kernel. Off: every position of the batch (TRL's choice off Triton); on: only the labelled ones. Fails
    if TRL stops reading the swapped name (the count would be every position again)."""
    import trl.trainer.utils as trl_utils
    from transformers import AutoModelForCausalLM

    from sqlenv.train.tiny_model import build_tiny_model

    model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "tiny", dtype="float32"))
    trl_utils.add_fused_lm_head(model, temperature=1.0, outputs=("log_probs",))
    ids = torch.randint(0, 151_000, (2, 40), generator=torch.Generator().manual_seed(0))
    labels = ids.clone()
    labels[:, :30] = -100  # each row: 30 prompt positions, then 10 scored ones (the last has no next token)
    seen: list[int] = []
    kernel = trl_utils._ChunkedLogProbFunction

    class Counting:
        @staticmethod
        def apply(hidden, *args):
            seen.append(hidden.shape[0])
            return kernel.apply(hidden, *args)

    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", Counting)
    model(input_ids=ids, labels=labels, fused_lm_head=True)
    with compact_lm_head():
        model(input_ids=ids, labels=labels, fused_lm_head=True)
    assert seen == [2 * 39, 2 * 10]  # shifted by one: 39 positions a row predict a next token, 10 of them labelled


# ------------------------------------------------------------- TRL end to end (scripted model turns)
SCRIPTS = [
    [("describe", {"table_name": "singer"}), ("query", {"sql": "SELECT count(*) FROM singer"}), ("answer", {"value": "5"})],
    [("describe", {"table_name": "singer"}), ("query", {"sql": "SELECT count(*) FROM concert"}), ("answer", {"value": "3"})],
    [("query", {"statement": "SELECT 1"}), ("describe", {"table_name": "singers"}), ("answer", {"value": "42"}),
     ("query", {"sql": "SELECT 1"})],
]  # fmt: skip
COUNT_QUESTIONS = [
    Question(id=f"count_{i}", db_id="concert", question=text, gold_sql="SELECT count(*) FROM singer", tables=("singer",))
    for i, text in enumerate(["How many singers are there?", "Count the singers.", "What is the number of singers?",
                              "How many singers does the database list?"])
]  # fmt: skip


def _scripted_generation(trainer, tokenizer):
    """Replace the model's sampling by scripted turns: rollout i of a batch plays SCRIPTS[i % 3], then
    a plain reply, through whichever loop the trainer plays (`RolloutFunc`, or TRL's own, which passes
    only the rollouts that made a tool call, in order, to later turns)."""
    turns = [
        ['<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call><|im_end|>' % (n, json.dumps(a)) for n, a in s]
        + [prompts.FINAL_REPLY + "<|im_end|>"]
        for s in SCRIPTS
    ]
    if trainer.rollout_func is not None:
        script = lambda key, k, context: turns[key % len(turns)][min(k, len(turns[key % len(turns)]) - 1)]  # noqa: E731
        trainer.rollout_func.make_generator = replaying(tokenizer, script)
        return
    state = {"active": [], "turn": {}}

    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if not state["active"]:  # a new generation batch
            state["active"], state["turn"] = list(range(len(prompt_ids))), {}
        assert len(prompt_ids) == len(state["active"])
        out, still = [], []
        for rollout in state["active"]:
            script = turns[rollout % len(turns)]
            k = state["turn"].get(rollout, 0)
            state["turn"][rollout] = k + 1
            out.append(tokenizer(script[min(k, len(script) - 1)], add_special_tokens=False).input_ids)
            if k < len(script) - 1:
                still.append(rollout)
        state["active"] = still
        return out, None

    trainer._generate_single_turn = generate


@pytest.fixture(scope="module")
def scripted_run(tmp_path_factory, concert_db_dir):
    from transformers import AutoTokenizer, TrainerCallback

    from sqlenv.train.tiny_model import build_tiny_model

    root = tmp_path_factory.mktemp("grpo")
    tiny = build_tiny_model(root / "tiny", dtype="float32")
    questions = root / "train.jsonl"
    questions.write_text("".join(json.dumps(q.to_dict()) + "\n" for q in COUNT_QUESTIONS))
    p = repo_params()
    p["model"]["dtype"] = "float32"
    p["grpo"].update(batch_size=3, gradient_accumulation_steps=1, checkpoint_every=1, lora_r=4, lora_alpha=8, few_shot_steps=1)
    p["grpo_phase1"].update(beta=0.0, max_steps=2, num_generations=3, max_completion_length=768)
    settings = phase_settings(phase_sections(p, 1), 1)
    steps = []

    class Recorder(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            logs = trainer._logs
            steps.append({"prompt": copy.deepcopy(list(logs["prompt"])), "completion": copy.deepcopy(list(logs["completion"])),
                          "rewards": {k: list(v) for k, v in logs["rewards"].items()}, "advantages": list(logs["advantages"]),
                          "extra": {k: list(v) for k, v in logs["extra"].items()},
                          "transcripts": sample_transcripts(logs, state.global_step, 2)})  # fmt: skip

    key = {"params_hash": "test", "start_fingerprint": "tiny"}
    trainer = build_trainer(settings, model_path=tiny, questions_file=questions, db_dir=concert_db_dir,
                            checkpoint_dir=root / "ck", callbacks=[Recorder(), checkpoint_marker_callback(key)])  # fmt: skip
    _scripted_generation(trainer, AutoTokenizer.from_pretrained(tiny))
    with compact_lm_head():  # as the stage trains
        trainer.train()
    return {"trainer": trainer, "steps": steps, "root": root, "tiny": tiny, "key": key}


def test_trl_appends_env_reward_with_weight_one_after_zero_weight_components(scripted_run):
    trainer = scripted_run["trainer"]
    assert trainer.reward_func_names == [*COMPONENTS, ENV_REWARD_NAMES[0]]
    assert trainer.reward_weights.tolist() == [0.0] * len(COMPONENTS) + [1.0]


def test_components_are_logged_and_do_not_move_the_advantage(scripted_run):
    for step in scripted_run["steps"]:
        rewards, n = step["rewards"], len(step["advantages"])
        assert n == 3  # one question x 3 generations, one group
        env = rewards[ENV_REWARD_NAMES[0]]
        for i in range(n):
            assert sum(rewards[c][i] for c in COMPONENTS) == pytest.approx(env[i], abs=1e-6)
        assert rewards["correctness"] == [1.0, 0.0, 0.0]
        mean = statistics.fmean(env)  # scale_rewards="none": advantage = reward - group mean
        assert step["advantages"] == pytest.approx([r - mean for r in env], abs=1e-5)
        assert step["extra"]["verdict"] == ["correct", "wrong", "wrong"]


def test_per_step_metrics_and_curve(scripted_run):
    history = scripted_run["trainer"].state.log_history
    rows = curve_rows(history)
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["episode/accuracy"] == pytest.approx(1 / 3)
        assert row["episode/tool_call_parse_rate"] == 1.0
        assert row["episode/calls_after_answer"] == pytest.approx(1 / 3)
        assert row["episode/turns"] == pytest.approx((4 + 4 + 5) / 3)
        assert row["tools/call_frequency"] == pytest.approx((3 + 3 + 4) / 3)
        assert row["rewards/correctness/mean"] == pytest.approx(1 / 3)
        assert row["frac_reward_zero_std"] == 0.0
    # Which questions each step generated for (one question x 3 generations per step here), and how many so far.
    ids = {q.id for q in COUNT_QUESTIONS}
    assert all(row["questions"] in ids for row in rows)
    assert [r["distinct_questions"] for r in rows] == [1, len({r["questions"] for r in rows})]
    summary = summarize_curve(rows)
    assert summary["accuracy_mean"] == pytest.approx(1 / 3) and summary["steps_logged"] == 2
    assert summary["distinct_questions"] == rows[-1]["distinct_questions"]
    # one right and two wrong a step: every rollout is in a group of mixed correctness; nothing oversampled
    assert informative_rollouts(rows, 3) == {"informative_rollouts": 6.0, "groups_played": None}
    assert informative_rollouts([{**rows[0], "episode/informative_rollouts": float("nan"), "sampling/groups_played": 4.0}], 3) == {
        "informative_rollouts": 0.0, "groups_played": 4.0}


def test_few_shot_examples_only_for_the_first_steps(scripted_run):
    first, second = (s["prompt"][0][0]["content"] for s in scripted_run["steps"])
    assert first.startswith(prompts.SYSTEM_PROMPT) and "Worked examples" in first
    assert second == prompts.SYSTEM_PROMPT
    shown = {q.question for q in COUNT_QUESTIONS if q.question in first}
    asked = {s["prompt"][0][1]["content"].split("\n\n")[0] for s in scripted_run["steps"]}
    assert len(shown) == 2 and not shown & asked  # a question whose answer is shown is never trained on


def test_transcripts_hold_full_episodes(scripted_run):
    records = scripted_run["steps"][0]["transcripts"]
    assert len(records) == 2
    for r in records:
        roles = [m["role"] for m in r["messages"]]
        assert roles[:3] == ["system", "user", "assistant"] and "tool" in roles
        assert set(r["reward_components"]) == set(COMPONENTS) and r["verdict"] in ("correct", "wrong")
        assert r["reward"] == pytest.approx(sum(r["reward_components"].values()), abs=1e-6)


def test_checkpoints_are_marked_and_resumable(scripted_run):
    root, key = scripted_run["root"], scripted_run["key"]
    marker = json.loads((root / "ck" / "checkpoint-2" / CHECKPOINT_MARKER).read_text())
    assert marker["run_key"] == key and marker["step"] == 2
    assert (root / "ck" / "checkpoint-2" / "optimizer.pt").is_file() and (root / "ck" / "checkpoint-2" / "rng_state.pth").is_file()
    assert prepare_checkpoints(root / "ck", key).checkpoint == root / "ck" / "checkpoint-2"


def test_final_model_is_merged_and_plain(scripted_run, tmp_path):
    from transformers import AutoModelForCausalLM

    trainer, tiny = scripted_run["trainer"], scripted_run["tiny"]
    out = tmp_path / "model"
    out.mkdir()
    fingerprint = save_final_model(trainer, tiny, out, {"stage": "grpo_phase1", "dtype": "float32"})
    names = {p.name for p in out.iterdir()}
    assert not any(n.startswith("adapter") for n in names) and "model.safetensors" in names
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert hashlib.sha256((out / name).read_bytes()).digest() == hashlib.sha256((tiny / name).read_bytes()).digest()
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["fingerprint"] == fingerprint and provenance["training"][-1]["stage"] == "grpo_phase1"
    model = AutoModelForCausalLM.from_pretrained(out)
    assert not any("lora" in n for n, _ in model.named_parameters())


def test_bf16_loss_runs_under_autocast_without_adapter_input_casts_and_generation_without(tmp_path, concert_db_dir):  # noqa: F811
    """On a CPU in bf16 the policy forward pass of the loss runs under autocast, and there the LoRA layers skip
    the input cast to their fp32 adapters (`sqlenv.train.adapters`); generation runs without autocast (where
    it would only add casts). Seen from inside a real training step. Fails if `compute_loss` stops being
    where TRL's loss forward runs, or if the hook is not installed."""
    import torch
    from peft.tuners.lora import LoraLayer

    from sqlenv.train.tiny_model import build_tiny_model

    tiny = build_tiny_model(tmp_path / "tiny", dtype="bfloat16")
    questions = tmp_path / "train.jsonl"
    questions.write_text("".join(json.dumps(q.to_dict()) + "\n" for q in COUNT_QUESTIONS))
    p = repo_params()
    p["model"]["dtype"] = "bfloat16"
    p["grpo"].update(batch_size=2, gradient_accumulation_steps=1, lora_r=4, lora_alpha=8, checkpoint_every=10)
    p["grpo_phase1"].update(beta=0.0, max_steps=1, num_generations=2, max_completion_length=12)
    trainer = build_trainer(phase_settings(phase_sections(p, 1), 1), model_path=tiny, questions_file=questions,
                            db_dir=concert_db_dir, checkpoint_dir=tmp_path / "ck")  # fmt: skip
    assert trainer.loss_autocast and not trainer.args.bf16  # not Trainer-wide: that would wrap generation too
    lora = [m for m in trainer.model.modules() if isinstance(m, LoraLayer)]
    assert lora and {p.dtype for m in lora for p in m.lora_A.parameters()} == {torch.float32}
    seen = []
    lora[0].register_forward_hook(
        lambda m, a, out: seen.append((torch.is_grad_enabled(), torch.is_autocast_enabled("cpu"), m.cast_input_dtype_enabled))
    )
    with compact_lm_head():
        trainer.train()
    loss = [(autocast, cast) for grad, autocast, cast in seen if grad]  # what the loss backpropagates through
    generation = [(autocast, cast) for grad, autocast, cast in seen if not grad]
    assert loss and set(loss) == {(True, False)}, seen
    assert generation and set(generation) == {(False, True)}, seen
    assert math.isfinite(trainer.state.log_history[-1]["train_loss"])


def _shared_prefix_trainer(tmp_path, concert_db_dir, shared: bool, checkpointing=False, **phase):  # noqa: F811
    from sqlenv.train.tiny_model import build_tiny_model

    tiny = build_tiny_model(tmp_path / "tiny", dtype="float32")
    questions = tmp_path / "train.jsonl"
    questions.write_text("".join(json.dumps(q.to_dict()) + "\n" for q in COUNT_QUESTIONS))
    p = repo_params()
    p["model"]["dtype"] = "float32"
    p["grpo"].update(batch_size=1, gradient_accumulation_steps=6, lora_r=4, lora_alpha=8, checkpoint_every=10,
                     shared_prefix=shared, activation_checkpointing=checkpointing)  # fmt: skip
    p["grpo_phase1"].update(**{"beta": 0.04, "max_steps": 2, "num_generations": 3, "learning_rate": 1e-3, **phase})
    trainer = build_trainer(phase_settings(phase_sections(p, 1), 1), model_path=tiny, questions_file=questions,
                            db_dir=concert_db_dir, checkpoint_dir=tmp_path / f"ck-{shared}-{checkpointing}")  # fmt: skip
    return trainer, tiny


@pytest.mark.parametrize("checkpointing", [False, "auto"])
def test_shared_prefix_passes_give_trls_gradients_and_run_the_prefix_once(tmp_path, concert_db_dir, checkpointing):  # noqa: F811
    """`grpo.shared_prefix`: each rollout's log-prob passes run without padding, after the prompt prefix the
    step's rollouts share, encoded once per pass kind (the loss's, with gradient; the KL reference's, without).
    Two real steps (scripted turns, beta > 0, so the reference pass and, in step 2, the KL gradient count) hand
    the optimizer the gradients of TRL's padded passes without activation checkpointing. Fails if the prefix's
    gradient is dropped (`SharedPrefix.finish`), if the prefix runs per rollout, or if a rollout's positions are
    misaligned. `auto` (float32 here): the shared side replays its layers in the backward (activation
    checkpointing) and must keep attending to the prefix's cache (`replayable_under_checkpointing`)."""
    from transformers import AutoTokenizer, TrainerCallback

    runs = {}
    for shared in (False, True):
        trainer, tiny = _shared_prefix_trainer(tmp_path, concert_db_dir, shared, checkpointing if shared else False)
        grads, lengths = [], []

        class Grads(TrainerCallback):
            def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
                grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad})

        trainer.add_callback(Grads())
        _scripted_generation(trainer, AutoTokenizer.from_pretrained(tiny))
        trainer.model.get_input_embeddings().register_forward_pre_hook(lambda m, a: lengths.append(a[0].shape[-1]))
        with compact_lm_head():
            trainer.train()
        runs[shared] = (trainer, grads, lengths)
    (plain, grads_plain, lengths_plain), (shared, grads_shared, lengths_shared) = runs[False], runs[True]
    prefix = len(shared._prefix_ids)
    assert prefix > 100 and not plain.shared_prefix
    assert shared.args.activation_checkpointing is bool(checkpointing) and not plain.args.activation_checkpointing
    # per step: 6 rollouts x (reference + loss) passes; shared: + one prefix per pass kind
    assert len(lengths_plain) == 2 * 12 and lengths_plain.count(prefix) == 0
    assert len(lengths_shared) == 2 * 14 and lengths_shared.count(prefix) == 4
    assert sum(lengths_shared) < sum(lengths_plain) - 2 * 10 * prefix  # 12 prefixes and the padding saved per step
    assert len(grads_plain) == len(grads_shared) == 2
    for step_plain, step_shared in zip(grads_plain, grads_shared):
        assert step_plain.keys() == step_shared.keys()
        for name in step_plain:
            torch.testing.assert_close(step_shared[name], step_plain[name], rtol=1e-3, atol=1e-6)
    losses = [[e["loss"] for e in t.state.log_history if "loss" in e] for t in (plain, shared)]
    assert losses[0] == pytest.approx(losses[1], rel=1e-4, abs=1e-7)


def test_rollout_log_probs_match_trls_padded_rows_and_skip_empty_completions(tmp_path, concert_db_dir):  # noqa: F811
    """One padded batch as TRL builds it (left-padded prompts of different lengths, right-padded completions, one
    completion fully masked as `mask_truncated_completions` leaves a truncated one): our pass gives TRL's
    log-probs and entropies on every scored position, zeros elsewhere, and the same gradient of a masked loss."""
    import torch

    trainer, _ = _shared_prefix_trainer(tmp_path, concert_db_dir, True)
    model = trainer.model
    g = torch.Generator().manual_seed(0)
    shared = torch.randint(10, 5000, (40,), generator=g).tolist()
    prompts_ = [shared + torch.randint(10, 5000, (n,), generator=g).tolist() for n in (3, 9, 5)]
    completions = [torch.randint(10, 5000, (n,), generator=g).tolist() for n in (7, 12, 4)]
    width_p, width_c = max(map(len, prompts_)), max(map(len, completions))
    ids = torch.zeros(3, width_p + width_c, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, (p, c) in enumerate(zip(prompts_, completions)):
        ids[i, width_p - len(p) : width_p] = torch.tensor(p)
        ids[i, width_p : width_p + len(c)] = torch.tensor(c)
        mask[i, width_p - len(p) : width_p + (0 if i == 2 else len(c))] = 1  # row 2: completion masked out
    score = mask[:, width_p:].float()

    def run(ours: bool):
        model.zero_grad()
        trainer._prefix_ids = batch_prompt_prefix(ids[:, :width_p], mask[:, :width_p]) if ours else []
        trainer._step_prefix = None
        trainer.shared_prefix = ours
        logps, entropy, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, width_c, batch_size=1, compute_entropy=True)
        (logps * score).sum().backward()
        if ours:
            assert trainer._step_prefix is not None and trainer._step_prefix.length == 40  # the shared tokens
            trainer._step_prefix.finish()
        return logps.detach() * score, entropy.detach() * score, {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    trl_logps, trl_entropy, trl_grads = run(False)
    our_logps, our_entropy, our_grads = run(True)
    torch.testing.assert_close(our_logps, trl_logps, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(our_entropy, trl_entropy, rtol=1e-4, atol=1e-5)
    for name in trl_grads:
        torch.testing.assert_close(our_grads[name], trl_grads[name], rtol=1e-3, atol=1e-6)
    rows = [rollout_log_probs(model, ids[i], mask[i], width_c, None, contextlib.nullcontext) for i in range(3)]
    assert rows[2] is None and all(r is not None for r in rows[:2])
    logps, _ = stack_rows([None, None], width_c, ids.device)
    assert logps.requires_grad and not logps.any()  # a micro-batch of empty completions still backpropagates (zero)
