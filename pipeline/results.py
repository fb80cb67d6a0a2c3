"""Evaluation results on disk and in MLflow: what the `evaluate` stage and `sqlenv eval` both write.

A result is a folder with `samples.jsonl` (one `EpisodeRecord` per question) and `metrics.json`
(`sqlenv.eval.harness.result_document`). Samples are written first, so a folder with a metrics file is
complete; each file is written atomically. `log_result` puts the same into the active MLflow run, and
each episode as an MLflow trace (`log_episode_traces`), which the MLflow UI shows as an agent transcript.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd

from pipeline.io import atomic_write_json, atomic_write_jsonl
from pipeline.tracking import log_metrics
from sqlenv.types import EpisodeRecord


def write_result(out: str | os.PathLike[str], records: Sequence[EpisodeRecord], document: dict[str, Any]) -> Path:
    out = Path(out)
    atomic_write_jsonl(out / "samples.jsonl", [r.to_dict() for r in records])
    atomic_write_json(out / "metrics.json", document)
    return out


def log_result(out: str | os.PathLike[str], records: Sequence[EpisodeRecord], document: dict[str, Any]) -> None:
    """Metrics (nested names flattened), both files and a transcripts table, into the active run."""
    out = Path(out)
    log_metrics(document["metrics"])
    mlflow.log_artifact(str(out / "samples.jsonl"))
    mlflow.log_artifact(str(out / "metrics.json"))
    mlflow.log_table(transcripts_table(records), artifact_file="transcripts.json")
    log_episode_traces(records, {"policy": str(document.get("policy")), "set": str(document.get("set"))})


def _tool_calls(messages: Sequence[dict[str, Any]]) -> list[tuple[str, Any, str]]:
    """(tool, arguments, observation) of every executed call, in order: an assistant turn's calls paired with
    the tool messages that follow it."""
    out = []
    for i, m in enumerate(messages):
        if m.get("role") != "assistant" or not m.get("tool_calls"):
            continue
        results = []
        for t in messages[i + 1 :]:
            if t.get("role") != "tool":
                break
            results.append(t.get("content") or "")
        for call, observation in zip(m["tool_calls"], results):
            function = call.get("function") or call
            arguments = function.get("arguments")
            try:
                arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
            except json.JSONDecodeError:
                pass  # a malformed call stays visible as the text the model wrote
            out.append((str(function.get("name")), arguments, observation))
    return out


def log_trace(name: str, messages: Sequence[dict[str, Any]], outputs: dict[str, Any], tags: dict[str, Any]) -> str:
    """One episode as an MLflow trace linked to the active run: a root AGENT span (the first two messages in,
    `outputs` out), a TOOL span per executed call (its arguments in, the observation out), `tags` as trace tags.
    Returns the trace id. Span times are when the trace was logged, not when the episode ran."""
    from mlflow.entities import SpanType

    run = mlflow.active_run()
    with mlflow.start_span(name=name, span_type=SpanType.AGENT, run_id=run.info.run_id if run else None) as root:
        root.set_inputs({m.get("role", "?"): m.get("content") or "" for m in messages[:2]})
        for tool, arguments, observation in _tool_calls(messages):
            with mlflow.start_span(name=tool, span_type=SpanType.TOOL) as span:
                span.set_inputs(arguments if isinstance(arguments, dict) else {"raw": arguments})
                span.set_outputs(observation)
        root.set_outputs(outputs)
        mlflow.update_current_trace(tags={k: str(v) for k, v in tags.items()})
        return root.trace_id


def log_feedback(feedback: Sequence[tuple[str, dict[str, tuple[Any, str | None]]]]) -> None:
    """Assessments (trace id, name -> (value, rationale)) on traces just logged. Traces are exported
    asynchronously: the queue is flushed first, or the store does not know the trace ids yet."""
    mlflow.flush_trace_async_logging()
    for trace_id, items in feedback:
        for key, (value, rationale) in items.items():
            mlflow.log_feedback(trace_id=trace_id, name=key, value=value, rationale=rationale or None)


def log_episode_traces(records: Sequence[EpisodeRecord], tags: dict[str, str]) -> list[str]:
    """Each evaluated episode as a trace (`log_trace`), the verdict (`correct`, with the verifier's reason) and
    the reward as assessments; `tags` (policy, set) plus the question id and hardness as trace tags."""
    ids = [
        log_trace(f"episode {r.question_id}", r.messages,
                  {"answer": r.answer, "correct": r.correct, "verdict": r.verdict_reason, "end_reason": r.end_reason,
                   "steps": r.steps, "reward": r.reward},
                  {**tags, "question_id": r.question_id, "hardness": r.hardness})
        for r in records
    ]  # fmt: skip
    log_feedback([(i, {"correct": (bool(r.correct), r.verdict_reason), "reward": (float(r.reward), None)})
                  for i, r in zip(ids, records)])  # fmt: skip
    return ids


def transcripts_table(records: Sequence[EpisodeRecord]) -> pd.DataFrame:
    rows = [{
        "question_id": r.question_id, "hardness": r.hardness, "correct": r.correct, "answer": r.answer or "",
        "steps": r.steps, "end_reason": r.end_reason, "verdict": r.verdict_reason,
        "transcript": "\n".join(f"[{m['role']}] {m.get('content') or ''} {m.get('tool_calls') or ''}".strip()
                                for m in r.messages[2:]),
    } for r in records]  # fmt: skip
    return pd.DataFrame(rows)
