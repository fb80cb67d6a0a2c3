"""Guards the layering: each part of sqlenv/ imports only the parts below it (no circle, no arrow up), train and
eval never import each other, sqlenv/ never imports mlflow, dvc or the glue, and pipeline/ never imports stages/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from import_graph import ROOT, imported_names, package_of

PACKAGE = ROOT / "sqlenv"
FOUNDATION = {"types", "files", "provenance", "chat_templates", "prompt_lookup", "sampling", "kv_cache", "decode",
              "rendering", "episodes", "episode_loop", "devices", "failures"}
# What each part of sqlenv/ may import (besides itself and the standard/third-party libraries), bottom up.
ALLOWED: dict[str, set[str]] = {
    "__init__": set(),
    "types": set(),
    "files": set(),
    "provenance": set(),
    "chat_templates": set(),
    "dtype": set(),
    "devices": set(),
    "prompt_lookup": set(),
    "sampling": set(),
    "kv_cache": set(),
    "decode": {"prompt_lookup", "sampling", "kv_cache"},
    "env": {"types"},
    "rendering": {"decode", "env"},
    "episodes": {"types", "env", "failures"},
    "episode_loop": {"types", "decode", "sampling", "prompt_lookup", "env", "rendering", "episodes"},
    "failures": {"types", "env"},
    "data": {"types", "files", "env"},
    "models": {"types", "files", "provenance", "chat_templates"},
    "train": FOUNDATION | {"env", "data"},
    "eval": FOUNDATION | {"env", "data"},
    "report": FOUNDATION | {"env", "data", "eval"},
    "serve": FOUNDATION | {"env", "data"},
    "cli": FOUNDATION | {"env", "data", "models", "train", "eval", "report", "serve"},
    "__main__": {"cli"},
}
FORBIDDEN_ROOTS = {"mlflow", "dvc", "pipeline", "stages"}
MODULES = sorted(PACKAGE.rglob("*.py"))


def part_of(path: Path) -> str:
    """The part of sqlenv/ a file belongs to: its subpackage, or its own name for a top-level module."""
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def violations(source: str, part: str, package: str = "sqlenv") -> list[str]:
    """The imports of `source` (a module of `part`) that break the layering."""
    bad = []
    for name in imported_names(ast.parse(source), package):
        root, *rest = name.split(".")
        if root in FORBIDDEN_ROOTS:
            bad.append(name)
        elif root == "sqlenv" and rest:
            target = rest[0]
            if target in ALLOWED and target != part and target not in ALLOWED[part]:
                bad.append(name)
    return sorted(bad)


def test_every_module_belongs_to_a_known_part():
    assert {part_of(p) for p in MODULES} == set(ALLOWED)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_imports_only_downwards(path):
    bad = violations(path.read_text(encoding="utf-8"), part_of(path), package_of(path))
    assert not bad, f"{path.relative_to(ROOT)} ({part_of(path)}) imports {bad}"


def test_glue_never_imports_the_stages():
    for path in sorted((ROOT / "pipeline").glob("*.py")):
        names = imported_names(ast.parse(path.read_text(encoding="utf-8")), "pipeline")
        assert not [n for n in names if n.split(".")[0] == "stages"], path


@pytest.mark.parametrize(
    "source, part, bad",
    [
        ("import mlflow", "env", ["mlflow"]),
        ("from dvc.api import params_show", "data", ["dvc.api", "dvc.api.params_show"]),
        ("def f():\n    import pipeline.io", "eval", ["pipeline.io"]),
        ("import importlib\nimportlib.import_module('mlflow.tracking')", "report", ["mlflow.tracking"]),
        ("from sqlenv.eval.rollout import run_episodes", "train", ["sqlenv.eval.rollout", "sqlenv.eval.rollout.run_episodes"]),
        ("from sqlenv.train import grpo", "eval", ["sqlenv.train", "sqlenv.train.grpo"]),
        ("from sqlenv.data.oracle import play", "env", ["sqlenv.data.oracle", "sqlenv.data.oracle.play"]),
        ("from sqlenv.report.markdown import render_report", "eval", ["sqlenv.report.markdown",
                                                                     "sqlenv.report.markdown.render_report"]),
        ("from sqlenv.models import prepare_base_model", "train", ["sqlenv.models", "sqlenv.models.prepare_base_model"]),
        ("from sqlenv.env import prompts\nfrom sqlenv.types import Question\nimport json", "data", []),
        ("from . import rollout", "eval", []),
    ],
)
def test_the_rule_catches_an_arrow_that_runs_up(source, part, bad):
    assert violations(source, part, "sqlenv." + part) == bad
