"""The ``memtrace`` command: one click group, one module per subcommand (loaded lazily).

Other distributions add subcommands through the ``memtrace.cli`` entry-point group (name ->
``module:attribute`` of a click command), the way flask and click-plugins do: the benchmark
(``benchmarks/``, distribution ``memtrace-bench``) contributes ``memtrace bench`` so that the
runtime never imports it. A built-in name wins over a plugin's.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Any

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
    "serve": "memtrace_otel.cli.serve_cmd:serve_command",
    "import": "memtrace_otel.cli.import_cmd:import_group",
    "annotate": "memtrace_otel.cli.annotate_cmd:annotate_command",
}


PLUGIN_GROUP = "memtrace.cli"
"""Entry-point group of the subcommands other distributions contribute."""
# Plugins the project itself ships outside the runtime wheel, and how to install each: named in
# `memtrace --help` and, when called without it, in one line instead of "No such command".
_KNOWN_PLUGINS = {
    "bench": "the benchmark is a separate package: pip install -e ./benchmarks (in a memtrace-otel "
             "checkout)",
}
EXIT_USAGE = 2


def _plugins() -> dict[str, EntryPoint]:
    found: dict[str, EntryPoint] = {}
    for point in sorted(entry_points(group=PLUGIN_GROUP), key=lambda p: (p.name, p.value)):
        if point.name not in _COMMANDS:
            found.setdefault(point.name, point)  # two distributions claiming a name: the first by value
    return found


def _missing(name: str, how: str) -> click.Command:
    """A stand-in for an absent plugin: any arguments, one line on stderr, exit 2."""

    def run() -> None:
        click.echo(f"memtrace {name}: {how}", err=True)
        sys.exit(EXIT_USAGE)

    return click.Command(name, callback=run, help=f"(not installed: {how})", add_help_option=False,
                         context_settings={"ignore_unknown_options": True, "allow_extra_args": True})


_from_command_line = False
"""The group was started with the process's own arguments (the ``memtrace`` script, ``python -m``), not
called in process with a list of them (click's test runner, an application): see
:func:`memtrace_otel.cli.common.end_command`."""


def from_command_line() -> bool:
    """Whether this process is the ``memtrace`` command itself (its arguments came from ``sys.argv``)."""
    return _from_command_line


class _LazyGroup(click.Group):
    def main(self, args: Sequence[str] | None = None, *rest: Any, **options: Any) -> Any:
        global _from_command_line
        _from_command_line = args is None
        return super().main(args, *rest, **options)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*_COMMANDS, *_KNOWN_PLUGINS, *_plugins()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self._load(cmd_name)

    @staticmethod
    def _load(name: str) -> click.Command | None:
        target = _COMMANDS.get(name)
        if target is not None:
            module_name, attribute = target.split(":")
            return getattr(importlib.import_module(module_name), attribute)
        point = _plugins().get(name)
        if point is not None:
            try:
                command = point.load()
            except ImportError as error:  # installed metadata, but the package cannot be imported
                return _missing(name, f"{point.value} cannot be imported ({error})")
            if not isinstance(command, click.Command):
                return _missing(name, f"{point.value} is not a click command")
            return command
        how = _KNOWN_PLUGINS.get(name)
        return _missing(name, how) if how is not None else None


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
