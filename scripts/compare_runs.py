"""How far a rerun reproduces a run: its non-timing logged values compared one by one.

    python3 scripts/compare_runs.py PUBLISHED RERUN [PUBLISHED RERUN ...]
    python3 scripts/compare_runs.py --grids results/experiments/data/data runs/experiments/data

Each pair is two run folders (metrics.jsonl beside config.yaml). Every (step, key) logged
by both, timing keys aside (verdict.TIMING_KEYS), counts as exactly equal, within 1e-4
(relative to the value's size, at least 1), or different; a key only one run logged counts
as missing. With --grids, every run of the first grid folder (arm/seed-k, shared records
aside) is paired with the same place in the second. Prints one line per pair and the
totals, and lists the held-out values that differ (those decide the verdicts).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from microcoder.experiments.layout import shared_target
from microcoder.experiments.verdict import TIMING_KEYS
from microcoder.training.metrics import METRICS_FILE
from microcoder.training.plots import read_metrics

TOLERANCE = 1e-4


def compare(first: Path, second: Path) -> dict:
    """Counts of equal / close / different / missing non-timing values, and the differing
    held-out values as (step, key, first, second)."""
    rows_a = {row.get("step"): row for row in read_metrics(first / METRICS_FILE)}
    rows_b = {row.get("step"): row for row in read_metrics(second / METRICS_FILE)}
    counts = {"equal": 0, "close": 0, "different": 0, "missing": 0}
    heldout = []
    for step in sorted(set(rows_a) | set(rows_b), key=lambda s: (s is None, s)):
        a, b = rows_a.get(step, {}), rows_b.get(step, {})
        for key in sorted((set(a) | set(b)) - set(TIMING_KEYS) - {"step"}):
            if key not in a or key not in b:
                counts["missing"] += 1
            elif a[key] == b[key]:
                counts["equal"] += 1
            elif (isinstance(a[key], (int, float)) and isinstance(b[key], (int, float))
                  and math.isclose(a[key], b[key], rel_tol=TOLERANCE, abs_tol=TOLERANCE)):
                counts["close"] += 1
            else:
                counts["different"] += 1
            if key.startswith("heldout_accuracy") and a.get(key) != b.get(key):
                heldout.append((step, key, a.get(key), b.get(key)))
    return {**counts, "heldout": heldout}


def pairs_of_grids(first: Path, second: Path) -> list[tuple[Path, Path]]:
    pairs = []
    for metrics in sorted(first.glob(f"*/seed-*/{METRICS_FILE}")):
        run = metrics.parent
        if shared_target(run) is None and (second / run.relative_to(first) / METRICS_FILE).is_file():
            pairs.append((run, second / run.relative_to(first)))
    return pairs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grids", action="store_true", help="the two folders are grids: pair their runs by place")
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args(argv)
    if len(args.folders) % 2:
        parser.error("give folders in pairs: FIRST SECOND")
    pairs = list(zip(args.folders[::2], args.folders[1::2]))
    if args.grids:
        pairs = [pair for first, second in pairs for pair in pairs_of_grids(first, second)]
    totals = {"equal": 0, "close": 0, "different": 0, "missing": 0}
    for first, second in pairs:
        result = compare(first, second)
        for key in totals:
            totals[key] += result[key]
        print(f"{first} vs {second}: " + ", ".join(f"{result[key]} {key}" for key in totals))
        for step, key, a, b in result["heldout"]:
            print(f"  step {step} {key}: {a} vs {b}")
    print(f"{len(pairs)} pairs: " + ", ".join(f"{totals[key]} {key}" for key in totals)
          + f" (non-timing values; close: within {TOLERANCE:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
