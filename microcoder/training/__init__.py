"""Training: the policy model, the default problems, the prompts, and the GRPO trainer.

    from microcoder.training.model import load_model_and_tokenizer, tiny_model_and_tokenizer
    from microcoder.training.tasks import default_problems
    from microcoder.training.prompts import build_messages, render_prompt
"""
