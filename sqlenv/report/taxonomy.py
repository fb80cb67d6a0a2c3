"""The report's failure taxonomy: why each policy's episodes ended as they did (`sqlenv.failures`), one row per
policy and question set, counted from the episodes themselves (`samples.jsonl`), so every evaluation — the
held-out sets and the transfer set alike — is read the same way."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlenv.failures import HABITS, OUTCOMES, diagnose, summarise
from sqlenv.report.markdown import md_table
from sqlenv.types import EpisodeRecord

HEADERS = ("n", *(o.replace("_", " ") for o in OUTCOMES), *(h.replace("_", " ") for h in HABITS))
LEGEND = ("Outcomes (one per episode) and habits (any number) are read off each episode's record "
          "(`sqlenv/failures.py`): unanswered by the step budget, the token budget or otherwise (the model stopped "
          "calling tools); a loop repeats a call unchanged (its result could only repeat), a repeated failure sends "
          "a call that failed again unchanged; a missing name met a table or column that does not exist; empty "
          "answered: the answer followed a query that returned no rows; gold in last result: a wrong answer whose "
          "last query result showed every gold value (read where the episode was recorded with its gold rows; "
          "– where none was).\n")  # fmt: skip


def diagnoses(records: Iterable[EpisodeRecord]) -> dict[str, Any]:
    """The taxonomy's counts over `records`: each record's own diagnosis where it carries one (written with the
    gold rows at hand), else one read off its transcript now."""
    return summarise(r.failure if getattr(r, "failure", None) else diagnose(r) for r in records)


def row(counts: dict[str, Any]) -> list[Any]:
    habits = ("–" if counts["habits"][h] is None else counts["habits"][h] for h in HABITS)  # –: not read
    return [counts["n"], *(counts["outcomes"][o] for o in OUTCOMES), *habits]


def taxonomy_section(results: Sequence[tuple[str, str, Sequence[EpisodeRecord]]]) -> list[str]:
    """Markdown lines: one row per (policy, set, episodes) given, the legend after the table."""
    if not results:
        return []
    rows = [[policy, set_name, *row(diagnoses(records))] for policy, set_name, records in results]
    return [md_table(["policy", "set", *HEADERS], rows), LEGEND]
