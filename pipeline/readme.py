"""The README's results block, generated from the committed report so the two cannot disagree.

    python -m pipeline.readme          rewrite the block in README.md from reports/report.md
    python -m pipeline.readme --check  exit 1 if the block differs (what the test suite asserts)

The block sits between `<!-- results:start -->` and `<!-- results:end -->` in README.md and holds, from the
report: its headline (the paired comparison, what it could detect, its domain-level interval), the policy table
cut to the columns a first reader needs (accuracy with its interval, steps, answered), the headline set's
paired comparisons and the transfer to real databases (each policy's accuracy and each agent against the single
shot). The rest (every column, the n50 pairs, hardness, cost, transcripts) stays in the report,
which the block links. Maintainers refresh it with `make reference` after committing a new reference run;
`make run` never touches it.
"""

from __future__ import annotations

import argparse
import re
import sys

from pipeline.params import repo_root

START, END = "<!-- results:start -->", "<!-- results:end -->"
POLICY_SECTION, PAIRS_SECTION = "Accuracy and behaviour by policy", "Paired comparisons"
TRANSFER_SECTION = "Transfer to real databases"
TRANSFER_COLUMNS = ("policy", "n", "accuracy [95 %]", "answered")  # of the report's transfer table
# The policy table's columns the README keeps (the report's header names), and how the README heads them.
POLICY_COLUMNS = {"set": "set", "policy": "policy", "accuracy [Wilson 95 %]": "accuracy [95 % CI]",
                  "mean steps": "mean tool calls", "answered": "answered"}  # fmt: skip
HEADLINE_SET = "n200"
_IMAGE = re.compile(r"^!\[.*\]\(.*\)\s*$")


def report_section(report: str, title: str) -> str:
    """The body of the report's `## <title>` section (its heading may carry the environment mode in parentheses),
    images dropped and subsection headings moved two levels down; ValueError when there is none."""
    match = re.search(rf"^## {re.escape(title)}(?: \([^\n]*\))?\n(.*?)(?=^## |\Z)", report, flags=re.S | re.M)
    if match is None:
        raise ValueError(f"the report has no section '## {title}'")
    # Images are the report's (relative paths); its subsection headings go two levels down, under the README's.
    lines = ["##" + line if line.startswith("### ") else line for line in match.group(1).splitlines()
             if not _IMAGE.match(line)]  # fmt: skip
    return "\n".join(lines).strip()


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def first_table(text: str) -> list[list[str]]:
    """The first markdown table in `text`: header row, then data rows (the separator row dropped)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("|")), None)
    if start is None:
        raise ValueError("no table found")
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        if not set(line) <= set("|-: "):
            rows.append(_cells(line))
    return rows


def _md(rows: list[list[str]]) -> str:
    head, *body = rows
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in body)])


def policy_table(report: str) -> str:
    """The report's policy table with the README's columns only."""
    head, *body = first_table(report_section(report, POLICY_SECTION))
    missing = [c for c in POLICY_COLUMNS if c not in head]
    if missing:
        raise ValueError(f"the report's policy table lacks the column(s) {missing}")
    index = [head.index(c) for c in POLICY_COLUMNS]
    return _md([list(POLICY_COLUMNS.values()), *([row[i] for i in index] for row in body)])


def headline_pairs(report: str) -> str:
    """The report's paired comparisons on the headline set (its table and its significance sentence)."""
    section = report_section(report, PAIRS_SECTION)
    match = re.search(rf"^##### {HEADLINE_SET}\n(.*?)(?=^##### |\Z)", section, flags=re.S | re.M)
    if match is None:
        raise ValueError(f"the report has no paired comparisons on {HEADLINE_SET}")
    return match.group(1).strip()


def transfer_rows(report: str) -> str | None:
    """The report's transfer result cut to accuracy and answered per policy, and each agent against the single shot
    over all hardness levels; the report's own sentence where it has no result (skipped, not run)."""
    try:
        section = report_section(report, TRANSFER_SECTION)
    except ValueError:  # a report from before the transfer stages
        return None
    if not section.lstrip().startswith(("Real databases", "|")):
        return section.split("\n\n")[0]
    head, *body = first_table(section)
    out = [_md([list(TRANSFER_COLUMNS), *([row[head.index(c)] for c in TRANSFER_COLUMNS] for row in body)])]
    tables = [t for t in section.split("\n\n") if t.startswith("| agent |")]
    if tables:
        head, *body = first_table(tables[0])
        # the table repeats the "agent" heading (the agent's name, then its accuracy): pick by position
        index = [0, 3, 4, 5, 8]
        out.append(_md([["agent", "agent accuracy", "single shot", "agent − single shot [95 %]", "McNemar p"],
                        *([row[i] for i in index] for row in body if row[1] == "all")]))  # fmt: skip
    return "\n\n".join(out)


def results_block(report: str) -> str:
    """The README block for a report.md text (between the markers, markers excluded)."""
    header = re.search(r"^\| Git commit \| (.*?) \|$", report, flags=re.M)
    date = re.search(r"^\| Date \| (.*?) \|$", report, flags=re.M)
    source = (f"_Generated by `make reference` from [reports/report.md](reports/report.md) (reference run of "
              f"{date.group(1) if date else '?'}); do not edit by hand._")  # fmt: skip
    parts = [source, report_section(report, "Headline"), policy_table(report),
             f"Paired comparisons on {HEADLINE_SET} (more trained policy first):\n\n" + headline_pairs(report)]
    transfer = transfer_rows(report)
    if transfer is not None and transfer.startswith("|"):
        parts.append("On real databases no stage trained on (the transfer set; the single shot is the base model asked "
                     "once for SQL with the full schema):\n\n" + transfer)  # fmt: skip
    elif transfer is not None:
        parts.append(f"On real databases no stage trained on (the transfer set): {transfer[0].lower()}{transfer[1:]}")
    return "\n\n".join(parts)


def current_block(readme: str) -> str:
    match = re.search(rf"{re.escape(START)}(.*?){re.escape(END)}", readme, flags=re.S)
    if match is None:
        raise ValueError(f"README.md has no {START} … {END} block")
    return match.group(1).strip()


def updated(readme: str, report: str) -> str:
    current_block(readme)  # the markers must exist
    return re.sub(rf"{re.escape(START)}.*?{re.escape(END)}",
                  lambda _: f"{START}\n{results_block(report)}\n{END}", readme, flags=re.S)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when the README block is stale")
    args = parser.parse_args(argv)
    root = repo_root()
    readme, report = root / "README.md", root / "reports" / "report.md"
    if not report.is_file():
        print(f"readme: {report} not found (run the pipeline first)", file=sys.stderr)
        return 1
    text = readme.read_text(encoding="utf-8")
    try:
        new = updated(text, report.read_text(encoding="utf-8"))
    except ValueError as exc:
        print(f"readme: {exc}", file=sys.stderr)
        return 1
    if args.check:
        if new != text:
            print("readme: README.md's results block differs from reports/report.md; run python -m pipeline.readme",
                  file=sys.stderr)  # fmt: skip
            return 1
        return 0
    if new != text:
        readme.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
