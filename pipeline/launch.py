"""Training stages in several processes: the stage re-runs itself under `accelerate launch`.

With `launch.num_processes: N > 1` in params.yaml, `python -m stages.sft` (what dvc.yaml runs) does
not train itself; it runs

    accelerate launch --num_processes N --num_machines 1 \
        (--config_file <launch.config> | --multi_gpu --mixed_precision no --dynamo_backend no) \
        -m stages.sft <its arguments>

and exits with that command's status. Each launched process has RANK/WORLD_SIZE set
(`sqlenv.train.processes`), so it trains instead of launching again. accelerate's `--multi_gpu` is its
torchrun launcher: on a machine without CUDA it starts CPU processes that join over gloo (accelerate's
MULTI_CPU), which is how `make test` runs SFT and GRPO in two processes; on GPUs the same command is
DDP over NCCL. A `launch.config` file (e.g. the shipped `configs/accelerate/deepspeed_zero2.yaml`)
replaces `--multi_gpu` and says everything else (DeepSpeed, FSDP, mixed precision); the command line's
process count still wins. The file is a dependency of the stage only through its name in params.yaml:
edit it under a new name to rerun.

`model.dtype: auto` is measured once, in the process that launches, and inherited by the launched ones
(`sqlenv.dtype`), so they cannot disagree. In the launched processes: all train (the collectives need every process); only the main one opens
the stage's MLflow run and writes outputs (`sqlenv.train.processes.is_main_process`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pipeline import paths
from pipeline.params import LaunchParams, load_params
from pipeline.stage import run_stage
from pipeline.tracking import stage_run
from sqlenv.dtype import choose_dtype
from sqlenv.train.processes import is_main_process, launched

log = logging.getLogger("launch")


def launch_command(module: str, args: Sequence[str], launch: LaunchParams) -> list[str]:
    """The `accelerate launch` command that runs `python -m module args` in `launch.num_processes` processes."""
    if launch.num_processes < 1:
        raise ValueError(f"launch.num_processes must be >= 1, got {launch.num_processes}")
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    if accelerate is None:
        raise FileNotFoundError("launch.num_processes > 1 needs the `accelerate` command (pip install accelerate)")
    cmd = [accelerate, "launch", "--num_processes", str(launch.num_processes), "--num_machines", "1"]
    if launch.config:
        config = Path(launch.config)
        if not config.is_file():
            raise FileNotFoundError(f"launch.config: no accelerate config file at {config}")
        cmd += ["--config_file", str(config)]
    else:
        cmd += ["--multi_gpu", "--mixed_precision", "no", "--dynamo_backend", "no"]
    return [*cmd, "-m", module, *args]


def run_training_stage(name: str, module: str, main: Callable[[], None]) -> None:
    """`run_stage(name, main)`, or — when params ask for several processes and this is not one of them —
    the same module under `accelerate launch`, exiting with its status."""

    def launch_or_train() -> None:
        params = load_params()
        launch = params.launch
        if launch.num_processes == 1 or launched():
            main()
            return
        cmd = launch_command(module, sys.argv[1:], launch)
        # Measured once here and inherited (SQLENV_DTYPE_CHOICE), so every process computes in one dtype;
        # each sets its threads from the cores it shares with the others (LOCAL_WORLD_SIZE).
        choose_dtype(params.model.dtype, paths.MODELS / "base")
        log.info("%d processes: %s", launch.num_processes, " ".join(cmd))
        code = subprocess.call(cmd, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
        if code:
            print(f"{name}: error: the launched processes failed (exit status {code})", file=sys.stderr)
            sys.exit(code)

    run_stage(name, launch_or_train)


@contextlib.contextmanager
def main_stage_run(stage: str, params: dict[str, Any]) -> Iterator[Any]:
    """`tracking.stage_run` in the main training process; nothing (yields None) in the other processes of a
    launched run, which train alongside and leave every record to the main one."""
    if not is_main_process():
        yield None
        return
    with stage_run(stage, params) as run:
        yield run
