"""Greedy answers of vLLM against `model.generate` on the default held-out set, token for token.

    ~/.cache/microcoder/venv-vllm/bin/python benchmarks/vllm_parity.py [--limit N] [--max-new-tokens 128]
    python benchmarks/vllm_parity.py --smoke   # a tiny random model, 4 problems x 16 tokens (seconds)

Both in float32, the same prompts (chat template, token ids), greedy, the default run's
generation limit. Prints how many answers are equal token for token, the held-out accuracy
of each (the robust judge, greedy pass@1), the wall seconds of each, and for every answer
that differs: the first position where it does and the gap between `generate`'s two most
likely tokens there (in nats of log-probability, from a forward pass over the shared prefix):
a gap near 0 is a near-tie that rounding can flip (vLLM's kernels sum in another order than
torch's; batch shapes differ too). Needs vLLM (the environment of scripts/test_vllm.sh);
without it, it says so and exits 0 (the main environment's smoke run).
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=None, help="first N held-out problems (default: all)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: the default run's limit")
    parser.add_argument("--smoke", action="store_true", help="tiny random model (64-dim heads), 4 problems, 16 tokens")
    args = parser.parse_args()
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        print("vLLM is not installed here: run this with the environment scripts/test_vllm.sh builds")
        return

    import torch

    from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample, summarize
    from microcoder.policy.generation import generate
    from microcoder.policy.prompts import render_prompt
    from microcoder.training.config import load_config
    from microcoder.training.run import load_problem_split
    from workloads import float32_model  # run as a script: benchmarks/ is on the path

    config = load_config(None)
    heldout = load_problem_split(config)[1][: 4 if args.smoke else args.limit]
    limit = 16 if args.smoke else args.max_new_tokens or config.max_new_tokens
    model, tokenizer = float32_model(args.smoke)
    prompts = [render_prompt(problem, tokenizer) for problem in heldout]
    print(f"{len(prompts)} held-out problems of the default set, greedy, max_new_tokens {limit}, float32, "
          f"torch threads {torch.get_num_threads()}, host load average {os.getloadavg()[0]:.1f}", flush=True)
    answers, seconds = {}, {}
    for backend in ("vllm", "hf"):  # vLLM first: its engine start is timed apart
        if backend == "vllm":
            start = time.perf_counter()
            generate(model, tokenizer, prompts[:1], n=1, max_new_tokens=1, temperature=0, backend="vllm")
            print(f"vLLM engine start (and one token) {time.perf_counter() - start:.1f} s", flush=True)
        start = time.perf_counter()
        groups = generate(model, tokenizer, prompts, n=1, max_new_tokens=limit, temperature=0, backend=backend,
                          batch_size=16, progress=False)
        seconds[backend] = time.perf_counter() - start
        answers[backend] = [group[0] for group in groups]

    equal = [a.token_ids == b.token_ids for a, b in zip(answers["hf"], answers["vllm"])]
    with Evaluator(EvaluatorConfig(workers=2)) as evaluator:
        accuracy = {}
        for backend, samples in answers.items():
            results = evaluator.evaluate(heldout, [Sample(problem.id, response=sample.text)
                                                   for problem, sample in zip(heldout, samples)])
            accuracy[backend] = summarize(results, ks=(1,))["pass@1"]
    print(f"\nequal token for token: {sum(equal)} of {len(equal)} ({sum(equal) / len(equal):.1%})")
    print(f"held-out accuracy (robust judge, greedy): generate {accuracy['hf']:.3f}, vLLM {accuracy['vllm']:.3f}")
    print(f"wall seconds: generate {seconds['hf']:.1f} (batches of 16), vLLM {seconds['vllm']:.1f}; "
          f"ratio {seconds['hf'] / seconds['vllm']:.2f}x; host load average {os.getloadavg()[0]:.1f}")
    gaps = []
    for problem, prompt, a, b, same in zip(heldout, prompts, answers["hf"], answers["vllm"], equal):
        if same:
            continue
        position = next((i for i, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y),
                        min(len(a.token_ids), len(b.token_ids)))
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"] + a.token_ids[:position]
        with torch.no_grad():
            logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), dim=-1)
        top = logprobs.topk(2).values
        gaps.append((top[0] - top[1]).item())
        print(f"  {problem.id}: first differs at token {position} of {len(a.token_ids)}/{len(b.token_ids)}; "
              f"generate's top-2 gap there {gaps[-1]:.5f} nats")
    if gaps:
        print(f"differing answers: top-2 gap at the first difference, median {sorted(gaps)[len(gaps) // 2]:.5f}, "
              f"max {max(gaps):.5f} nats")


if __name__ == "__main__":
    main()
