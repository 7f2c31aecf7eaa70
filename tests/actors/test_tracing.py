"""Tracing (FOLIOT_TRACING): the spans of a run, in one trace, under MockClock; off by default."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import pytest
from trio.testing import MockClock

from foliot.core.config import Settings
from foliot.core.tracing import NO_TRACER, run_span_id
from foliot.core.workflow import machine
from foliot.observe.tracing import make_tracer

from .conftest import Env

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from foliot.observe.otel import OtelTracer

TWO_TASKS = {
    "name": "two",
    "steps": [
        {"name": "a", "type": "task"},
        {"name": "w", "type": "wait", "signal": "go"},
        {"name": "b", "type": "task"},
    ],
}


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    tracer = OtelTracer("foliot-test", SimpleSpanProcessor(exporter))
    monkeypatch.setattr("foliot.node.make_tracer", lambda settings: tracer)
    return exporter


@pytest.fixture
def settings_overrides(spans: InMemorySpanExporter) -> dict[str, Any]:
    return {}


def hex_trace(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"{span.context.trace_id:032x}"


def hex_id(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"{span.context.span_id:016x}"


def hex_parent(span: ReadableSpan) -> str | None:
    return None if span.parent is None else f"{span.parent.span_id:016x}"


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


async def test_a_run_s_spans_share_its_trace_and_the_push_span_is_the_handler_s_parent(
    env: Env, spans: InMemorySpanExporter, autojump_clock: MockClock
) -> None:
    await env.register(TWO_TASKS)
    run_id = await env.start("two")
    await env.until(run_id, "waiting")
    reply, _ = await env.engine.runs.ask(
        run_id, machine.SignalIn("go", {"x": 1}, None), await env.engine.runs.document(run_id)
    )
    assert reply == machine.Ok("delivered")
    run = await env.until(run_id, "completed")

    got = spans.get_finished_spans()
    assert {span.name for span in got} == {
        "run.start",
        "run.signal",
        "run.transition",
        "store.commit",
        "task.push",
    }
    assert {hex_trace(span) for span in got} == {run.trace_id}  # one trace for every step

    (start,) = named(got, "run.start")
    assert hex_id(start) == run_span_id(run_id) and start.parent is None  # the trace's root
    assert start.attributes is not None and start.attributes["foliot.run_id"] == run_id
    assert start.attributes["foliot.workflow"] == "two" and start.attributes["foliot.app"] == "app"
    (signal,) = named(got, "run.signal")
    # Everything else hangs under the run's span: a commit under its transition (or the start),
    # the signal's transition under the signal (handled in the caller's task).
    for span in got:
        if (
            span.name == "run.transition"
            and span.attributes
            and span.attributes["foliot.message"] == "SignalIn"
        ):
            assert hex_parent(span) == hex_id(signal)
        elif span.name == "store.commit":
            assert hex_parent(span) in {hex_id(s) for s in got if s.name in ("run.transition", "run.start")}
        elif span is not start:
            assert hex_parent(span) == run_span_id(run_id), span.name

    # Each push's span id is the one its traceparent carried to the handler.
    pushes = named(got, "task.push")
    assert len(pushes) == 2 == len(env.pushes)
    for pushed in env.pushes:
        version, trace_id, parent_id, flags = pushed.headers["traceparent"].split("-")
        assert (version, trace_id, flags) == ("00", run.trace_id, "01")
        (push,) = [span for span in pushes if hex_id(span) == parent_id]
        assert push.attributes is not None and push.attributes["foliot.step"] == pushed.body["step"]
        assert push.attributes["foliot.outcome"] == "completed"
    assert {s.attributes["foliot.step"] for s in pushes if s.attributes} == {"a", "b"}

    transitions = named(got, "run.transition")
    messages = [s.attributes["foliot.message"] for s in transitions if s.attributes]
    assert messages.count("TaskAnswer") == 2 and messages.count("SignalIn") == 1
    (signalled,) = [s for s in transitions if s.attributes and s.attributes["foliot.message"] == "SignalIn"]
    assert signalled.attributes is not None and signalled.attributes["foliot.step"] == "w"
    assert list(signalled.attributes["foliot.events"])[:2] == ["signal_received", "signal_consumed"]
    assert signal.attributes is not None and signal.attributes["foliot.signal"] == "go"
    assert signal.attributes["foliot.reply"] == "delivered"
    commits = named(got, "store.commit")
    assert len(commits) == len(transitions) + 1  # the start's commit, then one per transition


async def test_a_child_run_joins_its_parent_s_trace_under_the_parent_s_transition(
    env: Env, spans: InMemorySpanExporter, autojump_clock: MockClock
) -> None:
    await env.register({"name": "kid", "steps": [{"name": "k", "type": "task"}]})
    await env.register({"name": "parent", "steps": [{"name": "c", "type": "run", "workflow": "kid"}]})
    run_id = await env.start("parent")
    parent = await env.until(run_id, "completed")

    got = spans.get_finished_spans()
    assert {hex_trace(span) for span in got} == {parent.trace_id}
    starts = named(got, "run.start")
    (top,) = [s for s in starts if s.attributes and s.attributes["foliot.run_id"] == run_id]
    (kid,) = [s for s in starts if s is not top]
    assert kid.attributes is not None
    child_id = str(kid.attributes["foliot.run_id"])
    assert hex_id(kid) == run_span_id(child_id)
    assert hex_parent(kid) == run_span_id(run_id)  # started inside the parent's start
    (push,) = named(got, "task.push")
    assert push.attributes is not None and push.attributes["foliot.run_id"] == child_id
    assert hex_parent(push) == run_span_id(child_id)


async def test_a_refused_signal_commits_nothing_and_makes_no_transition_span(
    env: Env, spans: InMemorySpanExporter, autojump_clock: MockClock
) -> None:
    await env.register({"name": "one", "steps": [{"name": "t", "type": "task"}]})
    run_id = await env.start("one")
    run = await env.until(run_id, "completed")
    before = len(named(spans.get_finished_spans(), "run.transition"))
    reply, _ = await env.engine.runs.ask(run_id, machine.SignalIn("go", None, None), run)
    assert isinstance(reply, machine.Rejected) and reply.code == "run_closed"
    got = spans.get_finished_spans()
    assert len(named(got, "run.transition")) == before
    (signal,) = named(got, "run.signal")
    assert signal.attributes is not None and signal.attributes["foliot.reply"] == "run_closed"


def test_tracing_is_off_by_default_and_imports_no_opentelemetry() -> None:
    assert Settings().tracing == "off" and Settings.from_env({}).tracing == "off"
    assert make_tracer(Settings()) is NO_TRACER
    code = (
        "import sys, foliot.node, foliot.server\n"
        "from foliot.core.config import Settings\n"
        "from foliot.observe.tracing import make_tracer\n"
        "make_tracer(Settings.from_env({}))\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_settings_validate_tracing() -> None:
    on = Settings.from_env({"FOLIOT_TRACING": "otlp", "FOLIOT_OTEL_ENDPOINT": "http://collector:4318"})
    assert on.tracing == "otlp" and on.otel_endpoint == "http://collector:4318/v1/traces"
    assert on.otel_service_name == "foliot"
    custom = Settings.from_env(
        {"FOLIOT_OTEL_ENDPOINT": "https://c.example/otlp/traces", "FOLIOT_OTEL_SERVICE_NAME": "x"}
    )
    assert custom.otel_endpoint == "https://c.example/otlp/traces" and custom.otel_service_name == "x"
    with pytest.raises(SystemExit, match="FOLIOT_TRACING"):
        Settings.from_env({"FOLIOT_TRACING": "jaeger"})
    with pytest.raises(SystemExit, match="FOLIOT_OTEL_ENDPOINT"):
        Settings.from_env({"FOLIOT_OTEL_ENDPOINT": "collector:4318"})


def test_otlp_builds_a_batching_exporter_to_the_endpoint() -> None:
    tracer = make_tracer(Settings(tracing="otlp", otel_endpoint="http://127.0.0.1:9/v1/traces"))
    assert isinstance(tracer, OtelTracer) and tracer.on
    processors = tracer.provider._active_span_processor._span_processors
    assert [type(p).__name__ for p in processors] == ["BatchSpanProcessor"]
    tracer.close()
