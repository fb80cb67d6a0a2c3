"""The report's transfer section: the trained agents and the base model's single-shot SQL on real databases
the training never saw (`reports/transfer/<policy>/`, written by the `transfer` stages).

Side by side on the same questions: accuracy with its Wilson interval (the agents' value verdicts; the
single shot's execution accuracy), answered and unanswered episodes, the failure taxonomy
(`sqlenv.failures`) of the agents; then each agent against the single shot, paired on the same question ids
(Newcombe's interval, exact McNemar), overall and by hardness. A skipped transfer set is one line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlenv.eval.evaluation import paired_comparisons
from sqlenv.eval.transfer import POLICIES
from sqlenv.failures import HABITS, OUTCOMES, summarise_records
from sqlenv.report.markdown import md_table
from sqlenv.types import HARDNESS_LEVELS, EpisodeRecord

BASELINE = "base_sql"
LABELS = {"base_sql": "base model, single-shot SQL (full schema, EX)", "sft": "sft agent (hidden schema, value)",
          "grpo_phase2": "grpo_phase2 agent (hidden schema, value)"}  # fmt: skip


@dataclass
class TransferInputs:
    results: dict[str, tuple[dict[str, Any], list[EpisodeRecord]]] = field(default_factory=dict)  # policy -> doc, records
    skipped: str | None = None  # why there is no transfer result
    missing: list[str] = field(default_factory=list)  # policies without a result


def load_transfer(folder: str | Path) -> TransferInputs:
    """Whatever `reports/transfer/` holds; a result whose samples disagree with its metrics raises ValueError."""
    folder, out = Path(folder), TransferInputs()
    for policy in POLICIES:
        metrics = folder / policy / "metrics.json"
        if not metrics.is_file():
            out.missing.append(policy)
            continue
        doc = json.loads(metrics.read_text(encoding="utf-8"))
        if "skipped" in doc:
            out.skipped = doc["skipped"]
            continue
        lines = (folder / policy / "samples.jsonl").read_text(encoding="utf-8").splitlines()
        records = [EpisodeRecord.from_dict(json.loads(line)) for line in lines if line.strip()]
        if len(records) != doc["metrics"]["n"] or sum(r.correct for r in records) != doc["metrics"]["correct"]:
            raise ValueError(f"{folder / policy}: samples.jsonl disagrees with metrics.json (stale samples?)")
        out.results[policy] = (doc, records)
    return out


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def _pairs(inputs: TransferInputs, records_of=lambda rs: rs) -> list[dict[str, Any]]:
    if BASELINE not in inputs.results:
        return []
    base = records_of(inputs.results[BASELINE][1])
    rows = []
    for policy in POLICIES:
        if policy == BASELINE or policy not in inputs.results:
            continue
        agent = records_of(inputs.results[policy][1])
        if {r.question_id for r in agent} != {r.question_id for r in base} or not agent:
            continue
        rows.append(paired_comparisons({policy: agent, BASELINE: base})[0])
    return rows


def transfer_metrics(inputs: TransferInputs) -> dict[str, float]:
    """MLflow-named headline numbers: accuracy per policy, each agent-vs-single-shot difference and p."""
    out: dict[str, float] = {}
    for policy, (doc, records) in inputs.results.items():
        m = doc["metrics"]
        out.update({f"transfer/{policy}/{k}": float(m[k]) for k in ("accuracy", "accuracy_low", "accuracy_high")})
        if policy != BASELINE:
            s = summarise_records(records)
            out[f"transfer/{policy}/unanswered_rate"] = s["unanswered"] / s["n"] if s["n"] else 0.0
    for row in _pairs(inputs):
        out[f"transfer/{row['a']}-vs-{BASELINE}/difference"] = float(row["difference"])
        out[f"transfer/{row['a']}-vs-{BASELINE}/mcnemar_p"] = float(row["mcnemar_p"])
    return out


def _pair_cells(row: Mapping[str, Any]) -> list[str]:
    return [f"{100 * row['difference']:+.1f} [{100 * row['difference_low']:+.1f}, {100 * row['difference_high']:+.1f}]",
            str(row["only_a_correct"]), str(row["only_b_correct"]), f"{row['mcnemar_p']:.4f}"]  # fmt: skip


def transfer_section(inputs: TransferInputs) -> list[str]:
    """The report's markdown lines for the transfer set."""
    if inputs.skipped and not inputs.results:
        return [f"Skipped: {inputs.skipped.removeprefix('skipped: ')} (set `transfer.spider_dir` to a Spider-format "
                "folder to measure transfer).\n"]  # fmt: skip
    if not inputs.results:
        return ["No transfer result yet (run the `transfer` stages).\n"]
    first = next(iter(inputs.results.values()))[0]
    data = first.get("data", {})
    out = [f"Real databases no training stage saw: {data.get('n', '?')} questions of `{data.get('spider_dir')}` "
           f"({data.get('questions_file')}; {data.get('ids')} ids, hardness-stratified), the same questions for every "
           "policy; greedy, the evaluation's budgets. The agents answer with values (the value verifier); the "
           "single shot writes one SQL query with the full schema in its prompt (execution accuracy).\n"]  # fmt: skip
    rows = []
    for policy in POLICIES:
        if policy not in inputs.results:
            continue
        doc, records = inputs.results[policy]
        m = doc["metrics"]
        agent = policy != BASELINE
        s = summarise_records(records) if agent else None
        rows.append([LABELS[policy], m["n"], f"{_pct(m['accuracy'])} [{_pct(m['accuracy_low'])}, {_pct(m['accuracy_high'])}]",
                     _pct(m.get("answered_rate")) if agent else "–",
                     *([s["outcomes"][k] for k in OUTCOMES[1:]] if agent else ["–"] * (len(OUTCOMES) - 1)),
                     *([s["habits"][k] for k in HABITS[:-1]] if agent else ["–"] * (len(HABITS) - 1))])  # fmt: skip
    out.append(md_table(["policy", "n", "accuracy [95 %]", "answered", *(o.replace("_", " ") for o in OUTCOMES[1:]),
                       *(h.replace("_", " ") for h in HABITS[:-1])], rows))  # fmt: skip
    out.append("Outcomes and habits are episodes (`sqlenv/failures.py`): unanswered by step budget, by token budget "
               "or otherwise; a loop repeats a call unchanged; a missing name is a table or column that does not "
               "exist; empty answered: the answer followed a query that returned no rows.\n")  # fmt: skip
    pairs = _pairs(inputs)
    if pairs:
        out.append(f"Each agent against the single shot, paired on the same questions (Newcombe's interval, exact "
                   "McNemar):\n")  # fmt: skip
        head = ["agent", "hardness", "n", "agent", "single shot", "agent − single shot [95 %]", "only agent right",
                "only single shot right", "McNemar p"]  # fmt: skip
        body = []
        for row in pairs:
            body.append([row["a"], "all", row["n"], _pct(row["accuracy_a"]), _pct(row["accuracy_b"]), *_pair_cells(row)])
            for level in HARDNESS_LEVELS:
                sub = _pairs(inputs, lambda rs, level=level: [r for r in rs if r.hardness == level])
                sub = [r for r in sub if r["a"] == row["a"]]
                if sub:
                    body.append([row["a"], level, sub[0]["n"], _pct(sub[0]["accuracy_a"]), _pct(sub[0]["accuracy_b"]),
                                 *_pair_cells(sub[0])])  # fmt: skip
        out.append(md_table(head, body))
    if inputs.missing:
        out.append(f"Not run: {', '.join(inputs.missing)}.\n")
    return out
