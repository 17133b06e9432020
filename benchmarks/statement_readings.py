"""The statement readings measured on real statements: precision and recall per rule and per source.

    python benchmarks/statement_readings.py [--shared ../shared/data] [--labels benchmarks/statement_readings_labels.jsonl]

The statements are read from the shared sources (../shared/data: LeetCodeDataset,
LiveCodeBench, CodeContests, Codeforces, APPS, MBPP), one per distinct statement text.
The labels file (benchmarks/statement_readings_labels.jsonl) holds, for a hand-labelled
sample of them, each statement's file, row and fingerprint and the reading a judge of its
platform would apply: only ids and labels, never the statement's text. The sample is every
statement that a broad net of words around each rule catches (the rules' candidates,
read by hand: LeetCode's "return any ...", Codeforces' "in any case", every "error" and
"any order" sentence ...) plus a seeded random sample of the rest.

Each labelled statement is read by the pipeline's readings (`reading_of`, what
microcoder/data/readings.py and `stdin_checker` give) and compared rule by rule:

- tolerance: "<value> <absolute|relative|either>" (stdin and call)
- exact_decimals: true (stdin)
- letter_case: the answer words whose case is free, comma-separated, or "*" for every
  token (stdin)
- several_answers: true (stdin and call)
- stdin_order: "lines" or "tokens" (stdin)
- result_order: true (call)

A reading is a true positive when it equals the label, a false positive when it fires
with another value or none is labelled, a false negative when a label is missed.
Exit status 1 when a label's statement is not found (the shared data changed) or any rule
is below --min (0.95) on precision or recall over every source together.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, the repo root is not on the path

from microcoder.data import readings
from microcoder.data.sources.common import statement_hash

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SHARED = ROOT.parent / "shared" / "data"
DEFAULT_LABELS = Path(__file__).resolve().parent / "statement_readings_labels.jsonl"
RULES = ("tolerance", "exact_decimals", "letter_case", "several_answers", "stdin_order", "result_order")
LEETCODE_FILES = ("leetcodedataset/LeetCodeDataset-v0.3.1-test.jsonl.gz", "leetcodedataset/LeetCodeDataset-v0.2.0-train.jsonl.gz",
                  "leetcodedataset/LeetCodeDataset-v0.2.0-test.jsonl.gz")
CONTEST_FILES = (("livecodebench-rllm/lcb_train.json", "livecodebench"), ("livecodebench-rllm/lcb_test_private.json", "livecodebench"),
                 ("livecodebench-rllm/codecontests_test.json", "codecontests"),
                 ("livecodebench-rllm/codeforces_test.json", "codeforces"))


@dataclass
class Statement:
    source: str
    file: str
    index: int
    kind: str
    text: str
    outputs: list[str] = field(default_factory=list)

    @property
    def sha1(self) -> str:
        return statement_hash(self.text)


def _outputs(tests: Any) -> list[str]:
    """The expected outputs of a record's tests, in any of the shared formats."""
    if isinstance(tests, str):
        try:
            tests = json.loads(tests)
        except json.JSONDecodeError:
            return []
    if isinstance(tests, dict):
        return [output for output in tests.get("outputs", []) if isinstance(output, str)]
    outputs = []
    for test in tests if isinstance(tests, list) else []:
        output = test.get("output") if isinstance(test, dict) else None
        if isinstance(output, list) and len(output) == 1:
            output = output[0]
        if isinstance(output, str):
            outputs.append(output)
    return outputs


def shared_statements(shared: Path) -> Iterator[Statement]:
    """Every statement of the shared sources, the first of each distinct text only."""
    seen: set[str] = set()

    def records() -> Iterator[Statement]:
        for name in LEETCODE_FILES:
            with gzip.open(shared / name, "rt", encoding="utf-8") as handle:
                for index, line in enumerate(handle):
                    record = json.loads(line)
                    meta = record.get("meta") or {}
                    text = record.get("problem_description") or meta.get("question_title") or record.get("query") or ""
                    yield Statement("leetcodedataset", name, index, "call", text)
        for name, source in CONTEST_FILES:
            for index, record in enumerate(json.loads((shared / name).read_text(encoding="utf-8"))):
                kind = "call" if (record.get("starter_code") or "").strip() else "stdin"
                yield Statement(source, name, index, kind, record["problem"], _outputs(record.get("tests")))
        name = "apps150/APPS_selected150.jsonl"
        for index, line in enumerate((shared / name).read_text(encoding="utf-8").splitlines()):
            record = json.loads(line)
            kind = "call" if record["starter_code"].strip() else "stdin"
            yield Statement("apps", name, index, kind, record["description"], _outputs(record.get("test_list")))
        name = "mbpp/MBPP.jsonl"
        for index, line in enumerate((shared / name).read_text(encoding="utf-8").splitlines()):
            yield Statement("mbpp", name, index, "call", json.loads(line)["text"])

    for statement in records():
        if statement.sha1 not in seen:
            seen.add(statement.sha1)
            yield statement


def reading_of(statement: Statement) -> dict[str, Any]:
    """What the pipeline's readings make of one statement, in the labels' terms."""
    found: dict[str, Any] = {}
    tolerance = readings.read_tolerance(statement.text)
    if tolerance is not None:
        found["tolerance"] = f"{tolerance.value:g} {tolerance.kind}"
    if readings.read_several_answers(statement.text, statement.kind):
        found["several_answers"] = True
    if statement.kind == "call":
        if readings.read_result_order(statement.text):
            found["result_order"] = True
        return found
    if tolerance is None and readings.read_exact_decimals(statement.text):
        found["exact_decimals"] = True
    letter_case = readings.read_letter_case(statement.text, statement.outputs)
    if letter_case is not None:
        found["letter_case"] = ",".join(letter_case.words) or "*"
    order = readings.read_stdin_order(statement.text)
    if order is not None:
        found["stdin_order"] = "lines" if order.lines else "tokens"
    return found


def read_labels(path: Path) -> list[dict[str, Any]]:
    labels = []
    for row, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        record = json.loads(line)
        for name in ("file", "index", "sha1", "labels"):
            if name not in record:
                raise ValueError(f"{path}: row {row}: field '{name}' missing")
        unknown = set(record["labels"]) - set(RULES)
        if unknown:
            raise ValueError(f"{path}: row {row}: field 'labels': unknown rule {sorted(unknown)[0]!r}")
        labels.append(record)
    return labels


@dataclass
class Score:
    true_positive: int = 0
    false_positive: int = 0
    false_negative: int = 0
    labelled: int = 0

    @property
    def precision(self) -> float | None:
        fired = self.true_positive + self.false_positive
        return self.true_positive / fired if fired else None

    @property
    def recall(self) -> float | None:
        wanted = self.true_positive + self.false_negative
        return self.true_positive / wanted if wanted else None


@dataclass
class Measurement:
    scores: dict[tuple[str, str], Score]
    """(rule, source or "all") -> its score."""
    errors: list[str]
    """One line per reading that differs from its label."""
    missing: list[str]
    statements: int


def measure(shared: Path, labels_path: Path) -> Measurement:
    by_key = {(s.file, s.index): s for s in shared_statements(shared)}
    scores: dict[tuple[str, str], Score] = {}
    errors, missing = [], []
    labels = read_labels(labels_path)
    for record in labels:
        statement = by_key.get((record["file"], record["index"]))
        if statement is None or statement.sha1 != record["sha1"]:
            missing.append(f"{record['file']}#{record['index']}")
            continue
        got = reading_of(statement)
        for rule in RULES:
            wanted, read = record["labels"].get(rule), got.get(rule)
            for source in (statement.source, "all"):
                score = scores.setdefault((rule, source), Score())
                score.labelled += wanted is not None
                if read is not None and read == wanted:
                    score.true_positive += 1
                else:
                    score.false_positive += read is not None
                    score.false_negative += wanted is not None
            if read != wanted:
                errors.append(f"{rule}: {statement.file}#{statement.index}: read {read!r}, labelled {wanted!r}")
    return Measurement(scores, errors, missing, len(labels))


def _shown(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def table(measurement: Measurement) -> str:
    sources = sorted({source for _, source in measurement.scores if source != "all"})
    lines = ["| rule | source | labelled | read right | read wrong | missed | precision | recall |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for rule in RULES:
        for source in ["all", *sources]:
            score = measurement.scores.get((rule, source))
            if score is None or (source != "all" and not (score.labelled or score.false_positive)):
                continue
            lines.append(f"| {rule} | {source} | {score.labelled} | {score.true_positive} | {score.false_positive} | "
                         f"{score.false_negative} | {_shown(score.precision)} | {_shown(score.recall)} |")
    return "\n".join(lines)


def below(measurement: Measurement, minimum: float) -> list[str]:
    """The rules whose precision or recall over every source is below `minimum`."""
    low = []
    for rule in RULES:
        score = measurement.scores.get((rule, "all"), Score())
        for name, value in (("precision", score.precision), ("recall", score.recall)):
            if value is not None and value < minimum:
                low.append(f"{rule} {name} {value:.3f}")
    return low


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", type=Path, default=DEFAULT_SHARED)
    parser.add_argument("--labels", type=Path, default=DEFAULT_LABELS)
    parser.add_argument("--min", type=float, default=0.95)
    args = parser.parse_args(argv)
    if not args.shared.is_dir():
        print(f"no shared data at {args.shared}", file=sys.stderr)
        return 2
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
