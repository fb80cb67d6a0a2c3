"""What a GRPO phase leaves behind: resumable checkpoints, the merged model, its curve and transcripts.

- Crash safety: TRL/Trainer checkpoints (LoRA adapter or weights + optimizer, scheduler, RNG and the
  trainer state, whose `log_history` is the learning curve so far) go to a folder outside every DVC
  out. A marker written after each save (`checkpoint_marker_callback`; Trainer writes
  trainer_state.json last, then fires `on_save`) records the run key (params hash + starting model
  fingerprint) and the wall time so far. `prepare_checkpoints` resumes only from a complete checkpoint
  of the same run key and deletes the rest, so TRL's rotation never mixes runs. Because the restored
  `log_history` holds every earlier step, a resumed run's curve is complete without extra state.
- The final model: LoRA merged with `safe_merge` and saved as a plain model, the starting folder's
  tokenizer files copied byte for byte (`save_final_model`).
- The curve (`curve_rows`: fixed columns, one row per logged step) and its summary, and transcripts
  sampled from `GRPOTrainer._logs` (the latest generation batch).
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlenv.env.rewards import COMPONENTS
from sqlenv.provenance import PROVENANCE_FILE, model_fingerprint, read_provenance
from sqlenv.train.grpo import ENV_REWARD_NAMES, EPISODE_METRICS, SAMPLING_METRICS
from sqlenv.train.merge import save_trained

CHECKPOINT_MARKER = "sqlenv_checkpoint.json"


# ------------------------------------------------------------------------------------- crash safety
@dataclass(frozen=True)
class Resume:
    """Where a phase starts: `checkpoint` None means from scratch; `reason` says why, for the log."""

    checkpoint: Path | None
    step: int
    elapsed_s: float
    reason: str


def _checkpoint_step(path: Path) -> int | None:
    name = path.name
    if path.is_dir() and name.startswith("checkpoint-") and name[len("checkpoint-"):].isdigit():
        return int(name[len("checkpoint-"):])
    return None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def prepare_checkpoints(checkpoint_dir: str | os.PathLike[str], run_key: Mapping[str, Any], remove: bool = True) -> Resume:
    """Pick the newest complete checkpoint of the same run; remove every other one (`remove=False`: only
    pick — the other processes of a multi-process run, which make the same choice as the main one).

    Complete = our marker (written after TRL saved everything, trainer_state.json last) names the
    same `run_key` and step, and trainer_state.json parses. Incomplete ones (killed mid-save) and
    those of another run key (params or starting model changed) are deleted so TRL's rotation never
    mixes runs.
    """
    root = Path(checkpoint_dir)
    found = sorted((s, p) for p in (root.iterdir() if root.is_dir() else ()) if (s := _checkpoint_step(p)) is not None)
    good: list[tuple[int, Path, dict]] = []
    for step, path in found:
        marker = _read_json(path / CHECKPOINT_MARKER)
        state = _read_json(path / "trainer_state.json")
        if isinstance(marker, dict) and marker.get("run_key") == dict(run_key) and marker.get("step") == step and isinstance(state, dict) and state.get("global_step") == step:
            good.append((step, path, marker))
        elif remove:
            shutil.rmtree(path, ignore_errors=True)
    if good:
        step, path, marker = good[-1]
        return Resume(path, step, float(marker.get("elapsed_s", 0.0)), f"resuming from {path} (step {step})")
    if found:
        if remove:
            shutil.rmtree(root, ignore_errors=True)
        return Resume(None, 0, 0.0, f"{len(found)} checkpoint(s) in {root} were incomplete or of another run (params or starting model changed); starting fresh")
    return Resume(None, 0, 0.0, "no checkpoint; starting fresh")


def checkpoint_marker_callback(run_key: Mapping[str, Any], elapsed_before_s: float = 0.0):
    """A TrainerCallback that marks each saved checkpoint complete (run key, step, cumulative wall time)."""
    from transformers import TrainerCallback

    class CheckpointMarker(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.started = time.monotonic()

        def on_save(self, args, state, control, **kwargs):
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            marker = {"run_key": dict(run_key), "step": state.global_step,
                      "elapsed_s": elapsed_before_s + time.monotonic() - self.started}  # fmt: skip
            tmp = folder / f".{CHECKPOINT_MARKER}.tmp"
            tmp.write_text(json.dumps(marker, sort_keys=True), encoding="utf-8")
            os.replace(tmp, folder / CHECKPOINT_MARKER)

    return CheckpointMarker()


# --------------------------------------------------------------------------------------- final model
# What tokenizer.save_pretrained writes (any of them, depending on the tokenizer class).
def save_final_model(trainer, start_model: str | os.PathLike[str], out_dir: str | os.PathLike[str], info: Mapping[str, Any]) -> str:
    """Save the trained policy as a plain model into (empty) `out_dir` (`train.merge.save_trained`); return its
    fingerprint. provenance.json is the starting model's plus a `training` entry per phase."""
    start = Path(start_model)
    provenance = read_provenance(start) if (start / PROVENANCE_FILE).is_file() else {}
    provenance.pop("fingerprint", None)
    entry = {**info, "parent_fingerprint": model_fingerprint(start)}
    record = save_trained(trainer, out_dir, start_dir=start, dtype=info.get("dtype", "bfloat16"),
                          provenance={**provenance, "training": [*provenance.get("training", []), entry]})  # fmt: skip
    # The phase's entry names the folder it made, as the top-level fingerprint does.
    record["training"][-1]["fingerprint"] = record["fingerprint"]
    (Path(out_dir) / PROVENANCE_FILE).write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n",
                                               encoding="utf-8")  # fmt: skip
    return record["fingerprint"]


# ----------------------------------------------------------------------------------- curve, transcripts
ENV_REWARD_COLUMN = "rewards/env/mean"  # the environment's get_reward, whichever adapter class TRL named it after
CURVE_COLUMNS = (
    "step", "reward", "reward_std", "frac_reward_zero_std", "loss", "kl", "entropy", "grad_norm", "learning_rate",
    *(f"rewards/{c}/mean" for c in COMPONENTS), ENV_REWARD_COLUMN,
    "tools/call_frequency", "tools/failure_frequency", *EPISODE_METRICS, *SAMPLING_METRICS,
    "completions/mean_length", "completions/clipped_ratio", "step_time",
    "questions", "distinct_questions",  # the step's question ids (space-separated); distinct ids seen so far
)  # fmt: skip


def curve_rows(log_history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per logged training step (TRL's log entries), fixed columns, None where not logged."""
    rows = {}
    for entry in log_history:
        if "reward" in entry and "step" in entry:
            row = {c: entry.get(c) for c in CURVE_COLUMNS}
            row[ENV_REWARD_COLUMN] = next((entry[f"rewards/{n}/mean"] for n in ENV_REWARD_NAMES
                                           if f"rewards/{n}/mean" in entry), None)  # fmt: skip
            rows[int(entry["step"])] = row
    seen: set[str] = set()
    for step in sorted(rows):
        seen.update((rows[step].get("questions") or "").split())
        rows[step]["distinct_questions"] = len(seen)
    return [rows[s] for s in sorted(rows)]


def _mean(values: Sequence[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    return sum(vals) / len(vals) if vals else None


def summarize_curve(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Final, first-quarter and last-quarter means of the reward and of accuracy (mean correctness)."""
    q = max(1, math.ceil(len(rows) / 4))
    out: dict[str, Any] = {"steps_logged": len(rows), "distinct_questions": (rows[-1].get("distinct_questions") or 0) if rows else 0}
    for key, column in (("reward", "reward"), ("accuracy", "episode/accuracy")):
        values = [r.get(column) for r in rows]
        out[f"{key}_final"] = values[-1] if values else None
        out[f"{key}_first_quarter"] = _mean(values[:q])
        out[f"{key}_last_quarter"] = _mean(values[-q:])
        out[f"{key}_mean"] = _mean(values)
    return out


def informative_rollouts(rows: Sequence[Mapping[str, Any]], rollouts_per_step: int) -> dict[str, Any]:
    """Rollouts trained on in groups of mixed correctness (where the correctness term has a gradient), summed over
    the curve's steps, and the groups played for them (dynamic sampling plays more than it trains on)."""
    informative = sum(float(v) * rollouts_per_step for r in rows
                      if (v := r.get("episode/informative_rollouts")) is not None and not math.isnan(float(v)))  # fmt: skip
    played = sum(float(r.get("sampling/groups_played") or 0) for r in rows)
    return {"informative_rollouts": round(informative, 1), "groups_played": round(played, 1) if played else None}


def sample_transcripts(trainer_logs: Mapping[str, Any], step: int, n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Up to `n` full episodes of the latest generation batch, from `GRPOTrainer._logs`.

    TRL keeps the last generation batch there (prompts with the reset observation, completions as
    messages, each reward function's values, advantages, and our `log_extra` columns).
    """
    prompts_, completions = list(trainer_logs["prompt"]), list(trainer_logs["completion"])
    rewards, extra = trainer_logs["rewards"], trainer_logs["extra"]
    env_reward = next((list(rewards[n]) for n in ENV_REWARD_NAMES if n in rewards), None)
    advantages = list(trainer_logs["advantages"])
    picked = sorted(random.Random(seed * 1_000_003 + step).sample(range(len(prompts_)), min(n, len(prompts_))))
    out = []
    for i in picked:
        record = {
            "step": step,
            "messages": [*prompts_[i], *completions[i]],
            "reward": env_reward[i] if env_reward is not None else None,
            "reward_components": {c: list(rewards[c])[i] for c in COMPONENTS if c in rewards},
            "advantage": advantages[i] if i < len(advantages) else None,
        }
        record.update({k: list(v)[i] for k, v in extra.items() if i < len(v)})
        out.append(record)
    return out


def render_transcript(messages: Sequence[Mapping[str, Any]]) -> str:
    """A readable one-string rendering of an episode (for MLflow tables)."""
    lines = []
    for m in messages:
        calls = m.get("tool_calls") or ()
        text = str(m.get("content") or "")
        call_text = "; ".join(f"{c.get('function', c).get('name')}({json.dumps(c.get('function', c).get('arguments'), ensure_ascii=False)})" for c in calls)
        lines.append(f"[{m.get('role')}] {text}{' -> ' + call_text if call_text else ''}")
    return "\n".join(lines)
