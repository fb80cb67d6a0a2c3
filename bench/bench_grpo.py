"""GRPO throughput of the current params against the round-1 configuration: rollouts and questions per minute.

Two configurations run one after the other in this process, on the same machine, model, questions
and every other setting; only the keys in `BASELINE` differ:

- `baseline`: round 1 (1 question x 4 generations per step: grpo.batch_size 4, accumulation 1,
  num_generations 4; phase 1 6 steps + phase 2 4 steps);
- `default`: params.yaml as it is (`--params`), read at run time, never copied here.

Each trains `--steps` real optimizer steps of phase 1 through the stage's own builder
(`phase_sections` -> `phase_settings` -> `build_trainer`, inside `compact_lm_head` as the stage trains),
in a temporary checkpoint folder. A callback stamps `on_train_begin` and every `on_step_end`: a step's
seconds run from the previous stamp (trainer construction and model loading are timed apart, as
`build_s`), and it vetoes checkpoint saves, which the stage does but a throughput figure should not
include. Rollouts and distinct questions per step are counted from what the step actually generated:
the question ids our first reward function logs through TRL's `log_extra` (`trainer._logs["extra"]`,
which holds exactly the latest generation batch, and one generation feeds one step: `plan_batches`).

The numbers to watch are the ratios default / baseline of rollouts per minute and of distinct
questions per minute; absolute seconds depend on the machine's load, which is recorded (load averages
before and after, CPU, threads, commit). Peak RSS is per configuration (Linux: the high-water mark is
reset before each, `/proc/self/clear_refs`), and for the whole process (`pipeline.machine.peak_rss_mb`).

Projections, with their assumptions: GRPO wall time = mean measured phase-1 seconds per step x the
configuration's phase-1 + phase-2 `max_steps` (phase 2 trains medium questions too, with its own
`max_completion_length`: its steps are not measured here). Distinct questions: TRL's sampler draws
questions without replacement within an epoch, so a phase sees steps x questions per step of them
(capped by its pool); phase 2's pool (easy + medium) holds phase 1's questions, so across both phases
the expected count under uniform draws is p1 + p2 x (1 - p1 / |pool 2|), and p1 + p2 is the upper bound.

Not controlled: the order (`--configs`; the first pays first-call costs of the process, e.g. kernel
warm-up), and step-to-step variation of completion lengths, which sampling makes different across
configurations. Two steps of a 0.5B model take several minutes each on the 2-core CPU; time on a quiet
machine. Defaults: models/sft, else models/base (`--model tiny`: the tiny random test model);
data/questions/train.jsonl and data/databases (`--data`), else a fixture database with 24 questions.

    .venv/bin/python bench/bench_grpo.py --steps 2 --out reports/bench/grpo.json
    .venv/bin/python bench/bench_grpo.py --model tiny --steps 1 --max-completion-length 16   # a quick check
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import gc
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a plain script from anywhere, package installed or not
    sys.path.insert(0, str(REPO))

from transformers import TrainerCallback  # noqa: E402

from pipeline import machine  # noqa: E402
from pipeline.params import load_params  # noqa: E402

# Round 1's batch shape: 1 question x 4 generations per step, 6 + 4 steps. Only these keys differ between
# the two configurations; everything else is params.yaml's.
BASELINE: dict[str, dict[str, Any]] = {
    "grpo": {"batch_size": 4, "gradient_accumulation_steps": 1},
    "grpo_phase1": {"num_generations": 4, "max_steps": 6},
    "grpo_phase2": {"num_generations": 4, "max_steps": 4},
}
CONFIGS: dict[str, dict[str, dict[str, Any]]] = {"baseline": BASELINE, "default": {}}


def with_overrides(params: Mapping[str, Any], overrides: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A deep copy of `params` with `{section: {key: value}}` replaced; a key the section lacks raises
    KeyError (a renamed param must not leave the baseline silently on the default)."""
    out = copy.deepcopy(dict(params))
    for section, values in overrides.items():
        for key, value in values.items():
            if key not in out[section]:
                raise KeyError(f"{section}.{key} is not a param")
            out[section][key] = value
    return out


# ------------------------------------------------------------------------------------------- inputs
def resolve_model(spec: str | None, dtype: str) -> str:
    if spec == "tiny":
        from sqlenv.train.tiny_model import build_tiny_model

        # Reused across runs while its recipe matches (build_tiny_model checks), as bench_rollout does.
        return str(build_tiny_model(Path(tempfile.gettempdir()) / f"sqlenv-bench-tiny-{dtype}", dtype=dtype))
    if spec is not None:
        return spec
    for name in ("sft", "base"):
        if (REPO / "models" / name / "config.json").is_file():
            return str(REPO / "models" / name)
    raise FileNotFoundError("no models/sft or models/base: pass --model PATH (or --model tiny)")


def fixture_data(root: Path) -> tuple[Path, Path]:
    """The test fixture's concert database and 24 questions (8 renamed copies of each fixture question:
    enough distinct ids for several questions per step), q_join's copies medium, the rest easy."""
    sys.path.insert(0, str(REPO / "tests"))
    from fixtures_env import QUESTIONS, make_concert_db

    make_concert_db(root / "databases")
    rows = [{**q.to_dict(), "id": f"{q.id}_{i}", "hardness": "medium" if q.id == "q_join" else "easy"}
            for i in range(8) for q in QUESTIONS]  # fmt: skip
    questions = root / "questions" / "train.jsonl"
    questions.parent.mkdir(parents=True)
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return questions, root / "databases"


def resolve_data(data: Path, scratch: Path) -> tuple[Path, Path, str]:
    """(questions file, database folder, label): `<data>/questions/train.jsonl` as the stage reads it, else the fixture."""
    questions = data / "questions" / "train.jsonl"
    if questions.is_file():
        return questions, data / "databases", str(questions)
    questions, db_dir = fixture_data(scratch / "data")
    return questions, db_dir, "fixture:concert x 24"


# ------------------------------------------------------------------------------------------ measuring
class StepClock(TrainerCallback):
    """Seconds of each optimizer step (between consecutive `on_step_end`s, the first from `on_train_begin`)
    and the question ids of the rollouts that step generated; vetoes checkpoint saves."""

    def __init__(self) -> None:
        self.trainer = None
        self.seconds: list[float] = []
        self.question_ids: list[list[str]] = []
        self._last = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self._last = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        self.seconds.append(now - self._last)
        self._last = now
        # `_logs` deques hold generation_batch_size entries: exactly this step's generation.
        self.question_ids.append([str(q) for q in self.trainer._logs["extra"].get("question_id", [])])
        control.should_save = False  # set by DefaultFlowCallback, which runs before us
        return control

    def on_epoch_end(self, args, state, control, **kwargs):
        control.should_save = False
        return control


def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # Linux >= 4.0: VmHWM := current RSS
        return True
    except OSError:
        return False


def _vm_hwm_mb() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)  # kB
    except OSError:
        pass
    return None


def phase_plan(params: Mapping[str, Any], phase: int):
    from sqlenv.train.grpo import phase_sections, phase_settings, plan_batches

    settings = phase_settings(phase_sections(params, phase), phase)
    return settings, plan_batches(settings.batch_size, settings.gradient_accumulation_steps, settings.num_generations)


def measure(params: Mapping[str, Any], *, model: str, questions: Path, db_dir: Path, steps: int,
            max_completion_length: int | None) -> dict[str, Any]:  # fmt: skip
    """Train `steps` phase-1 steps of `params` (max_steps and, if given, max_completion_length overridden)."""
    from sqlenv.train.grpo import build_trainer
    from sqlenv.train.trl_patches import compact_lm_head

    run = {"max_steps": steps, **({"max_completion_length": max_completion_length} if max_completion_length else {})}
    settings, plan = phase_plan(with_overrides(params, {"grpo_phase1": run}), 1)
    clock = StepClock()
    reset = _reset_peak_rss()
    ckpt = Path(tempfile.mkdtemp(prefix="bench-grpo-ckpt-"))
    try:
        t0 = time.perf_counter()
        trainer = build_trainer(settings, model_path=model, questions_file=questions, db_dir=db_dir,
                                checkpoint_dir=ckpt, callbacks=[clock])  # fmt: skip
        clock.trainer = trainer
        build_s = time.perf_counter() - t0
        # transformers prints each log entry to stdout: keep stdout for the JSON.
        with compact_lm_head(), contextlib.redirect_stdout(sys.stderr):
            trainer.train()
        del trainer
        clock.trainer = None
        gc.collect()
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)
    if len(clock.seconds) != steps:
        raise RuntimeError(f"trained {len(clock.seconds)} steps, asked for {steps} (too few questions for the batch?)")
    total_s = sum(clock.seconds)
    rollouts = [len(ids) for ids in clock.question_ids]
    distinct = [len(set(ids)) for ids in clock.question_ids]
    seen = {q for ids in clock.question_ids for q in ids}
    return {
        "batch": {"batch_size": settings.batch_size, "gradient_accumulation_steps": plan.gradient_accumulation_steps,
                  "num_generations": plan.num_generations, "generation_batch_size": plan.generation_batch_size,
                  "prompts_per_step": plan.prompts_per_step},  # fmt: skip
        "max_completion_length": settings.max_completion_length,
        "build_s": round(build_s, 2),
        "seconds_per_step": clock.seconds,
        "seconds_per_step_mean": total_s / steps,
        # The first step of a trainer also pays first-call costs (kernels for new shapes: seconds even for
        # the tiny model), which a phase pays once too; the later steps show the steady state.
        "seconds_per_step_after_first_mean": sum(clock.seconds[1:]) / (steps - 1) if steps > 1 else None,
        "rollouts_per_step": rollouts,
        "rollouts_per_step_mean": sum(rollouts) / steps,
        "rollouts_per_min": sum(rollouts) / total_s * 60,
        "distinct_questions_per_step": distinct,
        "distinct_questions_per_step_mean": sum(distinct) / steps,
        "distinct_questions": len(seen),
        "distinct_questions_per_min": len(seen) / total_s * 60,
        "question_ids": clock.question_ids,
        "peak_rss_mb": _vm_hwm_mb() if reset else None,  # this configuration's own high-water mark
    }


def projection(params: Mapping[str, Any], measured: Mapping[str, Any], questions: Path) -> dict[str, Any]:
    """Full-run wall time and distinct questions of a configuration (assumptions: the module docstring)."""
    from sqlenv.data.questions import load_questions_file

    phases = {}
    for phase in (1, 2):
        settings, plan = phase_plan(params, phase)
        pool = len(load_questions_file(questions, settings.difficulties))
        per_step = measured["distinct_questions_per_step_mean"] if phase == 1 else plan.prompts_per_step
        phases[phase] = {"max_steps": settings.max_steps, "prompts_per_step": plan.prompts_per_step,
                         "pool": pool, "questions": float(min(per_step * settings.max_steps, pool))}  # fmt: skip
    p1, p2, pool2 = phases[1]["questions"], phases[2]["questions"], phases[2]["pool"]
    steps = phases[1]["max_steps"] + phases[2]["max_steps"]
    return {
        "phase1": phases[1],
        "phase2": phases[2],
        "steps": steps,
        "wall_s": measured["seconds_per_step_mean"] * steps,
        "distinct_questions_expected": p1 + p2 * (1 - p1 / pool2),
        "distinct_questions_upper": min(p1 + p2, pool2),
    }


def ratios(results: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """default / baseline, from the measured (and projected) figures."""
    d, b = results["default"], results["baseline"]
    return {
        "rollouts_per_min": d["rollouts_per_min"] / b["rollouts_per_min"],
        "distinct_questions_per_min": d["distinct_questions_per_min"] / b["distinct_questions_per_min"],
        "seconds_per_step": d["seconds_per_step_mean"] / b["seconds_per_step_mean"],
        "projected_wall_s": d["projected"]["wall_s"] / b["projected"]["wall_s"],
        "projected_distinct_questions": d["projected"]["distinct_questions_expected"]
        / b["projected"]["distinct_questions_expected"],
    }


def git_commit() -> tuple[str, bool]:
    # pipeline.tracking.git_commit says the same, but importing it imports mlflow (seconds on this CPU).
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                                capture_output=True, text=True, check=True).stdout  # fmt: skip
        return sha, bool(status.strip())
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="HF model folder, or `tiny` (default: models/sft, else models/base)")
    parser.add_argument("--params", type=Path, default=REPO / "params.yaml", help="the `default` configuration")
    parser.add_argument("--data", type=Path, default=REPO / "data", help="holds questions/train.jsonl and databases/")
    parser.add_argument("--steps", type=int, default=2, help="phase-1 optimizer steps per configuration")
    parser.add_argument("--max-completion-length", type=int, default=None,
                        help="override grpo_phase1.max_completion_length in both (quick checks)")
    parser.add_argument("--configs", default="baseline,default", help="which to run, in this order")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    if args.steps < 1 or not names or set(names) - set(CONFIGS):
        parser.error(f"--steps must be >= 1 and --configs a list of {sorted(CONFIGS)}")

    import torch

    params = dataclasses.asdict(load_params(args.params))
    model = resolve_model(args.model, params["model"]["dtype"])
    scratch = Path(tempfile.mkdtemp(prefix="bench-grpo-"))
    sha, dirty = git_commit()
    facts = machine.facts()  # after importing torch: it then records torch's threads too
    result: dict[str, Any] = {
        "model": model,
        "params": str(args.params),
        "steps": args.steps,
        "order": names,
        "baseline_overrides": BASELINE,
        "git_commit": sha,
        "git_dirty": dirty,
        "cpu_model": facts["system/cpu_model"],
        "nproc": os.cpu_count(),
        "machine": facts,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "loadavg_before": os.getloadavg(),
    }
    try:
        questions, db_dir, result["questions"] = resolve_data(args.data, scratch)
        configs = {}
        for name in names:
            config = with_overrides(params, CONFIGS[name])
            measured = measure(config, model=model, questions=questions, db_dir=db_dir, steps=args.steps,
                               max_completion_length=args.max_completion_length)  # fmt: skip
            measured["projected"] = projection(config, measured, questions)
            configs[name] = measured
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result["loadavg_after"] = os.getloadavg()
    result["peak_rss_mb_process"] = machine.peak_rss_mb()["system/peak_rss_mb"]
    result["configs"] = configs
    if set(CONFIGS) <= set(configs):
        result["ratio_default_over_baseline"] = ratios(configs)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
