"""The real-mem0 part of the benchmark: mem0ai run in its own venv against a simulated LLM.

``world.py`` (facts, faults, the reader), ``server.py`` (the OpenAI-compatible simulated LLM),
``driver.py`` (the app, run with a mem0 venv's python), ``build.py`` (the run, counterfactual
replays, labels). Built by ``memtrace bench mem0``; see ``docs/benchmark-mem0.md``.
"""
