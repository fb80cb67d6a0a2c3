"""The classic single-turn text-to-SQL protocol (`base_sql`): full schema in the prompt, one greedy reply,
the SQL taken from it, scored by execution accuracy. This is the anchor that places a checkpoint beside
published numbers.

One episode: a system turn (`SYSTEM_PROMPT`) and a user turn with the database's schema as CREATE TABLE
statements (`prompts.schema_ddl`: columns with types, primary and foreign keys) and the question. The model
answers once, and `extract_sql` takes the first ```sql block of the reply (else the text from its first
SELECT/WITH). The SQL runs in the sandbox and is scored against the gold SQL's rows by
`sqlenv.env.execution_match` (Spider's official EX rules). Each result is an `EpisodeRecord` (one
assistant turn, `answer` = the SQL, `correct` = EX), so `evaluation.episode_metrics` gives accuracy
with its Wilson interval and the split by hardness; `text_to_sql_metrics` adds the extraction and
execution rates.

What it does not do: no tools, no self-consistency or voting (published numbers with voting are higher),
no value linking, and no few-shot examples.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlenv.env import prompts
from sqlenv.env.execution_match import execution_verdict, order_matters
from sqlenv.env.sandbox import Sandbox, SandboxLimits
from sqlenv.eval.decode import GenerationSettings, ModelGenerator, TurnGenerator
from sqlenv.types import EpisodeRecord, Question, db_file

SYSTEM_PROMPT = (
    "You are a SQLite expert. Given a database schema and a question, write one SQLite query that answers "
    "the question."
)
_FENCE = re.compile(r"```[ \t]*(?:sql|sqlite)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_BARE = re.compile(r"\b(?:SELECT|WITH)\b.*", re.DOTALL | re.IGNORECASE)


def user_prompt(question: Question, ddl: str) -> str:
    return (f"Database schema:\n{ddl}\n\nQuestion: {question.question.strip()}\n\n"
            "Reply with only the SQL query in a ```sql code block, without explanation.")  # fmt: skip


def messages(question: Question, ddl: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user_prompt(question, ddl)}]


def extract_sql(reply: str) -> str | None:
    """The query in a model's reply: its first non-empty ```sql block (an unclosed one too), else the text from
    the first SELECT or WITH; cut at the first `;` that ends a line; None when there is no query."""
    blocks = [b.strip() for b in _FENCE.findall(reply) if b.strip()]
    if blocks:
        sql = blocks[0]
    else:
        bare = _BARE.search(reply)
        if bare is None:
            return None
        sql = bare.group(0)
    sql = re.split(r";[ \t]*(?:\n|$)", sql.strip(), maxsplit=1)[0].strip().rstrip(";").strip()
    return sql or None


def _judge(box: Sandbox, question: Question, sql: str | None) -> tuple[bool, str, str]:
    """(EX, reason, end reason) of one predicted SQL on the question's database."""
    if sql is None:
        return False, "no SQL in the reply", "no sql"
    gold = box.execute(question.gold_sql)
    if not gold.ok:
        raise ValueError(f"gold SQL of {question.id} fails on {question.db_id}: {gold.error}")
    pred = box.execute(sql)
    verdict = execution_verdict(pred, gold, order_matters(question.gold_sql))
    end = "sql error" if not pred.ok else "truncated" if gold.truncated or pred.truncated else "sql"
    return verdict.correct, verdict.reason, end


def play_text_to_sql(
    model: Any,
    tokenizer: Any,
    questions: Sequence[Question],
    *,
    db_dir: str | Path,
    max_new_tokens: int = 256,
    batch_size: int = 16,
    sql_timeout_s: float = 2.0,
    chat_template_kwargs: dict[str, Any] | None = None,
    progress: bool = True,
    generator: TurnGenerator | None = None,
) -> list[EpisodeRecord]:
    """One greedy reply per question, its SQL executed and scored by EX; records in question order.

    Questions are batched by prompt length (left-padded, one batched decode per batch); greedy decoding makes
    the result independent of the batching. `generator` replaces the model's own decoding (tests script it).
    """
    import torch
    from tqdm.auto import tqdm

    from sqlenv.eval.rollout import generation_eos_ids

    limits = SandboxLimits(timeout_s=sql_timeout_s)
    boxes: dict[str, Sandbox] = {}
    try:
        prompts_of: list[list[dict[str, str]]] = []
        for q in questions:
            if q.db_id not in boxes:
                boxes[q.db_id] = Sandbox(db_file(db_dir, q.db_id), limits)
            box = boxes[q.db_id]
            infos = [box.table_info(t) for t in box.table_names()]
            prompts_of.append(messages(q, prompts.schema_ddl([i for i in infos if i is not None])))
        contexts = [
            list(tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=True, return_dict=True,
                                               **(chat_template_kwargs or {}))["input_ids"])
            for m in prompts_of
        ]  # fmt: skip
        eos_ids = generation_eos_ids(model, tokenizer)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
        generator = generator or ModelGenerator(model, GenerationSettings(), eos_ids, pad_id, reuse_cache=False)
        order = sorted(range(len(questions)), key=lambda i: (len(contexts[i]), i))
        replies: dict[int, list[int]] = {}
        was_training = model.training
        model.eval()
        bar = tqdm(total=len(questions), desc="text-to-SQL", disable=not progress)
        try:
            with torch.no_grad():
                for start in range(0, len(order), batch_size):
                    keys = order[start : start + batch_size]
                    for k in keys:
                        generator.start(k, contexts[k])
                    outs = generator.generate(keys, [contexts[k] for k in keys], [max_new_tokens] * len(keys))
                    for k, ids in zip(keys, outs):
                        generator.finish(k)
                        replies[k] = ids
                    bar.update(len(keys))
        finally:
            bar.close()
            model.train(was_training)
        records = []
        for i, q in enumerate(questions):
            ids = replies[i]
            text = tokenizer.decode([t for t in ids if t not in eos_ids], skip_special_tokens=False)
            sql = extract_sql(text)
            correct, reason, end = _judge(boxes[q.db_id], q, sql)
            records.append(EpisodeRecord(
                question_id=q.id, db_id=q.db_id, hardness=q.hardness,
                messages=[*prompts_of[i], {"role": "assistant", "content": text}],
                answered=sql is not None, correct=correct, verdict_reason=reason, answer=sql,
                tokens=len(ids), turns=1, end_reason=end,
            ))  # fmt: skip
        return records
    finally:
        for box in boxes.values():
            box.close()


def text_to_sql_metrics(records: Sequence[EpisodeRecord]) -> dict[str, Any]:
    """What the episode metrics do not say about single-turn SQL: how often a query was found and ran."""
    n = len(records)
    extracted = sum(r.answer is not None for r in records)
    ran = sum(r.end_reason in ("sql", "truncated") for r in records)
    return {"metric": "ex", "sql_extracted_rate": extracted / n if n else None,
            "sql_executable_rate": ran / n if n else None}  # fmt: skip
