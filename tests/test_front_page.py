"""The README is a front page of headlines (the style guide's principles 11 and 13): short, its
lines readable, its two commands intact, and every figure it quotes found in the record it
links, so that the front page cannot drift from what was measured."""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
MAX_LINES, MAX_WIDTH = 120, 120
COMMANDS = ("bash scripts/install.sh && microcoder train", "bash scripts/install.sh && python3 -m pytest -q")
"""The default job and the test command (.ci/run runs the README's test command)."""

LINK = re.compile(r"\[[^\]]*\]\(([^)#\s]+)(?:#[^)\s]*)?\)")
FIGURE = re.compile(r"(?<![\w.\-/])[-+]?\d[\d,]*(?:\.\d+)?%?(?![\w/])")
"""A number as a sentence quotes it: 0.069, +0.069, 5,202, 1.5%, 17 (not the digits of a
name such as SmolLM2-135M, a path, or an arXiv id's parts)."""


def records_quoted(text: str) -> list[tuple[str, list[str], list[Path]]]:
    """(paragraph, its figures, the records of results/ it links) for each paragraph or list
    item of `text` that links into results/."""
    blocks = re.split(r"\n(?=- )|\n\s*\n", text)
    quoted = []
    for block in blocks:
        targets = [REPO / target for target in LINK.findall(block) if target.startswith("results/")]
        if targets:
            prose = LINK.sub("", block)
            quoted.append((block, FIGURE.findall(prose), targets))
    return quoted


def missing_figures(text: str) -> list[str]:
    """Each figure of a paragraph that none of the records it links holds."""
    missing = []
    for block, figures, records in records_quoted(text):
        held = "\n".join(record.read_text(encoding="utf-8") for record in records if record.is_file())
        for figure in figures:
            bare = figure.lstrip("+")
            if bare not in held:
                missing.append(f"{figure} (in: {' '.join(block.split())[:80]}...)")
    return missing


def headlines(text: str) -> list[str]:
    section = text.split("\n## Headlines\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^- .*?(?=^- |\Z)", section, re.MULTILINE | re.DOTALL)


def test_the_readme_is_short_and_its_lines_readable():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES
    assert [number for number, line in enumerate(lines, 1) if len(line) > MAX_WIDTH] == []


def test_the_readme_keeps_its_two_commands():
    text = README.read_text(encoding="utf-8")
    assert all(command in text for command in COMMANDS)
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")  # CI runs the README's test command
    assert "bash scripts/install.sh" in ci and "python3 -m pytest -q" in ci


def test_three_to_five_headlines_each_linking_its_record():
    found = headlines(README.read_text(encoding="utf-8"))
    assert 3 <= len(found) <= 5
    for item in found:
        assert any(target.startswith("results/") for target in LINK.findall(item)), item
        assert FIGURE.findall(LINK.sub("", item)), item


def test_every_figure_the_readme_quotes_is_in_the_record_it_links():
    text = README.read_text(encoding="utf-8")
    assert len(records_quoted(text)) >= 5
    assert missing_figures(text) == []


def test_the_figure_check_by_hand(tmp_path, monkeypatch):
    record = tmp_path / "results" / "r.md"
    record.parent.mkdir()
    record.write_text("gain +0.069 (SE 0.025) over 3 seeds; 5,202 rows; 1.5% of problems\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    good = "- **Run** gains +0.069 (SE 0.025) on SmolLM2-135M, 1.5% left ([record](results/r.md#x))."
    assert missing_figures(good) == []
    drifted = "- **Run** gains +0.07 (SE 0.025), 5,203 rows ([record](results/r.md))."
    assert [item.split(" ")[0] for item in missing_figures(drifted)] == ["+0.07", "5,203"]
    assert missing_figures("A paragraph with 42 and no link to the record.") == []
