"""The tracing hook the runtime and the kinds call: a protocol, and the no-op used when off.

The layers below `foliot.observe` (the dispatcher, the run kind) cannot import it, so they are
given a `Tracer` by the composition root: `NO_TRACER` (the default: one shared object whose
`span()` returns one shared no-op, so tracing off costs a method call per span and imports no
OpenTelemetry), or `foliot.observe.tracing.OtelTracer` (FOLIOT_TRACING=otlp).

Ids are the run's: every span of a run has the run's `trace_id` (a child run shares its
parent's), and the run's spans hang under one span per run whose id is `run_span_id(run_id)`
(its `run.start`). A push's span id is the one its `traceparent` header carries
(`push_span_id`), so the handler's own spans join the same trace under that push.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from types import TracebackType
from typing import Protocol

from .workflow.model import Event, Run, TaskRef

AttributeValue = str | int | float | bool | Sequence[str]


def run_span_id(run_id: str) -> str:
    """The id (16 hex) of a run's own span (`run.start`), the parent of the run's other spans."""
    return hashlib.sha256(b"run:" + run_id.encode()).hexdigest()[:16]


def push_span_id(run: Run, task: TaskRef) -> str:
    """The id (16 hex) of a push attempt's span: what its `traceparent` header carries."""
    return hashlib.sha256(task.idempotency_key(run.run_id).encode()).hexdigest()[:16]


class Span(Protocol):
    """A span being timed (the `with` block of `Tracer.span`)."""

    def __enter__(self) -> Span: ...

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    def of(self, run: Run) -> None:
        """The span belongs to `run` (its trace): for a span opened before the run existed."""
        ...

    def set(self, key: str, value: AttributeValue) -> None: ...

    def transition(self, message: object, events: Sequence[Event]) -> None:
        """The transition was committed: its message and events (a span never told so is
        dropped: nothing was committed)."""
        ...


class Tracer(Protocol):
    on: bool

    def span(self, name: str, run: Run | None = None, span_id: str | None = None) -> Span:
        """Time a `with` block as the span `name` of `run` (or of the run given to `Span.of`);
        `span_id` fixes its id (a push's, as its `traceparent` says)."""
        ...

    def close(self) -> None:
        """Flush what is left and stop exporting (blocking: call it in a thread)."""
        ...


class _NoSpan:
    __slots__ = ()

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def of(self, run: Run) -> None:
        return None

    def set(self, key: str, value: AttributeValue) -> None:
        return None

    def transition(self, message: object, events: Sequence[Event]) -> None:
        return None


_NO_SPAN = _NoSpan()


class NoTracer:
    """Tracing off: every span is the same no-op."""

    on = False

    def span(self, name: str, run: Run | None = None, span_id: str | None = None) -> Span:
        return _NO_SPAN

    def close(self) -> None:
        return None


NO_TRACER: Tracer = NoTracer()
