"""The whole DAG on the smoke profile (tiny world, tiny random model): repro, a no-op repro, a GRPO sweep, and a
run in the other environment mode (full schema, SQL answers scored by EX)."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STAGES = {"prepare", "prepare_model", "sft_data", "sft", "grpo_phase1", "grpo_phase2", "report"}


def test_smoke_dag(tmp_path):
    out = tmp_path / "smoke.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.smoke", "--keep", str(tmp_path / "repo"), "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=1500,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    result = json.loads(out.read_text())
    ran = set(result["stages_run"])
    assert STAGES <= ran
    assert {"evaluate@random_n200", "evaluate@random_n50", "evaluate@sft_n50", "evaluate@grpo_phase2_n50"} <= ran
    assert "grpo_phase1" in result["sweep_stages_run"] and "prepare" not in result["sweep_stages_run"]
    assert {"sft_data", "sft", "grpo_phase2", "report"} <= set(result["modes_stages_run"])
    assert "prepare" not in result["modes_stages_run"]
    report = (tmp_path / "repo" / "reports" / "report.md").read_text()
    assert "grpo_phase2" in report and "| Environment mode | schema=full answer=sql |" in report
    assert "SQL answers, accuracy = execution accuracy (EX)" in report
