"""Validation against the service model, and the registry's own rules: pure, no I/O."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from foliot.core.swf import shapes
from foliot.core.swf.errors import SerializationException, UnknownOperationException, ValidationException
from foliot.kinds.swf import registry

ROOT = Path(__file__).resolve().parents[2]


def test_committed_table_is_what_the_generator_makes_from_botocore() -> None:
    spec = importlib.util.spec_from_file_location("gen", ROOT / "tools" / "gen_swf_shapes.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    fresh = json.loads(json.dumps(gen.table()))
    committed = json.loads((ROOT / "foliot" / "core" / "swf" / "shapes.json").read_text())
    assert fresh["operations"] == committed["operations"]
    assert fresh["shapes"] == committed["shapes"]


def test_the_model_has_the_39_actions() -> None:
    assert len(shapes.actions()) == 39
    assert {"RegisterDomain", "PollForDecisionTask", "UntagResource"} <= set(shapes.actions())
    with pytest.raises(UnknownOperationException):
        shapes.input_shape("LaunchRocket")


def problems(action: str, body: Any) -> list[str]:
    return shapes.problems(action, body)


def test_a_valid_body_has_no_problems() -> None:
    body = {
        "name": "d",
        "workflowExecutionRetentionPeriodInDays": "1",
        "tags": [{"key": "k", "value": "v"}, {"key": "k2"}],
    }
    assert problems("RegisterDomain", body) == []
    assert problems("ListDomains", {"registrationStatus": "REGISTERED", "maximumPageSize": 1000}) == []


@pytest.mark.parametrize(
    ("action", "body", "path", "constraint"),
    [
        ("RegisterDomain", {"workflowExecutionRetentionPeriodInDays": "1"}, "name", "must not be null"),
        ("RegisterDomain", {"name": None, "workflowExecutionRetentionPeriodInDays": "1"}, "name", "null"),
        (
            "RegisterDomain",
            {"name": "", "workflowExecutionRetentionPeriodInDays": "1"},
            "name",
            "length greater",
        ),
        (
            "RegisterDomain",
            {"name": "x" * 257, "workflowExecutionRetentionPeriodInDays": "1"},
            "name",
            "less than",
        ),
        (
            "RegisterDomain",
            {"name": "d", "workflowExecutionRetentionPeriodInDays": "123456789"},
            "Days",
            "length",
        ),
        (
            "RegisterDomain",
            {"name": "d", "workflowExecutionRetentionPeriodInDays": "1", "x": 1},
            "x",
            "unknown",
        ),
        (
            "RegisterDomain",
            {"name": "d", "workflowExecutionRetentionPeriodInDays": "1", "tags": [{"key": ""}]},
            "tags.1.member.key",
            "length",
        ),
        ("ListDomains", {"registrationStatus": "GONE"}, "registrationStatus", "enum value set"),
        (
            "ListDomains",
            {"registrationStatus": "REGISTERED", "maximumPageSize": 1001},
            "maximumPageSize",
            "1000",
        ),
        ("ListDomains", {"registrationStatus": "REGISTERED", "maximumPageSize": -1}, "maximumPageSize", "0"),
        (
            "ListDomains",
            {"registrationStatus": "REGISTERED", "maximumPageSize": 1.5},
            "maximumPageSize",
            "integer",
        ),
        (
            "ListDomains",
            {"registrationStatus": "REGISTERED", "nextPageToken": "x" * 2049},
            "nextPageToken",
            "2048",
        ),
        (
            "RespondDecisionTaskCompleted",
            {"taskToken": "t", "decisions": [{"decisionType": "Explode"}]},
            "decisions.1.member.decisionType",
            "enum",
        ),
        (
            "StartWorkflowExecution",
            {
                "domain": "d",
                "workflowId": "w",
                "workflowType": {"name": "n", "version": "v"},
                "tagList": list("abcdef"),
            },
            "tagList",
            "less than or equal to 5",
        ),
    ],
)
def test_each_problem_names_the_member(action: str, body: Any, path: str, constraint: str) -> None:
    found = problems(action, body)
    assert len(found) == 1, found
    assert f"'{path}" in found[0] or path in found[0]
    assert constraint in found[0]
    with pytest.raises(ValidationException, match="1 validation error detected"):
        shapes.validate(action, body)


@pytest.mark.parametrize(
    ("action", "body", "path", "expected"),
    [
        ("RegisterDomain", {"name": 5, "workflowExecutionRetentionPeriodInDays": "1"}, "name", "a string"),
        ("RegisterDomain", {"name": {}, "workflowExecutionRetentionPeriodInDays": "1"}, "name", "a string"),
        (
            "RegisterDomain",
            {"name": "d", "workflowExecutionRetentionPeriodInDays": "1", "tags": {}},
            "tags",
            "a list",
        ),
        (
            "RegisterDomain",
            {"name": "d", "workflowExecutionRetentionPeriodInDays": "1", "tags": ["k"]},
            "tags.1.member",
            "a structure",
        ),
        (
            "ListDomains",
            {"registrationStatus": "REGISTERED", "maximumPageSize": True},
            "maximumPageSize",
            "an integer",
        ),
        (
            "ListDomains",
            {"registrationStatus": "REGISTERED", "maximumPageSize": "10"},
            "maximumPageSize",
            "an integer",
        ),
        ("ListDomains", {"registrationStatus": "REGISTERED", "reverseOrder": 1}, "reverseOrder", "a boolean"),
        (
            "ListDomains",
            {"registrationStatus": "REGISTERED", "reverseOrder": "true"},
            "reverseOrder",
            "a boolean",
        ),
        (
            "CountOpenWorkflowExecutions",
            {"domain": "d", "startTimeFilter": {"oldestDate": "yesterday"}},
            "startTimeFilter.oldestDate",
            "a timestamp",
        ),
        (
            "RespondDecisionTaskCompleted",
            {
                "taskToken": "t",
                "decisions": [{"decisionType": "StartTimer", "startTimerDecisionAttributes": {"timerId": 7}}],
            },
            "decisions.1.member.startTimerDecisionAttributes.timerId",
            "a string",
        ),
        ("ListDomains", [], "body", "a structure"),
    ],
)
def test_a_member_of_the_wrong_json_type_is_a_serialization_exception(
    action: str, body: Any, path: str, expected: str
) -> None:
    """Issue 26, point 16: the body does not deserialize into the shape, as AWS answers it
    (botocore's model gives each member's type), even when other members break constraints."""
    with pytest.raises(SerializationException) as info:
        shapes.validate(action, body)
    assert f"at '{path}'" in info.value.message and f"expected {expected}" in info.value.message
    assert info.value.body()["__type"] == "com.amazon.coral.service#SerializationException"
    if isinstance(body, dict):
        with pytest.raises(SerializationException):
            shapes.validate(action, {**body, "undefinedMember": 1})


def test_a_whole_number_of_the_wrong_kind_is_still_a_validation_error() -> None:
    with pytest.raises(ValidationException, match="Member must be an integer"):
        shapes.validate("ListDomains", {"registrationStatus": "REGISTERED", "maximumPageSize": 1.5})


def test_all_problems_are_reported_together() -> None:
    with pytest.raises(ValidationException) as info:
        shapes.validate("RegisterWorkflowType", {"name": "", "defaultChildPolicy": "NO"})
    message = info.value.message
    assert message.startswith("4 validation errors detected")
    for member in ("'domain'", "'version'", "'name'", "'defaultChildPolicy'"):
        assert member in message
    assert info.value.body()["__type"] == "com.amazon.coral.validate#ValidationException"


def test_the_body_must_be_an_object() -> None:
    assert "structure" in problems("ListDomains", [])[0]
    with pytest.raises(SerializationException):
        shapes.validate("ListDomains", [])


def test_reported_problems_are_capped() -> None:
    body = {"name": "d", "workflowExecutionRetentionPeriodInDays": "1", "tags": [{}] * 30}
    with pytest.raises(ValidationException) as info:
        shapes.validate("RegisterDomain", body)
    assert info.value.message.startswith("30 validation errors") and "(and 20 more)" in info.value.message


@pytest.mark.parametrize("name", ["a:b", "a/b", "a|b", "a\u0007", "a\u0085b", " a", "a\t", "arn"])
def test_swf_name_rules(name: str) -> None:
    assert shapes.name_problem(name, "name") is not None
    with pytest.raises(ValidationException):
        shapes.check_name(name, "name")


@pytest.mark.parametrize("name", ["a", "Order.v2", "arnold", "名前", "a b"])
def test_good_names(name: str) -> None:
    assert shapes.name_problem(name, "name") is None


def test_retention_durations_priorities() -> None:
    assert registry.retention_problem("NONE") is None
    assert registry.retention_problem("0") is None
    assert registry.retention_problem("90") is None
    for bad in ("91", "-1", "1.5", "x", "٣"):
        assert registry.retention_problem(bad) is not None, bad
    assert registry.duration_problem("NONE", "t") is None
    assert registry.duration_problem("0", "t") is None
    assert registry.duration_problem("NONE", "t", none_ok=False) is not None
    assert registry.duration_problem("31536001", "t", cap=registry.MAX_EXECUTION_SECONDS) is not None
    assert registry.duration_problem("1m", "t") is not None
    assert registry.priority_problem("-2147483648", "p") is None
    assert registry.priority_problem("2147483647", "p") is None
    assert registry.priority_problem("2147483648", "p") is not None
    assert registry.priority_problem("high", "p") is not None


def test_tag_characters() -> None:
    good = [{"key": "team name", "value": "a_b.c:d/e=f+g-h@i"}, {"key": "ключ"}]
    assert registry.tag_problems(good) == []
    found = registry.tag_problems([{"key": "ok"}, {"key": "x", "value": "<b>"}])
    assert len(found) == 1 and "'tags.2.member.value'" in found[0]


def test_page_tokens_are_bound_to_their_scope() -> None:
    scope = ["ListDomains", "us-east-1", "REGISTERED", False]
    token = registry.next_token(scope, ["dom-3"])
    assert registry.read_token({"nextPageToken": token}, scope, 1) == ["dom-3"]
    assert registry.read_token({}, scope, 1) is None
    other = ["ListDomains", "eu-west-1", "REGISTERED", False]
    for body, sc in [({"nextPageToken": token}, other), ({"nextPageToken": "bm9wZQ"}, scope)]:
        with pytest.raises(ValidationException, match="nextPageToken"):
            registry.read_token(body, sc, 1)
    with pytest.raises(ValidationException):
        registry.read_token({"nextPageToken": registry.next_token(scope, [7])}, scope, 1)
    assert registry.page_size({}) == 1000
    assert registry.page_size({"maximumPageSize": 0}) == 1000
    assert registry.page_size({"maximumPageSize": 3}) == 3
