"""Benchmarks: each measures ours side by side with a reference in the same run."""
