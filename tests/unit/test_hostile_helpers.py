"""The pure guards against hostile input: JSON depth, timestamps, durations, digits, handler
paths, signature headers, and how the machine classifies a too-deep handler answer."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from foliot import signing
from foliot.core.digits import INT64_MAX, ascii_int
from foliot.core.workflow import machine
from foliot.core.workflow.definition import HandlerPathError, check_handler_path, push_url
from foliot.core.workflow.duration import (
    MAX_TIMESTAMP_MS,
    MIN_TIMESTAMP_MS,
    DurationError,
    format_timestamp,
    parse_duration,
    parse_timestamp,
)
from foliot.core.workflow.jsonconv import ValidationError, is_name, structure
from foliot.core.workflow.payload import (
    MAX_DEPTH,
    DepthError,
    PayloadError,
    deeper_than,
    loads,
    payload_size,
)
from foliot.storage.base import decode_cursor, encode_cursor

from .machine_kit import Kit


def nested(depth: int, leaf: str = "1") -> str:
    """`depth` arrays/objects inside one another, alternating, as JSON text."""
    text = leaf
    for level in range(depth):
        text = f"[{text}]" if level % 2 else f'{{"k":{text}}}'
    return text


# --------------------------------------------------------------------------- JSON depth


@pytest.mark.parametrize("depth", [0, 1, 2, MAX_DEPTH - 1, MAX_DEPTH])
def test_values_up_to_the_depth_limit_pass(depth: int) -> None:
    text = nested(depth)
    assert not deeper_than(text, MAX_DEPTH)
    value = loads(text)
    assert payload_size(value) == len(text)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 400, 2000, 100_000])
def test_deeper_values_are_refused_before_parsing(depth: int) -> None:
    text = nested(depth)
    assert deeper_than(text, MAX_DEPTH)
    with pytest.raises(DepthError):
        loads(text)


def test_a_parsed_value_past_the_limit_is_not_storable() -> None:
    value = json.loads(nested(MAX_DEPTH + 1))  # e.g. a `complete` output inside a body
    with pytest.raises(PayloadError, match="deeper than 64"):
        payload_size(value)


@pytest.mark.parametrize(
    "text",
    [
        '"' + "[" * 500 + '"',  # brackets inside a string do not count
        '["\\"[[[[[[[", "\\\\", "]]]]"]',  # escaped quotes and backslashes
        '{"a": "' + "{" * 200 + '"}',
    ],
)
def test_the_scan_skips_strings(text: str) -> None:
    assert not deeper_than(text, 3)
    loads(text)


def test_the_scan_is_linear_on_unterminated_strings() -> None:
    """A string that never ends, full of escaped quotes, must not make the scan quadratic."""
    text = '"' + '\\"' * 300_000
    started = time.perf_counter()
    assert not deeper_than(text, MAX_DEPTH)
    assert time.perf_counter() - started < 1.0
    with pytest.raises(ValueError):
        loads(text)


@pytest.mark.parametrize("text", ['"\\ud800"', '{"a": ["x\\udfff"]}', '"\\uDBFF"'])
def test_lone_surrogates_are_refused(text: str) -> None:
    with pytest.raises(PayloadError):
        loads(text)


def test_surrogate_pairs_and_escaped_backslashes_pass() -> None:
    assert loads('"\\ud83d\\ude00"') == "\U0001f600"
    assert loads('"\\\\ud800"') == "\\ud800"


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", "-Infinity", "{", "[1,]"])
def test_malformed_json_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        loads(text)


# --------------------------------------------------------------------------- timestamps


@pytest.mark.parametrize(
    "text",
    [
        "9999-12-31T23:59:59-23:59",  # year 10000 in UTC
        "9999-12-31T23:59:59.999-00:01",
        "0001-01-01T00:00:00+00:01",  # year 0 in UTC
        "0000-12-31T23:59:59Z",
        "2026-11-29T18:00:00.000Z\n",
        "٢٠٢٦-11-29T18:00:00Z",
    ],
)
def test_timestamps_format_timestamp_cannot_render_are_refused(text: str) -> None:
    with pytest.raises(DurationError):
        parse_timestamp(text)


@pytest.mark.parametrize(
    ("text", "ms", "shown"),
    [
        ("9999-12-31T23:59:59.999Z", MAX_TIMESTAMP_MS, "9999-12-31T23:59:59.999Z"),
        ("9999-12-31T23:59:59.999+23:59", MAX_TIMESTAMP_MS - 86_340_000, "9999-12-31T00:00:59.999Z"),
        ("0001-01-01T00:00:00Z", MIN_TIMESTAMP_MS, "0001-01-01T00:00:00.000Z"),
        ("0001-01-01T00:00:00-00:01", MIN_TIMESTAMP_MS + 60_000, "0001-01-01T00:01:00.000Z"),
        ("1969-12-31T23:59:59.9995Z", -1, "1969-12-31T23:59:59.999Z"),
    ],
)
def test_the_edges_of_the_range_round_trip(text: str, ms: int, shown: str) -> None:
    assert parse_timestamp(text) == ms
    assert format_timestamp(ms) == shown
    assert parse_timestamp(shown) == ms


def test_until_path_out_of_range_is_invalid_sleep() -> None:
    k = Kit([{"name": "s", "type": "sleep", "untilPath": "input.at"}])
    k.start({"at": "9999-12-31T23:59:59-23:59"})
    assert k.run.status == "failed" and k.run.error is not None and k.run.error.cls == "invalid_sleep"
    assert k.run.wake_at is None


def test_sleep_until_out_of_range_is_refused_at_registration() -> None:
    with pytest.raises(ValidationError) as caught:
        Kit([{"name": "s", "type": "sleep", "until": "9999-12-31T23:59:59-23:59"}])
    assert caught.value.field == "steps[0].until"


# --------------------------------------------------------------------------- durations and digits


@pytest.mark.parametrize("text", ["1" * 4400 + "s", "9" * 70 + "ms", "٣s", "3s\n", "1" * 65, "0" * 64 + "1s"])
def test_hostile_durations_are_duration_errors(text: str) -> None:
    with pytest.raises(DurationError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "low", "high", "value"),
    [("0", 0, 10, 0), ("10", 0, 10, 10), ("0010", 0, 1000, 10), (str(INT64_MAX), 0, INT64_MAX, INT64_MAX)],
)
def test_ascii_int_reads_bounded_ascii_digits(text: str, low: int, high: int, value: int) -> None:
    assert ascii_int(text, low, high) == value


@pytest.mark.parametrize(
    "text",
    [
        "",
        "²",
        "¹",
        "٣",
        "1²",
        "-1",
        "+1",
        " 1",
        "1 ",
        "1.0",
        "1e3",
        "0x10",
        "1_000",
        str(INT64_MAX + 1),
        "1" + "0" * 30,
        "1" * 5000,
    ],
)
def test_ascii_int_refuses_everything_else(text: str) -> None:
    with pytest.raises(ValueError):
        ascii_int(text)


def test_body_integers_fit_in_64_bits() -> None:
    import attrs

    @attrs.frozen
    class Body:
        version: int | None = None

    assert structure({"version": INT64_MAX}, Body).version == INT64_MAX
    with pytest.raises(ValidationError) as caught:
        structure({"version": 10**30}, Body)
    assert caught.value.field == "version"


def test_a_string_field_holding_nul_says_so() -> None:
    """The strict converter's own reason reaches the message, for required and optional fields
    (cattrs' generic "invalid value for type, expected str | None" told the client nothing)."""
    import attrs

    @attrs.frozen
    class Body:
        name: str
        key: str | None = None

    for raw, field in [({"name": "a\x00"}, "name"), ({"name": "a", "key": "\x00"}, "key")]:
        with pytest.raises(ValidationError) as caught:
            structure(raw, Body)
        assert caught.value.field == field
        assert "NUL" in caught.value.message, caught.value.message


def test_null_for_a_member_with_a_default_means_the_default() -> None:
    """`"waitSeconds": null` is the default, as `"version": null` already was: clients that
    serialise unset members as null get the same answer as those that leave them out."""
    import attrs

    @attrs.frozen
    class Body:
        queue: str
        wait_seconds: float = 30
        max_tasks: int = 1
        worker_id: str | None = "w"
        extra: Any = 5

    got = structure(
        {"queue": "q", "waitSeconds": None, "maxTasks": None, "workerId": None, "extra": None}, Body
    )
    assert got == Body("q", 30, 1, None, None)  # a member that takes null keeps it
    with pytest.raises(ValidationError) as caught:
        structure({"queue": None}, Body)  # no default: null is still a wrong type
    assert caught.value.field == "queue"


@pytest.mark.parametrize("text", ['[1,"run_\\ud800"]', '[1,"run_\\u0000"]', '["\\udfff",2]'])
def test_a_cursor_holding_text_no_store_keeps_is_no_cursor(text: str) -> None:
    """Cursors are made from stored values; one holding a lone surrogate (SQLite raised a 500
    on it) or NUL (PostgreSQL text cannot hold it) was never returned by Foliot."""
    import base64

    tampered = base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
    assert decode_cursor(tampered, 2) is None
    assert decode_cursor(encode_cursor(1, "run_\u00e9\U0001f600"), 2) == [1, "run_\u00e9\U0001f600"]


def test_names_refuse_a_trailing_newline() -> None:
    assert is_name("orders") and not is_name("orders\n")


# --------------------------------------------------------------------------- handler paths


@pytest.mark.parametrize(
    "path",
    [
        "/../b/admin/wipe",
        "/a/..",
        "/a/./b",
        "/%2e%2e/b",
        "/%2E%2E/b",
        "/.%2e/b",
        "/%2e/b",
        "/a%2fb",
        "/a%2F..%2Fb",
        "/a%5cb",
        "/a\\b",
        "/a?x=1",
        "/a#x",
        "/a b",
        "/a\tb",
        "/é",
        "/%252e%252e/b",
        "/a%00",
        "/a%ff",
        "http://evil/x",
        "//evil/x",
        "a/b",
        "",
        "/" + "a" * 1024,
    ],
)
def test_handler_paths_that_could_leave_the_base_are_refused(path: str) -> None:
    with pytest.raises(HandlerPathError):
        check_handler_path(path)
    with pytest.raises(HandlerPathError):
        push_url("http://h/tenants/a", path)
    with pytest.raises(ValidationError) as caught:
        Kit([{"name": "t", "type": "task"}, {"name": "u", "type": "task", "handler": path}])
    assert caught.value.field == "steps[1].handler"


@pytest.mark.parametrize("path", ["/hooks/ship", "/a/.../b", "/a%20b", "/a/b/", "/v1/x:y@z;k=v", "/a..b/.c"])
def test_plain_handler_paths_pass(path: str) -> None:
    assert push_url("http://h/tenants/a/", path) == "http://h/tenants/a" + path


# --------------------------------------------------------------------------- signing


@pytest.mark.parametrize(
    "header",
    [
        "t=²,v1=" + "a" * 64,
        "t=¹²³,v1=" + "a" * 64,
        "t=٣,v1=" + "a" * 64,
        "t=1" + "0" * 5000 + ",v1=" + "a" * 64,
        "t=1,v1=é",
        "t=1,v1=" + "A" * 64,
        "t=1,v1=zz",
        "t=1,t=2,v1=" + "a" * 64,
        "t=-1,v1=" + "a" * 64,
        "t=1",
        "v1=" + "a" * 64,
        "garbage",
        "t=1,v1=" + "a" * 64 + ",é=1",
        ",",
        "t=1,v1=" + "a" * 10_000,
    ],
)
def test_every_malformed_signature_header_is_a_signature_error(header: str) -> None:
    with pytest.raises(signing.SignatureError):
        signing.verify_signature(b"{}", header, ["secret"], now=1)


def test_a_good_signature_still_verifies() -> None:
    header = signing.sign(b"{}", ["secret"], timestamp=1_800_000_000)
    assert signing.verify_signature(b"{}", header, ["secret"], now=1_800_000_000) == 1_800_000_000


# --------------------------------------------------------------------------- handler answers


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 350, 5000])
def test_a_too_deep_handler_answer_is_invalid_output_not_retried(depth: int) -> None:
    outcome = machine.classify_response(200, nested(depth).encode(), None)
    assert isinstance(outcome, machine.Failed)
    assert outcome.cls == "invalid_output" and not outcome.retryable


def test_a_too_deep_error_body_falls_back_to_the_status() -> None:
    body = ('{"error": {"class": "deep", "detail": ' + nested(5000) + "}}").encode()
    outcome = machine.classify_response(503, body, None)
    assert outcome == machine.Failed("http_503", "the handler answered 503", True)


def test_a_too_deep_output_fails_the_step_and_complete_answers_400() -> None:
    k = Kit([{"name": "t", "type": "task", "retry": {"maxAttempts": 5}}])
    k.start()
    deep = json.loads(nested(MAX_DEPTH + 1))
    tr = k.answer(machine.Completed(deep), via_api=True)
    assert isinstance(tr.reply, machine.Rejected)
    assert (tr.reply.status, tr.reply.code) == (400, "invalid_output")
    assert k.run.status == "failed" and k.run.error is not None and k.run.error.cls == "invalid_output"
    assert "t" not in k.run.state
    assert "retry_scheduled" not in k.events()


def test_an_output_at_the_limit_is_kept() -> None:
    k = Kit([{"name": "t", "type": "task"}])
    k.start()
    value = json.loads(nested(MAX_DEPTH))
    k.ok(value)
    assert k.run.status == "completed" and k.run.state["t"] == value
