"""What the report reads: the evaluation results of the live models, the training curves, and the tables
built from them.

Inputs are what earlier stages wrote: `reports/eval/<policy>_<set>/metrics.json` (+ `samples.jsonl`),
the SFT loss CSV and the GRPO per-step curves. Whatever is missing is listed as missing, never guessed.

Which numbers come from where:
- The policy x set table and the hardness table are the evaluate stage's own `metrics` block
  (`evaluation.episode_metrics`), so the report shows exactly what that stage logged.
- Paired comparisons need the episodes, so they use `samples.jsonl`; it must agree with its metrics
  file (same n, same number correct), else loading fails — a stale samples file must not slip into a
  p-value. Pairs are compared only within one question set.
- Only results of the live environment mode enter (`schema` x `answer`: what the model was shown and how
  its answers were scored, `result_mode`); pairs are never formed across modes, and every table title
  states the mode.
- Only results of the live models enter: given the live model fingerprint of each policy and the live
  question ids of each set (`Live`), a result whose model fingerprint or questions differ (an older
  model's, a by-hand run on another checkpoint) is listed as stale and left out of every table, test,
  plot and transcript. The report never pairs episodes of different models.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from sqlenv.data.splits import INDOMAIN
from sqlenv.eval.evaluation import paired_comparisons
from sqlenv.eval.policies import POLICIES as POLICY_SPECS
from sqlenv.types import EpisodeRecord

POLICIES = tuple(POLICY_SPECS)
HELD_OUT_SETS = ("n50", "n200")  # questions of held-out domains (n50 ⊂ n200)
# INDOMAIN (sqlenv.data.splits): the in-domain probe, unseen questions of the training domains (`data.indomain`; may be empty)
SETS = (*HELD_OUT_SETS, INDOMAIN)
INDOMAIN_PAIR = ("grpo_phase2", "sft")  # what the probe is for: did RL learn where it trained
HEADLINE = ("n200", "grpo_phase2", "sft")  # the comparison the default run exists for: (set, a, b)
CURVES = ("sft", "grpo_phase1", "grpo_phase2")
ALPHA = 0.05
# The metrics-block keys the table reads (names as `evaluation.episode_metrics` writes them).
TABLE_KEYS = ("n", "correct", "accuracy", "accuracy_low", "accuracy_high", "parse_rate", "lenient_parse_rate",
              "valid_call_rate", "steps_mean", "answered_rate", "calls_after_answer_mean", "tokens_mean")  # fmt: skip
# What each curve summary reports (first/last-quarter means), when the column exists and has values.
CURVE_SUMMARY = {"sft": ("loss",), "grpo": ("reward", "rewards/correctness/mean", "episode/accuracy", "kl",
                                               "episode/mixed_correctness")}


def result_mode(info: Mapping[str, Any]) -> str:
    """`schema=<hidden|full> answer=<value|sql>` of a result (metrics.json without its metrics block); results
    written before the modes existed (or without an env block) were hidden/value. `text_to_sql` for a result
    not played in the env (its env block is null)."""
    env = info.get("env", {})
    if not isinstance(env, dict):
        return "text_to_sql"
    return f"schema={env.get('schema', 'hidden')} answer={env.get('answer', 'value')}"


@dataclass
class EvalResult:
    """One policy on one question set: the metrics block, the rest of metrics.json, and the episodes."""

    policy: str
    set: str
    metrics: dict[str, Any]
    info: dict[str, Any]
    records: list[EpisodeRecord] | None = None  # None when samples.jsonl is absent

    @property
    def accuracy(self) -> float:
        return float(self.metrics["accuracy"] or 0.0)

    @property
    def mode(self) -> str:
        return result_mode(self.info)


@dataclass
class ReportInputs:
    results: list[EvalResult]
    curves: dict[str, pd.DataFrame] = field(default_factory=dict)  # CURVES name -> frame, present ones only
    notes: list[str] = field(default_factory=list)  # problems worth a line in the report
    stale: list[str] = field(default_factory=list)  # results left out, each with why
    groups: dict[str, str] = field(default_factory=dict)  # question id -> held-out group (domain); {}: unknown


@dataclass(frozen=True)
class Live:
    """What a result must match to enter the report: each policy's live model fingerprint (None: the
    policy plays no model) and each set's question ids."""

    fingerprints: Mapping[str, str | None]
    question_ids: Mapping[str, Sequence[str]]
    mode: str | None = None  # the live environment mode (`result_mode` form); None: not checked
    groups: Mapping[str, str] = field(default_factory=dict)  # question id -> `Question.group` (the held-out unit)

    def why_stale(self, result: EvalResult) -> str | None:
        if self.mode is not None and result.mode != self.mode:
            return f"played in mode {result.mode}, not the live {self.mode}"
        model = result.info.get("model") if isinstance(result.info.get("model"), dict) else {}
        played = model.get("fingerprint")
        if result.policy not in self.fingerprints:
            return f"no live model to check it against ({result.policy})"
        live = self.fingerprints[result.policy]
        if played != live:
            return f"model fingerprint {played} is not the live model's {live}"
        ids = self.question_ids.get(result.set)
        if ids is None:
            return f"no live question set {result.set}"
        played_ids = [r.question_id for r in result.records] if result.records is not None else result.info.get("question_ids")
        if played_ids is None or sorted(played_ids) != sorted(ids):
            return f"its questions are not the live {result.set} questions"
        return None


# ------------------------------------------------------------------------------------------- loading
def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON: {e.msg}") from e
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data


def read_records(path: Path) -> list[EpisodeRecord]:
    """The episodes of a samples.jsonl; ValueError naming the line that is not one."""
    records = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                records.append(EpisodeRecord.from_dict(json.loads(line)))
            except (json.JSONDecodeError, TypeError, AttributeError) as e:
                raise ValueError(f"{path}:{lineno}: not an episode record: {e}") from e
    return records


def load_result(folder: Path, policy: str, set_name: str) -> EvalResult:
    """One `reports/eval/<policy>_<set>/` folder; ValueError on a malformed or inconsistent one."""
    path = folder / "metrics.json"
    data = _read_json(path)
    for key, expected in (("policy", policy), ("set", set_name)):
        if data.get(key, expected) != expected:
            raise ValueError(f"{path}: {key} is {data[key]!r} but the folder says {expected!r}")
    metrics = data.get("metrics")
    lacking = [k for k in (*TABLE_KEYS, "by_hardness") if not isinstance(metrics, dict) or k not in metrics]
    if lacking:
        raise ValueError(f"{path}: the metrics block lacks {lacking} (expected evaluation.episode_metrics output)")
    info = {k: v for k, v in data.items() if k != "metrics"}
    records = None
    if (folder / "samples.jsonl").is_file():
        records = read_records(folder / "samples.jsonl")
        correct = sum(r.correct for r in records)
        if (len(records), correct) != (metrics["n"], metrics["correct"]):
            raise ValueError(f"{folder / 'samples.jsonl'}: {len(records)} episodes, {correct} correct, but "
                             f"metrics.json says n={metrics['n']}, correct={metrics['correct']} (stale files?)")  # fmt: skip
    return EvalResult(policy, set_name, metrics, info, records)


def load_curve(path: Path, required: Sequence[str]) -> pd.DataFrame | None:
    """A per-step CSV sorted by step, or None when the file does not exist."""
    if not path.is_file():
        return None
    try:
        frame = pd.read_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as e:
        raise ValueError(f"{path}: not a readable CSV: {e}") from e
    lacking = [c for c in required if c not in frame.columns]
    if lacking:
        raise ValueError(f"{path}: lacks column(s) {lacking}")
    return frame.sort_values("step", kind="stable").reset_index(drop=True)


def load_inputs(
    eval_dir: str | os.PathLike[str], curve_files: Mapping[str, str | os.PathLike[str]], live: Live | None = None
) -> ReportInputs:
    """Every evaluation folder under `eval_dir` (in POLICIES x SETS order) that matches `live`, and the
    curves that exist. Without `live`, nothing is checked (tests of the rendering)."""
    eval_dir, found, notes, stale = Path(eval_dir), {}, [], []
    for folder in sorted(eval_dir.iterdir()) if eval_dir.is_dir() else []:
        if not folder.is_dir() or folder.name.startswith("."):  # .tmp siblings of an atomic write
            continue
        policy, _, set_name = folder.name.rpartition("_")
        if policy not in POLICIES or set_name not in SETS:
            notes.append(f"`{folder.name}` is not a `<policy>_<set>` folder; ignored.")
        elif not (folder / "metrics.json").is_file():
            notes.append(f"`{folder.name}` has no metrics.json (evaluation unfinished); left out.")
        else:
            result = load_result(folder, policy, set_name)
            if not result.info.get("n", 1):  # the probe under data.indomain: 0
                notes.append(f"`{folder.name}`: an empty question set (the in-domain probe is off: data.indomain 0).")
                continue
            why = live.why_stale(result) if live is not None else None
            if why is not None:
                stale.append(f"`{folder.name}`: {why}")
                continue
            found[policy, set_name] = result
            if result.records is None:
                notes.append(f"`{folder.name}` has no samples.jsonl: not in paired comparisons or transcripts.")
    results = [found[p, s] for s in SETS for p in POLICIES if (p, s) in found]
    curves = {}
    for name in CURVES:
        frame = load_curve(Path(curve_files[name]), ("step", "loss" if name == "sft" else "reward"))
        if frame is not None:
            curves[name] = frame
    return ReportInputs(results, curves, notes, stale, dict(live.groups) if live is not None else {})


# -------------------------------------------------------------------------------------------- tables
TRAINING_STAGES = ("sft", "grpo_phase1", "grpo_phase2")
COST_STAGES = ("prepare", "prepare_model", "sft_data", *TRAINING_STAGES)  # in DAG order; evaluations follow, by name


def curve_files(reports: Path) -> dict[str, Path]:
    """Where each training curve is written: `reports/sft/loss.csv`, `reports/grpo_phase{1,2}/curve.csv`."""
    return {"sft": reports / "sft" / "loss.csv", **{name: reports / name / "curve.csv" for name in CURVES[1:]}}


def stage_documents(reports: Path) -> dict[str, dict]:
    """The metrics.json of each stage before the evaluations (`reports/<stage>/`) and of each evaluation that exists
    (`reports/eval/<policy>_<set>/`), by stage name, for the cost table."""
    files = {name: reports / name / "metrics.json" for name in COST_STAGES}
    files.update({f"evaluate@{d.name}": d / "metrics.json" for d in sorted((reports / "eval").glob("*")) if d.is_dir()})
    return {name: json.loads(f.read_text(encoding="utf-8")) for name, f in files.items() if f.is_file()}


def stage_costs(docs: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per stage whose metrics.json recorded its machine (`system`, from `pipeline.machine.summary`):
    wall seconds, peak RSS, the compute dtype (and, for `auto`, the timings it was chosen by), threads and
    the 1-minute load at the start and the end (a load above the thread count means the timing was
    contended). Evaluations read off another run's episodes (n50 from n200) took no time of their own and
    are left out."""
    rows = []
    for stage, doc in docs.items():
        system = doc.get("system")
        if not system or doc.get("played_on", doc.get("set")) != doc.get("set"):
            continue
        dtype = doc.get("dtype") or {}  # `sqlenv.dtype.DtypeChoice.as_dict()`: what the stage computed in
        rows.append({
            "stage": stage, "wall_s": doc.get("wall_time_s"), "peak_rss_mb": system.get("peak_rss_mb"),
            "peak_cuda_mb": system.get("peak_cuda_mb"), "dtype": dtype.get("dtype") or (doc.get("settings") or {}).get("dtype"),
            "bf16_ms": dtype.get("bf16_ms"), "fp32_ms": dtype.get("fp32_ms"), "threads": system.get("torch_threads"),
            "load1_start": system.get("load1_start"), "load1_end": system.get("load1_end"),
            "cpu_model": system.get("cpu_model"), "cpu_isa": system.get("cpu_isa"), "steps": doc.get("steps") if stage in TRAINING_STAGES else None,
            "seconds_per_step": doc.get("seconds_per_step"),
            "distinct_questions": doc.get("distinct_questions"),
        })  # fmt: skip
    return rows


def results_table(results: Sequence[EvalResult]) -> pd.DataFrame:
    """One row per policy and set with the TABLE_KEYS columns."""
    rows = [{"set": r.set, "policy": r.policy, **{k: r.metrics[k] for k in TABLE_KEYS}} for r in results]
    return pd.DataFrame(rows, columns=["set", "policy", *TABLE_KEYS])


def hardness_table(results: Sequence[EvalResult]) -> pd.DataFrame:
    """One row per policy, set and hardness level present: n, correct, accuracy and its interval."""
    keys = ("n", "correct", "accuracy", "accuracy_low", "accuracy_high")
    rows = [
        {"set": r.set, "policy": r.policy, "hardness": level, **{k: m.get(k) for k in keys}}
        for r in results
        for level, m in r.metrics["by_hardness"].items()
    ]
    return pd.DataFrame(rows, columns=["set", "policy", "hardness", *keys])


def comparisons_table(results: Sequence[EvalResult]) -> pd.DataFrame:
    """Every pair of policies with episodes on the same set; `a` is the later (more trained) policy."""
    rows = []
    for set_name in SETS:
        for mode in dict.fromkeys(r.mode for r in results):  # never a pair across modes
            # Reversed POLICIES order, so `difference` reads "more trained minus less trained".
            group = {r.policy: r.records for r in reversed(results)
                     if r.set == set_name and r.mode == mode and r.records is not None}  # fmt: skip
            if len(group) >= 2:
                rows += [{"set": set_name, **row} for row in paired_comparisons(group, ALPHA)]
    columns = ["set", "a", "b", "n", "accuracy_a", "accuracy_b", "difference", "difference_low",
               "difference_high", "only_a_correct", "only_b_correct", "mcnemar_p"]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def curve_summary(curves: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Per curve and column: steps logged, first-quarter, last-quarter and final means (NaNs skipped)."""
    rows = []
    for name, frame in curves.items():
        for column in CURVE_SUMMARY["sft" if name == "sft" else "grpo"]:
            values = pd.to_numeric(frame[column], errors="coerce").dropna() if column in frame else pd.Series()
            if values.empty:
                continue
            q = max(1, math.ceil(len(values) / 4))
            rows.append({"curve": name, "column": column, "steps": len(values), "first_quarter": values[:q].mean(),
                         "last_quarter": values[-q:].mean(), "final": values.iloc[-1]})  # fmt: skip
    return pd.DataFrame(rows, columns=["curve", "column", "steps", "first_quarter", "last_quarter", "final"])
