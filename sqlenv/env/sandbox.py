"""The one place any SQL statement runs: a read-only, time- and size-bounded SQLite sandbox.

Every statement from the agent, the oracle and the CLI goes through `Sandbox.execute`, which
never raises for bad, denied or slow SQL: the outcome is a `QueryResult` whose `error` is
SQLite's own message (or the sandbox's, e.g. for a timeout).

What guards the database, in layers (all of them SQLite's, none a keyword filter on the SQL):
- the file is opened read-only (`file:...?mode=ro`; a WAL-mode file with no -wal file also
  `immutable=1`, else SQLite would create -wal/-shm files next to it), `PRAGMA query_only=1`
  on top;
- an authorizer allows only reads (SELECT / WITH / recursive CTEs, functions except
  `load_extension`, EXPLAIN) and six schema pragmas in any form that cannot write
  (table_info, table_xinfo, foreign_key_list, index_list, index_info, index_xinfo). Everything
  else is denied: INSERT/UPDATE/DELETE, CREATE/DROP/ALTER of anything (temp objects included),
  ATTACH/DETACH, transactions and savepoints, REINDEX/ANALYZE and all other pragmas;
- VACUUM and VACUUM INTO reach the authorizer only as an ATTACH of the target file (checked
  empirically on SQLite 3.40: VACUUM INTO a new file *succeeds* on a read-only connection
  without it), so they are denied with ATTACH; `SQLITE_LIMIT_ATTACHED = 0` is the second line
  of defence ("too many attached databases - max 0") should the authorizer ever miss one;
- `set_progress_handler` checks a wall-clock deadline every `_PROGRESS_STEPS` VM instructions,
  also while rows are fetched, so runaway joins and endless recursive CTEs stop at the budget;
- `setlimit` lowers SQLite's limits (string/blob length, SQL length, compound selects,
  expression depth, LIKE pattern length, ...) so randomblob/zeroblob/printf/replace bombs fail
  at once with "string or blob too big" instead of allocating gigabytes;
- fetching is capped by rows (`max_fetch_rows`) and by bytes (`max_fetch_bytes`): rows are
  fetched in chunks no bigger than the remaining byte budget even if every cell had the maximal
  length, and each chunk is measured, so a result of ten thousand one-megabyte strings stops
  at the budget (`truncated=True`) instead of filling memory;
- the built-in functions that can run for seconds inside one VM instruction, where the
  progress handler cannot interrupt them (instr, replace, trim with a character set,
  printf/format with a huge width), are replaced by linear-time equivalents that give the
  same results (see `sqlenv.env.guarded_functions`); LIKE/GLOB patterns are capped at 200 bytes.

What it does not guard: the disk of the temp folder. Sorts and temporary b-trees (ORDER BY, GROUP BY,
DISTINCT, materialised subqueries) that outgrow SQLite's page cache spill to temporary files, not to the
heap (`PRAGMA temp_store=FILE`: SQLite's default, stated so that a build defaulting to memory does not
change it). The files are unlinked as SQLite opens them, in SQLite's temp folder (`SQLITE_TMPDIR`, else
`TMPDIR`, else /var/tmp, /tmp), so nothing is left behind, and what a statement writes there is bounded
only by its time budget (a full disk fails the statement with SQLite's error text). Measured on SQLite
3.40 (2-core Intel Xeon; experiments/sandbox_temp_store_41/): a runaway GROUP BY over a 10^9-row join
stopped at its 2 s budget with the process 1.9 MB larger, where in-memory temp storage (`temp_store=MEMORY`,
this sandbox's setting before 6bad4de) grew it by 264 MB and stopped 0.21 s late, freeing it; and queries
that sort or group run faster (a Spider GROUP BY ... ORDER BY: 314 against 395 us; bench/bench_env.py).
A Sandbox is not meant for concurrent threads: calls are serialised by a lock, so they stay correct
but do not run in parallel; a statement's time budget starts once it holds the lock, so waiting for
another thread's statement never eats into it (it still delays it: give each session its own sandbox).

One connection per Sandbox, reused for every statement (Python's statement cache makes a
repeated query skip the prepare and the authorizer). Table names and table descriptions are
computed once and cached: the database is not expected to change while a sandbox is open.
Cells come back as sqlite3 returns them: int/float/str/None, and bytes for a BLOB. The step path
never looks at cell types; whatever shows a cell (the prompts renderer, the verifier and answer
formatter, `QueryResult.to_dict`) writes a BLOB as "<blob N bytes>".
"""

from __future__ import annotations

import marshal
import math
import os
import sqlite3
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from sqlenv.env.guarded_functions import GuardedFunctions
from sqlenv.types import QueryResult

# The deadline is checked every this many VM instructions. One check costs a Python call
# (~0.1 us) while 10,000 instructions take ~0.1-0.5 ms, so the checks cost ~0.1 % of a query;
# at 1000 they were ~1 % of bench_env's query ratio. Strings are capped at max_length, so even
# instructions that each run functions over ~100 KB strings overshoot a 0.5 s budget by
# under 1 ms (measured: 0.2-0.3 ms at 10,000, 0.1-0.2 ms at 1000).
_PROGRESS_STEPS = 10_000

_ALLOWED_PRAGMAS = frozenset(
    {"table_info", "table_xinfo", "foreign_key_list", "index_list", "index_info", "index_xinfo"}
)
# fts3_tokenizer hands out (and, if enabled, accepts) raw C pointers: no use to a query.
_DENIED_FUNCTIONS = frozenset({"load_extension", "fts3_tokenizer"})

# Eponymous virtual tables (json_each, pragma_table_info, ...) are set up on first use by a
# nested schema statement that the authorizer sees as an UPDATE of sqlite_master. Those we
# allow are set up once before the authorizer is installed, so it can deny every UPDATE.
_PREWARM_SQL = (
    "SELECT 1 FROM json_each('[]')",
    "SELECT 1 FROM json_tree('[]')",
    *(f"SELECT 1 FROM pragma_{name}('')" for name in sorted(_ALLOWED_PRAGMAS)),
)

_WHITESPACE_AND_SEMICOLONS = " \t\r\n\f\v;"


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 2.0  # wall clock per statement, enforced by the progress handler
    max_fetch_rows: int = 10_000  # rows materialised per statement (QueryResult.truncated beyond)
    # SQLITE_LIMIT_LENGTH: no string or blob bigger than this. 100 KB is 25x what the model is
    # shown of a whole result; a result row can hold one such value per column, so fetch chunks
    # are sized for that worst case and a smaller limit means fewer, larger chunks.
    max_length: int = 100_000
    max_sql_length: int = 100_000  # SQLITE_LIMIT_SQL_LENGTH
    max_fetch_bytes: int = 64_000_000  # approximate payload bytes materialised per statement


@dataclass(frozen=True)
class ColumnInfo:
    name: str
    type: str
    primary_key: bool


@dataclass(frozen=True)
class ForeignKey:
    column: str
    ref_table: str
    ref_column: str


@dataclass(frozen=True)
class TableInfo:
    name: str
    columns: tuple[ColumnInfo, ...]
    foreign_keys: tuple[ForeignKey, ...]
    row_count: int


class SandboxError(Exception):
    """The database itself is unusable (missing file, not an SQLite database)."""


_ACTION_WORDS = (
    "CREATE_INDEX CREATE_TABLE CREATE_TEMP_INDEX CREATE_TEMP_TABLE CREATE_TEMP_TRIGGER "
    "CREATE_TEMP_VIEW CREATE_TRIGGER CREATE_VIEW DELETE DROP_INDEX DROP_TABLE DROP_TEMP_INDEX "
    "DROP_TEMP_TABLE DROP_TEMP_TRIGGER DROP_TEMP_VIEW DROP_TRIGGER DROP_VIEW INSERT PRAGMA READ "
    "SELECT TRANSACTION UPDATE ATTACH DETACH ALTER_TABLE REINDEX ANALYZE CREATE_VTABLE "
    "DROP_VTABLE FUNCTION SAVEPOINT RECURSIVE"
).split()
# Authorizer action code -> name, for error messages ("INSERT on singer is not allowed").
_ACTION_NAMES = {
    getattr(sqlite3, "SQLITE_" + word): word for word in _ACTION_WORDS if hasattr(sqlite3, "SQLITE_" + word)
}


def _denial_reason(action: int, arg1: str | None, arg2: str | None) -> str:
    """A short explanation for the model of why the authorizer refused a statement."""
    name = _ACTION_NAMES.get(action, f"action {action}")
    if action == sqlite3.SQLITE_FUNCTION:
        return f"function {arg2}() is not allowed"
    if action == sqlite3.SQLITE_PRAGMA:
        allowed = ", ".join(sorted(_ALLOWED_PRAGMAS))
        return f"PRAGMA {arg1} is not allowed (only {allowed})"
    if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
        return "ATTACH, DETACH and VACUUM are not allowed"
    if action in (sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT):
        return "transaction control is not allowed (every statement runs on its own)"
    if action == sqlite3.SQLITE_UPDATE and arg1 in ("sqlite_master", "sqlite_temp_master"):
        return "this table-valued function is not available in the sandbox"
    target = f" on {arg1}" if arg1 else ""
    return f"{name.replace('_', ' ')}{target} is not allowed: the database is read-only"


def _empty_statement(sql: str) -> bool:
    """True when `sql` holds only whitespace, comments and semicolons (nothing to run)."""
    i, n = 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in _WHITESPACE_AND_SEMICOLONS:
            i += 1
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j + 1
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            i = n if j < 0 else j + 2
        else:
            return False
    return True


def _lenient_text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _close_quietly(cursor: sqlite3.Cursor) -> None:
    try:
        cursor.close()
    except sqlite3.Error:
        pass


_clock = time.perf_counter
_INF = math.inf


class Sandbox:
    """A read-only SQLite connection that runs one statement at a time within limits."""

    def __init__(self, db_path: "str | os.PathLike[str]", limits: SandboxLimits = SandboxLimits()):
        self.path = Path(db_path)
        self.limits = limits
        if not self.path.exists():
            raise SandboxError(f"database file not found: {self.path}")
        if not self.path.is_file():
            raise SandboxError(f"database path is not a file: {self.path}")
        # Quote the path: '?', '#', '%' or spaces in a file name would otherwise be read as
        # URI syntax and open (or create!) a different file.
        uri = "file:" + urllib.parse.quote(str(self.path.resolve())) + "?mode=ro"
        if _is_checkpointed_wal(self.path):
            # A read-only connection to a WAL-mode database creates -wal and -shm files next
            # to it (and leaves them). With no -wal file there is nothing beyond the main
            # file to read, so open it as immutable: no locks, no side files.
            uri += "&immutable=1"
        self._lock = threading.Lock()
        self._deadline = math.inf
        self._denied: str | None = None
        self._table_names: list[str] | None = None
        self._by_folded_name: dict[str, str] | None = None
        self._table_infos: dict[str, TableInfo] = {}
        self._functions = GuardedFunctions(limits.max_length)
        self._timeout_s = float(limits.timeout_s)
        self._first_chunk: dict[int, int] = {}  # column count -> rows in the first fetch
        try:
            # isolation_level=None: Python must never issue BEGIN on its own (the authorizer
            # would deny it). check_same_thread=False + our lock: usable from any one thread.
            self._conn = sqlite3.connect(
                uri, uri=True, isolation_level=None, check_same_thread=False, cached_statements=256
            )
        except sqlite3.Error as exc:
            raise SandboxError(f"cannot open SQLite database {self.path}: {exc}") from exc
        try:
            self._configure()
        except sqlite3.Error as exc:
            self._conn.close()
            raise SandboxError(f"not a usable SQLite database: {self.path}: {exc}") from exc

    # ------------------------------------------------------------------ set-up
    def _configure(self) -> None:
        conn = self._conn
        # Reading the schema fails here, with "file is not a database", for a non-SQLite file.
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        conn.execute("PRAGMA query_only = 1")
        conn.execute("PRAGMA temp_store = FILE")  # large sorts spill to unlinked temp files, not the heap
        for sql in _PREWARM_SQL:
            try:
                conn.execute(sql).fetchall()
            except sqlite3.Error:  # e.g. a build without JSON: those functions just stay off
                pass
        limits = self.limits
        for category, value in (
            (sqlite3.SQLITE_LIMIT_LENGTH, limits.max_length),
            (sqlite3.SQLITE_LIMIT_SQL_LENGTH, limits.max_sql_length),
            (sqlite3.SQLITE_LIMIT_ATTACHED, 0),  # second line of defence: ATTACH, VACUUM (INTO)
            (sqlite3.SQLITE_LIMIT_COLUMN, 500),
            (sqlite3.SQLITE_LIMIT_COMPOUND_SELECT, 50),
            (sqlite3.SQLITE_LIMIT_EXPR_DEPTH, 250),
            (sqlite3.SQLITE_LIMIT_FUNCTION_ARG, 100),
            (sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 200),
            (sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 100),
            (sqlite3.SQLITE_LIMIT_TRIGGER_DEPTH, 1),
            (sqlite3.SQLITE_LIMIT_VDBE_OP, 1_000_000),
        ):
            conn.setlimit(category, value)
        if hasattr(conn, "enable_load_extension"):  # absent when Python is built without it
            conn.enable_load_extension(False)
        self._functions.install(conn)
        conn.set_authorizer(self._make_authorizer())
        conn.set_progress_handler(self._make_progress_handler(), _PROGRESS_STEPS)

    def _make_authorizer(self):
        read, select = sqlite3.SQLITE_READ, sqlite3.SQLITE_SELECT
        function, pragma = sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_PRAGMA
        recursive = getattr(sqlite3, "SQLITE_RECURSIVE", 33)
        ok, deny = sqlite3.SQLITE_OK, sqlite3.SQLITE_DENY
        allowed_pragmas, denied_functions = _ALLOWED_PRAGMAS, _DENIED_FUNCTIONS

        def authorizer(action, arg1, arg2, db_name, source):
            # Deny by default: only the read actions below pass. READ/SELECT come first,
            # they are by far the most frequent calls while a statement is prepared.
            if action == read or action == select or action == recursive:
                return ok
            if action == function:
                if arg2 is not None and arg2.lower() in denied_functions:
                    self._denied = _denial_reason(action, arg1, arg2)
                    return deny
                return ok
            if action == pragma and arg1 is not None and arg1.lower() in allowed_pragmas:
                return ok  # these pragmas only report the schema, whatever their argument
            if self._denied is None:
                self._denied = _denial_reason(action, arg1, arg2)
            return deny

        return authorizer

    def _make_progress_handler(self):
        clock = _clock

        def progress() -> bool:
            return clock() > self._deadline  # non-zero aborts the statement ("interrupted")

        return progress

    # ------------------------------------------------------------------ execution
    def execute(self, sql: str) -> QueryResult:
        """Run one statement; errors, denials and timeouts come back as text, never raised."""
        if type(sql) is not str:
            return QueryResult(ok=False, error=f"SQL must be a string, got {type(sql).__name__}")
        # A trailing ';' (or several) is fine; Python would count ';;' as a second statement.
        text = sql.rstrip(_WHITESPACE_AND_SEMICOLONS)
        if not text:
            return QueryResult(ok=False, error="empty query: there is no SQL statement to run")
        with self._lock:
            # The budget starts when this statement runs, not while it waits for another thread's: a served
            # session's fast query must not time out behind another session's runaway one on the same sandbox.
            start = _clock()
            result = self._execute_locked(text, start)
        result.elapsed_ms = (_clock() - start) * 1000.0
        return result

    def _execute_locked(self, text: str, start: float) -> QueryResult:
        # The hot path (every agent query): the common small result costs one fetchmany.
        self._denied = self._functions.error = None
        self._deadline = start + self._timeout_s
        cursor = None
        try:
            cursor = self._conn.execute(text)
            description = cursor.description
            if description is None:
                if _empty_statement(text):
                    return QueryResult(ok=False, error="empty query: there is no SQL statement to run")
                return QueryResult(ok=True)
            size = self._first_chunk.get(len(description)) or self._chunk_rows(len(description), 0, 0)
            rows = cursor.fetchmany(size)
            if len(rows) < size:  # done: Python has already reset the statement
                return QueryResult(True, [d[0] for d in description], rows, False)
            rows, truncated = self._fetch_more(cursor, rows, len(description))
            if truncated:
                cursor.close()  # resets the half-read statement, which releases its read lock
            return QueryResult(True, [d[0] for d in description], rows, truncated)
        except Exception as exc:  # noqa: BLE001 - every failure becomes text for the model
            if cursor is not None:
                _close_quietly(cursor)
            return self._failure(exc, text, start)
        finally:
            self._deadline = _INF

    def _failure(self, exc: Exception, text: str, start: float) -> QueryResult:
        if isinstance(exc, MemoryError):
            return QueryResult(ok=False, error="out of memory while running the query")
        if not isinstance(exc, (sqlite3.Error, ValueError, OverflowError)):
            raise exc  # a bug in the sandbox, not a bad query: let it surface
        message = str(exc)
        if message == "interrupted" and _clock() >= self._deadline:
            return QueryResult(
                ok=False,
                timed_out=True,
                error=f"query timed out after {float(self.limits.timeout_s)} s "
                "(the statement was aborted; simplify it or add a LIMIT)",
            )
        if message.startswith("Could not decode to UTF-8") and self._conn.text_factory is str:
            return self._execute_lenient_text(text, start)
        if self._functions.error and "user-defined function" in message:
            message = self._functions.error
        elif self._denied and message.startswith(("not authorized", "authorization denied")):
            message = f"not authorized: {self._denied}"
        elif "one statement at a time" in message:
            message = "only one SQL statement can run at a time (found more than one)"
        return QueryResult(ok=False, error=message or type(exc).__name__)

    def _execute_lenient_text(self, text: str, start: float) -> QueryResult:
        # Some real databases (Spider has a few) hold text that is not valid UTF-8. Decoding
        # every cell in Python would slow every query, so only a failing query is rerun with
        # undecodable bytes replaced, within what is left of its time budget.
        self._conn.text_factory = _lenient_text
        try:
            return self._execute_locked(text, start)
        finally:
            self._conn.text_factory = str

    def _chunk_rows(self, n_columns: int, n_rows: int, used: int) -> int:
        """Rows to fetch next: no more than the row cap needs (plus one, to tell whether it
        truncated), and few enough that the chunk fits in the remaining byte budget even if
        every cell had the maximal length, so measuring each chunk bounds memory at about
        twice max_fetch_bytes whatever the query builds."""
        limits = self.limits
        worst_row = max(1, n_columns) * limits.max_length
        fits = (limits.max_fetch_bytes - used) // worst_row
        size = max(1, min(limits.max_fetch_rows + 1 - n_rows, fits))
        if n_rows == 0 and used == 0:
            self._first_chunk[n_columns] = size
        return size

    def _fetch_more(self, cursor: sqlite3.Cursor, rows: list, n_columns: int) -> tuple[list, bool]:
        """Continue a fetch whose first chunk was full: (rows, truncated)."""
        cap, budget = self.limits.max_fetch_rows, self.limits.max_fetch_bytes
        # Payload size: marshal is a fast C serialiser of exactly these value types.
        used = len(marshal.dumps(rows))
        while len(rows) <= cap and used <= budget:
            size = self._chunk_rows(n_columns, len(rows), used)
            chunk = cursor.fetchmany(size)
            rows.extend(chunk)
            if len(chunk) < size:
                return rows, False
            used += len(marshal.dumps(chunk))
        return rows[:cap], True

    # ------------------------------------------------------------------ schema helpers
    def _internal(self, sql: str) -> list[tuple]:
        """Run a sandbox-built statement (no time budget: schema reads are small)."""
        with self._lock:
            self._denied = None
            return self._conn.execute(sql).fetchall()

    def table_names(self) -> list[str]:
        """User tables (sqlite_% excluded), sorted by name case-insensitively."""
        if self._table_names is None:
            names = [
                row[0]
                for row in self._internal(
                    "SELECT name FROM sqlite_master WHERE type = 'table' "
                    "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
                )
            ]
            self._table_names = sorted(names, key=lambda s: (s.casefold(), s))
            self._by_folded_name = {n.casefold(): n for n in self._table_names}
        return list(self._table_names)

    def resolve_table(self, name: str) -> str | None:
        """The database's own spelling of a table name: case-insensitive, quotes and a
        `main.` prefix tolerated. None if there is no such table."""
        if not isinstance(name, str):
            return None
        if self._by_folded_name is None:
            self.table_names()
        assert self._by_folded_name is not None
        candidate = name.strip().rstrip(";").strip()
        for _ in range(2):
            if candidate.casefold().startswith("main."):
                candidate = candidate[5:].strip()
            if len(candidate) >= 2 and (candidate[0], candidate[-1]) in (
                ('"', '"'), ("'", "'"), ("`", "`"), ("[", "]")
            ):
                candidate = candidate[1:-1].strip()
        return self._by_folded_name.get(candidate.casefold())

    def table_info(self, table: str) -> TableInfo | None:
        """Columns (declared type, primary-key membership), foreign keys and row count."""
        name = self.resolve_table(table)
        if name is None:
            return None
        cached = self._table_infos.get(name)
        if cached is not None:
            return cached
        q = quote_identifier(name)
        columns = tuple(
            ColumnInfo(name=row[1], type=row[2] or "", primary_key=bool(row[5]))
            for row in self._internal(f"PRAGMA table_info({q})")
        )
        # SQLite numbers foreign keys from the last declared one; list them as declared.
        fk_rows = sorted(self._internal(f"PRAGMA foreign_key_list({q})"), key=lambda r: (-r[0], r[1]))
        foreign_keys = []
        for _id, seq, ref_table, from_col, to_col, *_ in fk_rows:
            resolved = self.resolve_table(ref_table) or ref_table
            if to_col is None:  # "REFERENCES parent" without columns means the parent's key
                to_col = self._primary_key_column(resolved, seq)
            foreign_keys.append(ForeignKey(column=from_col, ref_table=resolved, ref_column=to_col))
        row_count = self._internal(f"SELECT count(*) FROM {q}")[0][0]
        info = TableInfo(
            name=name, columns=columns, foreign_keys=tuple(foreign_keys), row_count=int(row_count)
        )
        self._table_infos[name] = info
        return info

    def _primary_key_column(self, table: str, position: int) -> str:
        if self.resolve_table(table) is None:
            return ""
        pk = sorted(
            (row[5], row[1])
            for row in self._internal(f"PRAGMA table_info({quote_identifier(table)})")
            if row[5]
        )
        return pk[position][1] if position < len(pk) else ""

    def sample(self, table: str, n: int = 3) -> QueryResult:
        """The first `n` rows of a table, through the same limits as any query."""
        name = self.resolve_table(table)
        if name is None:
            return QueryResult(ok=False, error=f"no such table: {table}")
        return self.execute(f"SELECT * FROM {quote_identifier(name)} LIMIT {max(0, int(n))}")

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        with self._lock:
            self._conn.close()
            self._functions.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _is_checkpointed_wal(path: Path) -> bool:
    """True for a WAL-mode database file (header bytes 18-19 == 2) without a -wal file."""
    try:
        with open(path, "rb") as f:
            header = f.read(20)
    except OSError:
        return False
    is_wal = header[:16] == b"SQLite format 3\x00" and header[18:20] == b"\x02\x02"
    return is_wal and not Path(f"{path}-wal").exists()


def quote_identifier(name: str) -> str:
    """`name` as an SQLite identifier in double quotes (inner quotes doubled): safe for any table or column name."""
    return '"' + name.replace('"', '""') + '"'
