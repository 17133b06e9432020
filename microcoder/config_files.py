"""Reading a YAML config file into a mapping (the one reader of the training, data and
experiment configs, whose errors name the file), and the first error of validating one
(first_error: the field and message the training config's, the experiment specs' and the
service requests' errors name)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError


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


def first_error(error: ValidationError, whole: str) -> tuple[str, str]:
    """The first error of a pydantic validation as (field, message): the field dotted
    (`samples.3.problem_id`; `whole` for an error of the whole object), the message without
    pydantic's "Value error, " prefix."""
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or whole
    return field, first["msg"].removeprefix("Value error, ")
