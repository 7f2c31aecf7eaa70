"""What a task handler gives back, for pull workers and push handlers alike.

- any JSON value: the step's output (`state[step]`);
- `Next(step, output)`: the output, and the step to go to next (`foliot-next`);
- raise `TaskFailure(error_class, message, retryable=...)`: the error `retryOn` matches;
- any other exception: class = the exception's type name, retryable (Temporal's default);
- `ACCEPTED` (push handlers only): answer 202 and finish later with `complete_task`.

`answer_of` / `failure_of` turn these into the body of `complete`: pure, tested without I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_MESSAGE = 2048


@dataclass(frozen=True)
class Next:
    """Succeed with `output` and continue at `step` (a step name or `$end`/`$fail`/`$stuck`)."""

    step: str
    output: Any = None


@dataclass(frozen=True)
class Accepted:
    """A push handler's "202 Accepted": the task stays open until its deadline; complete it
    out of band with `client.complete_task(task.task_token, ...)`."""


ACCEPTED = Accepted()


class TaskFailure(Exception):
    """Fail the attempt with an error class of your choosing; `retryable=False` stops retries."""

    def __init__(self, error_class: str, message: str = "", *, retryable: bool = True) -> None:
        super().__init__(message or error_class)
        self.error_class = error_class
        self.message = message
        self.retryable = retryable


def answer_of(value: Any) -> dict[str, Any]:
    """The `complete` body for a handler's return value."""
    if isinstance(value, Accepted):
        raise TypeError("ACCEPTED is an answer for push handlers; a pull worker completes the task itself")
    if isinstance(value, Next):
        return {"output": value.output, "next": value.step}
    return {"output": value}


def failure_of(exc: BaseException) -> dict[str, Any]:
    """The `complete` body (`{error: {class, message, retryable}}`) for a handler's exception."""
    if isinstance(exc, TaskFailure):
        cls, message, retryable = exc.error_class, exc.message, exc.retryable
    else:
        cls, message, retryable = type(exc).__name__, str(exc), True
    return {
        "error": {"class": cls[:128] or "error", "message": message[:MAX_MESSAGE], "retryable": retryable}
    }
