"""The one bounded worker (memtrace_otel.batch_worker): drain, bounds, drop accounting, one deadline."""

from __future__ import annotations

import inspect
import threading

import pytest

from memtrace_otel.batch_worker import BatchWorker, RetryingExporter
from memtrace_otel.writeback.processor import AttributionSpanProcessor


class Recorder:
    """Accepts (or refuses) batches and remembers them; ``gate`` holds the worker inside export."""

    def __init__(self, accept: bool = True, gate: threading.Event | None = None) -> None:
        self.batches: list[list[int]] = []
        self.accept, self.gate = accept, gate
        self.entered = threading.Event()
        self.shut = 0

    def export(self, batch: list[int]) -> bool:
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(30)
        self.batches.append(list(batch))
        return self.accept

    def shutdown(self) -> None:
        self.shut += 1


def test_force_flush_exports_everything_in_batches_in_order() -> None:
    step = Recorder()
    worker = BatchWorker(step, name="t", max_queue_size=100, max_batch_size=4, schedule_delay_millis=60_000)
    assert all(worker.submit(n) is None for n in range(10))
    assert worker.force_flush(10_000)
    assert [n for batch in step.batches for n in batch] == list(range(10))
    assert max(len(batch) for batch in step.batches) <= 4
    assert (worker.exported, worker.failed, worker.held) == (10, 0, 0)
    assert worker.shutdown(10_000) and step.shut == 1


def test_a_full_queue_and_a_shut_worker_drop_and_count() -> None:
    worker = BatchWorker(Recorder(), name="t", max_queue_size=3, max_batch_size=100,
                         schedule_delay_millis=60_000)
    reasons = [worker.submit(n) for n in range(5)]
    assert reasons == [None, None, None, "queue_full", "queue_full"]
    assert worker.shutdown(10_000) and worker.exported == 3
    assert worker.submit(9) == "shutdown"
    assert (worker.dropped_queue_full, worker.dropped_shutdown) == (2, 1)
    assert worker.shutdown(10) is True  # a second call returns what the first did


def test_shutdown_gives_up_at_its_deadline_and_counts_what_it_lost() -> None:
    gate = threading.Event()
    step = Recorder(gate=gate)
    worker = BatchWorker(step, name="t", max_queue_size=10, max_batch_size=1, wake_at=1)
    worker.submit(1)
    assert step.entered.wait(10)  # the worker is inside export with item 1
    worker.submit(2)
    worker.submit(3)
    assert not worker.force_flush(50)
    assert worker.shutdown(50) is False
    gate.set()  # item 1's export returns; 2 and 3 are never exported
    worker._thread.join(10)
    assert [n for batch in step.batches for n in batch] == [1]
    assert worker.unexported_at_shutdown >= 2 and step.shut == 1


def test_a_raising_step_counts_a_failed_batch_and_the_worker_goes_on() -> None:
    class Flaky(Recorder):
        def export(self, batch: list[int]) -> bool:
            if batch == [0]:
                raise RuntimeError("bug")
            return super().export(batch)

    step = Flaky()
    worker = BatchWorker(step, name="t", max_queue_size=10, max_batch_size=1, wake_at=1)
    for n in range(3):
        worker.submit(n)
    assert worker.shutdown(10_000) is True
    assert (worker.failed, worker.exported, step.batches) == (1, 2, [[1], [2]])


def test_export_empty_runs_the_step_on_every_wake() -> None:
    step = Recorder()
    worker = BatchWorker(step, name="t", max_queue_size=10, max_batch_size=10, export_empty=True)
    worker.wake()
    assert worker.force_flush(10_000)
    assert [] in step.batches and worker.exported == 0
    worker.shutdown(10_000)


def test_retrying_exporter_retries_until_accepted_and_stops_on_shutdown() -> None:
    class Refuses(Recorder):
        def export(self, batch: list[int]) -> bool:
            super().export(batch)
            return len(self.batches) >= 3  # the third attempt is accepted

    refusals: list[int] = []
    retrying = RetryingExporter(Refuses(), initial_backoff=0.001, max_backoff=0.002,
                                on_refused=lambda attempts, _batch: refusals.append(attempts))
    assert retrying.export([1]) is True and retrying.failed_attempts == 2 and refusals == [1, 2]
    stopped = RetryingExporter(Recorder(accept=False), initial_backoff=60, max_backoff=60)
    outcome: list[bool] = []
    thread = threading.Thread(target=lambda: outcome.append(stopped.export([1])))
    thread.start()
    while stopped.failed_attempts == 0:
        thread.join(0.01)
    stopped.shutdown()  # interrupts the 60 s backoff
    thread.join(30)
    assert outcome == [False]


@pytest.mark.parametrize("processor", [AttributionSpanProcessor])
def test_span_processors_keep_the_sdk_shutdown_signature(processor: type) -> None:
    signature = inspect.signature(processor.shutdown)
    assert signature.return_annotation in (None, "None")
    assert all(p.default is not inspect.Parameter.empty for name, p in signature.parameters.items()
               if name != "self")


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        BatchWorker(Recorder(), name="t", max_queue_size=0, max_batch_size=1)
    with pytest.raises(ValueError, match="initial_backoff"):
        RetryingExporter(Recorder(), initial_backoff=0)
