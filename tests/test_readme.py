"""Guards the README's results: its block is generated from the committed report (reports/report.md), and the
committed reference run is complete (dvc.lock and every metrics file the report's results come from)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.readme import END, START, current_block, results_block, updated

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "reports" / "report.md"


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


def test_block_generation_round_trip():
    report = ("# sqlenv report\n\n| Date | 2026-12-01 |\n| Git commit | abc |\n\n## Headline\n\n**x vs y**: 1 vs 2.\n\n"
              "## What this report covers\n\n- nothing\n\n## Accuracy and behaviour by policy\n\n| a |\n|---|\n| 1 |\n\n"
              "![Accuracy by policy](plots/accuracy.png)\n\n## Paired comparisons\n\n### n50\n\n| p |\n\n## Accuracy by hardness\n")
    block = results_block(report)
    assert "**x vs y**: 1 vs 2." in block and "| 1 |" in block and "\n##### n50\n" in block
    assert "plots/accuracy.png" not in block and "nothing" not in block and "commit abc" in block
    assert "Cost per stage" not in block  # a report from before the section: the block leaves it out
    costly = report + "\n## Cost per stage\n\n| stage | wall |\n|---|---|\n| sft | 600 s |\n\n## Transcripts\n"
    assert "#### Cost per stage\n\n| stage | wall |" in results_block(costly) and "Transcripts" not in results_block(costly)
    readme = f"intro\n{START}\nold\n{END}\ntail\n"
    new = updated(readme, report)
    assert current_block(new) == block and new.startswith("intro\n") and new.endswith(f"{END}\ntail\n")
    assert updated(f"intro\n{START}\n{END}\n", report) == f"intro\n{START}\n{block}\n{END}\n"  # an empty block
    with pytest.raises(ValueError, match="no section"):
        results_block("# empty\n")


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
    assert f"| n200 | sft | 200 | {100 * sft['metrics']['accuracy']:.1f} % [" in block  # the committed result's row
    assert "#### Accuracy by hardness" not in block
    assert "#### Cost per stage" in block


def test_readme_comparable_numbers_equal_the_committed_result():
    """The README's base_sql row is read from the committed `sqlenv eval --protocol text_to_sql` result."""
    doc = json.loads((ROOT / "experiments/spider_comparable/base_sql_spider_dev/metrics.json").read_text())
    m = doc["metrics"]
    assert doc["settings"]["protocol"] == "text_to_sql" and m["metric"] == "ex" and m["n"] == doc["n"]
    row = f"| {m['n']} | {100 * m['accuracy']:.1f} % [{100 * m['accuracy_low']:.1f}, {100 * m['accuracy_high']:.1f}] |"
    (line,) = [x for x in (ROOT / "README.md").read_text().splitlines() if x.startswith("| sqlenv `base_sql`")]
    assert row in line, (row, line)


def test_readme_agent_rows_equal_the_committed_results():
    """Each committed agent result of `sqlenv eval --metric ex` (experiments/spider_comparable/sft_spider_heldout_*) has its
    README row with the EX and value accuracy read from its metrics.json, and states its mode."""
    folders = sorted((ROOT / "experiments/spider_comparable").glob("sft_spider_heldout_*_ex"))
    assert folders, "no committed agent result"
    lines = (ROOT / "README.md").read_text().splitlines()
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
    assert sentence in (ROOT / "README.md").read_text(), sentence
