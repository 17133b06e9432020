"""The embedded default problems: deterministic, well-formed, split cleanly, references pass."""

import json

import pytest

from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample
from microcoder.problems import Problem
from microcoder.training.tasks import SOURCE, TEMPLATES, default_problems


@pytest.fixture(scope="module")
def problems():
    return default_problems()


def test_sizes_and_labels(problems):
    train, held_out = problems
    assert len(train) == 4 * len(TEMPLATES) and len(held_out) == 2 * len(TEMPLATES)
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


def test_sizes_are_configurable():
    train, held_out = default_problems(train_per_template=2, held_out_per_template=1)
    assert len(train) == 2 * len(TEMPLATES) and len(held_out) == len(TEMPLATES)


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
    from microcoder.training.trainer import load_problem_split

    train, heldout = load_problem_split(load_config(None, ["heldout_size=48"]))
    medium_train, medium_heldout = load_problem_split(load_config(None, ["heldout_size=48", "train_difficulties=[medium]"]))
    easy_train, _ = load_problem_split(load_config(None, ["train_difficulties=[easy]"]))
    medium_templates = {t.name for t in TEMPLATES if t.difficulty == "medium"}
    assert {p.metadata["template"] for p in medium_train} == medium_templates
    assert len(medium_train) == 4 * len(medium_templates) and len(easy_train) == len(train) - len(medium_train)
    assert medium_heldout == heldout and len(heldout) == 48
    with pytest.raises(ValueError, match="train_difficulties: no training problem in 'default' has difficulty hard"):
        load_problem_split(load_config(None, ["train_difficulties=[hard]"]))
