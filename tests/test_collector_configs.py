"""The shipped Collector configs validate as collector/README.md says: with MEMTRACE_BACKEND_OTLP set,
and, without it, with one error that names the backend exporter's missing endpoint (issue 26)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from otelcol_harness import require_otelcol_binary

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("config", ["otelcol-tee.yaml", "otelcol-loadbalance.yaml",
                                    "otelcol-memory-filter.yaml"])
def test_the_shipped_configs_validate_with_the_documented_variable(config: str, tmp_path: Path) -> None:
    binary = require_otelcol_binary()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMTRACE_", "OTELCOL_"))}
    command = [str(binary), "validate", "--config", str(ROOT / "collector" / config)]
    unset = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert unset.returncode != 0 and 'otlp/backend: requires a non-empty "endpoint"' in unset.stderr
    documented = subprocess.run(command, env={**env, "MEMTRACE_BACKEND_OTLP": "127.0.0.1:4317"}, cwd=tmp_path,
                                capture_output=True, text=True, timeout=60)
    assert documented.returncode == 0, documented.stderr
    readme = (ROOT / "collector" / "README.md").read_text(encoding="utf-8")
    line = ("MEMTRACE_BACKEND_OTLP=127.0.0.1:4317 ~/.cache/memtrace/otelcol validate "
            f"--config collector/{config}")
    assert line in readme
