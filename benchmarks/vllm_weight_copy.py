"""What the weight copy before every `generate(backend="vllm")` call costs.

    ~/.cache/microcoder/venv-vllm/bin/python benchmarks/vllm_weight_copy.py [--limit N] [--chunk 8] [--n 4]
    python benchmarks/vllm_weight_copy.py --smoke   # a tiny random model, 4 problems (seconds)

`generate(backend="vllm")` copies the model's weights from memory into the engine before
every call, so a trained model samples as trained; eval-model calls it once per chunk of
problems (`problems_per_chunk`, 8 by default) with a model that never changes. Measured
here, on one engine: the wall seconds of one copy alone (`VLLMEngine.load_weights`,
mean of `--copies`), and of eval-model-like calls, each with its copy (the default model
in float32 at T=1.0 on the default held-out set). Prints both and the copy's share of a
call: what skipping the copy for a model that only samples could save at most. Needs vLLM
(the environment of scripts/test_vllm.sh); without it, it says so and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=32, help="first N held-out problems (default 32)")
    parser.add_argument("--chunk", type=int, default=8, help="problems per call, as eval-model's problems_per_chunk")
    parser.add_argument("--n", type=int, default=4, help="responses per problem")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--copies", type=int, default=10, help="copies timed alone")
    parser.add_argument("--smoke", action="store_true", help="tiny random model (64-dim heads), 4 problems, 8 tokens")
    args = parser.parse_args()
    if importlib.util.find_spec("vllm") is None:
        print("vLLM is not installed here: run this with the environment scripts/test_vllm.sh builds")
        return

    import torch

    from microcoder.policy.generation import generate
    from microcoder.policy.prompts import render_prompt
    from microcoder.policy.vllm_engine import vllm_engine
    from microcoder.training.config import load_config
    from microcoder.training.run import load_problem_split
    from workloads import float32_model  # run as a script: benchmarks/ is on the path

    heldout = load_problem_split(load_config(None))[1][: 4 if args.smoke else args.limit]
    limit, chunk, copies = (8, 2, 2) if args.smoke else (args.max_new_tokens, args.chunk, args.copies)
    model, tokenizer = float32_model(args.smoke)
    prompts = [render_prompt(problem, tokenizer) for problem in heldout]
    chunks = [prompts[start : start + chunk] for start in range(0, len(prompts), chunk)]
    print(f"{len(prompts)} held-out problems in {len(chunks)} calls of {chunk}, n {args.n}, max_new_tokens {limit}, "
          f"T 1.0, float32, torch threads {torch.get_num_threads()}, host load average {os.getloadavg()[0]:.1f}",
          flush=True)

    def call(index: int, part) -> float:
        start = time.perf_counter()
        generate(model, tokenizer, part, n=args.n, max_new_tokens=limit, temperature=1.0, seed=index, backend="vllm")
        return time.perf_counter() - start

    call(0, chunks[0])  # warm-up: engine start, first copy, kernels
    engine = vllm_engine(model.name_or_path, dtype=model.dtype,
                         max_model_len=min(model.config.max_position_embeddings, 4096))
    copy_seconds = []
    for _ in range(copies):
        start = time.perf_counter()
        engine.load_weights(model)
        copy_seconds.append(time.perf_counter() - start)
    call_seconds = [call(index, part) for index, part in enumerate(chunks)]
    copy, per_call = statistics.fmean(copy_seconds), statistics.fmean(call_seconds)
    print(f"one copy: {copy:.3f} s (mean of {copies}, {min(copy_seconds):.3f}-{max(copy_seconds):.3f})")
    print(f"a call with its copy: {per_call:.2f} s (mean of {len(call_seconds)}, "
          f"{min(call_seconds):.2f}-{max(call_seconds):.2f})")
    print(f"share of a call: {copy / per_call:.1%}")


if __name__ == "__main__":
    main()
