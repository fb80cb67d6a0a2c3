"""Guards dvc.yaml's deps: every project file a stage's script imports (transitively, lazy imports included)
is covered by one of the stage's deps (a sqlenv/ subpackage folder or a file), so an edit to it reruns the stage."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from import_graph import ROOT, imported_names, package_of

PACKAGES = ("sqlenv", "pipeline", "stages")


def _module_file(name: str) -> Path | None:
    base = ROOT / Path(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package_inits(name: str) -> list[Path]:
    parts = name.split(".")
    return [f for i in range(1, len(parts)) if (f := ROOT / Path(*parts[:i]) / "__init__.py").is_file()]


def _imported_modules(path: Path) -> set[str]:
    """Dotted names of the project modules `path` imports anywhere in it (functions included)."""
    found = imported_names(ast.parse(path.read_text(encoding="utf-8")), package_of(path))
    return {name for name in found if name.split(".")[0] in PACKAGES and _module_file(name)}


def import_closure(entry: Path) -> set[str]:
    """Every project file (relative path) loaded by importing `entry`, with the packages' __init__ files."""
    seen: set[Path] = set()
    todo = [entry]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imported_modules(path):
            todo += [_module_file(name), *_package_inits(name)]
    return {str(p.relative_to(ROOT)) for p in seen}


def stage_commands() -> dict[str, tuple[str, list[str]]]:
    """stage name (foreach stages by their template) -> (script path, deps without interpolations)."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    out = {}
    for name, stage in stages.items():
        body = stage.get("do", stage)
        module = re.search(r"python -m (stages\.\w+)", body["cmd"]).group(1)
        deps = [d for d in body.get("deps", []) if "${" not in d]
        out[name] = (module.replace(".", "/") + ".py", deps)
    return out


def uncovered(script: str, deps: list[str]) -> list[str]:
    closure = import_closure(ROOT / script)
    return sorted(f for f in closure if not any(f == d or f.startswith(d.rstrip("/") + "/") for d in deps))


@pytest.mark.parametrize("stage", list(stage_commands()))
def test_every_imported_project_file_is_a_dep(stage):
    script, deps = stage_commands()[stage]
    assert not uncovered(script, deps), f"dvc.yaml stage {stage} lacks deps {uncovered(script, deps)}"


@pytest.mark.parametrize("removed, missing", [("sqlenv/env", "sqlenv/env/sandbox.py"),
                                              ("pipeline/io.py", "pipeline/io.py"),
                                              ("sqlenv/files.py", "sqlenv/files.py")])
def test_a_removed_dep_is_caught(removed, missing):
    script, deps = stage_commands()["prepare"]
    assert removed in deps and missing in import_closure(ROOT / script)
    assert missing in uncovered(script, [d for d in deps if d != removed])


def test_only_the_grpo_stages_read_rewards():
    """`-S rewards.mode=binary` (the dense-vs-binary ablation) reruns GRPO and what follows it, never the
    random or base evaluations: no other stage lists the rewards section."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    readers = sorted(name for name, stage in stages.items()
                     if any(str(p).split(".")[0] == "rewards" for p in stage.get("do", stage).get("params", [])))
    assert readers == ["grpo_phase1", "grpo_phase2"]
