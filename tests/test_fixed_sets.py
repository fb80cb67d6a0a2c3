"""The committed fixed evaluation sets are the bytes they were made as (a later world must not rewrite them)."""

import hashlib
import json
from pathlib import Path

import pytest

FIXED = Path(__file__).resolve().parents[1] / "configs" / "fixed"
SETS = sorted(p for p in FIXED.iterdir() if (p / "SHA256SUMS").exists())


def test_there_is_a_fixed_set():
    assert [p.name for p in SETS] == ["synthetic_heldout_n200_v1"]


@pytest.mark.parametrize("folder", SETS, ids=lambda p: p.name)
def test_fixed_set_files_match_their_sums(folder):
    listed = {}
    for line in (folder / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        listed[name] = digest
    on_disk = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()} - {"SHA256SUMS", "README.md"}
    assert on_disk == set(listed)
    for name, digest in listed.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
    questions = [json.loads(line) for line in (folder / "questions.jsonl").read_text().splitlines()]
    assert len(questions) == 200 and {q["db_id"] for q in questions} == {p.parent.name for p in folder.glob("databases/*/*.sqlite")}
