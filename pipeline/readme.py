"""The README's results block, generated from the committed report so the two cannot disagree.

    python -m pipeline.readme          rewrite the block in README.md from reports/report.md
    python -m pipeline.readme --check  exit 1 if the block differs (what the test suite asserts)

The block sits between `<!-- results:start -->` and `<!-- results:end -->` in README.md and holds the
report's headline, its policy table, the paired comparisons and the cost per stage, copied verbatim (images dropped: the
README links the report for them). `make run` refreshes it after the pipeline.
"""

from __future__ import annotations

import argparse
import re
import sys

from pipeline.params import repo_root

START, END = "<!-- results:start -->", "<!-- results:end -->"
SECTIONS = ("Headline", "Accuracy and behaviour by policy", "Paired comparisons", "Cost per stage")
OPTIONAL = {"Cost per stage"}  # reports written before the section existed lack it
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


def results_block(report: str) -> str:
    """The README block for a report.md text (between the markers, markers excluded)."""
    header = re.search(r"^\| Git commit \| (.*?) \|$", report, flags=re.M)
    date = re.search(r"^\| Date \| (.*?) \|$", report, flags=re.M)
    source = (f"_Generated from `reports/report.md` (run of {date.group(1) if date else '?'}, commit "
              f"{header.group(1) if header else '?'}) by `python -m pipeline.readme`; do not edit by hand._")  # fmt: skip
    parts = [source]
    for title in SECTIONS:
        if title in OPTIONAL and not re.search(rf"^## {re.escape(title)}\b", report, flags=re.M):
            continue
        body = report_section(report, title)
        parts.append(f"#### {title}\n\n{body}" if title != "Headline" else body)
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
