"""SFT with oneDNN's primitive cache at its default (1,024 entries) against the stages' bound
(`pipeline.machine.ONEDNN_CACHE_CAPACITY`, 64): peak memory per step and time, same trajectories, same model.

oneDNN reads its cache capacity once, when it creates its first primitive, so each run is a fresh process
(this script with `--child`) with ONEDNN_PRIMITIVE_CACHE_CAPACITY set before torch computes anything. Each
run trains `--steps` optimizer steps (default: the stage's whole run, 48 steps at params.yaml's `sft`) through
the stage's builder (`sqlenv.train.sft.build_trainer`, params.yaml's `sft` section, the dtype `model.dtype`
resolves to) on the stage's own selection from data/sft/train.jsonl, in the trainer's seeded order: the same
in every run. Runs alternate (`--repeats`, each side first once), so slow drift of the machine falls on both.
Reported per run: seconds per step, training seconds, the peak resident memory of each step (Linux VmHWM,
reset when the step begins) and of the whole run, the final loss (the same on both sides: the cache changes
which kernels are kept, not what they compute). Then the medians per side and the ratios (bounded / default).

    .venv/bin/python bench/bench_onednn_cache.py --out bench/results/onednn_cache_xeon.json
    .venv/bin/python bench/bench_onednn_cache.py --model tiny --steps 2     # a quick check
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import subprocess
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
from bench_sft import add_source_arguments, records_for, sft_model  # noqa: E402

from pipeline import machine  # noqa: E402
from pipeline.io import print_json  # noqa: E402
from pipeline.params import load_params  # noqa: E402

DEFAULT_CAPACITY = 1024  # oneDNN's own default


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One run in this fresh process: the capacity first, then torch."""
    machine.bound_onednn_cache(args.child)
    machine.set_threads()
    import torch
    from transformers import AutoTokenizer, TrainerCallback

    from sqlenv.dtype import choose_dtype
    from sqlenv.provenance import chat_template_kwargs
    from sqlenv.train.sft import TrainConfig, build_dataset, build_trainer, training_patches

    class StepMeter(TrainerCallback):
        """Seconds and peak resident memory of each optimizer step (VmHWM reset when it begins)."""

        def __init__(self) -> None:
            self.seconds: list[float] = []
            self.peak_gib: list[float] = []
            self._t = 0.0

        def on_step_begin(self, *a: Any, **k: Any) -> None:
            _reset_peak_rss()
            self._t = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            self.seconds.append(round(time.perf_counter() - self._t, 3))
            hwm = _vm_hwm_mb()
            self.peak_gib.append(round(hwm / 1024, 3) if hwm is not None else float("nan"))

    params = dataclasses.asdict(load_params(args.params))
    model = args.model
    dtype = choose_dtype("float32" if args.tiny else params["model"]["dtype"], model)
    sft = dict(params["sft"])
    per_step = sft["batch_size"] * sft["gradient_accumulation_steps"]
    scratch = Path(tempfile.mkdtemp(prefix="bench-onednn-data-"))
    steps = args.steps or sft["max_examples"] // per_step  # the stage's run: its selection, one epoch
    records, label = records_for(args.data, scratch, sft, params["seed"], steps * per_step)
    config = TrainConfig.from_params(sft, seed=params["seed"], dtype=dtype.dtype, max_steps=steps)
    tokenizer = AutoTokenizer.from_pretrained(model)
    dataset, stats = build_dataset(records, tokenizer, config.max_length, chat_template_kwargs(model), config.train_on_mistakes)
    meter = StepMeter()
    trainer = build_trainer(model, dataset, config, scratch / "out", callbacks=[meter])
    t0 = time.perf_counter()
    with training_patches(trainer.model), contextlib.redirect_stdout(sys.stderr):  # stdout carries the result only
        output = trainer.train()
    train_s = time.perf_counter() - t0
    return {
        "capacity": int(os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"]),
        "trajectories": label,
        "trajectory_tokens": stats.tokens,
        "steps": len(meter.seconds),
        "dtype": dtype.dtype,
        "torch_threads": torch.get_num_threads(),
        "train_s": round(train_s, 1),
        "seconds_per_step_mean": round(statistics.fmean(meter.seconds), 3),
        "seconds_per_step": meter.seconds,
        "step_peak_rss_gib": meter.peak_gib,
        "peak_rss_gib": max(meter.peak_gib),
        "train_loss": output.training_loss,
    }


def run_child(args: argparse.Namespace, capacity: int) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in machine.ONEDNN_CACHE_VARS}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(capacity), "--model", args.model,
           "--params", str(args.params), "--data", str(args.data), "--steps", str(args.steps)]  # fmt: skip
    if args.tiny:
        cmd.append("--tiny")
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_source_arguments(parser)
    parser.add_argument("--steps", type=int, default=0, help="optimizer steps per run (0: the stage's run, sft.max_examples / (batch x accumulation))")
    parser.add_argument("--repeats", type=int, default=1, help="runs per side, alternating")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps < 0 or args.repeats < 1:
        parser.error("--steps must be >= 0 and --repeats >= 1")
    if args.steps == 0 and not load_params(args.params).sft.max_examples:
        parser.error("--steps 0 (the stage's run) needs sft.max_examples > 0 in the params")
    if args.child is not None:
        print(json.dumps(child(args)))
        return {}
    args.model, args.tiny = sft_model(args.model)
    bounded = machine.ONEDNN_CACHE_CAPACITY
    result: dict[str, Any] = {
        "model": args.model, "params": str(args.params), "steps": args.steps or "the stage's run", "repeats": args.repeats,
        "capacities": {"default": DEFAULT_CAPACITY, "bounded": bounded}, **bench_machine.record(),
    }  # fmt: skip
    runs: list[dict[str, Any]] = []
    for i in range(args.repeats):
        for capacity in ((bounded, DEFAULT_CAPACITY) if i % 2 else (DEFAULT_CAPACITY, bounded)):
            runs.append(run_child(args, capacity))
    result["loadavg_after"] = os.getloadavg()
    result["runs"] = runs
    side = {c: [r for r in runs if r["capacity"] == c] for c in (DEFAULT_CAPACITY, bounded)}
    median = {c: {k: statistics.median(r[k] for r in side[c]) for k in ("train_s", "seconds_per_step_mean", "peak_rss_gib")}
              for c in side}  # fmt: skip
    result["median"] = {"default": median[DEFAULT_CAPACITY], "bounded": median[bounded]}
    result["ratio_bounded_over_default"] = {
        k: median[bounded][k] / median[DEFAULT_CAPACITY][k] for k in ("train_s", "seconds_per_step_mean", "peak_rss_gib")
    }
    print_json(result, args.out)
    return result


if __name__ == "__main__":
    main()
