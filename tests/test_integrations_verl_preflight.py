"""The preflight (`python -m microcoder.integrations.verl.preflight CONFIG`) in verl's environment:
it passes on the example config with a real (tiny, byte-level) tokenizer and by-reference data,
fails in a Ray worker that cannot resolve the estimator or finds a problem edited since the
conversion, fails on a refused setting before Ray starts, and sees flush-to-zero.

Needs verl: `bash scripts/test_verl.sh` runs these; in the main environment they skip.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("verl", reason="verl 0.9.1 is not installed here: run `bash scripts/test_verl.sh`")

from microcoder.integrations.verl import preflight  # noqa: E402
from microcoder.integrations.verl.data import write_verl_parquet  # noqa: E402
from tests.helpers import stdin_problem  # noqa: E402
from tests.test_integrations_verl_estimator import EXAMPLES, example_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_FILE = EXAMPLES / "microcoder_qwen3_1.7b_4k.yaml"
PROBLEMS = [stdin_problem([("1 2\n", "3\n"), ("5 5\n", "10\n")], problem_id="sum", source="tests"),
            stdin_problem([("4\n", "8\n")], problem_id="double", source="tests")]


def tiny_checkpoint(directory: Path) -> Path:
    """A checkpoint folder with only what verl's reward worker reads: a byte-level tokenizer
    (one token per byte, EOS <|endoftext|> = 256, saved as transformers saves one) and a
    generation_config.json naming that EOS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {char: index for index, char in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.save_pretrained(directory)
    (directory / "generation_config.json").write_text(f'{{"eos_token_id": {fast.eos_token_id}}}')
    return directory


def run_files(directory: Path) -> dict[str, str]:
    """A tiny checkpoint, a problems JSONL and its by-reference parquet, in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    problems = directory / "problems.jsonl"
    problems.write_text("".join(problem.model_dump_json() + "\n" for problem in PROBLEMS))
    write_verl_parquet(PROBLEMS, directory / "train.parquet")
    return {"model": str(tiny_checkpoint(directory / "model")), "problems": str(problems),
            "parquet": str(directory / "train.parquet")}


def overrides(files, *extra):
    """The example config pointed at `files`, its Ray and sandbox pool small for 2 cores."""
    return [f"actor_rollout_ref.model.path={files['model']}", f"data.train_files={files['parquet']}",
            f"data.val_files={files['parquet']}",
            f"reward.custom_reward_function.reward_kwargs.problems_files=['{files['problems']}']",
            "reward.custom_reward_function.reward_kwargs.evaluator_workers=1", "ray_kwargs.ray_init.num_cpus=1",
            *extra]


def preflight_cli(*args, env=None):
    """(exit status, output, seconds) of the preflight command."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "microcoder.integrations.verl.preflight", str(EXAMPLE_FILE), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return run_files(tmp_path_factory.mktemp("preflight"))


def test_the_preflight_passes_on_the_example_config(files):
    status, output, seconds = preflight_cli(*overrides(files))
    assert status == 0, output
    for name in ("algorithm.adv_estimator resolves", "TransferQueue", "flush-to-zero", "tokenizer",
                 "reward path: judge", "reward path: advantage", "data.train_files", "data.val_files"):
        assert f"PASS  {name}" in output, (name, output)
    assert "accepted (want accepted), wrong_answer (want wrong_answer)" in output
    assert "2 rows by reference, all found" in output
    print(f"preflight passed in {seconds:.1f} s")


def test_a_worker_without_the_plugin_and_an_edited_problem_fail_by_name(files, tmp_path):
    """The Ray worker inherits VERL_USE_EXTERNAL_PLUGINS=none, so verl skips our entry point:
    the estimator does not resolve there, and the preflight says why. The problems file was
    edited after the conversion: the data check names the problem and the file."""
    edited = tmp_path / "problems.jsonl"
    changed = stdin_problem([("1 2\n", "4\n"), ("5 5\n", "10\n")], problem_id="sum", source="tests")
    edited.write_text("".join(problem.model_dump_json() + "\n" for problem in (changed, PROBLEMS[1])))
    status, output, _ = preflight_cli(
        *overrides(files), f"reward.custom_reward_function.reward_kwargs.problems_files=['{edited}']",
        env={"VERL_USE_EXTERNAL_PLUGINS": "none"})
    assert status == 1, output
    assert "FAIL  algorithm.adv_estimator resolves: microcoder_grpo is not registered in a Ray worker" in output
    assert "VERL_USE_EXTERNAL_PLUGINS=none" in output
    assert "FAIL  data.train_files" in output and "problem 'sum': the dataset row pins sha256" in output
    assert "PASS  reward path: judge" in output  # the rest still ran


def test_a_refused_setting_fails_before_ray_starts_naming_the_key(files):
    status, output, seconds = preflight_cli(*overrides(files), "algorithm.filter_groups.enable=true",
                                            "algorithm.filter_groups.metric=reward")
    assert status == 1
    assert "FAIL  algorithm (refused settings): algorithm.filter_groups.metric=reward is refused" in output
    assert "Ray" not in output and "resolves" not in output  # no Ray task ran
    print(f"refused in {seconds:.1f} s")


@pytest.mark.parametrize("override, key", [
    ("algorithm.filter_groups.metric=reward", "algorithm.filter_groups.metric=reward"),
    ("algorithm.rollout_correction.rollout_rs=seq_mean_k1", "algorithm.rollout_correction.rollout_rs=seq_mean_k1"),
    ("algorithm.use_kl_in_reward=true", "algorithm.use_kl_in_reward=false"),
    ("algorithm.adv_estimator=grpo", "this preflight checks microcoder_grpo runs"),
    ("actor_rollout_ref.rollout.n=1", "a group of one response has advantage 0"),
    ("reward.reward_manager.name=naive", "set source=importlib, name=MicroCoderRewardManager"),
    ("reward.custom_reward_function.path=null", "verl would pass its default_compute_score"),
])
def test_each_refused_setting_is_named(override, key):
    extra = ["algorithm.filter_groups.enable=true"] if "filter_groups" in override else []
    checks = preflight.config_checks(example_config(override, *extra))
    failed = [check for check in checks if not check.passed]
    assert len(failed) == 1 and key in failed[0].detail, failed


def test_accepted_neighbours_of_refused_settings_pass():
    """DAPO filtering on acc, and rejection sampling in bypass mode (in the actor's loss)."""
    for extra in (["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"],
                  ["algorithm.rollout_correction.rollout_rs=seq_mean_k1",
                   "algorithm.rollout_correction.bypass_mode=true"]):
        assert all(check.passed for check in preflight.config_checks(example_config(*extra))), extra


def test_flush_to_zero_is_seen():
    assert preflight.flush_to_zero_check().passed
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush denormals to zero")
    try:
        check = preflight.flush_to_zero_check()
    finally:
        torch.set_flush_denormal(False)
    assert not check.passed and "flush-to-zero (FTZ/DAZ) is on" in check.detail
