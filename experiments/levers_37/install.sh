#!/bin/bash
# pip's install of the project's test deps into a fresh venv, with and without byte-compiling, then the import
# of the stage modules in each venv (twice: the second shows whether anything was cached).
set -e
cd /tmp/inst
for mode in compile no-compile; do
  rm -rf .venv && python3 -m venv .venv
  flag=""; [ $mode = no-compile ] && flag="--no-compile"
  /usr/bin/time -v -o /tmp/lev/install_$mode.time .venv/bin/python -m pip install --quiet --disable-pip-version-check $flag -c requirements.lock -e ".[test]" > /tmp/lev/install_$mode.log 2>&1
  for i in 1 2; do
    /usr/bin/time -v -o /tmp/lev/import_${mode}_$i.time .venv/bin/python -c "import stages.grpo, stages.evaluate, stages.sft, stages.prepare, pipeline.tracking, trl, peft, mlflow, dvc.repo"
  done
done
env | grep -E "^PYTHONDONTWRITEBYTECODE" > /tmp/lev/env.txt
git -C /tmp/inst rev-parse HEAD > /tmp/lev/install_commit.txt
