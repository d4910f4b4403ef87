"""Collector: ``memtrace serve``, the out-of-process attribution service, and the OpenTelemetry
Collector configurations that place it in a pipeline (imported as ``memtrace_otel.collector``).

``server`` assembles it: OTLP receivers (``grpc_receiver``, ``http_receiver``, decoding in
``otlp_proto``) -> ``assembler`` (group by trace, wait until it settles, bounded) -> ``service``
(attribute failed traces, fetch linked traces from the backend) -> ``outbox`` (annotation spans
to the backend, retried until accepted). Needs ``pip install memtrace-otel[serve]``.
"""
