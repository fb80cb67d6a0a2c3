"""Guards the documentation's house rules (pipeline.docs): the README is a front door of at most 250 lines, no
user-facing page names a run, a session or issue number, or a commit hash outside a table, every repository path a
page names exists, and the README's `make run` times are docs/performance.md's."""

from __future__ import annotations

from pathlib import Path

from pipeline.docs import (
    NOTEBOOK_FOLDERS,
    README_MAX_LINES,
    RUN_TIMES_HEADER,
    breaches,
    check,
    investigation_ids,
    path_breaches,
    run_time_breaches,
    slug,
    yaml_comment_breaches,
)

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


def test_every_notebook_folder_is_linked_from_the_index():
    index = (ROOT / "experiments" / "README.md").read_text()
    for name in NOTEBOOK_FOLDERS:
        assert (ROOT / "experiments" / name).is_dir(), name
        assert f"]({name}/)" in index, name


def _repo(tmp_path):
    """A small repository: a source file with one test, two doc pages, an investigation."""
    (tmp_path / "sqlenv" / "env").mkdir(parents=True)
    (tmp_path / "sqlenv" / "env" / "rewards.py").write_text("X = 1\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_one():\n    pass\n\n\ndef test_two():\n    pass\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "method.md").write_text("# Method\n\n## The verifier\n\ntext\n")
    (tmp_path / "experiments" / "run_1").mkdir(parents=True)
    return tmp_path


def test_a_page_naming_a_missing_path_is_a_breach(tmp_path):
    root = _repo(tmp_path)
    page = "\n".join([
        "Rewards: `sqlenv/env/rewards.py` and [method](method.md#the-verifier).",       # 1: exist
        "Rewards: `sqlenv/rewards.py`.",                                                # 2: a moved file
        "See [the records](../experiments/run_9/).",                                    # 3: a missing folder
        "See [the verifier](method.md#the-checker).",                                   # 4: a missing heading
        "Guarded by `tests/test_a.py::test_one[x-1]`, `::test_two` and `::test_three`.",  # 5: the third is missing
        "Per stage `reports/<stage>/metrics.json`, `bench/results/run{1,2}.json`, `models/sft`.",  # 6: skipped
        "Spider from `../shared/spider`, [OpenEnv](https://github.com/x/y), `sqlenv.env.rewards`.",  # 7: skipped
        "```bash",
        "python bench/nothing.py --out sqlenv/nothing.json",                           # 9: a command: skipped
        "```",
        "The [records](../experiments/run_1/) and [top](#the-checker).",               # 11: the anchor is missing
        "Use `tests/test_a.py::test_zero`.",                                            # 12: a missing test
    ])  # fmt: skip
    found = path_breaches(page, "docs/x.md", root)
    assert sorted(b.line for b in found) == [2, 3, 4, 5, 11, 12], "\n".join(map(str, found))
    assert "sqlenv/rewards.py" in str([b for b in found if b.line == 2][0])


def test_slugs_are_githubs():
    assert slug("Library-private names, and what guards them") == "library-private-names-and-what-guards-them"
    assert slug("The `sqlenv` command") == "the-sqlenv-command"
    assert slug("dtype: measured, not assumed") == "dtype-measured-not-assumed"


def test_a_yaml_comment_naming_a_missing_path_is_a_breach(tmp_path):
    root = _repo(tmp_path)
    (root / "params.yaml").write_text("rewards:   # invariants: sqlenv/rewards.py\nx: 1  # sqlenv/env/rewards.py\n")
    found = yaml_comment_breaches(root)
    assert [(b.path, b.line) for b in found] == [("params.yaml", 1)]


TIMES = [
    RUN_TIMES_HEADER,
    "|---|---|---|",
    "| Intel Xeon with AMX | bfloat16 | 55 min |",
    "| AMD EPYC with AVX2 only | float32 | about 2 h 50 min |",
]


def test_readme_run_times_must_equal_the_performance_pages():
    performance = "# Performance\n\n" + "\n".join(TIMES) + "\n"
    same = "# x\n\nIt takes 55 min on a Xeon, about 2 h 50 min on an AVX2-only CPU.\n\n## Quick start\n\n" + \
        "\n".join(TIMES) + "\n"  # fmt: skip
    assert run_time_breaches(same, performance) == []
    changed = same.replace("| 55 min |", "| 50 min |")
    assert [b.what for b in run_time_breaches(changed, performance)][0].startswith("run-times row differs")
    fewer = same.replace(TIMES[3] + "\n", "")
    assert run_time_breaches(fewer, performance)
    missing = same.replace(RUN_TIMES_HEADER, "| CPU | dtype | time |")
    assert "no table headed" in run_time_breaches(missing, performance)[0].what
    assert "no table headed" in run_time_breaches(same, "# Performance\n")[0].what
    # The opening states a time the table does not: the README of old ("about an hour" beside 2 h 50 min).
    hour = same.replace("It takes 55 min", "It takes about an hour")
    (breach,) = run_time_breaches(hour, performance)
    assert breach.line == 3 and "'about an hour'" in breach.what
    # The qualifier counts: the table's "over an hour" does not back "about an hour".
    over = performance.replace("| 55 min |", "| over an hour |")
    assert [b.what for b in run_time_breaches(hour.replace("| 55 min |", "| over an hour |"), over)] == [
        "duration 'about an hour' is not in docs/performance.md's run-times table"]
    assert run_time_breaches(hour.replace("| 55 min |", "| over an hour |").replace("about an", "over an"), over) == []
    # Durations below the opening section (a test suite's time, a stage's) are not run times.
    later = same + "\n`make test` takes about 20 min.\n"
    assert run_time_breaches(later, performance) == []


def test_the_previous_readme_states_a_time_the_performance_table_does_not():
    """The README this check was written against said "about an hour" beside a table of 2 h 50 min."""
    import subprocess

    import pytest

    old = subprocess.run(["git", "show", "d8116fb:README.md"], cwd=ROOT, capture_output=True, text=True)
    if old.returncode != 0:
        pytest.skip("the previous README is not in this clone's history")
    found = run_time_breaches(old.stdout, (ROOT / "docs" / "performance.md").read_text())
    assert any("no table headed" in b.what for b in found)
    assert any(b.line == 8 and "'about an hour'" in b.what for b in found), "\n".join(map(str, found))
