"""Base pass rate of a model on the default problems, and its sampling/training speed.

    python benchmarks/base_model_passrate.py                      # held-out, n=4, T=0.7, 160 tokens
    python benchmarks/base_model_passrate.py --split train --temperature 1.0
    python benchmarks/base_model_passrate.py --speed              # tokens/s and one AdamW step
    python benchmarks/base_model_passrate.py --set decimal --max-new-tokens 64   # the decimal-answer set

Samples with `model.generate` (batched, left padded, prompts sorted by length), judges
with the Evaluator, and prints pass@1 overall, per template and per difficulty, the
verdicts, mean response length and the fraction truncated; and pass@1 under the strict
(LiveCodeBench) judge beside it, which on the `decimal` set rejects float answers that are
off in the last bits. results/default_run.md records the numbers this printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict


def sample_responses(model, tokenizer, prompts: list[str], temperature: float, max_new_tokens: int,
                     batch_size: int) -> list[tuple[str, int, bool]]:
    """(text, new tokens, hit the limit) for each prompt, in order."""
    import torch

    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    decoding = (dict(do_sample=True, temperature=temperature, top_p=1.0, top_k=0) if temperature > 0
                else dict(do_sample=False))  # 0: greedy, as the trainer's held-out evaluation
    results: dict[int, tuple[str, int, bool]] = {}
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        batch = tokenizer([prompts[i] for i in chunk], return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(**batch, **decoding, max_new_tokens=max_new_tokens)
        new = out[:, batch["input_ids"].shape[1] :]
        for row, index in enumerate(chunk):
            tokens = new[row]
            ended = (tokens == tokenizer.eos_token_id).nonzero()
            length = int(ended[0]) + 1 if len(ended) else len(tokens)
            results[index] = (tokenizer.decode(tokens[:length], skip_special_tokens=True), length, not len(ended))
        print(f"  sampled {min(start + batch_size, len(order))}/{len(order)}", file=sys.stderr, flush=True)
    return [results[i] for i in range(len(prompts))]


def pass_rate(args: argparse.Namespace) -> None:
    import torch

    from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample
    from microcoder.policy.model import load_model_and_tokenizer
    from microcoder.policy.prompts import render_prompt
    from microcoder.problem_sets import GENERATED_SETS

    torch.manual_seed(args.seed)
    train, held_out = GENERATED_SETS[args.set](args.problem_seed)
    problems = held_out if args.split == "held_out" else train
    if args.templates:
        problems = [p for p in problems if p.metadata["template"] in args.templates.split(",")]
    if args.per_template:
        problems = [p for p in problems if int(p.id.rsplit("-", 1)[1]) < args.per_template]
    if getattr(args, "smoke", False):
        problems = problems[:2]
    model, tokenizer = load_model_and_tokenizer(args.model)
    prompts = [render_prompt(p, tokenizer) for p in problems for _ in range(args.n)]
    started = time.monotonic()
    responses = sample_responses(model, tokenizer, prompts, args.temperature, args.max_new_tokens, args.batch_size)
    sampling_s = time.monotonic() - started
    ids = [p.id for p in problems for _ in range(args.n)]
    with Evaluator(EvaluatorConfig(workers=2)) as evaluator:
        samples = [Sample(i, response=text) for i, (text, _, _) in zip(ids, responses)]
        results = evaluator.evaluate(problems, samples)
        strict = evaluator.judging("strict").evaluate(problems, samples)
    template_of = {p.id: p.metadata["template"] for p in problems}
    difficulty_of = {p.id: p.difficulty for p in problems}
    by_template, by_difficulty, verdicts = defaultdict(list), defaultdict(list), defaultdict(int)
    for result in results:
        by_template[template_of[result.problem_id]].append(result.reward)
        by_difficulty[difficulty_of[result.problem_id]].append(result.reward)
        verdicts[result.verdict] += 1
    tokens = sum(length for _, length, _ in responses)
    rewards = [result.reward for result in results]
    print(f"model={args.model} split={args.split} problems={len(problems)} n={args.n} T={args.temperature} "
          f"max_new_tokens={args.max_new_tokens}")
    print(f"pass@1 = {sum(rewards) / len(rewards):.3f}   "
          f"problems with 0 < passes < n: {_mixed_groups(ids, rewards)}/{len(problems)}   "
          f"(strict judge: pass@1 = {sum(r.reward for r in strict) / len(strict):.3f})")
    print(f"mean response tokens = {tokens / len(responses):.1f}, truncated = "
          f"{sum(cut for _, _, cut in responses) / len(responses):.3f}, "
          f"sampling {sampling_s:.0f} s ({tokens / sampling_s:.1f} new tokens/s)")
    print("verdicts:", dict(sorted(verdicts.items(), key=lambda kv: -kv[1])))
    for name, values in sorted(by_difficulty.items()):
        print(f"  difficulty {name:8s} pass@1 = {sum(values) / len(values):.3f} ({len(values)} samples)")
    for name, values in by_template.items():
        print(f"  {name:20s} pass@1 = {sum(values) / len(values):.3f} ({len(values)} samples)")
    if args.out:
        with open(args.out, "w") as handle:
            for problem_id, (text, length, cut), result in zip(ids, responses, results):
                handle.write(json.dumps({"problem_id": problem_id, "response": text, "tokens": length,
                                         "truncated": cut, "verdict": result.verdict, "detail": result.detail}) + "\n")


def _mixed_groups(ids: list[str], rewards: list[float]) -> int:
    """Problems whose samples neither all pass nor all fail: the ones GRPO learns from."""
    groups: dict[str, list[float]] = defaultdict(list)
    for problem_id, reward in zip(ids, rewards):
        groups[problem_id].append(reward)
    return sum(0 < sum(values) < len(values) for values in groups.values())


def speed(args: argparse.Namespace) -> None:
    """New tokens/s of `generate` at each batch size and length (EOS suppressed, so every
    row runs to the limit), then the time of one forward+backward+AdamW step."""
    import torch

    from microcoder.policy.model import load_model_and_tokenizer
    from microcoder.policy.prompts import render_prompt
    from microcoder.problem_sets import default_problems

    model, tokenizer = load_model_and_tokenizer(args.model)
    prompt = render_prompt(default_problems()[1][0], tokenizer)
    print(f"prompt tokens: {len(tokenizer(prompt).input_ids)}")
    for length in args.speed_lengths:
        for batch_size in args.speed_batches:
            batch = tokenizer([prompt] * batch_size, return_tensors="pt", padding=True)
            started = time.monotonic()
            with torch.no_grad():
                model.generate(**batch, do_sample=True, temperature=1.0, max_new_tokens=length,
                               min_new_tokens=length)
            seconds = time.monotonic() - started
            print(f"generate batch={batch_size:3d} new_tokens={length}: {seconds:6.1f} s, "
                  f"{batch_size * length / seconds:6.1f} tokens/s", flush=True)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    input_ids = torch.randint(0, len(tokenizer), (args.step_batch, args.step_length))
    for attempt in range(2):  # the first step also allocates AdamW's state
        started = time.monotonic()
        loss = model(input_ids=input_ids, labels=input_ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"train step {args.step_batch}x{args.step_length} (forward+backward+AdamW, attempt {attempt + 1}): "
              f"{time.monotonic() - started:.1f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--set", choices=["default", "decimal"], default="default", help="which generated problems")
    parser.add_argument("--split", choices=["held_out", "train"], default="held_out")
    parser.add_argument("--templates", default="", help="comma-separated template names (default: all)")
    parser.add_argument("--per-template", type=int, default=0, help="only the first N problems of each template")
    parser.add_argument("--n", type=int, default=4, help="samples per problem")
    parser.add_argument("--temperature", type=float, default=0.7, help="0: greedy (use --n 1: every sample is the same)")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--problem-seed", type=int, default=0, help="the set's seed (default_problems(seed))")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads; on a machine shared with other jobs 1 is much faster than 2")
    parser.add_argument("--out", default="", help="write responses and verdicts as JSONL")
    parser.add_argument("--speed", action="store_true", help="measure speed instead of pass rate")
    parser.add_argument("--speed-batches", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--speed-lengths", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--step-batch", type=int, default=16)
    parser.add_argument("--step-length", type=int, default=256)
    parser.add_argument("--smoke", action="store_true", help="two problems, 16 tokens, then --speed at "
                        "batch 2 and 16 tokens: that the script runs (tests/test_benchmarks_smoke.py)")
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    if args.smoke:
        args.n, args.max_new_tokens, args.batch_size = 1, 16, 8
        args.speed_batches, args.speed_lengths, args.step_batch, args.step_length = [2], [16], 2, 16
        pass_rate(args)
        speed(args)
        return
    speed(args) if args.speed else pass_rate(args)


if __name__ == "__main__":
    main()
