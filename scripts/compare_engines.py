"""The default run on both rollout engines, seeds 0-4, beside the noise of `generate` against
itself, and each vLLM run's final weights evaluated greedily through `generate`: one command.

    ~/.cache/microcoder/venv-vllm/bin/python scripts/compare_engines.py [--root runs/engines] [--seeds 0 1 2 3 4]
    ~/.cache/microcoder/venv-vllm/bin/python scripts/compare_engines.py --report   # the table only, trains nothing
    python scripts/compare_engines.py --report --root results/engines   # the same from the record

`--record DIR` (results/engines for the record) copies each finished run's small files
(metrics.jsonl, config.yaml, summary.json, heldout_start.json, heldout_end.json, cost.json) and the
cross-engine evaluation's summary.json and results.jsonl into DIR/<arm>/seed-S as each
run finishes, so that a grid spanning several sittings can be committed run by run and the
report redrawn from DIR alone (no checkpoints there).

`--override KEY=VALUE` (repeatable) is given to every fresh run beside the arm's own, e.g.
a smoke run of the whole pipeline on a small model in minutes: `--root /tmp/engines
--seeds 0 --override model=PATH --override train_top_layers=null --override total_steps=1`
(PATH a checkpoint with 64-dimension heads, as the vLLM tests' tiny model: vLLM's CPU
attention refuses the tiny preset's 16).

Every run trains in the vLLM environment (`bash scripts/test_vllm.sh` builds it), so both
engines run on one transformers and the arms differ in the rollout engine alone:
- generate          `microcoder train seed=S`, the default run (HF generate);
- generate_chunked  the same with rollout_chunks=2: the same sampler drawing other random
                    numbers (each chunk left-padded apart, the stream read in another
                    order), i.e. what a difference between two arms that do not differ
                    looks like at this many seeds;
- vllm              the same with use_vllm=true (TRL's colocated engine, the correction).
Each run is its own `microcoder train` process in ROOT/<arm>/seed-S: skipped when its
summary.json is there, resumed from its checkpoint when it has one, otherwise (killed
before its first checkpoint) removed and started over; rerun the command to continue.
Then each vLLM run's final checkpoint is evaluated greedily through HF generate
(`microcoder eval-model --backend hf`, the run's held-out problems and token limit) in
ROOT/vllm/seed-S/eval-generate: the two engines must agree on the trained weights, not
only on the base model.

The report (printed, Markdown) gives per seed the step-0 and end held-out accuracy of each
arm (from the runs' per-problem files, heldout_start.json and heldout_end.json), the
differences vllm - generate, generate_chunked - generate and vllm - generate_chunked (PAIRS)
paired by seed with a two-sided t test on n - 1 degrees of freedom, the effect it detects
with 80% power, the verdict of the stated rule (RULE) and the problems each pair scores
differently per seed, each arm's training gain (end - step 0) read by the
experiments' one-sided rule, each arm's wall per run and, from the cost.json that `train`
writes beside each run (`run_measured`: wall, user and system CPU and peak RSS of the run's
own process tree, and the CPU other processes used beside it), its cost and vLLM's paired
by seed against `generate`'s (runs that resumed part-way left out), the cross-engine evaluation
problem by problem, and the range of the vLLM runs' per-step correction (vllm_ratio_mean,
vllm_ratio_max, vllm_fraction_capped).

Cost, from results/default_run.md: ~20 min per `generate` run and ~12 min per vLLM run on a
quiet 2-core machine in the vLLM environment, 8.5 GiB peak for vLLM: the 15 runs and 5
evaluations take about 4.5 hours, run one at a time on the whole machine (timings beside
other jobs are not the runs' cost).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from microcoder.experiments.verdict import ALPHA, CONTRADICTED, REPRODUCED, detectable_in_se, paired_verdict

ARMS = {"generate": [], "generate_chunked": ["rollout_chunks=2"], "vllm": ["use_vllm=true"]}
"""Arm -> `microcoder train` overrides beside seed and run_dir."""
COST_FILE = "cost.json"
"""A run's wall, CPU and peak memory as `run_measured` measured them, with what else the host ran."""
CROSS_EVAL = "eval-generate"
"""Folder, inside a vLLM run, of its final checkpoint's greedy evaluation through HF generate."""


def record_seed(root: Path, record: Path, seed: int) -> None:
    """Copy seed `seed`'s finished runs' small files from `root` into `record` (module docstring)."""
    from microcoder.experiments.publish import PUBLISHED_FILES

    for arm in ARMS:
        run_dir = root / arm / f"seed-{seed}"
        if not (run_dir / "summary.json").is_file():
            continue
        copies = [(run_dir / name, record / arm / f"seed-{seed}" / name) for name in (*PUBLISHED_FILES, COST_FILE)]
        copies += [(run_dir / CROSS_EVAL / name, record / arm / f"seed-{seed}" / CROSS_EVAL / name)
                   for name in ("summary.json", "results.jsonl")]
        for source, target in copies:
            if source.is_file():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)


def train(run_dir: Path, seed: int, overrides: list[str]) -> None:
    """Train (or resume, or skip) the run in `run_dir`."""
    if (run_dir / "summary.json").is_file():
        print(f"{run_dir}: finished", flush=True)
        return
    command = [sys.executable, "-m", "microcoder.cli", "train"]
    resumed = any((run_dir / "checkpoints").glob("checkpoint-*"))
    if resumed:
        command += ["--resume", str(run_dir)]
    else:
        if run_dir.exists():  # started and killed before its first checkpoint: nothing to keep
            shutil.rmtree(run_dir)
        command += [f"run_dir={run_dir}", f"seed={seed}", *overrides]
    print(" ".join(command), flush=True)
    run_measured(command, run_dir, resumed)


def run_measured(command: list[str], run_dir: Path, resumed: bool) -> None:
    """Run `command` and write its cost into run_dir/cost.json (COST_FILE); a failure raises
    CalledProcessError and writes nothing.

    The cost is the run's own (wait4: wall, user and system CPU, peak RSS of the process and
    what it waited for) beside what else the host did meanwhile: `other_cpu_s`, the CPU
    seconds every other process used during the run (the host's busy time from /proc/stat
    less the run's), and the 1-minute load at the start and end. A run with other CPU beside
    it, or one that resumed part-way, is not a quiet measurement of the run's cost."""
    load, busy, start = os.getloadavg()[0], host_busy_s(), time.monotonic()
    process = subprocess.Popen(command)
    try:
        _, status, usage = os.wait4(process.pid, 0)
    except BaseException:  # interrupted here: no run goes on training into run_dir unwatched
        process.kill()
        process.wait()
        raise
    process.returncode = os.waitstatus_to_exitcode(status)
    wall, busy_after = time.monotonic() - start, host_busy_s()
    if process.returncode != 0:
        raise subprocess.CalledProcessError(process.returncode, command)
    own = usage.ru_utime + usage.ru_stime
    other = None if busy is None or busy_after is None else max(0.0, busy_after - busy - own)
    cost = {"wall_s": round(wall, 1), "user_s": round(usage.ru_utime, 1), "sys_s": round(usage.ru_stime, 1),
            "peak_rss_mib": round(usage.ru_maxrss / 1024), "other_cpu_s": None if other is None else round(other, 1),
            "host_cpus": os.cpu_count(), "load_1min_start": round(load, 2),
            "load_1min_end": round(os.getloadavg()[0], 2), "resumed": resumed}
    (run_dir / COST_FILE).write_text(json.dumps(cost, indent=1) + "\n", encoding="utf-8")


def host_busy_s() -> float | None:
    """CPU seconds the host has spent busy since boot, all cores (/proc/stat's first line:
    user, nice, system, irq, softirq and steal; idle and iowait left out); None off Linux."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(value) for value in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def cross_evaluate(run_dir: Path, seed: int) -> None:
    """Greedy held-out evaluation of the vLLM run's final checkpoint through HF generate."""
    out = run_dir / CROSS_EVAL
    if (out / "summary.json").is_file():
        return
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    config = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    if config["heldout_temperature"] != 0 or config["problems"] != "default":
        raise ValueError(f"{run_dir}: the cross-engine evaluation reads a greedy held-out of the default problems")
    command = [sys.executable, "-m", "microcoder.cli", "eval-model", "--model", summary["final_checkpoint"],
               "--problems", "default", "--problems-seed", str(seed), "--n", "1", "--temperature", "0",
               "--top-p", "1.0", "--max-new-tokens", str(config["max_new_tokens"]), "--seed", str(seed),
               "--backend", "hf", "--no-strict-judge", "--out", str(out)]
    print(" ".join(command), flush=True)
    subprocess.run(command, check=True)


def heldout_scores(run_dir: Path, name: str) -> dict[str, float]:
    """{problem id: share of samples accepted} of the run's held-out evaluation at the start or end."""
    record = json.loads((run_dir / f"heldout_{name}.json").read_text(encoding="utf-8"))
    return record["scores"]["heldout_accuracy"]


def eval_model_scores(out: Path) -> dict[str, float]:
    """{problem id: share accepted} of an eval-model folder (robust judge, every sample). A
    judge_error (the evaluator failed, not the program) stops the report: it is no score."""
    path = out / "results.jsonl"
    tally: dict[str, list[int]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        row = json.loads(line)
        if row["verdict"] == "judge_error":
            raise ValueError(f"{path}, row {number}, verdict: the evaluator failed on problem {row['problem_id']} "
                             f"(judge_error); delete {out} and run the cross-engine evaluation again")
        counts = tally.setdefault(row["problem_id"], [0, 0])
        counts[0] += 1
        counts[1] += row["verdict"] == "accepted"
    return {problem: accepted / judged for problem, (judged, accepted) in tally.items()}


def run_cost(run_dir: Path) -> dict | None:
    """The run's cost.json, or None when it has none or the run resumed part-way (its figures
    then cover only the part after the resume)."""
    path = run_dir / COST_FILE
    if not path.is_file():
        return None
    cost = json.loads(path.read_text(encoding="utf-8"))
    return None if cost["resumed"] else cost


def other_cpu(costs) -> str:
    """What else the host ran beside these runs: the other processes' CPU as a share of each
    run's wall on all cores, its range ("unmeasured" for runs without the figure)."""
    shares = [c["other_cpu_s"] / (c["wall_s"] * c["host_cpus"]) for c in costs if c.get("other_cpu_s") is not None]
    return "unmeasured" if not shares else f"{min(shares):.0%}-{max(shares):.0%} of the host"


def mean(scores: dict[str, float]) -> float:
    return statistics.fmean(scores.values())


def paired_test(differences: list[float]) -> tuple[float, float | None, float | None]:
    """(mean, SE, two-sided p) of the paired t test on n - 1 df: the experiments' test
    (verdict.paired_verdict, whose p is one-sided) read both ways, p = 2 min(p, 1 - p).
    SE and p None for one seed; with SE 0 the test's own convention (p 0 for a mean other
    than 0, 1 for a mean of 0)."""
    verdict = paired_verdict(differences, "greater")
    return verdict.mean, verdict.se, None if verdict.p is None else min(1.0, 2 * min(verdict.p, 1 - verdict.p))


RULE = ("Rule: two arms differ when the two-sided paired t test on the seeds' end held-out accuracies gives "
        "p <= 0.05 (two-sided: the question has no direction); otherwise no difference is detected, and the "
        "detectable effect (two-sided 5%, 80% power at the measured SE, non-central t) says how large a "
        "difference this many seeds would have shown. generate_chunked - generate is what a difference "
        "between two arms that do not differ looks like; vllm - generate_chunked reads vLLM against that "
        "other draw of the same engine.")

# (arm, baseline) pairs the rule reads: the engine question, the noise baseline, and the engine
# against the baseline's other draw (an engine difference shows against both draws of `generate`)
PAIRS = (("vllm", "generate"), ("generate_chunked", "generate"), ("vllm", "generate_chunked"))


def problems_apart(scores: dict[str, float], other: dict[str, float], files: str) -> int:
    """How many held-out problems two evaluations of one seed's problems score differently (two
    runs' ends: the flips whose net the seeds' paired test reads; one run's weights through
    both engines: where the engines disagree). `files` names the two for the error."""
    if set(scores) != set(other):
        raise ValueError(f"{files}: score different held-out problems")
    return sum(scores[problem] != other[problem] for problem in scores)


def engine_verdict(p: float | None) -> str:
    """The rule's reading of one paired comparison (RULE)."""
    if p is None:
        return "one seed: no test"
    return "differ" if p <= ALPHA else "no difference detected"


def gain_text(gains: list[float]) -> str:
    """The training gain (end - step-0 held-out accuracy, per seed) read by the experiments'
    one-sided rule in the direction training is for (microcoder.experiments.verdict)."""
    verdict = paired_verdict(gains, "greater")
    reading = {REPRODUCED: "the gain holds", CONTRADICTED: "training lowered it"}.get(verdict.verdict, "no gain shown")
    figures = f"{verdict.mean:+.3f}"
    if verdict.se is not None:
        figures += (f" (SE {verdict.se:.3f}" + ("" if verdict.p is None else f"; one-sided p = {verdict.p:.3f}") +
                    f"; detectable with 80% power: {verdict.mde:.3f})")
    return (f"gain end - step 0 over {verdict.n} seed{'s' if verdict.n > 1 else ''}: {figures}; "
            f"**{reading}** (one-sided t test at 5%, the experiments' rule)")


def cost_lines(root: Path, seeds: list[int], ends: dict[str, dict[int, float]]) -> list[str]:
    """Each arm's wall per run (the runs' own clocks) and, where cost.json has it, its cost and
    vLLM's against generate's paired by seed."""
    lines: list[str] = []
    walls = {arm: [json.loads((root / arm / f"seed-{seed}" / "summary.json").read_text())["seconds"]
                   for seed in seeds if seed in ends[arm]] for arm in ARMS}
    if any(walls.values()):
        lines.append("- wall per run, the runs' own clock (whatever else ran beside them counts in it): " + ", ".join(
            f"{arm} {statistics.fmean(values) / 60:.1f} min (mean of {len(values)})"
            for arm, values in walls.items() if values))
    costs = {arm: {seed: cost for seed in seeds if (cost := run_cost(root / arm / f"seed-{seed}")) is not None}
             for arm in ARMS}
    if any(costs.values()):
        lines.append("- cost per run from cost.json (runs that resumed part-way left out), mean: " + "; ".join(
            f"{arm} wall {statistics.fmean(c['wall_s'] for c in runs.values()) / 60:.1f} min, user+sys CPU "
            f"{statistics.fmean(c['user_s'] + c['sys_s'] for c in runs.values()) / 60:.1f} min, peak RSS "
            f"{max(c['peak_rss_mib'] for c in runs.values()) / 1024:.1f} GiB at most, other processes' CPU "
            f"beside it {other_cpu(runs.values())} (n = {len(runs)})"
            for arm, runs in costs.items() if runs))
        paired = [seed for seed in costs["vllm"] if seed in costs["generate"]]
        if paired:
            def ratio(key) -> float:
                return math.exp(statistics.fmean(math.log(key(costs["vllm"][seed]) / key(costs["generate"][seed]))
                                                 for seed in paired))
            wall, cpu = ratio(lambda c: c["wall_s"]), ratio(lambda c: c["user_s"] + c["sys_s"])
            lines.append(f"- vllm / generate paired by seed ({len(paired)}, geometric mean): wall {wall:.2f}x, "
                         f"user+sys CPU {cpu:.2f}x")
    return lines


def correction_lines(metrics: list[dict]) -> list[str]:
    """The range of the vLLM runs' per-step correction, overall and step by step: the importance
    weight of the rollouts' tokens, trainer's probability / vLLM's (TRL caps it at
    vllm_importance_sampling_cap)."""
    steps = [record for record in metrics if "vllm_ratio_mean" in record]
    if not steps:
        return []

    def span(rows: list[dict], key: str) -> str:
        values = [row[key] for row in rows]
        return f"{min(values):.4f}-{max(values):.4f}"

    lines = [f"- vLLM runs' per-step correction over {len(steps)} steps: vllm_ratio_mean "
             f"{span(steps, 'vllm_ratio_mean')}, vllm_ratio_max {span(steps, 'vllm_ratio_max')}, "
             f"vllm_fraction_capped {span(steps, 'vllm_fraction_capped')}",
             "", "| step | vLLM runs | vllm_ratio_mean (range over runs) | vllm_ratio_max (range) | "
             "vllm_fraction_capped (range) |", "|---|---|---|---|---|"]
    for step in sorted({row["step"] for row in steps}):
        rows = [row for row in steps if row["step"] == step]
        lines.append(f"| {step} | {len(rows)} | {span(rows, 'vllm_ratio_mean')} | {span(rows, 'vllm_ratio_max')} | "
                     f"{span(rows, 'vllm_fraction_capped')} |")
    return lines


def report(root: Path, seeds: list[int]) -> str:
    """The comparison as Markdown, from the runs under `root` that finished."""
    lines = ["| seed | step 0 | generate end | generate_chunked end | vllm end | vllm's weights through generate | "
             "problems scored alike |", "|---|---|---|---|---|---|---|"]
    ends: dict[str, dict[int, float]] = {arm: {} for arm in ARMS}
    end_scores: dict[str, dict[int, dict[str, float]]] = {arm: {} for arm in ARMS}
    gains: dict[str, dict[int, float]] = {arm: {} for arm in ARMS}
    ratios = []
    for seed in seeds:
        cells, starts = [], {}
        for arm in ARMS:
            run_dir = root / arm / f"seed-{seed}"
            if (run_dir / "summary.json").is_file():
                end_scores[arm][seed] = heldout_scores(run_dir, "end")
                ends[arm][seed] = mean(end_scores[arm][seed])
                starts[arm] = mean(heldout_scores(run_dir, "start"))
                gains[arm][seed] = ends[arm][seed] - starts[arm]
                cells.append(f"{ends[arm][seed]:.3f}")
            else:
                cells.append("not run")
        vllm_run = root / "vllm" / f"seed-{seed}"
        cross, alike = "not run", ""
        if (vllm_run / CROSS_EVAL / "summary.json").is_file():
            through_generate = eval_model_scores(vllm_run / CROSS_EVAL)
            through_vllm = heldout_scores(vllm_run, "end")
            apart = problems_apart(through_generate, through_vllm, f"{vllm_run / CROSS_EVAL / 'results.jsonl'} and "
                                                                   f"{vllm_run / 'heldout_end.json'}")
            cross = f"{mean(through_generate):.3f}"
            alike = f"{len(through_vllm) - apart} of {len(through_vllm)}"
        if (vllm_run / "metrics.jsonl").is_file():
            ratios += [json.loads(line) for line in (vllm_run / "metrics.jsonl").read_text().splitlines()]
        # one figure where the arms' step-0 evaluations agree (the same base model and problems),
        # each arm's where they do not: one shared number would hide the disagreement
        shown = {f"{start:.3f}" for start in starts.values()}
        start_cell = " ".join(shown) if len(shown) <= 1 else ", ".join(f"{arm} {start:.3f}"
                                                                      for arm, start in starts.items())
        lines.append(f"| {seed} | {start_cell} | {' | '.join(cells)} | {cross} | {alike} |")
    lines += ["", RULE, ""]
    for arm, baseline in PAIRS:
        paired = [seed for seed in seeds if seed in ends[arm] and seed in ends[baseline]]
        if not paired:
            continue
        average, se, p = paired_test([ends[arm][seed] - ends[baseline][seed] for seed in paired])
        detectable = None if se is None else detectable_in_se(len(paired) - 1, two_sided=True) * se
        lines.append(f"- {arm} - {baseline}, end held-out accuracy paired by seed ({len(paired)} "
                     f"seed{'s' if len(paired) > 1 else ''}): {average:+.3f}" + ("" if se is None else f" (SE {se:.3f}") +
                     ("" if p is None else f"; two-sided t test on {len(paired) - 1} df, p = {p:.3f}") +
                     ("" if se is None else f"; detectable with 80% power: {detectable:.3f})") +
                     f"; **{engine_verdict(p)}**; problems whose end scores differ, per seed: " +
                     ", ".join(str(problems_apart(end_scores[arm][seed], end_scores[baseline][seed],
                                                  f"{root / arm / f'seed-{seed}' / 'heldout_end.json'} and "
                                                  f"{root / baseline / f'seed-{seed}' / 'heldout_end.json'}"))
                               for seed in paired))
    for arm, per_seed in gains.items():
        if per_seed:
            lines.append(f"- {arm}: {gain_text(list(per_seed.values()))}")
    lines += cost_lines(root, seeds, ends) + correction_lines(ratios)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path("runs/engines"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override for every run (a fresh run only: a resumed one keeps its config)")
    parser.add_argument("--report", action="store_true", help="print the report of the runs present; train nothing")
    parser.add_argument("--record", type=Path, default=None,
                        help="copy each finished seed's small files here (results/engines for the record)")
    args = parser.parse_args()
    if not args.report:
        import vllm  # noqa: F401  (fails here, before hours of `generate` runs, outside the vLLM environment)

        try:
            for seed in args.seeds:  # seed by seed: a partial grid is a paired comparison already
                for arm, overrides in ARMS.items():
                    train(args.root / arm / f"seed-{seed}", seed, [*overrides, *args.override])
                    if args.record is not None:
                        record_seed(args.root, args.record, seed)
                cross_evaluate(args.root / "vllm" / f"seed-{seed}", seed)
                if args.record is not None:
                    record_seed(args.root, args.record, seed)
        except subprocess.CalledProcessError as error:
            sys.exit(f"compare_engines: `{' '.join(error.cmd)}` failed (exit {error.returncode}); its output is above")
    print(report(args.root, args.seeds))


if __name__ == "__main__":
    main()
