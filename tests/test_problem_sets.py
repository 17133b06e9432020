"""The embedded default problems: deterministic, well-formed, split cleanly, references pass."""

import json
import re

import pytest

from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample
from microcoder.problems import Problem
from microcoder.problem_sets import DECIMAL_TEMPLATES, SOURCE, TEMPLATES, decimal_problems, default_problems


@pytest.fixture(scope="module")
def problems():
    return default_problems()


def test_sizes_and_labels(problems):
    train, held_out = problems
    assert len(train) == 4 * len(TEMPLATES) and len(held_out) == 4 * len(TEMPLATES)
    for problem in train + held_out:
        assert problem.kind == "call" and problem.source == SOURCE
        assert problem.difficulty in ("easy", "medium")
        assert 4 <= len(problem.tests) <= 8
        assert problem.starter_code.startswith(f"def {problem.entry_point}(")
        assert problem.metadata["reference_solution"]
        assert "Example: " in problem.prompt


def test_every_template_is_in_both_splits(problems):
    train, held_out = problems
    names = {template.name for template in TEMPLATES}
    assert {p.metadata["template"] for p in train} == names == {p.metadata["template"] for p in held_out}


def test_deterministic_and_seeded(problems):
    dump = lambda split: [p.model_dump_json() for p in split]  # noqa: E731
    again = default_problems()
    assert dump(again[0]) == dump(problems[0]) and dump(again[1]) == dump(problems[1])
    other = default_problems(seed=1)
    assert dump(other[0]) != dump(problems[0])


def test_train_and_held_out_are_disjoint(problems):
    train, held_out = problems
    ids = [p.id for p in train + held_out]
    assert len(set(ids)) == len(ids)
    key = lambda p: (p.prompt.split("\n\nExample")[0], p.starter_code)  # noqa: E731
    assert not {key(p) for p in train} & {key(p) for p in held_out}
    assert not {p.prompt for p in train} & {p.prompt for p in held_out}


def test_problems_round_trip_the_canonical_format(problems):
    for problem in problems[0] + problems[1]:
        assert Problem.model_validate(json.loads(problem.model_dump_json())) == problem


def test_a_held_out_prefix_is_the_same_set_at_any_size(problems):
    # Configs that take the first 24 or 48 held-out problems name the same problems
    # whether the set holds two or four per template: two per template come first.
    two = default_problems(held_out_per_template=2)
    assert [p.model_dump_json() for p in two[0]] == [p.model_dump_json() for p in problems[0]]
    assert [p.model_dump_json() for p in two[1]] == [p.model_dump_json() for p in problems[1][:48]]
    assert [p.metadata["template"] for p in problems[1][:48:2]] == [template.name for template in TEMPLATES]


def test_sizes_are_configurable():
    train, held_out = default_problems(train_per_template=2, held_out_per_template=1)
    assert len(train) == 2 * len(TEMPLATES) and len(held_out) == len(TEMPLATES)


@pytest.mark.slow
def test_every_reference_is_accepted_and_a_wrong_answer_is_not(problems):
    train, held_out = problems
    everything = train + held_out
    samples = [Sample(p.id, code=p.metadata["reference_solution"]) for p in everything]
    # The same function returning None: the tests must be able to tell.
    samples += [Sample(p.id, code=f"def {p.entry_point}(*args):\n    return None\n") for p in everything]
    with Evaluator(EvaluatorConfig(workers=2)) as evaluator:
        results = evaluator.evaluate(everything, samples)
    references, wrong = results[: len(everything)], results[len(everything) :]
    assert [r.problem_id for r in references if r.verdict != "accepted"] == []
    assert all(r.verdict == "wrong_answer" for r in wrong)


def test_train_difficulties_filters_training_problems_but_not_the_heldout_set():
    from microcoder.training.config import load_config
    from microcoder.training.run import load_problem_split

    train, heldout = load_problem_split(load_config(None, ["heldout_size=48"]))
    medium_train, medium_heldout = load_problem_split(load_config(None, ["heldout_size=48", "train_difficulties=[medium]"]))
    easy_train, _ = load_problem_split(load_config(None, ["train_difficulties=[easy]"]))
    medium_templates = {t.name for t in TEMPLATES if t.difficulty == "medium"}
    assert {p.metadata["template"] for p in medium_train} == medium_templates
    assert len(medium_train) == 4 * len(medium_templates) and len(easy_train) == len(train) - len(medium_train)
    assert medium_heldout == heldout and len(heldout) == 48
    with pytest.raises(ValueError, match="train_difficulties: no training problem in 'default' has difficulty hard"):
        load_problem_split(load_config(None, ["train_difficulties=[hard]"]))


# --- the decimal-answer set -------------------------------------------------------------

@pytest.fixture(scope="module")
def decimal():
    return decimal_problems()


def natural_float_code(problem: Problem) -> str:
    """What a model naturally writes for a decimal problem: plain float arithmetic."""
    template, name = problem.metadata["template"], problem.entry_point
    arguments = problem.starter_code.split("(", 1)[1].split(")")[0]
    a, *rest = [part.split(":")[0].strip() for part in arguments.split(",")]
    if template == "decimal_scale":
        body = f"{a} * {re.search(r'multiplied by ([0-9.]*[0-9])', problem.prompt).group(1)}"
    elif template == "decimal_percent":
        body = f"{a} * {re.search(r'Return ([0-9]+) percent', problem.prompt).group(1)} / 100"
    else:
        body = {"decimal_sum": f"sum({a})", "decimal_mean": f"sum({a}) / len({a})",
                "decimal_range": f"max({a}) - min({a})",
                "decimal_cost": f"sum(p * c for p, c in zip({a}, {rest[0] if rest else ''}))"}[template]
    return f"def {name}({', '.join([a, *rest])}):\n    return {body}\n"


def test_decimal_set_sizes_splits_and_every_template(decimal):
    train, held_out = decimal
    assert len(train) == 8 * len(DECIMAL_TEMPLATES) and len(held_out) == 4 * len(DECIMAL_TEMPLATES)
    names = {template.name for template in DECIMAL_TEMPLATES}
    assert {p.metadata["template"] for p in train} == names == {p.metadata["template"] for p in held_out}
    key = lambda p: (p.prompt.split("\n\nExample")[0], p.starter_code)  # noqa: E731
    assert not {key(p) for p in train} & {key(p) for p in held_out}
    for problem in train + held_out:  # every test its own input
        assert len({test.input for test in problem.tests}) == len(problem.tests), problem.id


def test_a_decimal_reference_computes_exactly(decimal):
    # 0.1 + 0.2 is 0.30000000000000004 in floats; the expected value is the decimal 0.3
    # (the double nearest to it), as an exact reference solution prints it.
    problem = next(p for p in decimal[0] if p.metadata["template"] == "decimal_sum")
    namespace: dict = {}
    exec(problem.metadata["reference_solution"], namespace)
    function = namespace[problem.entry_point]
    assert function([0.1, 0.2]) == 0.3 and sum([0.1, 0.2]) != 0.3
    assert function([0.1, 0.7]) == 0.8 and sum([0.1, 0.7]) != 0.8


@pytest.mark.slow
def test_on_the_decimal_set_strict_rejects_natural_float_code_that_robust_accepts(decimal):
    everything = decimal[0] + decimal[1]
    samples = [Sample(p.id, code=p.metadata["reference_solution"]) for p in everything]
    samples += [Sample(p.id, code=natural_float_code(p)) for p in everything]
    verdicts = {}
    with Evaluator(EvaluatorConfig(workers=2)) as evaluator:
        for mode in ("robust", "strict"):
            results = evaluator.judging(mode).evaluate(everything, samples)
            verdicts[mode] = [r.verdict for r in results]
    n = len(everything)
    for mode in ("robust", "strict"):  # the references pass under both judges
        assert verdicts[mode][:n] == ["accepted"] * n
    assert verdicts["robust"][n:] == ["accepted"] * n  # within tolerance: right
    rejected = [v for v in verdicts["strict"][n:] if v != "accepted"]
    assert set(rejected) == {"wrong_answer"} and len(rejected) > n // 2  # off in the last bits: wrong to ==


def test_problems_decimal_trains_on_its_own_split():
    from microcoder.training.config import load_config
    from microcoder.training.run import load_problem_split

    train, heldout = load_problem_split(load_config(None, ["problems=decimal", "heldout_size=48"]))
    expected_train, expected_heldout = decimal_problems(0)
    assert train == expected_train and heldout == expected_heldout  # its own 24, not 48 taken from train
    _, capped = load_problem_split(load_config(None, ["problems=decimal", "heldout_size=10"]))
    assert capped == expected_heldout[:10]
