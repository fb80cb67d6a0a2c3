"""Guards the transfer set: the committed ids name questions by content (found in any copy of Spider), the
stages play the agents and the single shot on the same questions, and a missing folder is a recorded skip that
the report states in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fixtures_env import spider_dir  # noqa: F401
from stage_harness import REPO, run_stage, small_params

from sqlenv.eval import transfer
from sqlenv.eval.harness import load_spider_questions
from pipeline.readme import transfer_rows
from sqlenv.report.transfer import load_transfer, transfer_section
from sqlenv.train.tiny_model import build_tiny_model

IDS = REPO / "configs" / "transfer" / "spider_dev_n200.json"


@pytest.fixture(scope="module")
def pool(spider_dir):
    return load_spider_questions(spider_dir)[0]


def test_the_committed_ids_are_a_stratified_draw_of_the_slice(pool):
    doc = transfer.read_ids(IDS)
    chosen, missing = transfer.select(pool, doc["keys"])
    assert not missing and len(chosen) == doc["n"] == 200
    assert [q.id for q in chosen] == doc["positions"]
    assert {h: sum(q.hardness == h for q in chosen) for h in doc["hardness"]} == doc["hardness"]
    # the draw `sqlenv eval --n 200` makes on this folder, so its figures and the DAG's are the same questions
    assert [q.id for q in transfer.draw(pool, 200, 0)] == doc["positions"]


def test_ids_find_the_same_questions_in_a_reordered_copy(spider_dir, tmp_path, pool):
    """Keys are content, not positions: a full Spider download lists the slice's questions elsewhere."""
    copy = tmp_path / "spider"
    shutil.copytree(spider_dir, copy)
    records = json.loads((copy / "dev.json").read_text())
    (copy / "dev.json").write_text(json.dumps(records[::-1]))
    keys = transfer.read_ids(IDS)["keys"][:25]
    before, _ = transfer.select(pool, keys)
    after, missing = transfer.select(load_spider_questions(copy)[0], keys)
    assert not missing and [(q.db_id, q.question) for q in after] == [(q.db_id, q.question) for q in before]
    assert [q.id for q in after] != [q.id for q in before]  # other positions, same questions


@pytest.mark.parametrize("bad, message", [
    ({"format": 1, "keys": []}, "not a transfer ids file"),
    ({"format": 2, "keys": ["a"]}, "not a transfer ids file"),
    ({"format": 1, "keys": ["a", "a"]}, "appears twice"),
])  # fmt: skip
def test_a_bad_ids_file_is_a_clear_error(tmp_path, bad, message):
    path = tmp_path / "ids.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=message):
        transfer.read_ids(path)


def _params(spider: Path, **transfer_params) -> dict:
    params = small_params()
    params["evaluate"].update(batch_size=4, max_total_tokens=48)
    params["env"]["step_budget"] = 3
    params["transfer"].update(spider_dir=str(spider), ids=str(IDS), **transfer_params)
    return params


def test_a_missing_folder_is_a_recorded_skip(tmp_path):
    work = tmp_path / "work"
    nowhere = tmp_path / "no-spider-here"
    run_stage(work, "transfer_data", params=_params(nowhere))
    manifest = json.loads((work / "data/transfer/manifest.json").read_text())
    assert manifest["skipped"] == f"no transfer data at {nowhere}"
    assert json.loads((work / "reports/transfer_data/metrics.json").read_text())["skipped"] == manifest["skipped"]
    run_stage(work, "transfer", "--policy", "sft", "--source", "models/sft")  # no model either: still a skip
    result = json.loads((work / "reports/transfer/sft/metrics.json").read_text())
    assert result["skipped"] == manifest["skipped"] and (work / "reports/transfer/sft/samples.jsonl").read_text() == ""
    lines = transfer_section(load_transfer(work / "reports/transfer"))
    assert len(lines) == 1 and lines[0].startswith(f"Skipped: no transfer data at {nowhere}")


def test_agents_and_single_shot_play_the_same_questions(spider_dir, tmp_path):
    work = tmp_path / "work"
    run_stage(work, "transfer_data", params=_params(spider_dir, limit=4, single_shot_max_new_tokens=24))
    build_tiny_model(work / "models" / "base")
    shutil.copytree(work / "models" / "base", work / "models" / "sft")
    run_stage(work, "transfer", "--policy", "base_sql", "--source", "models/base")
    run_stage(work, "transfer", "--policy", "sft", "--source", "models/sft")
    docs = {p: json.loads((work / "reports/transfer" / p / "metrics.json").read_text()) for p in ("base_sql", "sft")}
    assert docs["base_sql"]["question_ids"] == docs["sft"]["question_ids"] and docs["sft"]["n"] == 4
    assert docs["base_sql"]["settings"]["protocol"] == "text_to_sql" and docs["base_sql"]["env"] is None
    assert docs["sft"]["settings"]["max_total_tokens"] == 48 and docs["sft"]["env"]["schema"] == "hidden"
    played = [transfer.question_key(q) for q in transfer.load_questions(work / "data/transfer")]
    assert len(played) == 4 and set(played) <= set(transfer.read_ids(IDS)["keys"])
    hardness = {q.hardness for q in transfer.load_questions(work / "data/transfer")}
    assert len(hardness) > 1  # a stratified subset, not the first four (one database, one level)
    text = "\n".join(transfer_section(load_transfer(work / "reports/transfer")))
    assert "| sft | all | 4 |" in text and "Not run: grpo_phase2." in text
    readme_rows = transfer_rows("## Transfer to real databases\n\n" + text)  # what the README's block keeps of it
    assert readme_rows.splitlines()[0] == "| policy | n | accuracy [95 %] | answered |"
    assert any(line.startswith("| sft agent (hidden schema, value) | 4 | ") for line in readme_rows.splitlines())
    (pair,) = [line for line in readme_rows.splitlines() if line.startswith("| sft | ") and " − " not in line
               and line.count("|") == 6]  # fmt: skip
    assert pair.split(" | ")[2] == next(line for line in text.splitlines() if line.startswith("| sft | all |")).split(" | ")[4]
