"""scripts/compare_engines.py's report: the two-sided paired test and what it reads from run folders."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from microcoder.experiments.verdict import detectable_in_se

SCRIPT = Path(__file__).parents[1] / "scripts" / "compare_engines.py"


@pytest.fixture(scope="module")
def compare_engines():
    spec = importlib.util.spec_from_file_location("compare_engines", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_paired_test_is_two_sided_on_n_minus_1_df(compare_engines):
    # vLLM against generate in the 3-seed record: 48 vs 50, 47 vs 51, 49 vs 55 problems of 96.
    # d = -(1, 2, 3) x 2/96: mean -4/96, SE (2/96)/sqrt(3), t = -2 sqrt(3); on 2 df the t
    # distribution's CDF is 1/2 + t / (2 sqrt(2 + t^2)), so p = 1 - 2 sqrt(3) / sqrt(14) = 0.0742.
    mean, se, p = compare_engines.paired_test([-2 / 96, -4 / 96, -6 / 96])
    assert mean == pytest.approx(-4 / 96)
    assert se == pytest.approx(2 / 96 / 3 ** 0.5)
    assert p == pytest.approx(1 - 2 * 3 ** 0.5 / 14 ** 0.5)
    assert round(p, 3) == 0.074
    assert compare_engines.paired_test([0.01]) == (0.01, None, None)
    # SE 0: every seed the same difference is a difference (p 0), every seed 0 none (p 1)
    assert compare_engines.paired_test([0.01, 0.01]) == (0.01, 0.0, 0.0)
    assert compare_engines.paired_test([0.0, 0.0]) == (0.0, 0.0, 1.0)
    # the other direction gives the same p: the test is two-sided
    assert compare_engines.paired_test([2 / 96, 4 / 96, 6 / 96])[2] == pytest.approx(p)


def test_the_engine_verdict_reads_the_two_sided_p_at_5_percent(compare_engines):
    assert compare_engines.engine_verdict(0.074) == "no difference detected"  # the 3-seed record
    assert compare_engines.engine_verdict(0.050) == "differ"
    assert compare_engines.engine_verdict(None) == "one seed: no test"


def spin_for(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def write_run(run_dir: Path, start: dict, end: dict, ratios=(), seconds: float = 60.0) -> None:
    run_dir.mkdir(parents=True)
    for name, scores in (("start", start), ("end", end)):
        (run_dir / f"heldout_{name}.json").write_text(json.dumps({"scores": {"heldout_accuracy": scores}}))
    (run_dir / "summary.json").write_text(json.dumps({"final_checkpoint": str(run_dir / "checkpoints/checkpoint-10"),
                                                               "seconds": seconds}))
    (run_dir / "metrics.jsonl").write_text("".join(
        json.dumps({"step": step, "vllm_ratio_mean": mean, "vllm_ratio_max": high, "vllm_fraction_capped": 0.0}) + "\n"
        for step, (mean, high) in enumerate(ratios, 1)))


def test_the_report_pairs_arms_by_seed_and_scores_vllms_weights_through_generate(compare_engines, tmp_path):
    start = {"a": 0.0, "b": 1.0, "c": 0.0, "d": 0.0}
    ends = {"generate": ({"a": 1.0, "b": 1.0, "c": 0.0, "d": 0.0}, {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.0}),
            "generate_chunked": ({"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.0}, {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.0}),
            "vllm": ({"a": 1.0, "b": 0.0, "c": 0.0, "d": 0.0}, {"a": 1.0, "b": 1.0, "c": 0.0, "d": 0.0})}
    for arm, per_seed in ends.items():
        for seed, end in enumerate(per_seed):
            write_run(tmp_path / arm / f"seed-{seed}", start, end,
                      ratios=[(1.001, 1.01), (0.999, 1.03)] if arm == "vllm" else (),
                      seconds=300.0 * (seed + 1) if arm == "vllm" else 600.0)
    cross = tmp_path / "vllm" / "seed-0" / compare_engines.CROSS_EVAL
    cross.mkdir()
    (cross / "summary.json").write_text("{}")
    verdicts = {"a": "accepted", "b": "accepted", "c": "wrong_answer", "d": "accepted"}  # b, d differ from vLLM's
    (cross / "results.jsonl").write_text("".join(json.dumps({"problem_id": problem, "verdict": verdict}) + "\n"
                                                 for problem, verdict in verdicts.items()))
    # cost: vLLM at half generate's wall in seed 0 and a quarter in seed 1 (geometric mean 1/sqrt(8) = 0.354),
    # CPU at half in both; the chunked run of seed 1 resumed and is left out
    for arm, seed, wall, cpu, resumed in (("generate", 0, 800, 1200, False), ("generate", 1, 800, 1200, False),
                                          ("vllm", 0, 400, 600, False), ("vllm", 1, 200, 600, False),
                                          ("generate_chunked", 0, 900, 1500, False),
                                          ("generate_chunked", 1, 50, 50, True)):
        (tmp_path / arm / f"seed-{seed}" / compare_engines.COST_FILE).write_text(json.dumps(
            {"wall_s": wall, "user_s": cpu - 60, "sys_s": 60, "peak_rss_mib": 3072 if arm == "vllm" else 1024,
             "other_cpu_s": 0.1 * wall, "host_cpus": 2, "load_1min_start": 0.2, "load_1min_end": 1.9,
             "resumed": resumed}))
    text = compare_engines.report(tmp_path, [0, 1])
    # other CPU 0.1 x wall on 2 cores: 5% of the host
    assert "generate_chunked wall 15.0 min, user+sys CPU 25.0 min, peak RSS 1.0 GiB at most, other processes' " \
           "CPU beside it 5%-5% of the host (n = 1)" in text
    assert "vllm / generate paired by seed (2, geometric mean): wall 0.35x, user+sys CPU 0.50x" in text
    assert "| 0 | 0.250 | 0.500 | 0.750 | 0.250 | 0.750 | 2 of 4 |" in text
    assert "| 1 | 0.250 | 0.750 | 0.750 | 0.500 | not run |  |" in text
    # vllm - generate: -0.25 both seeds (SE 0: p 0); chunked - generate: +0.25, 0 (SE 0.125, t 1 on 1 df:
    # the Cauchy's two-sided p = 1 - 2 atan(1) / pi = 0.5), detectable at 80% power 0.125 x the two-sided
    # non-centrality on 1 df (tested by hand in test_experiments_verdict.py)
    assert "- vllm - generate, end held-out accuracy paired by seed (2 seeds): -0.250 (SE 0.000; two-sided t test " \
           "on 1 df, p = 0.000; detectable with 80% power: 0.000); **differ**" in text
    detectable = 0.125 * detectable_in_se(1, two_sided=True)
    assert "- generate_chunked - generate, end held-out accuracy paired by seed (2 seeds): +0.125 (SE 0.125; " \
           f"two-sided t test on 1 df, p = 0.500; detectable with 80% power: {detectable:.3f}); " \
           "**no difference detected**" in text
    # vllm - generate_chunked: -0.5, -0.25 (SE 0.125, t -3 on 1 df: two-sided p = 1 - 2 atan(3) / pi = 0.205)
    assert "- vllm - generate_chunked, end held-out accuracy paired by seed (2 seeds): -0.375 (SE 0.125; " \
           f"two-sided t test on 1 df, p = 0.205; detectable with 80% power: {detectable:.3f}); " \
           "**no difference detected**" in text
    # end scores apart, seeds 0 and 1: vllm/generate b, c; chunked/generate c, none; vllm/chunked b+c, c
    assert "**differ**; problems whose end scores differ, per seed: 1, 1\n" in text
    assert "**no difference detected**; problems whose end scores differ, per seed: 1, 0\n" in text
    assert "**no difference detected**; problems whose end scores differ, per seed: 2, 1\n" in text
    assert compare_engines.RULE in text
    # gains from step 0's 0.25: generate +0.25, +0.5 (t 3 on 1 df: one-sided p = 1/2 - atan(3)/pi = 0.102);
    # vllm 0, +0.25 (t 1: p 0.25); chunked +0.5 twice (SE 0: the gain holds)
    assert f"- generate: gain end - step 0 over 2 seeds: +0.375 (SE 0.125; one-sided p = 0.102; detectable with " \
           f"80% power: {0.125 * detectable_in_se(1):.3f}); **no gain shown**" in text
    assert "- vllm: gain end - step 0 over 2 seeds: +0.125 (SE 0.125; one-sided p = 0.250;" in text
    assert "- generate_chunked: gain end - step 0 over 2 seeds: +0.500 (SE 0.000; one-sided p = 0.000; detectable " \
           "with 80% power: 0.000); **the gain holds**" in text
    assert "generate 10.0 min (mean of 2), generate_chunked 10.0 min (mean of 2), vllm 7.5 min (mean of 2)" in text
    assert "over 4 steps: vllm_ratio_mean 0.9990-1.0010, vllm_ratio_max 1.0100-1.0300" in text


def test_the_record_keeps_what_the_report_reads_and_no_checkpoint(compare_engines, tmp_path):
    root, record = tmp_path / "runs", tmp_path / "record"
    start = {"a": 0.0, "b": 1.0}
    for seed in (0, 1):
        for arm in compare_engines.ARMS:
            write_run(root / arm / f"seed-{seed}", start, {"a": float(seed), "b": 1.0},
                      ratios=[(1.002, 1.05), (0.998, 1.02)] if arm == "vllm" else ())
            (root / arm / f"seed-{seed}" / "checkpoints" / "checkpoint-10").mkdir(parents=True)
            (root / arm / f"seed-{seed}" / "checkpoints" / "checkpoint-10" / "model.safetensors").write_bytes(b"w")
    cross = root / "vllm" / "seed-0" / compare_engines.CROSS_EVAL
    cross.mkdir()
    (cross / "summary.json").write_text("{}")
    (cross / "results.jsonl").write_text("".join(json.dumps({"problem_id": p, "verdict": "accepted"}) + "\n"
                                                 for p in "ab"))
    (root / "vllm" / "seed-0" / compare_engines.COST_FILE).write_text(json.dumps(
        {"wall_s": 60, "user_s": 100, "sys_s": 5, "peak_rss_mib": 3000, "load_1min_start": 0.1,
         "load_1min_end": 0.2, "resumed": False}))
    compare_engines.record_seed(root, record, 0)
    assert (record / "vllm" / "seed-0" / compare_engines.COST_FILE).is_file()
    assert compare_engines.report(record, [0]) == compare_engines.report(root, [0])
    assert not list(record.rglob("checkpoint*")) and not (record / "generate" / "seed-1").exists()
    compare_engines.record_seed(root, record, 1)
    text = compare_engines.report(record, [0, 1])
    assert text == compare_engines.report(root, [0, 1])
    # step by step over both vLLM runs
    assert "| 1 | 2 | 1.0020-1.0020 | 1.0500-1.0500 | 0.0000-0.0000 |" in text
    assert "| 2 | 2 | 0.9980-0.9980 | 1.0200-1.0200 | 0.0000-0.0000 |" in text


def test_a_runs_cost_is_its_own_process_and_a_resumed_one_is_not_read_as_a_cost(compare_engines, tmp_path):
    # A child that holds 300 MiB and spins ~0.3 s of CPU: wait4 reads that child's own peak and CPU
    hog = ("import time; block = bytearray(300 * 2**20); end = time.process_time() + 0.3\n"
           "while time.process_time() < end: pass")
    compare_engines.run_measured([sys.executable, "-c", hog], tmp_path, resumed=False)
    cost = json.loads((tmp_path / compare_engines.COST_FILE).read_text())
    assert cost["peak_rss_mib"] >= 300 and cost["user_s"] + cost["sys_s"] >= 0.3 and cost["wall_s"] >= 0.3
    # A child that sleeps 1.5 s while this process spins 0.5 s of CPU beside it: that (and whatever
    # else the host ran) is the other processes' CPU, not the run's
    spin = threading.Thread(target=lambda: spin_for(0.5))
    spin.start()
    compare_engines.run_measured([sys.executable, "-c", "import time; time.sleep(1.5)"], tmp_path, resumed=False)
    spin.join()
    beside = json.loads((tmp_path / compare_engines.COST_FILE).read_text())
    assert beside["other_cpu_s"] >= 0.4 and beside["user_s"] + beside["sys_s"] < 0.4, beside
    assert beside["host_cpus"] == os.cpu_count()
    assert cost["resumed"] is False and compare_engines.run_cost(tmp_path) == beside
    compare_engines.run_measured([sys.executable, "-c", "pass"], tmp_path, resumed=True)
    assert compare_engines.run_cost(tmp_path) is None
    with pytest.raises(subprocess.CalledProcessError):
        compare_engines.run_measured([sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "failed", resumed=False)
    assert not (tmp_path / "failed").exists()


def test_a_driver_interrupted_while_a_run_trains_takes_the_run_down_with_it(compare_engines, tmp_path, monkeypatch):
    # The wait is interrupted (Ctrl-C reaching this process alone): the run must not train on unwatched
    started = []
    real_popen = subprocess.Popen

    def popen(command):
        started.append(real_popen(command))
        return started[-1]

    def interrupted_wait(pid, options):
        raise KeyboardInterrupt

    monkeypatch.setattr(compare_engines.subprocess, "Popen", popen)
    monkeypatch.setattr(compare_engines.os, "wait4", interrupted_wait)
    with pytest.raises(KeyboardInterrupt):
        compare_engines.run_measured([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path, resumed=False)
    assert started[0].poll() is not None and not (tmp_path / compare_engines.COST_FILE).exists()


def test_arms_whose_step_0_evaluations_disagree_show_each_one(compare_engines, tmp_path):
    for arm, start in (("generate", {"a": 0.0, "b": 1.0}), ("vllm", {"a": 1.0, "b": 1.0})):
        write_run(tmp_path / arm / "seed-0", start, {"a": 1.0, "b": 1.0})
    assert "| 0 | generate 0.500, vllm 1.000 | 1.000 | not run | 1.000 |" in compare_engines.report(tmp_path, [0])


def one_seed_judged_through_generate(compare_engines, root: Path, verdicts: dict[str, str]) -> None:
    """Seed 0 of every arm ending at a 1, b 0, and the vLLM run's cross-engine evaluation
    giving `verdicts` ({problem: verdict}, one sample each)."""
    scores = {"a": 1.0, "b": 0.0}
    for arm in compare_engines.ARMS:
        write_run(root / arm / "seed-0", scores, scores)
    cross = root / "vllm" / "seed-0" / compare_engines.CROSS_EVAL
    cross.mkdir(exist_ok=True)
    (cross / "summary.json").write_text("{}")
    (cross / "results.jsonl").write_text("".join(json.dumps({"problem_id": problem, "verdict": verdict}) + "\n"
                                                 for problem, verdict in verdicts.items()))


def test_a_judge_error_in_the_cross_engine_evaluation_stops_the_report_naming_its_row(compare_engines, tmp_path):
    # b's only sample is a judge error: dropped, it would leave b unscored and the report would read
    # the folder as one that scored other problems
    one_seed_judged_through_generate(compare_engines, tmp_path, {"a": "accepted", "b": "judge_error"})
    with pytest.raises(ValueError, match=r"results\.jsonl, row 2, verdict: the evaluator failed on problem b"):
        compare_engines.report(tmp_path, [0])
    shutil.rmtree(tmp_path)
    one_seed_judged_through_generate(compare_engines, tmp_path, {"a": "accepted", "b": "wrong_answer"})
    assert "| 0 | 0.500 | 0.500 | 0.500 | 0.500 | 0.500 | 2 of 2 |" in compare_engines.report(tmp_path, [0])


def test_two_runs_of_a_seed_scored_on_different_problems_stop_the_report(compare_engines, tmp_path):
    for arm in compare_engines.ARMS:
        end = {"a": 1.0, "c": 1.0} if arm == "vllm" else {"a": 1.0, "b": 1.0}
        write_run(tmp_path / arm / "seed-0", {"a": 0.0, "b": 1.0}, end)
    with pytest.raises(ValueError, match=r"vllm/seed-0/heldout_end\.json and .*/generate/seed-0/heldout_end\.json: "
                                         r"score different held-out problems"):
        compare_engines.report(tmp_path, [0])


def test_a_cross_engine_evaluation_of_other_problems_stops_the_report(compare_engines, tmp_path):
    one_seed_judged_through_generate(compare_engines, tmp_path, {"a": "accepted"})
    with pytest.raises(ValueError, match=r"eval-generate/results\.jsonl and .*vllm/seed-0/heldout_end\.json: "
                                         r"score different held-out problems"):
        compare_engines.report(tmp_path, [0])


PAIR_LINE = re.compile(r"^- (\w+) - (\w+), end held-out accuracy paired by seed \(5 seeds\): "
                       r"([+-]\d\.\d{3}) \(SE (\d\.\d{3}); two-sided t test on 4 df, p = (\d\.\d{3}); "
                       r"detectable with 80% power: (\d\.\d{3})\); \*\*(.+?)\*\*", re.MULTILINE)
GAIN_LINE = re.compile(r"^- (\w+): gain end - step 0 over 5 seeds: ([+-]\d\.\d{3}) \(SE (\d\.\d{3}); one-sided p = "
                       r"(\d\.\d{3}); detectable with 80% power: (\d\.\d{3})\); \*\*(.+?)\*\*", re.MULTILINE)


def test_the_record_and_the_front_pages_quote_the_engine_report(compare_engines):
    """results/default_run.md's engine section, results/README.md and the README quote what the
    report draws from the committed runs (results/engines): the per-seed table, each pair's
    difference, SE, two-sided p, detectable effect and verdict, each arm's gain."""
    module = compare_engines
    repo = SCRIPT.parents[1]
    report = module.report(repo / "results" / "engines", [0, 1, 2, 3, 4])
    record = (repo / "results" / "default_run.md").read_text(encoding="utf-8")
    section = record.split("\n## The default run on vLLM against `generate`, seeds 0-4", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in report.split(module.RULE)[0].splitlines() if re.match(r"\| \d \|", line)]
    assert len(rows) == 5 and all(row in section.splitlines() for row in rows)
    pairs = PAIR_LINE.findall(report)
    assert {(arm, baseline) for arm, baseline, *_ in pairs} == set(module.PAIRS)
    for arm, baseline, difference, se, p, detectable, verdict in pairs:
        row = next(line for line in section.splitlines() if line.startswith(f"| {arm} - {baseline} "))
        assert f"| {difference} ({se}) | {p} | {detectable} | {verdict} |" in row.replace("**", ""), row
    gains = GAIN_LINE.findall(report)
    assert {arm for arm, *_ in gains} == set(module.ARMS)
    for arm, gain, se, p, detectable, verdict in gains:
        assert f"| {arm} | {gain} ({se}) | {p} | {detectable} | {verdict} |" in section
    # the front pages: both engines' gains on each, the engine difference read two-sided on the table
    readme, table = (" ".join((repo / page).read_text(encoding="utf-8").split())
                     for page in ("README.md", "results/README.md"))
    for arm, gain, se, *_ in gains:
        if arm != "generate_chunked":
            assert f"{gain} (SE {se}" in readme and f"{gain} (SE {se}" in table, arm
    _, _, difference, se, p, _, _ = next(pair for pair in pairs if pair[:2] == ("vllm", "generate"))
    assert f"{difference} (SE {se}, two-sided p {p}" in table
