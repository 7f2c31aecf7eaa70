"""Tracing on or off (FOLIOT_TRACING): the node's `Tracer`.

Off (the default), the node gets `core.tracing.NO_TRACER` and OpenTelemetry is never imported.
`otlp` builds `observe.otel.OtelTracer`: an SDK `TracerProvider` whose `BatchSpanProcessor`
sends spans to FOLIOT_OTEL_ENDPOINT over OTLP/HTTP as service FOLIOT_OTEL_SERVICE_NAME (the
`otel` extra: `pip install 'foliot[otel]'`). The spans and their attributes: docs/operations.md.
"""

from __future__ import annotations

from ..core.config import Settings
from ..core.tracing import NO_TRACER, Tracer


def make_tracer(settings: Settings) -> Tracer:
    if settings.tracing == "off":
        return NO_TRACER
    try:
        from .otel import otlp_tracer
    except ImportError as exc:  # the extra is not installed
        raise SystemExit(
            f"FOLIOT_TRACING={settings.tracing} needs OpenTelemetry: pip install 'foliot[otel]' ({exc})"
        ) from None
    return otlp_tracer(settings.otel_endpoint, settings.otel_service_name)
