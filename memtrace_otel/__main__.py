"""``python -m memtrace_otel`` is the ``memtrace`` command."""

from memtrace_otel.cli import main

if __name__ == "__main__":
    main(prog_name="memtrace")
