"""Benchmarks. Run each from the repository root as a module: ``python -m bench.proxy_compare``
(bench/README.md); their shared parts are in ``bench/harness.py``."""
