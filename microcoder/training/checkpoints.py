"""Which checkpoint `microcoder train --resume` continues from: the newest that loads.

TRL saves through transformers' Trainer, which writes checkpoint-N in place, one file after
another: the weights (config.json, model.safetensors), optimizer.pt, scheduler.pt,
rng_state.pth, trainer_state.json, and then ours, microcoder_state.json. No step of that
is atomic: a run killed while saving leaves a folder that lacks the later files, and a
file cut short (a kill during torch.save, a full disk) sits in a folder that has them all.
transformers' resume fails halfway on a cut file, with torch's "checkpoint file is
corrupted" naming neither file nor checkpoint; a missing optimizer, scheduler, RNG or
trainer-state file it skips without a word, and the run then continues from a state that
is not the checkpoint's (without trainer_state.json, from step 0).

So before anything is built, every file the resume will read is opened as its loader
opens it, without reading the tensors: safetensors' header (which must cover the file to
its last byte), torch's zip archives (their end record, which a cut file has lost, then
torch.load with mmap and weights_only), JSON parsed. Only structure is checked: a byte
changed inside a tensor's data is not seen. The newest checkpoint whose files all open is
resumed; newer ones that do not are set aside as checkpoints/unusable-checkpoint-N (kept
for a look, out of reach of the resume and of transformers' rotation, which keeps the
newest by modification time and would otherwise delete the good checkpoint before the bad
one). When none opens, the resume stops, naming each checkpoint's first bad file.
"""

from __future__ import annotations

import json
import pickle
import re
import zipfile
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from transformers.trainer_pt_utils import safe_globals

from microcoder.training.trainer import STATE_FILE

CHECKPOINT_NAME = re.compile(r"^checkpoint-(\d+)$")
"""transformers' checkpoint folder names: checkpoint-<optimizer updates>."""
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
"""The weights, whole or as shards listed in the index (save_pretrained's names)."""
UNUSABLE_PREFIX = "unusable-"
"""A checkpoint that does not load is renamed to this prefix + its name."""


class UnusableCheckpoint(ValueError):
    """No checkpoint of a run loads; the message names each checkpoint's first bad file."""


def checkpoint_files(folder: Path, processes: int) -> list[str]:
    """The files a resume with `processes` processes reads from `folder`, in saving order.

    The weights' shards are listed by their index and checked with it (`file_fault`).
    One process reads rng_state.pth and microcoder_state.json; with several, rank k reads
    rng_state_k.pth and microcoder_state_k.json.
    """
    weights = WEIGHTS_INDEX_FILE if (folder / WEIGHTS_INDEX_FILE).is_file() else WEIGHTS_FILE
    if processes == 1:
        ranked = ["rng_state.pth"], [STATE_FILE]
    else:
        ranked = ([f"rng_state_{rank}.pth" for rank in range(processes)],
                  [STATE_FILE.replace(".json", f"_{rank}.json") for rank in range(processes)])
    optional = ["scaler.pt"] if (folder / "scaler.pt").exists() else []  # saved with a grad scaler only
    return ["config.json", weights, "optimizer.pt", "scheduler.pt", *optional, *ranked[0], "trainer_state.json",
            *ranked[1]]


def file_fault(path: Path) -> str | None:
    """Why `path` would not load, in a few words; None when it opens as its loader opens it."""
    if not path.is_file():
        return "is missing"
    if path.stat().st_size == 0:
        return "is empty"
    try:
        if path.suffix == ".safetensors":
            with safe_open(str(path), framework="pt"):
                pass
        elif path.name == WEIGHTS_INDEX_FILE:
            for shard in sorted(set(json.loads(path.read_text(encoding="utf-8"))["weight_map"].values())):
                fault = file_fault(path.parent / shard)
                if fault is not None:
                    return f"lists {shard}, which {fault}"
        elif path.suffix == ".json":
            json.loads(path.read_text(encoding="utf-8"))
        else:  # torch.save's zip archives; the RNG states hold numpy arrays, which transformers allows too
            if not zipfile.is_zipfile(path):
                return "is cut short (no zip end record, which torch.save writes last)"
            with safe_globals():
                torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    # What a file's own bytes can make its loader say. An OSError (EIO, EMFILE, ENOMEM) is
    # the machine's and propagates: it says nothing against the checkpoint, which must not
    # be set aside for it.
    except (SafetensorError, pickle.UnpicklingError, ValueError, KeyError, RuntimeError, EOFError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        return f"does not load ({first.split('. ')[0]})"  # torch's text goes on about what may have caused it
    return None


def checkpoint_fault(folder: Path, processes: int = 1) -> str | None:
    """'<file> <why>' for the first file of checkpoint `folder` that would not load; None when all do."""
    for name in checkpoint_files(folder, processes):
        fault = file_fault(folder / name)
        if fault is not None:
            return f"{folder / name} {fault}"
    return None


def checkpoints_newest_first(checkpoints: Path) -> list[Path]:
    """The checkpoint-N folders under `checkpoints`, highest N first."""
    found = [(int(match.group(1)), path) for path in checkpoints.iterdir()
             if path.is_dir() and (match := CHECKPOINT_NAME.match(path.name))] if checkpoints.is_dir() else []
    return [path for _, path in sorted(found, reverse=True)]


def choose_checkpoint(checkpoints: Path, processes: int = 1) -> tuple[Path, list[str]]:
    """(the newest checkpoint under `checkpoints` that loads, one note per newer one set aside).

    Each newer checkpoint that does not load is renamed to unusable-checkpoint-N (or
    unusable-checkpoint-N-2, ... when that name is taken) and its note says which file
    failed and where the folder went. FileNotFoundError without any checkpoint-N;
    UnusableCheckpoint, with nothing renamed, when none loads.
    """
    folders = checkpoints_newest_first(checkpoints)
    if not folders:
        raise FileNotFoundError(f"--resume: no checkpoint-N under {checkpoints}")
    faults = []
    for folder in folders:
        fault = checkpoint_fault(folder, processes)
        if fault is None:
            return folder, [set_aside(bad, why) for bad, why in faults]
        faults.append((folder, fault))
    raise UnusableCheckpoint(f"--resume: no checkpoint under {checkpoints} loads: "
                             + "; ".join(fault for _, fault in faults))


def set_aside(folder: Path, fault: str) -> str:
    """Rename `folder` out of the checkpoints' names; a note saying why and where."""
    target, copies = folder.with_name(UNUSABLE_PREFIX + folder.name), 1
    while target.exists():
        copies += 1
        target = folder.with_name(f"{UNUSABLE_PREFIX}{folder.name}-{copies}")
    folder.rename(target)
    return f"{fault}: moved to {target.name}"
