"""The diversity-determined temperature rule on hand-made diversities, and the probe end to end
with the tiny random model."""

import json
from pathlib import Path

import pytest

from microcoder.training.probe import ProbeConfig, choose_temperature, run_probe, target_from_run
from tests.helpers import call_problem

# Per-prompt diversities chosen as binary fractions so that means and stds are exact.
# T      per prompt              mean    population std
# 0.6    0.25  0.25  0.25  0.25  0.25    0
# 0.8    0.5   0.5   0.5   0.5   0.5     0
# 1.0    0.625 0.75  0.75  0.875 0.75    0.0884
# 1.2    0.875 0.875 1.0   1.0   0.9375  0.0625
STEADY = {
    0.6: [0.25, 0.25, 0.25, 0.25],
    0.8: [0.5, 0.5, 0.5, 0.5],
    1.0: [0.625, 0.75, 0.75, 0.875],
    1.2: [0.875, 0.875, 1.0, 1.0],
}


@pytest.mark.parametrize("target, expected", [
    (0.2, 0.6),    # every T reaches it: the lowest
    (0.25, 0.6),   # "at or above": equal counts
    (0.3, 0.8),
    (0.5, 0.8),
    (0.6, 1.0),
    (0.9, 1.2),
])
def test_lowest_temperature_at_or_above_target(target, expected):
    chosen, reason = choose_temperature(STEADY, target, max_spread=0.2, max_diversity=0.97)
    assert chosen == expected
    assert f"T={expected:g} is the lowest steady temperature" in reason


def test_reason_lists_the_temperatures_below_target():
    _, reason = choose_temperature(STEADY, 0.6, max_spread=0.2, max_diversity=0.97)
    assert reason == ("T=1 is the lowest steady temperature whose diversity 0.750 is at or above the target "
                      "0.600 (spread 0.088 <= 0.2); below the target: T=0.6: 0.250, T=0.8: 0.500")


def test_input_order_does_not_matter():
    shuffled = {t: STEADY[t] for t in (1.2, 0.6, 1.0, 0.8)}
    assert choose_temperature(shuffled, 0.3)[0] == 0.8


def test_a_swinging_temperature_is_refused_even_when_it_reaches_the_target():
    # T=0.8 reaches 0.5 on average, but its prompts disagree: std of [0, 1, 0, 1] is 0.5.
    swinging = STEADY | {0.8: [0.0, 1.0, 0.0, 1.0]}
    chosen, reason = choose_temperature(swinging, 0.5, max_spread=0.2)
    assert chosen == 1.0
    assert "T=0.8 refused: spread 0.500 > 0.2" in reason
    # With a looser bound it is accepted.
    assert choose_temperature(swinging, 0.5, max_spread=0.6)[0] == 0.8


def test_a_noise_level_diversity_is_refused():
    # T=1.2's mean 0.9375 is above a 0.9 ceiling: its responses share almost nothing.
    chosen, reason = choose_temperature(STEADY, 0.9, max_spread=0.2, max_diversity=0.9)
    assert chosen == 1.0
    assert "no steady temperature reaches the target 0.900" in reason
    assert "T=1.2 refused: diversity 0.938 > 0.9 (noise)" in reason


def test_short_of_target_takes_the_most_diverse_steady_temperature():
    low = {0.6: [0.1, 0.1], 0.8: [0.25, 0.25], 1.0: [0.2, 0.2]}
    chosen, reason = choose_temperature(low, 0.5)
    assert chosen == 0.8
    assert reason.startswith("no steady temperature reaches the target 0.500; T=0.8 has the highest diversity 0.250")


def test_every_candidate_refused_is_an_error():
    with pytest.raises(ValueError, match="every candidate temperature is refused"):
        choose_temperature({1.0: [0.0, 1.0], 1.5: [0.99, 0.99]}, 0.5, max_spread=0.2, max_diversity=0.97)
    with pytest.raises(ValueError, match="no temperatures"):
        choose_temperature({}, 0.5)


def test_target_from_run_is_the_mean_of_the_last_quarter(tmp_path):
    rows = [{"step": step, "diversity": value} for step, value in
            enumerate([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.25, 0.125], start=1)]
    rows.insert(3, {"step": 99})  # a row without diversity is skipped, not counted
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    # 8 diversity values: the last quarter is [0.25, 0.125].
    assert target_from_run(tmp_path) == pytest.approx(0.1875)


def test_probe_with_the_tiny_model_reports_every_temperature():
    from microcoder.policy.model import tiny_model_and_tokenizer

    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    problems = [call_problem([("1", "2")], entry_point="inc", problem_id=f"p{i}", starter_code="def inc(x):")
                for i in range(2)]
    config = ProbeConfig(temperatures=(1.0, 0.5), n=3, max_new_tokens=6, batch_size=6, target_diversity=0.5)
    report = run_probe(config, model=model, tokenizer=tokenizer, problems=problems)
    assert list(report.diversity_by_t) == [0.5, 1.0]
    for values in report.diversity_by_t.values():
        assert len(values) == 2 and all(0.0 <= value <= 1.0 for value in values)
    assert report.fraction_truncated_by_t == {0.5: 1.0, 1.0: 1.0}  # a random model never says EOS
    # A random model's samples share no 4-gram: diversity 1 at both temperatures, noise.
    assert report.chosen is None and "noise" in report.reason
    assert json.loads(report.to_json())["diversity_by_t"].keys() == {"0.5", "1.0"}


def test_target_from_run_names_the_file_when_it_has_no_diversity(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "metrics.jsonl")):
        target_from_run(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "heldout_accuracy": 0.5}\n{"step": 1, "loss": 0.1}\n')
    with pytest.raises(ValueError, match=f"{tmp_path / 'metrics.jsonl'} has no diversity values"):
        target_from_run(tmp_path)


def test_defaults_come_from_the_training_config_and_there_is_no_default_target():
    from microcoder.training.config import TrainConfig
    from microcoder.training.probe import resolve_defaults

    resolved = resolve_defaults(ProbeConfig())
    assert resolved.target_diversity is None
    assert resolved.max_new_tokens == TrainConfig().max_new_tokens
    assert resolve_defaults(ProbeConfig(target_diversity=0.6)).target_diversity == 0.6


@pytest.fixture
def stub_measurement(monkeypatch):
    """Replace the sampling with the STEADY diversities; records how often it was called."""
    from microcoder.training import probe

    calls = []

    def measure(config, console, model=None, tokenizer=None, problems=None):
        calls.append(config)
        return probe.Measurement({t: list(values) for t, values in STEADY.items()},
                                 {t: 0.0 for t in STEADY}, {t: 10.0 for t in STEADY}, ["p0", "p1", "p2", "p3"])

    monkeypatch.setattr(probe, "measure_diversity", measure)
    return calls


def test_without_a_target_the_probe_measures_and_chooses_nothing(stub_measurement):
    from microcoder.training.probe import NO_TARGET

    report = run_probe(ProbeConfig())
    assert report.chosen is None and report.target is None and report.reason == NO_TARGET
    assert set(report.diversity_by_t) == set(STEADY)


def probe_command(*arguments):
    from typer.testing import CliRunner

    from microcoder.cli import app

    # Wide enough that rich does not wrap the messages the tests look for.
    return CliRunner().invoke(app, ["temperature-probe", *arguments], env={"COLUMNS": "1000"})


def test_probe_command_without_a_target_says_how_to_give_one(stub_measurement, tmp_path):
    result = probe_command("--write-config", str(tmp_path / "train.yaml"))
    assert result.exit_code == 1, result.output
    assert "chose no temperature" in result.output and "--target-from" in result.output
    assert "did not write" in result.output and not (tmp_path / "train.yaml").exists()


def test_probe_command_writes_a_training_config_with_the_chosen_temperature(stub_measurement, tmp_path):
    from microcoder.training.config import TrainConfig, load_config

    # Target 0.3: T=0.6 measures 0.25 (below), T=0.8 0.5 (steady) -> 0.8 (see STEADY).
    path = tmp_path / "train.yaml"
    result = probe_command("--target-diversity", "0.3", "--write-config", str(path))
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output
    written = load_config(path)
    assert written.temperature_stages == [(0, 0.8)] and written.temperature_control == "staged"
    assert written == TrainConfig(temperature_stages=[(0, 0.8)])  # everything else: the defaults


def test_probe_command_keeps_the_base_config_and_takes_the_target_from_a_run(stub_measurement, tmp_path):
    from microcoder.training.config import load_config

    base = Path(__file__).resolve().parents[1] / "configs" / "microcoder.yaml"
    run_dir = tmp_path / "pilot"
    run_dir.mkdir()
    # Four logged diversities: the last quarter is [0.6] -> target 0.6 -> T=1.0 (0.75).
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps({"step": step, "diversity": value}) + "\n"
                                                   for step, value in enumerate([0.9, 0.8, 0.7, 0.6], start=1)))
    path = tmp_path / "train.yaml"
    result = probe_command("--target-from", str(run_dir), "--write-config", str(path), "--base-config", str(base),
                           "--temperatures", "0.6,0.8,1.0,1.2")
    assert result.exit_code == 0, result.output
    assert load_config(path) == load_config(base, ["temperature_stages=[[0, 1.0]]"])


def test_probe_command_refuses_an_existing_config_before_measuring(stub_measurement, tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text("seed: 1\n")
    result = probe_command("--target-diversity", "0.3", "--write-config", str(path))
    assert result.exit_code == 2 and "already exists" in result.output
    assert stub_measurement == [] and path.read_text() == "seed: 1\n"
    result = probe_command("--base-config", str(path))
    assert result.exit_code == 2 and "--write-config" in result.output


def test_probe_command_writes_the_report_and_fails_without_a_choice(tmp_path):
    from typer.testing import CliRunner

    from microcoder.cli import app
    from microcoder.problems import write_problems
    from microcoder.policy.model import save_tiny_model

    model_dir = save_tiny_model(tmp_path / "tiny")
    write_problems(tmp_path / "problems.jsonl", [call_problem([("1", "2")], entry_point="inc", problem_id=f"p{i}")
                                                 for i in range(3)])
    arguments = ["temperature-probe", "--model", str(model_dir), "--problems", str(tmp_path / "problems.jsonl"),
                 "--temperatures", "0.7,1.3", "--n", "2", "--num-prompts", "2", "--max-new-tokens", "4",
                 "--out", str(tmp_path / "probe.json")]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 1, result.output  # no target given: measured only, no T chosen
    assert "--target-diversity" in result.output
    report = json.loads((tmp_path / "probe.json").read_text())
    assert report["chosen"] is None and set(report["diversity_by_t"]) == {"0.7", "1.3"}
    assert len(report["problem_ids"]) == 2
    result = CliRunner().invoke(app, arguments + ["--target-diversity", "0.5", "--target-from", str(tmp_path)])
    assert result.exit_code == 2 and "not both" in result.output
