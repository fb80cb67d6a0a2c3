"""Two evaluations of the same questions, paired: accuracy of each, the paired difference and exact McNemar.

For an A/B of two runs that differ in one setting (e.g. the system prompt style: the SFT policy of a
run with `env.prompt: verbose` against one with `compact`, same data, seed and SFT settings), read two
`reports/eval/<policy>_<set>/` folders (samples.jsonl + metrics.json, e.g. one from `git show
<rev>:...`), pair the episodes by question id, and report what a reviewer needs: n, each accuracy with
its Wilson interval, the difference with its paired 95 % interval, the discordant counts and the exact
McNemar p, plus each side's wall time, mean tokens and prompt settings from metrics.json. Questions
present in only one file are counted and left out of the pairing.

    .venv/bin/python bench/compare_episodes.py A_DIR B_DIR --label-a verbose --label-b compact \
        --out bench/results/prompt_ab.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sqlenv.eval.evaluation import paired_comparisons  # noqa: E402
from sqlenv.eval.stats import wilson_interval  # noqa: E402
from sqlenv.report.results import read_records  # noqa: E402
from sqlenv.types import EpisodeRecord  # noqa: E402


def _side(folder: Path) -> tuple[dict[str, EpisodeRecord], dict]:
    samples = folder / "samples.jsonl"
    if not samples.is_file():
        raise FileNotFoundError(f"no samples.jsonl in {folder}")
    records: dict[str, EpisodeRecord] = {}
    for r in read_records(samples):
        if r.question_id in records:
            raise ValueError(f"{samples}: question {r.question_id!r} appears twice")
        records[r.question_id] = r
    metrics = folder / "metrics.json"
    return records, json.loads(metrics.read_text(encoding="utf-8")) if metrics.is_file() else {}


def compare(a_dir: Path, b_dir: Path, label_a: str = "a", label_b: str = "b") -> dict:
    a, a_doc = _side(a_dir)
    b, b_doc = _side(b_dir)
    shared = sorted(set(a) & set(b))
    if not shared:
        raise ValueError(f"{a_dir} and {b_dir} share no question ids")

    def summary(label, records, doc):
        k, n = sum(records[q].correct for q in shared), len(shared)
        low, high = wilson_interval(k, n)
        return {"label": label, "correct": k, "accuracy": k / n, "accuracy_low": low, "accuracy_high": high,
                "mean_tokens": sum(records[q].tokens for q in shared) / n,
                "mean_steps": sum(records[q].steps for q in shared) / n,
                "wall_time_s": doc.get("wall_time_s"), "git_commit": doc.get("git_commit"),
                "env": doc.get("env"), "model": doc.get("model")}  # fmt: skip

    # The report's own pairing (b first, so its difference is b - a), on the questions both sides played.
    row = paired_comparisons({"b": [b[q] for q in shared], "a": [a[q] for q in shared]})[0]
    return {
        "n": len(shared), "only_in_a": len(set(a) - set(b)), "only_in_b": len(set(b) - set(a)),
        "a": summary(label_a, a, a_doc), "b": summary(label_b, b, b_doc),
        "b_minus_a": {"difference": row["difference"], "high": row["difference_high"], "low": row["difference_low"],
                      "method": row["interval_method"], "n": row["n"]},
        "mcnemar": {"only_b_right": row["only_a_correct"], "only_a_right": row["only_b_correct"], "p_exact": row["mcnemar_p"]},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--label-a", default="a")
    parser.add_argument("--label-b", default="b")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    try:
        result = compare(args.a, args.b, args.label_a, args.label_b)
    except (FileNotFoundError, ValueError) as exc:
        print(f"compare_episodes: error: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(result, indent=2, sort_keys=True, default=str) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
