#!/bin/bash
# What ran (the reference workspace of ../make_run_46/ first checked out at 863f47a: `git stash; git fetch /work/main main;
# git checkout -B main FETCH_HEAD`, so dvc.lock and reports/ are that run's), under the shared CPU lock.
cd /tmp/refrun/main
export PATH=/work/main/.venv/bin:$PATH PYTHONPATH=/tmp/refrun/main
lscpu > /tmp/sweep/lscpu.txt
start=$(date +%s)
echo "start $(date -u +%FT%TZ) $(git rev-parse --short HEAD)"
/usr/bin/time -v dvc exp run -n beta0 -S grpo.beta=0.0
rc=$?
echo "rc=$rc end $(date -u +%FT%TZ) wall=$(( $(date +%s) - start ))s"
