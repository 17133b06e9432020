"""The hand-labelled cases of the accuracy benchmark (tests/fixtures/accuracy): robust mode
judges every one as its label says (valid accepted, invalid rejected), in every class."""

from benchmarks.evaluator_accuracy import labelled_workloads
from microcoder.evaluator import Evaluator, EvaluatorConfig

CLASSES = {"cpu near limit", "call checker", "absolute tolerance", "relative tolerance", "stdout and stdin idioms",
           "nested call values", "free levels"}


def test_every_class_has_valid_and_invalid_cases():
    workloads, classes = labelled_workloads()
    for load in workloads:
        assert {classes[sample.problem_id] for sample in load.samples} == CLASSES, load.name


def test_robust_mode_judges_every_labelled_case_as_labelled():
    workloads, classes = labelled_workloads()
    wrong = []
    with Evaluator(EvaluatorConfig(workers=2)) as evaluator:
        for load in workloads:
            for result in evaluator.evaluate(load.problems, load.samples):
                if (result.verdict == "accepted") != load.expect_accept:
                    wrong.append(f"{load.name} {result.problem_id} ({classes[result.problem_id]}): "
                                 f"{result.verdict} {result.detail[:120]}")
    assert not wrong, "\n".join(wrong)
