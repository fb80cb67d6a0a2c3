"""The classic single-turn text-to-SQL protocol (`base_sql`): full schema in the prompt, one greedy reply,
the SQL taken from it, scored by execution accuracy. This is the anchor that places a checkpoint beside
published numbers.

One episode: a system turn (`SYSTEM_PROMPT`) and a user turn with the database's schema as CREATE TABLE
statements (`prompts.schema_ddl`: columns with types, primary and foreign keys) and the question. The model
answers once, and `extract_sql` takes the first ```sql block of the reply (else the text from its first
SELECT/WITH). The SQL runs in the sandbox and is scored against the gold SQL's rows by
`sqlenv.env.execution_match` (Spider's official EX rules: DISTINCT removed from both statements unless
`keep_distinct`, as the official evaluator's default). Each result is an `EpisodeRecord` (one
assistant turn, `answer` = the SQL, `correct` = EX), so `evaluation.episode_metrics` gives accuracy
with its Wilson interval and the split by hardness; `text_to_sql_metrics` adds the extraction and
execution rates.

Few-shot (`shots` = k > 0): before the question, k worked examples as earlier user/assistant turns — another
question with the schema of the tables its gold SQL reads, answered by its gold SQL in a ```sql block. They
come from `example_pool` (by default the evaluated questions themselves), never from the question's own
database: the same k examples for every question of one database, chosen by stable hash of (seed, db_id),
one per database and hardness as far as the pool allows. So no question ever sees its own gold SQL, nor
another question on its database.

What it does not do: no tools, no self-consistency or voting (published numbers with voting are higher),
no value linking.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlenv.decode import ModelGenerator, TurnGenerator
from sqlenv.env import prompts
from sqlenv.env.execution_match import ex_sql, execution_verdict, order_matters
from sqlenv.env.sandbox import Sandbox, SandboxLimits
from sqlenv.sampling import GenerationSettings
from sqlenv.types import EpisodeRecord, Question, db_file, stable_hash

SYSTEM_PROMPT = (
    "You are a SQLite expert. Given a database schema and a question, write one SQLite query that answers "
    "the question."
)
_FENCE = re.compile(r"```[ \t]*(?:sql|sqlite)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_BARE = re.compile(r"\b(?:SELECT|WITH)\b.*", re.DOTALL | re.IGNORECASE)


def user_prompt(question: Question, ddl: str) -> str:
    return (f"Database schema:\n{ddl}\n\nQuestion: {question.question.strip()}\n\n"
            "Reply with only the SQL query in a ```sql code block, without explanation.")  # fmt: skip


def messages(
    question: Question, ddl: str, examples: Sequence[tuple[Question, str]] = ()
) -> list[dict[str, str]]:
    """The prompt: system, then each (example question, its DDL) answered by its gold SQL, then the question."""
    shown = []
    for example, example_ddl in examples:
        shown += [{"role": "user", "content": user_prompt(example, example_ddl)},
                  {"role": "assistant", "content": f"```sql\n{example.gold_sql}\n```"}]  # fmt: skip
    return [{"role": "system", "content": SYSTEM_PROMPT}, *shown, {"role": "user", "content": user_prompt(question, ddl)}]


def pick_examples(db_id: str, pool: Sequence[Question], k: int, seed: int = 0) -> list[Question]:
    """k questions of `pool` on other databases than `db_id`, deterministic in (seed, db_id): a database and a
    hardness not yet shown first, then the stable hash. ValueError when fewer than k exist."""
    chosen: list[Question] = []
    remaining = sorted((q for q in pool if q.db_id != db_id), key=lambda q: stable_hash(seed, "sql-shot", db_id, q.id))
    while len(chosen) < k and remaining:
        dbs, levels = {q.db_id for q in chosen}, {q.hardness for q in chosen}
        best = min(remaining, key=lambda q: (q.db_id in dbs, q.hardness in levels))  # min is stable: hash order
        chosen.append(best)
        remaining.remove(best)
    if len(chosen) < k:
        raise ValueError(f"only {len(chosen)} examples on databases other than {db_id}, {k} asked")
    return chosen


def _example_tables(question: Question) -> Sequence[str]:
    """The tables an example's gold SQL reads (its record's, else parsed; none when it does not parse)."""
    if question.tables:
        return question.tables
    from sqlenv.data.hardness import tables_used

    try:
        return tables_used(question.gold_sql)
    except ValueError:
        return ()


def _ddl(box: Sandbox, tables: Sequence[str] = ()) -> str:
    """CREATE TABLE text of `tables` (resolved in the database; all tables when none resolve)."""
    names = [t for t in dict.fromkeys(box.resolve_table(n) for n in tables) if t is not None] or box.table_names()
    return prompts.schema_ddl([i for i in map(box.table_info, names) if i is not None])


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


def _judge(box: Sandbox, question: Question, sql: str | None, keep_distinct: bool = False) -> tuple[bool, str, str]:
    """(EX, reason, end reason) of one predicted SQL on the question's database."""
    if sql is None:
        return False, "no SQL in the reply", "no sql"
    gold = box.execute(ex_sql(question.gold_sql, keep_distinct))
    if not gold.ok:
        raise ValueError(f"gold SQL of {question.id} fails on {question.db_id}"
                         f"{'' if keep_distinct else ' without DISTINCT'}: {gold.error}")  # fmt: skip
    pred = box.execute(ex_sql(sql, keep_distinct))
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
    shots: int = 0,
    example_pool: Sequence[Question] | None = None,
    seed: int = 0,
    keep_distinct: bool = False,
) -> list[EpisodeRecord]:
    """One greedy reply per question, its SQL executed and scored by EX; records in question order.

    Questions are batched by prompt length (left-padded, one batched decode per batch); greedy decoding makes
    the result independent of the batching. `generator` replaces the model's own decoding (tests script it).
    `shots` worked examples from `example_pool` (default: `questions`) precede each question (module docstring).
    `keep_distinct` runs both statements as written (default: without DISTINCT, as Spider's official EX).
    """
    import torch
    from tqdm.auto import tqdm

    from sqlenv.rendering import generation_eos_ids

    if shots < 0:
        raise ValueError(f"shots must be >= 0, got {shots}")
    limits = SandboxLimits(timeout_s=sql_timeout_s)
    boxes: dict[str, Sandbox] = {}
    pool = list(questions if example_pool is None else example_pool)

    def box_of(db_id: str) -> Sandbox:
        if db_id not in boxes:
            boxes[db_id] = Sandbox(db_file(db_dir, db_id), limits)
        return boxes[db_id]

    try:
        examples: dict[str, list[tuple[Question, str]]] = {}
        prompts_of: list[list[dict[str, str]]] = []
        for q in questions:
            if shots and q.db_id not in examples:
                picked = pick_examples(q.db_id, pool, shots, seed)
                examples[q.db_id] = [(e, _ddl(box_of(e.db_id), _example_tables(e))) for e in picked]
            prompts_of.append(messages(q, _ddl(box_of(q.db_id)), examples.get(q.db_id, ())))
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
            correct, reason, end = _judge(boxes[q.db_id], q, sql, keep_distinct)
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
