"""The committed reference results, re-rendered with today's report code (maintainers: `make reference`).

    python -m pipeline.reference           re-render reports/report.md, then README.md's results block
    python -m pipeline.reference --check   exit 1 if either differs from what it would write

A reference run's files are committed (dvc.lock, reports/eval/*, curves, stage metrics, report, plots) and the
README's numbers are read from them, never from whoever last ran `make run`. When the report's code changes
(a new statistic beside the headline, say), this renders reports/report.md again from exactly those committed
results, without the models: a clean clone has none, and the reference run already checked every result
against its models (the fingerprints it recorded stand). Its header (date, machine, commit of the run) is
kept, with a `Rendered` row naming the commit whose code rendered it. The plots are kept as they are.

The questions' held-out domains come from data/questions/, which the reference run left in the workspace (else
`dvc repro prepare` writes it in ~20 s); a result whose questions differ from those is stale and stops it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from pipeline import paths
from pipeline.params import load_params, repo_root
from pipeline.readme import updated
from pipeline.tracking import git_commit
from sqlenv.eval.harness import load_questions_file
from sqlenv.report.markdown import render_report
from sqlenv.report.results import HELD_OUT_SETS, INDOMAIN, SETS, Live, curve_files, load_inputs, stage_costs, stage_documents
from sqlenv.report.taxonomy import taxonomy_section
from sqlenv.report.transfer import load_transfer, transfer_section

PLOT_KEYS = ("accuracy", "steps", "hardness", "sft_loss", "grpo_reward")
_HEADER_ROW = re.compile(r"^\| (?P<key>[^|]+?) \| (?P<value>.*?) \|$")


def committed_header(report: str) -> dict[str, str]:
    """The report's header table (the rows before its first `## ` section), as it was written."""
    head = report.split("\n## ", 1)[0]
    rows = {}
    for line in head.splitlines():
        m = _HEADER_ROW.match(line)
        if m and m.group("key").strip() and not set(m.group("key")) <= {"-"}:
            rows[m.group("key").strip()] = m.group("value")
    if "Git commit" not in rows:
        raise ValueError("reports/report.md has no header table with a 'Git commit' row")
    return rows


def committed_live(eval_dir: Path, mode: str) -> Live:
    """Each policy's model fingerprint as its committed results record it (one per policy), and the live
    question sets and domains from data/questions/."""
    fingerprints: dict[str, str | None] = {}
    for metrics in sorted(eval_dir.glob("*/metrics.json")):
        doc = json.loads(metrics.read_text(encoding="utf-8"))
        model = doc.get("model") if isinstance(doc.get("model"), dict) else {}
        fp = model.get("fingerprint")
        if fingerprints.get(doc["policy"], fp) != fp:
            raise ValueError(f"the committed {doc['policy']} results record two models: {fingerprints[doc['policy']]}, {fp}")
        fingerprints[doc["policy"]] = fp
    # the in-domain probe's file is absent where the committed run predates it
    questions = {s: load_questions_file(paths.questions_file(s), allow_empty=True) for s in SETS
                 if s != INDOMAIN or paths.questions_file(s).is_file()}  # fmt: skip
    groups = {q.id: q.group for qs in questions.values() for q in qs}
    return Live(fingerprints, {s: [q.id for q in qs] for s, qs in questions.items()}, mode, groups)


def rerender() -> str:
    """reports/report.md as today's code renders the committed results (run from the repository root)."""
    params = load_params()
    mode = f"schema={params.env.schema} answer={params.env.answer}"
    eval_dir = paths.report_dir("eval")
    missing = [str(paths.questions_file(s)) for s in HELD_OUT_SETS if not paths.questions_file(s).is_file()]
    if missing:
        raise FileNotFoundError(f"{', '.join(missing)} missing: run `dvc repro prepare` first (~20 s)")
    inputs = load_inputs(eval_dir, curve_files(paths.REPORTS), committed_live(eval_dir, mode))
    if inputs.stale:
        raise ValueError(f"committed results do not match data/questions or each other: {inputs.stale}")
    report = paths.REPORTS / "report.md"
    header = committed_header(report.read_text(encoding="utf-8"))
    sha, dirty = git_commit()
    header["Rendered"] = f"{sha[:10]}{' (uncommitted changes)' if dirty else ''} (`make reference`, from the committed results)"
    training = {"grpo_phase1": params.grpo_phase1.max_completion_length,
                "grpo_phase2": params.grpo_phase2.max_completion_length}  # fmt: skip
    plots = {k: f"plots/{k}.png" for k in PLOT_KEYS if (paths.REPORTS / "plots" / f"{k}.png").is_file()}
    transfer = transfer_section(load_transfer(paths.report_dir("transfer")))  # as the report stage renders them
    return render_report(inputs, header, plots, training, stage_costs(stage_documents(paths.REPORTS)), transfer,
                         taxonomy_section(inputs.results))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when report or README would change")
    args = parser.parse_args(argv)
    os.chdir(repo_root())
    report, readme = paths.REPORTS / "report.md", Path("README.md")
    try:
        text = rerender()
        new_readme = updated(readme.read_text(encoding="utf-8"), text)
    except (ValueError, FileNotFoundError) as exc:
        print(f"reference: {exc}", file=sys.stderr)
        return 1
    old = report.read_text(encoding="utf-8")
    strip = lambda t: re.sub(r"^\| Rendered \|.*\n", "", t, flags=re.M)  # noqa: E731  (the commit moves on)
    if args.check:
        stale = [n for n, a, b in (("reports/report.md", strip(old), strip(text)),
                                   ("README.md", readme.read_text(encoding="utf-8"), new_readme)) if a != b]  # fmt: skip
        for name in stale:
            print(f"reference: {name} differs from the committed results as today's code renders them", file=sys.stderr)
        return 1 if stale else 0
    report.write_text(text, encoding="utf-8")
    readme.write_text(new_readme, encoding="utf-8")
    print(f"reference: rendered {report} and README.md's results block from the committed results")
    return 0


if __name__ == "__main__":
    sys.exit(main())
