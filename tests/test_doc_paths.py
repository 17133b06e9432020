"""Every repository path a doc, a docstring or a comment names exists, so a reader who follows
one finds it. The experiment record (results/experiments) and fixtures are data, not prose."""

from __future__ import annotations

import ast
import re
import subprocess
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
