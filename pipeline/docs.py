"""The documentation's house rules, checked: the README is a front door, the notebook lives elsewhere.

    python -m pipeline.docs            list every breach in README.md, CHANGELOG.md and docs/*.md; exit 1 if any

Rules (../DEVELOPERS' "The README is for users; the notebook is for us"):
- README.md has at most `README_MAX_LINES` lines.
- Outside tables (lines starting with `|`), no page names an investigation (an `experiments/<id>` folder's
  id), a session or issue number ("session 42", "issue 15", "#15") or a commit hash (7-40 hex characters
  with a digit and a letter). Tables of records may hold all three. A link's target is not prose: the
  evidence of a sentence is linked as `[evidence](experiments/<id>/)`, and the reader sees the link text.

What it does not check: whether a sentence is true. The README's numbers come from the committed report
(`pipeline.readme`), and tests tie the commands it shows to the code.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline.params import repo_root

README_MAX_LINES = 250

_LINK_TARGET = re.compile(r"\]\([^)]*\)")  # markdown link targets: [text](target)
_AUTOLINK = re.compile(r"<https?://[^>]*>|https?://\S+")
_SESSION = re.compile(r"(?<![\w-])(?:sessions?|issues?|stops?)\s+#?\d+\b|(?<![\w&])#\d+\b", re.I)
_HEX = re.compile(r"\b[0-9a-f]{7,40}\b")


@dataclass(frozen=True)
class Breach:
    path: str
    line: int
    what: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}: {self.text.strip()[:120]}"


def investigation_ids(root: Path) -> set[str]:
    """The ids of the investigation folders (experiments/<id>/)."""
    home = root / "experiments"
    return {p.name for p in home.iterdir() if p.is_dir()} if home.is_dir() else set()


def _prose_lines(text: str):
    """(line number, text) of the lines a rule applies to: not table rows; link targets and URLs blanked."""
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("|"):
            continue
        yield number, _AUTOLINK.sub("", _LINK_TARGET.sub("]()", line))


def breaches(text: str, path: str, ids: set[str]) -> list[Breach]:
    """Every breach of the prose rules in one page's text."""
    found = []
    names = re.compile(r"(?<![\w/])(" + "|".join(sorted(map(re.escape, ids), key=len, reverse=True)) + r")(?![\w])") \
        if ids else None  # fmt: skip
    for number, line in _prose_lines(text):
        if names and (m := names.search(line)):
            found.append(Breach(path, number, f"investigation id '{m.group(1)}' in prose", line))
        if m := _SESSION.search(line):
            found.append(Breach(path, number, f"session/issue number '{m.group(0)}' in prose", line))
        for m in _HEX.finditer(line):
            token = m.group(0)
            if re.search(r"\d", token) and re.search(r"[a-f]", token):
                found.append(Breach(path, number, f"commit hash '{token}' outside a table", line))
                break
    return found


def pages(root: Path) -> list[Path]:
    """The user-facing pages the rules apply to."""
    found = [root / "README.md", root / "CHANGELOG.md", *sorted((root / "docs").glob("*.md"))]
    return [p for p in found if p.is_file()]


def check(root: Path) -> list[Breach]:
    ids = investigation_ids(root)
    found: list[Breach] = []
    readme = root / "README.md"
    lines = len(readme.read_text(encoding="utf-8").splitlines())
    if lines > README_MAX_LINES:
        found.append(Breach("README.md", lines, f"{lines} lines, more than {README_MAX_LINES}", ""))
    for page in pages(root):
        found += breaches(page.read_text(encoding="utf-8"), str(page.relative_to(root)), ids)
    return found


def main(argv: list[str] | None = None) -> int:
    root = repo_root()
    found = check(root)
    for breach in found:
        print(breach, file=sys.stderr)
    readme_lines = len((root / "README.md").read_text(encoding="utf-8").splitlines())
    print(f"docs: README.md {readme_lines} lines; {len(pages(root))} pages checked; {len(found)} breaches")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
