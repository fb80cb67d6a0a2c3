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


@pytest.mark.parametrize(("bf16_ms", "rounds"), [(10.0, 1), (1.5, 5)])
def test_the_probe_stops_once_one_dtype_has_clearly_lost(monkeypatch, bf16_ms, rounds):
    """A CPU without bf16 instructions runs a bf16 pair ~65x slower than fp32 (1.3 s at the model's shapes): after
    one timed round that settles it the probe stops, instead of paying five. A close race runs every round."""
    clock = {"now": 0.0, "calls": 0}

    def perf_counter():  # rounds time bf16 then fp32; each matmul pair "takes" its dtype's milliseconds
        clock["calls"] += 1
        if clock["calls"] % 2 == 0:
            clock["now"] += (bf16_ms if clock["calls"] % 4 == 2 else 1.0) / 1e3
        return clock["now"]

    monkeypatch.setattr(dt.time, "perf_counter", perf_counter)
    ms = dt.time_matmuls(32, 64, repeats=5, rows=8)
    assert clock["calls"] == 4 * rounds
    assert ms == pytest.approx({"bfloat16": bf16_ms, "float32": 1.0})


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


def test_bound_onednn_cache_sets_the_capacity_unless_the_user_did(monkeypatch):
    for var in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY"):
        monkeypatch.delenv(var, raising=False)
    assert machine.bound_onednn_cache() == machine.ONEDNN_CACHE_CAPACITY == 64
    assert machine.threads()["system/ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "64"  # recorded with the threads
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "512")  # the user's own setting wins
    assert machine.bound_onednn_cache() == 512
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY")
    monkeypatch.setenv("DNNL_PRIMITIVE_CACHE_CAPACITY", "8")  # and so does its older name
    assert machine.bound_onednn_cache() == 8 and "ONEDNN_PRIMITIVE_CACHE_CAPACITY" not in machine.os.environ


def test_run_stage_bounds_the_onednn_cache_before_main_runs(monkeypatch):
    from pipeline.stage import run_stage

    for var in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "DNNL_PRIMITIVE_CACHE_CAPACITY", "OMP_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(machine, "set_threads", lambda: 1)  # this process's torch threads stay as they are
    seen = []
    run_stage("probe", lambda: seen.append(machine.os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY")))
    assert seen == [str(machine.ONEDNN_CACHE_CAPACITY)]


# Cycles bf16 matmuls over 10 shapes twice under oneDNN's creation log, in a fresh process (oneDNN reads its cache
# capacity once, at its first primitive), and prints the cache misses and hits it logged.
_CYCLE_SHAPES = """
import sys
from pipeline import machine
if sys.argv[1] != "default":
    machine.bound_onednn_cache(int(sys.argv[1]))
import torch
w = torch.ones(32, 16, dtype=torch.bfloat16)
with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON_CREATION):
    for _ in range(2):
        for m in range(16, 26):
            torch.ones(m, 32, dtype=torch.bfloat16) @ w
"""


def test_the_onednn_cache_capacity_takes_effect_in_torch():
    """What `bound_onednn_cache` relies on: torch's oneDNN honours the variable set before its first primitive.
    With 4 entries, the second pass over 10 shapes misses every time; with oneDNN's default it hits every time."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import torch

    if not torch.backends.mkldnn.is_available():
        pytest.skip("torch without oneDNN")
    env = {k: v for k, v in os.environ.items() if "PRIMITIVE_CACHE_CAPACITY" not in k}
    root = Path(__file__).resolve().parents[1]

    def counts(capacity: str) -> tuple[int, int]:
        out = subprocess.run([sys.executable, "-c", _CYCLE_SHAPES, capacity], cwd=root, env=env,
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
        return out.count("create:cache_miss"), out.count("create:cache_hit")

    default = counts("default")
    if sum(default) == 0:
        pytest.skip("torch runs these bf16 matmuls without oneDNN on this CPU")
    assert default == (10, 10)
    assert counts("4") == (20, 0)


def test_parallel_test_workers_share_the_cores():
    """`make test`'s workers (tests/conftest.py) each get their share of the cores, unless the user set a count."""
    from conftest import worker_threads

    assert worker_threads({"PYTEST_XDIST_WORKER_COUNT": "2"}, cores=2) == 1
    assert worker_threads({"PYTEST_XDIST_WORKER_COUNT": "2"}, cores=8) == 4
    assert worker_threads({"PYTEST_XDIST_WORKER_COUNT": "3"}, cores=2) == 1
    assert worker_threads({"PYTEST_XDIST_WORKER_COUNT": "2", "OMP_NUM_THREADS": "2"}, cores=2) is None
    assert worker_threads({"PYTEST_XDIST_WORKER_COUNT": "1"}, cores=2) is None and worker_threads({}, cores=2) is None


def test_the_test_session_hook_sets_a_workers_threads(monkeypatch):
    import torch
    from conftest import pytest_configure

    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        monkeypatch.setattr(machine, "thread_count", lambda cpuinfo=None: 4)
        pytest_configure(None)
        assert machine.os.environ["OMP_NUM_THREADS"] == "2" and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
