"""verl plugin: importing this module registers the `microcoder_grpo` advantage estimator.

`pyproject.toml` names it in the `verl.plugins` entry-point group. verl 0.9.1's own
`__init__` loads every entry point of that group (unless VERL_USE_EXTERNAL_PLUGINS is
"none", or a list of names without "microcoder"), so every process that imports verl (the
driver, each Ray worker) has the estimator without a line of user code. verl swallows a
plugin's import error (logged at debug level), and a run would only fail with "Unknown
advantage estimator" at its first advantage step; `python -m
microcoder.integrations.verl.preflight CONFIG` resolves the estimator in a Ray worker
before the run and says why it is missing.
"""

from microcoder.integrations.verl.advantage import register

register()
