"""One source of configuration: ServeConfig's fields are the serve options, defaults and variables."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

import memtrace_otel.config as config
from memtrace_otel.cli import main
from memtrace_otel.cli.serve_cmd import _config, serve_command
from memtrace_otel.collector.serve_config import ServeConfig

_ROOT = Path(__file__).resolve().parents[1]


def test_every_serve_option_is_a_config_field_with_its_default_and_variable() -> None:
    options = {param.name: param for param in serve_command.params if param.name != "help"}
    fields = {f.name: f for f in dataclasses.fields(ServeConfig)}
    assert set(options) == set(fields)
    for field, spec in config.settings(ServeConfig):
        option = options[field.name]
        assert option.default == field.default, field.name
        assert option.envvar == spec.env, field.name
        assert spec.option in option.opts


def test_serve_variables_are_defined_in_config() -> None:
    defined = {getattr(config, name) for name in config.__all__ if name.startswith("ENV_")}
    used = [spec.env for _, spec in config.settings(ServeConfig) if spec.env]
    # host, two ports, settle, memory, backend, metrics, jaeger, tempo, lookback, content store, data dir,
    # its limit
    assert len(used) == 13
    assert set(used) <= defined


def test_the_package_reads_no_environment_variable_by_literal_outside_config() -> None:
    """A variable named by a string literal at an os.environ / getenv / click envvar site, outside
    config.py, is a second place configuration lives."""
    offenders = []
    for path in [*_ROOT.joinpath("memtrace_otel").rglob("*.py"), *_ROOT.joinpath("collector").rglob("*.py"),
                 *_ROOT.joinpath("exporters").rglob("*.py")]:
        if path.name == "config.py" and path.parent.name == "memtrace_otel":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.keyword) and node.arg == "envvar" and isinstance(node.value,
                                                                              ast.Constant):
                offenders.append(f"{path.name}:{node.lineno}")
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                name = ast.unparse(node.func)
                if name in ("os.environ.get", "os.getenv", "environ.get", "getenv"):
                    offenders.append(f"{path.name}:{node.lineno}")
            if (isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ"
                    and isinstance(node.slice, ast.Constant)):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


def test_from_env_reads_each_variable_and_overrides_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(config.ENV_SERVE_GRPC_PORT, "-1")
    monkeypatch.setenv(config.ENV_SERVE_SETTLE, "2.5")
    monkeypatch.setenv(config.ENV_STORE_LOOKBACK, "0")
    found = ServeConfig.from_env(settle_seconds=3.0)
    assert found.grpc_port is None and found.settle_seconds == 3.0 and found.store_lookback == 0.0
    assert found.http_port == ServeConfig().http_port
    monkeypatch.setenv(config.ENV_SERVE_MEMORY_MIB, "lots")
    with pytest.raises(ValueError, match="MEMTRACE_SERVE_MEMORY_MIB='lots' is not an integer"):
        ServeConfig.from_env()
    monkeypatch.setenv(config.ENV_SERVE_MEMORY_MIB, "64")
    with pytest.raises(ValueError, match="below 128"):
        ServeConfig.from_env()


def test_the_cli_maps_off_ports_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    values = {f.name: f.default for f in dataclasses.fields(ServeConfig)}
    assert _config({**values, "grpc_port": -1}).grpc_port is None
    monkeypatch.setenv(config.ENV_SERVE_GRPC_PORT, "-1")
    monkeypatch.setenv(config.ENV_SERVE_HTTP_PORT, "-1")
    result = CliRunner().invoke(main, ["serve"])
    assert result.exit_code == 1 and "both receivers are off" in result.output
    monkeypatch.setenv(config.ENV_SERVE_SETTLE, "-3")
    result = CliRunner().invoke(main, ["serve"])
    assert result.exit_code == 2 and "--settle" in result.output and "Traceback" not in result.output


def test_help_shows_defaults_and_variables() -> None:
    result = CliRunner().invoke(main, ["serve", "--help"], terminal_width=200)
    assert result.exit_code == 0
    assert "default: 14317" in result.output and "MEMTRACE_SERVE_GRPC_PORT" in result.output
