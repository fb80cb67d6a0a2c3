"""SFT in the stage's dtype, TRL's own passes, without and with activation checkpointing (PLAN_checkpointing.md).

    .venv/bin/python experiments/avx2_fp32_30/checkpointing_probe.py > experiments/avx2_fp32_30/checkpointing_probe.json
"""
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

import bench_machine  # noqa: E402
import bench_sft  # noqa: E402
import sqlenv.train.sft as sft_module  # noqa: E402
from pipeline.params import load_params  # noqa: E402
from sqlenv.dtype import choose_dtype  # noqa: E402
from sqlenv.train.sft import TrainConfig  # noqa: E402

STEPS = 3
params = dataclasses.asdict(load_params(REPO / "params.yaml"))
model = str(REPO / "models" / "base")
dtype = choose_dtype(params["model"]["dtype"], model)
sft = dict(params["sft"])
per_step = sft["batch_size"] * sft["gradient_accumulation_steps"]
records, label = bench_sft.records_for(REPO / "data", Path(tempfile.mkdtemp()), sft, params["seed"], STEPS * per_step)
config = TrainConfig.from_params({**sft, "shared_prefix": False}, seed=params["seed"], dtype=dtype.dtype, max_steps=STEPS)
build = sft_module.build_trainer
result = {"dtype": dtype.as_dict(), "trajectories": label, "steps": STEPS, **bench_machine.record(), "runs": []}
for checkpointing in (False, True):
    def build_with(*args, _on=checkpointing, **kwargs):
        trainer = build(*args, **kwargs)
        trainer.args.activation_checkpointing = _on
        return trainer
    sft_module.build_trainer = build_with
    run = bench_sft.measure(records, model, config)
    result["runs"].append({"activation_checkpointing": checkpointing, **run})
sft_module.build_trainer = build
print(json.dumps(result, indent=1))
