"""The public problem-set formats the loaders read: one module per format, registered in
`SOURCES`, the one table `load_problems`, format detection, the licences and the CLI's
`--format` help all read.

Each module holds its format's `detect` (does a first record look like this format?) and
`convert` (a row -> a `Problem`), and registers them with its name, description and
licence as its `SOURCE`. Formats whose tests are assert code (HumanEval, HumanEvalPack,
MBPP) have no `convert`: their tests are recorded by running the reference in the
sandbox (assert_tests.py). docs/formats.md says how each format maps to a `Problem`.
"""

from __future__ import annotations

from microcoder.data.sources import (apps, codecontests, codeforces, humaneval, humanevalpack, leetcodedataset,
                                     livecodebench, livecodebench_release, mbpp)
from microcoder.data.sources.common import Source

SOURCES: dict[str, Source] = {module.SOURCE.name: module.SOURCE for module in (
    # In the order detection tries them: the first whose `detect` accepts a file's first
    # record is its format (HumanEvalPack's records also have HumanEval's fields, and
    # LiveCodeBench's rllm records CodeContests' and Codeforces').
    livecodebench_release,
    humanevalpack,
    leetcodedataset,
    humaneval,
    mbpp,
    apps,
    livecodebench,
    codecontests,
    codeforces,
)}
"""Every format the loaders convert, by name."""


def licence_of(source: str) -> str:
    """The licence of a format's problems; "unknown" for a source that is no format of ours."""
    return SOURCES[source].licence if source in SOURCES else "unknown"


def formats_help() -> str:
    """`auto` and every format with its description: the CLI's --format help."""
    return "; ".join(["auto: detected from the first record's fields"]
                     + [f"{name}: {source.description}" for name, source in SOURCES.items()]) + "."
