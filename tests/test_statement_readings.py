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
