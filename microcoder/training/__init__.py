"""Training: the GRPO trainer, its config, its reward, and the run it writes.

    from microcoder.training.config import TrainConfig, load_config
    from microcoder.training.run import run_training          # `microcoder train`
    from microcoder.training.trainer import MicroCoderTrainer  # one rollout step, top to bottom
    from microcoder.training.reward import EvaluatorReward     # the evaluator as TRL's reward
    from microcoder.training.trl_hooks import TRLHooks         # every override of a TRL-private name

The model, its prompts and sampling are `microcoder.policy`; the problem sets are
`microcoder.problem_sets`.
"""
