"""Adapters that run microcoder's method and judge inside other training frameworks.

`microcoder.integrations.verl`: MicroCoder-GRPO on verl 0.9.1 (Ray), with our evaluator as
its reward. Each adapter imports its framework only when used, so installing microcoder
without it costs nothing.
"""
