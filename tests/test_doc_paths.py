"""Every repository path a doc, a docstring or a comment names exists, so a reader who follows
one finds it. The experiment record (results/experiments) and fixtures are data, not prose."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PATH = re.compile(r"(?<![\w./-])((?:microcoder|configs|docs|benchmarks|scripts|tests|examples|results)/[\w./-]*[\w/])(?![\w*<{])")
SKIPPED = ("results/experiments/", "tests/fixtures/")


def prose_of(path: Path) -> str:
    """A Markdown file whole; a Python file's docstrings and comments."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        return text
    docstrings = [ast.get_docstring(node) or "" for node in ast.walk(ast.parse(text))
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    comments = [line for line in text.splitlines() if line.strip().startswith("#")]
    return "\n".join(docstrings + comments)


def named_paths(text: str) -> set[str]:
    return {match.group(1).rstrip("/.") for match in PATH.finditer(text)}


def test_every_named_repository_path_exists():
    files = subprocess.run(["git", "ls-files", "*.md", "*.py", "*.toml"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split()
    missing = {}
    for name in files:
        if name.startswith(SKIPPED) or not (REPO / name).exists():
            continue
        gone = sorted(path for path in named_paths(prose_of(REPO / name) if not name.endswith(".toml")
                                                   else (REPO / name).read_text()) if not (REPO / path).exists())
        if gone:
            missing[name] = gone
    assert missing == {}


def test_the_path_pattern_by_hand():
    assert named_paths("see `docs/formats.md` and microcoder/data/amplify.py.") == {"docs/formats.md",
                                                                                  "microcoder/data/amplify.py"}
    # Patterns and placeholders name no one file.
    assert named_paths("tests/test_integrations_verl*.py, configs/<preset>.yaml") == set()


LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.MULTILINE)


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def broken_links(name: str) -> list[str]:
    """A page's relative Markdown links whose file, or whose heading after '#', is not there."""
    page = REPO / name
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, fragment = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(target)
        elif fragment and linked.suffix == ".md" and fragment not in {
                anchor(heading) for heading in HEADING.findall(linked.read_text(encoding="utf-8"))}:
            broken.append(target)
    return broken


def test_every_relative_link_of_the_front_pages_the_docs_and_the_record_lands():
    pages = subprocess.run(["git", "ls-files", "README.md", "docs/*.md", "results/*.md"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()
    pages = [name for name in pages if "/" not in name.removeprefix("docs/").removeprefix("results/")
             and (REPO / name).exists()]  # results/experiments is written by `experiment report`
    assert "README.md" in pages and "results/README.md" in pages
    broken = {name: gone for name in pages if (gone := broken_links(name))}
    assert broken == {}


def test_the_link_check_by_hand(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Time limits (`validate`)\n")
    (tmp_path / "docs" / "b.md").write_text("[ok](a.md) [ok](a.md#time-limits-validate) [ok](#here)\n"
                                            "[no file](c.md) [no heading](a.md#speed) [web](https://x.org/a.md)\n## Here\n")
    assert broken_links("docs/b.md") == ["c.md", "a.md#speed"]
