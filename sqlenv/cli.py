"""`sqlenv` command line: run SQL in the sandbox, judge answers, validate data, play an episode.

    sqlenv query    --db PATH --sql SQL [--timeout S]      one JSON object (exit 0 even if the SQL fails)
    sqlenv judge    --db-dir DIR [--metric value|ex [--keep-distinct]] < lines.jsonl   one JSON verdict per line
    sqlenv validate --data DIR | --questions F --db-dir D  oracle-play every question; JSON summary
    sqlenv play     --data DIR --question N                a person plays one episode at the terminal
    sqlenv eval     --model DIR --data DIR | --questions F --db-dir D   a model on a question set
                    (added by `pipeline.cli`, the console script, which also logs it to MLflow)

Every subcommand goes through the same sandbox, verifier, environment and prompts as
training and evaluation, so what it says is what a model would get. Exit codes: 0 ok,
1 some input failed (a malformed judge line, a question that does not verify),
2 unusable arguments (missing database or folder).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from sqlenv.types import Question

EXIT_OK, EXIT_FAILURES, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A problem with the command's arguments or input files (exit 2), reported on stderr."""


@dataclass(frozen=True)
class Command:
    """A subcommand added by a caller (the `pipeline` layer adds `eval`, which logs to MLflow)."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, TextIO], int]


def _print_json(obj: Any, out: TextIO) -> None:
    out.write(json.dumps(obj, ensure_ascii=False, default=str) + "\n")


# ------------------------------------------------------------------------------ query
def _cmd_query(args: argparse.Namespace, out: TextIO) -> int:
    from sqlenv.env.sandbox import Sandbox, SandboxError, SandboxLimits

    if not Path(args.db).is_file():
        raise UsageError(f"no database file at {args.db}")
    try:
        with Sandbox(args.db, SandboxLimits(timeout_s=args.timeout)) as box:
            result = box.execute(args.sql)
    except SandboxError as exc:
        raise UsageError(str(exc)) from exc
    _print_json(result.to_dict(), out)
    return EXIT_OK


# ------------------------------------------------------------------------------ judge
def _judge_line(line: str, db_dir: Path, boxes: dict, limits: Any, metric: str = "value",
                keep_distinct: bool = False) -> tuple[dict[str, Any], bool]:  # fmt: skip
    """Judge one input line; returns (output record, whether the line was malformed).

    metric "value": the lenient verifier on the answer text (or on the predicted SQL's canonical answer);
    metric "ex": Spider's execution match of the predicted SQL's rows (`sqlenv.env.execution_match`), both
    statements without DISTINCT as the official evaluator runs them unless `keep_distinct`.
    """
    from sqlenv.data.hardness import is_ordered
    from sqlenv.env.execution_match import ex_sql, execution_verdict, order_matters
    from sqlenv.env.sandbox import Sandbox, SandboxError
    from sqlenv.env.verifier import format_answer, verify
    from sqlenv.types import db_file

    try:
        rec = json.loads(line)
    except json.JSONDecodeError as exc:
        return {"id": None, "correct": False, "reason": f"malformed input: not JSON ({exc.msg})"}, True
    if not isinstance(rec, dict):
        return {"id": None, "correct": False, "reason": "malformed input: not a JSON object"}, True
    rid = rec.get("id")
    missing = [k for k in ("id", "db_id", "gold_sql") if not isinstance(rec.get(k), (str, int))]
    has_answer, has_pred = "answer" in rec, "pred_sql" in rec
    if missing or has_answer == has_pred or (metric == "ex" and not has_pred):
        need = (f"missing {missing}" if missing else "--metric ex judges SQL: 'pred_sql' is required" if metric == "ex"
                else "exactly one of 'answer' or 'pred_sql' is required")
        return {"id": rid, "correct": False, "reason": f"malformed input: {need}"}, True
    db_id = str(rec["db_id"])
    if db_id not in boxes:
        path = db_file(db_dir, db_id)
        try:
            boxes[db_id] = Sandbox(path, limits) if path.is_file() else None
        except SandboxError:
            boxes[db_id] = None
    box = boxes[db_id]
    if box is None:
        return {"id": rid, "correct": False, "reason": f"malformed input: no usable database {db_id!r} in {db_dir}"}, True
    ex = metric == "ex"
    gold_sql = ex_sql(str(rec["gold_sql"]), keep_distinct) if ex else str(rec["gold_sql"])
    gold = box.execute(gold_sql)
    if not gold.ok:
        stripped = " (DISTINCT removed, as the official evaluator runs it; --keep-distinct keeps it)" if (
            gold_sql != str(rec["gold_sql"])) else ""  # fmt: skip
        return {"id": rid, "correct": False, "reason": f"gold SQL failed{stripped}: {gold.error}"}, False
    default_order = order_matters if metric == "ex" else is_ordered
    ordered = bool(rec["ordered"]) if "ordered" in rec else default_order(str(rec["gold_sql"]))
    if has_pred:
        pred = box.execute(ex_sql(str(rec["pred_sql"]), keep_distinct) if ex else str(rec["pred_sql"]))
        if not pred.ok:
            return {"id": rid, "correct": False, "reason": f"predicted SQL failed: {pred.error}"}, False
        if metric == "ex":
            verdict = execution_verdict(pred, gold, ordered)
            return {"id": rid, "correct": verdict.correct, "reason": verdict.reason}, False
        # Exactly what an agent that ran this SQL and answered with its result would get.
        answer = format_answer(pred.columns, pred.rows)
    else:
        answer = rec["answer"] if isinstance(rec["answer"], str) else json.dumps(rec["answer"])
    verdict = verify(answer, gold.rows, ordered)
    return {"id": rid, "correct": verdict.correct, "reason": verdict.reason}, False


def _cmd_judge(args: argparse.Namespace, inp: TextIO, out: TextIO) -> int:
    from sqlenv.env.sandbox import SandboxLimits

    db_dir = Path(args.db_dir)
    if not db_dir.is_dir():
        raise UsageError(f"no database folder at {db_dir}")
    if args.keep_distinct and args.metric != "ex":
        raise UsageError("--keep-distinct is --metric ex's (the value verifier reads answers, not SQL)")
    boxes: dict[str, Any] = {}
    limits = SandboxLimits(timeout_s=args.timeout)
    malformed = 0
    try:
        for line in inp:
            if not line.strip():
                continue
            record, bad = _judge_line(line, db_dir, boxes, limits, args.metric, args.keep_distinct)
            malformed += bad
            _print_json(record, out)
            out.flush()
    finally:
        for box in boxes.values():
            if box is not None:
                box.close()
    return EXIT_FAILURES if malformed else EXIT_OK


# ------------------------------------------------------------------- question loading
def _load(
    args: argparse.Namespace, keep_nondeterministic: bool = False
) -> tuple[list[Question], list[tuple[str, str]], list[tuple[str, str]], Path]:
    """Questions, loader drops and loader flags from a Spider folder or a questions JSONL + db folder."""
    if args.data:
        from sqlenv.data.spider import load_spider

        data = Path(args.data)
        if not data.is_dir():
            raise UsageError(f"no Spider folder at {data}")
        db_dir = Path(args.db_dir) if args.db_dir else (data / "database" if (data / "database").is_dir() else data)
        loaded = load_spider(data, keep_nondeterministic=keep_nondeterministic)
        return list(loaded.questions), list(loaded.dropped), list(loaded.flagged), db_dir
    if not args.questions or not args.db_dir:
        raise UsageError("give --data DIR (Spider layout), or --questions FILE.jsonl with --db-dir DIR")
    from sqlenv.data.questions import load_questions_file

    path = Path(args.questions)
    if not path.is_file():
        raise UsageError(f"no questions file at {path}")
    try:
        return load_questions_file(path), [], [], Path(args.db_dir)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _add_source_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", help="Spider-format folder (dev.json, tables.json, database/)")
    p.add_argument("--questions", help="questions JSONL (one Question per line), instead of --data")
    p.add_argument("--db-dir", help="databases in Spider layout <dir>/<db_id>/<db_id>.sqlite "
                   "(default with --data: DATA/database)")


# --------------------------------------------------------------------------- validate
def _cmd_validate(args: argparse.Namespace, out: TextIO) -> int:
    from sqlenv.data.oracle import oracle_calls, play
    from sqlenv.env.environment import EnvConfig, SQLEnv
    from sqlenv.env.sandbox import SandboxError

    # Ties under LIMIT are kept and flagged, not failed: the oracle plays them on this
    # SQLite like any other question (the `prepare` stage still drops them from the sets).
    questions, dropped, flagged, db_dir = _load(args, keep_nondeterministic=True)
    failures = [{"id": qid, "reason": f"dropped by loader: {reason}"} for qid, reason in dropped]
    env = SQLEnv(db_dir, EnvConfig(sql_timeout_s=args.timeout))
    verified = 0
    for q in questions:
        try:
            record = play(env, q, oracle_calls(q, env.sandbox_for(q.db_id), sample=args.sample))
        except SandboxError as exc:
            failures.append({"id": q.id, "reason": f"database unusable: {exc}"})
            continue
        if record.correct:
            verified += 1
        else:
            failures.append({"id": q.id, "reason": record.verdict_reason or "not verified"})
    n = len(questions) + len(dropped)
    _print_json({"n": n, "verified": verified, "rate": round(verified / n, 4) if n else 0.0,
                 "failures": failures,
                 "warnings": [{"id": qid, "reason": reason} for qid, reason in flagged]}, out)
    return EXIT_FAILURES if failures else EXIT_OK


# ------------------------------------------------------------------------------- play
def parse_command(line: str, answer_mode: str = "value") -> tuple[str, Any] | None:
    """A typed line as a tool call: `describe singer`, `query SELECT ...`, `answer 42` (with answer mode sql:
    `answer SELECT ...`), or JSON `{"name": ..., "arguments": {...}}`. None when the line is JSON that doesn't parse."""
    from sqlenv.env.environment import tool_params

    params = tool_params(answer_mode)

    text = line.strip()
    if text.startswith("{"):
        try:
            call = json.loads(text)
        except json.JSONDecodeError:
            return None
        if not isinstance(call, dict):
            return None
        return str(call.get("name", "")), call.get("arguments", {})
    word, _, rest = text.partition(" ")
    rest = rest.strip()
    if word in params and rest:
        return word, {params[word][0]: rest}
    return word, {}


def _cmd_play(args: argparse.Namespace, inp: TextIO, out: TextIO) -> int:
    from sqlenv.env import prompts
    from sqlenv.env.environment import EnvConfig, SQLEnv

    questions, _, _, db_dir = _load(args)
    chosen = [q for q in questions if q.id == args.question]
    if not chosen:
        try:
            chosen = [questions[int(args.question)]]
        except (ValueError, IndexError):
            raise UsageError(f"no question {args.question!r} (give an id or an index below {len(questions)})")
    question = chosen[0]
    env = SQLEnv(db_dir, EnvConfig(step_budget=args.step_budget, sql_timeout_s=args.timeout, schema=args.schema,
                                   answer=args.answer))  # fmt: skip
    system, user = prompts.initial_messages(question, env.reset(question), env.config.system_prompt)
    out.write(f"=== system ===\n{system['content']}\n\n=== user ===\n{user['content']}\n")
    out.write(f"(type: describe TABLE | sample TABLE | query SQL | answer {args.answer.upper()} | JSON "
              "{\"name\":..., \"arguments\":{...}} | quit)\n")
    interactive = inp.isatty()
    while not env.done:
        if interactive:
            out.write("> ")
        out.flush()
        line = inp.readline()
        if not line or line.strip() in ("quit", "exit"):
            break
        if not line.strip():
            continue
        call = parse_command(line, args.answer)
        if call is None:
            out.write("(not a valid JSON call; nothing was sent)\n")
            continue
        result = env.step(*call)
        out.write(f"=== tool: {call[0]} ===\n{result.observation}\n")
    summary = env.summary()
    summary["verdict_reason"] = env.verdict_reason
    out.write("=== episode ===\n")
    _print_json(summary, out)
    return EXIT_OK


# ------------------------------------------------------------------------------- main
def _parser(extra: Mapping[str, Command] = {}) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sqlenv", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, command in extra.items():
        command.add_arguments(sub.add_parser(name, help=command.help, description=command.help))

    p = sub.add_parser("query", help="run one SQL statement in the sandbox; print a JSON result")
    p.add_argument("--db", required=True, help="SQLite database file")
    p.add_argument("--sql", required=True, help="the statement to run")
    p.add_argument("--timeout", type=float, default=2.0, help="wall-clock limit in seconds (default 2)")

    p = sub.add_parser("judge", help="judge answers or predicted SQL read as JSON lines on stdin",
                       description="Input lines: {id, db_id, gold_sql, answer} or {id, db_id, gold_sql, pred_sql} "
                       "(optional 'ordered'; default: whether gold_sql orders at top level, or with --metric ex "
                       "whether it says 'order by'). Output lines: {id, correct, reason}. Exit 1 if any input line "
                       "was malformed.")
    p.add_argument("--metric", choices=("value", "ex"), default="value",
                   help="value: the lenient answer verifier (default); ex: Spider's execution match of pred_sql")
    p.add_argument("--keep-distinct", action="store_true",
                   help="ex: run both statements as written; by default DISTINCT is removed from both first, as "
                   "Spider's official evaluator does unless given --keep_distinct")
    p.add_argument("--db-dir", required=True, help="databases in Spider layout <dir>/<db_id>/<db_id>.sqlite")
    p.add_argument("--timeout", type=float, default=2.0, help="per-statement limit in seconds (default 2)")

    p = sub.add_parser("validate", help="play the oracle episode of every question; exit 1 if any fails")
    _add_source_args(p)
    p.add_argument("--sample", action="store_true", help="let the oracle sample a table too")
    p.add_argument("--timeout", type=float, default=2.0, help="per-statement limit in seconds (default 2)")

    p = sub.add_parser("play", help="play one episode at the terminal, seeing what the model sees")
    _add_source_args(p)
    p.add_argument("--question", required=True, help="question id, or its index in the loaded list")
    p.add_argument("--schema", choices=("hidden", "full"), default="hidden", help="what the first message shows")
    p.add_argument("--answer", choices=("value", "sql"), default="value", help="what answer takes (sql: scored by EX)")
    p.add_argument("--step-budget", type=int, default=15, help="tool calls allowed (default 15)")
    p.add_argument("--timeout", type=float, default=2.0, help="per-statement limit in seconds (default 2)")

    p = sub.add_parser("serve", help="serve the environment to other processes and people (OpenEnv; the serve extra)",
                       description="An OpenEnv server of the SQL environment: WebSocket sessions, MCP tools, a page "
                       "for people with --web. Needs `pip install -e \".[serve]\"`.")  # fmt: skip
    p.add_argument("--data", default="data", help="a prepared data folder (questions/, databases/; default: the "
                   "pipeline's data/) or a Spider-format folder")  # fmt: skip
    p.add_argument("--split", help="serve only this split (prepared: train, n50, n200; Spider: dev)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: a free one, printed)")
    p.add_argument("--max-sessions", type=int, default=8, help="concurrent sessions (default 8); more are refused")
    p.add_argument("--session-timeout", type=float, default=600.0,
                   help="seconds a silent session is kept before it is closed (default 600)")
    p.add_argument("--web", action="store_true", help="also serve the page for people at /web")
    p.add_argument("--shared-sandboxes", action="store_true", help="one sandbox per database shared by all sessions "
                   "(in-process training's way; a slow query then delays other sessions): for bench/bench_serve.py")  # fmt: skip
    p.add_argument("--schema", choices=("hidden", "full"), default="hidden", help="what the first message shows")
    p.add_argument("--step-budget", type=int, default=15, help="tool calls allowed (default 15)")
    p.add_argument("--timeout", type=float, default=2.0, help="per-statement limit in seconds (default 2)")
    return parser


def _cmd_serve(args: argparse.Namespace, out: TextIO) -> int:
    try:
        from sqlenv.serve.app import serve
    except ImportError as exc:
        raise UsageError(f"needs the serve extra ({exc.name} is missing): pip install -e \".[serve]\"") from exc
    from sqlenv.env.environment import EnvConfig

    if not Path(args.data).is_dir():
        raise UsageError(f"no data folder at {args.data} (run the prepare stage, or give --data)")
    config = EnvConfig(step_budget=args.step_budget, sql_timeout_s=args.timeout, schema=args.schema)
    try:
        return serve(args.data, args.host, args.port, args.split, args.max_sessions, args.session_timeout, args.web,
                     config, out, own_sandboxes=not args.shared_sandboxes)  # fmt: skip
    except (ValueError, OSError) as exc:
        raise UsageError(str(exc)) from exc


def main(
    argv: Sequence[str] | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    extra: Mapping[str, Command] = {},
) -> int:
    """The command line; returns the exit code. `extra` adds subcommands (see `Command`)."""
    args = _parser(extra).parse_args(argv)
    inp, out = stdin or sys.stdin, stdout or sys.stdout
    try:
        if args.command in extra:
            return extra[args.command].run(args, out)
        if args.command == "query":
            return _cmd_query(args, out)
        if args.command == "judge":
            return _cmd_judge(args, inp, out)
        if args.command == "validate":
            return _cmd_validate(args, out)
        if args.command == "serve":
            return _cmd_serve(args, out)
        return _cmd_play(args, inp, out)
    except UsageError as exc:
        print(f"sqlenv {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
