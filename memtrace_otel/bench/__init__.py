"""Bench: labelled failure cases by fault injection on LoCoMo, and their scoring.

Not part of the core: building needs the ``bench`` extra (``pip install
'memtrace-otel[bench]'``: numpy, wordllama) for the reference systems
(:mod:`memtrace_otel.bench.systems`); scoring (:mod:`memtrace_otel.bench.score`)
needs nothing beyond a plain install. This package imports nothing itself, so
that ``memtrace bench`` can say which extra is missing.
"""
