"""SFT step time and memory with one knob on against off: the shared prompt prefix encoded once per step
(`--vary shared_prefix`, the default: against TRL's own passes), activation checkpointing (`--vary
activation_checkpointing`: the stage's `auto` turns it on in float32; the other knobs as params.yaml sets
them) or the trainable token rows trained without whole-vocabulary copies (`--vary trainable_rows`:
`sqlenv.train.trainable_rows`, always on in the stage, against peft's and TRL's own path); same trajectories,
same model, same process.

Both sides train `--steps` optimizer steps through the stage's builder (`sqlenv.train.sft.build_trainer`, with
params.yaml's `sft` section and the dtype `model.dtype` resolves to, as the stage does) on the same
trajectories: the first `steps x batch x accumulation` of the stage's own selection from
data/sft/train.jsonl (`select_examples`), in the trainer's shuffled order (seeded: the same in both). Only
the varied knob differs. Runs alternate (`--repeats`, each side first once), so slow drift of the machine
falls on both; a fresh trainer per run, the model loaded each time (its load is timed apart). A step's
seconds run from one `on_step_end` to the next (the first from `on_train_begin`). Reported: seconds per step
per run and their median per side, the ratio (knob on / off), the tokens each side ran through the model
(an embedding hook counts them), the final loss of each run (equal up to float rounding: the gradients are
the same, tests check), peak RSS per run (Linux VmHWM, reset before each run) and its ratio.

    .venv/bin/python bench/bench_sft.py --steps 4 --repeats 2 --out bench/results/sft.json
    .venv/bin/python bench/bench_sft.py --vary activation_checkpointing --steps 3 --repeats 1
    .venv/bin/python bench/bench_sft.py --vary trainable_rows --steps 6 --repeats 2
    .venv/bin/python bench/bench_sft.py --model tiny --steps 2 --repeats 1     # a quick check
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a plain script from anywhere, package installed or not
    sys.path.insert(0, str(REPO))

import bench_machine  # noqa: E402
from bench_grpo import _reset_peak_rss, _vm_hwm_mb  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

from pipeline import machine  # noqa: E402
from pipeline.io import print_json  # noqa: E402
from pipeline.params import load_params  # noqa: E402
from sqlenv.dtype import choose_dtype  # noqa: E402


# The knob `--vary` turns on for one side -> (that side's name in the JSON, the key of the on/off ratios).
SIDES = {
    "shared_prefix": ("shared_prefix", "ratio_shared_over_plain"),
    "activation_checkpointing": ("checkpointing", "ratio_checkpointing_over_plain"),
    "trainable_rows": ("sparse_rows", "ratio_sparse_rows_over_plain"),  # not a params knob: see measure()
}


class StepClock(TrainerCallback):
    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._last = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self._last = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        self.seconds.append(now - self._last)
        self._last = now


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """--model, --params, --data: what an SFT benchmark trains on (this one and bench_onednn_cache)."""
    parser.add_argument("--model", default=None, help="HF model folder, or `tiny` (default: models/base)")
    parser.add_argument("--params", type=Path, default=REPO / "params.yaml")
    parser.add_argument("--data", type=Path, default=REPO / "data", help="holds sft/train.jsonl")


def sft_model(arg: str | None) -> tuple[str, bool]:
    """The model folder `--model` names, and whether it is the tiny random model (built here, trained in float32)."""
    if arg == "tiny":
        from sqlenv.train.tiny_model import build_tiny_model

        return str(build_tiny_model(Path(tempfile.gettempdir()) / "sqlenv-bench-tiny-float32", dtype="float32")), True
    return arg or str(REPO / "models" / "base"), False


def records_for(data: Path, tiny_root: Path | None, sft: dict[str, Any], seed: int, n: int) -> tuple[list[dict], str]:
    """The stage's selection's first `n` trajectories (data/sft/train.jsonl), else a small synthetic world's."""
    from sqlenv.train.sft import select_examples

    path = data / "sft" / "train.jsonl"
    if path.is_file():
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        label = str(path)
    else:
        from sqlenv.data.questions import build_questions
        from sqlenv.data.sft_data import SFTDataConfig, build_sft_data
        from sqlenv.env.environment import EnvConfig

        built = build_questions(tiny_root, seed=0, source="synthetic", domains=["retail"], databases_per_domain=1, questions_per_db=30)
        records = build_sft_data(built.questions, tiny_root, EnvConfig(), SFTDataConfig()).records
        label = "synthetic:retail x 30"
    chosen = select_examples(records, sft["max_examples"], seed)[:n]
    if len(chosen) < n:
        raise ValueError(f"{label} holds {len(chosen)} trajectories, the run needs {n}")
    return chosen, label


def measure(records: list[dict], model: str, config: Any, sparse_rows: bool = True) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from sqlenv.provenance import chat_template_kwargs
    from sqlenv.train.sft import build_dataset, build_trainer, training_patches

    tokenizer = AutoTokenizer.from_pretrained(model)
    dataset, stats = build_dataset(records, tokenizer, config.max_length, chat_template_kwargs(model), config.train_on_mistakes)
    clock, tokens = StepClock(), []
    reset = _reset_peak_rss()
    out = Path(tempfile.mkdtemp(prefix="bench-sft-"))
    t0 = time.perf_counter()
    trainer = build_trainer(model, dataset, config, out, callbacks=[clock])
    build_s = time.perf_counter() - t0
    trainer.model.get_input_embeddings().register_forward_pre_hook(lambda m, a: tokens.append(a[0].numel()))
    with training_patches(trainer.model, sparse_rows), contextlib.redirect_stdout(sys.stderr):
        output = trainer.train()
    result = {
        "shared_prefix": config.shared_prefix,
        "activation_checkpointing": bool(trainer.args.activation_checkpointing),
        "trainable_rows": sparse_rows,
        "prefix_tokens": len(getattr(trainer, "_prefix_ids", [])),
        "build_s": round(build_s, 2),
        "seconds_per_step": [round(s, 3) for s in clock.seconds],
        "seconds_per_step_mean": statistics.fmean(clock.seconds),
        "tokens_run": sum(tokens),
        "trajectory_tokens": stats.tokens,
        "train_loss": output.training_loss,
        "peak_rss_mb": _vm_hwm_mb() if reset else None,
    }
    del trainer
    gc.collect()
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_source_arguments(parser)
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per run")
    parser.add_argument("--repeats", type=int, default=2, help="runs per side, alternating")
    parser.add_argument("--vary", choices=sorted(SIDES), default="shared_prefix", help="the knob on one side, off on the other")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.repeats < 1:
        parser.error("--steps and --repeats must be >= 1")
    machine.set_runtime()  # the stages' threads and oneDNN cache bound, before anything computes (oneDNN reads it once)

    import torch

    from sqlenv.train.sft import TrainConfig

    params = dataclasses.asdict(load_params(args.params))
    scratch = Path(tempfile.mkdtemp(prefix="bench-sft-data-"))
    model, tiny = sft_model(args.model)
    dtype = choose_dtype("float32" if tiny else params["model"]["dtype"], model)
    sft = dict(params["sft"])
    per_step = sft["batch_size"] * sft["gradient_accumulation_steps"]
    records, label = records_for(args.data, scratch, sft, params["seed"], args.steps * per_step)
    result: dict[str, Any] = {
        "model": model, "params": str(args.params), "trajectories": label, "steps": args.steps,
        "repeats": args.repeats, "vary": args.vary, "sequences_per_step": per_step, "dtype": dtype.as_dict(),
        **bench_machine.record(), "torch_threads": torch.get_num_threads(),
    }  # fmt: skip
    runs: list[dict[str, Any]] = []
    for i in range(args.repeats):
        for on in ((True, False) if i % 2 else (False, True)):
            rows = on if args.vary == "trainable_rows" else True  # the stage's way unless it is the knob
            fields = sft if args.vary == "trainable_rows" else {**sft, args.vary: on}
            config = TrainConfig.from_params(fields, seed=params["seed"], dtype=dtype.dtype, max_steps=args.steps)
            runs.append(measure(records, model, config, sparse_rows=rows))
    result["loadavg_after"] = os.getloadavg()
    result["runs"] = runs
    side = {s: [r for r in runs if r[args.vary] is s] for s in (True, False)}
    median = {s: statistics.median(r["seconds_per_step_mean"] for r in side[s]) for s in side}
    name, ratio_key = SIDES[args.vary]
    result["seconds_per_step_median"] = {name: median[True], "plain": median[False]}
    peak = {s: side[s][0]["peak_rss_mb"] for s in side}
    result[ratio_key] = {
        "seconds_per_step": median[True] / median[False],
        "tokens_run": side[True][0]["tokens_run"] / side[False][0]["tokens_run"],
        "peak_rss_mb": peak[True] / peak[False] if peak[True] and peak[False] else None,
    }
    print_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
