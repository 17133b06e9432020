import os

# Two cores on CI: keep torch/numpy from oversubscribing them and make runs reproducible.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
