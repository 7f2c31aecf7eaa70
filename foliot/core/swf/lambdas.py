"""How a Lambda function's HTTP answer becomes an SWF outcome (pure).

Foliot invokes a `ScheduleLambdaFunction` by POSTing the input to the URL the admin registered
for the function's name in the execution's region (`PUT /admin/lambda/{region}/{name}`). The
answer is read as AWS Lambda's `Invoke` reports a function's result:

- 2xx with `X-Amz-Function-Error: Handled` or `Unhandled`: `LambdaFunctionFailed`, that
  `reason`, the body as `details`;
- any other 2xx: `LambdaFunctionCompleted`, the body as `result`;
- 4xx: `LambdaFunctionFailed` `Handled` (the function refused the input), the body as `details`;
- 3xx, 5xx: `LambdaFunctionFailed` `Unhandled`, `HTTP <status>: <body>` as `details`;
- no function of that name registered in the region: `LambdaFunctionFailed`
  `ResourceNotFoundException`;
- connection refused or reset, a malformed answer: `LambdaFunctionFailed` `Unhandled` (the error);
- no answer within `startToCloseTimeout`: nothing here; the deadline records
  `LambdaFunctionTimedOut`.

A result longer than SWF's 32,768 characters fails the call (`Unhandled`); details are cut to
that length.
"""

from __future__ import annotations

from typing import Final

from . import messages as m

MAX_RESULT: Final = 32_768  # SWF's limit on `result` and `details`
_REASONS: Final = ("Handled", "Unhandled")


def function_name(name: str) -> str:
    """The function a decision names: its name, or the name inside a function ARN
    (`arn:aws:lambda:<region>:<account>:function:<name>[:<qualifier>]`), as Lambda accepts both."""
    if name.startswith("arn:"):
        _, marker, rest = name.partition(":function:")
        if marker:
            return rest.split(":", 1)[0]
    return name


def not_found(scheduled_event_id: int, region: str, name: str) -> m.LambdaFailed:
    arn = f"arn:aws:lambda:{region}:000000000000:function:{name}"
    return m.LambdaFailed(scheduled_event_id, "ResourceNotFoundException", f"Function not found: {arn}")


def unreachable(scheduled_event_id: int, error: str) -> m.LambdaFailed:
    return m.LambdaFailed(scheduled_event_id, "Unhandled", error[:MAX_RESULT])


def outcome(
    scheduled_event_id: int, status: int, body: bytes | None, function_error: str | None
) -> m.LambdaCompleted | m.LambdaFailed:
    """The message an HTTP answer sends the execution (see the table above); `body` None means
    it was over the size limit Foliot reads."""
    if body is None:
        return m.LambdaFailed(scheduled_event_id, "Unhandled", "the function's response is too large")
    text = body.decode("utf-8", errors="replace")
    if 200 <= status < 300 and function_error is None:
        if len(text) > MAX_RESULT:
            return m.LambdaFailed(
                scheduled_event_id, "Unhandled", f"the function's response is over {MAX_RESULT} characters"
            )
        return m.LambdaCompleted(scheduled_event_id, text)
    if 200 <= status < 300:
        reason = function_error if function_error in _REASONS else "Unhandled"
        return m.LambdaFailed(scheduled_event_id, reason, text[:MAX_RESULT])
    if 400 <= status < 500:
        return m.LambdaFailed(scheduled_event_id, "Handled", text[:MAX_RESULT])
    return m.LambdaFailed(scheduled_event_id, "Unhandled", f"HTTP {status}: {text}"[:MAX_RESULT])
