"""Our problems JSONL as verl's parquet: the rows verl reads, and a ground truth that judges back."""

import json

import pytest

pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow is not installed (the data extra or verl brings it)")

from microcoder.integrations.verl import reward  # noqa: E402
from microcoder.integrations.verl.data import main  # noqa: E402
from microcoder.integrations.verl.problem_store import problem_sha256  # noqa: E402
from microcoder.problems import read_problems  # noqa: E402
from microcoder.policy.prompts import build_messages  # noqa: E402
from tests.helpers import call_problem, stdin_problem  # noqa: E402


def test_problems_become_verl_rows_whose_ground_truth_judges(tmp_path, capsys):
    problems = [stdin_problem([("1 2\n", "3\n")], problem_id="src/sum", source="src", time_limit_s=1.5),
                call_problem([("[1, 2]", "3")], entry_point="total", problem_id="src/total", source="src")]
    source = tmp_path / "problems.jsonl"
    source.write_text("".join(problem.model_dump_json() + "\n" for problem in problems))
    main([str(source), "--out", str(tmp_path / "out" / "train.parquet"), "--split", "train"])
    assert "wrote 2 rows" in capsys.readouterr().out

    rows = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert [row["data_source"] for row in rows] == ["microcoder/src", "microcoder/src"]
    assert [row["extra_info"] for row in rows] == [{"split": "train", "index": 0, "problem_id": "src/sum"},
                                                   {"split": "train", "index": 1, "problem_id": "src/total"}]
    for row, problem in zip(rows, read_problems(source)):
        assert row["prompt"] == build_messages(problem) and row["ability"] == "code"
        assert row["reward_model"]["style"] == "rule"
        # a reference by default: the id and digest, none of the tests
        assert json.loads(row["reward_model"]["ground_truth"]) == {"ref": problem.id, "sha256": problem_sha256(problem)}
        assert reward.parse_ground_truth(row["reward_model"]["ground_truth"], [str(source)]) == problem

    answers = ["```python\na, b = map(int, input().split())\nprint(a + b)\n```",
               "```python\ndef total(xs):\n    return sum(xs)\n```"]
    try:
        for row, answer in zip(rows, answers):
            result = reward.compute_score(row["data_source"], answer, row["reward_model"]["ground_truth"],
                                          row["extra_info"], evaluator_workers=1, problems_files=[str(source)])
            assert result["verdict"] == "accepted"
    finally:
        reward.close_shared_evaluator()


def test_inline_rows_hold_the_whole_problem(tmp_path):
    problem = stdin_problem([("1 2\n", "3\n")], problem_id="src/sum", source="src")
    source = tmp_path / "problems.jsonl"
    source.write_text(problem.model_dump_json() + "\n")
    main([str(source), "--out", str(tmp_path / "train.parquet"), "--inline"])
    [row] = pq.read_table(tmp_path / "train.parquet").to_pylist()
    assert json.loads(row["reward_model"]["ground_truth"])["kind"] == problem.kind
    assert reward.parse_ground_truth(row["reward_model"]["ground_truth"]) == problem  # no problems file needed


def test_sizes_report_what_travels_per_step(tmp_path, capsys):
    """A problem with many hidden tests: inline, each trajectory carries them; by reference, not."""
    problem = stdin_problem([(f"{i} {i}\n", f"{2 * i}\n") for i in range(500)], problem_id="big", source="src")
    source = tmp_path / "problems.jsonl"
    source.write_text(problem.model_dump_json() + "\n")
    main([str(source), "--sizes", "--prompts", "1", "--n", "8"])
    inline, reference = (line for line in capsys.readouterr().out.splitlines() if ": per trajectory" in line)
    kilobytes = [float(line.split("mean ")[1].split(" KB")[0]) for line in (inline, reference)]
    assert kilobytes[0] > 10 > 1 > kilobytes[1] and len(problem.model_dump_json()) > 10_000


def test_verls_own_dataset_reads_the_rows_the_build_writes(tmp_path):
    """`microcoder data build` writes its verl split with `write_verl_parquet` (export.py);
    verl 0.9.1's RLHFDataset reads it back, chat prompt and reference intact. Runs in verl's
    environment (scripts/test_verl.sh); the main one has no verl."""
    pytest.importorskip("verl", reason="verl is not installed here (scripts/test_verl.sh builds its environment)")
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from microcoder.data.engines import write_verl_parquet
    from tests.test_integrations_verl_preflight import tiny_checkpoint
    from transformers import AutoTokenizer

    problems = [stdin_problem([("1 2\n", "3\n")], problem_id="src/sum", source="src"),
                call_problem([("[1, 2]", "3")], entry_point="total", problem_id="src/total", source="src")]
    write_verl_parquet(problems, tmp_path / "verl" / "train.parquet", "train")
    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint(tmp_path / "model"))
    config = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 4096, "filter_overlong_prompts": False,
                               "cache_dir": str(tmp_path / "cache")})
    dataset = RLHFDataset(str(tmp_path / "verl" / "train.parquet"), tokenizer, config)
    assert len(dataset) == 2
    for index, problem in enumerate(problems):
        row = dataset[index]
        assert row["raw_prompt"] == build_messages(problem) and row["data_source"] == "microcoder/src"
        assert json.loads(row["reward_model"]["ground_truth"]) == {"ref": problem.id, "sha256": problem_sha256(problem)}
        assert row["extra_info"]["problem_id"] == problem.id and row["index"] == index
