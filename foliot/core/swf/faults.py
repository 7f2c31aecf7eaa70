"""Errors as values: a transition the machine refuses returns a `Fault`, never raises.

`code` is the AWS error code (`UnknownResourceFault`, `TypeDeprecatedFault`,
`DefaultUndefinedFault`, `ValidationException`, ...) and `message` the text AWS would send; the
protocol edge raises its exception of the same name, which sends `code` as `__type` so botocore
raises its matching exception class. The machine never raises for a message it cannot apply.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class Fault:
    code: str
    message: str


def validation(message: str) -> Fault:
    return Fault("ValidationException", message)


def unknown(message: str) -> Fault:
    return Fault("UnknownResourceFault", message)
