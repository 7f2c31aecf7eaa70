"""The JSON log format, the push-outcome vocabulary, and what logging setup turns on or off."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from hypercorn.logging import AccessLogAtoms

from foliot.core import logs
from foliot.core.logs import JsonFormatter
from foliot.core.workflow.machine import Accepted, Completed, Failed
from foliot.observe.metrics import OUTCOMES, outcome_label


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    names = ("httpx", "httpcore", "hypercorn.access")
    saved = root.handlers[:], root.level, {n: logging.getLogger(n).level for n in names}
    access_filters = logging.getLogger("hypercorn.access").filters[:]
    yield
    root.handlers[:], root.level = saved[0], saved[1]
    logging.getLogger("hypercorn.access").filters[:] = access_filters
    for name, level in saved[2].items():
        logging.getLogger(name).setLevel(level)


def formatted(record_logger: str, emit: object) -> list[dict[str, object]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger(record_logger)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        assert callable(emit)
        emit(logger)
    finally:
        logger.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    return [json.loads(line) for line in lines]


def test_one_json_object_per_line_with_the_extra_fields() -> None:
    def emit(logger: logging.Logger) -> None:
        logger.info("retry scheduled", extra={"runId": "run_1", "step": "charge", "attempt": 2})
        logger.warning('a "quoted"\nmulti-line message', extra={"runId": "run_2", "step": None})
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("crashed", extra={"runId": "run_3"})

    first, second, third = formatted("foliot.test", emit)
    assert first["message"] == "retry scheduled" and first["level"] == "INFO"
    assert (first["runId"], first["step"], first["attempt"]) == ("run_1", "charge", 2)
    assert first["logger"] == "foliot.test" and str(first["time"]).endswith("Z")
    assert second["message"] == 'a "quoted"\nmulti-line message' and second["step"] is None
    assert third["runId"] == "run_3" and "ValueError: boom" in str(third["exc_info"])


def test_access_log_lines_are_fields_and_never_carry_headers() -> None:
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/apps/orders/runs",
        "query_string": b"token=abc",
        "client": ("127.0.0.1", 5000),
        "headers": [(b"authorization", b"Bearer sk_secret_key")],
    }
    response = {"status": 201, "headers": [(b"content-length", b"12")]}
    atoms = AccessLogAtoms(scope, response, 0.0125)  # type: ignore[arg-type]

    def emit(logger: logging.Logger) -> None:
        logger.info(logs.ACCESS_LOG_FORMAT, atoms)

    (line,) = formatted("hypercorn.access", emit)
    assert line["message"] == "request"
    assert (line["method"], line["path"], line["status"]) == ("POST", "/apps/orders/runs", 201)
    assert line["durationMs"] == 12.5 and line["remote"] == "127.0.0.1:5000"
    assert "sk_secret_key" not in json.dumps(line) and "token=abc" not in json.dumps(line)


@pytest.mark.usefixtures("restore_logging")
def test_the_status_less_duplicate_access_line_is_dropped() -> None:
    logs.configure("json", "INFO", access_log=True)
    access = logs.access_logger()
    assert access is not None and logs.access_logger() is access  # the filter is added once
    assert len(access.filters) == 1
    scope = {
        "type": "http",
        "method": "GET",
        "scheme": "http",
        "path": "/",
        "query_string": b"",
        "headers": [],
    }

    def record(response: dict[str, object] | None) -> logging.LogRecord:
        atoms = AccessLogAtoms(scope, response, 0.001)  # type: ignore[arg-type]
        return logging.LogRecord(access.name, logging.INFO, __file__, 1, logs.ACCESS_LOG_FORMAT, atoms, None)

    assert access.filter(record({"status": 200, "headers": []}))
    assert not access.filter(record(None))


@pytest.mark.usefixtures("restore_logging")
def test_configure_quiets_httpx_and_keeps_the_access_log_off_by_default() -> None:
    logs.configure("json", "INFO")
    assert isinstance(logging.getLogger().handlers[0].formatter, JsonFormatter)
    assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
    assert not logging.getLogger("httpcore").isEnabledFor(logging.INFO)
    assert logs.access_logger() is None
    logs.configure("text", "DEBUG", access_log=True)
    assert not isinstance(logging.getLogger().handlers[0].formatter, JsonFormatter)
    assert logs.access_logger() is logging.getLogger("hypercorn.access")
    assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)


@pytest.mark.parametrize(
    ("outcome", "label"),
    [
        (Completed({"ok": 1}), "ok"),
        (Accepted(), "accepted"),
        (Failed("timeout", "", True), "timeout"),
        (Failed("connection_error", "", True), "connection_error"),
        (Failed("http_404", "", False), "http_4xx"),
        (Failed("http_503", "", True), "http_5xx"),
        (Failed("http_302", "", False), "http_3xx"),
        (Failed("output_too_large", "", False), "output_too_large"),
        (Failed("invalid_output", "", False), "invalid_output"),
        (Failed("invalid_next", "", False), "invalid_next"),
        (Failed('db "primary" down\n', "", True), "app_error"),
        (Failed("http_5000", "", True), "app_error"),
        (Failed("reservation_busy", "", True), "app_error"),
    ],
)
def test_push_outcomes_map_to_a_fixed_vocabulary(outcome: Completed | Accepted | Failed, label: str) -> None:
    assert outcome_label(outcome) == label
    assert label in OUTCOMES


def test_the_text_format_appends_the_run_fields() -> None:
    formatter = logs.TextFormatter("%(levelname)s %(name)s: %(message)s")
    record = logging.LogRecord("foliot.run", logging.INFO, __file__, 1, "retry scheduled", (), None)
    record.__dict__.update(runId="run_1", step="charge", attempt=1, event="retry_scheduled")
    assert formatter.format(record) == "INFO foliot.run: retry scheduled runId=run_1 step=charge attempt=1"
