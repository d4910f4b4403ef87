"""The mem0ai versions the instrumentor supports (``opentelemetry-instrument`` checks them).

Both ends are tested on CI, each in its own virtual environment (``.ci/install-mem0-venvs.sh``):
1.0.11, the last 1.x (LLM ADD/UPDATE/DELETE/NONE decisions inside ``add``), and 2.2.1
(additive ``add``; changes only through explicit ``update``/``delete``).
"""

_instruments = ("mem0ai >= 1.0.0, < 3",)

_supports_metrics = False
