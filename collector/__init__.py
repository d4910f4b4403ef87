"""Collector: the out-of-process attribution service and the OpenTelemetry Collector
configurations that place it in a pipeline (imported as ``memtrace_otel.collector``).

The service (``memtrace serve``) is delivered with the live-pipeline work; this
package is its home so that the folder layout already shows where it goes.
"""
