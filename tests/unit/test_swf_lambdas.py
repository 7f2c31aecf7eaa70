"""A Lambda function's HTTP answer as SWF's outcome (pure), and the names a decision may use."""

from __future__ import annotations

import pytest

from foliot.core.swf import lambdas
from foliot.core.swf import messages as m


@pytest.mark.parametrize(
    ("status", "body", "function_error", "expected"),
    [
        (200, b'{"ok": 1}', None, m.LambdaCompleted(7, '{"ok": 1}')),
        (204, b"", None, m.LambdaCompleted(7, "")),
        (200, b"err", "Handled", m.LambdaFailed(7, "Handled", "err")),
        (200, b"err", "Unhandled", m.LambdaFailed(7, "Unhandled", "err")),
        (200, b"err", "Weird", m.LambdaFailed(7, "Unhandled", "err")),
        (400, b"bad", None, m.LambdaFailed(7, "Handled", "bad")),
        (404, b"", None, m.LambdaFailed(7, "Handled", "")),
        (302, b"", None, m.LambdaFailed(7, "Unhandled", "HTTP 302: ")),
        (503, b"down", None, m.LambdaFailed(7, "Unhandled", "HTTP 503: down")),
        (200, None, None, m.LambdaFailed(7, "Unhandled", "the function's response is too large")),
        (200, b"\xff", None, m.LambdaCompleted(7, "\ufffd")),
    ],
)
def test_an_answer_becomes_an_outcome(
    status: int, body: bytes | None, function_error: str | None, expected: object
) -> None:
    assert lambdas.outcome(7, status, body, function_error) == expected


def test_results_and_details_respect_swfs_limit() -> None:
    big = b"x" * (lambdas.MAX_RESULT + 1)
    failed = lambdas.outcome(1, 200, big, None)
    assert isinstance(failed, m.LambdaFailed) and failed.reason == "Unhandled"
    assert lambdas.outcome(1, 200, b"x" * lambdas.MAX_RESULT, None) == m.LambdaCompleted(
        1, "x" * lambdas.MAX_RESULT
    )
    cut = lambdas.outcome(1, 500, big, None)
    assert isinstance(cut, m.LambdaFailed) and len(cut.details or "") == lambdas.MAX_RESULT
    assert len(lambdas.unreachable(1, "e" * 40_000).details or "") == lambdas.MAX_RESULT


def test_a_function_is_named_by_name_or_arn() -> None:
    assert lambdas.function_name("charge") == "charge"
    assert lambdas.function_name("arn:aws:lambda:us-east-1:123456789012:function:charge") == "charge"
    assert lambdas.function_name("arn:aws:lambda:us-east-1:123456789012:function:charge:prod") == "charge"
    assert lambdas.function_name("arn:nonsense") == "arn:nonsense"
    failed = lambdas.not_found(3, "eu-west-1", "charge")
    assert failed.reason == "ResourceNotFoundException"
    assert failed.details == "Function not found: arn:aws:lambda:eu-west-1:000000000000:function:charge"
