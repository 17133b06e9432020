"""The verl reward function on realistic responses, judged by the real evaluator (no verl needed).

The samples here are also what tests/test_integrations_verl_estimator.py feeds through
verl's reward manager and compute_advantage.
"""

import pytest

from microcoder.algorithms.masking import is_repetitive
from microcoder.integrations.verl import reward
from tests.helpers import stdin_problem

# Characters are the tokens of these tests (see CharTokenizer): id = ord(char), EOS = 0.
EOS = 0
LIMIT = 600  # the response length limit, L_max
LOOP_UNIT = "Wait, let me check the constraints again.\n"
REPETITION_M = 2 * len(LOOP_UNIT)

SUM_PROBLEM = stdin_problem([("1 2\n", "3\n"), ("10 -4\n", "6\n"), ("0 0\n", "0\n")], problem_id="sum", source="tests")
BROKEN_PROBLEM = stdin_problem([], problem_id="broken", source="tests")  # no tests: a judge_error

THINK = "<think>\nThe input holds two integers on one line; the answer is their sum.\n</think>\n\n"
CORRECT = THINK + "```python\na, b = map(int, input().split())\nprint(a + b)\n```\n"
WRONG = THINK + "```python\na, b = map(int, input().split())\nprint(a - b)\n```\n"
# Cut off inside the program: no complete code block, so no answer (no_code), not a wrong one.
CUT_IN_CODE = (THINK + "Reading all of stdin at once is safer with large inputs, and I should handle "
               "negative numbers as well as extra whitespace between the two values.\n\n"
               "```python\nimport sys\n\n\ndef main():\n    data = sys.stdin.read().split()\n"
               "    first, second = int(data[0]), int(data[1])\n    # the constraints allow values up to 10**18, "
               "so Python's integers are fine here; no overflow handling is needed at all\n"
               "    total = first + second\n    sys.stdout.write(str(total) + '\\n')\n\n\nif __name__ == '__main__':\n"
               "    main()\n\nLet me double-check the edge cases: both zero gives zero, a negative second value "
               "subtracts, and trailing spaces are ignored by split. I am fairly confident this is right, but let me")
# A complete, correct program, then cut off while explaining it: accepted, and truncated.
CORRECT_THEN_CUT = CORRECT + ("\nExplanation: we split the line into two tokens, convert both to int and print "
                              "the sum. For example, for the input `1 2` the program prints 3, and for `10 -4` "
                              "it prints 6. The running time is constant and the memory use is constant too. ") * 4
# A complete, wrong program, then cut off: wrong, and it keeps its penalty.
WRONG_THEN_CUT = WRONG + ("\nLet me verify this with the first example: 1 and 2 give -1... hmm, that does not "
                          "match the expected 3, so something is off, but the structure is right. ") * 6
# A degenerate loop: truncated, no code, and repetitive, so it keeps its penalty too.
LOOP = "<think>\n" + LOOP_UNIT * 40


def tokens(text: str, truncated: bool) -> list[int]:
    """The response's ids: cut to exactly LIMIT when truncated, else ending with EOS."""
    ids = [ord(char) for char in text]
    if truncated:
        assert len(ids) >= LIMIT, "a truncated sample must reach the limit"
        return ids[:LIMIT]
    assert len(ids) < LIMIT, "a finished sample must end before the limit"
    return ids + [EOS]


class CharTokenizer:
    """Enough of a tokenizer for verl's reward manager: one id per character, EOS = 0."""

    eos_token_id = EOS

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(int(i)) for i in ids if not (skip_special_tokens and int(i) == EOS))


# (name, problem, text, truncated, verdict, qualifying)
SAMPLES = [
    ("correct", SUM_PROBLEM, CORRECT, False, "accepted", False),
    ("wrong", SUM_PROBLEM, WRONG, False, "wrong_answer", False),
    ("cut_in_code", SUM_PROBLEM, CUT_IN_CODE, True, "no_code", True),
    ("correct_then_cut", SUM_PROBLEM, CORRECT_THEN_CUT, True, "accepted", True),
    ("wrong_then_cut", SUM_PROBLEM, WRONG_THEN_CUT, True, "wrong_answer", False),
    ("loop", SUM_PROBLEM, LOOP, True, "no_code", False),
    ("broken_problem", BROKEN_PROBLEM, CORRECT, False, "judge_error", False),
]


def response_text(text: str, truncated: bool) -> str:
    """What verl hands compute_score: the decoded valid response, EOS skipped."""
    return CharTokenizer().decode(tokens(text, truncated), skip_special_tokens=True)


def score(problem, text, truncated, **kwargs):
    ids = tokens(text, truncated)
    extra_info = {"split": "train", "index": 0, "microcoder": {"response_ids": ids, "truncated": truncated}}
    return reward.compute_score("microcoder/tests", response_text(text, truncated), problem.model_dump_json(),
                                extra_info, evaluator_workers=2, repetition_m=REPETITION_M, **kwargs)


@pytest.fixture(autouse=True)
def fresh_evaluator():
    reward.close_shared_evaluator()
    yield
    reward.close_shared_evaluator()


def test_the_loop_sample_repeats_and_the_others_do_not():
    for name, _, text, truncated, _, _ in SAMPLES:
        assert is_repetitive(tokens(text, truncated), REPETITION_M) == (name == "loop"), name


@pytest.mark.parametrize("name, problem, text, truncated, verdict, qualifying", SAMPLES, ids=[s[0] for s in SAMPLES])
def test_verdicts_scores_and_mask_facts(name, problem, text, truncated, verdict, qualifying):
    result = score(problem, text, truncated)
    assert result["verdict"] == verdict
    assert result["score"] == result["acc"] == (1.0 if verdict == "accepted" else 0.0)
    assert result["non_incorrect"] == (verdict in ("accepted", "no_code"))
    assert result["unscorable"] == (verdict == "judge_error")
    assert result["truncated"] == truncated
    assert result["repetitive"] == (name == "loop")
    assert result["qualifying"] == qualifying
    # accuracy over scorable responses: verl's validation metrics leave a None out
    assert result["acc_scored"] == (None if verdict == "judge_error" else result["acc"])
    assert (result["error"] != "") == (verdict == "judge_error")
    # verl builds numpy arrays of these: plain scalars only
    assert all(isinstance(value, (bool, float, str, type(None))) for value in result.values())


def test_without_tokens_there_are_no_mask_facts():
    """verl's naive manager passes the text only: the score is usable, the mask's facts absent."""
    result = reward.compute_score("microcoder/tests", CORRECT, SUM_PROBLEM.model_dump_json(), {"index": 3},
                                  evaluator_workers=2)
    assert result == {"score": 1.0, "acc": 1.0, "acc_scored": 1.0, "verdict": "accepted", "error": "",
                      "non_incorrect": True, "unscorable": False}


def test_one_evaluator_serves_every_call_and_closes():
    score(SUM_PROBLEM, CORRECT, False)
    first = reward._evaluator
    score(SUM_PROBLEM, WRONG, False)
    assert reward._evaluator is first
    with pytest.raises(ValueError, match="reward_kwargs must be the same"):
        score(SUM_PROBLEM, CORRECT, False, mode="strict")
    reward.close_shared_evaluator()
    assert reward._evaluator is None and first.sandbox._closed
    assert score(SUM_PROBLEM, CORRECT, False)["verdict"] == "accepted"  # a new pool on next use


def test_concurrent_calls_share_the_pool(monkeypatch):
    """verl runs a synchronous reward function in a thread pool: calls overlap, and the first
    ones race to start the pool. A slow start widens the race: one pool all the same."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    started = []

    class SlowToStart(reward.Evaluator):
        def __init__(self, config):
            started.append(self)
            time.sleep(0.3)
            super().__init__(config)

    monkeypatch.setattr(reward, "Evaluator", SlowToStart)
    cases = [(CORRECT, "accepted"), (WRONG, "wrong_answer")] * 4

    def judge(case):
        return score(SUM_PROBLEM, case[0], False)["verdict"], reward._evaluator

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(judge, cases))
    assert [verdict for verdict, _ in results] == [verdict for _, verdict in cases]
    assert len(started) == 1 and all(evaluator is started[0] for _, evaluator in results)


def test_problems_are_cached_by_digest_and_only_a_few_hundred():
    """A ground truth holds every test of its problem (megabytes for some): the cache keys on a
    16-byte digest of it and keeps the last PROBLEM_CACHE_SIZE problems."""
    reward._problems.clear()
    texts = [stdin_problem([("1\n", f"{index}\n")], problem_id=f"p{index}").model_dump_json()
             for index in range(reward.PROBLEM_CACHE_SIZE + 44)]
    first = reward.parse_ground_truth(texts[0])
    assert reward.parse_ground_truth(texts[0]) is first  # a hit: a group's responses share one parse
    for text in texts:
        reward.parse_ground_truth(text)
    assert len(reward._problems) == reward.PROBLEM_CACHE_SIZE
    assert all(isinstance(key, bytes) and len(key) == 16 for key in reward._problems)
    assert reward.parse_ground_truth(texts[0]) is not first  # evicted, oldest first, and parsed again
    assert reward.parse_ground_truth(texts[-1]).id == f"p{len(texts) - 1}"


def test_ground_truth_must_be_a_problem_as_json():
    with pytest.raises(TypeError, match="JSON string"):
        reward.compute_score("s", CORRECT, {"tests": []}, None)
    with pytest.raises(ValueError):
        reward.compute_score("s", CORRECT, '{"id": "x"}', None)


# SUM_PROBLEM's tests: "1 2" -> 3, "10 -4" -> 6 (the longest input), "0 0" -> 0.
NOT_NEGATIVE = "```python\na, b = map(int, input().split())\nprint(a + b if b >= 0 else 0)\n```"  # fails test 2 only


@pytest.mark.parametrize("mode, expected", [("binary", 0.0), ("fraction", 2 / 3), ("fraction_pow", 4 / 9)])
def test_reward_modes(mode, expected):
    # (2/3) ** 2 = 4/9 at reward_pow 2; the fraction modes run the third test after the second failed
    result = score(SUM_PROBLEM, NOT_NEGATIVE, False, reward_mode=mode, reward_pow=2)
    assert result["score"] == pytest.approx(expected, abs=1e-12)
    assert result["acc"] == 0.0 and result["verdict"] == "wrong_answer"
    assert score(SUM_PROBLEM, CORRECT, False, reward_mode=mode, reward_pow=2)["score"] == 1.0


def test_a_test_budget_judges_the_longest_input():
    only_second = "```python\nprint(6)\n```"
    assert score(SUM_PROBLEM, only_second, False)["score"] == 0.0
    reward.close_shared_evaluator()
    result = score(SUM_PROBLEM, only_second, False, max_tests=1)
    assert result["score"] == result["acc"] == 1.0 and result["verdict"] == "accepted"


def test_repeated_programs_are_judged_once_per_worker():
    first = score(SUM_PROBLEM, CORRECT, False)
    again = score(SUM_PROBLEM, "Same program, other words.\n" + CORRECT.split("</think>")[1], False)
    assert first["score"] == again["score"] == 1.0
    assert (reward._cache.lookups, reward._cache.hits) == (2, 1)
    reward.close_shared_evaluator()
    score(SUM_PROBLEM, CORRECT, False, cache_size=0)
    assert reward._cache is None
