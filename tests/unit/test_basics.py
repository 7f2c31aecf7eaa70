"""Durations, timestamps, payload sizes, predicates, signing: the small pure pieces."""

from __future__ import annotations

import json

import pytest

from foliot import signing
from foliot.core.workflow.duration import (
    DurationError,
    format_duration,
    format_timestamp,
    parse_duration,
    parse_timestamp,
)
from foliot.core.workflow.payload import PayloadError, payload_size
from foliot.core.workflow.predicate import PredicateError, evaluate, parse_predicate


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("500ms", 500),
        ("30s", 30_000),
        ("5m", 300_000),
        ("2h", 7_200_000),
        ("14d", 14 * 86_400_000),
        ("1h30m", 5_400_000),
        ("1d2h3m4s5ms", 86_400_000 + 7_200_000 + 180_000 + 4_000 + 5),
        ("0s", 0),
    ],
)
def test_durations(text: str, ms: int) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize(
    "text", ["", "1.5s", "30", "s", "1m1h", "1h1h", "-1s", " 1s", "1s ", "1S", "1w", "1 s", "3650001d"]
)
def test_bad_durations(text: str) -> None:
    with pytest.raises(DurationError):
        parse_duration(text)


def test_format_duration_round_trips() -> None:
    for ms in (1, 999, 1000, 61_000, 5_400_000, 14 * 86_400_000 + 5):
        assert parse_duration(format_duration(ms)) == ms


def test_timestamps() -> None:
    ms = parse_timestamp("2026-11-29T18:00:00.000Z")
    assert format_timestamp(ms) == "2026-11-29T18:00:00.000Z"
    assert parse_timestamp("2026-11-29T19:00:00.123+01:00") == ms + 123
    assert parse_timestamp("2026-11-29T18:00:00.123456789Z") == ms + 123
    for bad in ("2026-11-29", "2026-11-29T18:00:00", "yesterday", "2026-13-01T00:00:00Z"):
        with pytest.raises(DurationError):
            parse_timestamp(bad)


LIMIT = 262_144


@pytest.mark.parametrize(
    ("char", "width"),
    [("a", 1), ("<", 1), (">", 1), ("&", 1), ("\u2028", 3), ("\u2029", 3), ("é", 2), ("😀", 4)],
)
def test_payload_sizes_count_compact_utf8(char: str, width: int) -> None:
    # A JSON string of n chars costs n*width + 2 quote bytes.
    n = (LIMIT - 2) // width
    value = char * n
    assert payload_size(value) == n * width + 2
    exact = "a" * (LIMIT - 2 - n * width) + value
    assert payload_size(exact) == LIMIT
    assert payload_size(exact + "a") == LIMIT + 1


def test_payload_size_is_compact_json() -> None:
    value = {"a": [1, 2, {"b": None}], "c": "x<y&z"}
    assert payload_size(value) == len('{"a":[1,2,{"b":null}],"c":"x<y&z"}')
    assert payload_size(None) == 4
    with pytest.raises(PayloadError):
        payload_size(float("nan"))
    with pytest.raises(PayloadError):
        payload_size("\ud800")


SCOPE = {
    "input": {"orderId": 7, "tags": ["a", "b"], "flag": True, "name": "express-lane"},
    "state": {"reserve": {"express": True, "items": [{"sku": "X1", "qty": 2}], "n": 1.5, "z": None}},
}


@pytest.mark.parametrize(
    ("predicate", "expected"),
    [
        ({"path": "state.reserve.express", "op": "eq", "value": True}, True),
        ({"path": "state.reserve.express", "op": "eq", "value": 1}, False),
        ({"path": "input.orderId", "op": "eq", "value": 7.0}, True),
        ({"path": "input.orderId", "op": "ne", "value": 8}, True),
        ({"path": "input.orderId", "op": "lt", "value": 8}, True),
        ({"path": "input.orderId", "op": "lte", "value": 7}, True),
        ({"path": "input.orderId", "op": "gt", "value": 7}, False),
        ({"path": "input.orderId", "op": "gte", "value": 7}, True),
        ({"path": "input.orderId", "op": "gt", "value": "6"}, False),
        ({"path": "input.name", "op": "gt", "value": "a"}, True),
        ({"path": "input.orderId", "op": "in", "value": [1, 7]}, True),
        ({"path": "input.tags", "op": "contains", "value": "b"}, True),
        ({"path": "input.name", "op": "contains", "value": "lane"}, True),
        ({"path": "input.flag", "op": "contains", "value": "x"}, False),
        ({"path": "state.reserve.items.0.sku", "op": "eq", "value": "X1"}, True),
        ({"path": "state.reserve.items.1.sku", "op": "exists", "value": False}, True),
        ({"path": "state.reserve.z", "op": "exists", "value": True}, True),
        ({"path": "state.reserve.z", "op": "eq", "value": None}, True),
        ({"path": "state.nope", "op": "ne", "value": 1}, False),
        ({"path": "state.nope", "op": "eq", "value": None}, False),
        ({"path": "state.nope", "op": "exists", "value": False}, True),
        ({"path": "state.nope", "op": "exists", "value": True}, False),
        ({"path": "input.orderId.deeper", "op": "exists", "value": True}, False),
        (
            {
                "all": [
                    {"path": "input.flag", "op": "eq", "value": True},
                    {"path": "state.reserve.n", "op": "gt", "value": 1},
                ]
            },
            True,
        ),
        (
            {
                "any": [
                    {"path": "input.flag", "op": "eq", "value": False},
                    {"path": "state.reserve.n", "op": "lt", "value": 1},
                ]
            },
            False,
        ),
        ({"not": {"path": "state.nope", "op": "eq", "value": 1}}, True),
    ],
)
def test_predicates(predicate: dict[str, object], expected: bool) -> None:
    assert evaluate(parse_predicate(predicate, "when"), SCOPE) is expected


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"path": "foo.bar", "op": "eq", "value": 1}, "when.path"),
        ({"path": "state..x", "op": "eq", "value": 1}, "when.path"),
        ({"path": "state.x", "op": "matches", "value": 1}, "when.op"),
        ({"path": "state.x", "op": "eq"}, "when.value"),
        ({"path": "state.x", "op": "exists", "value": "yes"}, "when.value"),
        ({"path": "state.x", "op": "in", "value": 3}, "when.value"),
        ({"path": "state.x", "op": "eq", "value": 1, "extra": 1}, "when.extra"),
        ({"all": []}, "when.all"),
        ({"any": [{"op": "eq"}]}, "when.any[0].path"),
        ({"any": [{"path": "state.x"}]}, "when.any[0].op"),
        ({"not": 3}, "when.not"),
        ("state.x == 1", "when"),
    ],
)
def test_bad_predicates_name_their_path(raw: object, field: str) -> None:
    with pytest.raises(PredicateError) as info:
        parse_predicate(raw, "when")
    assert info.value.field == field


def test_signature_round_trip_and_rotation() -> None:
    body = json.dumps({"x": "<&>"}).encode()
    header = signing.sign(body, ["new", "old"], timestamp=1_000)
    assert header.count("v1=") == 2
    assert signing.verify_signature(body, header, ["old"], now=1_100) == 1_000
    assert signing.verify_signature(body, header, ["new"], now=1_100) == 1_000
    with pytest.raises(signing.SignatureError):
        signing.verify_signature(body, header, ["other"], now=1_100)
    with pytest.raises(signing.SignatureError):
        signing.verify_signature(body + b" ", header, ["new"], now=1_100)
    with pytest.raises(signing.SignatureError):
        signing.verify_signature(body, header, ["new"], now=1_000 + 301)
    with pytest.raises(signing.SignatureError):
        signing.verify_signature(body, header, ["new"], now=1_000 - 301)
    for broken in (None, "", "t=abc,v1=00", "v1=00", "t=1000", "garbage"):
        with pytest.raises(signing.SignatureError):
            signing.verify_signature(body, broken, ["new"], now=1_000)
