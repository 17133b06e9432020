"""Each preset's tiny variant trains a tiny random-init model (real tokenizer) for 2 steps;
resuming from a checkpoint reproduces the next step's loss.

The verdicts come from `ScriptedEvaluator` (see tests/training_support.py): a random model
never passes a test, and with all rewards equal no parameter would move.
"""

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM

from microcoder.training.config import load_config
from microcoder.policy.model import tiny_model_and_tokenizer
from microcoder.training.metrics import METRICS_FILE
from microcoder.training.run import run_training
from tests.training_support import ScriptedEvaluator, tiny_problems

pytestmark = pytest.mark.slow  # each test trains the tiny model (tens of seconds on 2 cores)

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
ROLLOUT_KEYS = {"step", "reward_mean", "accuracy_mean", "response_length_mean", "response_length_max",
                "fraction_truncated", "fraction_qualifying", "fraction_masked", "fraction_unscorable",
                "groups_generated", "groups_kept", "groups_mixed", "sampling_rounds", "diversity", "entropy",
                "ppo_kl", "ratio_deviation", "clip_fraction_low", "clip_fraction_high", "temperature",
                "seconds_rollout", "seconds_reward", "seconds_reward_visible", "seconds_update", "tokens_per_second",
                "loss", "reward_cache_hit_rate", "reward_tests_hidden", "reward_mean_generated", "accuracy_mean_generated", "groups_generated_total",
                "responses_judged_total", "seconds_total"}
# The keys through which the paper's three algorithms differ; a preset may differ from
# another only here (any other difference would confound the comparison).
MECHANISM_KEYS = {"beta", "eps_high", "truncation_mask", "dynamic_sampling", "overlong_cache_length",
                  "temperature_stages"}
# The keys a tiny preset changes for a 2-step test run: what configs/tiny.yaml sets.
TINY_SIZE_KEYS = {"model", "total_steps", "group_size", "train_batch_size", "ppo_mini_batch_size",
                  "micro_batch_size", "max_new_tokens", "repetition_m", "heldout_size", "save_every",
                  "save_total_limit", "reward_workers", "learning_rate", "train_top_layers", "temperature_min_dwell"}
# What each *-tiny.yaml states beside its base: the preset's length- and run-scaled keys.
TINY_OWN_KEYS = {"grpo": set(), "dapo": {"overlong_cache_length"}, "microcoder": {"temperature_stages"}}
PRESETS = ("grpo", "dapo", "microcoder")


def train_tiny(preset: str, run_dir: Path, *overrides: str) -> Path:
    config = load_config(CONFIGS / f"{preset}-tiny.yaml", [f"run_dir={run_dir}", *overrides])
    return run_training(config, problems=tiny_problems(), evaluator=ScriptedEvaluator())


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / METRICS_FILE).read_text().splitlines()]


def last_checkpoint(run_dir: Path) -> Path:
    return max((run_dir / "checkpoints").glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))


@pytest.fixture(scope="module")
def microcoder_run(tmp_path_factory) -> Path:
    return train_tiny("microcoder", tmp_path_factory.mktemp("runs") / "microcoder")


def check_run(run_dir: Path, beta: float) -> list[dict]:
    records = read_metrics(run_dir)
    assert records[0] == {"step": 0, "heldout_accuracy": records[0]["heldout_accuracy"]}
    assert [record["step"] for record in records] == [0, 1, 2]
    for record in records[1:]:
        expected = ROLLOUT_KEYS | ({"kl"} if beta > 0 else set())
        assert set(record) - {"heldout_accuracy"} == expected
        assert record["response_length_max"] <= 16 and 0 <= record["fraction_masked"] <= record["fraction_truncated"]
        # Two updates per rollout: the second sees a moved policy, so the ratio leaves 1.
        assert record["ratio_deviation"] > 0 and record["ppo_kl"] != 0
    assert "heldout_accuracy" in records[-1]  # the last step is always evaluated
    # Parameters moved: the saved final model differs from the initial tiny model.
    initial, _ = tiny_model_and_tokenizer(seed=0)
    final = AutoModelForCausalLM.from_pretrained(last_checkpoint(run_dir))
    changed = [name for name, param in final.named_parameters()
               if not torch.equal(param, dict(initial.named_parameters())[name])]
    assert len(changed) > 0.5 * len(list(final.named_parameters()))
    assert (run_dir / "config.yaml").is_file() and (run_dir / "summary.json").is_file()
    # Both held-out evaluations' per-problem scores are kept, each averaging to its logged accuracy.
    for name, record in (("heldout_start.json", records[0]), ("heldout_end.json", records[-1])):
        scores = json.loads((run_dir / name).read_text())["scores"]["heldout_accuracy"]
        assert sum(scores.values()) / len(scores) == pytest.approx(record["heldout_accuracy"]), name
    return records


def test_microcoder_preset_trains(microcoder_run):
    records = check_run(microcoder_run, beta=0.0)
    # The staged schedule [(0, 0.7), (2, 0.8)] reached sampling: one T per stage.
    assert [record["temperature"] for record in records[1:]] == [0.7, 0.8]


@pytest.mark.parametrize("preset, beta", [("grpo", 0.001), ("dapo", 0.0)])
def test_baseline_presets_train(tmp_path, preset, beta):
    check_run(train_tiny(preset, tmp_path / preset), beta)


def test_resume_reproduces_the_next_steps_loss(microcoder_run, tmp_path):
    # Copy the finished run, drop its last checkpoint (step 2), resume from step 1's.
    resumed = tmp_path / "resumed"
    shutil.copytree(microcoder_run, resumed)
    shutil.rmtree(last_checkpoint(resumed))
    assert last_checkpoint(resumed).name == "checkpoint-2"  # 2 optimizer updates = 1 rollout step
    config = load_config(resumed / "config.yaml", [f"run_dir={resumed}"])
    run_training(config, resume=True, problems=tiny_problems(), evaluator=ScriptedEvaluator())

    original, again = read_metrics(microcoder_run), read_metrics(resumed)
    assert [record["step"] for record in again] == [0, 1, 2]  # step 2 redone once, not appended twice
    for key in ("loss", "reward_mean", "response_length_mean", "fraction_masked", "entropy", "temperature"):
        assert again[2][key] == pytest.approx(original[2][key], rel=1e-5, abs=1e-7), key
    # The step-0 scores were kept in the run directory: the resumed run pairs its final
    # held-out evaluation with them and reports the same gain and standard error.
    summaries = [json.loads((run / "summary.json").read_text()) for run in (microcoder_run, resumed)]
    assert summaries[1]["resumed"] and "resumed" not in summaries[0]
    for key in ("heldout_accuracy_before", "heldout_accuracy_after", "heldout_gain", "heldout_gain_se"):
        assert summaries[1][key] == pytest.approx(summaries[0][key]), key


def test_train_top_layers_freezes_everything_below(tmp_path):
    run_dir = train_tiny("microcoder", tmp_path / "top1", "train_top_layers=1", "total_steps=1")
    initial = dict(tiny_model_and_tokenizer(seed=0)[0].named_parameters())
    final = AutoModelForCausalLM.from_pretrained(last_checkpoint(run_dir))
    changed = {name for name, param in final.named_parameters() if not torch.equal(param, initial[name])}
    expected = {name for name in initial if name.startswith(("model.layers.1.", "model.norm."))}
    assert changed == expected


def preset_values(name: str) -> dict:
    return load_config(CONFIGS / f"{name}.yaml").model_dump()


def differing_keys(first: dict, second: dict) -> set[str]:
    return {key for key in first if first[key] != second[key]}


def test_presets_differ_only_in_the_papers_mechanisms():
    values = {name: preset_values(name) for name in PRESETS}
    for first in PRESETS:
        for second in PRESETS:
            extra = differing_keys(values[first], values[second]) - MECHANISM_KEYS
            assert not extra, f"{first} and {second} also differ in {sorted(extra)}"
    # and in what the paper says each one is
    grpo, dapo, microcoder = (values[name] for name in PRESETS)
    assert grpo["beta"] > 0 and dapo["beta"] == microcoder["beta"] == 0
    assert grpo["eps_high"] == grpo["eps_low"] and dapo["eps_high"] > dapo["eps_low"] and microcoder["eps_high"] > microcoder["eps_low"]
    assert (grpo["truncation_mask"], dapo["truncation_mask"], microcoder["truncation_mask"]) == ("none", "none", "conditional")
    assert dapo["dynamic_sampling"] and dapo["overlong_cache_length"] > 0
    assert not grpo["dynamic_sampling"] and not microcoder["dynamic_sampling"]
    assert len(grpo["temperature_stages"]) == len(dapo["temperature_stages"]) == 1 < len(microcoder["temperature_stages"])
    assert {values[name]["loss_aggregation"] for name in PRESETS} == {"token-mean"}
    # Each rollout feeds at least two optimizer updates, so old log-probs exist and clipping acts.
    assert all(load_config(CONFIGS / f"{name}.yaml").updates_per_step >= 2 for name in PRESETS)


def test_a_tiny_preset_is_its_preset_under_the_one_tiny_layer():
    # configs/tiny.yaml is the only copy of the sizes; each *-tiny.yaml layers it over its
    # preset (base:) and states only the keys scaled with the run.
    assert set(yaml.safe_load((CONFIGS / "tiny.yaml").read_text())) == TINY_SIZE_KEYS
    for name in PRESETS:
        own = yaml.safe_load((CONFIGS / f"{name}-tiny.yaml").read_text())
        assert own.pop("base") == [f"{name}.yaml", "tiny.yaml"]
        assert set(own) == TINY_OWN_KEYS[name]


def test_base_layers_files_under_a_files_own_keys(tmp_path):
    (tmp_path / "a.yaml").write_text("beta: 0.5\nlearning_rate: 0.01\nmicro_batch_size: 4\n")
    (tmp_path / "b.yaml").write_text("beta: 0.25\ngroup_size: 3\n")
    (tmp_path / "c.yaml").write_text("base: [a.yaml, b.yaml]\ngroup_size: 4\n")
    config = load_config(tmp_path / "c.yaml")
    assert (config.beta, config.learning_rate, config.group_size, config.micro_batch_size) == (0.25, 0.01, 4, 4)
    (tmp_path / "a.yaml").write_text("base: c.yaml\n")
    with pytest.raises(ValueError, match="loops back"):
        load_config(tmp_path / "c.yaml")
    (tmp_path / "a.yaml").write_text("base: gone.yaml\n")
    with pytest.raises(ValueError, match=r"a\.yaml: base: .*gone\.yaml does not exist"):
        load_config(tmp_path / "c.yaml")
    (tmp_path / "a.yaml").write_text("total_steps: [1\n")
    with pytest.raises(ValueError, match=r"a\.yaml: not YAML"):
        load_config(tmp_path / "c.yaml")


def test_tiny_presets_are_their_presets_at_tiny_sizes():
    tiny = {name: preset_values(f"{name}-tiny") for name in PRESETS}
    for name in PRESETS:
        full = preset_values(name)
        extra = differing_keys(full, tiny[name]) - TINY_SIZE_KEYS - {"temperature_stages", "overlong_cache_length"}
        assert not extra, f"{name}-tiny differs from {name} in {sorted(extra)}"
        # Stage steps scale with the run; the temperatures and the overlong share of the limit do not.
        assert [t for _, t in tiny[name]["temperature_stages"]] == [t for _, t in full["temperature_stages"]]
        assert (tiny[name]["overlong_cache_length"] / tiny[name]["max_new_tokens"]
                == full["overlong_cache_length"] / full["max_new_tokens"])
        assert {key: tiny[name][key] for key in TINY_SIZE_KEYS} == {key: tiny["grpo"][key] for key in TINY_SIZE_KEYS}
        assert load_config(CONFIGS / f"{name}-tiny.yaml").updates_per_step >= 2


def test_resume_of_a_refilling_dapo_run_repeats_its_next_step(tmp_path):
    # Step 2 refills (four of six problems can only be answered wrong): its extra prompts
    # come from the refill generator, which the checkpoint must restore.
    always_wrong = {f"tiny/add-{index}" for index in (0, 2, 3, 5)}
    config = load_config(CONFIGS / "dapo-tiny.yaml", [f"run_dir={tmp_path / 'dapo'}", "dynamic_sampling_max_rounds=8"])
    original = run_training(config, problems=tiny_problems(), evaluator=ScriptedEvaluator(always_wrong))
    resumed = tmp_path / "resumed"
    shutil.copytree(original, resumed)
    shutil.rmtree(last_checkpoint(resumed))
    config = load_config(resumed / "config.yaml", [f"run_dir={resumed}"])
    run_training(config, resume=True, problems=tiny_problems(), evaluator=ScriptedEvaluator(always_wrong))
    first, again = read_metrics(original)[2], read_metrics(resumed)[2]
    assert first["sampling_rounds"] > 1  # the step being redone did refill
    for key in ("loss", "reward_mean", "sampling_rounds", "groups_generated", "response_length_mean", "entropy"):
        assert again[key] == pytest.approx(first[key], rel=1e-5, abs=1e-7), key
