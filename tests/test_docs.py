"""Guards the documentation's house rules (pipeline.docs): the README is a front door of at most 250 lines, and no
user-facing page names a run, a session or issue number, or a commit hash outside a table."""

from __future__ import annotations

from pathlib import Path

from pipeline.docs import README_MAX_LINES, breaches, check, investigation_ids

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_keep_the_house_rules():
    found = check(ROOT)
    assert not found, "\n".join(map(str, found))
    assert len((ROOT / "README.md").read_text().splitlines()) <= README_MAX_LINES


def test_every_investigation_is_in_the_index():
    index = (ROOT / "experiments" / "README.md").read_text()
    ids = investigation_ids(ROOT)
    assert len(ids) >= 30
    rows = [line for line in index.splitlines() if line.startswith("| [")]
    for name in ids:
        (row,) = [r for r in rows if r.startswith(f"| [{name}]({name}/)")]
        outcome = row.rstrip(" |").rsplit("|", 1)[1].strip()
        assert outcome.split()[0].rstrip(":;,") in {"adopted", "default", "not", "superseded", "record"}, row
        assert (ROOT / "experiments" / name / "README.md").is_file(), name


def test_breaches_are_found_in_prose_and_not_in_tables_or_link_targets():
    ids = {"make_run_39", "levers_37"}
    page = "\n".join([
        "The headline moved in make_run_39 by five.",            # 1: a run name in prose
        "As issue 15 asked, and session 42 measured.",           # 2: issue / session numbers
        "Fixed in 4154fad last week.",                           # 3: a commit hash
        "| make_run_39 | 8088799 | session 42 |",                # 4: a table row: allowed
        "See the [evidence](../experiments/make_run_39/).",      # 5: a link target: allowed
        "The model e8b06319b803 in prose.",                      # 6: hash-like fingerprint in prose: flagged
        "Plain words, 2048 tokens, deadbeef and cafe.",          # 7: no digit+letter hex of 7+: fine
    ])  # fmt: skip
    lines = sorted({b.line for b in breaches(page, "x.md", ids)})
    assert lines == [1, 2, 3, 6]


def test_the_previous_readme_fails_the_rules(tmp_path):
    """The lab-notebook README this check was written against (1,298 lines) breaks it."""
    import subprocess

    old = subprocess.run(["git", "show", "20e260d:README.md"], cwd=ROOT, capture_output=True, text=True)
    if old.returncode != 0:  # a shallow clone without that commit
        import pytest

        pytest.skip("the previous README is not in this clone's history")
    (tmp_path / "README.md").write_text(old.stdout)
    (tmp_path / "experiments").mkdir()
    for name in investigation_ids(ROOT):
        (tmp_path / "experiments" / name).mkdir()
    found = check(tmp_path)
    assert any("more than 250" in b.what for b in found) and len(found) > 50
