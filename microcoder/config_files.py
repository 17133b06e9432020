"""Reading a YAML config file into a mapping (the one reader of the training, data and
experiment configs, whose errors name the file), the first error of validating one
(first_error: the field and message the training config's, the experiment specs' and the
service requests' errors name), and `CommandConfig`, the base of the configs the command
line builds (microcoder/cli.py makes each command's options from its fields)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import annotated_types
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.fields import FieldInfo


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


class ConfigError(ValueError):
    """A config value its field refuses: one line naming the field and the rule it breaks."""


class CommandConfig(BaseModel):
    """The base of an entry point's config: one declaration per setting, with its type,
    bounds (`Field(gt=...)`, a `Literal`) and a one-line docstring, which is also the
    command line's help for it. Frozen; unknown settings and non-finite numbers are refused;
    a refused value raises ConfigError (a ValueError) in one line:
    "time_limit_s must be positive and finite, got 0"."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True, allow_inf_nan=False)

    def __init__(self, /, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as error:
            raise ConfigError(config_error(type(self), error)) from None

    def replaced(self, **changes: Any):
        """This config with `changes`, checked as a new one is."""
        return type(self)(**{**dict(self), **changes})


def config_error(config: type[BaseModel], error: ValidationError) -> str:
    """The first error of validating `config` as one line: the field, then its rule as
    the field declares it (bounds, finite, the choices) or its validator's message."""
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"])
    kind, given = first["type"], first.get("input")
    info = config.model_fields.get(str(first["loc"][0])) if first["loc"] else None
    if kind == "value_error":
        return f"{field} {first['msg'].removeprefix('Value error, ')}".strip()
    if kind == "extra_forbidden":
        return f"{field}: no such setting (the settings: {', '.join(config.model_fields)})"
    if kind == "literal_error":
        return f"{field} must be one of {first['ctx']['expected'].replace(chr(39), '')}, got {given!r}"
    if info is not None and len(first["loc"]) == 1 and (kind == "finite_number"
                                                        or kind.startswith(("greater_than", "less_than"))):
        return f"{field} must be {field_rule(info)}, got {given!r}"
    if kind.startswith(("greater_than", "less_than")):  # an item of a sequence: the bound it missed
        (bound, value), = first["ctx"].items()
        words = {"gt": "more than", "ge": "at least", "lt": "less than", "le": "at most"}[bound]
        return f"{field} must be {'positive' if (bound, value) == ('gt', 0) else f'{words} {value}'}, got {given!r}"
    return f"{field}: {first['msg'].lower()}, got {given!r}"


def field_rule(info: FieldInfo) -> str:
    """A numeric field's bounds in words: "positive and finite", "0 or more", "0-65535"."""
    bounds = {type(item).__name__: getattr(item, type(item).__name__.lower()) for item in info.metadata
              if isinstance(item, (annotated_types.Gt, annotated_types.Ge, annotated_types.Lt, annotated_types.Le))}
    if "Ge" in bounds and "Le" in bounds:
        words = [f"{bounds['Ge']}-{bounds['Le']}"]
    else:
        words = [{"Gt": "positive" if bounds.get("Gt") == 0 else f"more than {bounds.get('Gt')}",
                  "Ge": f"{bounds.get('Ge')} or more", "Lt": f"less than {bounds.get('Lt')}",
                  "Le": f"{bounds.get('Le')} or less"}[name] for name in bounds]
    if info.annotation is float or (info.annotation is not None and float in getattr(info.annotation, "__args__", ())):
        words.append("finite")
    return " and ".join(words) or "a number"

