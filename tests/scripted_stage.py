"""`python tests/scripted_stage.py --phase N`: the GRPO stage as DVC runs it, with the policy's sampling scripted.

A tiny random model never ends a turn nor makes a tool call, so every completion is truncated, every
reward equal and every gradient zero: its weights never move, and a test comparing weights would prove
nothing. Here each rollout's first turn is drawn from torch's global generator (the one HF sampling
draws from, saved and restored by checkpoints) among a right answer for `q_count`, a wrong one and
no tool call; a turn after a tool result is the plain final reply. Everything else (the stage, the episode
loop through TRL's rollout_func, the environment and its rewards, log-probs, optimizer, checkpoints) is the
real code, so rewards vary within a group, advantages are non-zero and the weights depend on every prompt
and draw. (With `grpo.rollout_decoder: trl` TRL's own turn generation is scripted the same way.)
"""

from __future__ import annotations

import contextlib
import json
import runpy

import torch
from trl import GRPOTrainer

from sqlenv.env import prompts

FIRST_TURNS = (
    '<tool_call>\n{"name": "answer", "arguments": %s}\n</tool_call><|im_end|>' % json.dumps({"value": "5"}),
    '<tool_call>\n{"name": "answer", "arguments": %s}\n</tool_call><|im_end|>' % json.dumps({"value": "3"}),
    "I cannot tell.<|im_end|>",
)
AFTER_TOOL = prompts.FINAL_REPLY + "<|im_end|>"


def scripted_turn(key, turn, context):
    return AFTER_TOOL if turn else FIRST_TURNS[int(torch.randint(len(FIRST_TURNS), ()))]


def scripted_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
    tokenizer = self.processing_class
    out = []
    for ids in prompt_ids:
        after_tool = "<|im_start|>assistant\n<tool_call>" in tokenizer.decode(ids)
        text = AFTER_TOOL if after_tool else FIRST_TURNS[int(torch.randint(len(FIRST_TURNS), ()))]
        out.append(tokenizer(text, add_special_tokens=False).input_ids)
    return out, None


if __name__ == "__main__":
    from pathlib import Path

    from scripted_turns import ReplayTurns
    from transformers import AutoTokenizer

    import sqlenv.train.rollouts as rollouts

    @contextlib.contextmanager
    def model_generator(model, tokenizer, gen, eos_ids, **_):
        yield ReplayTurns(AutoTokenizer.from_pretrained(Path(model.config.name_or_path)), scripted_turn)

    rollouts.model_generator = model_generator  # the episode loop's turns (grpo.rollout_decoder: sqlenv)
    GRPOTrainer._generate_single_turn = scripted_single_turn  # TRL's own loop's turns (trl)
    runpy.run_module("stages.grpo", run_name="__main__", alter_sys=True)
