"""Running model-written programs in a sandbox and judging their outputs.

    from microcoder.evaluator import Evaluator, EvaluatorConfig, Sample
    with Evaluator(EvaluatorConfig(workers=2)) as evaluator:
        results = evaluator.evaluate(problems, [Sample("p1", response=text)])
"""

from microcoder.evaluator.evaluate import (
    VERDICTS,
    EvaluationResult,
    Evaluator,
    EvaluatorConfig,
    Sample,
    read_samples,
    stop_on_machine_fault,
    summarize,
)
from microcoder.evaluator.extract import extract_code
from microcoder.evaluator.sandbox import ProgramRun, Sandbox, SandboxConfig

__all__ = [
    "VERDICTS",
    "EvaluationResult",
    "Evaluator",
    "EvaluatorConfig",
    "ProgramRun",
    "Sample",
    "Sandbox",
    "SandboxConfig",
    "extract_code",
    "read_samples",
    "stop_on_machine_fault",
    "summarize",
]
