"""The source formats the loaders read: one entry per format, in one table.

Each format names its licence (copied into every problem's metadata) and how its tests
are given: as assert code, which is recorded by running it in the sandbox
(`assert_tests.py`), or as input / output data read without running anything
(`loaders.py`). `loaders.detect_format` tells a file's format from its first record;
docs/formats.md says how each maps to a `Problem`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceFormat:
    """One public problem-set format."""

    name: str
    licence: str
    """Copied into each problem's metadata["licence"] (a source config may override it)."""
    assert_tests: bool
    """Tests are assert code: converting the format needs a sandbox to record them."""


FORMATS: dict[str, SourceFormat] = {source_format.name: source_format for source_format in (
    SourceFormat("livecodebench", 'MIT (rllm-org/rllm release; problem text from AtCoder/LeetCode)', assert_tests=False),
    SourceFormat("livecodebench_release", 'CC, version unstated (livecodebench/code_generation_lite card; problem text from AtCoder/LeetCode)', assert_tests=False),
    SourceFormat("leetcodedataset", "MIT (newfacade/LeetCodeDataset; problem text is LeetCode's)", assert_tests=False),
    SourceFormat("humaneval", 'MIT (openai/human-eval)', assert_tests=True),
    SourceFormat("humanevalpack", 'MIT (bigcode-project/octopack)', assert_tests=True),
    SourceFormat("mbpp", 'CC-BY-4.0 (MBPP)', assert_tests=True),
    SourceFormat("codecontests", 'MIT (rllm-org/rllm release of CodeContests, CC-BY-4.0)', assert_tests=False),
    SourceFormat("codeforces", 'MIT (rllm-org/rllm release; problem text from Codeforces)', assert_tests=False),
    SourceFormat("apps", 'MIT (APPS)', assert_tests=False),
)}
"""Every format the loaders convert, by name (the order of `--format`'s help)."""

ASSERT_FORMATS = tuple(name for name, source_format in FORMATS.items() if source_format.assert_tests)
"""Formats whose tests are assert code: converting them needs a sandbox."""


def licence_of(source: str) -> str:
    """The licence of a format's problems; "unknown" for a source that is no format of ours."""
    return FORMATS[source].licence if source in FORMATS else "unknown"
