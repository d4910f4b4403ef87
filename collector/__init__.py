"""Collector: ``memtrace serve``, the out-of-process attribution service, and the OpenTelemetry
Collector configurations that place it in a pipeline (imported as ``memtrace_otel.collector``).

``serve`` assembles it (``MemtraceServer``, ``build_server``): OTLP receivers (``grpc_receiver``,
``http_receiver``: waitress; decoding in ``otlp_proto``; memory admission before decoding in
``memory``) -> the write-ahead store (``durable``: acknowledged once committed, replayed after a
restart) and the index of traces waiting to settle (``assembler``) -> ``attribution_service``
(``AttributionService``: attribute failed traces, fetching what they need from the backend within
a budget: ``budget``) -> the store's outbox, sent by ``export`` (the Collector's retry rules).
Needs the ``[serve]`` extra (``pip install '.[serve]'`` in a checkout).
"""
