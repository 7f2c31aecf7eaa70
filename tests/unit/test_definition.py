"""Workflow registration rules: every problem is refused with the path of the first one."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from foliot.core.workflow.definition import parse_definition
from foliot.core.workflow.jsonconv import ValidationError

from ..api.test_order_flow import ORDER


def test_the_spec_example_is_valid() -> None:
    d = parse_definition(copy.deepcopy(ORDER))
    assert [s.name for s in d.steps] == [
        "reserve",
        "await-payment",
        "route",
        "ship-express",
        "ship",
        "release",
    ]
    assert d.step("reserve").next == "await-payment"
    assert d.step("release").next == "$fail"
    assert d.step("ship").handler == "/hooks/ship"
    assert d.step("ship-express").queue is None
    assert d.run_timeout_ms == 14 * 86_400_000


def _doc(*steps: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"name": "wf", "steps": list(steps), **top}


T = {"name": "a", "type": "task"}


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({}, "name"),
        ({"name": "wf"}, "steps"),
        (_doc(), "steps"),
        ({"name": "$wf", "steps": [T]}, "name"),
        ({"name": "wf", "steps": [T], "extra": 1}, "extra"),
        ({"name": "wf", "steps": [T], "runTimeout": "1.5s"}, "runTimeout"),
        ({"name": "wf", "steps": [T], "runTimeout": "0s"}, "runTimeout"),
        ({"name": "wf", "steps": [T], "defaults": {"timeout": "soon"}}, "defaults.timeout"),
        (
            {"name": "wf", "steps": [T], "defaults": {"retry": {"maxAttempts": 0}}},
            "defaults.retry.maxAttempts",
        ),
        ({"name": "wf", "steps": [T], "defaults": {"bogus": 1}}, "defaults.bogus"),
        (_doc(T, T), "steps[1].name"),
        (_doc({"name": "a b", "type": "task"}), "steps[0].name"),
        (_doc({"name": "a", "type": "lambda"}), "steps[0].type"),
        (_doc({"name": "a"}), "steps[0].type"),
        (_doc({**T, "next": "nowhere"}), "steps[0].next"),
        (_doc({**T, "onFailure": "nowhere"}), "steps[0].onFailure"),
        (_doc({**T, "timeout": 30}), "steps[0].timeout"),
        (_doc({**T, "timeout": "30"}), "steps[0].timeout"),
        (_doc({**T, "retry": {"maxAttempts": "3"}}), "steps[0].retry.maxAttempts"),
        (_doc({**T, "retry": {"maxAttempts": True}}), "steps[0].retry.maxAttempts"),
        (_doc({**T, "retry": {"backoffCoefficient": 0.5}}), "steps[0].retry.backoffCoefficient"),
        (_doc({**T, "retry": {"retryOn": "http_503"}}), "steps[0].retry.retryOn"),
        (_doc({**T, "retry": {"retryOn": [1]}}), "steps[0].retry.retryOn[0]"),
        (_doc({**T, "retry": {"initialInterval": "1x"}}), "steps[0].retry.initialInterval"),
        (_doc({**T, "queue": "q", "handler": "/h"}), "steps[0].queue"),
        (_doc({**T, "queue": "bad queue"}), "steps[0].queue"),
        (_doc({**T, "handler": "https://evil.example/x"}), "steps[0].handler"),
        (_doc({**T, "handler": "//evil.example/x"}), "steps[0].handler"),
        (_doc({**T, "handler": "relative"}), "steps[0].handler"),
        (_doc({**T, "signal": "go"}), "steps[0].signal"),
        (_doc({"name": "s", "type": "sleep"}), "steps[0]"),
        (_doc({"name": "s", "type": "sleep", "duration": "1s", "until": "2026-01-01T00:00:00Z"}), "steps[0]"),
        (_doc({"name": "s", "type": "sleep", "until": "tomorrow"}), "steps[0].until"),
        (_doc({"name": "s", "type": "sleep", "untilPath": "output.x"}), "steps[0].untilPath"),
        (_doc({"name": "s", "type": "sleep", "duration": "1s", "retry": {}}), "steps[0].retry"),
        (_doc({"name": "w", "type": "wait"}), "steps[0].signal"),
        (_doc({"name": "w", "type": "wait", "signal": "$go"}), "steps[0].signal"),
        (_doc({"name": "w", "type": "wait", "signal": "go", "onTimeout": "w"}), "steps[0].onTimeout"),
        (
            _doc({"name": "w", "type": "wait", "signal": "go", "timeout": "1s", "onTimeout": "x"}),
            "steps[0].onTimeout",
        ),
        (_doc({"name": "c", "type": "choice"}), "steps[0].choices"),
        (_doc({"name": "c", "type": "choice", "choices": []}), "steps[0].choices"),
        (
            _doc(
                {
                    "name": "c",
                    "type": "choice",
                    "next": "c",
                    "choices": [
                        {"when": {"not": {"path": "state.x", "op": "exists", "value": True}}, "next": "$end"}
                    ],
                }
            ),
            "steps[0].next",
        ),
        (
            _doc(
                {
                    "name": "c",
                    "type": "choice",
                    "choices": [{"when": {"path": "state.x", "op": "like", "value": 1}, "next": "$end"}],
                }
            ),
            "steps[0].choices[0].when.op",
        ),
        (
            _doc(
                {
                    "name": "c",
                    "type": "choice",
                    "choices": [{"when": {"path": "x", "op": "eq", "value": 1}, "next": "$end"}],
                }
            ),
            "steps[0].choices[0].when.path",
        ),
        (
            _doc(
                {
                    "name": "c",
                    "type": "choice",
                    "choices": [{"when": {"path": "state.x", "op": "eq", "value": 1}, "next": "zz"}],
                }
            ),
            "steps[0].choices[0].next",
        ),
        (
            _doc(
                {
                    "name": "c",
                    "type": "choice",
                    "choices": [{"when": {"path": "state.x", "op": "eq", "value": 1}}],
                }
            ),
            "steps[0].choices[0].next",
        ),
        (
            _doc(
                {
                    "name": "c",
                    "type": "choice",
                    "choices": [{"when": {"path": "state.x", "op": "eq", "value": 1}, "next": "$end"}],
                    "default": "zz",
                }
            ),
            "steps[0].default",
        ),
        ({"name": "wf", "steps": {"a": T}}, "steps"),
        ({"name": "wf", "steps": ["a"]}, "steps[0]"),
    ],
)
def test_invalid_definitions_name_the_path(doc: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_definition(doc)
    assert info.value.field == field, info.value


def test_sentinels_are_valid_targets() -> None:
    for target in ("$end", "$fail", "$stuck"):
        parse_definition(_doc({**T, "next": target, "onFailure": target}))
