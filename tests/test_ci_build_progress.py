"""The Go builds of Jaeger and the Collector (``.ci/install-*.sh``) say how far they are: a line per
50 packages compiled, and Go's errors as they are (issue 26: the Jaeger build was silent for 15 minutes).
Run against a stand-in ``go`` on PATH, so no toolchain or network is needed and nothing real is built."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FAKE_GO = r"""#!/usr/bin/env bash
# A stand-in for the go command: `go env GOVERSION`, and `go build ... -o OUT ...` that names
# $FAKE_PACKAGES packages on stderr (as -v does) and writes OUT, or fails like a compile error.
if [[ "$1" == env ]]; then echo go1.24.9; exit 0; fi
out=""
while (( $# )); do [[ "$1" == -o ]] && out="$2"; shift; done
for ((i = 1; i <= FAKE_PACKAGES; i++)); do echo "example.com/mod/pkg$i" >&2; done
if [[ -n "$FAKE_FAIL" ]]; then echo "pkg/x.go:3:1: syntax error: unexpected }" >&2; exit 1; fi
cat > "$out" <<'BIN'
#!/usr/bin/env bash
case "$1" in
  version|--version) echo "fake 1.0" ;;
  components) printf 'exporters:\n'
              for e in loadbalancing file otlp otlphttp debug; do printf '  - name: %s\n' "$e"; done
              printf 'processors:\n'
              for p in batch tail_sampling; do printf '  - name: %s\n' "$p"; done
              printf 'extensions:\n' ;;
esac
BIN
chmod +x "$out"
"""


@pytest.fixture
def fake_go(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    go = bin_dir / "go"
    go.write_text(FAKE_GO)
    go.chmod(go.stat().st_mode | stat.S_IXUSR)
    return bin_dir


@pytest.mark.parametrize(("script", "variable", "prefix"), [
    ("install-jaeger.sh", "MEMTRACE_JAEGER_BIN", "install-jaeger"),
    ("install-otelcol.sh", "MEMTRACE_OTELCOL_BIN", "install-otelcol"),
])
def test_a_go_build_reports_progress_and_passes_errors_through(fake_go: Path, tmp_path: Path, script: str,
                                                               variable: str, prefix: str) -> None:
    env = {**os.environ, "PATH": f"{fake_go}:{os.environ['PATH']}", "FAKE_PACKAGES": "120",
           variable: str(tmp_path / "out" / "binary")}
    built = subprocess.run(["bash", str(ROOT / ".ci" / script)], env=env, capture_output=True, text=True,
                           timeout=60)
    assert built.returncode == 0, built.stderr
    for count in (50, 100):
        assert f"{prefix}: compiled {count} packages" in built.stdout
    assert f"{prefix}: compiled 120 packages; linking" in built.stdout
    assert "example.com/mod/pkg" not in built.stdout + built.stderr  # one line per 50, not one per package
    assert (tmp_path / "out" / "binary").is_file()

    env[variable] = str(tmp_path / "out" / "failed")
    failed = subprocess.run(["bash", str(ROOT / ".ci" / script)], env={**env, "FAKE_FAIL": "1"},
                            capture_output=True, text=True, timeout=60)
    assert failed.returncode != 0
    assert "pkg/x.go:3:1: syntax error: unexpected }" in failed.stderr
    assert f"{prefix}: error: go build" in failed.stderr
    assert not (tmp_path / "out" / "failed").exists()
