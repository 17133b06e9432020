"""The math of training and evaluation as pure functions (no I/O, no training framework)."""
