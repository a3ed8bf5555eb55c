"""The benchmark scripts, run from the project root as ``python -m benchmarks.<name>``; the modules whose
names start with ``_`` are their shared helpers. Current numbers: ``benchmarks/RESULTS.md``."""
