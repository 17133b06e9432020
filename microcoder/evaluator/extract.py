"""Take the program out of a model's response.

Rules (each a decision of ours; the paper is silent):
- `<think> ... </think>` sections are reasoning, not answers: removed. A `<think>` never
  closed means the response was cut off while thinking: no code.
- The answer is the last fenced block labelled python (```python, ```py, ```python3) or
  unlabelled; blocks in other languages are ignored.
- A fence opened and never closed means the answer was truncated: no code, even if an
  earlier block was complete (that one was a draft the model went on from).
- For `call` problems, the last block that defines the entry point wins (models often
  end with a usage example); without such a block, the last block.
"""

from __future__ import annotations

import re

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[^\n]*$", re.MULTILINE)
_PYTHON_LABELS = {"", "python", "py", "python3", "py3"}


def _blocks(text: str) -> tuple[list[tuple[str, str]], bool]:
    """Fenced blocks as (label, body) in order, and whether a fence was left open."""
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
    return blocks, opened is not None


def _defines(code: str, entry_point: str) -> bool:
    name = entry_point.split("().")[0] if "()." in entry_point else entry_point
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b", code, re.MULTILINE) is not None


def extract_code(response: str, entry_point: str | None = None) -> str | None:
    """The program in `response`, or None when there is none (verdict `no_code`)."""
    text = _THINK.sub("", response)
    if "<think>" in text:
        return None
    blocks, left_open = _blocks(text)
    if left_open:
        return None
    python = [body for label, body in blocks if label in _PYTHON_LABELS and body.strip()]
    if not python:
        return None
    if entry_point:
        defining = [body for body in python if _defines(body, entry_point)]
        if defining:
            return defining[-1]
    return python[-1]
