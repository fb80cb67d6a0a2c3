"""Replay a reference run's evaluation episodes through two versions of the environment and compare.

Every tool call of every episode in `<run>/reports/eval/*/samples.jsonl` is stepped, in order, through
`SQLEnv` with the run's `env` and `rewards` params (dense rewards, whatever the evaluation itself used), on
the run's questions and databases. Per call the observation, the reward terms earned and `done` are kept; per
episode the reward components, total and verdict. Each code version runs in its own process (its `sqlenv` first
on sys.path); the two dumps must be byte-identical.

    .venv/bin/python experiments/env_replay_40/replay.py --run /work/run39 --before OLD_CHECKOUT --after . \
        --out experiments/env_replay_40/run.json
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import subprocess
import sys
import tempfile


def dump(repo: str, run: str, out: str) -> None:
    sys.path.insert(0, repo)
    import yaml

    from sqlenv.env.environment import EnvConfig, SQLEnv
    from sqlenv.types import Question

    params = yaml.safe_load(open(f"{run}/params.yaml"))
    config = EnvConfig.from_dict({**params["env"], "rewards": dict(params["rewards"])})
    questions = {}
    for name in ("n50", "n200"):
        for line in open(f"{run}/data/questions/{name}.jsonl"):
            d = json.loads(line)
            questions[d["id"]] = d
    env = SQLEnv(f"{run}/data/databases", config)
    rows = []
    for path in sorted(glob.glob(f"{run}/reports/eval/*/samples.jsonl")):
        stage = os.path.basename(os.path.dirname(path))
        for line in open(path):
            sample = json.loads(line)
            env.reset(Question.from_dict(questions[sample["question_id"]]))
            for message in sample["messages"]:
                for call in message.get("tool_calls") or []:
                    fn = call["function"]
                    args = fn["arguments"]
                    try:
                        args = json.loads(args) if isinstance(args, str) else args
                    except json.JSONDecodeError:
                        pass  # the raw string: the env reports it as a malformed call
                    r = env.step(fn["name"], args)
                    rows.append(["call", stage, sample["question_id"], r.observation, sorted(r.rewards.items()), r.done])
            rows.append(["end", stage, sample["question_id"], env.reward_components, env.total_reward, env.correct])
    json.dump(rows, open(out, "w"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", required=True, help="the reference run's workspace (params, data, reports/eval)")
    parser.add_argument("--before", required=True, help="checkout of the code before the change")
    parser.add_argument("--after", required=True, help="checkout of the code after it")
    parser.add_argument("--out", required=True)
    parser.add_argument("--dump", nargs=2, metavar=("REPO", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dump:
        return dump(args.dump[0], args.run, args.dump[1])
    result = {"run": args.run, "sides": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for side in ("before", "after"):
            repo = os.path.abspath(getattr(args, side))
            commit = subprocess.run(["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
            dirty = bool(subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                                        capture_output=True, text=True).stdout.strip())  # fmt: skip
            path = os.path.join(tmp, f"{side}.json")
            subprocess.run([sys.executable, __file__, "--run", args.run, "--before", "-", "--after", "-", "--out", "-",
                            "--dump", repo, path], check=True)  # fmt: skip
            data = open(path, "rb").read()
            rows = json.loads(data)
            result["sides"][side] = {
                "commit": commit, "git_dirty": dirty, "sha256": hashlib.sha256(data).hexdigest(),
                "episodes": sum(r[0] == "end" for r in rows), "calls": sum(r[0] == "call" for r in rows),
                "episodes_clipped_by_bound": sum(r[0] == "end" and r[3].get("bound", 0.0) != 0.0 for r in rows),
            }  # fmt: skip
    result["identical"] = result["sides"]["before"]["sha256"] == result["sides"]["after"]["sha256"]
    text = json.dumps(result, indent=1)
    open(args.out, "w").write(text + "\n")
    print(text)
    sys.exit(0 if result["identical"] else 1)


if __name__ == "__main__":
    main()
