"""Take the program out of a model's response.

Rules (each a decision of ours; the paper is silent):
- `<think> ... </think>` sections are reasoning, not answers: removed. A `<think>` never
  closed means the response was cut off while thinking: no code.
- The answer is the last fenced block labelled python (```python, ```py, ```python3) or
  unlabelled; blocks in other languages are ignored.
- Only complete blocks count: a fence opened and never closed (the response was cut off
  inside it) is ignored, and the last complete block before it is judged. A response
  with no complete block is no code. So a response cut off while writing a usage
  example after its program is judged on that program: if it fails, it is wrong and,
  under MicroCoder-GRPO, keeps its penalty ("non-incorrect" is only an accepted
  program, no complete program at all, or a judge error).
- For `call` problems, the last complete block that defines the entry point wins
  (models often end with a usage example); without such a block, the last block.
"""

from __future__ import annotations

import re

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[^\n]*$", re.MULTILINE)
_PYTHON_LABELS = {"", "python", "py", "python3", "py3"}


def _blocks(text: str) -> list[tuple[str, str]]:
    """Complete fenced blocks as (label, body) in order; a fence left open is dropped."""
    blocks: list[tuple[str, str]] = []
    opened: re.Match[str] | None = None
    for fence in _FENCE.finditer(text):
        if opened is None:
            opened = fence
        elif fence.group(1) == "":  # a closing fence carries no label
            blocks.append((opened.group(1).lower(), text[opened.end() + 1 : fence.start()]))
            opened = None
        else:  # a labelled fence inside an open block: treat it as a new opening
            opened = fence
    return blocks


def _defines(code: str, entry_point: str) -> bool:
    name = entry_point.split("().")[0] if "()." in entry_point else entry_point
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b", code, re.MULTILINE) is not None


def extract_code(response: str, entry_point: str | None = None) -> str | None:
    """The program in `response`, or None when there is none (verdict `no_code`)."""
    text = _THINK.sub("", response)
    if "<think>" in text:
        return None
    blocks = _blocks(text)
    python = [body for label, body in blocks if label in _PYTHON_LABELS and body.strip()]
    if not python:
        return None
    if entry_point:
        defining = [body for body in python if _defines(body, entry_point)]
        if defining:
            return defining[-1]
    return python[-1]
