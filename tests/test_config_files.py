"""The one YAML config reader: its errors name the file."""

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
