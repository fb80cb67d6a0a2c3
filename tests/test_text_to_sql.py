"""Guards the single-turn text-to-SQL protocol (`base_sql`): the full-schema prompt, SQL extraction from a
reply, EX scoring of what the model wrote, and `sqlenv eval --protocol text_to_sql`'s result files."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from fixtures_env import Q_COUNT, Q_FRANCE, Q_JOIN, QUESTIONS, concert_db_dir, spider_dir  # noqa: F401  (fixtures)

from sqlenv.env import prompts
from sqlenv.env.sandbox import Sandbox
from sqlenv.eval.text_to_sql import extract_sql, play_text_to_sql
from sqlenv.train.tiny_model import build_tiny_model
from sqlenv.types import db_file


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("text-to-sql") / "tiny")


@pytest.mark.parametrize(
    "reply, sql",
    [
        ("```sql\nSELECT count(*) FROM singer;\n```", "SELECT count(*) FROM singer"),
        ("Here it is:\n```sqlite\nSELECT a\nFROM t\n```\nDone.", "SELECT a\nFROM t"),
        ("```\nSELECT 1\n```", "SELECT 1"),
        ("```sql\n\n```\n```sql\nSELECT 2\n```", "SELECT 2"),  # the first non-empty block
        ("```sql\nSELECT name FROM singer WHERE age > 3", "SELECT name FROM singer WHERE age > 3"),  # unclosed
        ("The query is SELECT name FROM singer; it lists names.", "SELECT name FROM singer; it lists names."),
        ("SELECT name FROM singer;\nThis returns every name.", "SELECT name FROM singer"),
        ("with x as (select 1) select * from x", "with x as (select 1) select * from x"),
        ("I cannot answer that.", None),
        ("", None),
    ],
)
def test_extract_sql(reply, sql):
    assert extract_sql(reply) == sql


def test_schema_ddl_lists_every_table_with_keys(concert_db_dir):  # noqa: F811
    with Sandbox(db_file(concert_db_dir, "concert")) as box:
        names = box.table_names()
        ddl = prompts.schema_ddl([box.table_info(t) for t in names])
    statements = {s.split(" (")[0].removeprefix("CREATE TABLE "): s for s in ddl.split("\n\n")}
    assert list(statements) == names and {"concert", "singer", "singer_in_concert"} <= set(statements)
    assert "PRIMARY KEY (singer_id)" in statements["singer"]
    assert "FOREIGN KEY (singer_id) REFERENCES singer(singer_id)" in statements["singer_in_concert"]
    assert all(s.endswith("\n);") for s in statements.values())


class Replies:
    """A TurnGenerator that answers each question (by index) with a fixed reply text."""

    def __init__(self, tokenizer, replies):
        self.tokenizer, self.replies, self.contexts = tokenizer, replies, {}

    def start(self, key, context):
        self.contexts[key] = context

    def generate(self, keys, contexts, budgets):
        return [self.tokenizer(self.replies[k] + "<|im_end|>", add_special_tokens=False)["input_ids"] for k in keys]

    def finish(self, key):
        pass


def test_replies_are_scored_by_execution_match(tiny, concert_db_dir):  # noqa: F811
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(tiny), AutoModelForCausalLM.from_pretrained(tiny)
    replies = [
        "```sql\nSELECT count(singer_id) FROM singer\n```",  # Q_COUNT: same rows -> EX
        "```sql\nSELECT name FROM singer WHERE country = 'France' ORDER BY age\n```",  # Q_FRANCE: wrong order
        "no idea",  # Q_JOIN: no SQL
    ]
    generator = Replies(tokenizer, replies)
    records = play_text_to_sql(model, tokenizer, QUESTIONS, db_dir=concert_db_dir, batch_size=2, progress=False,
                               generator=generator)  # fmt: skip
    assert [r.question_id for r in records] == [q.id for q in QUESTIONS]
    assert [r.correct for r in records] == [True, False, False]
    assert [r.end_reason for r in records] == ["sql", "sql", "no sql"]
    assert records[0].answer == "SELECT count(singer_id) FROM singer" and records[2].answer is None
    assert records[1].verdict_reason.startswith("no column order") or "order" in records[1].verdict_reason
    system, user, assistant = records[0].messages
    assert system["role"] == "system" and assistant == {"role": "assistant", "content": replies[0]}
    assert "CREATE TABLE singer (" in user["content"] and user["content"].count("Question: ") == 1
    # the model saw exactly the chat template's rendering of the system and user turns
    rendered = tokenizer.apply_chat_template([system, user], add_generation_prompt=True, tokenize=True,
                                             return_dict=True)["input_ids"]  # fmt: skip
    assert generator.contexts[0] == list(rendered)


def test_eval_cli_text_to_sql_writes_ex_results(tiny, concert_db_dir, tmp_path):  # noqa: F811
    from pipeline.cli import EVAL
    from sqlenv import cli as domain_cli

    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps(q.to_dict()) + "\n" for q in (Q_COUNT, Q_FRANCE, Q_JOIN)))
    out, out_dir = io.StringIO(), tmp_path / "res"
    code = domain_cli.main(["eval", "--model", str(tiny), "--questions", str(questions), "--db-dir",
                            str(concert_db_dir), "--protocol", "text_to_sql", "--max-new-tokens", "8",
                            "--out", str(out_dir), "--no-progress"], stdout=out, extra={"eval": EVAL})  # fmt: skip
    assert code == 0
    summary = json.loads(out.getvalue())
    doc = json.loads((out_dir / "metrics.json").read_text())
    samples = [json.loads(x) for x in (out_dir / "samples.jsonl").read_text().splitlines()]
    assert summary["protocol"] == "text_to_sql" and summary["metric"] == "ex" and summary["n"] == 3 == len(samples)
    assert doc["settings"]["protocol"] == "text_to_sql" and doc["metrics"]["metric"] == "ex"
    assert doc["settings"]["keep_distinct"] is False  # the official EX default: DISTINCT removed
    assert 0.0 <= doc["metrics"]["sql_extracted_rate"] <= 1.0 and doc["metrics"]["accuracy_high"] > 0
    assert all(s["turns"] == 1 and s["tokens"] <= 8 for s in samples)


def test_few_shot_examples_come_from_other_databases_only(tiny, concert_db_dir, tmp_path):  # noqa: F811
    """k worked examples per question: other databases' questions answered by their gold SQL, never the
    question's own database (so never its own gold SQL)."""
    import shutil
    from dataclasses import replace

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sqlenv.eval.text_to_sql import pick_examples

    other = tmp_path / "db"
    (other / "concert2").mkdir(parents=True)
    shutil.copyfile(concert_db_dir / "concert" / "concert.sqlite", other / "concert2" / "concert2.sqlite")
    shutil.copytree(concert_db_dir / "concert", other / "concert")
    pool = [*QUESTIONS, *(replace(q, id=q.id + "_2", db_id="concert2", hardness="medium") for q in QUESTIONS)]
    picked = pick_examples("concert", pool, 2, seed=0)
    assert len(picked) == 2 and {q.db_id for q in picked} == {"concert2"}
    assert pick_examples("concert", pool, 2, seed=0) == picked  # deterministic
    assert {tuple(q.id for q in pick_examples("concert", pool, 1, seed=s)) for s in range(8)} != {(picked[0].id,)}
    with pytest.raises(ValueError, match="only 3 examples"):
        pick_examples("concert", pool, 4)

    tokenizer, model = AutoTokenizer.from_pretrained(tiny), AutoModelForCausalLM.from_pretrained(tiny)
    generator = Replies(tokenizer, ["```sql\nSELECT 1\n```"] * len(pool))
    records = play_text_to_sql(model, tokenizer, pool, db_dir=other, progress=False, generator=generator, shots=2)
    for record in records:
        user_turns = [m for m in record.messages if m["role"] == "user"]
        shown = [m["content"] for m in record.messages[1:-2] if m["role"] == "assistant"]
        assert len(user_turns) == 3 and len(shown) == 2
        own = next(q for q in pool if q.id == record.question_id)
        examples = pick_examples(own.db_id, pool, 2)
        assert shown == [f"```sql\n{q.gold_sql}\n```" for q in examples]
        assert all(q.db_id != own.db_id for q in examples)
        # an example shows the tables its gold SQL reads, not the whole database
        expected = {"q_count": 1, "q_france": 1, "q_join": 3}[examples[0].id.removesuffix("_2")]
        assert user_turns[0]["content"].count("CREATE TABLE") == expected


def test_text_to_sql_removes_distinct_unless_kept(tiny, concert_db_dir):  # noqa: F811
    """Q_JOIN's gold says DISTINCT and a singer sang twice in 2014: the reply without it is EX-correct under the
    official default and wrong with keep_distinct; the recorded answer is the SQL as the model wrote it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(tiny), AutoModelForCausalLM.from_pretrained(tiny)
    without = Q_JOIN.gold_sql.replace("SELECT DISTINCT", "SELECT")
    results = []
    for keep in (False, True):
        records = play_text_to_sql(model, tokenizer, [Q_JOIN], db_dir=concert_db_dir, progress=False,
                                   generator=Replies(tokenizer, [f"```sql\n{without}\n```"]), keep_distinct=keep)  # fmt: skip
        results.append((records[0].correct, records[0].answer))
    assert results == [(True, without), (False, without)]
