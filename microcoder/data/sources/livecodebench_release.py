"""LiveCodeBench's official release (code_generation_lite: `test*.jsonl` or a `.parquet` of
the same rows), read by microcoder/data/livecodebench.py; every test kept, as the benchmark
has them."""

from __future__ import annotations

from microcoder.data.livecodebench import is_release_record, release_fields
from microcoder.data.records import Row
from microcoder.data.sources.common import Source, statement_hash, set_stdin_checker
from microcoder.problems import Problem


def convert(item: Row, shared: set[tuple[str, str]]) -> Problem:
    """The official release (livecodebench.py): every test kept, as the benchmark has them."""
    fields, tests = release_fields(item, SOURCE.licence)
    fields["metadata"]["statement_sha1"] = statement_hash(fields["prompt"])
    if fields["kind"] == "stdin":
        set_stdin_checker(fields, fields["prompt"], [test.output for test in tests])
    return item.finish(fields, tests)


SOURCE = Source(
    "livecodebench_release", "LiveCodeBench's official release (code_generation_lite, .jsonl or .parquet)",
    licence="CC, version unstated (livecodebench/code_generation_lite card; problem text from AtCoder/LeetCode)",
    detect=is_release_record, convert=convert,
)
