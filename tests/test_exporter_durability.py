"""The OTLP/JSON Lines exporter never loses a batch it reported as written, and never raises.

Failures are real where the OS can make them: a file-size limit (``RLIMIT_FSIZE``,
the same EFBIG/short write a full disk gives) in a child process, a deleted
directory, a renamed file, a writer killed with SIGKILL. Only "the file cannot
be truncated" needs a small hand-written fake.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memtrace_otel.exporters import OTLPJsonLinesSpanExporter, SpanFileInUse, encode_readable_spans
from memtrace_otel.exporters.otlp_json_file import _AppendFile
from memtrace_otel.spans import read_span_files

_SUFFIXES = ["spans.jsonl", "spans.jsonl.gz"]


def _batch(tag: str, count: int = 5) -> list[ReadableSpan]:
    """Finished spans with a ``batch`` attribute and some bulk (so a batch is several KiB)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("durability")
    for index in range(count):
        bulk = os.urandom(900).hex()
        with tracer.start_as_current_span(f"{tag} {index}", attributes={"batch": tag, "bulk": bulk}):
            pass
    return list(memory.get_finished_spans())


def _batches_read(path: Path) -> tuple[dict[str, int], list[str]]:
    result = read_span_files([path])
    counts: dict[str, int] = {}
    for span in result.spans:
        counts[span.attributes["batch"]] = counts.get(span.attributes["batch"], 0) + 1
    return counts, [str(p) for p in result.problems]


_FULL_DISK_CHILD = textwrap.dedent("""
    import json, os, resource, signal, sys
    sys.path.insert(0, sys.argv[2])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    from test_exporter_durability import _batch
    from memtrace_otel.exporters import OTLPJsonLinesSpanExporter
    path = sys.argv[1]
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    outcome = {}
    exporter = OTLPJsonLinesSpanExporter(path)
    outcome["first"] = exporter.export(_batch("first")).name
    size = os.path.getsize(path)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, hard))  # the next batch fits only partly
    outcome["second"] = exporter.export(_batch("second")).name
    outcome["cut_back"] = os.path.getsize(path) == size
    outcome["third"] = exporter.export(_batch("third")).name
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # space again
    outcome["fourth"] = exporter.export(_batch("fourth")).name
    resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path), hard))  # full again
    exporter.shutdown()  # must not raise
    outcome["after_shutdown"] = exporter.export(_batch("late")).name
    print(json.dumps(outcome))
""")


@pytest.mark.parametrize("name", _SUFFIXES)
def test_full_disk_midway_loses_only_the_failed_batches(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    child = subprocess.run([sys.executable, "-c", _FULL_DISK_CHILD, str(path), str(Path(__file__).parent)],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    assert "Traceback" not in child.stderr
    outcome = json.loads(child.stdout)
    assert outcome == {"first": "SUCCESS", "second": "FAILURE", "cut_back": True, "third": "FAILURE",
                       "fourth": "SUCCESS", "after_shutdown": "FAILURE"}
    assert _batches_read(path) == ({"first": 5, "fourth": 5}, [])
    # A full disk is one log line while it lasts, not one per batch.
    assert sum(" failed: " in line for line in child.stderr.splitlines()) == 1


class _FlakyFile(_AppendFile):
    """A real file whose writes stop after ``budget`` bytes and which cannot be truncated."""

    budget: int | None = None
    can_truncate = False

    def write_some(self, data: memoryview) -> int:
        if self.budget is None:
            return super().write_some(data)
        if self.budget == 0:
            raise OSError(28, "No space left on device")
        written = super().write_some(data[:self.budget])
        self.budget -= written
        return written

    def truncate(self, size: int) -> None:
        if not self.can_truncate:
            raise OSError(5, "Input/output error")
        super().truncate(size)


class _FlakyExporter(OTLPJsonLinesSpanExporter):
    def _open_file(self, path: str) -> _AppendFile:
        self.file = _FlakyFile(path, compressed=path.endswith(".gz"))
        return self.file


def test_a_partial_line_that_cannot_be_cut_is_ended_before_the_next_batch(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    exporter = _FlakyExporter(path)
    assert exporter.export(_batch("first")) is SpanExportResult.SUCCESS
    exporter.file.budget = 700  # half a line gets out, then the disk is full
    assert exporter.export(_batch("second")) is SpanExportResult.FAILURE
    exporter.file.budget = None
    assert exporter.export(_batch("third")) is SpanExportResult.SUCCESS
    exporter.shutdown()
    counts, problems = _batches_read(path)
    assert counts == {"first": 5, "third": 5}
    assert len(problems) == 1 and f"{path}:2: invalid JSON" in problems[0]


def test_half_a_gzip_member_blocks_writing_until_it_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl.gz"
    exporter = _FlakyExporter(path)
    assert exporter.export(_batch("first")) is SpanExportResult.SUCCESS
    exporter.file.budget = 300
    assert exporter.export(_batch("second")) is SpanExportResult.FAILURE
    exporter.file.budget = None
    assert exporter.export(_batch("third")) is SpanExportResult.FAILURE  # appending would corrupt the rest
    exporter.file.can_truncate = True
    assert exporter.export(_batch("fourth")) is SpanExportResult.SUCCESS
    exporter.shutdown()
    assert _batches_read(path) == ({"first": 5, "fourth": 5}, [])


@pytest.mark.parametrize("name", _SUFFIXES)
def test_deleted_directory_is_recreated_and_the_batch_rewritten(tmp_path: Path, name: str,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "out" / "run" / name
    exporter = OTLPJsonLinesSpanExporter(path)
    assert exporter.export(_batch("first")) is SpanExportResult.SUCCESS
    shutil.rmtree(tmp_path / "out")
    with caplog.at_level(logging.WARNING):
        assert exporter.export(_batch("second")) is SpanExportResult.SUCCESS
        assert exporter.export(_batch("third")) is SpanExportResult.SUCCESS
    exporter.shutdown()
    assert _batches_read(path) == ({"second": 5, "third": 5}, [])
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "deleted" in warnings[0]


def test_a_rotated_file_keeps_its_batches_and_a_new_file_takes_the_next(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    exporter = OTLPJsonLinesSpanExporter(path)
    assert exporter.export(_batch("first")) is SpanExportResult.SUCCESS
    path.rename(tmp_path / "spans.jsonl.1")
    assert exporter.export(_batch("second")) is SpanExportResult.SUCCESS  # lands in the rotated file
    assert exporter.export(_batch("third")) is SpanExportResult.SUCCESS
    exporter.shutdown()
    assert _batches_read(tmp_path / "spans.jsonl.1") == ({"first": 5, "second": 5}, [])
    assert _batches_read(path) == ({"third": 5}, [])


def test_an_unfinished_line_left_by_another_writer_does_not_swallow_ours(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "spans.jsonl"
    path.write_bytes(b'{"resourceSpans": [')  # a writer died mid-line
    with caplog.at_level(logging.WARNING):
        exporter = OTLPJsonLinesSpanExporter(path)
    assert exporter.export(_batch("first")) is SpanExportResult.SUCCESS
    exporter.shutdown()
    assert _batches_read(path) == ({"first": 5}, [])  # the torn line was cut off on open, and said so
    assert [r.getMessage() for r in caplog.records] == [
        f"OTLPJsonLinesSpanExporter: cut 19 torn byte(s) off the end of {path} (a writer stopped mid-batch)"]


def _members(*tags: str) -> bytes:
    """Whole batches as the exporter frames them for a ``.gz`` file: one gzip member each."""
    return b"".join(gzip.compress(encode_readable_spans(_batch(tag)) + b"\n", mtime=0) for tag in tags)


def _torn(whole: bytes) -> bytes:
    return whole[: len(whole) // 2]  # what a writer stopped halfway through a write leaves


def test_the_reader_resynchronises_past_a_torn_gzip_member(tmp_path: Path) -> None:
    """A killed writer's torn member, then what a restarted writer appended: all of that is read."""
    path = tmp_path / "spans.jsonl.gz"
    path.write_bytes(_members("a", "b") + _torn(_members("torn")) + _members("c", "d"))
    counts, problems = _batches_read(path)
    assert counts == {"a": 5, "b": 5, "c": 5, "d": 5}
    assert any("1 torn gzip member(s) skipped" in p for p in problems), problems


def test_the_reader_resynchronises_past_a_member_torn_in_its_header(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl.gz"
    path.write_bytes(_members("a") + _members("torn")[:5] + _members("c"))
    assert _batches_read(path)[0] == {"a": 5, "c": 5}


@pytest.mark.parametrize("cut", [1, 2, 3, 11, 100, -9, -1])
def test_the_writer_cuts_a_torn_gzip_member_on_open(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "spans.jsonl.gz"
    torn = _members("torn")
    path.write_bytes(_members("a", "b") + torn[:cut])
    exporter = OTLPJsonLinesSpanExporter(path)
    assert exporter.export(_batch("c")) is SpanExportResult.SUCCESS
    exporter.shutdown()
    assert _batches_read(path) == ({"a": 5, "b": 5, "c": 5}, [])  # nothing torn left to skip


def test_the_writer_leaves_a_whole_gzip_file_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl.gz"
    whole = _members("a", "b")
    path.write_bytes(whole)
    OTLPJsonLinesSpanExporter(path).shutdown()
    assert path.read_bytes() == whole


def test_a_torn_member_alone_is_cut_to_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl.gz"
    path.write_bytes(_torn(_members("torn")))
    exporter = OTLPJsonLinesSpanExporter(path)
    assert exporter.export(_batch("a")) is SpanExportResult.SUCCESS
    exporter.shutdown()
    assert _batches_read(path) == ({"a": 5}, [])


@pytest.mark.parametrize("name", _SUFFIXES)
def test_a_second_writer_on_one_file_is_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    first = OTLPJsonLinesSpanExporter(path)
    with pytest.raises(SpanFileInUse, match="another exporter"):
        OTLPJsonLinesSpanExporter(path)
    assert first.export(_batch("a")) is SpanExportResult.SUCCESS
    first.shutdown()
    second = OTLPJsonLinesSpanExporter(path)  # the file is free again
    assert second.export(_batch("b")) is SpanExportResult.SUCCESS
    second.shutdown()
    assert _batches_read(path) == ({"a": 5, "b": 5}, [])


_HOLDING_CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[2])
    from test_exporter_durability import _batch
    from memtrace_otel.exporters import OTLPJsonLinesSpanExporter
    exporter = OTLPJsonLinesSpanExporter(sys.argv[1])
    assert exporter.export(_batch("child")).name == "SUCCESS"
    print("holding", flush=True)
    sys.stdin.readline()
    exporter.shutdown()
""")


def test_a_writer_in_another_process_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl"
    child = subprocess.Popen([sys.executable, "-c", _HOLDING_CHILD, str(path), str(Path(__file__).parent)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "holding\n"
        with pytest.raises(SpanFileInUse):
            OTLPJsonLinesSpanExporter(path)
    finally:
        child.communicate("\n", timeout=30)
    assert child.returncode == 0
    parent = OTLPJsonLinesSpanExporter(path)  # the child let go of it
    assert parent.export(_batch("parent")) is SpanExportResult.SUCCESS
    parent.shutdown()
    assert _batches_read(path) == ({"child": 5, "parent": 5}, [])


_KILLED_CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[2])
    from test_exporter_durability import _batch
    from memtrace_otel.exporters import OTLPJsonLinesSpanExporter
    exporter = OTLPJsonLinesSpanExporter(sys.argv[1])
    for index in range(4):
        exporter.export(_batch(f"flushed {index}", 2))
    assert exporter.force_flush()
    print("flushed", flush=True)
    sys.stdin.readline()  # alive, file open, until it is killed
""")


def test_a_gzip_file_of_a_killed_writer_reads_up_to_the_last_flush(tmp_path: Path) -> None:
    path = tmp_path / "spans.jsonl.gz"
    child = subprocess.Popen([sys.executable, "-c", _KILLED_CHILD, str(path), str(Path(__file__).parent)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "flushed\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate()
    assert child.returncode == -signal.SIGKILL
    assert _batches_read(path) == ({f"flushed {i}": 2 for i in range(4)}, [])


def test_force_flush_and_shutdown_are_idempotent_and_never_raise(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    exporter = OTLPJsonLinesSpanExporter(tmp_path / "spans.jsonl")
    assert exporter.export([]) is SpanExportResult.SUCCESS
    assert exporter.export(_batch("first")) is SpanExportResult.SUCCESS
    assert exporter.force_flush() and exporter.force_flush(timeout_millis=0)
    exporter.shutdown()
    with caplog.at_level(logging.WARNING):
        exporter.shutdown()
    assert "already shut down" in caplog.text
    assert exporter.force_flush() is False
    assert exporter.export(_batch("late")) is SpanExportResult.FAILURE
    assert _batches_read(tmp_path / "spans.jsonl") == ({"first": 5}, [])


def test_an_unwritable_place_fails_batches_without_raising(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the directory should be")
    exporter = OTLPJsonLinesSpanExporter(blocker / "spans.jsonl")  # no exception here either
    assert exporter.export(_batch("first")) is SpanExportResult.FAILURE
    blocker.unlink()
    assert exporter.export(_batch("second")) is SpanExportResult.SUCCESS  # it retries the open
    exporter.shutdown()
    assert _batches_read(blocker / "spans.jsonl") == ({"second": 5}, [])


def test_constructor_rejects_an_empty_path() -> None:
    with pytest.raises(ValueError, match="empty"):
        OTLPJsonLinesSpanExporter("")
