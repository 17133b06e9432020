"""The statement readings measured on hand-labelled real statements (what
benchmarks/statement_readings.py prints and the datasheet shows).

The statements are read from the shared sources (../shared/data: LeetCodeDataset,
LiveCodeBench, CodeContests, Codeforces, APPS, MBPP), one per distinct statement text.
The labels file (benchmarks/statement_readings_labels.jsonl) holds, for a hand-labelled
sample of them, each statement's file, row and fingerprint and the reading a judge of its
platform would apply: only ids and labels, never the statement's text. The sample
(`labelled_sample`) is every statement that a broad net of words around each rule catches
(`NETS`: the rules' candidates, each read by hand: LeetCode's "return any ...",
Codeforces' "in any case", every "error" and "any order" sentence ...) or that a reading
reads anything in, plus 80 drawn with seed 49 from the rest.

Each labelled statement is read by the pipeline's readings (`reading_of`: what
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
"""

from __future__ import annotations

import gzip
import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from microcoder.data import readings
from microcoder.data.sources.common import statement_hash

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SHARED = ROOT.parent / "shared" / "data"
DEFAULT_LABELS = ROOT / "benchmarks" / "statement_readings_labels.jsonl"
"""The hand labels (a file of the repository, not of the installed package)."""
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


# The broad nets: words around each rule, far wider than the rules, whose every catch was
# labelled by hand (the rules' candidates, where a miss would show).
NETS = {
    "tolerance": r"error|within 10|precision|differ[^.]{0,30}by|tolerance|accura",
    "exact_decimals": r"decimal place|digits after|trailing 0|trailing zero|round(?:ed)? (?:off )?to",
    "letter_case": r"any case|case[- ]insensitive|upper ?case or lower ?case|lower ?case or upper ?case|any register|"
                   r"recogni[sz]ed as|letter case|regardless of (?:the )?case",
    "several_answers": r"\bany\b[^.]{0,30}\b(?:of them|valid|correct|possible|such|answer|solution)|multiple (?:answers|"
                       r"solutions)|several (?:answers|solutions)|more than one (?:answer|solution)|"
                       r"(?:return|print|output|find|construct) any",
    "order": r"any order|arbitrary order|order[^.]{0,60}(?:does not|doesn.t|do not|don.t) matter|any sequence",
}
SAMPLE_SEED = 49
SAMPLE_DRAWN = 80


def labelled_sample(statements: list[Statement]) -> list[tuple[str, int]]:
    """(file, row) of the statements the labels must cover: every one a net catches or a
    reading reads something in, and SAMPLE_DRAWN drawn with SAMPLE_SEED from the rest."""
    caught = [s for s in statements if any(re.search(net, s.text, re.IGNORECASE) for net in NETS.values())
              or reading_of(s)]
    keys = {(s.file, s.index) for s in caught}
    rest = [s for s in statements if (s.file, s.index) not in keys]
    drawn = random.Random(SAMPLE_SEED).sample(rest, SAMPLE_DRAWN)
    return [(s.file, s.index) for s in caught + drawn]


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
    order = readings.read_stdin_order(statement.text, statement.outputs)
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


def shared_directory_of(source_paths: list[Path]) -> Path | None:
    """The shared data directory a build read its sources from (the folder that holds a
    labelled file at its relative path), or None."""
    wanted = {*LEETCODE_FILES, *(name for name, _ in CONTEST_FILES), "apps150/APPS_selected150.jsonl", "mbpp/MBPP.jsonl"}
    for path in source_paths:
        for name in wanted:
            if path.as_posix().endswith("/" + name):
                return Path(path.as_posix()[: -len(name) - 1])
    return None


LISTED_UP_TO = 30
"""The datasheet names every problem of a reading that this many problems or fewer have."""


def datasheet_section(problems: list[Any], removals: list[dict], source_paths: list[Path],
                      labels_path: Path = DEFAULT_LABELS) -> list[str]:
    """The datasheet's lines on statement readings: what the corpus's statements were read
    to allow, the evidence that a reading was wrong (two stored outputs for one input in
    a problem read as having one answer; a reference rejected under a checker read from
    its statement), and the readings' precision and recall on the hand-labelled sample
    when the labels and the shared sources are at hand."""
    counts: dict[str, int] = {}
    ids: dict[str, list[str]] = {}
    problem_id = ""

    def count(name: str, flag: Any) -> None:
        counts[name] = counts.get(name, 0) + bool(flag)
        if flag:
            ids.setdefault(name, []).append(problem_id)

    words: dict[str, int] = {}
    for problem in problems:
        checker, problem_id = problem.checker, problem.id
        if checker is None:
            continue
        if checker.float_tolerance is not None:
            count(f"error bound ({checker.float_tolerance_kind})", True)
        count("decimals as printed (exact_decimals)", checker.exact_decimals)
        count("answer words in any letter case (case_insensitive_words)", checker.case_insensitive_words)
        count("every token in any letter case (case_insensitive)", checker.case_insensitive)
        count("each line's tokens in any order (unordered_tokens)", checker.unordered_tokens)
        count("lines in any order (unordered_lines)", checker.unordered_lines)
        count("a count before the free items stays first (leading_count)", checker.leading_count)
        count("result in any order (unordered_levels)", checker.unordered_levels)
        if checker.case_insensitive_words:
            key = "/".join(checker.case_insensitive_words)
            words[key] = words.get(key, 0) + 1
    several = {}
    for removal in removals:
        if removal["reason"] in ("several answers, no checker", "several correct outputs", "interactive"):
            several[removal["reason"]] = several.get(removal["reason"], 0) + 1
    lines = ["## Statement readings", "",
             "What the statements say of how an output may differ from the recorded one "
             "(microcoder/data/readings.py; docs/data_pipeline.md, \"Checkers from statements\").", "",
             "| reading | problems |", "|---|---:|"]
    lines += [f"| {name} | {value} |" for name, value in counts.items() if value]
    lines += [f"| removed at validate: {reason} | {value} |" for reason, value in sorted(several.items())]
    lines += ["", "An error bound is the statement's, or the LeetCode loader's 1e-5 for a float result."]
    listed = {name: sorted(found) for name, found in ids.items() if len(found) <= LISTED_UP_TO}
    if listed:
        lines += ["", f"The problems of each reading that {LISTED_UP_TO} or fewer have:", ""]
        lines += [f"- {name}: {', '.join(found)}" for name, found in listed.items()]
    if words:
        lines += ["", "Answer words whose case is free: " + ", ".join(f"{key} ({value})" for key, value in sorted(words.items())) + "."]

    two_outputs = sorted(problem.id for problem in problems
                         if (problem.metadata.get("dropped_tests") or {}).get("same input, different outputs"))
    strict = sorted((removal["id"], removal["detail"]) for removal in removals
                    if removal["reason"] == "reference fails its tests" and "checker from the statement" in removal["detail"]
                    and removal["detail"].startswith("wrong_answer"))
    lines += ["", "Evidence beyond the words:", "",
              f"- Problems kept, read as having one answer, whose stored tests gave one input two different outputs "
              f"(those tests were dropped; several answers the statement does not say?): {len(two_outputs)}"
              + (": " + ", ".join(two_outputs[:40]) + (" ..." if len(two_outputs) > 40 else "") if two_outputs else "") + ".",
              f"- References rejected as a wrong answer under a checker read from their statement (a reading too "
              f"strict, or a wrong reference): {len(strict)}"
              + (": " + "; ".join(f"{id} ({detail[:100]})" for id, detail in strict[:20]) if strict else "") + ".", ""]
    shared = shared_directory_of(source_paths)
    if shared is None or not labels_path.is_file():
        lines += ["The readings' precision and recall on hand-labelled real statements: not measured here (needs "
                  "benchmarks/statement_readings_labels.jsonl and the shared sources; "
                  "`python benchmarks/statement_readings.py`).", ""]
        return lines
    measurement = measure(shared, labels_path)
    lines += [f"The readings on {measurement.statements} hand-labelled real statements of the shared sources "
              f"(`python benchmarks/statement_readings.py`; the labels were written for the statements the rules were "
              f"written against, so this is agreement on them, not a held-out estimate):", "", table(measurement), ""]
    if measurement.missing:
        lines += [f"Labels whose statement was not found (the shared data changed): {len(measurement.missing)}.", ""]
    return lines
