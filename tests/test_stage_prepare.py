"""The `prepare` stage as DVC runs it: outputs, determinism by seed, and clean failures on bad input."""

import hashlib
import json
from pathlib import Path

import pytest
from fixtures_env import spider_dir  # noqa: F401  (fixture)
from stage_harness import run_stage, small_params


def run_prepare(workdir: Path, params: dict, expect_ok=True):
    return run_stage(workdir, "prepare", params=params, expect_ok=expect_ok)


def digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_synthetic_prepare_outputs_and_determinism(tmp_path):
    run_prepare(tmp_path / "a", small_params())
    a = tmp_path / "a"
    for split in ("train", "n50", "n200"):
        assert (a / "data/questions" / f"{split}.jsonl").is_file()
    n50 = [json.loads(line) for line in (a / "data/questions/n50.jsonl").read_text().splitlines()]
    n200 = [json.loads(line) for line in (a / "data/questions/n200.jsonl").read_text().splitlines()]
    train = [json.loads(line) for line in (a / "data/questions/train.jsonl").read_text().splitlines()]
    assert len(n50) == 10 and len(n200) == 30
    assert {q["id"] for q in n50} <= {q["id"] for q in n200}
    assert {q["db_id"] for q in train}.isdisjoint({q["db_id"] for q in n200})
    for q in n50:
        assert set(q) >= {"id", "db_id", "question", "gold_sql", "gold_answer", "hardness", "tables"}
        assert (a / "data/databases" / q["db_id"] / f"{q['db_id']}.sqlite").is_file()
    metrics = json.loads((a / "reports/prepare/metrics.json").read_text())
    assert metrics["oracle_verification_rate"] == 1.0
    assert metrics["splits"]["n200"]["n"] == 30
    # the in-domain probe: training-domain questions taken out of train
    probe = [json.loads(line) for line in (a / "data/questions/indomain.jsonl").read_text().splitlines()]
    assert len(probe) == metrics["splits"]["indomain"]["n"] == 10
    assert {q["id"] for q in probe}.isdisjoint({q["id"] for q in train}) and {q["db_id"] for q in probe} <= {q["db_id"] for q in train}

    run_prepare(tmp_path / "b", small_params())
    assert digest(a / "data") == digest(tmp_path / "b" / "data")  # same seed: byte-identical
    run_prepare(tmp_path / "c", small_params(seed=1))
    other = digest(tmp_path / "c" / "data/questions")
    assert other != digest(a / "data/questions")


def _assert_failed_cleanly(proc, workdir: Path, *needles):
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    for needle in needles:
        assert needle in proc.stderr, proc.stderr[-2000:]
    assert not (workdir / "data" / "questions").exists()
    assert not (workdir / "data" / "databases").exists()
    leftovers = [p.name for p in (workdir / "data").iterdir()] if (workdir / "data").exists() else []
    assert leftovers == []


def test_missing_spider_folder_fails_cleanly(tmp_path):
    params = small_params(**{"data.source": "spider", "data.spider_dir": str(tmp_path / "nowhere")})
    proc = run_prepare(tmp_path / "w", params, expect_ok=False)
    _assert_failed_cleanly(proc, tmp_path / "w", "nowhere")


def test_malformed_questions_file_fails_cleanly(tmp_path):
    spider = tmp_path / "spider"
    (spider / "database").mkdir(parents=True)
    (spider / "tables.json").write_text("[]")
    (spider / "dev.json").write_text('[{"db_id": "x", "question": "q"')  # truncated JSON
    params = small_params(**{"data.source": "spider", "data.spider_dir": str(spider)})
    proc = run_prepare(tmp_path / "w", params, expect_ok=False)
    _assert_failed_cleanly(proc, tmp_path / "w", "dev.json")


def test_missing_database_fails_cleanly(tmp_path):
    spider = tmp_path / "spider"
    (spider / "database").mkdir(parents=True)
    (spider / "tables.json").write_text("[]")
    (spider / "dev.json").write_text(json.dumps([{"db_id": "ghost", "question": "How many?", "query": "SELECT 1"}]))
    params = small_params(**{"data.source": "spider", "data.spider_dir": str(spider), "data.databases": ["ghost"]})
    proc = run_prepare(tmp_path / "w", params, expect_ok=False)
    _assert_failed_cleanly(proc, tmp_path / "w", "ghost")


@pytest.mark.parametrize("key, value, needle", [("data.sorce", "x", "data.sorce"), ("env.step_budget", "many", "env.step_budget")])
def test_bad_params_fail_naming_the_key(tmp_path, key, value, needle):
    params = small_params()
    section, name = key.split(".")
    params[section][name] = value
    proc = run_prepare(tmp_path / "w", params, expect_ok=False)
    _assert_failed_cleanly(proc, tmp_path / "w", needle)


def test_spiders_protocol_trains_on_its_own_files_and_evaluates_on_dev(tmp_path, spider_dir):  # noqa: F811
    """split: by_file: training questions from the training files (ids prefixed by the file), evaluation sets
    from the questions file, no database on both sides (a training question on a dev database is dropped)."""
    records = json.loads((spider_dir / "dev.json").read_text())
    train_dbs, dev_dbs = {"pets_1", "singer"}, {"poker_player", "orchestra"}
    spider = tmp_path / "spider"
    spider.mkdir()
    (spider / "database").symlink_to(spider_dir / "database")
    (spider / "tables.json").symlink_to(spider_dir / "tables.json")
    (spider / "dev.json").write_text(json.dumps([r for r in records if r["db_id"] in dev_dbs]))
    train = [r for r in records if r["db_id"] in train_dbs]
    (spider / "train_spider.json").write_text(json.dumps(train[:40]))
    leak = next(r for r in records if r["db_id"] == "orchestra")  # a dev database in a training file
    (spider / "train_others.json").write_text(json.dumps([*train[40:], leak]))
    params = small_params(**{"data.source": "spider", "data.spider_dir": str(spider), "data.split": "by_file"})
    work = tmp_path / "w"
    run_prepare(work, params)
    read = lambda name: [json.loads(x) for x in (work / "data/questions" / f"{name}.jsonl").read_text().splitlines()]  # noqa: E731
    train_q, n200 = read("train"), read("n200")
    assert {q["db_id"] for q in train_q} == train_dbs and {q["db_id"] for q in n200} <= dev_dbs
    assert all(q["id"].startswith(("train_spider:", "train_others:")) for q in train_q)
    assert not any(q["id"].startswith("train") for q in n200)
    metrics = json.loads((work / "reports/prepare/metrics.json").read_text())
    assert metrics["dropped"]["eval_database"] == 1
    assert metrics["databases"] == {"train": sorted(train_dbs), "eval": sorted(dev_dbs)}
    assert len(train_q) > 50 and metrics["splits"]["n200"]["n"] == 30


def test_by_file_split_needs_spider_training_files(tmp_path):
    proc = run_prepare(tmp_path / "w", small_params(**{"data.split": "by_file"}), expect_ok=False)
    _assert_failed_cleanly(proc, tmp_path / "w", "by_file needs data.source: spider")
