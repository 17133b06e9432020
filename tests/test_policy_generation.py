"""Sampling with the tiny random model: shapes, EOS cutting, truncation flags, seeding."""

import pytest
import torch

from microcoder.policy.generation import GeneratedText, eos_token_ids, generate, split_response
from microcoder.policy.model import tiny_model_and_tokenizer

MAX_NEW_TOKENS = 10


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    eos = eos_token_ids(model, tokenizer)[0]
    # A random model almost never samples EOS (1 in 49,152). Raising its logit by 8.6 gives
    # p(EOS) ~ e^8.6 / (e^8.6 + 49151) ~ 0.1 per step, so that among a few samples of 10
    # tokens some end and some are cut off.
    def raise_eos(module, inputs, logits):
        logits = logits.clone()
        logits[..., eos] += 8.6
        return logits

    handle = model.lm_head.register_forward_hook(raise_eos)
    yield model, tokenizer
    handle.remove()


PROMPTS = ["def add(a, b):", "Write a program that prints hello."]


def test_split_response_cuts_at_first_eos_and_flags_truncation():
    eos, pad = [2], 0
    # Ended: EOS kept, the padding after it dropped.
    assert split_response([5, 6, 2, 2, 2], eos, max_new_tokens=5) == ([5, 6, 2], False)
    # EOS as the very last allowed token: ended, not truncated.
    assert split_response([5, 6, 7, 8, 2], eos, max_new_tokens=5) == ([5, 6, 7, 8, 2], False)
    # No EOS within the limit: truncated.
    assert split_response([5, 6, 7, 8, 9], eos, max_new_tokens=5) == ([5, 6, 7, 8, 9], True)
    # Any of several EOS ids ends the response.
    assert split_response([5, 9, pad, pad], [2, 9], max_new_tokens=4) == ([5, 9], False)


def test_generate_shapes_and_truncation_flags(tiny):
    model, tokenizer = tiny
    eos = set(eos_token_ids(model, tokenizer))
    groups = generate(model, tokenizer, PROMPTS, n=4, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0, seed=0,
                      batch_size=3, progress=False)
    assert len(groups) == len(PROMPTS) and all(len(group) == 4 for group in groups)
    flags = []
    for group in groups:
        for sample in group:
            assert isinstance(sample, GeneratedText)
            assert 1 <= len(sample.token_ids) <= MAX_NEW_TOKENS
            assert not eos & set(sample.token_ids[:-1])  # nothing after the first EOS
            if sample.truncated:
                assert len(sample.token_ids) == MAX_NEW_TOKENS and sample.token_ids[-1] not in eos
            else:
                assert sample.token_ids[-1] in eos
            assert sample.text == tokenizer.decode(sample.token_ids, skip_special_tokens=True)
            flags.append(sample.truncated)
    # Pinned with the seed: both kinds occur, so both branches above were checked.
    assert any(flags) and not all(flags)


def test_generate_is_seeded_and_leaves_caller_state_alone(tiny):
    model, tokenizer = tiny
    rng_before = torch.random.get_rng_state()
    padding_before = tokenizer.padding_side = "right"
    kwargs = dict(n=3, max_new_tokens=6, temperature=1.0, batch_size=4, progress=False)
    first = generate(model, tokenizer, PROMPTS, seed=7, **kwargs)
    again = generate(model, tokenizer, PROMPTS, seed=7, **kwargs)
    other = generate(model, tokenizer, PROMPTS, seed=8, **kwargs)
    ids = lambda groups: [[sample.token_ids for sample in group] for group in groups]  # noqa: E731
    assert ids(first) == ids(again)
    assert ids(first) != ids(other)
    assert torch.equal(torch.random.get_rng_state(), rng_before)
    assert tokenizer.padding_side == padding_before
    tokenizer.padding_side = "left"


def test_temperature_zero_is_greedy(tiny):
    model, tokenizer = tiny
    groups = generate(model, tokenizer, PROMPTS, n=3, max_new_tokens=5, temperature=0.0, seed=0, batch_size=6,
                      progress=False)
    for group in groups:
        assert len({tuple(sample.token_ids) for sample in group}) == 1


def test_generate_rejects_bad_arguments(tiny):
    model, tokenizer = tiny
    with pytest.raises(ValueError, match="backend"):
        generate(model, tokenizer, PROMPTS, n=1, max_new_tokens=2, temperature=1.0, backend="tgi")
    with pytest.raises(ValueError, match="temperature"):
        generate(model, tokenizer, PROMPTS, n=1, max_new_tokens=2, temperature=-1.0)
    assert generate(model, tokenizer, [], n=2, max_new_tokens=2, temperature=1.0) == []


def test_eval_and_probe_default_to_the_default_model():
    # They spell the name out so that importing them does not import transformers.
    from microcoder.policy.evaluation import ModelEvalConfig
    from microcoder.policy.model import DEFAULT_MODEL
    from microcoder.training.probe import ProbeConfig

    assert ModelEvalConfig().model == ProbeConfig().model == DEFAULT_MODEL


def test_shared_prefill_runs_each_distinct_prompt_once_and_samples_the_same_tokens(tiny):
    from microcoder.policy.generation import shared_prefill_generate

    model, tokenizer = tiny
    tokenizer.padding_side = "left"
    # Rows as a rollout lays them out: each prompt G = 3 times in a row, prompts of two lengths.
    encoded = tokenizer([PROMPTS[0]] * 3 + [PROMPTS[1]] * 3, return_tensors="pt", padding=True,
                        add_special_tokens=False)
    settings = dict(max_new_tokens=MAX_NEW_TOKENS, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                    pad_token_id=tokenizer.pad_token_id)
    seen = []
    handle = model.model.layers[0].register_forward_hook(lambda module, args, output: seen.append(args[0].shape[:2]))
    try:
        with torch.no_grad():
            torch.manual_seed(0)
            plain = model.generate(**encoded, **settings)
            plain_rows = list(seen)
            seen.clear()
            torch.manual_seed(0)
            shared = shared_prefill_generate(model.generate, model, encoded["input_ids"], encoded["attention_mask"],
                                             **settings)
    finally:
        handle.remove()
    assert torch.equal(shared, plain)
    width = encoded["input_ids"].size(1)
    assert plain_rows[0] == (6, width)  # the plain prefill: every row's prompt
    assert seen[0] == (2, width - 1) and seen[1] == (6, 1)  # two prompts once, then every row's last token


def test_in_a_log_sampling_progress_is_plain_lines_on_stderr(tiny, capsys, monkeypatch):
    # Under pytest stderr is not a terminal, as in a log file: no bar, but a line per batch
    # once PLAIN_PROGRESS_EVERY_S has passed (0 here: every batch after the first).
    from microcoder.policy import generation

    model, tokenizer = tiny
    monkeypatch.setattr(generation, "PLAIN_PROGRESS_EVERY_S", 0.0)
    generate(model, tokenizer, PROMPTS, n=3, max_new_tokens=2, temperature=1.0, seed=0, batch_size=2)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" (")[0] for line in lines] == ["sampling: 1/3 batches of 2", "sampling: 2/3 batches of 2"]
    generate(model, tokenizer, PROMPTS, n=3, max_new_tokens=2, temperature=1.0, seed=0, batch_size=2, progress=False)
    assert capsys.readouterr().err == ""
