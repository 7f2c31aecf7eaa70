"""Errors as values: a transition the machine refuses returns a `Fault`, never raises.

`code` is the AWS error code the edge sends as `__type`, so botocore raises its matching
exception class; `message` is the text AWS would send.
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
