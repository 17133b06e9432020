"""The chat prompts: one system + one user message, worded by problem kind."""

import pytest

from microcoder.problems import Problem
from microcoder.policy.model import default_tokenizer
from microcoder.policy.prompts import ANSWER_FORMAT, SYSTEM_PROMPT, build_messages, render_prompt
from microcoder.problem_sets import default_problems

STDIN = Problem(id="s", prompt="Read two integers and print their sum.", kind="stdin",
                tests=[{"input": "1 2\n", "output": "3\n"}])
CALL = Problem(id="c", prompt="Return the sum of a and b.", kind="call", entry_point="add",
               starter_code="def add(a: int, b: int) -> int:\n", tests=[{"input": "1\n2", "output": "3"}])
METHOD = Problem(id="m", prompt="Return twice x.", kind="call", entry_point="Solution().double",
                 starter_code="class Solution:\n    def double(self, x: int) -> int:\n        ",
                 tests=[{"input": "2", "output": "4"}])


def test_system_then_user():
    messages = build_messages(CALL)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == SYSTEM_PROMPT and "```python" in SYSTEM_PROMPT


def test_stdin_and_call_problems_are_worded_differently():
    stdin_text = build_messages(STDIN)[1]["content"]
    call_text = build_messages(CALL)[1]["content"]
    assert stdin_text.startswith(STDIN.prompt) and call_text.startswith(CALL.prompt)
    assert "standard input" in stdin_text and "standard output" in stdin_text
    assert "standard input" not in call_text
    assert "`add`" in call_text and "do not read input or print" in call_text


def test_starter_code_is_shown_when_present():
    assert "```python\ndef add(a: int, b: int) -> int:\n```" in build_messages(CALL)[1]["content"]
    method_text = build_messages(METHOD)[1]["content"]
    assert "`double` of class `Solution`" in method_text and "class Solution:" in method_text
    assert "Start from this code" not in build_messages(STDIN)[1]["content"]
    with_starter = STDIN.model_copy(update={"starter_code": "import sys\n"})
    assert "```python\nimport sys\n```" in build_messages(with_starter)[1]["content"]


def test_every_user_message_ends_with_the_answer_format():
    for problem in (STDIN, CALL, METHOD):
        assert build_messages(problem)[1]["content"].endswith(ANSWER_FORMAT)


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="'stdin' or 'call'"):
        build_messages(CALL.model_construct(**{**CALL.__dict__, "kind": "other"}))


def test_render_applies_the_chat_template():
    tokenizer = default_tokenizer()
    problem = default_problems()[1][0]
    text = render_prompt(problem, tokenizer)
    assert text.startswith(f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n{problem.prompt}")
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert "SmolLM" not in text  # our system prompt replaces the template's default one
