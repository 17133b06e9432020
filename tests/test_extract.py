from microcoder.evaluator.extract import extract_code


def test_last_python_block_wins():
    response = "Draft:\n```python\nprint(1)\n```\nFinal:\n```python\nprint(2)\n```\n"
    assert extract_code(response) == "print(2)\n"


def test_unlabelled_and_py_blocks_count_other_languages_do_not():
    assert extract_code("```\nprint(1)\n```") == "print(1)\n"
    assert extract_code("```py\nprint(1)\n```\n```cpp\nint main(){}\n```") == "print(1)\n"


def test_think_sections_are_ignored():
    response = "<think>\n```python\nprint('thinking')\n```\n</think>\n```python\nprint('answer')\n```"
    assert extract_code(response) == "print('answer')\n"
    assert extract_code("<think>only code while thinking\n```python\nprint(1)\n```\n</think>") is None


def test_unclosed_think_is_no_code():
    assert extract_code("```python\nprint(1)\n```\n<think>cut off while thinking") is None


def test_an_unclosed_fence_is_ignored_and_the_last_complete_block_judged():
    # Cut off inside a second block (a usage example, or a rewrite): the complete program
    # before it is the answer, so a wrong one is judged wrong rather than "no answer".
    assert extract_code("```python\nprint(1)\n```\nBetter:\n```python\nprint(2") == "print(1)\n"
    assert extract_code("```python\ndef add(a, b):\n    return a - b\n```\nExample:\n```python\nprint(add(",
                        "add") == "def add(a, b):\n    return a - b\n"


def test_no_complete_block_is_no_code():
    assert extract_code("```python\nprint(1)") is None
    assert extract_code("Here it is:\n```python\ndef add(a, b):\n    return a +") is None


def test_no_code_at_all():
    assert extract_code("I cannot solve this.") is None
    assert extract_code("```python\n\n```") is None


def test_call_problems_take_the_block_defining_the_entry_point():
    response = (
        "```python\nclass Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]\n```\n"
        "Usage:\n```python\nprint(Solution().twoSum([1, 2], 3))\n```"
    )
    assert "class Solution" in extract_code(response, "Solution().twoSum")
    assert extract_code(response) == "print(Solution().twoSum([1, 2], 3))\n"
    assert "def add" in extract_code("```python\ndef add(a, b):\n    return a + b\n```\n```python\nadd(1, 2)\n```", "add")
