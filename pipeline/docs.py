"""The documentation's house rules, checked: the README is a front door, the notebook lives elsewhere.

    python -m pipeline.docs            list every breach in README.md, CHANGELOG.md and docs/*.md; exit 1 if any

Rules (../DEVELOPERS' "The README is for users; the notebook is for us"):
- README.md has at most `README_MAX_LINES` lines.
- Outside tables (lines starting with `|`), no page names an investigation (an `experiments/<id>` folder's
  id), a session or issue number ("session 42", "issue 15", "#15") or a commit hash (7-40 hex characters
  with a digit and a letter). Tables of records may hold all three. A link's target is not prose: the
  evidence of a sentence is linked as `[evidence](experiments/<id>/)`, and the reader sees the link text.
- Every repository path a page names exists (README.md, docs/*.md and the investigations' index; not
  CHANGELOG.md, whose entries name the files of their day). Checked: each relative link target, resolved
  against the page's folder, with its `#anchor` matched against the target page's headings; and each
  backticked path without spaces whose first part is a top-level entry of the repository (`sqlenv/...`,
  `tests/...`, `experiments/...`), with a cited test (`tests/x.py::test_name[param]`) found as a `def`
  in its file. Skipped: placeholders and globs (`<stage>`, `*`, `{a,b}`, `...`), paths outside the
  repository (`../shared/spider`) and what the pipeline writes rather than Git holds (`models/`, `data/`,
  `mlflow.db`, ...: `PIPELINE_OUTPUTS`).
- The README's `make run` times are docs/performance.md's: the table headed `RUN_TIMES_HEADER` appears in
  both, row for row and cell for cell, and every duration the README's opening section states appears in
  that table.

What it does not check: whether a sentence is true. The README's numbers come from the committed report
(`pipeline.reference`), and tests tie the commands it shows to the code.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline.params import repo_root

README_MAX_LINES = 250

# The one table of `make run` times: docs/performance.md holds it, the README copies it cell for cell.
RUN_TIMES_HEADER = "| CPU class (`lscpu`, flags) | dtype `auto` picks | `make run`, every stage computed |"
RUN_TIMES_PAGE = "docs/performance.md"

# Top-level names the pipeline or the user's machine writes (DVC outs, MLflow's store, the venv, `sqlenv
# eval`'s and `sqlenv publish`'s folders): a doc may name them although a clone does not hold them.
PIPELINE_OUTPUTS = frozenset({"models", "data", "mlflow.db", "mlruns", "mlartifacts", "checkpoints", "publish",
                              "eval", ".venv", ".cache", ".dvc"})  # fmt: skip
# Folders of experiments/ that are notebook material but not investigations (no plan, no row of results).
NOTEBOOK_FOLDERS = frozenset({"upstream"})

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
    if not home.is_dir():
        return set()
    return {p.name for p in home.iterdir() if p.is_dir() and p.name not in NOTEBOOK_FOLDERS}


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


# ---------------------------------------------------------------------------------------------------------
# Paths a page names
# ---------------------------------------------------------------------------------------------------------

_LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")  # [text](target "title")
_CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_PLACEHOLDER = re.compile(r"[<>*?{}…]|\.\.\.|\bN\b")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"[^\w\- ]", "", text.lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a markdown page (GitHub's numbering of repeated headings included)."""
    seen: dict[str, int] = {}
    out = set()
    for line in _outside_fences(text):
        if m := _HEADING.match(line[1]):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def _outside_fences(text: str):
    """(line number, line) of the lines outside ``` fenced blocks."""
    inside = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            inside = not inside
            continue
        if not inside:
            yield number, line


def _top_level(root: Path) -> set[str]:
    return {p.name for p in root.iterdir()} - PIPELINE_OUTPUTS if root.is_dir() else set()


def _missing_test(path: Path, name: str) -> bool:
    """Whether `path` (a Python file) defines no function or class `name` (a parametrised id stripped)."""
    name = name.split("[", 1)[0]
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b", path.read_text(encoding="utf-8"),
                     re.M) is None  # fmt: skip


def path_breaches(text: str, page: str, root: Path, *, spans: bool = True) -> list[Breach]:
    """Every repository path `text` (the page at `page`, relative to `root`) names that does not exist:
    link targets, and with `spans` the backticked paths too."""
    found: list[Breach] = []
    here = (root / page).parent
    top = _top_level(root)
    for number, line in _outside_fences(text):
        last_file = None  # `tests/x.py::test_a`, `::test_b`: a member named alone belongs to the file before it
        for m in _LINK.finditer(line):
            target = m.group(1).strip("<>")
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I) or _PLACEHOLDER.search(target):
                continue  # https:, mailto:, ...; a placeholder
            where, _, anchor = target.partition("#")
            dest = (here / where).resolve() if where else (root / page).resolve()
            try:
                inside = dest.relative_to(root.resolve())
            except ValueError:
                continue  # outside the repository (../shared/...)
            if where and inside.parts and inside.parts[0] in PIPELINE_OUTPUTS:
                continue
            if not dest.exists():
                found.append(Breach(page, number, f"link to a missing path '{target}'", line))
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text(encoding="utf-8")):
                found.append(Breach(page, number, f"link to a missing heading '{target}'", line))
        for m in _CODE_SPAN.finditer(_LINK_TARGET.sub("]()", line)) if spans else ():
            span = m.group(1).strip()
            if span.startswith("::") and last_file is not None and re.fullmatch(r"::[\w\[\]\-.]+", span):
                if _missing_test(last_file, span[2:]):
                    found.append(Breach(page, number, f"names a missing test or function '{span}' of "
                                        f"{last_file.relative_to(root)}", line))  # fmt: skip
                continue
            if re.search(r"\s", span) or "/" not in span or _PLACEHOLDER.search(span):
                continue
            path, _, member = span.partition("::")
            path = re.sub(r":\d+(?:-\d+)?$", "", path)  # file.py:120
            first = path.split("/", 1)[0]
            if first not in top:
                continue  # not a repository path (a module-relative name, an output, ../shared, a URL path)
            dest = root / path
            if not dest.exists():
                found.append(Breach(page, number, f"names a missing path '{path}'", line))
                continue
            last_file = dest if dest.suffix == ".py" else last_file
            if member and dest.suffix == ".py" and _missing_test(dest, member.split("::")[-1]):
                found.append(Breach(page, number, f"names a missing test or function '{span}'", line))
    return found


# A source path in a YAML comment: params.yaml and dvc.yaml point readers at the code behind a knob.
_YAML_PATH = re.compile(r"(?<![\w./-])((?:sqlenv|pipeline|stages|tests|bench|docs|configs)/[\w./-]*\w)")


def yaml_comment_breaches(root: Path) -> list[Breach]:
    """Every source path a comment of params.yaml, params-smoke.yaml or dvc.yaml names that does not exist."""
    found = []
    for name in ("params.yaml", "params-smoke.yaml", "dvc.yaml"):
        path = root / name
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            _, hash_, comment = line.partition("#")
            for m in _YAML_PATH.finditer(comment) if hash_ else ():
                if not _PLACEHOLDER.search(m.group(1)) and not (root / m.group(1)).exists():
                    found.append(Breach(name, number, f"comment names a missing path '{m.group(1)}'", line))
    return found


# ---------------------------------------------------------------------------------------------------------
# The README's run times against docs/performance.md's
# ---------------------------------------------------------------------------------------------------------

# A duration as prose states it, with its qualifier: "55 min", "about 2 h 50 min", "over an hour", "1.5 hours",
# "54 min 38 s". The qualifier is part of the claim: "about an hour" is not "over an hour".
_DURATION = re.compile(r"(?:\b(?:about|over|under|around|roughly|nearly|almost|less than|more than|up to)\s+)?"
                       r"(?:\b(?:an|\d+(?:\.\d+)?)\s*(?:h|hours?)\b(?:\s*\d+\s*min\b)?"
                       r"|\b\d+(?:\.\d+)?\s*min(?:utes)?\b(?:\s*\d+\s*s\b)?)", re.I)  # fmt: skip


def run_times_table(text: str) -> list[str] | None:
    """The rows (header included, stripped) of the table headed `RUN_TIMES_HEADER`; None if absent."""
    lines = [line.strip() for line in text.splitlines()]
    if RUN_TIMES_HEADER not in lines:
        return None
    start = lines.index(RUN_TIMES_HEADER)
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def run_time_breaches(readme: str, performance: str) -> list[Breach]:
    """The README's `make run` table equals docs/performance.md's cell for cell, and its opening section
    states no duration that table does not hold."""
    found: list[Breach] = []
    ours, theirs = run_times_table(readme), run_times_table(performance)
    if theirs is None:
        return [Breach(RUN_TIMES_PAGE, 1, f"no table headed {RUN_TIMES_HEADER!r}", "")]
    if ours is None:
        found.append(Breach("README.md", 1, f"no table headed {RUN_TIMES_HEADER!r} (copy it from {RUN_TIMES_PAGE})",
                            ""))  # fmt: skip
    else:
        line = [l.strip() for l in readme.splitlines()].index(RUN_TIMES_HEADER) + 1
        if len(ours) != len(theirs):
            found.append(Breach("README.md", line, f"run-times table has {len(ours)} rows, {RUN_TIMES_PAGE} "
                                f"{len(theirs)}", ""))  # fmt: skip
        for i, (a, b) in enumerate(zip(ours, theirs)):
            if _cells(a) != _cells(b):
                found.append(Breach("README.md", line + i, f"run-times row differs from {RUN_TIMES_PAGE}'s: {b}", a))
    cells = " ".join(" ".join(_cells(r)) for r in theirs[2:])
    opening = readme.split("\n## ", 1)[0]
    for number, text in enumerate(opening.splitlines(), 1):
        for m in _DURATION.finditer(text):
            if m.group(0) not in cells:
                found.append(Breach("README.md", number, f"duration '{m.group(0)}' is not in {RUN_TIMES_PAGE}'s "
                                    "run-times table", text))  # fmt: skip
    return found


def path_pages(root: Path) -> list[Path]:
    """The pages whose named paths are checked: the README, docs/*.md and the investigations' index."""
    found = [root / "README.md", *sorted((root / "docs").glob("*.md")), root / "experiments" / "README.md"]
    return [p for p in found if p.is_file()]


def check(root: Path) -> list[Breach]:
    ids = investigation_ids(root)
    found: list[Breach] = []
    readme = root / "README.md"
    readme_text = readme.read_text(encoding="utf-8")
    lines = len(readme_text.splitlines())
    if lines > README_MAX_LINES:
        found.append(Breach("README.md", lines, f"{lines} lines, more than {README_MAX_LINES}", ""))
    for page in pages(root):
        found += breaches(page.read_text(encoding="utf-8"), str(page.relative_to(root)), ids)
    for page in path_pages(root):
        # The investigations' index describes the layout of past days in prose: only its links must resolve.
        spans = page.parent.name != "experiments"
        found += path_breaches(page.read_text(encoding="utf-8"), str(page.relative_to(root)), root, spans=spans)
    found += yaml_comment_breaches(root)
    performance = root / RUN_TIMES_PAGE
    found += run_time_breaches(readme_text, performance.read_text(encoding="utf-8") if performance.is_file() else "")
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
