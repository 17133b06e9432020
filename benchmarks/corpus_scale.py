"""The corpus build at scale: the sandbox work on `engine: local` and `engine: ray` side by
side, peak memory at 1x and 8x the shared sources, an extrapolation to 50k and 500k
problems, and a two-node Ray cluster on this machine building a small config.

    python benchmarks/corpus_scale.py                       # every part (~15-25 min on 2 cores)
    python benchmarks/corpus_scale.py --parts throughput    # one part: throughput, memory, cluster
    python benchmarks/corpus_scale.py --smoke               # throughput on 8 made-up problems, once

Parts:
- throughput: LeetCodeDataset v0.2.0-train's first `--problems` references run on their
  tests (validate's reference runs: `Evaluator.evaluate`) and answering their stored inputs
  (amplify's answers: `map_sandboxed` of `amplify._answer`), on a local evaluator of
  `--cores` workers and on a Ray instance of `--cores` CPUs (one evaluator actor), each
  `--repeats` times, each stage on both engines back to back (the first swapped every
  repeat). Reported: program runs per second per core (median of the repeats), and Ray's
  overhead paired by repeat: 1 - the geometric mean of Ray's rate / local's, with its
  two-sided 95% interval (t on the log ratios), so that a load both sides shared cancels.
- memory: every shared source that needs no sandbox to read (LeetCodeDataset, LiveCodeBench,
  CodeContests, Codeforces, APPS) converted once to one canonical file, and the same
  replicated 8 times under new ids (`<id>~r<k>`), each built (ingest, validate without
  reference runs, dedup, decontaminate, amplify off, difficulty, export) in a subprocess
  of its own: its peak resident memory (the process's VmHWM as it exits) and time. With
  `--baseline DIR`, the checkout in DIR builds each factor too, right after this one, and
  the two exports are compared file by file; with `--stage-peaks`, each stage is rerun
  after the build in a process of its own (`microcoder data <stage> --force`) for its peak.
- cluster: `ray start --head --num-cpus 1` and a second `ray start --address ... --num-cpus 1`
  (two nodes on this machine), `microcoder data build --engine ray --ray-address` on the
  small config of tests/test_data_ray.py (one evaluator actor per node), its corpus compared
  with a local build's (measured times left out).
- extrapolation (from throughput): the reference runs of a 50k and a 500k-problem build
  (each problem's stored tests, at this sample's mean count, plus `--generated` answers) on
  N cores at the measured rate per core: an extrapolation, not a measurement.

Needs ../shared (skips what it cannot read) and the `ray` extra. The machine's load is
printed with each part: timings under load are noisy, ratios are measured side by side.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "data"
if not SHARED.exists():
    SHARED = Path("/work/shared/data")
sys.path.insert(0, str(REPO))

from benchmarks.workloads import paired_ratio  # noqa: E402

LEETCODE = SHARED / "leetcodedataset" / "LeetCodeDataset-v0.2.0-train.jsonl.gz"
NO_SANDBOX_SOURCES = [
    "leetcodedataset/LeetCodeDataset-v0.3.1-test.jsonl.gz",
    "leetcodedataset/LeetCodeDataset-v0.2.0-train.jsonl.gz",
    "leetcodedataset/LeetCodeDataset-v0.2.0-test.jsonl.gz",
    "livecodebench-rllm/lcb_train.json",
    "livecodebench-rllm/lcb_test_private.json",
    "livecodebench-rllm/codecontests_test.json",
    "livecodebench-rllm/codeforces_test.json",
    "apps150/APPS_selected150.jsonl",
]


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.1f} / {five:.1f} / {fifteen:.1f} (1/5/15 min), {os.cpu_count()} CPUs"


# ------------------------------------------------------------------ throughput


def reference_problems(count: int, smoke: bool = False):
    from microcoder.data.loaders import load_problems
    from microcoder.problems import Problem

    if smoke:  # made-up call problems with references: the benchmark's path, without ../shared
        return [Problem(id=f"smoke/add-{n}", kind="call", entry_point="Solution().add", prompt="Add a and b.",
                        tests=[{"input": f"{n}\n{k}", "output": str(n + k)} for k in range(3)],
                        metadata={"reference_solution": "class Solution:\n    def add(self, a, b):\n        return a + b\n"})
                for n in range(count)]
    problems, _ = load_problems(LEETCODE)
    chosen = [p for p in problems if isinstance(p.metadata.get("reference_solution"), str) and p.tests][:count]
    return chosen


def validate_work(evaluator, problems) -> int:
    """validate's reference runs: every reference on every test; returns the runs made."""
    from microcoder.evaluator import Sample

    results = evaluator.evaluate(problems, [Sample(p.id, code=p.metadata["reference_solution"]) for p in problems])
    return sum(result.tests_run for result in results)


class _Local:
    """What `map_sandboxed` gets locally: the StageContext's shape, with this evaluator."""

    def __init__(self, evaluator, workers):
        self._evaluator, self.workers = evaluator, workers

    def evaluator(self):
        return self._evaluator

    def map_sandboxed(self, function, arguments):
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(self.workers) as pool:
            return list(pool.map(lambda args: function(self, *args), arguments))


def amplify_work(mapper, problems, limit_s: float) -> int:
    """amplify's answers: the reference run on each stored input as a call; returns the runs."""
    from microcoder.data.amplify import _answer

    jobs = [(p, test.input, limit_s) for p in problems for test in p.tests]
    answers = mapper.map_sandboxed(_answer, jobs)
    assert len(answers) == len(jobs)
    return len(jobs)


def throughput(args) -> dict:
    import ray

    from microcoder.data.config import PipelineConfig
    from microcoder.data.ray_engine import RayEvaluator
    from microcoder.evaluator import Evaluator, EvaluatorConfig

    problems = reference_problems(args.problems, args.smoke)
    print(f"\n## Throughput: {len(problems)} LeetCodeDataset references, {args.cores} cores, {load()}")
    local = Evaluator(EvaluatorConfig(workers=args.cores, time_limit_s=4.0, record_test_cpu=True))
    ray.init(address="local", num_cpus=args.cores, include_dashboard=False, log_to_driver=False, configure_logging=False)
    config = PipelineConfig(sources=[], workers=args.cores, time_limit_s=4.0)
    config.ray.chunk_size = args.chunk_size
    remote = RayEvaluator(config)
    rates: dict[tuple[str, str], list[float]] = {}
    try:
        # one untimed pass each: workers started, programs' imports warm
        validate_work(local, problems[:20])
        validate_work(remote, problems[:20])
        engines = [("local", local, _Local(local, args.cores)), ("ray", remote, remote)]
        for repeat in range(args.repeats):
            for stage in ("validate", "amplify"):
                for engine, evaluator, mapper in engines if repeat % 2 == 0 else engines[::-1]:
                    work = (lambda: validate_work(evaluator, problems)) if stage == "validate" else \
                        (lambda: amplify_work(mapper, problems, 1.0))
                    started = time.monotonic()
                    runs = work()
                    seconds = time.monotonic() - started
                    rates.setdefault((stage, engine), []).append(runs / seconds / args.cores)
                    print(f"  repeat {repeat + 1} {stage:8s} {engine:5s}: {runs} runs in {seconds:.1f} s, "
                          f"{runs / seconds / args.cores:.1f} runs/s/core")
    finally:
        local.close()
        remote.close()
        ray.shutdown()
    print("\n| stage | repeats | local runs/s/core (median) | ray runs/s/core (median) | "
          "Ray's overhead, paired (95% CI) |")
    print("|---|---:|---:|---:|---:|")
    summary = {}
    for stage in ("validate", "amplify"):
        local_rate = statistics.median(rates[(stage, "local")])
        ray_rate = statistics.median(rates[(stage, "ray")])
        ratio, low, high = paired_ratio(rates[(stage, "local")], rates[(stage, "ray")])
        overhead = 1 - ratio
        summary[stage] = {"local": local_rate, "ray": ray_rate, "overhead": overhead,
                          "overhead_interval": (1 - high, 1 - low)}
        print(f"| {stage} | {len(rates[(stage, 'ray')])} | {local_rate:.1f} | {ray_rate:.1f} | "
              f"{overhead:+.1%} ({1 - high:+.1%} to {1 - low:+.1%}) |")
    summary["tests_per_problem"] = sum(len(p.tests) for p in problems) / len(problems)
    return summary


def extrapolation(summary: dict, generated: int) -> None:
    tests = summary["tests_per_problem"]
    print(f"\n## Extrapolation (not measured): each problem {tests:.1f} stored tests (this sample's mean) "
          f"run in validate, {generated} generated inputs answered in amplify, at the Ray rates above")
    per_thousand_validate = 1000 * tests / summary["validate"]["ray"]
    per_thousand_amplify = 1000 * generated / summary["amplify"]["ray"]
    print(f"\nPer 1,000 problems: validate {per_thousand_validate:.0f} core-seconds ({tests:.1f} tests each), "
          f"amplify {per_thousand_amplify:.0f} core-seconds ({generated} answers each); divide by the cores.")
    print("\n| problems | cores | validate | amplify | both |")
    print("|---:|---:|---:|---:|---:|")
    for problems in (50_000, 500_000):
        for cores in (2, 16, 64, 256):
            validate_s = problems * tests / summary["validate"]["ray"] / cores
            amplify_s = problems * generated / summary["amplify"]["ray"] / cores
            print(f"| {problems:,} | {cores} | {hours(validate_s)} | {hours(amplify_s)} | {hours(validate_s + amplify_s)} |")


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


# ------------------------------------------------------------------ memory


def replicated_source(folder: Path, copies: int) -> tuple[Path, int]:
    """The no-sandbox shared sources as one canonical .jsonl.gz, each problem `copies` times."""
    from microcoder.data.loaders import load_problems

    path = folder / f"sources-x{copies}.jsonl.gz"
    count = 0
    with gzip.open(path, "wt", encoding="utf-8") as out:
        for name in NO_SANDBOX_SOURCES:
            if not (SHARED / name).exists():
                continue
            problems, _ = load_problems(SHARED / name)
            for problem in problems:
                for copy in range(copies):
                    row = problem.model_dump(mode="json")
                    if copy:
                        row["id"] = f"{problem.id}~r{copy}"
                    out.write(json.dumps(row) + "\n")
                    count += 1
    return path, count


def commit_of(tree: Path) -> str:
    return subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip() or str(tree)


PEAK_RUNNER = """
import atexit, os, runpy, sys

def report():  # VmHWM: this program's own peak, not the forking parent's (ru_maxrss keeps that across exec)
    with open("/proc/self/status") as status, open(os.environ["PEAK_FILE"], "w") as out:
        out.write(next(line.split()[1] for line in status if line.startswith("VmHWM:")))

atexit.register(report)
sys.argv = ["microcoder", *sys.argv[1:]]
runpy.run_module("microcoder.cli", run_name="__main__")
"""


def peak_of(arguments: list[str], tree: Path) -> tuple[int, int, str]:
    """(peak resident KiB, exit code, stderr) of `microcoder ARGUMENTS` run from the checkout
    `tree` (its folder first on the path): the program's own high-water mark (VmHWM, read as
    it exits). ru_maxrss would not do: a child's counts the parent's peak at the fork, which
    the program keeps across exec."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    with tempfile.TemporaryDirectory() as folder, tempfile.TemporaryFile() as errors:
        peak_file = Path(folder) / "peak"
        # `python -c` puts the working folder first on sys.path: run in `tree`, or another
        # checkout's microcoder would be the one imported.
        completed = subprocess.run([sys.executable, "-c", PEAK_RUNNER, *arguments], stdout=subprocess.DEVNULL,
                                   stderr=errors, env={**env, "PEAK_FILE": str(peak_file)}, cwd=tree)
        errors.seek(0)
        peak = int(peak_file.read_text()) if peak_file.exists() else 0
        return peak, completed.returncode, errors.read().decode(errors="replace")


def without_seconds(name: str, text: str) -> str:
    """An export file's text less the wall-clock seconds that differ between any two builds:
    the manifests' `seconds`, the datasheet's seconds column and its stage time."""
    if name == "manifest.json":
        return re.sub(r'"seconds": [\d.]+', '"seconds": -', text)
    if name == "datasheet.md":
        text = re.sub(r"^(\| \w+ \| \d+ \| \d+ \| \d+ \| \d+ \| )[\d.]+ \|$", r"\1- |", text, flags=re.M)
        return re.sub(r"Stage time before export: [\d.]+ s", "Stage time before export: - s", text)
    return text


def export_differences(one: Path, other: Path) -> list[str]:
    """The export files of two builds that differ: byte for byte, but for the seconds in
    manifest.json and datasheet.md (a file of one only counts)."""
    names = sorted({str(path.relative_to(folder)) for folder in (one, other) for path in folder.rglob("*")
                    if path.is_file()})
    differing = []
    for name in names:
        if not ((one / name).is_file() and (other / name).is_file()):
            differing.append(name)
        elif name in ("manifest.json", "datasheet.md"):
            if without_seconds(name, (one / name).read_text()) != without_seconds(name, (other / name).read_text()):
                differing.append(name)
        elif (one / name).read_bytes() != (other / name).read_bytes():
            differing.append(name)
    return differing


def memory(args) -> None:
    import yaml

    print(f"\n## Peak memory: the build without sandbox stages, 1x and 8x, {load()}")
    from microcoder.data.stages import STAGES

    trees = [REPO] + ([Path(args.baseline).resolve()] if args.baseline else [])
    labels = [commit_of(tree) for tree in trees]
    stage_seconds: dict[tuple[str, int], dict[str, float]] = {}
    stage_peaks: dict[tuple[str, int], dict[str, int]] = {}
    print("\nThe build in one process (`microcoder data build`):\n")
    print("| code | sources | problems in | exported | peak RSS | wall |")
    print("|---|---|---:|---:|---:|---:|")
    differences: dict[int, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="corpus-scale-") as folder:
        folder = Path(folder)
        for copies in (1, 8):
            source, count = replicated_source(folder, copies)
            for position, (tree, label) in enumerate(zip(trees, labels)):
                work = folder / f"work-x{copies}-{position}"
                config = {"work_dir": str(work), "progress": False, "workers": 1,
                          "sources": [{"path": str(source), "format": "canonical"}],
                          "validate": {"run_references": False}, "dedup": {"near": False},
                          "decontaminate": {"eval_sets": []}, "amplify": {"enabled": False, "keep_unverified": True}}
                path = folder / f"x{copies}-{position}.yaml"
                path.write_text(yaml.safe_dump(config))
                command = ["data"]
                started = time.monotonic()
                peak, code, errors = peak_of(command + ["build", "--config", str(path), "--no-progress"], tree)
                if code:
                    raise SystemExit(f"the {copies}x build of {tree} failed: {errors.strip().splitlines()[-1]}")
                exported = json.loads((work / "export/manifest.json").read_text())["counts"]["out"]
                print(f"| {label} | {copies}x | {count:,} | {exported:,} | {peak / 1024:.0f} MiB | "
                      f"{time.monotonic() - started:.0f} s |")
                stage_seconds[(label, copies)] = {
                    stage: json.loads((work / f"{stage}/manifest.json").read_text())["seconds"] * 1000 / count
                    for stage in STAGES if stage != "amplify"}
                if args.stage_peaks:  # each stage again, in a process of its own
                    stage_peaks[(label, copies)] = {}
                    for stage in STAGES:
                        peak, code, errors = peak_of(command + [stage, "--config", str(path), "--no-progress",
                                                                "--force"], tree)
                        if code:
                            raise SystemExit(f"{stage} at {copies}x of {tree} failed: {errors.strip().splitlines()[-1]}")
                        stage_peaks[(label, copies)][stage] = peak
            if len(trees) > 1:
                differences[copies] = export_differences(folder / f"work-x{copies}-0/export",
                                                         folder / f"work-x{copies}-1/export")
            for position in range(len(trees)):
                shutil.rmtree(folder / f"work-x{copies}-{position}", ignore_errors=True)
    for copies, names in differences.items():
        print(f"\nExports of {labels[0]} and {labels[1]} at {copies}x: "
              + (f"differ: {', '.join(names)}" if names else "byte-identical, every file (the seconds in "
                                                               "manifest.json and datasheet.md left out)"))
    if stage_peaks:
        print("\nEach stage in a process of its own (`microcoder data <stage> --force`, after the build), "
              "peak RSS in MiB:\n")
        print("| stage | " + " | ".join(f"{label} {copies}x" for label, copies in stage_peaks) + " |")
        print("|---|" + "---:|" * len(stage_peaks))
        for stage in STAGES:
            print(f"| {stage} | " + " | ".join(f"{peaks[stage] / 1024:.0f}" for peaks in stage_peaks.values()) + " |")
    print("\nSeconds per 1,000 problems in, by stage, in the one-process builds (validate without reference "
          "runs, amplify off; the sandbox stages' costs follow from the throughput part's rates):\n")
    print("| stage | " + " | ".join(f"{label} {copies}x" for label, copies in stage_seconds) + " |")
    print("|---|" + "---:|" * len(stage_seconds))
    for stage in next(iter(stage_seconds.values())):
        print(f"| {stage} | " + " | ".join(f"{seconds[stage]:.2f}" for seconds in stage_seconds.values()) + " |")


# ------------------------------------------------------------------ cluster


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def cluster(args) -> None:
    """Two `ray start` nodes of one CPU each on this machine; the small config built on them."""
    sys.path.insert(0, str(REPO / "tests"))
    from test_data_ray import PROBLEMS, config_of, without_times

    from microcoder.data.pipeline import build

    print(f"\n## Two-node Ray cluster on this machine (1 CPU each), {load()}")
    port = free_port()
    address = f"127.0.0.1:{port}"
    # RAY_AUTH_MODE: no token between two nodes of one machine (a token left by another
    # Ray instance would otherwise be asked of the second node).
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_AUTH_MODE": "disabled"}
    ray_bin = shutil.which("ray") or "ray"
    nodes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="corpus-cluster-") as folder:
        folder = Path(folder)
        source = folder / "calls.jsonl"
        source.write_text("".join(problem.model_dump_json() + "\n" for problem in PROBLEMS))
        try:
            # --block: each `ray start` stays up with its node's processes and takes them down
            # when it is stopped, so this part ends only the processes it started.
            for arguments in (["--head", "--port", str(port), "--include-dashboard", "false"],
                              ["--address", address]):
                nodes.append(subprocess.Popen([ray_bin, "start", "--block", "--num-cpus", "1", "--node-ip-address",
                                               "127.0.0.1", "--disable-usage-stats", *arguments],
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                              start_new_session=True))
                wait_for_nodes(address, len(nodes), env)
            # one actor per node, as on a real cluster
            config_of(folder / "ray", source, "ray", address=address, cpus_per_actor=None, chunk_size=4)
            config = without_model(folder / "ray" / "data.yaml")
            started = time.monotonic()
            completed = subprocess.run([sys.executable, "-m", "microcoder.cli", "data", "build", "--config",
                                        str(folder / "ray" / "data.yaml"), "--no-progress", "--engine", "ray",
                                        "--ray-address", address], capture_output=True, text=True, env=env)
            seconds = time.monotonic() - started
            if completed.returncode:
                raise SystemExit(f"the cluster build failed: {completed.stderr.strip()[-500:]}")
            config_of(folder / "local", source, "local")
            local = without_model(folder / "local" / "data.yaml")
            started = time.monotonic()
            build(local, log=lambda _: None)
            local_seconds = time.monotonic() - started
            same = without_times(local) == without_times(config)
            print(f"\n2 nodes of 1 CPU, one evaluator actor each: build {seconds:.0f} s (a local build: "
                  f"{local_seconds:.0f} s); corpus equal to the local build's but for measured times: {same}")
            print("  " + "\n  ".join(line for line in completed.stdout.splitlines() if ":" in line))
        finally:
            for node in reversed(nodes):
                node.terminate()
                try:
                    node.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(node.pid, 9)


def without_model(path: Path):
    """The small config at `path` without the pass-rate model (the test's sampler is not a
    command-line option): rewritten, and loaded."""
    import yaml

    from microcoder.data.config import load_build_config

    settings = yaml.safe_load(path.read_text())
    settings["difficulty"]["estimate_pass_rate"] = False
    path.write_text(yaml.safe_dump(settings))
    return load_build_config(path)


def wait_for_nodes(address: str, count: int, env: dict, timeout_s: float = 120) -> None:
    """Until the cluster at `address` has `count` live nodes."""
    probe = ("import json, ray; ray.init(address=%r, log_to_driver=False, configure_logging=False); "
             "print(sum(1 for node in ray.nodes() if node['Alive']))" % address)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(3)
        result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
        if result.returncode == 0 and result.stdout.strip().splitlines()[-1:] == [str(count)]:
            return
    raise SystemExit(f"the Ray cluster at {address} did not reach {count} nodes in {timeout_s:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", default=["throughput", "memory", "cluster"],
                        choices=["throughput", "memory", "cluster"])
    parser.add_argument("--problems", type=int, default=300, help="references in the throughput sample")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chunk-size", type=int, default=16)
    parser.add_argument("--generated", type=int, default=100, help="generated inputs per problem (extrapolation)")
    parser.add_argument("--smoke", action="store_true", help="throughput only, on 8 made-up problems, once")
    parser.add_argument("--stage-peaks", action="store_true", help="memory part: also each stage's peak, "
                        "rerun in a process of its own")
    parser.add_argument("--baseline", help="memory part: another checkout (e.g. a git worktree of an earlier "
                        "commit) built too, each factor right after this one's, and its exports compared")
    args = parser.parse_args()
    if args.smoke:
        args.parts, args.problems, args.repeats = ["throughput"], 8, 1
    elif not LEETCODE.exists():
        raise SystemExit(f"needs ../shared/data ({LEETCODE} not found)")
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"# corpus_scale {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}, "
          f"python {sys.version.split()[0]}, {load()}")
    print("command: python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]))
    if "throughput" in args.parts:
        extrapolation(throughput(args), args.generated)
    if "memory" in args.parts:
        memory(args)
    if "cluster" in args.parts:
        cluster(args)


if __name__ == "__main__":
    main()
