"""``memtrace serve``: the attribution service a Collector feeds as a second exporter.

Receives OTLP (gRPC and HTTP, protobuf and JSON), waits for each trace to
settle, attributes the failed ones (fetching from Jaeger or Tempo the traces
that used the same memory stores and the traces they link to) and writes the
verdicts back to the trace backend as spans.
Runs until SIGINT/SIGTERM, then drains: what has arrived is attributed and
exported before it exits. ``collector/README.md`` shows the Collector configs.

The options are built from :class:`~memtrace_otel.collector.serve_config.ServeConfig`'s fields:
their defaults, environment variables and help are written there once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

import click

from memtrace_otel.cli.common import check_one_backend, stderr
from memtrace_otel.collector.serve_config import ServeConfig
from memtrace_otel.config import settings, value_type
from memtrace_otel.extras import missing_extra

__all__ = ["serve_command"]


def _click_type(kind: type, minimum: float | None, choices: tuple[str, ...]) -> Any:
    if choices:
        return click.Choice(list(choices))
    if kind is int:
        return click.IntRange(min=int(minimum)) if minimum is not None else int
    if kind is float:
        return click.FloatRange(min=minimum) if minimum is not None else float
    return str


def _config_options(command: Callable[..., None]) -> Callable[..., None]:
    """One click option per :class:`ServeConfig` setting, named after its field (help order kept)."""
    for field, spec in reversed(settings(ServeConfig)):
        default = field.default
        command = click.option(
            spec.option, field.name, type=_click_type(value_type(field), spec.minimum, spec.choices),
            default=default, show_default=default is not None, envvar=spec.env, show_envvar=True,
            metavar=spec.metavar, help=spec.help,
        )(command)
    return command


def _config(values: dict[str, Any]) -> ServeConfig:
    """The options' values as a config: a number a setting calls ``off`` (a port of -1) is ``None``."""
    for field, spec in settings(ServeConfig):
        if spec.off is not None and values[field.name] == spec.off:
            values[field.name] = None
    return ServeConfig(**values)


@click.command("serve")
@_config_options
def serve_command(**values: Any) -> None:
    """Attribute failed traces from an OTLP stream and write the verdicts back as spans."""
    try:
        import grpc  # noqa: F401 - only to tell whether the extra is installed
        import opentelemetry.exporter.otlp.proto.http  # noqa: F401
    except ImportError:
        raise click.ClickException(missing_extra("`memtrace serve` (OTLP receivers and exporters)",
                                                 "serve")) from None
    from memtrace_otel.collector.serve import build_server

    config = _config(values)
    check_one_backend(config.jaeger_url, config.tempo_url)
    try:
        server = build_server(config)
        server.start()
    except (ValueError, OSError) as error:
        raise click.ClickException(str(error)) from None
    import logging

    logging.getLogger("waitress").setLevel(logging.WARNING)  # its per-start info lines are not ours
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    addresses = ", ".join(f"{type(r).__name__.removeprefix('OTLP').removesuffix('Receiver')} "
                          f"{r.address[0]}:{r.address[1]}" for r in server.receivers)  # type: ignore[attr-defined]
    stderr.print(f"memtrace serve: listening ({addresses}); settle {config.settle_seconds:g}s; data "
                 f"{config.data_dir}; Ctrl-C stops", soft_wrap=True)
    stop.wait()
    stderr.print("memtrace serve: draining (attributing what arrived, exporting annotations)")
    drained = server.stop(timeout=30.0)
    stats, outbox, store = server.service.stats, server.service.outbox, server.service.store
    held = outbox.held_at_stop
    stderr.print(f"memtrace serve: stopped; {stats.spans_received} spans received, {stats.attributions} "
                 f"failures attributed, {outbox.dropped} annotations dropped (refused by the backend for "
                 "good), "
                 f"{outbox.exported} annotation spans exported, {store.dropped_requests} requests and "
                 f"{store.dropped_annotation_batches} annotation batches dropped from a full data directory"
                 + (f"; {held} annotation span(s) and the unfinished traces kept in {config.data_dir} "
                    "for the next start" if not drained else ""), soft_wrap=True)
