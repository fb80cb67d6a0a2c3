"""sqlenv as a service: the SQL environment as an OpenEnv environment (`sqlenv serve`), its client and a TRL adapter
that trains against a running server. Needs the `serve` extra (`pip install -e ".[serve]"`: openenv and its web
stack); nothing else in sqlenv imports this package.

- `environment`: `SQLServeEnvironment`, one session's episodes over the server's questions (same adapter, tools and
  rewards as training), with OpenEnv's MCP actions and task API.
- `app`: the FastAPI app (OpenEnv's `create_fastapi_app`, production mode) and `serve`, which runs it with uvicorn.
- `sessions`: the `--max-sessions` slots shared by socket and page sessions, and the idle clock that closes a session
  silent past `--session-timeout` and tells its client `SESSION_EXPIRED` (an ASGI middleware around OpenEnv's app).
- `web`: the page for people at `/web`, one counted session per browser session.
- `client`: `SQLEnvClient` (OpenEnv's `EnvClient`, async with `.sync()`) and `RemoteSQLAgentEnv`, the four tools for
  `GRPOTrainer(environment_factory=...)` played on a server.
"""

README = """# sqlenv

Answer a natural-language question about a SQLite database. The table names are shown; explore them with
`describe(table_name)` and `sample(table_name)`, run read-only SQL with `query(sql)`, and end the episode with
`answer(value)`: the values copied from a query result (one column as `a, b, c`; several columns one row per line,
` | ` between values). The episode ends at `answer` or after 15 calls; its reward is correctness (1) plus small
shaping terms, and a wrong answer never scores below no answer.

Start an episode with `reset(split=..., index=...)`, `reset(question_id=...)` or `reset(seed=...)`; list the tasks
with the task API. Observations never contain the gold SQL or answer; the verdict comes when the episode ends.
"""
