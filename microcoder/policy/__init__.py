"""The policy model: loading it, the prompts it sees, sampling from it, and measuring it.

    from microcoder.policy.model import load_model_and_tokenizer, tiny_model_and_tokenizer
    from microcoder.policy.prompts import build_messages, render_prompt
    from microcoder.policy.generation import generate, eos_token_ids, ModelGenerator
    from microcoder.policy.evaluation import ModelEvalConfig, evaluate_model   # `microcoder eval-model`

Training, the data pipeline (its difficulty stage) and the framework adapters all use the
model through this package; it imports only the problems, the math and the evaluator.
"""
