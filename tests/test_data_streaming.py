"""The build streams: each stage reads its input row by row and writes its outputs line by
line, so its peak memory does not grow with the corpus by the size of the problems.

Each stage is run on its own (`run_stage`, the pipeline's path) on a corpus of N and of 8N
made-up problems under `tracemalloc`, and the growth of its peak from N to 8N is compared
with the size of the extra problems. Every problem carries ~60 KB of test data (two inputs
of 30,000 characters), so a stage that holds its input, or copies of it, grows by at least
7N x 60 KB. What a streaming stage may keep per problem is small: ids and keys (~0.5 KB),
dedup's MinHash in the LSH index (~3 KB at 128 permutations, every problem here being
kept), the export's slim copy for the datasheet and its verl and TRL rows (~2 KB with these
short statements). One batch is held whatever the corpus: the export's Parquet row group
(256 rows; 4 here, below N). The bound, 8 KB a problem, sits between the two with a margin of ~7x
from the materialising side. A first build, not measured, imports what the stages use.
Nothing reads ../shared; no timing."""

from __future__ import annotations

import random
import tracemalloc
from pathlib import Path

import pytest

from microcoder.data import export
from microcoder.data.config import PipelineConfig
from microcoder.data.pipeline import run_stage
from microcoder.data.stages import STAGES
from microcoder.problems import Problem, TestCase

PAYLOAD_CHARS = 30_000
"""Characters of each of a problem's two test inputs."""
KEPT_PER_PROBLEM = 8 * 1024
"""Bytes a stage may keep per problem of its input (see the module docstring)."""
BASE = 20
"""N: problems in the smaller corpus; the larger has 8N."""


def corpus(count: int) -> list[Problem]:
    """`count` stdin problems with statements far apart (no duplicates), two hidden tests of
    ~30 KB each with different answers, and a source label."""
    rng = random.Random(count)
    vocabulary = [f"w{index}" for index in range(5000)]
    problems = []
    for index in range(count):
        words = " ".join(rng.choice(vocabulary) for _ in range(40))
        tests = [TestCase(input=f"{value}\n" + "7 " * (PAYLOAD_CHARS // 2), output=f"{value}\n")
                 for value in (index, index + 1)]
        problems.append(Problem(id=f"made/{index}", kind="stdin", source="made",
                                prompt=f"Print the first number of the input. {words}", tests=tests,
                                difficulty="Easy", metadata={"licence": "test"}))
    return problems


def peaks_by_stage(folder: Path, count: int) -> dict[str, int]:
    """Each stage's peak traced memory above what was allocated when it started, in bytes."""
    folder.mkdir()
    source = folder / "source.jsonl"
    source.write_text("".join(problem.model_dump_json() + "\n" for problem in corpus(count)))
    config = PipelineConfig(work_dir=str(folder / "work"), progress=False, workers=1,
                            sources=[{"path": str(source), "format": "canonical"}],
                            amplify={"keep_unverified": True}, base_dir=str(folder))
    peaks = {}
    tracemalloc.start()
    try:
        for stage in STAGES:
            start, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            manifest = run_stage(config, stage, log=lambda _: None)
            peaks[stage] = tracemalloc.get_traced_memory()[1] - start
            assert manifest["counts"]["out"] == count, (stage, manifest["counts"])  # every problem went through
    finally:
        tracemalloc.stop()
    return peaks


@pytest.mark.slow
def test_no_stage_holds_its_input_whole(tmp_path, monkeypatch):
    # The export's Parquet corpus is written a row group at a time: the one batch of problems
    # it holds, 256 rows, more than this corpus has. Smaller groups here, so that holding
    # the input shows.
    monkeypatch.setattr(export, "PARQUET_ROW_GROUP", 4, raising=False)
    peaks_by_stage(tmp_path / "warm", BASE)  # what the first run imports and caches is no stage's growth
    small = peaks_by_stage(tmp_path / "small", BASE)
    large = peaks_by_stage(tmp_path / "large", 8 * BASE)
    extra = 7 * BASE
    grown = {stage: large[stage] - small[stage] for stage in STAGES}
    report = ", ".join(f"{stage} {small[stage] / 2**20:.1f} -> {large[stage] / 2**20:.1f} MiB" for stage in STAGES)
    # Holding the extra problems would add at least their test data (7N x 60 KB, ~8 MiB here).
    assert all(growth < extra * KEPT_PER_PROBLEM for growth in grown.values()), report



def test_one_pass_stages_read_an_iterator_once_and_two_pass_stages_refuse_one(tmp_path):
    # A one-pass stage consumes what it is given once, in order: handed a generator, it
    # keeps every problem. A stage that reads its input twice says so rather than see an
    # empty second pass.
    from microcoder.data.amplify import amplify_problems
    from microcoder.data.config import DedupConfig
    from microcoder.data.decontaminate import remove_contaminated
    from microcoder.data.dedup import deduplicate
    from microcoder.data.difficulty import filter_by_difficulty
    from microcoder.data.stages import StageContext
    from microcoder.data.validate import validate_problems

    config = PipelineConfig(work_dir=str(tmp_path / "work"), progress=False, sources=[],
                            validate={"run_references": False}, amplify={"enabled": False, "keep_unverified": True})
    context = StageContext(config)
    problems = corpus(3)
    for stage in (validate_problems, remove_contaminated, amplify_problems, filter_by_difficulty):
        read: list[str] = []

        def once():
            for problem in problems:
                read.append(problem.id)
                yield problem.model_copy(deep=True)

        assert [problem.id for problem in stage(once(), config, context).problems] == [p.id for p in problems], stage
        assert read == [p.id for p in problems], stage
    with pytest.raises(TypeError, match="reads its problems twice"):
        deduplicate(iter(problems), DedupConfig(), context)
    with pytest.raises(TypeError, match="reads its problems twice"):
        filter_by_difficulty(iter(problems), config.model_copy(update={"difficulty": config.difficulty.model_copy(
            update={"estimate_pass_rate": True})}), context)

if __name__ == "__main__":  # python -m tests.test_data_streaming: each stage's peak at N and 8N
    import tempfile

    export.PARQUET_ROW_GROUP = 4  # as the test sets it
    with tempfile.TemporaryDirectory() as folder:
        peaks_by_stage(Path(folder) / "warm", BASE)
        small, large = peaks_by_stage(Path(folder) / "small", BASE), peaks_by_stage(Path(folder) / "large", 8 * BASE)
    print(f"| stage | peak at {BASE} | peak at {8 * BASE} | growth per extra problem |\n|---|---:|---:|---:|")
    for stage in STAGES:
        print(f"| {stage} | {small[stage] / 2**20:.2f} MiB | {large[stage] / 2**20:.2f} MiB | "
              f"{(large[stage] - small[stage]) / (7 * BASE) / 1024:.2f} KB |")


def test_a_spool_gives_back_what_it_was_given_in_order_on_every_pass_and_leaves_no_file(tmp_path):
    from microcoder.data.stages import Spool
    from microcoder.problems import Problem, TestCase

    problems = [Problem(id=f"p{i}", kind="stdin", source="s", prompt="x", tests=[TestCase(input=str(i), output=str(i))])
                for i in range(3)]
    payloads = [None, {"texts": ["1", "2"]}, [1.5, "é\n"]]
    with Spool(tmp_path / "planned.jsonl") as spool:
        seen = [problem.id for problem, _ in spool.write(zip(problems, payloads))]
        assert seen == ["p0", "p1", "p2"]
        for _ in range(2):
            assert [(problem, payload) for problem, payload in spool] == list(zip(problems, payloads))
        assert spool.path.parent == tmp_path and spool.path.is_file()
    assert list(tmp_path.iterdir()) == []
