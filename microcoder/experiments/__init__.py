"""Experiment grids: the paper's comparisons as arms x seeds of `microcoder train` runs.

Running: `spec.py` reads a spec, `runner.py` runs (and resumes) its grid, `sharing.py`
decides which runs are the same run (a control shared between grids, a published run
restored), `layout.py` reads a grid's run folders.
Reporting: `analysis.py` turns metrics rows into numbers and `verdict.py` holds the rule
that scores a finding (both pure), `findings.py` makes a row per finding of a grid,
`figures.py` draws, `pages.py` writes the markdown,
`report.py` does all three per grid, and `publish.py` copies reported grids into the
record (`report --record`), the only writer of it.
The runner and reporter call the trainer and the metrics reader; they add no training code.
"""
