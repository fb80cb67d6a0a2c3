"""Guards the README's results: its block is generated from the committed report (reports/report.md), the committed
reference run is complete (dvc.lock and every metrics file the report's results come from), and the Spider-comparable
numbers in docs/results.md are read from their committed records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.readme import END, START, current_block, results_block, updated

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "reports" / "report.md"
RESULTS_PAGE = ROOT / "docs" / "results.md"  # the Spider-comparable numbers


def test_readme_results_equal_the_committed_report():
    assert REPORT.is_file(), "the reference run's reports/report.md is not committed"
    assert current_block((ROOT / "README.md").read_text()) == results_block(REPORT.read_text())


def test_the_reference_run_is_committed():
    lock = (ROOT / "dvc.lock").read_text()
    for stage in ("prepare", "sft", "grpo_phase2", "evaluate@sft_n200", "evaluate@grpo_phase2_n200", "report"):
        assert f"\n  {stage}:" in lock, f"dvc.lock has no {stage} entry"
    for name in ("sft_n200", "grpo_phase2_n200", "base_n50"):
        doc = json.loads((ROOT / "reports/eval" / name / "metrics.json").read_text())
        assert doc["metrics"]["n"] == doc["n"] and doc["model"]["fingerprint"]
        assert f"| {doc['set']} | {doc['policy']} | {doc['n']} | {100 * doc['metrics']['accuracy']:.1f} %" in REPORT.read_text()


REPORT_FIXTURE = """# sqlenv report

|  |  |
|---|---|
| Date | 2026-12-01 |
| Git commit | abc |

## Headline (schema hidden)

**x vs y**: 1 vs 2.

It detects ±6.0 points.

## What this report covers

- nothing

## Accuracy and behaviour by policy (schema hidden)

| set | policy | n | accuracy [Wilson 95 %] | parser | mean steps | answered | mean tokens |
|---|---|---|---|---|---|---|---|
| n50 | sft | 50 | 52.0 % [38.5 %, 65.2 %] | strict | 5.02 | 72.0 % | 166 |

![Accuracy by policy](plots/accuracy.png)

## Paired comparisons (schema hidden)

### n50

| a | b | p |
|---|---|---|
| x | y | 0.5 |

### n200

| a | b | p |
|---|---|---|
| x | y | 0.8 |

On n200: no pair differs.

## Accuracy by hardness

## Cost per stage

| stage | wall |
"""


def test_block_generation_round_trip():
    block = results_block(REPORT_FIXTURE)
    assert "**x vs y**: 1 vs 2." in block and "It detects ±6.0 points." in block  # the whole headline section
    assert "| n50 | sft | 52.0 % [38.5 %, 65.2 %] | 5.02 | 72.0 % |" in block  # the README's columns only
    assert "strict" not in block and "166" not in block
    assert "| x | y | 0.8 |" in block and "On n200: no pair differs." in block and "| x | y | 0.5 |" not in block
    assert "plots/accuracy.png" not in block and "nothing" not in block and "Cost per stage" not in block
    assert "2026-12-01" in block and "abc" not in block  # a commit hash stays out of the README's prose
    readme = f"intro\n{START}\nold\n{END}\ntail\n"
    new = updated(readme, REPORT_FIXTURE)
    assert current_block(new) == block and new.startswith("intro\n") and new.endswith(f"{END}\ntail\n")
    assert updated(f"intro\n{START}\n{END}\n", REPORT_FIXTURE) == f"intro\n{START}\n{block}\n{END}\n"  # empty block
    with pytest.raises(ValueError, match="no section"):
        results_block("# empty\n")
    with pytest.raises(ValueError, match="lacks the column"):
        results_block(REPORT_FIXTURE.replace("| answered |", "| replied |"))


def test_the_block_reads_a_report_rendered_today():
    """Section headings now carry the environment mode: the README block is still read from them."""
    from sqlenv.report.markdown import render_report
    from sqlenv.report.results import load_inputs

    report = REPORT.read_text()
    inputs = load_inputs(ROOT / "reports/eval", {c: ROOT / "nowhere.csv" for c in ("sft", "grpo_phase1", "grpo_phase2")})
    fresh = render_report(inputs, {"Date": "today", "Git commit": "abc"}, {})
    assert "## Headline (schema hidden (table names only), value answers" in fresh
    block = results_block(fresh)
    headline = report.split("\n## Headline", 1)[1].split("\n", 1)[1].strip().splitlines()[0]  # with or without the mode
    assert headline.startswith("**grpo_phase2 vs sft on n200**") and headline in block
    sft = json.loads((ROOT / "reports/eval/sft_n200/metrics.json").read_text())
    assert f"| n200 | sft | {100 * sft['metrics']['accuracy']:.1f} % [" in block  # the committed result's row
    assert "with 80 % power" in block  # what the headline could detect
    assert "#### Accuracy by hardness" not in block


def test_readme_comparable_numbers_equal_the_committed_result():
    """docs/results.md's base_sql row is read from the committed `sqlenv eval --protocol text_to_sql` result."""
    doc = json.loads((ROOT / "experiments/spider_comparable/base_sql_spider_dev/metrics.json").read_text())
    m = doc["metrics"]
    assert doc["settings"]["protocol"] == "text_to_sql" and m["metric"] == "ex" and m["n"] == doc["n"]
    row = f"| {m['n']} | {100 * m['accuracy']:.1f} % [{100 * m['accuracy_low']:.1f}, {100 * m['accuracy_high']:.1f}] |"
    (line,) = [x for x in RESULTS_PAGE.read_text().splitlines() if x.startswith("| sqlenv `base_sql`")]
    assert row in line, (row, line)


def test_readme_agent_rows_equal_the_committed_results():
    """Each committed agent result of `sqlenv eval --metric ex` (experiments/spider_comparable/sft_spider_heldout_*) has its
    row in docs/results.md with the EX and value accuracy read from its metrics.json, and states its mode."""
    folders = sorted((ROOT / "experiments/spider_comparable").glob("sft_spider_heldout_*_ex"))
    assert folders, "no committed agent result"
    lines = RESULTS_PAGE.read_text().splitlines()
    pct = lambda m, k: f"{100 * m[k]:.1f} % [{100 * m[k + '_low']:.1f}, {100 * m[k + '_high']:.1f}]"  # noqa: E731
    for folder in folders:
        doc = json.loads((folder / "metrics.json").read_text())
        m = doc["metrics"]
        assert doc["env"]["answer"] == "sql" and m["n"] == doc["n"]
        (line,) = [x for x in lines if x.startswith(f"| sqlenv agent `{folder.name}`")]
        assert f"schema {doc['env']['schema']}" in line and f"| {m['n']} | {pct(m, 'accuracy')} |" in line, line
        assert f"value {pct(m, 'value_accuracy')}" in line, line


def test_readme_schema_mode_comparison_is_computed_from_the_committed_episodes():
    from sqlenv.eval.stats import mcnemar_exact, paired_difference

    def verdicts(mode):
        path = ROOT / f"experiments/spider_comparable/sft_spider_heldout_{mode}_ex/samples.jsonl"
        return {r["question_id"]: r["correct"] for r in map(json.loads, path.read_text().splitlines())}

    full, hidden = verdicts("full"), verdicts("hidden")
    assert full.keys() == hidden.keys()  # the same held-out questions: a paired comparison
    ids = sorted(full)
    a, b = [full[i] for i in ids], [hidden[i] for i in ids]
    only_b, only_a, p = mcnemar_exact(a, b)
    d = paired_difference(a, b, 0.05)
    sentence = (f"{100 * d['difference']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}] points, {only_a} questions "
                f"right only with\nit, {only_b} only without, exact McNemar p = {p:.4f}")
    assert sentence in RESULTS_PAGE.read_text(), sentence


def test_the_committed_report_is_what_todays_code_renders_from_the_committed_results(tmp_path):
    """`make reference`'s check: reports/report.md equals what the report code renders from the committed results
    (its header kept), and README's block equals it. The questions' domains come from the prepare stage, run here
    on the committed params (~15 s) in a copy, so the check needs no model and no trained output."""
    import os
    import shutil
    import subprocess
    import sys

    for name in ("params.yaml", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "reports", tmp_path / "reports")
    env = {**os.environ, "DVC_ROOT": str(tmp_path), "PYTHONPATH": str(ROOT),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}  # fmt: skip
    prep = subprocess.run([sys.executable, "-m", "stages.prepare"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert prep.returncode == 0, prep.stderr[-2000:]
    shutil.copy(ROOT / "reports/prepare/metrics.json", tmp_path / "reports/prepare/metrics.json")  # the committed one
    check = subprocess.run([sys.executable, "-m", "pipeline.reference", "--check"], cwd=tmp_path, env=env,
                           capture_output=True, text=True)  # fmt: skip
    assert check.returncode == 0, check.stderr[-2000:]
    edited = REPORT.read_text().replace("exact McNemar p = ", "exact McNemar p ≈ ", 1)  # a hand edit of the headline
    assert edited != REPORT.read_text()
    (tmp_path / "reports/report.md").write_text(edited)
    stale = subprocess.run([sys.executable, "-m", "pipeline.reference", "--check"], cwd=tmp_path, env=env,
                           capture_output=True, text=True)  # fmt: skip
    assert stale.returncode == 1 and "reports/report.md differs" in stale.stderr


def test_the_committed_header_is_kept():
    from pipeline.reference import committed_header

    header = committed_header(REPORT.read_text())
    assert header["Git commit"] and header["Date"].startswith("2026-") and "Rendered" in header
