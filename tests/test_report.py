"""Guards the report: tables, intervals, paired p-values, transcript picks, plots, missing inputs and the stage."""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from sqlenv.eval.evaluation import episode_metrics
from sqlenv.report.markdown import (
    interval_half_width,
    pick_examples,
    render_report,
    transcript_lines,
    transcript_pair,
)
from sqlenv.report.plots import CSV_FILES, write_plots
from sqlenv.report.results import comparisons_table, curve_summary, load_inputs, results_table
from sqlenv.types import EpisodeRecord

REPO = Path(__file__).resolve().parent.parent
HARDNESS = ("easy", "medium", "hard", "extra")
# Which of the 20 n50 questions q00..q19 each policy gets right (see the expected p-values below).
CORRECT_N50 = {
    "random": set(),
    "base": {0, 1, 2, 3},  # 4/20
    "sft": set(range(12)),  # 12/20: 8 more than base, none fewer -> McNemar p = 2 * 0.5**8
    "grpo_phase1": set(range(2, 14)),  # 12/20: vs base 10 vs 2 discordant -> p = 158/4096; vs sft 2 vs 2 -> p = 1
}
CORRECT_N200 = {"random": set(), "base": set(range(10))}  # 10/40; no trained policy on n200


def call(name, **arguments):
    return {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def episode(policy, i, correct):
    qid = f"q{i:02d}"
    answer = "4" if correct else "5"
    describe = "Table orders (4 rows)\nColumns:\n  id INTEGER PRIMARY KEY\n  customer_id INTEGER\n  day TEXT\n  total REAL"
    messages = [
        {"role": "system", "content": "You answer questions about a SQLite database by calling tools."},
        {"role": "user", "content": f"How many orders are there ({qid})?\n\nTables in the database: orders."},
        {"role": "assistant", "content": "", "tool_calls": [call("describe", table_name="orders")]},
        {"role": "tool", "name": "describe", "content": describe},
        {"role": "assistant", "content": "", "tool_calls": [call("query", sql=f"SELECT count(*) FROM orders -- {policy}")]},
        {"role": "tool", "name": "query", "content": "count(*)\n" + "x" * 300 + "\n(1 row)"},
        {"role": "assistant", "content": "", "tool_calls": [call("answer", value=answer)]},
        {"role": "tool", "name": "answer", "content": "Answer submitted."},
        {"role": "assistant", "content": "I have submitted the answer."},
    ]
    return EpisodeRecord(
        question_id=qid, db_id="shop", hardness=HARDNESS[i % 4], messages=messages, answered=True, correct=correct,
        verdict_reason="match" if correct else "different rows", answer=answer, steps=3 if correct else 5 + i % 3,
        reward=1.0 if correct else -0.05, reward_components={"correctness": float(correct)}, tokens=100 + i,
    )  # fmt: skip


def live_model(root: Path, policy: str) -> str | None:
    """A stand-in model folder for the policy (its config.json only) and its fingerprint; None for random."""
    from sqlenv.eval.policies import POLICIES
    from sqlenv.provenance import model_fingerprint

    name = POLICIES[policy].model
    if name is None:
        return None
    folder = root / "models" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model": name}))
    return model_fingerprint(folder)


def write_questions(root: Path, set_name: str, n: int) -> None:
    folder = root / "data/questions"
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"q{i:02d}", "db_id": "shop", "question": "?", "gold_sql": "SELECT 1", "hardness": HARDNESS[i % 4]}
            for i in range(n)]  # fmt: skip
    (folder / f"{set_name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_eval(root: Path, policy: str, set_name: str, n: int, correct: set, samples=True, fingerprint="live",
               env=None):
    folder = root / "reports/eval" / f"{policy}_{set_name}"
    folder.mkdir(parents=True)
    records = [episode(policy, i, i in correct) for i in range(n)]
    fingerprint = live_model(root, policy) if fingerprint == "live" else fingerprint
    info = {"policy": policy, "set": set_name, "n": n, "model": {"path": f"models/{policy}", "fingerprint": fingerprint},
            "verifier_version": "v3", "generation": {"do_sample": False}, "seed": 0, "git_commit": "c0ffee" * 6}  # fmt: skip
    if env is not None:
        info["env"] = env
    (folder / "metrics.json").write_text(json.dumps({**info, "metrics": episode_metrics(records)}))
    if samples:
        (folder / "samples.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    return folder


def write_fixture(root: Path, grpo=True):
    write_questions(root, "n50", 20)
    write_questions(root, "n200", 40)
    for policy, correct in CORRECT_N50.items():
        write_eval(root, policy, "n50", 20, correct)
    for policy, correct in CORRECT_N200.items():
        write_eval(root, policy, "n200", 40, correct)
    (root / "reports/sft").mkdir(parents=True)
    (root / "reports/sft/loss.csv").write_text("step,epoch,loss\n" + "".join(f"{2 * s},0.1,{2.0 - 0.2 * s}\n" for s in range(1, 9)))
    if grpo:
        (root / "reports/grpo_phase1").mkdir(parents=True)
        rows = "".join(f"{s},{s / 10},0.01,{s / 20},{s / 20},0.5\n" for s in range(1, 9))
        (root / "reports/grpo_phase1/curve.csv").write_text(
            "step,reward,kl,rewards/correctness/mean,episode/accuracy,loss\n" + rows)  # fmt: skip
    return root


def curve_files(root: Path):
    return {"sft": root / "reports/sft/loss.csv", "grpo_phase1": root / "reports/grpo_phase1/curve.csv",
            "grpo_phase2": root / "reports/grpo_phase2/curve.csv"}  # fmt: skip


@pytest.fixture
def inputs(tmp_path):
    return load_inputs(write_fixture(tmp_path) / "reports/eval", curve_files(tmp_path))


@pytest.mark.parametrize("set_name, policy, n, accuracy, low, high", [
    ("n50", "base", 20, 0.2, 0.0807, 0.4160),
    ("n50", "sft", 20, 0.6, 0.3866, 0.7812),
    ("n50", "random", 20, 0.0, 0.0, 0.1611),
    ("n200", "base", 40, 0.25, 0.1419, 0.4019),
])  # fmt: skip
def test_results_table_has_accuracy_with_wilson_interval(inputs, set_name, policy, n, accuracy, low, high):
    table = results_table(inputs.results)
    assert list(zip(table["set"], table["policy"])) == [("n50", p) for p in CORRECT_N50] + [("n200", "random"), ("n200", "base")]
    row = table[(table["set"] == set_name) & (table["policy"] == policy)].iloc[0]
    assert row["n"] == n and row["accuracy"] == pytest.approx(accuracy)
    assert (row["accuracy_low"], row["accuracy_high"]) == pytest.approx((low, high), abs=5e-5)


@pytest.mark.parametrize("a, b, difference, only_a, only_b, p", [
    ("sft", "base", 0.4, 8, 0, 2 * 0.5**8),
    ("grpo_phase1", "base", 0.4, 10, 2, 158 / 4096),
    ("grpo_phase1", "sft", 0.0, 2, 2, 1.0),
    ("base", "random", 0.2, 4, 0, 2 * 0.5**4),
])  # fmt: skip
def test_paired_comparisons_within_a_set(inputs, a, b, difference, only_a, only_b, p):
    pairs = comparisons_table(inputs.results)
    assert len(pairs[pairs["set"] == "n50"]) == 6 and len(pairs[pairs["set"] == "n200"]) == 1
    row = pairs[(pairs["set"] == "n50") & (pairs["a"] == a) & (pairs["b"] == b)].iloc[0]
    assert row["difference"] == pytest.approx(difference)
    assert (row["only_a_correct"], row["only_b_correct"]) == (only_a, only_b)
    assert row["mcnemar_p"] == pytest.approx(p)
    assert row["difference_low"] <= difference <= row["difference_high"]


@pytest.mark.parametrize("n, points", [(50, 13), (200, 7), (20, 20)])
def test_interval_half_width_in_points(n, points):
    assert round(interval_half_width(n)) == points


def test_report_markdown_tables_sentence_and_missing(inputs):
    text = render_report(inputs, {"Date": "2030-01-01", "Git commit": "abc123"}, {"accuracy": "plots/accuracy.png"})
    assert "| Git commit | abc123 |" in text
    assert "| n50 | base | 20 | 20.0 % [8.1 %, 41.6 %] |" in text
    assert "| sft | base | 60.0 % | 20.0 % | +40.0 [" in text and "| 8 | 0 | 0.0078 |" in text
    assert "| grpo_phase1 | sft | 60.0 % | 60.0 % | +0.0 [" in text and "| 2 | 2 | 1.0000 |" in text
    sentence = next(line for line in text.splitlines() if line.startswith("On n50 (N = 20)"))
    assert "sft beats base (60.0 % vs 20.0 %, p = 0.0078)" in sentence
    assert "grpo_phase1 beats base" in sentence and "grpo_phase1 beats sft" not in sentence
    assert "±20 points" in sentence and "not corrected for multiple comparisons (6 pairs" in sentence
    assert "On n200 (N = 40), at α = 0.05: base beats random" in text
    assert "Not evaluated: base (n200)" not in text and "sft (n200)" in text and "base_1shot (n50, n200)" in text
    assert "Missing curves: grpo_phase2." in text
    assert "| n200 | base | 30.0 % (3/10) | 30.0 % (3/10) | 20.0 % (2/10) | 20.0 % (2/10) |" in text  # by hardness
    assert "| sft | loss | 8 | 1.7000 | 0.5000 | 0.4000 |" in text  # first/last quarter means of the loss
    assert "| grpo_phase1 | reward | 8 | 0.1500 | 0.7500 | 0.8000 |" in text
    assert "![Accuracy by policy](plots/accuracy.png)" in text and "![GRPO reward]" not in text


def test_transcripts_pick_base_against_best_trained_deterministically(inputs):
    assert transcript_pair(inputs.results) == ("n50", "base", "grpo_phase1")  # tie with sft goes to the later stage
    by = {(r.policy, r.set): r.records for r in inputs.results}
    picks = pick_examples(by["base", "n50"], by["grpo_phase1", "n50"])
    assert picks == pick_examples(list(reversed(by["base", "n50"])), by["grpo_phase1", "n50"])  # file order is irrelevant
    labels = [label for label, _ in picks]
    assert labels[:3] == ["easy", "medium", "hard"]
    fixed = [q for _, q in picks if int(q[1:]) in CORRECT_N50["grpo_phase1"] - CORRECT_N50["base"]]
    broken = [q for _, q in picks if int(q[1:]) in CORRECT_N50["base"] - CORRECT_N50["grpo_phase1"]]
    assert fixed and broken
    text = render_report(inputs, {}, {})
    section = text.split("## Transcripts side by side")[1]
    assert section.count("<table>") == len(picks) and "<th>base</th><th>grpo_phase1</th>" in section
    assert "-- base" in section and "-- grpo_phase1" in section and "… 2 more lines" in section


@pytest.mark.parametrize("present, expected", [
    ({"random": "n50", "base": "n50", "sft": "n50"}, ("n50", "base", "sft")),
    ({"random": "n200", "sft": "n200", "grpo_phase2": "n200"}, ("n200", "random", "grpo_phase2")),
    ({"random": "n50", "base_1shot": "n50", "base_3shot": "n50"}, ("n50", "random", "base_3shot")),
    ({"sft": "n50", "grpo_phase1": "n50"}, None),
])  # fmt: skip
def test_transcript_pair_rules(tmp_path, present, expected):
    for policy, set_name in present.items():
        write_eval(tmp_path, policy, set_name, 4, {0})  # equal accuracies: ties go to the later policy
    inputs = load_inputs(tmp_path / "reports/eval", curve_files(tmp_path))
    assert transcript_pair(inputs.results) == expected


def test_transcript_lines_are_compact():
    lines = transcript_lines(episode("sft", 1, True))
    assert lines[0] == 'describe(table_name="orders")'
    assert lines[1] == "  → Table orders (4 rows)" and lines[5] == "    … 2 more lines"
    assert all(len(line) <= 230 for line in lines)
    assert lines[-2] == "» I have submitted the answer." and lines[-1] == "= ✓ correct: answer '4' (match)"


def _corrupt(folder, what):
    metrics = json.loads((folder / "metrics.json").read_text())
    if what == "json":
        (folder / "metrics.json").write_text('{"policy": ')
    elif what == "key":
        del metrics["metrics"]["parse_rate"]
        (folder / "metrics.json").write_text(json.dumps(metrics))
    elif what == "policy":
        (folder / "metrics.json").write_text(json.dumps({**metrics, "policy": "base"}))
    elif what == "stale":
        lines = (folder / "samples.jsonl").read_text().splitlines()
        (folder / "samples.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    elif what == "record":
        (folder / "samples.jsonl").write_text('{"question_id": "q", "nonsense": 1}\nnot json\n')


@pytest.mark.parametrize("what, needle", [
    ("json", "not valid JSON"), ("key", "parse_rate"), ("policy", "folder says 'sft'"),
    ("stale", "stale"), ("record", "samples.jsonl"),
])  # fmt: skip
def test_malformed_eval_folder_fails_naming_it(tmp_path, what, needle):
    _corrupt(write_eval(tmp_path, "sft", "n50", 6, {1, 2}), what)
    with pytest.raises(ValueError, match=needle):
        load_inputs(tmp_path / "reports/eval", curve_files(tmp_path))


def test_partial_inputs_are_reported_not_guessed(tmp_path):
    write_eval(tmp_path, "base", "n50", 6, {0}, samples=False)
    write_eval(tmp_path, "sft", "n50", 6, {0, 1})
    (tmp_path / "reports/eval/grpo_phase9_n50").mkdir()
    (tmp_path / "reports/eval/grpo_phase1_n200").mkdir()
    inputs = load_inputs(tmp_path / "reports/eval", curve_files(tmp_path))
    assert [(r.policy, r.set) for r in inputs.results] == [("base", "n50"), ("sft", "n50")]
    assert comparisons_table(inputs.results).empty and curve_summary(inputs.curves).empty
    text = render_report(inputs, {}, {})
    assert "`base_n50` has no samples.jsonl" in text and "`grpo_phase9_n50` is not a `<policy>_<set>` folder" in text
    assert "`grpo_phase1_n200` has no metrics.json" in text
    assert "Missing curves: sft, grpo_phase1, grpo_phase2." in text and "nothing to compare" in text
    assert "No two policies with saved episodes" in text


def _valid_png(path: Path):
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.size[0] > 300 and image.size[1] > 200


@pytest.mark.parametrize("grpo, expected", [
    (True, {"accuracy", "hardness", "steps", "sft_loss", "grpo_reward"}),
    (False, {"accuracy", "hardness", "steps", "sft_loss"}),
])  # fmt: skip
def test_plots_are_pngs_and_every_csv_exists(tmp_path, grpo, expected):
    write_fixture(tmp_path, grpo=grpo)
    inputs = load_inputs(tmp_path / "reports/eval", curve_files(tmp_path))
    drawn = write_plots(inputs, tmp_path / "plots")
    assert set(drawn) == expected
    for name in drawn.values():
        _valid_png(tmp_path / "plots" / name)
    assert sorted(p.name for p in (tmp_path / "plots").glob("*.csv")) == sorted(CSV_FILES)
    accuracy = (tmp_path / "plots/accuracy.csv").read_text().splitlines()
    assert accuracy[0].startswith("set,policy,label,n,correct,accuracy,accuracy_low,accuracy_high")
    assert accuracy[2].startswith("n50,base,base @ n50,20,4,0.2,0.0806")
    steps = (tmp_path / "plots/steps.csv").read_text().splitlines()
    assert steps[0] == "set,policy,steps,episodes" and "n50,base,3,4" in steps
    phase1 = (tmp_path / "plots/grpo_phase1_curve.csv").read_text().splitlines()
    assert phase1[0].startswith("step,reward") and len(phase1) == (9 if grpo else 1)
    assert (tmp_path / "plots/grpo_phase2_curve.csv").read_text().strip() == "step,reward"


def live_of(root: Path):
    from stages.report import live_state

    cwd = os.getcwd()
    os.chdir(root)
    try:
        return live_state("schema=hidden answer=value")
    finally:
        os.chdir(cwd)


def test_results_of_another_model_or_question_set_are_stale_and_left_out(tmp_path):
    write_fixture(tmp_path)
    live_model(tmp_path, "grpo_phase2")
    old = write_eval(tmp_path, "grpo_phase2", "n50", 20, set(range(20)), fingerprint="0ld" * 4)  # an older model
    write_eval(tmp_path, "sft", "n200", 40, set(range(40)))
    write_questions(tmp_path, "n200", 41)  # n200 has changed since sft_n200 was played
    inputs = load_inputs(tmp_path / "reports/eval", curve_files(tmp_path), live_of(tmp_path))
    assert {(r.policy, r.set) for r in inputs.results} == {
        ("random", "n50"), ("base", "n50"), ("sft", "n50"), ("grpo_phase1", "n50")}
    assert any("`grpo_phase2_n50`: model fingerprint 0ld0ld0ld0ld is not the live model's" in s for s in inputs.stale)
    assert any("`sft_n200`: its questions are not the live n200 questions" in s for s in inputs.stale)
    text = render_report(inputs, {}, {})
    assert "grpo_phase2 |" not in text.split("## Accuracy and behaviour by policy")[1].split("## Paired")[0]
    assert "Stale, left out: `grpo_phase2_n50`" in text and old.is_dir()
    unchecked = load_inputs(tmp_path / "reports/eval", curve_files(tmp_path))  # without live: all taken
    assert ("grpo_phase2", "n50") in {(r.policy, r.set) for r in unchecked.results}


def test_results_of_another_environment_mode_are_stale_and_never_paired(tmp_path):
    write_fixture(tmp_path)
    full = {"step_budget": 15, "schema": "full", "answer": "sql"}
    write_eval(tmp_path, "sft", "n200", 40, set(range(30)), env=full)  # played with the full schema, EX
    inputs = load_inputs(tmp_path / "reports/eval", curve_files(tmp_path), live_of(tmp_path))
    assert ("sft", "n200") not in {(r.policy, r.set) for r in inputs.results}
    assert any("`sft_n200`: played in mode schema=full answer=sql, not the live schema=hidden answer=value" in s
               for s in inputs.stale)
    unchecked = load_inputs(tmp_path / "reports/eval", curve_files(tmp_path))  # without live: both modes loaded
    pairs = comparisons_table(unchecked.results)
    n200 = pairs[pairs["set"] == "n200"]
    assert not n200.empty and "sft" not in set(n200["a"]) | set(n200["b"])  # the EX result pairs with nothing
    text = render_report(inputs, {}, {})
    assert "## Accuracy and behaviour by policy (schema hidden (table names only), value answers, accuracy by the value verifier)" in text


def run_report_stage(workdir: Path):
    (workdir / "params.yaml").write_text((REPO / "params.yaml").read_text())
    env = {**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_TRACKING_URI": f"sqlite:///{workdir / 'mlflow.db'}",
           "DVC_ROOT": str(workdir)}  # fmt: skip
    return subprocess.run([sys.executable, "-m", "stages.report"], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip


def test_stage_writes_report_plots_and_mlflow_run(tmp_path):
    proc = run_report_stage(write_fixture(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = (tmp_path / "reports/report.md").read_text()
    assert "| Data source | synthetic |" in text and "| Model base | offline:qwen2.5-coder-0.5b-instruct |" in text
    assert "![Accuracy by policy](plots/accuracy.png)" in text and "<table>" in text
    for name in ("accuracy", "hardness", "steps", "sft_loss", "grpo_reward"):
        _valid_png(tmp_path / "reports/plots" / f"{name}.png")
    assert not [p for p in (tmp_path / "reports").iterdir() if p.name.startswith(".")]  # no temporary leftovers
    con = sqlite3.connect(tmp_path / "mlflow.db")
    run_id, status = con.execute(
        "SELECT r.run_uuid, r.status FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
        "WHERE t.key = 'stage' AND t.value = 'report'").fetchone()  # fmt: skip
    metrics = dict(con.execute("SELECT key, value FROM latest_metrics WHERE run_uuid = ?", (run_id,)).fetchall())
    assert status == "FINISHED"
    assert metrics["n50/sft/accuracy"] == pytest.approx(0.6)
    assert metrics["n50/sft-vs-base/mcnemar_p"] == pytest.approx(2 * 0.5**8)
    assert metrics["curves/grpo_phase1/reward/last_quarter"] == pytest.approx(0.75)
    artifacts = next((tmp_path / "mlartifacts").rglob(run_id)) / "artifacts"
    assert (artifacts / "report.md").is_file() and (artifacts / "plots/accuracy.png").is_file()

    before = (tmp_path / "reports/report.md").read_bytes()
    _corrupt(tmp_path / "reports/eval/sft_n50", "stale")
    failed = run_report_stage(tmp_path)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr and "sft_n50" in failed.stderr
    assert (tmp_path / "reports/report.md").read_bytes() == before  # the previous report survives a failure


def test_nothing_evaluated_still_renders_and_writes_every_csv(tmp_path):
    inputs = load_inputs(tmp_path / "reports/eval", curve_files(tmp_path))  # the folder does not even exist
    assert inputs.results == [] and inputs.curves == {} and inputs.notes == []
    assert write_plots(inputs, tmp_path / "plots") == {}
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == sorted(CSV_FILES)
    text = render_report(inputs, {}, {})
    assert "Evaluated: 0 of 14" in text and text.count("No evaluation results yet.") == 2


def test_cost_table_lists_each_stage_that_recorded_its_machine():
    from sqlenv.report.markdown import _cost_section
    from sqlenv.report.results import stage_costs

    system = {"cpu_model": "AMD EPYC", "peak_rss_mb": 6144.0, "torch_threads": "2", "load1_start": 0.5, "load1_end": 2.1}
    docs = {
        "prepare": {"wall_time_s": 40.0, "verified": 4680, "system": system},
        "prepare_model": {"wall_time_s": 45.0, "parameters": 494032768, "saved_dtype": "bfloat16", "system": system},
        "sft_data": {"wall_time_s": 30.0, "kept": 3300, "system": system},
        "sft": {"wall_time_s": 600.0, "seconds_per_step": 12.5, "steps": 48, "system": system,
                "dtype": {"dtype": "bfloat16", "bf16_ms": 1.5, "fp32_ms": 6.0}},
        "grpo_phase1": {"wall_time_s": 500.0, "steps": 8, "seconds_per_step": 62.5, "distinct_questions": 32,
                        "system": {**system, "peak_rss_mb": 7000.0}, "dtype": {"dtype": "float32"}},
        "evaluate@sft_n200": {"set": "n200", "played_on": "n200", "wall_time_s": 300.0, "system": system,
                              "settings": {"dtype": "bfloat16"}},
        "evaluate@sft_n50": {"set": "n50", "played_on": "n200", "wall_time_s": 0.0, "system": system},  # read off n200
        "grpo_phase2": {"wall_time_s": 10.0},  # from before the system block: not in the table
        "evaluate@base_n50": {"set": "n50", "wall_time_s": 200.0,  # the same name, other flags: told apart
                              "system": {**system, "cpu_isa": "AuthenticAMD 25/17: avx2 fma"}},
    }
    rows = stage_costs(docs)
    assert [r["stage"] for r in rows] == ["prepare", "prepare_model", "sft_data", "sft", "grpo_phase1", "evaluate@sft_n200",
                                          "evaluate@base_n50"]  # fmt: skip
    assert [r["wall_s"] for r in rows] == [40.0, 45.0, 30.0, 600.0, 500.0, 300.0, 200.0]
    assert rows[3]["seconds_per_step"] == 12.5 and rows[5]["dtype"] == "bfloat16" and rows[5]["steps"] is None
    table, footer = _cost_section(rows)
    assert "| prepare | 40 s | 6.0 GiB | — | 2 | 0.50 → 2.10 | — |" in table
    assert "| prepare_model | 45 s | 6.0 GiB | — | 2 | 0.50 → 2.10 | — |" in table  # it computes nothing
    assert "| sft | 600 s | 6.0 GiB | bfloat16 (1.50 / 6.00) | 2 | 0.50 → 2.10 | 48 × 12.5 s |" in table
    assert "| grpo_phase1 | 500 s | 6.8 GiB | float32 | 2 | 0.50 → 2.10 | 8 × 62.5 s, 32 distinct questions |" in table
    assert "CPU: AMD EPYC, AMD EPYC (AuthenticAMD 25/17: avx2 fma)." in footer and "28.6 min" in footer


def test_headline_states_what_it_could_detect_and_a_domain_interval():
    """Beside the paired test, the headline says the smallest difference the comparison detects at 80 % power (and
    how many paired questions a 5-point effect needs), and an interval that resamples held-out domains."""
    from sqlenv.report.markdown import headline_section
    from sqlenv.report.results import EvalResult, ReportInputs

    right = {"sft": set(range(0, 90)), "grpo_phase2": set(range(4, 90)) | set(range(90, 95))}  # 5 : 4 discordant
    results = [EvalResult(p, "n200", {"accuracy": len(r) / 200}, {"policy": p, "set": "n200"},
                          [episode(p, i, i in r) for i in range(200)]) for p, r in right.items()]  # fmt: skip
    for result in results:
        for i, record in enumerate(result.records):
            record.question_id = f"q{i:03d}"
    groups = {f"q{i:03d}": f"domain{i % 5}" for i in range(200)}
    pairs = comparisons_table(results)
    text = "\n".join(headline_section(pairs, ReportInputs(results, groups=groups)))
    assert "**grpo_phase2 vs sft on n200**" in text and "only grpo_phase2 right on 5, only sft on 4" in text
    assert "(9 of 200 questions, 4.5 %)" in text and "with 80 % power" in text
    assert "a 5-point difference would need about" in text or "more than this discordance allows" in text
    assert "Resampling the 5 held-out domains" in text and "with so few domains a bootstrap understates" in text
    unknown = "\n".join(headline_section(pairs, ReportInputs(results)))  # no question -> domain map
    assert "Domain bootstrap: not available" in unknown


def test_indomain_probe_is_compared_beside_the_headline_and_an_empty_one_is_noted(tmp_path):
    """The in-domain probe (data.indomain): grpo_phase2 against sft where GRPO trained, in the headline section,
    the coverage list and the paired comparisons; an empty probe (data.indomain 0) is a note, never a result."""
    root = write_fixture(tmp_path)
    write_questions(root, "indomain", 40)
    write_eval(root, "sft", "indomain", 40, set(range(10)))
    write_eval(root, "grpo_phase2", "indomain", 40, set(range(20)))
    inputs = load_inputs(root / "reports/eval", curve_files(root), live_of(root))
    assert not inputs.stale
    text = render_report(inputs, {"Date": "2030-01-01"}, {})
    line = next(x for x in text.splitlines() if x.startswith("**grpo_phase2 vs sft on the in-domain probe**"))
    assert "(N = 40 paired questions of the training domains, never trained on): 50.0 % vs 25.0 %" in line
    assert "only grpo_phase2 right on 10, only sft on 0" in line
    assert text.index(line) < text.index("## What this report covers")  # in the headline section
    assert "- In-domain probe (indomain: unseen questions of the training domains): sft, grpo_phase2." in text
    assert "### indomain" in text  # the paired comparisons of the probe's set
    assert "grpo_phase2 (n50, n200)" in text  # the held-out matrix alone decides what is missing
    # data.indomain: 0 -> an empty set: noted, not a result, nothing in the headline
    empty = write_fixture(tmp_path / "empty")
    write_questions(empty, "indomain", 0)
    write_eval(empty, "sft", "indomain", 0, set())
    inputs = load_inputs(empty / "reports/eval", curve_files(empty), live_of(empty))
    assert not [r for r in inputs.results if r.set == "indomain"]
    assert any("in-domain probe is off" in note for note in inputs.notes)
    text = render_report(inputs, {"Date": "2030-01-01"}, {})
    assert "on the in-domain probe**" not in text and "- In-domain probe: no live result (indomain)." in text
