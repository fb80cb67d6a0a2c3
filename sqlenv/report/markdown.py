"""The final report in markdown: tables, paired comparisons, curves and transcripts of what
`sqlenv.report.results` loaded.

Transcript examples are chosen by a stable hash of the question id (one per hardness level, plus one
that training fixed and one it broke, when such questions exist), never by hand or by file order; the
hardness picks are unconditioned on outcome, so they show typical episodes rather than successes.
What it doesn't do: correct p-values for multiple comparisons (the report says so) or re-judge answers.
Pure library code: plots live in `sqlenv.report.plots`; the `report` stage does the I/O around both.
"""

from __future__ import annotations

import html
import json
import math
import os
import platform
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from sqlenv.eval.policies import POLICIES as POLICY_SPECS
from sqlenv.eval.policies import TRAINED
from sqlenv.eval.stats import (
    cluster_bootstrap_difference,
    minimum_detectable_difference,
    paired_questions_needed,
    wilson_interval,
)
from sqlenv.report.results import (
    ALPHA,
    CURVES,
    HEADLINE,
    HELD_OUT_SETS,
    INDOMAIN,
    INDOMAIN_PAIR,
    POLICIES,
    SETS,
    EvalResult,
    ReportInputs,
    comparisons_table,
    curve_summary,
    hardness_table,
)
from sqlenv.types import HARDNESS_LEVELS, EpisodeRecord, stable_hash

OBSERVATION_LINES, CLIP_CHARS = 4, 110


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




# ----------------------------------------------------------------------------------------- transcripts
def transcript_pair(results: Sequence[EvalResult]) -> tuple[str, str, str] | None:
    """(set, baseline, trained): `base` (else `random`) against the most accurate trained policy, on n200
    if both ran there (more questions to choose from), else n50; without a trained policy, the most
    accurate other policy against `random`. Ties go to the later policy in POLICIES."""
    for need_trained in (True, False):
        for set_name in reversed(HELD_OUT_SETS):
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
    ids = sorted((r.question_id for r in trained if r.question_id in base), key=stable_hash)
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


_MODE_WORDS = {"schema=hidden": "schema hidden (table names only)", "schema=full": "full schema in the prompt",
               "answer=value": "value answers, accuracy by the value verifier",
               "answer=sql": "SQL answers, accuracy = execution accuracy (EX)"}  # fmt: skip


def mode_label(res: Sequence[EvalResult]) -> str:
    """The environment mode of the results, in words, for every table title (`results.result_mode`)."""
    modes = list(dict.fromkeys(r.mode for r in res))
    return "; ".join(", ".join(_MODE_WORDS.get(part, part) for part in mode.split()) for mode in modes) or "—"


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


POWER, EFFECT_OF_INTEREST, BOOTSTRAP_RESAMPLES = 0.8, 0.05, 10_000


def detectable_sentence(n: int, discordant: int, alpha: float = ALPHA) -> str:
    """What a paired comparison of n questions with `discordant` split questions could detect (exact McNemar
    power at the observed discordance)."""
    if n == 0 or discordant == 0:
        return "No question split the two policies, so nothing can be said of the difference it could detect."
    psi = discordant / n
    mde = minimum_detectable_difference(n, psi, POWER, alpha)
    needed = paired_questions_needed(EFFECT_OF_INTEREST, psi, POWER, alpha)
    detects = (f"detects a difference of ±{100 * mde:.1f} points with {100 * POWER:.0f} % power" if mde is not None else
               f"cannot reach {100 * POWER:.0f} % power for any difference")  # fmt: skip
    if needed is not None:
        need = f"a {100 * EFFECT_OF_INTEREST:.0f}-point difference would need about {needed:,} paired questions"
    else:
        need = f"a {100 * EFFECT_OF_INTEREST:.0f}-point difference is more than this discordance allows"
    return (f"With the observed discordance ({discordant} of {n} questions, {100 * psi:.1f} %), the exact McNemar "
            f"test at α = {alpha} {detects}; {need}.")  # fmt: skip


def domain_bootstrap_sentence(a: EvalResult | None, b: EvalResult | None, groups: Mapping[str, str]) -> str:
    """The headline difference with an interval that resamples whole held-out domains."""
    if a is None or b is None or a.records is None or b.records is None:
        return ""
    right_a = {r.question_id: r.correct for r in a.records}
    right_b = {r.question_id: r.correct for r in b.records}
    ids = sorted(right_a.keys() & right_b.keys())
    if not ids or any(q not in groups for q in ids):
        return "Domain bootstrap: not available (the questions' domains are unknown to this report)."
    boot = cluster_bootstrap_difference([right_a[q] for q in ids], [right_b[q] for q in ids], [groups[q] for q in ids],
                                        BOOTSTRAP_RESAMPLES, ALPHA)  # fmt: skip
    return (f"Resampling the {boot['groups']} held-out domains instead of questions ({boot['resamples']:,} bootstrap "
            f"resamples): {100 * boot['difference']:+.1f} [{100 * boot['low']:+.1f}, {100 * boot['high']:+.1f}] points"
            f"{'; with so few domains a bootstrap understates the spread: read it as how evenly the difference falls across them' if boot['groups'] < 10 else ''}.")  # fmt: skip


def _pair_row(pairs: pd.DataFrame, set_name: str, a: str, b: str) -> pd.Series | None:
    row = pairs[(pairs["set"] == set_name) & (pairs["a"] == a) & (pairs["b"] == b)] if not pairs.empty else pairs
    return None if row.empty else row.iloc[0]


def _pair_sentence(r: pd.Series, a: str, b: str, set_name: str, what: str) -> str:
    return (f"**{a} vs {b} on {set_name}** (N = {int(r['n'])} paired questions of {what}): "
            f"{_pct(r['accuracy_a'])} vs {_pct(r['accuracy_b'])}, difference {100 * r['difference']:+.1f} "
            f"[{100 * r['difference_low']:+.1f}, {100 * r['difference_high']:+.1f}] points; only {a} right on "
            f"{int(r['only_a_correct'])}, only {b} on {int(r['only_b_correct'])}; exact McNemar p = {_p(r['mcnemar_p'])}.\n")


def headline_section(pairs: pd.DataFrame, inputs: ReportInputs | None = None) -> list[str]:
    """The comparison the default run is for (HEADLINE), what it could detect and its domain-level interval,
    or why it is missing; then the same pair where GRPO trained (the in-domain probe), where it ran."""
    set_name, a, b = HEADLINE
    r = _pair_row(pairs, set_name, a, b)
    if r is None:
        out = [f"`{a}` vs `{b}` on {set_name}: not available (one of them has no live {set_name} result).\n"]
    else:
        out = [_pair_sentence(r, a, b, set_name, "held-out domains")]
        power = detectable_sentence(int(r["n"]), int(r["only_a_correct"]) + int(r["only_b_correct"]))
        if inputs is not None:
            found = {(x.policy, x.set): x for x in inputs.results}
            power += " " + domain_bootstrap_sentence(found.get((a, set_name)), found.get((b, set_name)), inputs.groups)
        out.append(power.strip() + "\n")
    a, b = INDOMAIN_PAIR
    r = _pair_row(pairs, INDOMAIN, a, b)
    if r is not None:
        out.append(_pair_sentence(r, a, b, "the in-domain probe", "the training domains, never trained on") +
                   "Where RL trained, before it must generalise: a gain here and none on held-out domains is "
                   "learning that does not transfer; none here means the phases did not change the policy.\n")  # fmt: skip
    return out


def _failing_base_section(res: Sequence[EvalResult], threshold: float = 0.05) -> list[str]:
    """For each base policy below `threshold` accuracy: one episode (stable-hash pick) and how its episodes ended."""
    out = []
    for r in res:
        if POLICY_SPECS[r.policy].model != "base" or r.records is None or not r.records or r.accuracy >= threshold:
            continue
        episode = min(r.records, key=lambda e: stable_hash(e.question_id))
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


def _cost_section(costs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Wall time, peak memory, dtype, threads and load of each stage that recorded them (`results.stage_costs`)."""
    if not costs:
        return ["No stage recorded its machine (metrics.json `system`).\n"]
    headers = ["stage", "wall", "peak RSS", "dtype (bf16 / fp32 ms)", "threads", "load 1-min start → end", "steps"]
    rows = []
    for c in costs:
        timing = f" ({_num(c['bf16_ms'])} / {_num(c['fp32_ms'])})" if c.get("bf16_ms") is not None else ""
        steps = "—"
        if c.get("steps"):
            steps = f"{c['steps']} × {_num(c['seconds_per_step'], 1)} s"
            if c.get("distinct_questions"):
                steps += f", {c['distinct_questions']} distinct questions"
        # `peak_rss_mb` is MiB (ru_maxrss KiB / 1024), so /1024 gives GiB: labelled as such, not as GB (7 % less).
        rss = f"{c['peak_rss_mb'] / 1024:.1f} GiB" if c.get("peak_rss_mb") is not None else "—"
        if c.get("peak_cuda_mb") is not None:
            rss += f" (CUDA {c['peak_cuda_mb'] / 1024:.1f} GiB)"
        load = f"{_num(c.get('load1_start'))} → {_num(c.get('load1_end'))}"
        rows.append([c["stage"], f"{c['wall_s']:.0f} s" if c.get("wall_s") is not None else "—", rss,
                     f"{c.get('dtype') or '—'}{timing}", c.get("threads") or "—", load, steps])  # fmt: skip
    # The ISA beside the name where recorded: two CPUs of one name can differ 170x in bf16 (`pipeline.machine`).
    cpus = sorted({str(c["cpu_model"]) + (f" ({c['cpu_isa']})" if c.get("cpu_isa") else "") for c in costs if c.get("cpu_model")})
    total = sum(c["wall_s"] or 0 for c in costs)
    return [md_table(headers, rows),
            f"CPU: {', '.join(cpus) or 'unknown'}. These stages took {total / 60:.1f} min together; peak RSS is the "
            "process's high-water mark (`ru_maxrss`). A 1-minute load above the thread count at the end means "
            "something else ran beside the stage.\n"]  # fmt: skip


def render_report(
    inputs: ReportInputs, header: Mapping[str, str], plots: Mapping[str, str], training: Mapping[str, int] = {},
    costs: Sequence[Mapping[str, Any]] = (), transfer: Sequence[str] = (), taxonomy: Sequence[str] = (),
) -> str:
    """The whole report.md. `header` is shown as given; `plots` maps a plot name (accuracy, steps, hardness,
    sft_loss, grpo_reward) to its path relative to the report, for the plots that were drawn; `training`
    maps a training stage to its completion budget (printed beside the evaluation budget); `transfer` is the
    transfer section's lines (`sqlenv.report.transfer.transfer_section`) and `taxonomy` the failure taxonomy's
    (`sqlenv.report.taxonomy.taxonomy_section`), each left out when empty."""
    res = inputs.results
    held = [r for r in res if r.set in HELD_OUT_SETS]
    missing = [f"{p} ({', '.join(s for s in HELD_OUT_SETS if not any(r.policy == p and r.set == s for r in held))})"
               for p in POLICIES if sum(r.policy == p for r in held) < len(HELD_OUT_SETS)]  # fmt: skip
    probe = [r.policy for r in res if r.set == INDOMAIN]
    lacking_curves = [c for c in CURVES if c not in inputs.curves]
    covers = [
        f"- Evaluated: {len(held)} of {len(POLICIES) * len(HELD_OUT_SETS)} policy × set runs on held-out domains. n50 "
        "is a subset of n200, so the two sets are not independent evidence.",
        f"- In-domain probe ({INDOMAIN}: unseen questions of the training domains): {', '.join(probe)}." if probe
        else f"- In-domain probe: no live result ({INDOMAIN}).",
        f"- Not evaluated: {'; '.join(missing)}." if missing else "- Every policy ran on every set.",
        f"- Missing curves: {', '.join(lacking_curves)}." if lacking_curves else "- All training curves present.",
        *(f"- {note}" for note in inputs.notes),
        *(f"- Stale, left out: {item}." for item in inputs.stale),
        f"- {budgets_line(res, training)}",
    ]
    pairs = comparisons_table(res)
    mode = f" ({mode_label(res)})" if res else ""
    out = ["# sqlenv report\n", md_table(["", ""], list(header.items())), f"## Headline{mode}\n", *headline_section(pairs, inputs)]
    out += ["## What this report covers\n", "\n".join(covers) + "\n", *_provenance_section(res)]
    out += [f"## Accuracy and behaviour by policy{mode}\n", *_policy_section(res, plots)]
    out += [f"## Paired comparisons{mode}\n", *_comparison_section(pairs)]
    out += ["## Transfer to real databases\n", *transfer] if transfer else []
    out += [f"## Accuracy by hardness{mode}\n", *_hardness_section(res, plots)]
    out += [f"## Why episodes fail{mode}\n", *taxonomy] if taxonomy else []
    out += ["## Learning curves\n", *_curves_section(inputs.curves, plots)]
    out += ["## Cost per stage\n", *_cost_section(costs)]
    out += ["## Transcripts side by side\n", transcripts_markdown(res)]
    failing = _failing_base_section(res)
    out += ["## Why a base policy scores about 0\n", *failing] if failing else []
    return "\n".join(out)
