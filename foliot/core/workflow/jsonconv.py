"""A strict cattrs converter for camelCase JSON documents.

Strict means: no coercion (`"3"` is not an int, `1` is not a bool, a string is not a list),
integers fit in 64 bits (storage cannot bind more), unknown keys are refused, and every error
names the camelCase path of the offending field.
"""

from __future__ import annotations

import contextlib
import re
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.errors import IterableValidationError, IterableValidationNote
from cattrs.gen import make_dict_structure_fn, override

T = TypeVar("T")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_INT64 = 2**63


class ValidationError(ValueError):
    """A document failed validation at `field` (a path such as `steps[0].retry.maxAttempts`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def is_name(value: Any) -> bool:
    """Names of apps, workflows, steps, signals and queues; `$`-names are reserved."""
    return isinstance(value, str) and _NAME.fullmatch(value) is not None  # `$` would take "a\n"


def _strict(kind: type, label: str) -> Callable[[Any, Any], Any]:
    def hook(value: Any, _: Any) -> Any:
        if kind is float:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"expected {label}")
            return float(value)
        if isinstance(value, bool) and kind is not bool:
            raise TypeError(f"expected {label}")
        if not isinstance(value, kind):
            raise TypeError(f"expected {label}")
        if isinstance(value, int) and not -_INT64 <= value < _INT64:
            raise TypeError("expected a 64-bit integer")
        if isinstance(value, str) and "\x00" in value:
            # Named fields land in their own columns, and PostgreSQL text cannot hold NUL.
            raise TypeError("must not contain NUL (U+0000)")
        return value

    return hook


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook(str, _strict(str, "a string"))
    conv.register_structure_hook(int, _strict(int, "an integer"))
    conv.register_structure_hook(bool, _strict(bool, "true or false"))
    conv.register_structure_hook(float, _strict(float, "a number"))
    conv.register_structure_hook(Any, lambda v, _: v)

    def is_seq(t: Any) -> bool:
        origin = getattr(t, "__origin__", None)
        return origin in (list, tuple)

    def seq_factory(t: Any) -> Callable[[Any, Any], Any]:
        args = getattr(t, "__args__", (Any,))
        item_type = args[0]

        def hook(value: Any, _: Any) -> Any:
            if not isinstance(value, list):
                raise TypeError("expected a list")
            items, errors = [], []
            for index, item in enumerate(value):
                try:
                    items.append(conv.structure(item, item_type))
                except Exception as exc:
                    exc.__notes__ = [
                        *getattr(exc, "__notes__", []),
                        IterableValidationNote(f"index {index}", index, item_type),
                    ]
                    errors.append(exc)
            if errors:
                raise IterableValidationError("invalid list", errors, t)
            return tuple(items)

        return hook

    conv.register_structure_hook_factory(is_seq, seq_factory)

    def is_dict(t: Any) -> bool:
        return t is dict or getattr(t, "__origin__", None) is dict

    def dict_hook(value: Any, _: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError("expected an object")
        return value

    conv.register_structure_hook_func(is_dict, dict_hook)

    def attrs_factory(cls: Any) -> Any:
        overrides = {a.name: override(rename=camel(a.name)) for a in attrs.fields(cls)}
        inner = make_dict_structure_fn(
            cls,
            conv,
            _cattrs_forbid_extra_keys=True,
            **overrides,  # type: ignore[arg-type]
        )
        # Members with a default that do not take null themselves: null means "the default",
        # as leaving the member out does (clients that serialise unset members as null).
        with contextlib.suppress(NameError):  # unresolvable annotations: those members left alone
            attrs.resolve_types(cls)
        defaulted = frozenset(
            camel(a.name)
            for a in attrs.fields(cls)
            if a.default is not attrs.NOTHING and not isinstance(a.type, str) and not _admits_none(a.type)
        )

        def hook(value: Any, t: Any) -> Any:
            if not isinstance(value, dict):
                raise TypeError("expected an object")
            if defaulted and any(value.get(k, 0) is None for k in defaulted):
                value = {k: v for k, v in value.items() if v is not None or k not in defaulted}
            return inner(value, t)

        return hook

    conv.register_structure_hook_factory(attrs.has, attrs_factory)
    return conv


def _admits_none(kind: Any) -> bool:
    return kind is Any or kind is None or type(None) in typing.get_args(kind)


converter = _make_converter()
_PATH_SEGMENT = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)")


def _first_error(exc: Exception) -> ValidationError:
    messages = cattrs.transform_error(exc, path="$")
    text = messages[0] if messages else str(exc)
    message, _, path = text.rpartition(" @ ")
    if not message:
        message, path = text, "$"
    path = _PATH_SEGMENT.sub(lambda m: "." + camel(m.group(1)), path)
    path = path.removeprefix("$").removeprefix(".")
    # cattrs says "invalid value for type, expected int | None"; keep our own hook's words.
    cause = _leaf_cause(exc)
    if cause is not None and str(cause).startswith(("expected", "must not contain")):  # our hooks
        message = str(cause)
    elif message.startswith("extra fields found"):
        extra = message[message.find("(") + 1 : message.rfind(")")]
        first = extra.split(",")[0].strip()
        path = f"{path}.{first}" if path else first
        message = "unknown field"
    return ValidationError(path, message)


def _leaf_cause(exc: BaseException) -> BaseException | None:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, TypeError | ValueError) else None


def structure(raw: Any, cls: type[T]) -> T:
    """Structure a parsed JSON document into `cls`, or raise `ValidationError` with a path."""
    try:
        return converter.structure(raw, cls)
    except ValidationError:
        raise
    except (cattrs.BaseValidationError, TypeError, ValueError, KeyError) as exc:
        raise _first_error(exc) from None
