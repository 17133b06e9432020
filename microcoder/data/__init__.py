"""Loaders that turn public problem sets into the canonical format, and the data pipeline."""
