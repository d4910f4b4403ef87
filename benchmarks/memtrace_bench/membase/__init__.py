"""The MemBase-vocabulary part of the benchmark: annotated smartcomment graphs traced the way MemBase does.

MemTrace's authors trace memory systems with smartcomment inside MemBase
(zjunlp/MemBase); MemTraceBench publishes such graphs with human labels. This
package writes graphs in that vocabulary (MemBase's operation names, categories,
variable names and versions, edge categories; ``docs/benchmark-membase.md`` says
what was read and where) from deterministic, simplified runs of MemBase's
systems over LoCoMo, with one injected fault per labelled failure, so that
engines are scored on MemBase's vocabulary through the smartcomment importer:
``memtrace bench build-membase --out DIR`` then
``memtrace bench score --format memtracebench DIR --engine NAME``.

Needs nothing beyond a plain install.
"""
