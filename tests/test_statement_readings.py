"""The statement readings on real statements: every rule's precision and recall over the
hand-labelled sample (benchmarks/statement_readings_labels.jsonl) stays at or above 0.95
(benchmarks/statement_readings.py prints the table). Skipped without ../shared."""

import pytest

from microcoder.data.reading_measure import DEFAULT_LABELS, DEFAULT_SHARED, RULES, below, measure, read_labels

pytestmark = pytest.mark.skipif(not DEFAULT_SHARED.is_dir(), reason="no ../shared/data")


@pytest.fixture(scope="module")
def measurement():
    return measure(DEFAULT_SHARED, DEFAULT_LABELS)


def test_every_label_finds_its_statement(measurement):
    assert not measurement.missing


def test_no_rule_is_below_095_on_precision_or_recall(measurement):
    assert not below(measurement, 0.95), "\n".join(measurement.errors)


def test_every_rule_has_labelled_positives_and_the_sample_has_negatives():
    labels = read_labels(DEFAULT_LABELS)
    for rule in RULES:
        assert any(rule in record["labels"] for record in labels), rule
    assert sum(not record["labels"] for record in labels) >= 100


def test_the_datasheet_shows_the_table_for_a_build_of_the_shared_sources():
    from microcoder.data.reading_measure import datasheet_section
    from microcoder.problems import Checker, Problem

    problem = Problem(id="cf/1", prompt="", kind="stdin", tests=[{"input": "", "output": "YES"}],
                      checker=Checker(case_insensitive_words=["NO", "YES"]))
    lines = datasheet_section([problem], [], [DEFAULT_SHARED / "livecodebench-rllm" / "codeforces_test.json"])
    text = "\n".join(lines)
    assert "| answer words in any letter case (case_insensitive_words) | 1 |" in text
    assert "- answer words in any letter case (case_insensitive_words): cf/1" in text
    assert "| letter_case | all |" in text and "hand-labelled real statements" in text


def test_the_labels_cover_every_statement_a_reading_or_a_net_touches_and_the_seeded_draw():
    from microcoder.data.reading_measure import labelled_sample, shared_statements

    labelled = {(record["file"], record["index"]) for record in read_labels(DEFAULT_LABELS)}
    wanted = labelled_sample(list(shared_statements(DEFAULT_SHARED)))
    assert len(wanted) == len(set(wanted))
    assert set(wanted) == labelled, f"{len(set(wanted) - labelled)} statements to label, {len(labelled - set(wanted))} extra"
