"""Attribution: root-cause engines over the memory evolution graph."""

from memtrace_otel.attribution.base import (
    Attribution,
    Engine,
    ErrorType,
    FailureCase,
    NotAttributed,
    available_engines,
    create_engine,
    register_engine,
)

__all__ = [
    "Attribution",
    "Engine",
    "ErrorType",
    "FailureCase",
    "NotAttributed",
    "available_engines",
    "create_engine",
    "register_engine",
]
