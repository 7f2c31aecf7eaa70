"""Choice predicates: data, never code. `{path, op, value}`, `{all}`, `{any}`, `{not}`."""

from __future__ import annotations

import re
from typing import Any, Final

import attrs

OPS: Final = frozenset({"eq", "ne", "lt", "lte", "gt", "gte", "in", "contains", "exists"})
_SEGMENT = re.compile(r"^[^.\s]+$")
_MISSING: Final = object()


class PredicateError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@attrs.frozen
class Compare:
    path: tuple[str, ...]
    op: str
    value: Any


@attrs.frozen
class All:
    items: tuple[Predicate, ...]


@attrs.frozen
class AnyOf:
    items: tuple[Predicate, ...]


@attrs.frozen
class Not:
    item: Predicate


Predicate = Compare | All | AnyOf | Not


def parse_path(text: Any, field: str) -> tuple[str, ...]:
    """A dotted path rooted at `input` or `state`; numeric segments index arrays."""
    if not isinstance(text, str) or not text:
        raise PredicateError(field, "expected a dotted path such as 'state.reserve.express'")
    parts = tuple(text.split("."))
    if parts[0] not in ("input", "state"):
        raise PredicateError(field, f"path {text!r} must start with 'input' or 'state'")
    if any(not _SEGMENT.match(p) for p in parts):
        raise PredicateError(field, f"path {text!r} has an empty segment")
    return parts


def parse_predicate(raw: Any, field: str) -> Predicate:
    """Validate and build a predicate; errors name the JSON path of the problem."""
    if not isinstance(raw, dict):
        raise PredicateError(field, "expected an object")
    keys = set(raw)
    if keys == {"all"} or keys == {"any"}:
        key = next(iter(keys))
        items = raw[key]
        if not isinstance(items, list) or not items:
            raise PredicateError(f"{field}.{key}", "expected a non-empty list of predicates")
        parsed = tuple(parse_predicate(p, f"{field}.{key}[{i}]") for i, p in enumerate(items))
        return All(parsed) if key == "all" else AnyOf(parsed)
    if keys == {"not"}:
        return Not(parse_predicate(raw["not"], f"{field}.not"))
    if "path" in keys or "op" in keys:
        extra = keys - {"path", "op", "value"}
        if extra:
            raise PredicateError(f"{field}.{sorted(extra)[0]}", "unknown field")
        if "op" not in raw:
            raise PredicateError(f"{field}.op", "required field missing")
        path = parse_path(raw.get("path"), f"{field}.path")
        op = raw["op"]
        if op not in OPS:
            raise PredicateError(f"{field}.op", f"unknown op {op!r}; expected one of {sorted(OPS)}")
        if "value" not in raw:
            raise PredicateError(f"{field}.value", "required field missing")
        value = raw["value"]
        if op == "exists" and not isinstance(value, bool):
            raise PredicateError(f"{field}.value", "'exists' takes true or false")
        if op == "in" and not isinstance(value, list):
            raise PredicateError(f"{field}.value", "'in' takes a list")
        return Compare(path, op, value)
    raise PredicateError(field, "expected {path, op, value}, {all: [...]}, {any: [...]} or {not: ...}")


def resolve(path: tuple[str, ...], scope: dict[str, Any]) -> Any:
    """Follow a path through `{input, state}`; `_MISSING` when any segment is absent."""
    node: Any = scope
    for segment in path:
        if isinstance(node, dict):
            if segment not in node:
                return _MISSING
            node = node[segment]
        elif isinstance(node, list) and segment.isdigit():
            index = int(segment)
            if index >= len(node):
                return _MISSING
            node = node[index]
        else:
            return _MISSING
    return node


def lookup(path: tuple[str, ...], scope: dict[str, Any]) -> tuple[bool, Any]:
    """(found, value) for a path."""
    value = resolve(path, scope)
    return (value is not _MISSING, None if value is _MISSING else value)


def json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON sees it: `true` is not `1`, `1` equals `1.0`."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return bool(a.keys() == b.keys()) and all(json_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _ordered(actual: Any, value: Any) -> bool:
    return (_is_number(actual) and _is_number(value)) or (isinstance(actual, str) and isinstance(value, str))


def evaluate(predicate: Predicate, scope: dict[str, Any]) -> bool:
    """Evaluate over `{"input": ..., "state": ...}`. A missing path is false except `exists: false`."""
    if isinstance(predicate, All):
        return all(evaluate(p, scope) for p in predicate.items)
    if isinstance(predicate, AnyOf):
        return any(evaluate(p, scope) for p in predicate.items)
    if isinstance(predicate, Not):
        return not evaluate(predicate.item, scope)
    actual = resolve(predicate.path, scope)
    op, value = predicate.op, predicate.value
    if op == "exists":
        return bool((actual is not _MISSING) == value)
    if actual is _MISSING:
        return False
    if op == "eq":
        return json_equal(actual, value)
    if op == "ne":
        return not json_equal(actual, value)
    if op == "in":
        return any(json_equal(actual, v) for v in value)
    if op == "contains":
        if isinstance(actual, list):
            return any(json_equal(item, value) for item in actual)
        if isinstance(actual, str) and isinstance(value, str):
            return value in actual
        return False
    if not _ordered(actual, value):
        return False
    if op == "lt":
        return bool(actual < value)
    if op == "lte":
        return bool(actual <= value)
    if op == "gt":
        return bool(actual > value)
    return bool(actual >= value)  # gte
