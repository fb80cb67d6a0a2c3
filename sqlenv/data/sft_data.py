"""SFT trajectories: one verified multi-turn episode per training question, played through the real environment.

Every trajectory is a scripted episode run by `oracle.play` through `SQLEnv`, so each tool result is the
environment's own text and each message is rendered by `sqlenv.env.prompts` in the layout TRL produces at GRPO
time (system + user(question + tables), assistant turns with structured `tool_calls` whose arguments are
JSON strings, `role: "tool"` results, and a closing plain assistant turn so the model learns to stop).

Seven kinds, chosen per question by a stable hash of (seed, id) — never by file order — in the shares of
`SFTDataConfig` (the rest `plain`). The four after `sample` are what an agent that does not know the answer does on a
real database (`sqlenv.data.exploring`):
- `plain`:    describe each table the gold SQL reads → query the gold SQL → answer → plain reply;
- `sample`:   the same with one `sample` of the first table before the query (`sample_fraction`);
- `explore`:  describe the gold tables and one more, in the order their names match the question, the extra one
  (the most question-like table outside the gold query) looked at and left (`explore_fraction`);
- `value_check`: before filtering on a text value, look at how the column spells its values
  (`SELECT DISTINCT col FROM t`, narrowed by LIKE on a word of the value) (`value_check_fraction`);
- `empty_recovery`: the gold query with a text value in the case a question writes it (`'delayed'`) → the database
  really returns nothing (or only zeros) → look at the column's values → the corrected query
  (`empty_recovery_fraction`);
- `wrong_join`: a join on the wrong key column that runs and returns nothing → describe the table whose
  foreign key names the join → the corrected query (`wrong_join_fraction`);
- `recovery`: a plausible wrong query — one column or table reference of the gold SQL renamed, with
  sqlglot locating it, to a name a pretrained model would guess (`name` for `std_name`, `year_built` for
  `yr_built`, `FLIGHT` for `FLIGHTS`) — → the environment's real `Error: no such column/table ...` →
  describe the table the name belongs to → the corrected (gold) query → answer (`error_recovery_fraction`); or,
  half the time where the gold SQL qualifies columns by alias, a column under another table's alias (`T2.name`
  for `T1.name`, the name error real-database episodes met most) after every table is described → the
  corrected query at once.
  The other gold tables are described before the wrong query (see `trajectory_calls`).

Two options change how a kind is played, not which: `repeat_fraction` of the recovery trajectories send the failing
query twice (the same error again, with `env.loop_notice` its note) before the fix; `qualify: table` rewrites the
gold SQL the teacher writes to name each table instead of a T1/T2 alias (`table_qualified`, the same rows checked).

A question a kind cannot be played on (no rename yields a real name error; no text filter, or none whose other
spelling comes back empty; no join a wrong key empties; no table outside the gold query) is played `plain` and
counted by wanted kind (`unavailable`). Only trajectories the verifier accepts are kept; the others are counted by reason.
What this does not do: recover from the wrong grain, or from a wrong *answer* — the teacher still writes the gold SQL
in the end.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from sqlenv.data import exploring
from sqlenv.data.exploring import WrongQuery
from sqlenv.data.oracle import oracle_calls, play
from sqlenv.data.world.naming import ABBREVIATIONS, RESERVED
from sqlenv.env import prompts
from sqlenv.env.environment import EnvConfig, SQLEnv
from sqlenv.env.sandbox import Sandbox
from sqlenv.env.trl_adapter import tool_schemas
from sqlenv.types import HARDNESS_LEVELS, Question, stable_hash

KINDS: tuple[str, ...] = ("plain", "sample", "recovery", "explore", "value_check", "empty_recovery", "wrong_join")
# The order the shares are laid out on [0, 1) by `assigned_kind` (the rest is plain); SFTDataConfig's field of each.
SHARES: dict[str, str] = {
    "recovery": "error_recovery_fraction",
    "empty_recovery": "empty_recovery_fraction",
    "wrong_join": "wrong_join_fraction",
    "value_check": "value_check_fraction",
    "explore": "explore_fraction",
    "sample": "sample_fraction",
}
QUALIFY_STYLES: tuple[str, ...] = ("alias", "table")
_UNIT = float(2**64)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_EXPAND = {short: long for long, short in ABBREVIATIONS.items()}  # "yr" -> "year": the name a model would guess
_EXPAND.update({"std": "student", "no": "number", "nm": "name", "desc": "description", "cnt": "count"})


@dataclass(frozen=True)
class SFTDataConfig:
    """Shares of the trajectory kinds (together at most 1; the rest is `plain`); `seed` drives every per-question choice."""

    error_recovery_fraction: float = 0.2
    sample_fraction: float = 0.3
    explore_fraction: float = 0.0  # the exploring kinds are off by default (experiments/exploring_teacher_44/)
    value_check_fraction: float = 0.0
    empty_recovery_fraction: float = 0.0
    wrong_join_fraction: float = 0.0
    repeat_fraction: float = 0.0  # of the recovery trajectories: the failing query sent again unchanged before the fix
    qualify: str = "alias"  # how the teacher's queries name a column's table: alias (T1.name, as written) | table
    seed: int = 0

    def __post_init__(self) -> None:
        for name in (*SHARES.values(), "repeat_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"sft_data.{name} must be in [0, 1], got {value}")
        if self.qualify not in QUALIFY_STYLES:
            raise ValueError(f"sft_data.qualify must be one of {QUALIFY_STYLES}, got {self.qualify!r}")
        total = sum(getattr(self, name) for name in SHARES.values())
        if total > 1.0 + 1e-9:
            raise ValueError(f"sft_data: the kinds' shares add up to {total:g} > 1 ({', '.join(SHARES.values())})")


@dataclass
class SFTDataResult:
    records: list[dict[str, Any]]
    requalified: int = 0  # questions whose teacher query names tables instead of aliases (`qualify: table`)
    drop_counts: dict[str, int] = field(default_factory=dict)
    dropped: list[tuple[str, str]] = field(default_factory=list)
    unavailable: dict[str, int] = field(default_factory=dict)  # wanted kind -> questions it could not be played on

    @property
    def recovery_unavailable(self) -> int:
        return self.unavailable.get("recovery", 0)


def _unit(seed: int, key: str) -> float:
    return stable_hash(seed, key) / _UNIT


def assigned_kind(question_id: str, config: SFTDataConfig) -> str:
    """The kind a question is assigned to: one stable hash on [0, 1), the kinds' shares laid out in `SHARES` order."""
    u, edge = _unit(config.seed, "sft-kind:" + question_id), 0.0
    for kind, name in SHARES.items():
        edge += getattr(config, name)
        if u < edge:
            return kind
    return "plain"


# ---------------------------------------------------------------------------------------- wrong queries
def _words(identifier: str) -> list[str]:
    # snake_case, camelCase, UPPER_CASE and digits all split into lower-case words.
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", identifier)
    return [w.lower() for w in re.split(r"[_\W]+", spaced) if w]


def column_guesses(column: str, table: str) -> list[str]:
    """Names a pretrained model would plausibly write for `column` of `table`, most plausible first.

    The conventional spelling (abbreviations expanded, snake_case), the last word alone (`std_name` -> `name`),
    and for a one-word column the table-prefixed form (`Name` of `teacher` -> `teacher_name`). Not filtered
    against the schema; `wrong_queries` does that.
    """
    words = _words(column)
    if not words:
        return []
    guesses = ["_".join(_EXPAND.get(w, w) for w in words), "_".join(words)]
    if len(words) > 1:
        guesses.append(words[-1] if words[-1] != "id" else "_".join(words[-2:]))
        guesses.append("_".join(_EXPAND.get(w, w) for w in words[1:]))
    else:
        table_words = _words(table)
        if table_words:
            singular = exploring.singular(table_words[-1])
            guesses.append(f"{singular}_{words[0]}")
    return list(dict.fromkeys(guesses))


def table_guesses(table: str) -> list[str]:
    """Names a model would guess for `table`: abbreviations spelled out (`shpmt` -> `shipment`) and the
    number flipped (`FLIGHTS` -> `FLIGHT`, `teacher` -> `teachers`), in the table's letter case."""
    words = _words(table)
    low = table.lower()
    guesses = []
    if any(w in _EXPAND for w in words):
        guesses.append("_".join(_EXPAND.get(w, w) for w in words))
    suffix = str.upper if table.isupper() else str.lower  # "BOOKINGS" -> "BOOKING", "Course" -> "Courses"
    if low.endswith("ies") and len(low) > 4:
        flipped = table[:-3] + suffix("y")
    elif low.endswith(("sses", "shes", "ches", "xes")):
        flipped = table[:-2]
    elif low.endswith("s") and not low.endswith("ss"):
        flipped = table[:-1]
    elif low.endswith("y") and len(low) > 2 and low[-2] not in "aeiou":
        flipped = table[:-1] + suffix("ies")
    elif low.endswith(("s", "x", "ch", "sh")):
        flipped = table + suffix("es")
    else:
        flipped = table + suffix("s")
    guesses.append(flipped)
    if table.isupper():
        guesses = [g.upper() for g in guesses]
    return [g for g in dict.fromkeys(guesses) if g.lower() != low]


def wrong_queries(question: Question, sandbox: Sandbox) -> list[WrongQuery]:
    """Every single-rename corruption of the gold SQL that should fail with a name error, best first.

    sqlglot locates the identifiers; the rename is spliced into the original text at the identifier's
    character offsets so the rest of the statement stays byte-identical. Only unquoted references to real
    columns/tables are renamed, and never to a name that exists (case-insensitively) in the query's tables.
    """
    try:
        tree = sqlglot.parse_one(question.gold_sql, read="sqlite")
    except SqlglotError:
        return []
    sql = question.gold_sql
    tables, aliases = {}, {}
    for node in tree.find_all(exp.Table):
        real = sandbox.resolve_table(node.name)
        if real is not None:
            tables[real] = sandbox.table_info(real)
            aliases[node.alias_or_name.lower()] = real
    taken_columns = {c.name.lower() for info in tables.values() if info for c in info.columns}
    column_owner = {}  # column -> the first query table that has it (for an unqualified reference)
    for real, info in tables.items():
        for c in info.columns if info else ():
            column_owner.setdefault(c.name.lower(), real)
    taken_tables = {t.lower() for t in sandbox.table_names()}

    out: list[WrongQuery] = []
    for node in tree.find_all(exp.Column):
        ident = node.this
        if not isinstance(ident, exp.Identifier) or ident.quoted or ident.name.lower() not in column_owner:
            continue
        owner = aliases.get(node.table.lower(), column_owner[ident.name.lower()])  # T2.name: T2's table
        for guess in column_guesses(ident.name, owner):
            if guess.lower() in taken_columns or guess.lower() in RESERVED or not _IDENT.match(guess):
                continue
            spliced = exploring.splice(sql, ident, guess)
            if spliced:
                out.append(WrongQuery(spliced, "column", ident.name, guess, owner))
                break
    out += exploring.wrong_aliases(tree, sql, sandbox, aliases, tables)
    for node in tree.find_all(exp.Table):
        ident = node.this
        real = sandbox.resolve_table(ident.name) if isinstance(ident, exp.Identifier) else None
        if real is None or ident.quoted:
            continue
        for guess in table_guesses(ident.name):
            if guess.lower() in taken_tables or guess.lower() in RESERVED or not _IDENT.match(guess):
                continue
            spliced = exploring.splice(sql, ident, guess)
            if spliced:
                out.append(WrongQuery(spliced, "table", ident.name, guess, real))
                break
    return list({w.sql: w for w in out}.values())


def _pick_wrong_query(question: Question, sandbox: Sandbox, seed: int) -> WrongQuery | None:
    """The wrong query for a recovery trajectory: a wrong alias half the time where the query has one (what Spider
    episodes failed on most: `T2.Name` where `Name` is T1's), else a column guess two times in three, else a table
    guess.

    The candidates are tried in a stable-hash order; the first one the sandbox really rejects with a
    name error ("no such column"/"no such table") wins.
    """
    candidates = wrong_queries(question, sandbox)
    if not candidates:
        return None
    h = stable_hash(seed, "sft-wrong:" + question.id)
    prefer = "alias" if h % 2 == 0 and any(w.kind == "alias" for w in candidates) else "table" if h % 3 == 0 else "column"
    ordered = sorted(
        candidates,
        key=lambda w: (w.kind != prefer, stable_hash(seed, f"sft-wrong:{question.id}:{w.sql}")),
    )
    for wrong in ordered:
        result = sandbox.execute(wrong.sql)
        if not result.ok and "no such" in (result.error or ""):
            return wrong
    return None


def table_qualified(sql: str) -> str | None:
    """`sql` with each table alias replaced by the table's own name (`FROM booking AS T1 ... T1.seat_class` ->
    `FROM booking ... booking.seat_class`), spliced in place so the rest stays byte-identical; None where nothing
    is aliased or it cannot be done safely (a table read twice, an aliased subquery, no reliable offsets)."""
    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except SqlglotError:
        return None
    tables = list(tree.find_all(exp.Table))
    names = [t.name.lower() for t in tables]
    if len(set(names)) != len(names) or any(q.args.get("alias") is not None for q in tree.find_all(exp.Subquery)):
        return None
    edits: list[tuple[int, int, str]] = []  # (start, end inclusive, replacement)
    by_alias: dict[str, str] = {}
    for table in tables:
        alias = table.args.get("alias")
        if alias is None:
            continue
        ident, name = alias.this, table.this
        if not isinstance(ident, exp.Identifier) or not isinstance(name, exp.Identifier) or name.quoted:
            return None
        start, end = ident.meta.get("start"), ident.meta.get("end")
        name_end = name.meta.get("end")
        if start is None or end is None or name_end is None or sql[start : end + 1] != ident.name:
            return None
        if not re.fullmatch(r"\s+(?:AS\s+)?", sql[name_end + 1 : start], flags=re.IGNORECASE):
            return None
        by_alias[ident.name.lower()] = name.name
        edits.append((name_end + 1, end, ""))
    if not by_alias:
        return None
    for column in tree.find_all(exp.Column):
        qualifier = column.args.get("table")
        if not isinstance(qualifier, exp.Identifier) or qualifier.name.lower() not in by_alias:
            continue
        start, end = qualifier.meta.get("start"), qualifier.meta.get("end")
        if start is None or end is None or sql[start : end + 1] != qualifier.name:
            return None
        edits.append((start, end, by_alias[qualifier.name.lower()]))
    out = sql
    for start, end, replacement in sorted(edits, reverse=True):
        out = out[:start] + replacement + out[end + 1 :]
    return out


def _requalified(question: Question, sandbox: Sandbox) -> Question | None:
    """The question with its gold SQL table-qualified (`table_qualified`) where that returns the same rows, else None."""
    sql = table_qualified(question.gold_sql)
    if sql is None:
        return None
    before, after = sandbox.execute(question.gold_sql), sandbox.execute(sql)
    if not (before.ok and after.ok and before.rows == after.rows and len(before.columns) == len(after.columns)):
        return None
    return replace(question, gold_sql=sql)


# ---------------------------------------------------------------------------------------- trajectories
def repeats_failure(question_id: str, config: SFTDataConfig) -> bool:
    """Whether a recovery trajectory of this question sends its failing query twice (`repeat_fraction`, stable hash)."""
    return _unit(config.seed, "sft-repeat:" + question_id) < config.repeat_fraction


def trajectory_calls(
    question: Question, sandbox: Sandbox, kind: str, seed: int, env_config: EnvConfig = EnvConfig(),
    repeat: bool = False,
) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """(kind actually played, scripted calls). A recovery without a usable wrong query falls back to plain.

    A recovery describes the gold tables *except* the one the wrong name belongs to, writes the wrong
    query (a guess at that not-yet-described table), gets the error, describes that table, and runs the
    corrected query. For a one-table query the wrong query comes first. So the model sees an error both
    before and after it has explored, and in both cases the next move is to look, then fix — never to
    answer with the error (what a model trained only on clean trajectories does). With the schema shown
    (`schema: full`) nothing is described up front; the recovery describes the table after the error.

    `repeat`: the failing query is sent a second time, unchanged, right after its error — what the agent does
    most on real databases — so the trajectory shows the same error again (with `env.loop_notice`, the note that
    the call already failed) and then the change. Both failing calls stay out of the loss (`mistake_turns`).
    """
    calls = oracle_calls(question, sandbox, sample=kind == "sample", config=env_config)
    if kind in ("explore", "value_check", "empty_recovery", "wrong_join"):
        played = _exploring_calls(question, sandbox, kind, seed, calls, env_config)
        if played is not None:
            return kind, played
        return "plain", calls
    if kind != "recovery":
        return kind, calls
    wrong = _pick_wrong_query(question, sandbox, seed)
    if wrong is None:
        return "plain", calls
    describes = [c for c in calls if c[0] == "describe"]
    rest = [c for c in calls if c[0] != "describe"]  # the gold query and the answer
    failing = [("query", {"sql": wrong.sql})] * (2 if repeat else 1)
    if wrong.kind == "alias":  # the tables are described; the error names the column: requalify it, at once
        return "recovery", describes + failing + rest
    owner = [c for c in describes if c[1]["table_name"] == wrong.table]
    before = [c for c in describes if c[1]["table_name"] != wrong.table] if owner else []
    after = owner or describes or [("describe", {"table_name": wrong.table})]
    return "recovery", before + failing + after + rest


def _exploring_calls(
    question: Question, sandbox: Sandbox, kind: str, seed: int, calls: list[tuple[str, dict[str, Any]]], env_config: EnvConfig
) -> list[tuple[str, dict[str, Any]]] | None:
    """The calls of an explore / value_check / empty_recovery / wrong_join trajectory, or None where the question has
    no such move."""
    describes = [c for c in calls if c[0] == "describe"]
    rest = [c for c in calls if c[0] != "describe"]  # the gold query and the answer
    gold_tables = [c[1]["table_name"] for c in describes]
    if kind == "wrong_join":
        wrong = exploring.wrong_join(question, sandbox, seed)
        if wrong is None or env_config.schema == "full":
            return None
        owner = [c for c in describes if c[1]["table_name"] == wrong.table]
        before = [c for c in describes if c[1]["table_name"] != wrong.table]
        after = owner or [("describe", {"table_name": wrong.table})]
        return before + [("query", {"sql": wrong.sql})] + after + rest
    if kind == "explore":
        if env_config.schema == "full":
            return None  # the schema is in the prompt: nothing to explore
        extra = exploring.distractor_table(question, sandbox, gold_tables, seed)
        if extra is None:
            return None
        order = exploring.exploration_order(question, gold_tables + [extra], seed)
        return [("describe", {"table_name": t}) for t in order] + rest
    for flt in sorted(exploring.text_filters(question, sandbox), key=lambda f: stable_hash(seed, f"sft-filter:{question.id}:{f}")):
        check = exploring.value_check_sql(sandbox, flt)
        if check is None:
            continue
        if kind == "value_check":
            return describes + [("query", {"sql": check})] + rest
        wrong = exploring.misspelled_filter(question, sandbox, flt, seed)
        if wrong is not None:
            return describes + [("query", {"sql": wrong}), ("query", {"sql": check})] + rest
    return None


def check_trajectory(messages: Sequence[dict[str, Any]], kind: str) -> str | None:
    """Why a played transcript is unfit for training, or None. Guards the shape SFT relies on."""
    if not messages or messages[-1].get("role") != "assistant" or messages[-1].get("tool_calls"):
        return "no_final_plain_turn"
    calls = [m for m in messages if m.get("role") == "assistant" and m.get("tool_calls")]
    results = [m for m in messages if m.get("role") == "tool"]
    if len(calls) != len(results):
        return "unpaired_tool_calls"
    for m in calls:
        for call in m["tool_calls"]:
            if not isinstance(call["function"]["arguments"], str):
                return "arguments_not_json_string"
    errors = [i for i, m in enumerate(results) if m["content"].startswith(prompts.ERROR_PREFIX)]
    if kind == "recovery":
        names = [m["tool_calls"][0]["function"]["name"] for m in calls]
        sent = [m["tool_calls"][0]["function"]["arguments"] for m in calls]
        repeated = len(errors) == 2 and errors[1] == errors[0] + 1 and sent[errors[0]] == sent[errors[1]]
        if len(errors) != 1 and not repeated:
            return "recovery_without_single_error"
        at = errors[-1]
        changed = names[at + 1 : at + 2] == ["query"] and sent[at + 1] != sent[at]  # a wrong alias, requalified
        if names[at] != "query" or not (changed or names[at + 1 : at + 2] == ["describe"] and "query" in names[at + 2 :]):
            return "recovery_without_describe_then_query"
    elif errors:
        return "unexpected_error"
    if kind in ("value_check", "empty_recovery", "wrong_join"):
        queries = [i for i, m in enumerate(calls) if m["tool_calls"][0]["function"]["name"] == "query"]
        if len(queries) != {"value_check": 2, "empty_recovery": 3, "wrong_join": 2}[kind]:
            return f"{kind}_without_its_queries"
        if kind != "value_check" and not exploring.shows_nothing(results[queries[0]]["content"]):
            return f"{kind}_without_an_empty_result"
        if kind == "wrong_join" and calls[queries[0] + 1]["tool_calls"][0]["function"]["name"] != "describe":
            return "wrong_join_without_describe_then_query"
    return None


def mistake_turns(messages: Sequence[dict[str, Any]], kind: str) -> list[int]:
    """Indices in `messages` of the assistant turns that are the teacher's deliberate mistakes: the query that
    fails in a `recovery`, the first (empty) query of an `empty_recovery` or `wrong_join`. They stay in every
    trajectory — the model must see what a mistake looks like and what follows it — and SFT leaves them out of
    the loss unless `sft.train_on_mistakes` (`sqlenv.train.sft.tokenize_record`): learn the fix, not the guess."""
    if kind not in ("recovery", "empty_recovery", "wrong_join"):
        return []
    queries = [
        i for i, m in enumerate(messages[:-1])
        if m.get("role") == "assistant" and m.get("tool_calls") and m["tool_calls"][0]["function"]["name"] == "query"
    ]  # fmt: skip
    if kind == "recovery":
        return [i for i in queries if messages[i + 1].get("content", "").startswith(prompts.ERROR_PREFIX)]
    return queries[:1]


def build_sft_data(
    questions: Sequence[Question],
    db_dir: str | Path,
    env_config: EnvConfig = EnvConfig(),
    config: SFTDataConfig = SFTDataConfig(),
) -> SFTDataResult:
    """Play one trajectory per question (sorted by id) and keep those the verifier accepts."""
    env = SQLEnv(db_dir, env_config)
    tools = json.dumps(tool_schemas(env_config), ensure_ascii=False)
    records: list[dict[str, Any]] = []
    dropped: list[tuple[str, str]] = []
    unavailable: Counter[str] = Counter()
    requalified = 0
    for question in sorted(questions, key=lambda q: q.id):
        wanted = assigned_kind(question.id, config)
        sandbox = env.sandbox_for(question.db_id)  # a missing database is a data error: it raises
        if config.qualify == "table" and (rewritten := _requalified(question, sandbox)) is not None:
            question, requalified = rewritten, requalified + 1
        repeat = wanted == "recovery" and repeats_failure(question.id, config)
        kind, calls = trajectory_calls(question, sandbox, wanted, config.seed, env_config, repeat=repeat)
        unavailable[wanted] += kind != wanted
        record = play(env, question, calls)
        if not record.messages:
            reason = "gold_sql_fails"
        elif not record.answered:
            reason = "not_answered"
        elif not record.correct:
            reason = "incorrect"
        elif record.calls_after_answer or record.parse_failures or record.budget_exhausted:
            reason = "bad_episode"
        else:
            reason = check_trajectory(record.messages, kind)
        if reason is not None:
            dropped.append((question.id, reason))
            continue
        records.append(
            {
                "id": question.id,
                "db_id": question.db_id,
                "hardness": question.hardness,
                "kind": kind,
                "messages": record.messages,
                "tools": tools,
                "mistakes": mistake_turns(record.messages, kind),
            }
        )
    env.close()
    return SFTDataResult(
        records=records,
        drop_counts=dict(sorted(Counter(reason for _, reason in dropped).items())),
        dropped=dropped,
        unavailable={k: unavailable.get(k, 0) for k in KINDS if k in SHARES},
        requalified=requalified,
    )


def summarize(result: SFTDataResult, candidates: int) -> dict[str, Any]:
    """Counts by kind and hardness, drops by reason, and turn/character length statistics."""
    records = result.records
    by_kind = Counter(r["kind"] for r in records)
    by_hardness = Counter(r["hardness"] for r in records)
    turns = [sum(1 for m in r["messages"] if m["role"] == "assistant") for r in records]
    chars = [sum(len(m.get("content") or "") + len(json.dumps(m.get("tool_calls") or "")) for m in r["messages"]) for r in records]
    return {
        "candidates": candidates,
        "kept": len(records),
        "keep_rate": len(records) / candidates if candidates else 0.0,
        "by_kind": {k: by_kind.get(k, 0) for k in KINDS},
        "requalified": result.requalified,
        "recovery_repeated": sum(1 for r in records if r["kind"] == "recovery" and len(r["mistakes"]) > 1),
        "by_hardness": {h: by_hardness.get(h, 0) for h in HARDNESS_LEVELS},
        "by_kind_hardness": {
            k: {h: sum(1 for r in records if r["kind"] == k and r["hardness"] == h) for h in HARDNESS_LEVELS}
            for k in KINDS
        },
        "dropped": result.drop_counts,
        "unavailable": result.unavailable,
        "recovery_unavailable": result.recovery_unavailable,
        "assistant_turns": _stats(turns),
        "message_chars": _stats(chars),
    }


def _stats(values: Sequence[int]) -> dict[str, float]:
    if not values:
        return {"min": 0, "mean": 0.0, "median": 0.0, "max": 0}
    return {
        "min": min(values),
        "mean": round(statistics.fmean(values), 2),
        "median": statistics.median(values),
        "max": max(values),
    }
