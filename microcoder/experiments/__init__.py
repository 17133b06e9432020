"""Experiment grids: the paper's comparisons as arms x seeds of `microcoder train` runs.

`spec.py` reads a spec, `runner.py` runs (and resumes) its grid, `report.py` draws each
spec's figure (mean and band over seeds, one colour per arm) and writes its numbers.
The runner and reporter call the trainer and the metrics reader; they add no training code.
"""
