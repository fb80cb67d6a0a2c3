"""`reports/` holds what the DAG writes and nothing else: every file under it is an output, metric or plot of a
dvc.yaml stage (or inside a declared output folder). Investigations live in experiments/, benchmark JSON in
bench/results/, so a user can tell which files a run of theirs rewrites."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def declared_paths(dvc_yaml: dict) -> set[str]:
    """Every outs/metrics/plots path of every stage, `foreach` entries expanded (`${key}`, `${item.x}`)."""
    found: set[str] = set()

    def collect(stage: dict, subst: dict[str, str]) -> None:
        for field in ("outs", "metrics", "plots"):
            for entry in stage.get(field, []):
                path = entry if isinstance(entry, str) else next(iter(entry))
                for name, value in subst.items():
                    path = path.replace("${" + name + "}", value)
                found.add(path.rstrip("/"))

    for stage in dvc_yaml["stages"].values():
        if "foreach" in stage:
            for key, item in stage["foreach"].items():
                collect(stage["do"], {"key": key, **{f"item.{k}": str(v) for k, v in item.items()}})
        else:
            collect(stage, {})
    return found


def undeclared(files: list[str], declared: set[str]) -> list[str]:
    return [f for f in files if not any(f == d or f.startswith(d + "/") for d in declared)]


def test_reports_holds_dag_outputs_only():
    declared = declared_paths(yaml.safe_load((ROOT / "dvc.yaml").read_text()))
    files = subprocess.run(["git", "ls-files", "reports"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()  # fmt: skip
    on_disk = [str(p.relative_to(ROOT)) for p in (ROOT / "reports").rglob("*") if p.is_file()]
    assert files, "the reference run's reports are not committed"
    stray = undeclared(sorted(set(files) | set(on_disk)), declared)
    assert not stray, f"files under reports/ that no dvc.yaml stage writes: {stray[:10]}"


def test_the_check_catches_an_investigation_under_reports():
    declared = declared_paths(yaml.safe_load((ROOT / "dvc.yaml").read_text()))
    assert "reports/eval/sft_n200/samples.jsonl" in declared and "reports/plots" in declared
    assert undeclared(["reports/plots/accuracy.png", "reports/eval/sft_n50/metrics.json"], declared) == []
    assert undeclared(["reports/runs/make_run_39/README.md", "reports/bench/env.json"], declared) == [
        "reports/runs/make_run_39/README.md", "reports/bench/env.json"]
