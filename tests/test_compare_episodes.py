"""bench/compare_episodes.py: two evaluations of the same questions, paired by question id."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import compare_episodes  # noqa: E402


def _write(folder: Path, verdicts: dict[str, bool], wall: float) -> Path:
    folder.mkdir(parents=True)
    lines = [json.dumps({"question_id": q, "db_id": "d", "hardness": "easy", "correct": c, "tokens": 10, "steps": 2})
             for q, c in verdicts.items()]
    (folder / "samples.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "metrics.json").write_text(json.dumps({"wall_time_s": wall, "env": {"prompt": folder.name}}))
    return folder


def test_pairs_by_question_and_reports_mcnemar(tmp_path):
    a = _write(tmp_path / "verbose", {"q1": True, "q2": False, "q3": False, "q4": True, "extra": True}, 100.0)
    b = _write(tmp_path / "compact", {"q1": True, "q2": True, "q3": True, "q4": False}, 80.0)
    result = compare_episodes.compare(a, b, "verbose", "compact")
    assert result["n"] == 4 and result["only_in_a"] == 1 and result["only_in_b"] == 0
    assert (result["a"]["correct"], result["b"]["correct"]) == (2, 3)
    assert result["b_minus_a"]["difference"] == pytest.approx(0.25)
    assert result["mcnemar"]["only_b_right"] == 2 and result["mcnemar"]["only_a_right"] == 1
    assert result["mcnemar"]["p_exact"] == pytest.approx(1.0)
    assert result["a"]["wall_time_s"] == 100.0 and result["b"]["env"] == {"prompt": "compact"}


def test_bad_input_is_a_clear_error(tmp_path, capsys):
    a = _write(tmp_path / "a", {"q1": True}, 1.0)
    b = _write(tmp_path / "b", {"q2": True}, 1.0)
    assert compare_episodes.main([str(a), str(b)]) == 1
    assert "share no question ids" in capsys.readouterr().err
    assert compare_episodes.main([str(a), str(tmp_path / "missing")]) == 1
    twice = _write(tmp_path / "twice", {"q1": True}, 1.0)
    (twice / "samples.jsonl").write_text((twice / "samples.jsonl").read_text() * 2)
    assert compare_episodes.main([str(a), str(twice)]) == 1
    assert "appears twice" in capsys.readouterr().err
