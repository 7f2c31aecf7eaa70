"""Request validation against the SWF service model (pure).

The model is `shapes.json`, generated from botocore's `swf/2012-01-25/service-2.json` by
`tools/gen_swf_shapes.py` and committed, so the engine needs no botocore at run time. `validate`
checks a decoded body against an action's input shape: required members, JSON types, string
and list lengths, number ranges (`maximumPageSize` ≤ 1000), enums, and members the model does
not know. A member of the wrong JSON type (a string where the model has a number, an object
where it has a string, a body that is not an object) means the body does not deserialize into
the shape: `SerializationException`, naming the first one, as AWS answers. Every other problem
is reported the way AWS words it, naming the member's path (`taskList.name`,
`tags.3.member.key`), in one `ValidationException`.

The model has no patterns for SWF names; the rules AWS documents for them (no `:`, `/`, `|`,
control characters, surrounding whitespace, not the literal `arn`) are in `check_name`.
"""

from __future__ import annotations

import json
import math
import re
from functools import cache
from importlib import resources
from typing import Any

from .errors import SerializationException, UnknownOperationException, ValidationException

MAX_REPORTED = 10  # problems listed in one message (AWS lists them all; a cap keeps it short)
_FORBIDDEN_IN_NAMES = re.compile(r"[:/|\u0000-\u001f\u007f-\u009f]")


@cache
def model() -> dict[str, Any]:
    text = (resources.files("foliot.core.swf") / "shapes.json").read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def actions() -> list[str]:
    """The 39 action names of the service model."""
    return sorted(model()["operations"])


def input_shape(action: str) -> str:
    try:
        shape: str = model()["operations"][action]["input"]
    except KeyError:
        raise UnknownOperationException(f"Unknown operation: {action!r}") from None
    return shape


def _show(value: Any) -> str:
    if value is None:
        return "null"
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value
    return text if len(text) <= 64 else text[:61] + "..."


class _Checker:
    def __init__(self) -> None:
        self.problems: list[str] = []
        self.wrong_types: list[str] = []  # members of the wrong JSON type: not even readable

    def fail(self, value: Any, path: str, constraint: str) -> None:
        self.problems.append(f"Value '{_show(value)}' at '{path}' failed to satisfy constraint: {constraint}")

    def wrong_type(self, value: Any, path: str, expected: str) -> None:
        self.wrong_types.append(
            f"Cannot deserialize value '{_show(value)}' at '{path}': "
            f"expected {expected}, got {_json_type(value)}"
        )

    def check(self, shape_name: str, value: Any, path: str) -> None:
        shape = model()["shapes"][shape_name]
        kind = shape["type"]
        if kind == "structure":
            self._structure(shape, value, path)
        elif kind == "list":
            self._list(shape, value, path)
        elif kind == "string":
            self._string(shape, value, path)
        elif kind in ("integer", "long"):
            self._integer(shape, value, path)
        elif kind == "boolean":
            if not isinstance(value, bool):
                self.wrong_type(value, path, "a boolean")
        elif kind == "timestamp":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                self.wrong_type(value, path, "a timestamp (a number of epoch seconds)")
            elif not math.isfinite(value):
                self.fail(value, path, "Member must be a timestamp in epoch seconds")
        else:  # a shape kind SWF does not use: refuse rather than let it through unchecked
            self.fail(value, path, f"Member has an unsupported shape type {kind!r}")

    def _structure(self, shape: dict[str, Any], value: Any, path: str) -> None:
        if not isinstance(value, dict):
            self.wrong_type(value, path or "body", "a structure (a JSON object)")
            return
        members: dict[str, str] = shape.get("members", {})
        prefix = f"{path}." if path else ""
        for name in shape.get("required", []):
            if value.get(name) is None:
                self.problems.append(
                    f"Value null at '{prefix}{name}' failed to satisfy constraint: Member must not be null"
                )
        for name, item in value.items():
            if name not in members:
                self.fail(item, f"{prefix}{name}", "Member is not defined for this action (unknown member)")
            elif item is not None:
                self.check(members[name], item, f"{prefix}{name}")

    def _list(self, shape: dict[str, Any], value: Any, path: str) -> None:
        if not isinstance(value, list):
            self.wrong_type(value, path, "a list (a JSON array)")
            return
        self._length(shape, len(value), value, path, "length")
        for i, item in enumerate(value, start=1):
            self.check(shape["member"], item, f"{path}.{i}.member")

    def _string(self, shape: dict[str, Any], value: Any, path: str) -> None:
        if not isinstance(value, str):
            self.wrong_type(value, path, "a string")
            return
        enum = shape.get("enum")
        if enum is not None and value not in enum:
            self.fail(value, path, f"Member must satisfy enum value set: [{', '.join(enum)}]")
            return
        self._length(shape, len(value), value, path, "length")

    def _integer(self, shape: dict[str, Any], value: Any, path: str) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.wrong_type(value, path, "an integer (a JSON number)")
            return
        if not isinstance(value, int):  # a number, not a whole one
            self.fail(value, path, "Member must be an integer")
            return
        self._length(shape, value, value, path, "value")

    def _length(self, shape: dict[str, Any], size: int, value: Any, path: str, what: str) -> None:
        low, high = shape.get("min"), shape.get("max")
        if what == "length":
            if low is not None and size < low:
                self.fail(value, path, f"Member must have length greater than or equal to {low}")
            if high is not None and size > high:
                self.fail(value, path, f"Member must have length less than or equal to {high}")
        else:
            if low is not None and size < low:
                self.fail(value, path, f"Member must have value greater than or equal to {low}")
            if high is not None and size > high:
                self.fail(value, path, f"Member must have value less than or equal to {high}")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _checked(action: str, body: Any) -> _Checker:
    checker = _Checker()
    checker.check(input_shape(action), body, "")
    return checker


def problems(action: str, body: Any) -> list[str]:
    """Every way `body` breaks `action`'s input shape (empty when it is valid): members of the
    wrong JSON type first, then broken constraints."""
    checker = _checked(action, body)
    return checker.wrong_types + checker.problems


def refuse(found: list[str]) -> None:
    """Raise one `ValidationException` listing `found` (nothing when it is empty)."""
    if not found:
        return
    shown = found[:MAX_REPORTED]
    noun = "error" if len(found) == 1 else "errors"
    more = f" (and {len(found) - len(shown)} more)" if len(found) > len(shown) else ""
    raise ValidationException(f"{len(found)} validation {noun} detected: " + "; ".join(shown) + more)


def validate(action: str, body: Any) -> None:
    """Raise `SerializationException` for the first member of the wrong JSON type (the body
    does not deserialize into the input shape, as AWS answers it), else `ValidationException`
    naming every offending member of `body`, else return."""
    checker = _checked(action, body)
    if checker.wrong_types:
        raise SerializationException(checker.wrong_types[0])
    refuse(checker.problems)


def name_problem(value: str, path: str) -> str | None:
    """AWS's rules for domain, type, version and task-list names, as a problem text or None."""
    if value != value.strip():
        return (
            f"Value '{_show(value)}' at '{path}' failed to satisfy constraint: "
            "Member must not start or end with whitespace"
        )
    if _FORBIDDEN_IN_NAMES.search(value):
        return (
            f"Value '{_show(value)}' at '{path}' failed to satisfy constraint: Member must not contain "
            "':', '/', '|' or control characters"
        )
    if value == "arn":
        return (
            f"Value 'arn' at '{path}' failed to satisfy constraint: "
            "Member must not be the literal string 'arn'"
        )
    return None


def check_name(value: str, path: str) -> None:
    found = name_problem(value, path)
    refuse([found] if found else [])
