"""The first check on a GPU machine: the device policy's choices, then the tiny model through evaluation's batched
episode loop, an SFT step and a GRPO step on CUDA, each timed, all to one JSON file.

Sized for a lent GPU session (no network there; torch, transformers, peft and accelerate installed, not trl,
datasets, dvc or mlflow; at most 64 MiB travels per call, wheels included; 15 minutes a session). What this
machine lacks comes as wheels under `shared/gpu_wheels/` (made here, beside the repo, once):

    .venv/bin/pip download --no-deps -d ../shared/gpu_wheels trl==1.16.0 datasets==<the lock's> \
        dill multiprocess xxhash   # + pyarrow's wheel if the image has no pyarrow (~40 MB)

and on the GPU machine, in one call (the tiny model is built there from the tokenizer files in tests/):

    pip install --no-deps --no-index shared/gpu_wheels/*.whl -t /tmp/w && PYTHONPATH=/tmp/w:. \
        python bench/gpu_check.py --out $OUT/gpu_check.json

Each part records its seconds, or `skipped` with the import that failed, so a partial image still gives the
parts it can run. `--device cpu` runs the same script here (the parts are small: seconds to a minute).

Parts:
1. `policy`: the GRPO rows of `sqlenv.devices` resolved for this device (what the stage would choose).
2. `evaluate`: 24 episodes of the fixture questions through `sqlenv.eval.rollout.play_model` on the device
   (batch 8, greedy, 64 tokens a turn), episodes per second; the tiny random model makes no calls, so this
   times decoding, not the tools.
3. `sft`: `sqlenv.train.sft` on 4 oracle trajectories for 2 steps (`max_steps`), seconds per step.
4. `grpo`: one GRPO step through the device policy's path (on CUDA: TRL's own tool loop and batched
   log-prob passes), seconds, and the same step with `rollout_decoder: sqlenv` (the episode loop through
   `rollout_func`) for the A/B the policy's choice rests on.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for extra in (REPO, REPO / "tests"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))


def part(results: dict, name: str, fn) -> None:
    t0 = time.monotonic()
    try:
        results[name] = {**fn(), "seconds": round(time.monotonic() - t0, 2)}
    except ImportError as exc:
        results[name] = {"skipped": f"import failed: {exc}"}
    except Exception as exc:  # noqa: BLE001 - a check records what failed and goes on to the next part
        results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=6)}
    print(name, json.dumps(results[name])[:300], flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default=None, help="cuda (default when torch sees one) or cpu")
    args = ap.parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device.startswith("cuda")
    os.environ["SQLENV_DEVICE"] = device
    results: dict = {"device": device, "torch": torch.__version__,
                     "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="gpu_check_"))

    def policy():
        from sqlenv.devices import grpo_policy

        rows = {}
        for processes, vllm in ((1, "none"), (2, "none"), (1, "colocate")):
            p = grpo_policy(cuda=cuda, processes=processes, use_vllm=vllm, dtype="bfloat16")
            rows[f"{processes}proc_{vllm}"] = p.__dict__
        return {"rows": rows}

    @functools.cache
    def fixtures():  # the tiny model and the fixture database, built once
        from fixtures_env import QUESTIONS, make_concert_db

        from sqlenv.train.tiny_model import build_tiny_model

        db_dir = work / "db"
        db_dir.mkdir(exist_ok=True)
        make_concert_db(db_dir)
        return build_tiny_model(work / "tiny", dtype="float32"), db_dir, list(QUESTIONS)

    def evaluate():
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from sqlenv.eval.rollout import play_model

        tiny, db_dir, questions = fixtures()
        model = AutoModelForCausalLM.from_pretrained(tiny).to(device)
        tokenizer = AutoTokenizer.from_pretrained(tiny)
        t0 = time.monotonic()
        records = play_model(model, tokenizer, questions * 8, db_dir=db_dir, batch_size=8, max_new_tokens_per_turn=64,
                               max_total_tokens=256, progress=False)  # fmt: skip
        s = time.monotonic() - t0
        return {"episodes": len(records), "episodes_per_s": round(len(records) / s, 3), "tokens": sum(r.tokens for r in records)}

    def grpo():
        from test_grpo import COUNT_QUESTIONS, repo_params

        from sqlenv.devices import grpo_policy
        from sqlenv.train.grpo import build_trainer, phase_sections, phase_settings

        tiny, db_dir, _ = fixtures()
        questions = work / "train.jsonl"
        questions.write_text("".join(json.dumps(q.to_dict()) + "\n" for q in COUNT_QUESTIONS))
        out = {}
        for decoder in ("auto", "sqlenv"):
            p = repo_params()
            p["model"]["dtype"] = "float32"
            p["grpo"].update(batch_size=2, lora_r=4, lora_alpha=8, rollout_decoder=decoder)
            p["grpo_phase1"].update(max_steps=1, num_generations=2, max_completion_length=64)
            settings = phase_settings(phase_sections(p, 1), 1)
            row = grpo_policy(cuda=cuda, processes=1, use_vllm="none", dtype="float32", rollout_decoder=decoder)
            trainer = build_trainer(settings, model_path=tiny, questions_file=questions, db_dir=db_dir,
                                    checkpoint_dir=work / f"ck_{decoder}", policy=row)  # fmt: skip
            t0 = time.monotonic()
            trainer.train()
            out[decoder] = {"rollout_decoder": row.rollout_decoder, "shared_prefix": row.shared_prefix,
                            "step_s": round(time.monotonic() - t0, 2), "model_device": str(trainer.model.device)}  # fmt: skip
        return out

    def sft():
        from sqlenv.data.questions import build_questions
        from sqlenv.data.sft_data import SFTDataConfig, build_sft_data
        from sqlenv.env.environment import EnvConfig
        from sqlenv.train.sft import TrainConfig, train_sft

        tiny, _, _ = fixtures()
        world = work / "world"
        world.mkdir(exist_ok=True)
        built = build_questions(world, seed=0, source="synthetic", domains=["retail"], databases_per_domain=1, questions_per_db=8)
        records = build_sft_data(built.questions, world, EnvConfig(), SFTDataConfig()).records
        config = TrainConfig(max_examples=4, gradient_accumulation_steps=2, logging_steps=1, max_length=4096)
        result = train_sft(records, tiny, work / "sft", config, output_dir=work / "sft_ck")
        return {"steps": result.steps, "loss": [row["loss"] for row in result.curve]}

    part(results, "policy", policy)
    part(results, "evaluate", evaluate)
    part(results, "sft", sft)
    part(results, "grpo", grpo)
    if cuda:
        results["peak_cuda_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0 if not any("error" in v for v in results.values() if isinstance(v, dict)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
