"""Reading a YAML config file into a mapping: the one reader of the training, data and
experiment configs, whose errors name the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def read_mapping(path: str | Path) -> dict[str, Any]:
    """The mapping of keys in the YAML file at `path` (an empty file: {}); a ValueError
    naming the file when it is not YAML or not a mapping."""
    try:
        loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not YAML: {error}") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: expected a mapping of config keys, got {type(loaded).__name__}")
    return loaded
