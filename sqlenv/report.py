"""The final report: evaluation results as tables, paired comparisons, curves and transcripts, in markdown.

Inputs are what earlier stages wrote: `reports/eval/<policy>_<set>/metrics.json` (+ `samples.jsonl`),
the SFT loss CSV and the GRPO per-step curves. Whatever is missing is listed as missing, never guessed:
the report covers the policies and curves that exist.

Which numbers come from where:
- The policy x set table and the hardness table are the evaluate stage's own `metrics` block
  (`evaluation.episode_metrics`), so the report shows exactly what that stage logged.
- Paired comparisons, transcripts and the steps histogram need the episodes, so they use
  `samples.jsonl`; it must agree with its metrics file (same n, same number correct), else loading
  fails — a stale samples file must not slip into a p-value.
- Pairs are compared only within one question set; `evaluation.paired_comparisons` refuses policies
  that were evaluated on different questions.
- Only results of the live models enter: given the live model fingerprint of each policy and the live
  question ids of each set (`Live`), a result whose model fingerprint or questions differ (an older
  model's, a by-hand run on another checkpoint) is listed as stale and left out of every table, test,
  plot and transcript. The report never pairs episodes of different models.

Transcript examples are chosen by a stable hash of the question id (one per hardness level, plus one
that training fixed and one it broke, when such questions exist), never by hand or by file order; the
hardness picks are unconditioned on outcome, so they show typical episodes rather than successes.
What it doesn't do: correct p-values for multiple comparisons (the report says so) or re-judge answers.
Pure library code: plots live in `sqlenv.report_plots`; the `report` stage does the I/O around both.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import os
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from sqlenv.evaluation import paired_comparisons
from sqlenv.policies import POLICIES as POLICY_SPECS
from sqlenv.policies import TRAINED
from sqlenv.stats import wilson_interval
from sqlenv.types import HARDNESS_LEVELS, EpisodeRecord

POLICIES = tuple(POLICY_SPECS)
SETS = ("n50", "n200")
HEADLINE = ("n200", "grpo_phase2", "sft")  # the comparison the default run exists for: (set, a, b)
CURVES = ("sft", "grpo_phase1", "grpo_phase2")
ALPHA = 0.05
# The metrics-block keys the table reads (names as `evaluation.episode_metrics` writes them).
TABLE_KEYS = ("n", "correct", "accuracy", "accuracy_low", "accuracy_high", "parse_rate", "lenient_parse_rate",
              "valid_call_rate", "steps_mean", "answered_rate", "calls_after_answer_mean", "tokens_mean")  # fmt: skip
# What each curve summary reports (first/last-quarter means), when the column exists and has values.
CURVE_SUMMARY = {"sft": ("loss",), "grpo": ("reward", "rewards/correctness/mean", "episode/accuracy", "kl")}
OBSERVATION_LINES, CLIP_CHARS = 4, 110


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


@dataclass
class ReportInputs:
    results: list[EvalResult]
    curves: dict[str, pd.DataFrame] = field(default_factory=dict)  # CURVES name -> frame, present ones only
    notes: list[str] = field(default_factory=list)  # problems worth a line in the report
    stale: list[str] = field(default_factory=list)  # results left out, each with why


@dataclass(frozen=True)
class Live:
    """What a result must match to enter the report: each policy's live model fingerprint (None: the
    policy plays no model) and each set's question ids."""

    fingerprints: Mapping[str, str | None]
    question_ids: Mapping[str, Sequence[str]]

    def why_stale(self, result: EvalResult) -> str | None:
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


def _read_records(path: Path) -> list[EpisodeRecord]:
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
        records = _read_records(folder / "samples.jsonl")
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
    return ReportInputs(results, curves, notes, stale)


# -------------------------------------------------------------------------------------------- tables
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
        # Reversed POLICIES order, so `difference` reads "more trained minus less trained".
        group = {r.policy: r.records for r in reversed(results) if r.set == set_name and r.records is not None}
        if len(group) >= 2:
            rows += [{"set": set_name, **row} for row in paired_comparisons(group, ALPHA)]
    columns = ["set", "a", "b", "n", "accuracy_a", "accuracy_b", "difference", "difference_low",
               "difference_high", "only_a_correct", "only_b_correct", "mcnemar_p"]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def interval_half_width(n: int) -> float:
    """The widest Wilson 95 % half-width an accuracy on n questions can have (at 50 %), in points."""
    low, high = wilson_interval(n // 2, n, ALPHA) if n else (0.0, 1.0)
    return 100 * (high - low) / 2


def significance_sentence(pairs: pd.DataFrame, set_name: str, n: int) -> str:
    """Which pairs differ at ALPHA on one set, in plain words, with the caution the sample size needs."""
    hits = pairs[pairs["mcnemar_p"] < ALPHA]
    claims = []
    for row in hits.itertuples():
        better, worse = (row.a, row.b) if row.difference > 0 else (row.b, row.a)
        acc = {row.a: row.accuracy_a, row.b: row.accuracy_b}
        claims.append(f"{better} beats {worse} ({_pct(acc[better])} vs {_pct(acc[worse])}, p = {_p(row.mcnemar_p)})")
    head = f"On {set_name} (N = {n}), at α = {ALPHA}: "
    head += ("; ".join(claims) + "; no other pair differs." if claims else f"none of the {len(pairs)} pairs differs.")
    k = len(pairs)
    return (f"{head} One accuracy on N = {n} questions has a 95 % interval of up to ±{interval_half_width(n):.0f} "
            f"points, and p-values are not corrected for multiple comparisons ({k} pair{'s' if k != 1 else ''}: "
            f"about {ALPHA * k:.1f} false positives expected by chance alone): do not over-read small differences.")  # fmt: skip


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


# ----------------------------------------------------------------------------------------- transcripts
def _stable_key(question_id: str) -> str:
    return hashlib.sha256(question_id.encode()).hexdigest()


def transcript_pair(results: Sequence[EvalResult]) -> tuple[str, str, str] | None:
    """(set, baseline, trained): `base` (else `random`) against the most accurate trained policy, on n200
    if both ran there (more questions to choose from), else n50; without a trained policy, the most
    accurate other policy against `random`. Ties go to the later policy in POLICIES."""
    for need_trained in (True, False):
        for set_name in reversed(SETS):
            have = {r.policy: r for r in results if r.set == set_name and r.records is not None}
            pool = [p for p in (TRAINED if need_trained else POLICIES) if p in have and p != "random"]
            baseline = next((p for p in (("base", "random") if need_trained else ("random",)) if p in have), None)
            if pool and baseline:
                best = max(pool, key=lambda p: (have[p].accuracy, POLICIES.index(p)))
                return set_name, baseline, best
    return None


def pick_examples(baseline: Sequence[EpisodeRecord], trained: Sequence[EpisodeRecord]) -> list[tuple[str, str]]:
    """(label, question_id) pairs: one question per hardness level (easy, medium, hard) in stable-hash order,
    then — unless already among them — the first the trained policy improved (baseline wrong, trained right)
    and the first it regressed (the other way round)."""
    base = {r.question_id: r for r in baseline}
    ids = sorted((r.question_id for r in trained if r.question_id in base), key=_stable_key)
    after = {r.question_id: r for r in trained}
    picks: list[tuple[str, str]] = []
    for level in HARDNESS_LEVELS[:3]:
        qid = next((q for q in ids if after[q].hardness == level), None)
        if qid is not None:
            picks.append((level, qid))
    for label, test in (("improved", lambda q: after[q].correct and not base[q].correct),
                        ("regressed", lambda q: base[q].correct and not after[q].correct)):  # fmt: skip
        if not any(test(q) for _, q in picks):
            qid = next((q for q in ids if test(q)), None)
            if qid is not None:
                picks.append((label, qid))
    return picks


def _clip(text: str, limit: int = CLIP_CHARS) -> str:
    text = text.replace("\t", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _call(function: Mapping[str, Any]) -> str:
    arguments = function.get("arguments")
    try:
        decoded = json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError:
        decoded = arguments  # a malformed call stays visible as the model wrote it
    if isinstance(decoded, dict):
        shown = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in decoded.items())
    else:
        shown = str(decoded)
    return _clip(f"{function.get('name')}({shown})", 2 * CLIP_CHARS)


def transcript_lines(record: EpisodeRecord) -> list[str]:
    """An episode compactly: each call, its observation clipped, plain assistant text, then the verdict."""
    lines = []
    for message in record.messages[2:]:  # system prompt and question are shown once, above the columns
        if message.get("role") == "assistant":
            calls = message.get("tool_calls") or ()
            lines += [_call(call.get("function", call)) for call in calls]
            text = str(message.get("content") or "").strip()
            if text and not calls:  # the closing reply, or a turn without a parseable call
                lines.append("» " + _clip(" ".join(text.split())))
        elif message.get("role") == "tool":
            observation = str(message.get("content") or "").splitlines() or [""]
            shown = [("  → " if i == 0 else "    ") + _clip(line) for i, line in enumerate(observation[:OBSERVATION_LINES])]
            if len(observation) > OBSERVATION_LINES:
                shown.append(f"    … {len(observation) - OBSERVATION_LINES} more lines")
            lines += shown
    verdict = "✓ correct" if record.correct else "✗ wrong"
    lines.append(f"= {verdict}: answer {_clip(repr(record.answer))} ({record.verdict_reason})")
    return lines


def _question_text(record: EpisodeRecord) -> str:
    user = next((m for m in record.messages if m.get("role") == "user"), {})
    return _clip(" ".join(str(user.get("content") or "(no question in the transcript)").split()), 400)


def transcripts_markdown(results: Sequence[EvalResult]) -> str:
    """The side-by-side section: an HTML table of two columns per example question."""
    chosen = transcript_pair(results)
    if chosen is None:
        return "No two policies with saved episodes on the same set: no transcripts to compare.\n"
    set_name, base_name, best_name = chosen
    by = {r.policy: {e.question_id: e for e in r.records} for r in results if r.set == set_name and r.records}
    picks = pick_examples(list(by[base_name].values()), list(by[best_name].values()))
    out = [f"`{base_name}` against `{best_name}` (the most accurate trained policy) on {set_name}; examples "
           "chosen by a stable hash of the question id, not by hand.\n"]  # fmt: skip
    for i, (label, qid) in enumerate(picks, 1):
        left, right = by[base_name][qid], by[best_name][qid]
        outcome = ", ".join(f"{name} {'✓' if r.correct else '✗'}" for name, r in ((base_name, left), (best_name, right)))
        out.append(f"#### {i}. {label}: `{qid}` ({left.hardness}, database `{left.db_id}`; {outcome})\n")
        out.append(f"> {html.escape(_question_text(left), quote=False)}\n")
        cells = "".join(f"<td><pre>{html.escape(chr(10).join(transcript_lines(r)), quote=False)}</pre></td>"
                        for r in (left, right))  # fmt: skip
        out.append(f"<table>\n<tr><th>{base_name}</th><th>{best_name}</th></tr>\n<tr>{cells}</tr>\n</table>\n")
    if not picks:
        out.append("The two policies share no question.\n")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------- markdown
def _pct(value: Any) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f} %"


def _num(value: Any, digits: int = 2) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def _p(value: float) -> str:
    return "< 0.0001" if value < 1e-4 else f"{value:.4f}"


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table ('|' inside cells escaped)."""
    cell = lambda v: str(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(map(cell, headers)) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(map(cell, row)) + " |" for row in rows]) + "\n"


def machine_description() -> str:
    return f"{platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPUs"


def _policy_section(res: Sequence[EvalResult], plots: Mapping[str, str]) -> list[str]:
    if not res:
        return ["No evaluation results yet.\n"]
    headers = ["set", "policy", "n", "accuracy [Wilson 95 %]", "parser", "parse rate strict", "parse rate lenient",
               "valid calls", "mean steps", "answered", "calls after answer", "mean tokens"]  # fmt: skip
    rows = []
    for r in res:
        m = r.metrics
        accuracy = f"{_pct(m['accuracy'])} [{_pct(m['accuracy_low'])}, {_pct(m['accuracy_high'])}]"
        rows.append([r.set, r.policy, m["n"], accuracy, _parser(r), _pct(m["parse_rate"]),
                     _pct(m["lenient_parse_rate"]), _pct(m["valid_call_rate"]), _num(m["steps_mean"]),
                     _pct(m["answered_rate"]), _num(m["calls_after_answer_mean"]), _num(m["tokens_mean"], 0)])  # fmt: skip
    out = [md_table(headers, rows)]
    out.append("Parse rates: share of the turns taken before the episode ended in which TRL's parser (strict) / the "
               "lenient parser (also JSON written as text) reads a tool call, both computed whatever parser played "
               "(`parser`). A turn without a call ends the episode, as in a TRL rollout. Valid calls: share of calls "
               "naming one of the four tools with fitting arguments.\n")  # fmt: skip
    out += [f"![Accuracy by policy]({plots['accuracy']})\n"] if "accuracy" in plots else []
    out += [f"![Steps per episode]({plots['steps']})\n"] if "steps" in plots else []
    return out


def _parser(result: EvalResult) -> str:
    settings = result.info.get("settings")
    return settings.get("parser", "—") if isinstance(settings, dict) else "—"


def budgets_line(res: Sequence[EvalResult], training: Mapping[str, int]) -> str:
    """The completion budget every result was played at, and each GRPO phase's training budget beside it."""
    played = sorted({r.info["settings"]["max_total_tokens"] for r in res
                     if isinstance(r.info.get("settings"), dict) and "max_total_tokens" in r.info["settings"]})  # fmt: skip
    turns = sorted({r.info["env"]["step_budget"] for r in res if isinstance(r.info.get("env"), dict)})
    evaluated = ", ".join(map(str, played)) or "—"
    trained = "; ".join(f"{name} trained at {n}" for name, n in training.items()) or "no training budget given"
    return (f"Budgets: every model policy was evaluated at {evaluated} completion tokens per episode (generated "
            f"tokens + tool results, TRL's `max_completion_length`) and a step budget of "
            f"{', '.join(map(str, turns)) or '—'} calls; {trained}.")


def headline_section(pairs: pd.DataFrame) -> list[str]:
    """The comparison the default run is for (HEADLINE), or why it is missing."""
    set_name, a, b = HEADLINE
    row = pairs[(pairs["set"] == set_name) & (pairs["a"] == a) & (pairs["b"] == b)] if not pairs.empty else pairs
    if row.empty:
        return [f"`{a}` vs `{b}` on {set_name}: not available (one of them has no live {set_name} result).\n"]
    r = row.iloc[0]
    return [f"**{a} vs {b} on {set_name}** (N = {int(r['n'])} paired questions of held-out domains): "
            f"{_pct(r['accuracy_a'])} vs {_pct(r['accuracy_b'])}, difference {100 * r['difference']:+.1f} "
            f"[{100 * r['difference_low']:+.1f}, {100 * r['difference_high']:+.1f}] points; only {a} right on "
            f"{int(r['only_a_correct'])}, only {b} on {int(r['only_b_correct'])}; exact McNemar p = {_p(r['mcnemar_p'])}.\n"]


def _failing_base_section(res: Sequence[EvalResult], threshold: float = 0.05) -> list[str]:
    """For each base policy below `threshold` accuracy: one episode (stable-hash pick) and how its episodes ended."""
    out = []
    for r in res:
        if POLICY_SPECS[r.policy].model != "base" or r.records is None or not r.records or r.accuracy >= threshold:
            continue
        episode = min(r.records, key=lambda e: _stable_key(e.question_id))
        ends = ", ".join(f"{k} {v}" for k, v in r.metrics.get("end_reasons", {}).items())
        out.append(f"`{r.policy}` on {r.set} scores {_pct(r.accuracy)}; its episodes ended: {ends}. One of them "
                   f"(`{episode.question_id}`, chosen by stable hash):\n")  # fmt: skip
        out.append("<pre>" + html.escape("\n".join(transcript_lines(episode)), quote=False) + "</pre>\n")
    return out


def _comparison_section(pairs: pd.DataFrame) -> list[str]:
    if pairs.empty:
        return ["Fewer than two policies with saved episodes on any one set: nothing to compare.\n"]
    headers = ["a", "b", "accuracy a", "accuracy b", "a − b [95 %]", "only a right", "only b right", "McNemar exact p"]
    out = []
    for set_name in SETS:
        sub = pairs[pairs["set"] == set_name]
        if sub.empty:
            continue
        rows = []
        for r in sub.itertuples():
            diff = f"{100 * r.difference:+.1f} [{100 * r.difference_low:+.1f}, {100 * r.difference_high:+.1f}] pts"
            rows.append([r.a, r.b, _pct(r.accuracy_a), _pct(r.accuracy_b), diff, r.only_a_correct,
                         r.only_b_correct, _p(r.mcnemar_p)])  # fmt: skip
        out += [f"### {set_name}\n", md_table(headers, rows)]
        out.append(significance_sentence(sub, set_name, int(sub["n"].iloc[0])) + "\n")
    return out


def _hardness_section(res: Sequence[EvalResult], plots: Mapping[str, str]) -> list[str]:
    hard = hardness_table(res)
    if hard.empty:
        return ["No evaluation results yet.\n"]
    present = set(hard["hardness"])
    levels = [h for h in HARDNESS_LEVELS if h in present] + sorted(present - set(HARDNESS_LEVELS))
    cells = {(r.set, r.policy, r.hardness): f"{_pct(r.accuracy)} ({r.correct}/{r.n})" for r in hard.itertuples()}
    rows = [[r.set, r.policy, *(cells.get((r.set, r.policy, h), "—") for h in levels)] for r in res]
    out = [md_table(["set", "policy", *levels], rows)]
    return out + ([f"![Accuracy by hardness]({plots['hardness']})\n"] if "hardness" in plots else [])


def _curves_section(curves: Mapping[str, pd.DataFrame], plots: Mapping[str, str]) -> list[str]:
    summary = curve_summary(curves)
    if summary.empty:
        out = ["No training curve with logged steps.\n"]
    else:
        rows = [[r.curve, r.column, r.steps, _num(r.first_quarter, 4), _num(r.last_quarter, 4), _num(r.final, 4)]
                for r in summary.itertuples()]  # fmt: skip
        out = [md_table(["curve", "column", "steps", "first-quarter mean", "last-quarter mean", "final"], rows)]
    for name, title in (("sft_loss", "SFT loss"), ("grpo_reward", "GRPO reward")):
        out += [f"![{title}]({plots[name]})\n"] if name in plots else []
    return out


def _provenance_section(res: Sequence[EvalResult]) -> list[str]:
    if not res:
        return []
    rows = []
    for r in res:
        model = r.info.get("model") if isinstance(r.info.get("model"), dict) else {}
        rows.append([r.set, r.policy, model.get("path", "—"), str(model.get("fingerprint") or "—")[:12],
                     r.info.get("verifier_version", "—"), str(r.info.get("git_commit") or "—")[:10], r.info.get("seed", "—")])  # fmt: skip
    return ["Evaluation runs:\n", md_table(["set", "policy", "model", "fingerprint", "verifier", "commit", "seed"], rows)]


def render_report(
    inputs: ReportInputs, header: Mapping[str, str], plots: Mapping[str, str], training: Mapping[str, int] = {}
) -> str:
    """The whole report.md. `header` is shown as given; `plots` maps a plot name (accuracy, steps, hardness,
    sft_loss, grpo_reward) to its path relative to the report, for the plots that were drawn; `training`
    maps a training stage to its completion budget (printed beside the evaluation budget)."""
    res = inputs.results
    missing = [f"{p} ({', '.join(s for s in SETS if not any(r.policy == p and r.set == s for r in res))})"
               for p in POLICIES if sum(r.policy == p for r in res) < len(SETS)]  # fmt: skip
    lacking_curves = [c for c in CURVES if c not in inputs.curves]
    covers = [
        f"- Evaluated: {len(res)} of {len(POLICIES) * len(SETS)} policy × set runs. n50 is a subset of n200, "
        "so the two sets are not independent evidence.",
        f"- Not evaluated: {'; '.join(missing)}." if missing else "- Every policy ran on every set.",
        f"- Missing curves: {', '.join(lacking_curves)}." if lacking_curves else "- All training curves present.",
        *(f"- {note}" for note in inputs.notes),
        *(f"- Stale, left out: {item}." for item in inputs.stale),
        f"- {budgets_line(res, training)}",
    ]
    pairs = comparisons_table(res)
    out = ["# sqlenv report\n", md_table(["", ""], list(header.items())), "## Headline\n", *headline_section(pairs)]
    out += ["## What this report covers\n", "\n".join(covers) + "\n", *_provenance_section(res)]
    out += ["## Accuracy and behaviour by policy\n", *_policy_section(res, plots)]
    out += ["## Paired comparisons\n", *_comparison_section(pairs)]
    out += ["## Accuracy by hardness\n", *_hardness_section(res, plots)]
    out += ["## Learning curves\n", *_curves_section(inputs.curves, plots)]
    out += ["## Transcripts side by side\n", transcripts_markdown(res)]
    failing = _failing_base_section(res)
    out += ["## Why a base policy scores about 0\n", *failing] if failing else []
    return "\n".join(out)
