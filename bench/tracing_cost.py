"""What tracing costs (issue 26 point 7): in-process microbenchmarks, not a served benchmark.

1. CPU per signal round trip in one process (an engine on in-memory SQLite, pushes answered at
   once by a mock transport; runs of `wait go` -> task, 8 rounds): tracing off, and on with a
   `BatchSpanProcessor` into an exporter that drops its batches (process CPU time, so the
   export thread counts). A round trip is the signal, its transition and commit, the push, the
   answer's transition and commit: 6 spans when on.
2. One `with tracer.span(...)` hook: off (`NO_TRACER`), and on (`OtelTracer` with a
   `SimpleSpanProcessor` into the same dropping exporter).

    .venv/bin/python bench/tracing_cost.py [--signals 2000] [--hooks 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
import timeit
from collections.abc import Sequence

import httpx
import trio
from cryptography.fernet import Fernet
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from foliot.actors.clock import Clock
from foliot.core.config import Settings
from foliot.core.credentials import Vault
from foliot.core.tracing import NO_TRACER, Tracer
from foliot.core.views import run_view
from foliot.core.workflow import machine
from foliot.core.workflow.definition import canonical_json
from foliot.core.workflow.model import Run
from foliot.node import Node
from foliot.observe.otel import OtelTracer
from foliot.storage.base import ApiKeyRecord, AppRecord, SecretRecord
from foliot.storage.sqlite import open_sqlite

ROUNDS = 8
WORKFLOW = {
    "name": "signalled",
    "steps": [
        step
        for k in range(ROUNDS)
        for step in (
            {"name": f"w{k}", "type": "wait", "signal": "go", "timeout": "14d"},
            {"name": f"t{k}", "type": "task", "timeout": "30s"},
        )
    ],
}


class Drop(SpanExporter):
    def __init__(self) -> None:
        self.count = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.count += len(spans)
        return SpanExportResult.SUCCESS


async def signals(count: int, tracer: Tracer) -> tuple[float, Run]:
    """CPU seconds per signal round trip, and a run document (for the hook benchmark)."""
    settings = Settings(data_dir="/tmp", trend_interval_ms=0, timer_window_ms=86_400_000)

    async def transport(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"null")

    vault = Vault(Fernet.generate_key().decode())
    async with (
        open_sqlite(":memory:", inline=True) as store,
        httpx.AsyncClient(transport=httpx.MockTransport(transport)) as client,
    ):
        now = int(time.time() * 1000)
        await store.create_app(
            AppRecord("app", "http://handler.test", None, now, now),
            ApiKeyRecord("k1", "app", "x", now),
            SecretRecord("s1", "app", vault.encrypt("whsec_test"), now, None),
        )
        await store.add_workflow_version("app", "signalled", canonical_json(WORKFLOW), now)
        engine = Node(settings, store, clock=Clock(), vault=vault, http_client=client, tracer=tracer)
        async with trio.open_nursery() as nursery:
            await nursery.start(engine.serve)
            spent = 0.0
            done = 0
            run: Run | None = None
            while done < count:
                body, _ = await engine.runs.start(
                    app="app",
                    workflow="signalled",
                    version=None,
                    input=None,
                    business_key=None,
                    run_timeout_ms=None,
                    idempotency_key=None,
                    request_hash="",
                    render=run_view,
                )
                run_id = str(body["runId"])
                for k in range(ROUNDS):
                    step = f"w{k}"
                    run = await engine.runs.wait_for(run_id, lambda r, s=step: r.current_step == s, 30)
                    cpu = time.process_time()
                    reply, _ = await engine.runs.ask(run_id, machine.SignalIn("go", None, None), run)
                    assert isinstance(reply, machine.Ok), reply
                    nxt = f"w{k + 1}"
                    await engine.runs.wait_for(
                        run_id, lambda r, s=nxt: r.current_step == s or not r.is_open, 30
                    )
                    spent += time.process_time() - cpu
                    done += 1
            nursery.cancel_scope.cancel()
    assert run is not None
    return spent / done, run


def hook(n: int, tracer: Tracer, run: Run) -> float:
    def one() -> None:
        with tracer.span("store.commit", run) as span:
            span.set("foliot.event_count", 3)

    return min(timeit.repeat(one, number=n, repeat=5)) / n


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--signals", type=int, default=2000)
    parser.add_argument("--hooks", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    figures: dict[str, list[float]] = {"off": [], "on": []}
    run: Run | None = None
    exported = 0
    for _ in range(args.repeat):  # interleaved: a shared machine drifts
        for mode in ("off", "on"):
            drop = Drop()
            tracer: Tracer = NO_TRACER if mode == "off" else OtelTracer("bench", BatchSpanProcessor(drop))
            per, run = trio.run(signals, args.signals, tracer)
            tracer.close()
            exported += drop.count
            figures[mode].append(per)
    for mode, values in figures.items():
        shown = ", ".join(f"{v * 1e6:,.0f}" for v in values)
        print(f"signal round trip, tracing {mode}: CPU µs {shown} (min {min(values) * 1e6:,.0f})")
    off, on = min(figures["off"]), min(figures["on"])
    print(f"tracing on costs {(on - off) * 1e6:,.0f} µs CPU per round trip ({(on / off - 1) * 100:+.1f} %)")
    per_trip = exported / (args.repeat * args.signals)
    print(f"spans exported when on: {exported:,} ({per_trip:.1f} per round trip)")
    assert run is not None
    drop = Drop()
    on_tracer = OtelTracer("bench", SimpleSpanProcessor(drop))
    print(f"hook off (NO_TRACER): {hook(args.hooks, NO_TRACER, run) * 1e9:,.0f} ns per span")
    on_ns = hook(args.hooks // 10, on_tracer, run) * 1e9
    print(f"hook on (OtelTracer, spans dropped): {on_ns:,.0f} ns per span")


if __name__ == "__main__":
    main()
