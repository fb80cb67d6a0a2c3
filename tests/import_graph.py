"""What a module imports, read from its syntax tree: shared by the layering and the dvc-deps tests."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_of(path: Path) -> str:
    """The dotted package a file's relative imports resolve against (the package itself for __init__.py)."""
    dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return dotted if path.name == "__init__.py" else dotted.rpartition(".")[0]


def imported_names(tree: ast.AST, package: str) -> set[str]:
    """Dotted names imported anywhere in the tree (functions included), relative imports resolved, with
    `from pkg import name` also giving `pkg.name` (it may be a submodule), and `import_module("x")` calls."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
            "import_module", "__import__"
        ) and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            names.add(node.args[0].value)
    return names
