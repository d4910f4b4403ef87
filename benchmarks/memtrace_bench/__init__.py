"""memtrace-bench: labelled failure cases on LoCoMo (fault injection, counterfactual repair, real
mem0ai runs, MemBase's systems) and the scoring of attribution engines on them.

A distribution of its own (``benchmarks/pyproject.toml``, ``pip install -e ./benchmarks``), not part
of the runtime wheel: the runtime never imports it, and ``memtrace bench`` is this package's CLI
plugin (the ``memtrace.cli`` entry point, :mod:`memtrace_bench.cli`). Building needs numpy and
wordllama for the reference systems (:mod:`memtrace_bench.systems`); scoring
(:mod:`memtrace_bench.score`) needs nothing beyond memtrace-otel. This package imports nothing
itself, so that ``memtrace bench`` can say what is missing.
"""
