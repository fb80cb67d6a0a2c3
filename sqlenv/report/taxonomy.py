"""The report's failure taxonomy: why each policy's episodes ended as they did (`sqlenv.failures`), one row per
policy and question set, counted from the episodes themselves (`samples.jsonl`), so every evaluation — the
held-out sets and the transfer set alike — is read the same way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlenv.failures import HABITS, OUTCOMES, summarise_records
from sqlenv.report.markdown import md_table
from sqlenv.report.results import EvalResult

HEADERS = ("n", *(o.replace("_", " ") for o in OUTCOMES), *(h.replace("_", " ") for h in HABITS))
LEGEND = ("Outcomes (one per episode) and habits (any number) are read off each episode's record "
          "(`sqlenv/failures.py`): unanswered by the step budget, the token budget or otherwise (the model stopped "
          "calling tools); a loop repeats a call unchanged (its result could only repeat), a repeated failure sends "
          "a call that failed again unchanged; a missing name met a table or column that does not exist; empty "
          "answered: the answer followed a query that returned no rows; gold in last result: a wrong answer whose "
          "last query result showed every gold value (read where the episode was recorded with its gold rows; "
          "– where none was).\n")  # fmt: skip


def row(counts: dict[str, Any]) -> list[Any]:
    habits = ("–" if counts["habits"][h] is None else counts["habits"][h] for h in HABITS)  # –: not read
    return [counts["n"], *(counts["outcomes"][o] for o in OUTCOMES), *habits]


def taxonomy_section(results: Sequence[EvalResult]) -> list[str]:
    """Markdown lines: one row per evaluation that kept its episodes, the legend after the table."""
    rows = [[r.policy, r.set, *row(summarise_records(r.records))] for r in results if r.records]
    if not rows:
        return []
    return [md_table(["policy", "set", *HEADERS], rows), LEGEND]
