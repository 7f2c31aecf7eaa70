"""JSON Schema (2020-12, as OpenAPI 3.1 takes it) made from the types the server itself uses.

`schema_of(tp)` reads the annotations of the models requests are structured into (attrs
classes, through `jsonconv`'s strict converter) and of the views responses are built from
(TypedDicts, `core/views.py`): a field added to a model is in the published schema without
anyone writing it twice. The converter's rules are followed: members are camelCase, an
attrs member with a default may be left out or sent as null (`jsonconv`: null means the
default), unknown members are refused (`additionalProperties: false`), lists are JSON arrays.

What a type cannot say (a name's pattern, a range, an enum checked by code) comes from
`refine`: a map of the model's class and its member to the schema merged into that member's.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Any, Final

import attrs

from .workflow.jsonconv import camel


@attrs.frozen
class Shape:
    """Schema keywords for `Annotated[T, Shape.of(format="date-time")]` (hashable, as an
    annotation inside a union must be)."""

    keywords: tuple[tuple[str, Any], ...]

    @classmethod
    def of(cls, **keywords: Any) -> Shape:
        return cls(tuple(sorted(keywords.items())))


# A class and one of its members (python name) -> schema keywords merged into its schema.
Refinements = Mapping[tuple[type, str], Mapping[str, Any]]

NULL: Final = {"type": "null"}
_PRIMITIVES: Final = {str: "string", int: "integer", bool: "boolean", float: "number"}


def schema_of(
    tp: Any,
    refine: Refinements | None = None,
    defs: dict[str, Any] | None = None,
    ref_prefix: str = "#/components/schemas/",
) -> dict[str, Any]:
    """The JSON Schema of `tp`. With `defs`, each attrs class or TypedDict met is put there
    under its class name and referenced as `ref_prefix + name` (an OpenAPI document's
    components by default; `#/$defs/` for a standalone schema); without, written inline."""
    return _Maker(refine or {}, defs, ref_prefix).schema(tp)


def nullable(schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema`, or null (string keywords such as `pattern` apply to strings only)."""
    out = dict(schema)
    kind = out.get("type")
    if not out or kind == "null" or NULL in out.get("anyOf", ()):
        return out
    if "enum" in out and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]
    if isinstance(kind, str):
        out["type"] = [kind, "null"]
    elif isinstance(kind, list):
        if "null" not in kind:
            out["type"] = [*kind, "null"]
    elif "enum" not in out:
        return {"anyOf": [out, dict(NULL)]}
    return out


class _Maker:
    def __init__(self, refine: Refinements, defs: dict[str, Any] | None, ref_prefix: str) -> None:
        self.refine = refine
        self.defs = defs
        self.ref_prefix = ref_prefix

    def schema(self, tp: Any) -> dict[str, Any]:
        if tp is Any or tp is object:
            return {}
        if typing.get_origin(tp) is typing.Annotated:
            base, *extras = typing.get_args(tp)
            out = self.schema(base)
            for extra in extras:
                if isinstance(extra, Shape):
                    out.update(dict(extra.keywords))
            return out
        if typing.get_origin(tp) in (typing.NotRequired, typing.Required):  # a TypedDict's key
            return self.schema(typing.get_args(tp)[0])
        if tp is None or tp is type(None):
            return dict(NULL)
        if tp in _PRIMITIVES:
            return {"type": _PRIMITIVES[tp]}
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin is typing.Union or origin is types.UnionType:
            members = [a for a in args if a is not type(None)]
            inner = (
                self.schema(members[0]) if len(members) == 1 else {"anyOf": [self.schema(a) for a in members]}
            )
            return nullable(inner) if len(members) < len(args) else inner
        if origin is typing.Literal:
            return {"enum": list(args)}
        if origin in (list, tuple) or tp in (list, tuple):
            if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
                return {"type": "array", "items": self.schema(args[0])}
            if origin is tuple and args:
                return {
                    "type": "array",
                    "prefixItems": [self.schema(a) for a in args],
                    "minItems": len(args),
                    "maxItems": len(args),
                }
            return {"type": "array", "items": self.schema(args[0]) if args else {}}
        if origin is dict or tp is dict:
            value = args[1] if len(args) == 2 else Any
            mapping: dict[str, Any] = {"type": "object"}
            if value is not Any:
                mapping["additionalProperties"] = self.schema(value)
            return mapping
        if attrs.has(tp):
            return self._named(tp, self._attrs)
        if typing.is_typeddict(tp):
            return self._named(tp, self._typeddict)
        raise TypeError(f"no JSON Schema for {tp!r}")

    def _named(self, cls: type, make: Any) -> dict[str, Any]:
        if self.defs is None:
            made: dict[str, Any] = make(cls)
            return made
        name = cls.__name__
        if name not in self.defs:
            self.defs[name] = {}  # placed first: a recursive model refers to itself
            self.defs[name] = make(cls)
        return {"$ref": self.ref_prefix + name}

    def _attrs(self, cls: type) -> dict[str, Any]:
        hints = typing.get_type_hints(cls)
        props: dict[str, Any] = {}
        required: list[str] = []
        for field in attrs.fields(cls):
            member = self.schema(hints[field.name])
            member.update(self.refine.get((cls, field.name), {}))
            if field.default is attrs.NOTHING:
                required.append(camel(field.name))
            else:
                member = nullable(member)  # null means the default (jsonconv)
            props[camel(field.name)] = member
        return _object(cls, props, required)

    def _typeddict(self, cls: type) -> dict[str, Any]:
        hints = typing.get_type_hints(cls, include_extras=True)
        required_keys: frozenset[str] = getattr(cls, "__required_keys__", frozenset(hints))
        props = {}
        for key, kind in hints.items():
            member = self.schema(kind)
            member.update(self.refine.get((cls, key), {}))
            props[key] = member
        return _object(cls, props, [k for k in hints if k in required_keys])


def _object(cls: type, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        out["required"] = required
    doc = (cls.__doc__ or "").strip()
    if doc and not doc.startswith(cls.__name__ + "("):  # attrs' generated doc is no description
        out["description"] = " ".join(doc.split())
    return out
