"""Every place microcoder reaches into TRL's private internals, read against trl 1.16.0.

`MicroCoderTrainer` (trainer.py) is our method; TRL's GRPOTrainer runs the loop around it
(data loader, buffered generation batch, gradient accumulation, checkpoints, logging).
The seams between the two are TRL's underscore methods and attributes, which a TRL
release may rename, re-sign or change the meaning of without notice. `TRLHooks` holds
every override of them, each a few lines that hand over to a public method of ours, so
that the trainer reads as the method and this file as the list of what an upgrade must
re-check. The hooks, what TRL does under each (1.16.0), and the test that breaks when
that changes (tests/test_training_trl_hooks.py unless named):

- `_generate_and_score_completions(inputs)`: TRL's rollout of a generation batch
  (sample, old / reference log-probs, reward, TRL's advantages), called by TRL's
  `_prepare_inputs` once per generation batch. In training it becomes our `rollout`;
  `trl_rollout` is TRL's own, which `rollout` calls once per sampling round.
- `_calculate_rewards(inputs, prompts, completions, completion_ids_list)`: the reward
  call inside TRL's rollout, gathered over processes. In training it is our `score`,
  whose scored batch `trl_rollout` hands back beside TRL's output (TRL's rewards, and
  the advantages it computes from them, are taken from that batch: one column, as one
  reward function gives).
- `_get_per_token_logps_and_entropies(...)`: every log-prob pass (old, reference,
  update), which becomes `token_log_probs`. Ours scores the completion positions only
  (`completion_log_probs`) and must give TRL's numbers; multimodal inputs and models
  without a final norm keep TRL's.
- `_generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, ...)`:
  the sampling of the process-local rows; ours splits it into `rollout_chunks` calls of
  TRL's (`sample_rows`).
- `model.generate`, swapped while TRL samples (`shared_prefill`): TRL's HF path calls
  `unwrapped_model.generate(input_ids=..., attention_mask=..., generation_config=...)`
  on the model `accelerator.unwrap_model` gives.
- `_compute_loss(model, inputs)`: the loss of one micro-batch, called by `compute_loss`;
  ours is `policy_loss`, fed TRL's log-prob pass, and divided by the gradient
  accumulation steps because TRL sets `loss_is_scaled_for_ga` (transformers then does
  not divide).
- `_save_checkpoint(model, trial)` / `_load_optimizer_and_scheduler(checkpoint)`: our
  state (generators, controller, totals) saved into and restored from TRL's
  `checkpoint-<global step>` folder (`save_own_state`, `load_own_state`).
- The fused LM head's temperature: `add_fused_lm_head` closes over the temperature when
  the trainer is built, so `set_temperature` rewrites that closure cell (the policy's and
  the reference model's) beside TRL's sampling temperature
  (tests/test_training_logprobs.py).
- `_metrics["train"]`: what TRL averages into its logs for `report_to` (`log_to_trl`).
- vLLM (tests/test_vllm_training.py, tests/test_vllm_generation.py: the vLLM environment,
  `bash scripts/test_vllm.sh`; here only TRL's names and signatures are checked):
  `grpo_trainer.VLLMGeneration` swapped while the trainer is built (`colocated_vllm`),
  `VLLMGeneration._init_vllm` (the engine start, `vllm_generation.LLM` given our dtype,
  eager mode, and a seed derived from the run's in place of TRL's tensor-parallel group
  index, inside `rng_state_kept`: vLLM's worker re-seeds the process as it starts;
  tests/test_vllm_seeds.py), `sync_weights` through `_iter_named_params` (colocate
  weight sync), and `_last_loaded_step`, TRL's record of the step whose weights vLLM holds
  (`sync_vllm_weights`). Why each is changed: `vllm_rollout.py`.

Building a trainer checks the installed TRL against `TRL_VERSION` and refuses another
one unless `ACCEPT_TRL_ENV` names it (after the hooks were checked against it).
"""

from __future__ import annotations

import abc
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import trl
from trl import GRPOTrainer

from microcoder.pins import refuse_other_release
from microcoder.policy.vllm_engine import dtype_name, engine_seed, prepare_environment, push_weights, rng_state_kept
from microcoder.policy.vllm_hooks import check_vllm_version

if TYPE_CHECKING:
    from microcoder.training.reward import ScoredBatch

TRL_VERSION = "1.16.0"
"""The TRL release the hooks below were read against (pyproject.toml pins it)."""
ACCEPT_TRL_ENV = "MICROCODER_ACCEPT_TRL"
"""Set to an installed TRL version other than TRL_VERSION to run on it anyway."""


def check_trl_version(installed: str | None = None) -> None:
    """Raise RuntimeError unless the installed TRL is TRL_VERSION or the one ACCEPT_TRL_ENV names."""
    refuse_other_release("trl", trl.__version__ if installed is None else installed, TRL_VERSION,
                         "microcoder/training/trl_hooks.py", ACCEPT_TRL_ENV,
                         "python -m pytest tests/test_training_trl_hooks.py, every test but the version pin's,")


def fused_head_temperature_cell(model):
    """The closure cell holding the temperature of TRL's fused LM head on `model`.

    `trl.trainer.utils.add_fused_lm_head` replaces `model.forward` with a closure over
    `temperature`; the training and old/reference log-probs are softmax(logits / that T).
    Writing the cell changes T for every later call, whatever wraps the forward later.
    """
    function = getattr(model.forward, "__func__", model.forward)
    names = function.__code__.co_freevars
    if "temperature" not in names:
        raise RuntimeError("model.forward is not TRL's fused LM head (no `temperature` in its closure); "
                           f"trl's internals changed: pin trl=={TRL_VERSION} or update fused_head_temperature_cell")
    return function.__closure__[names.index("temperature")]


class TRLHooks(GRPOTrainer, metaclass=abc.ABCMeta):
    """GRPOTrainer whose private methods hand over to the subclass's public ones, the
    abstract methods below (trainer.py, MicroCoderTrainer, implements them); what the
    hooks offer the subclass (and benchmarks that time it) is public too: `trl_rollout`,
    `token_log_probs`, `shared_prefill`, `set_temperature`, `sync_vllm_weights`,
    `log_to_trl`.
    """

    # ---- what the subclass provides ----------------------------------------------------------
    @abc.abstractmethod
    def rollout(self, inputs: list[dict]) -> dict:
        """A training rollout of the generation batch `inputs`: the dict TRL trains on."""

    @abc.abstractmethod
    def score(self, inputs: list[dict], completions: list[str], completion_ids: list[list[int]]) -> ScoredBatch:
        """The process-local responses of a rollout round (decoded, and as token ids),
        rows in `inputs`' order, judged and scored."""

    @abc.abstractmethod
    def sample_rows(self, prompt_ids: list[list[int]], sample, text_only: bool):
        """(completion ids per row, vLLM's log-probs or None) of the process-local rows,
        by `sample` (TRL's sampling of some rows)."""

    @abc.abstractmethod
    def completion_log_probs(self, model, input_ids, attention_mask, logits_to_keep: int, batch_size: int | None,
                             compute_entropy: bool):
        """(log-probs (B, K), entropies (B, K) or None) of the completion tokens, or None
        where TRL's own pass must run."""

    @abc.abstractmethod
    def policy_loss(self, inputs: dict, logp: torch.Tensor, entropies: torch.Tensor) -> torch.Tensor:
        """The loss of one micro-batch `inputs` of the rollout, given its log-probs and entropies (B, K)."""

    @abc.abstractmethod
    def save_own_state(self, folder: Path) -> None:
        """Write the subclass's state into TRL's checkpoint folder."""

    @abc.abstractmethod
    def load_own_state(self, folder: Path) -> None:
        """Restore what `save_own_state` wrote."""

    def __init__(self, *, model, reward_funcs, args, train_dataset, processing_class):
        check_trl_version()
        with colocated_vllm(args.seed) if args.use_vllm else contextlib.nullcontext():
            super().__init__(model=model, reward_funcs=reward_funcs, args=args, train_dataset=train_dataset,
                             processing_class=processing_class)
        self._scored_round: ScoredBatch | None = None  # see trl_rollout
        self.temperature_cells = [fused_head_temperature_cell(self.model)]
        if self.ref_model is not None:
            self.temperature_cells.append(fused_head_temperature_cell(self.accelerator.unwrap_model(self.ref_model)))

    # ---- rollout ------------------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs):
        if not self.model.training:  # TRL's own evaluation loop; unused by run_training
            return super()._generate_and_score_completions(inputs)
        return self.rollout(inputs)

    def trl_rollout(self, inputs: list[dict]) -> tuple[dict, ScoredBatch]:
        """TRL's rollout of `inputs`: sample, old / reference log-probs, reward. Returns TRL's
        dict of (B, ...) tensors (prompt_ids, prompt_mask, completion_ids, completion_mask,
        advantages, and old_per_token_logps / ref_per_token_logps where TRL computes them)
        and the scored batch `score` returned for the round, which TRL's rewards came from."""
        self._scored_round = None
        output = super()._generate_and_score_completions(inputs)
        scored, self._scored_round = self._scored_round, None
        if scored is None:
            raise RuntimeError("TRL's rollout did not call _calculate_rewards; trl's internals changed: "
                               f"pin trl=={TRL_VERSION} or update TRLHooks.trl_rollout")
        return output, scored

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        if not self.model.training:  # TRL's own evaluation loop: the reward called as TRL calls it
            return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        scored = self.score(inputs, completions, completion_ids_list)
        self._scored_round = scored  # handed back by trl_rollout, the call this one is inside of
        rewards = torch.tensor(scored.rewards, dtype=torch.float32, device=self.accelerator.device)  # NaN: unscorable
        return self.accelerator.gather(rewards.unsqueeze(1))  # (B over all processes, one reward function), as TRL's

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        def sample(rows: list[list[int]]):
            """TRL's sampling of some of the rows: (completion ids per row, vLLM's log-probs or None)."""
            return super(TRLHooks, self)._generate_single_turn(rows, images, multimodal_fields, num_generations,
                                                               has_tool_images)

        return self.sample_rows(prompt_ids, sample, text_only=images is None and not multimodal_fields)

    @contextlib.contextmanager
    def shared_prefill(self):
        """Inside, the policy's `generate` computes a group's prompt cache once for its G rows
        (`shared_prefill_generate`)."""
        from microcoder.policy.generation import shared_prefill_generate

        model = self.accelerator.unwrap_model(self.model)
        own = model.__dict__.get("generate")  # an instance attribute (a probe's wrapper) to put back
        inner = model.generate

        def generate(input_ids, attention_mask, **kwargs):
            return shared_prefill_generate(inner, model, input_ids, attention_mask, **kwargs)

        model.generate = generate
        try:
            yield
        finally:
            if own is None:
                del model.generate
            else:
                model.generate = own

    def set_temperature(self, temperature: float) -> None:
        """Sample AND compute training / old / reference log-probs at `temperature`."""
        self.temperature = temperature
        if self.use_vllm:  # TRL's vLLM sampler reads its own copy
            self.vllm_generation.temperature = temperature
        else:
            self.generation_config.temperature = temperature
            self.generation_kwargs["temperature"] = temperature
        for cell in self.temperature_cells:
            cell.cell_contents = temperature

    def sync_vllm_weights(self) -> None:
        """Push the policy's current weights into the colocated vLLM engine, as TRL does
        before a rollout, and tell TRL's rollout that they are there."""
        self.vllm_generation.sync_weights()
        self._last_loaded_step = self.state.global_step

    # ---- update -------------------------------------------------------------------------------
    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep,
                                           batch_size=None, compute_entropy=False, **kwargs):
        return self.token_log_probs(model, input_ids, attention_mask, logits_to_keep, batch_size,
                                    compute_entropy=compute_entropy, **kwargs)

    def token_log_probs(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                        compute_entropy=False, **kwargs):
        """Every log-prob pass (old, reference, update): (log-probs (B, K), entropies (B, K)
        or None, auxiliary loss None): ours where `completion_log_probs` applies, TRL's for
        multimodal inputs and other models."""
        if not any(value is not None and value is not False for value in kwargs.values()):
            scored = self.completion_log_probs(model, input_ids, attention_mask, logits_to_keep, batch_size,
                                               compute_entropy)
            if scored is not None:
                return scored[0], scored[1], None
        return super()._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep,
                                                          batch_size, compute_entropy=compute_entropy, **kwargs)

    def _compute_loss(self, model, inputs):
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        logp, entropies, _ = self.token_log_probs(
            model, input_ids, attention_mask, inputs["completion_ids"].size(1), compute_entropy=True)  # (B, K) at T
        # loss_is_scaled_for_ga: transformers sums the micro-batch losses of an update as they are.
        return self.policy_loss(inputs, logp, entropies) / self.current_gradient_accumulation_steps

    def log_to_trl(self, record: dict[str, float]) -> None:
        """Hand `record` to TRL's logging (averaged into its next log line, to `report_to`)."""
        for key, value in record.items():
            self._metrics["train"][f"microcoder/{key}"].append(float(value))

    # ---- checkpoints ----------------------------------------------------------------------------
    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        folder = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
        folder.mkdir(parents=True, exist_ok=True)
        self.save_own_state(folder)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is not None:
            self.load_own_state(Path(checkpoint))


# ---- vLLM: TRL's VLLMGeneration with our engine start and colocate weight sync ------------------

def vllm_generation_class(seed: int):
    """TRL's VLLMGeneration with our engine start and colocate weight sync (vllm_rollout.py says why),
    its engine seeded from the run's `seed`."""
    from trl.generation import vllm_generation

    class MicroCoderVLLM(vllm_generation.VLLMGeneration):
        def _init_vllm(self):
            if self.mode != "colocate":
                return super()._init_vllm()
            prepare_environment(in_process=False)  # external_launcher keeps the engine in-process itself
            check_vllm_version()
            original = vllm_generation.LLM
            dtype = dtype_name(next(self.model.parameters()).dtype)

            def llm(*args, **kwargs):
                if "seed" not in kwargs:
                    raise RuntimeError(f"trl's VLLMGeneration._init_vllm no longer passes LLM a seed; trl's internals "
                                       f"changed: pin trl=={TRL_VERSION} or update vllm_generation_class")
                # TRL's seed is the tensor-parallel group's index (one seed per group, whatever the run's)
                return original(*args, **{**kwargs, "seed": engine_seed(seed, kwargs["seed"])}, dtype=dtype,
                                enforce_eager=True)

            vllm_generation.LLM = llm
            # vLLM's worker re-seeds this process as it starts. One engine per process: the process
            # gets its own state back (TRL's seed + rank). Tensor-parallel ranks must draw alike, so
            # there the start's re-seeding stands: engine_seed(run seed, group) on every rank of a group.
            keep = rng_state_kept() if self.tensor_parallel_size == 1 else contextlib.nullcontext()
            try:
                with keep:
                    super()._init_vllm()
            finally:
                vllm_generation.LLM = original

        def sync_weights(self):
            if self.mode != "colocate" or self.enable_sleep_mode:
                return super().sync_weights()
            push_weights(self.llm, self._iter_named_params())

    return MicroCoderVLLM


@contextlib.contextmanager
def colocated_vllm(seed: int):
    """Inside, GRPOTrainer builds its vLLM generator from `vllm_generation_class(seed)`."""
    from trl.trainer import grpo_trainer

    original = grpo_trainer.VLLMGeneration
    grpo_trainer.VLLMGeneration = vllm_generation_class(seed)
    try:
        yield
    finally:
        grpo_trainer.VLLMGeneration = original
