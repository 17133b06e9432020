"""What copying the weights into vLLM before every call costs a model that only samples.

    ~/.cache/microcoder/venv-vllm/bin/python benchmarks/vllm_weight_copy.py [--limit N] [--chunk 8] [--n 4]
    python benchmarks/vllm_weight_copy.py --smoke   # a tiny random model, 4 problems (seconds)

eval-model samples in chunks of problems (`problems_per_chunk`, 8 by default), one
`generate(backend="vllm")` call each. Sampled the same way twice, in one run and on one
engine: with the copy before every chunk (`weights_fixed=False`, what a model that may have
been trained needs) and with one copy for the whole pass (`weights_fixed=True`, what
`ModelGenerator` asks for), each twice in the order every, once, once, every (--smoke: once
each). Prints the mean wall seconds of each, their ratio, the seconds of one copy, and
whether every pass drew the same tokens (they must: the weights are the same).
The default model in float32 at T=1.0 on the default held-out set. Needs vLLM (the
environment of scripts/test_vllm.sh); without it, it says so and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=32, help="first N held-out problems (default 32)")
    parser.add_argument("--chunk", type=int, default=8, help="problems per call, as eval-model's problems_per_chunk")
    parser.add_argument("--n", type=int, default=4, help="responses per problem")
    parser.add_argument("--max-new-tokens", type=int, default=64)
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
    limit, chunk = (8, 2) if args.smoke else (args.max_new_tokens, args.chunk)
    model, tokenizer = float32_model(args.smoke)
    prompts = [render_prompt(problem, tokenizer) for problem in heldout]
    chunks = [prompts[start : start + chunk] for start in range(0, len(prompts), chunk)]
    print(f"{len(prompts)} held-out problems in {len(chunks)} calls of {chunk}, n {args.n}, max_new_tokens {limit}, "
          f"T 1.0, float32, torch threads {torch.get_num_threads()}, host load average {os.getloadavg()[0]:.1f}",
          flush=True)
    engine = vllm_engine(model.name_or_path, dtype=model.dtype,
                         max_model_len=min(model.config.max_position_embeddings, 4096))

    def one_pass(fixed: bool):
        engine.load_weights(model)  # untimed; every pass starts alike: its first call copies, prefix cache empty
        loads, start = engine.loads, time.perf_counter()
        tokens = [[sample.token_ids for group in generate(model, tokenizer, part, n=args.n, max_new_tokens=limit,
                                                          temperature=1.0, seed=index, backend="vllm",
                                                          weights_fixed=fixed) for sample in group]
                  for index, part in enumerate(chunks)]
        return tokens, time.perf_counter() - start, engine.loads - loads

    one_pass(False)  # warm-up: engine start, first copy, kernels
    start = time.perf_counter()
    engine.load_weights(model)
    copy_seconds = time.perf_counter() - start
    passes = {False: [], True: []}
    for fixed in [False, True, True, False][: 2 if args.smoke else 4]:  # each order once: drift cancels
        passes[fixed].append(one_pass(fixed))
    every_seconds, once_seconds = (sum(p[1] for p in passes[f]) / len(passes[f]) for f in (False, True))
    print(f"copy before every call: {every_seconds:.1f} s a pass (copies: {[p[2] for p in passes[False]]})")
    print(f"one copy (weights_fixed): {once_seconds:.1f} s a pass (copies: {[p[2] for p in passes[True]]})")
    saved = every_seconds - once_seconds
    print(f"ratio every/once: {every_seconds / once_seconds:.2f}x ({saved:.1f} s a pass); one copy alone: "
          f"{copy_seconds:.2f} s, so the {len(chunks) - 1} copies saved a pass explain {(len(chunks) - 1) * copy_seconds:.1f} s")
    tokens = [p[0] for f in (False, True) for p in passes[f]]
    print(f"same tokens in every pass: {all(t == tokens[0] for t in tokens)}")


if __name__ == "__main__":
    main()
