"""The statement readings measured on real statements: precision and recall per rule and per source.

    python benchmarks/statement_readings.py [--shared ../shared/data] [--labels benchmarks/statement_readings_labels.jsonl] [--min 0.95]

How the sample was labelled and what is compared: microcoder/data/reading_measure.py.
Exit status 1 when a label's statement is not found (the shared data changed) or any rule
is below --min on precision or recall over every source together; 2 without the shared data.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, the repo root is not on the path

from microcoder.data.reading_measure import DEFAULT_LABELS, DEFAULT_SHARED, RULES, below, measure, read_labels, table  # noqa: E402,F401

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", type=Path, default=DEFAULT_SHARED)
    parser.add_argument("--labels", type=Path, default=DEFAULT_LABELS)
    parser.add_argument("--min", type=float, default=0.95)
    parser.add_argument("--smoke", action="store_true", help="a quick check that it runs (exit 0 without the shared data)")
    args = parser.parse_args(argv)
    if not args.shared.is_dir():
        print(f"no shared data at {args.shared}: nothing to measure")
        return 0 if args.smoke else 2
    measurement = measure(args.shared, args.labels)
    counts = {rule: score.labelled for (rule, source), score in measurement.scores.items() if source == "all"}
    print(f"{measurement.statements} labelled statements; labels per rule: {dict(counts)}")
    print(table(measurement))
    for line in measurement.errors:
        print("  " + line)
    for line in measurement.missing:
        print(f"  MISSING {line} (the shared data changed)")
    low = below(measurement, args.min)
    if low:
        print(f"below {args.min}: {', '.join(low)}")
    return 1 if low or measurement.missing else 0


if __name__ == "__main__":
    sys.exit(main())
