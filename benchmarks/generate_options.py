"""What transformers offers for HF `generate` on CPU, side by side, and whether it keeps the tokens.

    python benchmarks/generate_options.py                 # SmolLM2-135M, 16 default prompts x 64 new tokens
    python benchmarks/generate_options.py --smoke         # tiny random model, seconds

Greedy decoding of the same batch (the default problems' prompts, left-padded as the
trainer and the held-out evaluation pad them) with each option, the options alternating
round by round so that load on a shared machine hits them alike. Prints per option the
median wall and CPU seconds per call, the ratio to the baseline (the model as loaded, a
dynamic KV cache) and whether every token equals the baseline's. An option is worth
keeping only when it is faster AND its tokens are identical.

Options:
- `baseline`: the model as `load_model_and_tokenizer` gives it (its attention
  implementation is printed; transformers picks SDPA when torch has it).
- `eager`: attention as plain matmul + softmax (`attn_implementation="eager"`).
- `sdpa`: torch's scaled_dot_product_attention (`attn_implementation="sdpa"`).
- `static`: a pre-allocated static KV cache (`cache_implementation="static"`).
- `compile`: static cache with the forward compiled by torch.compile (what transformers
  does when the cache is static and `compile_config` is given); the first call, which
  compiles, is reported apart.
- `shared_prefill`: with `--group G` (the batch is each prompt G times, as a rollout
  lays out a group), the prompts' KV cache computed once per distinct prompt and
  repeated G times, then `generate` continues from it
  (`microcoder.policy.generation.shared_prefill_generate`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.filterwarnings("ignore")

OPTIONS = ("baseline", "eager", "sdpa", "static", "compile", "shared_prefill")


def generate_kwargs(option: str) -> dict:
    if option == "static":
        return {"cache_implementation": "static"}
    if option == "compile":
        from transformers import CompileConfig

        compile_config = CompileConfig(fullgraph=False)
        compile_config._compile_all_devices = True  # transformers compiles on GPUs only unless told
        return {"cache_implementation": "static", "compile_config": compile_config}
    return {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct", help="smollm2-135m-instruct, tiny, or a path")
    parser.add_argument("--prompts", type=int, default=16, help="rows per generate call")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3, help="calls per option (after one warm-up call each)")
    parser.add_argument("--options", default=",".join(OPTIONS), help=f"comma-separated, of {', '.join(OPTIONS)}")
    parser.add_argument("--group", type=int, default=1, help="each prompt this many times in the batch (a rollout's G)")
    parser.add_argument("--smoke", action="store_true", help="tiny random model, 4 prompts x 8 tokens, 1 round")
    args = parser.parse_args()
    if args.smoke:
        args.model, args.prompts, args.max_new_tokens, args.rounds, args.group = "tiny", 4, 8, 1, 2
        args.options = "baseline,eager,sdpa,static,shared_prefill"
    options = args.options.split(",")
    if set(options) - set(OPTIONS) or "baseline" not in options:
        parser.error(f"--options: of {', '.join(OPTIONS)}, baseline included")

    import tempfile

    import torch
    import transformers

    from microcoder.policy.generation import eos_token_ids, shared_prefill_generate
    from microcoder.policy.model import load_model_and_tokenizer, save_tiny_model
    from microcoder.policy.prompts import render_prompt
    from microcoder.problem_sets import default_problems

    transformers.utils.logging.disable_progress_bar()
    with tempfile.TemporaryDirectory() as tmp:
        name = str(save_tiny_model(Path(tmp) / "tiny", 0)) if args.model == "tiny" else args.model
        models = {}
        for option in options:
            model, tokenizer = load_model_and_tokenizer(name, torch.float32)
            if option in ("eager", "sdpa"):
                model.set_attn_implementation(option)
            models[option] = model.eval()
    problems = [problem for problem in default_problems()[0][: args.prompts // args.group]
                for _ in range(args.group)]
    tokenizer.padding_side = "left"
    encoded = tokenizer([render_prompt(problem, tokenizer) for problem in problems], return_tensors="pt",
                        padding=True, add_special_tokens=False)
    eos = eos_token_ids(models["baseline"], tokenizer)
    print(f"torch threads {torch.get_num_threads()}, model {args.model} (attention as loaded: "
          f"{models['baseline'].config._attn_implementation}), {args.prompts} prompts of up to "
          f"{encoded['input_ids'].shape[1]} tokens x {args.max_new_tokens} new tokens, greedy, {args.rounds} rounds",
          flush=True)

    def call(option):
        start, cpu = time.perf_counter(), time.process_time()
        settings = dict(max_new_tokens=args.max_new_tokens, do_sample=False, temperature=None, top_p=None,
                        top_k=None, eos_token_id=eos, pad_token_id=tokenizer.pad_token_id)
        with torch.no_grad():
            if option == "shared_prefill":
                model = models[option]
                output = shared_prefill_generate(model.generate, model, encoded["input_ids"],
                                                 encoded["attention_mask"], **settings)
            else:
                output = models[option].generate(**encoded, **settings, **generate_kwargs(option))
        return output, time.perf_counter() - start, time.process_time() - cpu

    tokens, first, wall, cpu = {}, {}, {o: [] for o in options}, {o: [] for o in options}
    for option in options:  # warm-up (and compilation) call
        tokens[option], first[option], _ = call(option)
    for _ in range(args.rounds):
        for option in options:
            output, seconds, cpu_seconds = call(option)
            wall[option].append(seconds)
            cpu[option].append(cpu_seconds)
            same = output.shape == tokens[option].shape and torch.equal(output, tokens[option])
            if not same:
                print(f"{option}: a later call changed the tokens", flush=True)
    base_wall, base_cpu = statistics.median(wall["baseline"]), statistics.median(cpu["baseline"])
    print(f"\n{'option':<16}{'first call s':>13}{'wall s':>9}{'CPU s':>9}{'CPU / baseline':>16}{'same tokens':>13}")
    for option in options:
        reference = tokens["baseline"]
        same = tokens[option].shape == reference.shape and torch.equal(tokens[option], reference)
        print(f"{option:<16}{first[option]:>13.2f}{statistics.median(wall[option]):>9.2f}"
              f"{statistics.median(cpu[option]):>9.2f}{statistics.median(cpu[option]) / base_cpu:>16.3f}"
              f"{str(same):>13}", flush=True)
    print(f"(baseline median: {base_wall:.2f} s wall, {base_cpu:.2f} s CPU per call)")


if __name__ == "__main__":
    main()
