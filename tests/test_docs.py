"""docs/ says how things work and stays true without dates: a measurement, with its date and
command, belongs to the record (results/), history to git, and what is not done to the
README. This test reads every page of docs/ for the marks of the other three."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from microcoder.data.livecodebench import RELEASE_WINDOWS

REPO = Path(__file__).resolve().parent.parent

DATE = re.compile(r"(?<![\d-])20\d\d-\d\d(?:-\d\d)?(?!\d)")
PHRASES = re.compile(r"not measured|previous protocol|earlier protocol|lack of time|no time left"
                     r"|\bTODO\b|\bFIXME\b|\bto-do\b|\bto do:", re.IGNORECASE)

# Dates that are facts of the data a page describes, not of when something was measured or
# changed: LiveCodeBench's release windows (read from the code, so the page's table is the
# code's) and the dates inside example rows and source ranges.
WINDOW_DATES = {day for window in RELEASE_WINDOWS.values() for day in window}
DATA_DATES = {
    "docs/evaluation.md": WINDOW_DATES,
    "docs/formats.md": {"2024-08-04", "2025-02-15"},  # an example row's date, a contest_date's format
    "docs/data_pipeline.md": {"2024-08-04", "2025-03-30"},  # LeetCodeDataset v0.3.1's estimated_date range
}


def offences(name: str, text: str) -> list[str]:
    """Each line of a page carrying a date that is not the data's, or a to-do or history phrase."""
    allowed = DATA_DATES.get(name, set())
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        marks = [date for date in DATE.findall(line) if date not in allowed] + PHRASES.findall(line)
        if marks:
            found.append(f"{name}:{number}: {', '.join(marks)} | {line.strip()}")
    return found


def test_docs_hold_no_dates_no_history_and_no_to_dos():
    pages = subprocess.run(["git", "ls-files", "docs/*.md"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split()
    assert pages, "no pages under docs/"
    found = [offence for name in pages if (REPO / name).exists()
             for offence in offences(name, (REPO / name).read_text(encoding="utf-8"))]
    assert found == [], "move these to results/ (dated), to git (history) or to the README (not done):\n" + \
        "\n".join(found)


def test_the_marks_by_hand():
    page = ("Measured 2026-12-01 at load 4.\n"
            "Not measured for lack of time.\n"
            "It is not done (TODO).\n"
            "the grid of the previous protocol\n"
            "a window ends 2025-04-30\n"
            "to do: say what a cut response is\n"
            "what to do with a cut response is in the table\n")  # plain English, not a to-do
    assert [line.split(":")[1] for line in offences("docs/x.md", page)] == ["1", "2", "3", "4", "5", "6"]
    # The data's own dates pass on the page that describes that data; nothing else does.
    assert offences("docs/evaluation.md", "| `v6` | 2025-02-01 | 2025-04-30 |") == []
    assert offences("docs/evaluation.md", "measured 2026-12-01") != []
    assert WINDOW_DATES >= {"2025-02-01", "2025-04-30", "2023-05-01"}
