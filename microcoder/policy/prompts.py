"""The chat prompts the policy sees: one system message and one user message per problem.

The wording was tuned on SmolLM2-135M-Instruct (results/default_run.md): a small model
needs to be told the function's exact name and signature and to be shown the one code
block it should write; without that it often renames the function or explains in prose.
"""

from __future__ import annotations

from microcoder.problems import Problem

SYSTEM_PROMPT = (
    "You are an expert Python programmer. Answer with exactly one ```python code block "
    "that contains the complete solution, and nothing else."
)

ANSWER_FORMAT = "Reply with only one ```python code block: no explanation, no examples, no tests."
"""Ends every user message. SmolLM2-135M follows the last instruction it read far better
than the system prompt: without this line ~40% of its answers went on explaining past
the code and were cut off at 128 tokens (results/default_run.md)."""


def _starter_block(problem: Problem) -> str:
    return f"```python\n{problem.starter_code.rstrip()}\n```"


def _function_name(entry_point: str) -> str:
    """`Solution().twoSum` -> `twoSum`; `add` -> `add`."""
    return entry_point.split("().", 1)[1] if "()." in entry_point else entry_point


def build_messages(problem: Problem) -> list[dict[str, str]]:
    """System + user messages for `problem`. Stdin problems ask for a whole program that
    reads standard input and prints to standard output; call problems ask for the entry
    point (a function, or a method of `Solution`) completing the starter code."""
    statement = problem.prompt.strip()
    if problem.kind == "stdin":
        user = (
            f"{statement}\n\n"
            "Write a complete Python program that reads the input from standard input "
            "and prints the answer to standard output."
        )
        if problem.starter_code.strip():
            user += f" Start from this code:\n{_starter_block(problem)}"
    elif problem.kind == "call":
        entry_point = problem.entry_point or ""
        name = _function_name(entry_point)
        owner = f"the method `{name}` of class `{entry_point.split('().', 1)[0]}`" if "()." in entry_point \
            else f"the function `{name}`"
        user = f"{statement}\n\nImplement {owner} in Python."
        if problem.starter_code.strip():
            user += f" Complete this code:\n{_starter_block(problem)}"
        user += "\nReturn the result; do not read input or print."
    else:
        raise ValueError(f"problem kind must be 'stdin' or 'call', got {problem.kind!r}")
    user += f"\n\n{ANSWER_FORMAT}"
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def render_prompt(problem: Problem, tokenizer) -> str:
    """The prompt text, ending where the assistant's answer begins."""
    return tokenizer.apply_chat_template(build_messages(problem), tokenize=False, add_generation_prompt=True)
