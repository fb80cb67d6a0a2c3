"""Guards the layering: no module under sqlenv/ imports mlflow, dvc or the pipeline/stages glue."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sqlenv"
FORBIDDEN = {"mlflow", "dvc", "pipeline", "stages"}
MODULES = sorted(PACKAGE.rglob("*.py"))


def _imported_roots(tree: ast.AST) -> set[str]:
    roots = set()
    for node in ast.walk(tree):  # walk: imports inside functions count too
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
            "import_module", "__import__"
        ) and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            roots.add(node.args[0].value.split(".")[0])
    return roots


def test_package_has_modules():
    assert len(MODULES) >= 5


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_imports_no_glue(path):
    bad = _imported_roots(ast.parse(path.read_text(encoding="utf-8"))) & FORBIDDEN
    assert not bad, f"{path.relative_to(PACKAGE.parent)} imports {sorted(bad)}"


@pytest.mark.parametrize(
    "source, bad",
    [
        ("import mlflow", {"mlflow"}),
        ("from dvc.api import params_show", {"dvc"}),
        ("def f():\n    import pipeline.io", {"pipeline"}),
        ("import importlib\nimportlib.import_module('mlflow.tracking')", {"mlflow"}),
        ("from . import prompts\nimport json", set()),
    ],
)
def test_detector_catches_forbidden_imports(source, bad):
    assert _imported_roots(ast.parse(source)) & FORBIDDEN == bad
