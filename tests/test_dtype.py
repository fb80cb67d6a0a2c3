"""`model.dtype: auto`: the faster dtype by measurement, inherited by launched processes; threads from cores."""

import json

import pytest

from pipeline import machine
from sqlenv import dtype as dt


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.delenv(dt.ENV_VAR, raising=False)


@pytest.mark.parametrize("bf16, fp32, expected", [(1.0, 4.0, "bfloat16"), (4.0, 2.2, "float32")])
def test_auto_takes_the_faster_measured_dtype(monkeypatch, tmp_path, bf16, fp32, expected):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64, "intermediate_size": 160}))
    seen = []
    monkeypatch.setattr(dt, "time_matmuls", lambda h, i: seen.append((h, i)) or {"bfloat16": bf16, "float32": fp32})
    choice = dt.choose_dtype("auto", tmp_path)
    assert (choice.dtype, choice.bf16_ms, choice.fp32_ms, choice.requested) == (expected, bf16, fp32, "auto")
    assert seen == [(64, 160)]  # the model's own shapes
    # Exported for the processes a stage launches: they inherit the choice instead of measuring again.
    monkeypatch.setattr(dt, "time_matmuls", lambda h, i: pytest.fail("measured twice"))
    assert dt.choose_dtype("auto", tmp_path) == choice


def test_explicit_dtype_is_used_as_given_and_bad_values_fail():
    assert dt.choose_dtype("float32").as_dict() == {"dtype": "float32", "requested": "float32", "reason": "as configured",
                                                    "bf16_ms": None, "fp32_ms": None}  # fmt: skip
    assert dt.prepare_dtype("auto") == "bfloat16" and dt.prepare_dtype("float32") == "float32"
    with pytest.raises(ValueError, match="model.dtype must be one of"):
        dt.choose_dtype("fp16")


def test_real_measurement_times_both_dtypes():
    ms = dt.time_matmuls(32, 64, repeats=2, rows=8)
    assert set(ms) == {"bfloat16", "float32"} and all(0 < v < 1e4 for v in ms.values())


def test_threads_follow_physical_cores_and_local_processes(monkeypatch):
    cpuinfo = [("physical id", "0"), ("core id", "0"), ("physical id", "0"), ("core id", "0"),
               ("physical id", "0"), ("core id", "1"), ("physical id", "0"), ("core id", "1")]  # 2 cores, SMT: 4 CPUs
    monkeypatch.setattr(machine.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert machine.thread_count(cpuinfo) == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert machine.thread_count(cpuinfo) == 1


def test_set_threads_sets_torch_and_respects_a_user_setting(monkeypatch):
    import torch

    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        monkeypatch.delenv("SQLENV_THREADS_SET", raising=False)
        monkeypatch.setattr(machine, "thread_count", lambda cpuinfo=None: 1)
        assert machine.set_threads() == 1 and torch.get_num_threads() == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's own setting wins
        assert machine.set_threads() == 2 and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
