"""Every command the README shows works as written: each line of its ```bash blocks is parsed by the program it
names and validated (a `-S` knob applied as DVC applies it and loaded as a stage loads params.yaml; a `sqlenv`
command run or parsed; a `make` target's recipe), and a line no check knows fails the suite. The knobs table names
real keys. `make run` itself, end to end, is the smoke DAG's first step (tests/test_smoke_dag.py)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dvc_params import params_with

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SPIDER = ROOT.parent / "shared" / "spider"


def readme_commands(text: str) -> list[str]:
    """The command lines of the ```bash blocks (comments and blank lines dropped)."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```bash" if not inside else False
            continue
        if inside:
            command = re.split(r"\s{2,}#", line)[0].strip()  # a trailing comment after two spaces
            if command and not command.startswith("#"):
                lines.append(command)
    return lines


COMMANDS = readme_commands(README.read_text())


def test_the_readme_shows_the_users_commands():
    assert {"make run", "make test", "dvc exp run -S grpo.beta=0.04", "dvc exp show"} <= set(COMMANDS)


VENV = Path(sys.executable).parent.parent
INSTALLED = [f"VENV={VENV}", "-o", f"{VENV}/.model", "-o", f"{VENV}/.deps"]  # this venv, its install stamps done


def _make_dry_run(target: str, *make_args: str, cwd: Path = ROOT) -> list[str]:
    """The commands `make <target> MAKE_ARGS` would run in `cwd` (make's recursion variables dropped: under
    `make test` they would add directory lines)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    out = subprocess.run(["make", "-n", "--no-print-directory", target, *make_args], cwd=cwd, env=env,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return [line for line in out.splitlines() if line.strip()]


def check_make(argv: list[str], tmp_path: Path) -> None:
    (target,) = argv[1:]
    recipe = _make_dry_run(target, *INSTALLED)
    if target == "run":
        # The pipeline as a DVC experiment and nothing else: no step that rewrites the README or docs.
        assert recipe and all(line.startswith("dvc exp run ") for line in recipe), recipe
    elif target == "test":
        assert any(line.startswith("pytest ") for line in recipe), recipe
    elif target == "install":  # into a venv that does not exist yet: the install it would run
        fresh = "\n".join(_make_dry_run("install", f"VENV={tmp_path / 'venv'}"))
        assert '-e ".[test,serve]"' in fresh, fresh
    else:
        assert recipe, f"make {target} runs nothing"


def check_dvc(argv: list[str], tmp_path: Path) -> None:
    from dvc.cli import parse_args

    args = parse_args(argv[1:])  # DVC's own parser: an unknown flag or subcommand raises
    values = getattr(args, "set_param", None) or []
    if values:
        loaded = params_with(values, tmp_path)
        for value in values:
            key, raw = value.split("=", 1)
            section, name = key.split(".", 1)
            assert loaded[section][name] == yaml.safe_load(raw), value


def check_mlflow(argv: list[str], tmp_path: Path) -> None:
    import mlflow.cli

    assert argv[1] == "ui"
    command = mlflow.cli.cli.get_command(None, "ui")
    context = command.make_context("ui", argv[2:])
    # The store the stages write: sqlite:///mlflow.db at the repository root (pipeline.tracking), no server set.
    assert context.params["backend_store_uri"] == "sqlite:///mlflow.db"


def check_source(argv: list[str], tmp_path: Path) -> None:
    assert argv[1] == ".venv/bin/activate"
    assert (Path(sys.executable).parent / "activate").is_file()  # what the Makefile's venv holds


def check_sqlenv(argv: list[str], tmp_path: Path) -> None:
    from pipeline.cli import EVAL, PUBLISH
    from sqlenv.cli import _parser

    args = _parser({"eval": EVAL, "publish": PUBLISH}).parse_args(argv[1:])
    if args.command == "eval":
        return  # needs a trained model; `sqlenv eval` itself is exercised on a tiny model in test_eval_cli.py
    if args.command == "serve":
        return  # serves until stopped: tests/test_serve.py runs it for real, with the README's client snippet
    if not SPIDER.is_dir():
        pytest.skip("../shared/spider is not beside the repository")
    exe = Path(sys.executable).parent / "sqlenv"
    proc = subprocess.run([str(exe), *argv[1:]], cwd=ROOT, input="quit\n", capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    if args.command == "query":
        assert '"error": null' in proc.stdout or '"rows"' in proc.stdout, proc.stdout


CHECKS = {"make": check_make, "dvc": check_dvc, "mlflow": check_mlflow, "source": check_source, "sqlenv": check_sqlenv}


@pytest.mark.parametrize("command", COMMANDS)
def test_each_readme_command_parses_and_validates(command, tmp_path):
    argv = shlex.split(command)
    assert argv[0] in CHECKS, f"the README shows `{command}`, which no test exercises"
    CHECKS[argv[0]](argv, tmp_path)


def test_make_run_rewrites_no_documentation_in_the_previous_makefile_shape(tmp_path):
    """The `make run` check above fails on the recipe that rewrote the README after the pipeline."""
    makefile = (ROOT / "Makefile").read_text()
    old = makefile.replace("\tdvc exp run -n run-$$(date +%Y%m%d-%H%M%S)\n",
                           "\tdvc exp run -n run-$$(date +%Y%m%d-%H%M%S)\n\tpython -m pipeline.readme\n", 1)  # fmt: skip
    assert old != makefile
    (tmp_path / "Makefile").write_text(old)
    out = _make_dry_run("run", *INSTALLED, cwd=tmp_path)
    assert not all(line.startswith("dvc exp run ") for line in out)


def test_the_knobs_table_names_real_keys(tmp_path):
    """Each backticked dotted key in the README's knob table exists in params.yaml (and `-S` accepts it)."""
    lines = README.read_text().splitlines()
    start = lines.index("| knob | what it changes | reruns |") + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    keys = sorted({k for row in rows for k in re.findall(r"`([a-z_0-9]+\.[a-z_0-9.]+)`", row.split("|")[1])})
    assert "grpo.beta" in keys and len(keys) >= 8
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for key in keys:
        node = params
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, f"{key} is not in params.yaml"
            node = node[part]
        params_with([f"{key}={yaml.safe_dump(node, default_flow_style=True).strip().removesuffix('...').strip()}"],
                          tmp_path)  # fmt: skip
