"""Guards bench/bench_env.py and the machine facts every benchmark and stage records (bench/bench_machine.py,
pipeline/machine.py): the JSON holds what the README quotes, says which commit and which CPU made it, and the CPU
facts tell apart two CPUs that share a model name."""

import json

from fixtures_env import spider_dir  # noqa: F401

from bench_scripts import load_bench

from pipeline import machine

# /proc/cpuinfo's first lines, as `pipeline.machine` reads them, on two machines that both call themselves
# "AMD EPYC" family 25 model 17 (flags shortened): the hypervisor passes AVX-512 BF16 through on one and not on
# the other. The first list goes on to a second processor with other flags: only the first is read.
EPYC_AVX2 = [
    ("processor", "0"), ("vendor_id", "AuthenticAMD"), ("cpu family", "25"), ("model", "17"),
    ("model name", "AMD EPYC"), ("flags", "fpu sse sse2 fma avx f16c avx2 bmi2"), ("", ""),
    ("processor", "1"), ("vendor_id", "AuthenticAMD"), ("flags", "fpu fma avx2 avx512f avx512_bf16"),
]  # fmt: skip
EPYC_BF16 = [
    ("processor", "0"), ("vendor_id", "AuthenticAMD"), ("cpu family", "25"), ("model", "17"),
    ("model name", "AMD EPYC"), ("flags", "fpu fma avx2 avx512f avx512_bf16 avx512_vnni"),
]  # fmt: skip


def test_cpu_facts_tell_apart_two_cpus_of_one_name(monkeypatch):
    avx2, bf16 = machine.cpu_isa(EPYC_AVX2), machine.cpu_isa(EPYC_BF16)
    assert avx2 == {"vendor": "AuthenticAMD", "family": "25", "model": "17", "matmul_flags": ["avx2", "fma"]}
    assert bf16 == {**avx2, "matmul_flags": ["avx2", "fma", "avx512f", "avx512_bf16"]}  # only the flags differ
    assert machine.cpu_isa([]) == {}
    # What a stage's MLflow tags and metrics.json say (`facts`, `summary`), and a benchmark's JSON (`record`).
    tags = {}
    for lines in (EPYC_AVX2, EPYC_BF16):
        monkeypatch.setattr(machine, "cpuinfo", lambda lines=lines: lines)
        tags[len(tags)] = machine.facts()
        assert machine.summary()["cpu_isa"] == tags[len(tags) - 1]["system/cpu_isa"]
        assert load_bench("bench_machine").record()["cpu"] == machine.cpu_isa(lines)
    assert tags[0]["system/cpu_model"] == tags[1]["system/cpu_model"] == "AMD EPYC"
    assert (tags[0]["system/cpu_isa"], tags[1]["system/cpu_isa"]) == (
        "AuthenticAMD 25/17: avx2 fma", "AuthenticAMD 25/17: avx2 fma avx512f avx512_bf16")


def test_bench_env_reports_both_workloads_and_where_it_ran(spider_dir, tmp_path):  # noqa: F811
    bench = load_bench("bench_env")
    out = tmp_path / "env.json"
    assert bench.main(["--spider-dir", str(spider_dir), "--rounds", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    for key in ("git_commit", "git_dirty", "cpu_model", "cpu", "nproc", "machine", "loadavg_before", "loadavg_after",
                "query_ratio", "sandbox_ratio", "env_overhead_us_per_step", "target_query_ratio"):  # fmt: skip
        assert key in result, key
    assert result["questions"] > 500 and result["mixed"]["queries"] == 2 * result["mixed"]["questions"]
    # the env does more than raw sqlite3 on the same statement, whatever the machine
    assert result["query_ratio"] > 1.0 and result["mixed"]["query_ratio"] > 1.0


def test_bench_env_refuses_a_folder_without_spider(tmp_path, capsys):
    assert load_bench("bench_env").main(["--spider-dir", str(tmp_path)]) == 2
    assert "no Spider data" in capsys.readouterr().err
