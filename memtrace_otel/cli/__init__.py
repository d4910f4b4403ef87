"""The ``memtrace`` command: one click group, one module per subcommand (loaded lazily)."""

from __future__ import annotations

import importlib
import logging

import click

from memtrace_otel.version import __version__

__all__ = ["main"]

# name -> "module:attribute"; loading on demand keeps `memtrace --help` fast and lets a
# subcommand's optional dependencies stay optional.
_COMMANDS = {
    "inspect": "memtrace_otel.cli.inspect_cmd:inspect_command",
    "graph": "memtrace_otel.cli.graph_cmd:graph_command",
    "analyze": "memtrace_otel.cli.analyze_cmd:analyze_command",
    "report": "memtrace_otel.cli.report_cmd:report_command",
    "bench": "memtrace_otel.cli.bench_cmd:bench_group",
    "serve": "memtrace_otel.cli.serve_cmd:serve_command",
    "import": "memtrace_otel.cli.import_cmd:import_group",
    "annotate": "memtrace_otel.cli.annotate_cmd:annotate_command",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self._load(cmd_name)

    @staticmethod
    def _load(name: str) -> click.Command | None:
        target = _COMMANDS.get(name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        return getattr(importlib.import_module(module_name), attribute)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="memtrace")
@click.option("-v", "--verbose", is_flag=True, help="Log debug details to stderr.")
def main(verbose: bool) -> None:
    """Trace, rebuild and explain what LLM memory systems did.

    Reads OTLP/JSON Lines span files (Collector file exporter,
    opentelemetry-exporter-otlp-json-file; .gz too) and Jaeger JSON.
    """
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="memtrace: %(levelname)s: %(message)s")
