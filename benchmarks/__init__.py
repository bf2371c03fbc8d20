"""Benchmarks: ``python benchmarks/run.py [--quick] [--json FILE]`` runs every ``bench_*.py``."""
