"""`microcoder plot`: reading metrics.jsonl strictly, drawing two runs into one PNG."""

import json

import pytest

from microcoder.training.plots import MetricsFormatError, plot_runs, read_metrics, run_labels, series


def write_run(folder, rows):
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def run_rows(reward_slope, length_slope, diversity_start, eval_every=5, steps=20):
    rows = []
    for step in range(1, steps + 1):
        row = {"step": step, "reward_mean": 0.2 + reward_slope * step, "response_length_mean": 100 + length_slope * step,
               "response_length_max": 256, "diversity": diversity_start - 0.01 * step, "temperature": 1.0}
        if step % eval_every == 0:
            row["heldout_accuracy"] = 0.1 + reward_slope * step
        rows.append(row)
    return rows


def test_plot_two_runs_writes_png(tmp_path):
    grpo = write_run(tmp_path / "grpo", run_rows(0.01, 2.0, 0.6))
    microcoder = write_run(tmp_path / "microcoder", run_rows(0.02, 6.0, 0.8))
    out = plot_runs([grpo, microcoder], tmp_path / "figs" / "compare.png")
    assert out == tmp_path / "figs" / "compare.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 20_000  # four panels with curves, not an empty canvas


def test_default_output_for_one_run_is_inside_it(tmp_path):
    run = write_run(tmp_path / "run", run_rows(0.01, 1.0, 0.5, steps=3))
    assert plot_runs([run]) == run / "metrics.png"
    assert (run / "metrics.png").is_file()


def test_missing_keys_are_gaps_not_errors(tmp_path):
    # No held-out rows yet, no diversity at all, a null and a NaN: all simply not plotted.
    rows = [{"step": 1, "reward_mean": 0.1}, {"step": 2, "reward_mean": None, "response_length_mean": 50},
            {"step": 3, "reward_mean": float("nan"), "response_length_mean": 60}]
    run = write_run(tmp_path / "early", rows)
    assert plot_runs([run], tmp_path / "early.png").is_file()
    metrics = read_metrics(run / "metrics.jsonl")
    assert series(metrics, "reward_mean") == ([1], [0.1])
    assert series(metrics, "heldout_accuracy") == ([], [])


def test_repeated_steps_keep_the_last_row_and_sort(tmp_path):
    run = write_run(tmp_path / "resumed", [{"step": 2, "reward_mean": 0.5}, {"step": 1, "reward_mean": 0.1},
                                           {"step": 2, "reward_mean": 0.7}])
    assert series(read_metrics(run / "metrics.jsonl"), "reward_mean") == ([1, 2], [0.1, 0.7])


@pytest.mark.parametrize("line, message", [
    ('{"step": 2, "reward_mean": 0.3', "row 3: not JSON"),
    ('[1, 2]', "row 3: expected a JSON object, got list"),
    ('{"reward_mean": 0.3}', "row 3: 'step' is missing"),
    ('{"step": 3, "diversity": "high"}', "row 3: 'diversity' is not a number: 'high'"),
])
def test_malformed_line_names_file_and_row(tmp_path, line, message):
    run = tmp_path / "broken"
    run.mkdir()
    path = run / "metrics.jsonl"
    path.write_text('{"step": 1, "reward_mean": 0.1}\n\n' + line + "\n")  # blank row 2 still counts
    with pytest.raises(MetricsFormatError, match=message) as error:
        plot_runs([run], tmp_path / "x.png")
    assert str(path) in str(error.value)


def test_missing_metrics_file_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        plot_runs([tmp_path], tmp_path / "x.png")


def test_labels_are_directory_names_unless_they_clash(tmp_path):
    assert run_labels([tmp_path / "a" / "run", tmp_path / "b" / "other"]) == ["run", "other"]
    assert run_labels(["a/run", "b/run"]) == ["a/run", "b/run"]


def test_plot_command(tmp_path):
    from typer.testing import CliRunner

    from microcoder.cli import app

    run = write_run(tmp_path / "run", run_rows(0.01, 1.0, 0.5, steps=4))
    result = CliRunner().invoke(app, ["plot", str(run), "--out", str(tmp_path / "p.png")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "p.png").is_file()
    with open(run / "metrics.jsonl", "a") as handle:
        handle.write("{oops\n")
    result = CliRunner().invoke(app, ["plot", str(run)])
    assert result.exit_code == 2
    assert "row 5: not JSON" in " ".join(result.output.split())  # rich wraps long lines
