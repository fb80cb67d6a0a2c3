"""Atomic writes: files and folders appear whole or not at all; malformed JSONL names file and line."""

import pytest

from pipeline.io import atomic_dir, atomic_write_json, atomic_write_jsonl, read_jsonl


def test_jsonl_roundtrip_and_deterministic(tmp_path):
    recs = [{"b": 1, "a": [1, 2]}, {"a": "é"}]
    p = atomic_write_jsonl(tmp_path / "x.jsonl", recs)
    first = p.read_bytes()
    atomic_write_jsonl(p, recs)
    assert p.read_bytes() == first
    assert read_jsonl(p) == recs
    assert [f.name for f in tmp_path.iterdir()] == ["x.jsonl"]  # no temp leftovers


def test_malformed_jsonl(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"a": 1}\n{oops\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not valid JSON"):
        read_jsonl(p)
    p.write_text("[1, 2]\n")
    with pytest.raises(ValueError, match="expected a JSON object"):
        read_jsonl(p)
    with pytest.raises(FileNotFoundError):
        read_jsonl(tmp_path / "missing.jsonl")


def test_atomic_dir_replaces_on_success_and_keeps_old_on_failure(tmp_path):
    target = tmp_path / "out"
    with atomic_dir(target) as d:
        (d / "a.txt").write_text("1")
    assert (target / "a.txt").read_text() == "1"
    with pytest.raises(RuntimeError):
        with atomic_dir(target) as d:
            (d / "b.txt").write_text("half")
            raise RuntimeError("crash mid-write")
    assert sorted(p.name for p in target.iterdir()) == ["a.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    with atomic_dir(target) as d:
        (d / "c.txt").write_text("3")
    assert sorted(p.name for p in target.iterdir()) == ["c.txt"]


def test_atomic_json_failure_leaves_nothing(tmp_path):
    with pytest.raises(TypeError):
        atomic_write_json(tmp_path / "m.json", {"x": object()} | {1j: 1})
    assert list(tmp_path.iterdir()) == []
