"""TrainConfig: presets load, overrides are typed, errors name the key, the verl -> TRL mapping."""

from pathlib import Path
from typing import get_args

import pytest

from microcoder.algorithms import ADVANTAGE_MODES, AGGREGATION_MODES, KL_ESTIMATORS
from microcoder.training.config import TrainConfig, dump_config, grpo_arguments, load_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.parametrize("name", ["grpo", "dapo", "microcoder", "grpo-tiny", "dapo-tiny", "microcoder-tiny"])
def test_presets_load(name):
    load_config(CONFIGS / f"{name}.yaml")


def test_the_embedded_default_is_the_microcoder_preset():
    # (tests/test_training_presets.py diffs the three presets against each other.)
    assert load_config(CONFIGS / "microcoder.yaml") == TrainConfig()


def test_overrides_are_typed():
    config = load_config(None, ["beta=0.001", "dual_clip=3", "dynamic_sampling=true", "model=007",
                                "temperature_stages=[[0, 0.6], [50, 1.0]]", "dual_clip=null"])
    assert config.beta == 0.001 and config.dual_clip is None and config.dynamic_sampling is True
    assert config.model == "007" and config.temperature_stages == [(0, 0.6), (50, 1.0)]


@pytest.mark.parametrize("override, key", [
    ("bogus=1", "bogus"), ("total_steps=abc", "total_steps"), ("loss_aggregation=mean", "loss_aggregation"),
    ("ppo_mini_batch_size=4", "ppo_mini_batch_size"), ("temperature_stages=[[5, 1.0]]", "temperature_stages"),
    ("truncation_mask_rho=1.5", "truncation_mask_rho"), ("truncation_mask=some", "truncation_mask"),
    ("dynamic_sampling_max_rounds=-1", "dynamic_sampling_max_rounds"), ("dual_clip=0.5", "dual_clip"), ("beta", "beta"),
    ("reward_mode=partial", "reward_mode"), ("reward_pow=0", "reward_pow"), ("reward_pow=.inf", "reward_pow"),
    ("reward_max_tests=0", "reward_max_tests"), ("reward_cache_size=-1", "reward_cache_size"),
])
def test_bad_values_name_the_key(override, key):
    with pytest.raises(ValueError, match=key):
        load_config(None, [override])


def test_snapshot_round_trips(tmp_path):
    config = load_config(CONFIGS / "dapo.yaml", ["seed=3"])
    dump_config(config, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == config


def test_verl_batch_names_map_to_trl():
    # R=8 prompts per rollout, U=2 prompts per update, G=4, M=4 responses per forward pass:
    # 32 responses per rollout, 8 per update -> 2 micro-batches per update, 8 per rollout,
    # 4 updates per rollout step (x2 epochs).
    config = load_config(None, ["train_batch_size=8", "ppo_mini_batch_size=2", "group_size=4",
                                "micro_batch_size=4", "ppo_epochs=2", "total_steps=3", "save_every=2"])
    args = grpo_arguments(config, "out")
    assert args["num_generations"] == 4 and args["per_device_train_batch_size"] == 4
    assert args["gradient_accumulation_steps"] == 2 and args["steps_per_generation"] == 8
    assert args["num_iterations"] == 2 and config.updates_per_step == 8
    assert args["max_steps"] == 24 and args["logging_steps"] == 8 and args["save_steps"] == 16
    assert args["mask_truncated_completions"] is False and args["bf16"] is False
    # Two processes: each does half the micro-batches.
    args = grpo_arguments(config, "out", world_size=2)
    assert args["gradient_accumulation_steps"] == 1 and args["steps_per_generation"] == 4
    with pytest.raises(ValueError, match="micro_batch_size"):
        grpo_arguments(config, "out", world_size=3)
    # save_every=0: one checkpoint, at the end.
    assert grpo_arguments(config.model_copy(update={"save_every": 0}), "out")["save_steps"] == 24


@pytest.mark.parametrize("key, modes", [("advantage_mode", ADVANTAGE_MODES), ("loss_aggregation", AGGREGATION_MODES),
                                        ("kl_estimator", KL_ESTIMATORS)])
def test_modes_are_the_algorithms_and_a_bad_one_names_them_all(key, modes):
    # The field's Literal lists exactly the modes the math implements.
    assert get_args(TrainConfig.model_fields[key].annotation) == modes
    with pytest.raises(ValueError) as error:
        load_config(None, [f"{key}=bogus"])
    assert str(error.value).startswith(f"{key}: ") and all(repr(mode) in str(error.value) for mode in modes)
    assert getattr(load_config(None, [f"{key}={modes[-1]}"]), key) == modes[-1]
