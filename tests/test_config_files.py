"""The one YAML config reader, whose errors name the file, and the first validation error's field."""

import pytest

from microcoder.config_files import read_mapping


def test_a_config_file_reads_as_a_mapping_or_fails_naming_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("beta: 0.5\n")
    assert read_mapping(path) == {"beta": 0.5}
    path.write_text("")
    assert read_mapping(path) == {}
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match=r"c\.yaml: expected a mapping of config keys, got list"):
        read_mapping(path)
    path.write_text("beta: [1\n")
    with pytest.raises(ValueError, match=r"c\.yaml: not YAML"):
        read_mapping(path)


def test_first_error_names_the_dotted_field_and_drops_pydantics_prefix():
    from pydantic import BaseModel, ValidationError, field_validator

    from microcoder.config_files import first_error

    class Item(BaseModel):
        size: int

        @field_validator("size")
        @classmethod
        def positive(cls, value):
            if value <= 0:
                raise ValueError("size must be positive")
            return value

    class Body(BaseModel):
        items: list[Item]

    with pytest.raises(ValidationError) as error:
        Body.model_validate({"items": [{"size": 1}, {"size": -2}]})
    assert first_error(error.value, whole="(body)") == ("items.1.size", "size must be positive")
    with pytest.raises(ValidationError) as error:
        Body.model_validate("not a mapping")
    assert first_error(error.value, whole="(body)")[0] == "(body)"
