"""The pass-rate stage run as a build runs it, on the tiny model, with what its judge receives
recorded: the model's samples, and the pass rates the export carries. Used by
tests/test_vllm_pass_rate_ray.py (vLLM on CPU) and by scripts/gpu_check.py (vLLM on a GPU):

    python -m tests.pass_rate_support DIR    # the stage under engine ray, then local; one JSON line

Two problems of tests/fixtures/data/hf_rows.jsonl, 3 samples each at temperature 1, one
problem per batch (so the Ray engine has two batches, with their own seeds, in flight).
Validate's reference runs are off: the stage under test is difficulty.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

FIXTURES = Path(__file__).parent / "fixtures" / "data"
SAMPLES_PER_PROBLEM = 3
MAX_NEW_TOKENS = 16


def pass_rate_config(folder: Path, model_dir: Path, engine: str, backend: str, seed: int = 0):
    """The build config: `engine` (local or ray: evaluator and generation actors), the
    model's `backend`, the stage's `seed`."""
    from microcoder.data.config import load_build_config

    folder.mkdir(parents=True, exist_ok=True)
    settings = {"work_dir": str(folder / "work"), "progress": False, "workers": 2, "engine": engine,
                "ray": {"cpus_per_actor": 1}, "sources": [{"path": str(FIXTURES / "hf_rows.jsonl")}],
                "validate": {"run_references": False}, "amplify": {"keep_unverified": True},
                "difficulty": {"estimate_pass_rate": True, "model": str(model_dir), "backend": backend,
                               "samples_per_problem": SAMPLES_PER_PROBLEM, "max_new_tokens": MAX_NEW_TOKENS,
                               "batch_size": 1, "temperature": 1.0, "seed": seed}}
    (folder / "data.yaml").write_text(yaml.safe_dump(settings))
    return load_build_config(folder / "data.yaml")


def judged_samples_and_rates(config) -> tuple[list[list[str]], dict[str, dict]]:
    """Build `config`; returns the model's samples as the stage's judge received them (the
    local Evaluator's or the Ray engine's `evaluate`, on the driver: [problem id, response]
    in the order judged) and the exported pass rates by problem id."""
    from microcoder.data.pipeline import build
    from microcoder.data.ray_engine import RayEvaluator
    from microcoder.evaluator import Evaluator
    from microcoder.problems import read_problems

    judged: list[list[str]] = []

    def recording(original):
        def evaluate(self, problems, samples, *args, **kwargs):
            judged.extend([sample.problem_id, sample.response] for sample in samples if sample.response is not None)
            return original(self, problems, samples, *args, **kwargs)
        return evaluate

    originals = {kind: kind.evaluate for kind in (Evaluator, RayEvaluator)}
    for kind, original in originals.items():
        kind.evaluate = recording(original)
    try:
        build(config, log=lambda _: None)
    finally:
        for kind, original in originals.items():
            kind.evaluate = original
    exported = read_problems(config.stage_dir("export") / "microcoder-dataset.jsonl")
    return judged, {problem.id: problem.metadata["pass_rate"] for problem in exported}


def tiny_vllm_model(folder: Path) -> Path:
    """The tiny random model with 64-dimension heads (hidden 256), which vLLM's CPU
    attention serves (the default tiny model's 16-dimension heads it refuses)."""
    from microcoder.policy.model import save_tiny_model

    return save_tiny_model(folder / "tiny-256", 1, hidden_size=256)


def main(folder: Path) -> None:
    """The stage on vLLM under engine ray (Ray started here: one generation actor per GPU),
    then under engine local, in this order: on one GPU the actor's engine is gone (its
    process killed when the build ends) before the local one starts."""
    model_dir = tiny_vllm_model(folder)
    ray_samples, ray_rates = judged_samples_and_rates(pass_rate_config(folder / "ray", model_dir, "ray", "vllm"))
    local_samples, local_rates = judged_samples_and_rates(pass_rate_config(folder / "local", model_dir, "local", "vllm"))
    print(json.dumps({"ray": {"samples": ray_samples, "rates": ray_rates},
                      "local": {"samples": local_samples, "rates": local_rates}}), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
