"""`Tracer` on the OpenTelemetry SDK (imported only when FOLIOT_TRACING is on).

A span is made when its `with` block ends (from the block's start and end times), so a span
opened before its run exists (`run.start`) still gets the run's trace. Its ids are chosen
before the SDK sees it (`_Ids`): the trace id is the run's `trace_id`, a run's `run.start`
has `run_span_id(run_id)`, a push has the id its `traceparent` carries. Its parent is the
enclosing span of the same trace in the same Trio task (a `store.commit` inside its
`run.transition`, a child run's `run.start` inside its parent's transition), else the run's
own span: so one trace holds every step of a run, and its child runs.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from contextvars import ContextVar, Token
from types import TracebackType

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from ..core.tracing import AttributeValue, run_span_id
from ..core.workflow.model import Event, Run

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_EMPTY = otel_context.Context()
_KINDS = {"task.push": SpanKind.CLIENT, "run.start": SpanKind.SERVER, "run.signal": SpanKind.SERVER}


class _Ids(IdGenerator):
    """Random ids, except the next one set just before a span is started."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self.span: int | None = None
        self.trace: int | None = None

    def generate_span_id(self) -> int:
        value, self.span = self.span, None
        return value if value is not None else self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        value, self.trace = self.trace, None
        return value if value is not None else self._random.generate_trace_id()


_current: ContextVar[_Span | None] = ContextVar("foliot_span", default=None)


class _Span:
    __slots__ = (
        "_attrs",
        "_committed",
        "_id",
        "_open",
        "_parent",
        "_start",
        "_token",
        "_tracer",
        "name",
        "run",
    )

    def __init__(self, tracer: OtelTracer, name: str, run: Run | None, span_id: str | None) -> None:
        self._tracer = tracer
        self.name = name
        self.run = run
        self._id = span_id
        self._start = 0
        self._parent: _Span | None = None
        self._token: Token[_Span | None] | None = None
        self._attrs: dict[str, AttributeValue] = {}
        self._committed = name != "run.transition"
        self._open = True

    @property
    def span_id(self) -> str:
        if self._id is None:
            if self.name == "run.start" and self.run is not None:
                self._id = run_span_id(self.run.run_id)
            else:
                self._id = secrets.token_hex(8)
        return self._id

    def __enter__(self) -> _Span:
        self._start = time.time_ns()
        self._parent = _current.get()
        self._token = _current.set(self)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._token is not None:
            _current.reset(self._token)
        if self.run is not None and self._committed:
            self._tracer.emit(self, exc)
        self._open = False  # a task spawned inside it (an actor's) must not hang under it
        self._parent = None

    def of(self, run: Run) -> None:
        self.run = run

    def set(self, key: str, value: AttributeValue) -> None:
        self._attrs[key] = value

    def transition(self, message: object, events: Sequence[Event]) -> None:
        self._committed = True
        self._attrs["foliot.message"] = type(message).__name__
        self._attrs["foliot.events"] = [event.type for event in events]

    def parent_id(self) -> str | None:
        """The span this one hangs under (None: the root of its trace)."""
        run = self.run
        assert run is not None
        parent = self._parent
        while (
            parent is not None
            and parent._open
            and (parent.run is None or parent.run.trace_id != run.trace_id)
        ):
            parent = parent._parent
        if parent is not None and parent._open:
            return parent.span_id
        if self.name != "run.start":
            return run_span_id(run.run_id)
        if run.parent is not None:
            return run_span_id(run.parent.run_id)  # a child run's own span: under its parent's
        return None  # a top-level run's own span: the trace's root

    def attributes(self) -> dict[str, AttributeValue]:
        run = self.run
        assert run is not None
        out: dict[str, AttributeValue] = {
            "foliot.run_id": run.run_id,
            "foliot.app": run.app,
            "foliot.workflow": run.workflow,
            "foliot.workflow_version": run.version,
        }
        if run.current_step is not None:
            out["foliot.step"] = run.current_step
        out.update(self._attrs)
        return out


class OtelTracer:
    """`core.tracing.Tracer` exporting through `processor`."""

    on = True

    def __init__(self, service_name: str, processor: SpanProcessor) -> None:
        self._ids = _Ids()
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": service_name}), id_generator=self._ids
        )
        self.provider.add_span_processor(processor)
        self._tracer = self.provider.get_tracer("foliot")

    def span(self, name: str, run: Run | None = None, span_id: str | None = None) -> _Span:
        return _Span(self, name, run, span_id)

    def emit(self, span: _Span, exc: BaseException | None) -> None:
        run = span.run
        assert run is not None
        trace_id = int(run.trace_id, 16)
        parent = span.parent_id()
        if parent is None:
            context = _EMPTY
            self._ids.trace = trace_id
        else:
            remote = SpanContext(trace_id, int(parent, 16), is_remote=True, trace_flags=_SAMPLED)
            context = trace.set_span_in_context(NonRecordingSpan(remote), _EMPTY)
        self._ids.span = int(span.span_id, 16)
        made = self._tracer.start_span(
            span.name,
            context=context,
            kind=_KINDS.get(span.name, SpanKind.INTERNAL),
            attributes=span.attributes(),
            start_time=span._start,
            record_exception=False,
        )
        self._ids.span = self._ids.trace = None
        if exc is not None:
            made.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        made.end()

    def close(self) -> None:
        self.provider.shutdown()


def otlp_tracer(endpoint: str, service_name: str) -> OtelTracer:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OtelTracer(service_name, BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
