"""The hub package's uvicorn entry (`server.app:app`, as openenv.yaml says): sqlenv's server app over $SQLENV_DATA.

The image builds the synthetic world into /app/data at build time (the pipeline's prepare stage: no download);
`SQLENV_DATA` may point at any prepared or Spider-format folder instead. `ENABLE_WEB_INTERFACE=false` drops the page.
Outside the image, `sqlenv serve` is the same server with flags.
"""

import os

from sqlenv.serve.app import build_app
from sqlenv.serve.environment import QuestionSet

app = build_app(
    QuestionSet.load(os.environ.get("SQLENV_DATA", "data")),
    max_sessions=int(os.environ.get("SQLENV_MAX_SESSIONS", "8")),
    web=os.environ.get("ENABLE_WEB_INTERFACE", "true").lower() in ("1", "true", "yes"),
)
