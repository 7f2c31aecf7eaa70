"""Messages from one actor to another that lives on another node (several nodes).

An SWF execution's effects message other executions: a signal or cancel request
(SignalExternalWorkflowExecution, RequestCancelExternalWorkflowExecution), a child policy
(terminate or cancel the children), a child's close told to its parent, a child's start told
to its parent. When the addressee lives elsewhere the runtime hands the message to
`RemoteTell`, which sends it to the owner (`POST /internal/tell`, hop-authenticated); the owner
delivers it to the actor's mailbox as if it had been told locally.

The wire form is plain JSON, each message `{"type": <class>, <field>: ...}`, for the message
classes listed in `MESSAGES` only (nothing else is ever decoded). Delivery is retried (the
owner unreachable, or the actor moved meanwhile: the address is looked up again) for about a
minute, longer than a failover takes; past that the message is dropped with a warning, and the
new owner's recovery re-creates what the documents say is owed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ..actors.messages import Envelope
from ..actors.placement import Local, Unowned, Where
from ..core.swf import messages as m
from ..core.swf.model import ExecutionRef
from ..core.workflow import machine
from ..core.workflow.model import ErrorInfo, ParentRef
from ..kinds.swf.actor import _FROM_OTHERS as FROM_OTHERS

if TYPE_CHECKING:
    from ..actors.runtime import Kind

log = logging.getLogger("foliot.cluster.tell")

# What one execution sends another: requests (signal, cancel request, a child policy's
# terminate), and the answers the runtime already treats as coming from other executions;
# a run's cancel (a schedule's cancel_previous of a run another node owns).
MESSAGES: Final[dict[str, type[Any]]] = {
    cls.__name__: cls
    for cls in (
        m.Signal,
        m.RequestCancel,
        m.Terminate,
        *FROM_OTHERS,
        machine.ChildRunClosed,
        machine.Cancel,
        machine.Admit,
    )
}
assert len(MESSAGES) == len(FROM_OTHERS) + 6, "two message classes carried between nodes share a name"
_NESTED: Final[dict[str, type[Any]]] = {
    "ExecutionRef": ExecutionRef,
    "ParentRef": ParentRef,
    "ErrorInfo": ErrorInfo,
}
# Fields that hold any JSON value (a child's output), carried as {"type": "Json", "value": ...}.
_JSON_FIELDS: Final = frozenset({("ChildRunClosed", "output")})
RETRIES_S: Final = (0.1, 0.2, 0.5, 1.0, 2.0, 2.0, 2.0, 5.0, 5.0, 10.0, 10.0, 20.0)


class Undecodable(ValueError):
    """Not a message this codec carries."""


def encode(message: Any) -> dict[str, Any]:
    name = type(message).__name__
    if MESSAGES.get(name) is not type(message):
        raise Undecodable(f"{name} is not carried between nodes")
    out: dict[str, Any] = _encode(message)
    return out


def _encode(value: Any) -> Any:
    if attrs.has(type(value)):
        name = type(value).__name__
        out: dict[str, Any] = {"type": name}
        for field in attrs.fields(type(value)):
            inner = getattr(value, field.name)
            if (name, field.name) in _JSON_FIELDS:
                out[field.name] = {"type": "Json", "value": inner}
            else:
                out[field.name] = _encode(inner)
        return out
    if value is None or isinstance(value, (str, int, bool)):
        return value
    raise Undecodable(f"a {type(value).__name__} cannot travel between nodes")


def decode(raw: Any) -> Any:
    """The message `raw` encodes; `Undecodable` for anything else."""
    if not isinstance(raw, dict) or raw.get("type") not in MESSAGES:
        raise Undecodable("not a message carried between nodes")
    return _decode(raw, MESSAGES[raw["type"]])


def _decode(raw: dict[str, Any], cls: type[Any]) -> Any:
    names = {field.name for field in attrs.fields(cls)}
    unknown = set(raw) - names - {"type"}
    if unknown:
        raise Undecodable(f"unknown field {sorted(unknown)[0]!r} of {cls.__name__}")
    values: dict[str, Any] = {}
    for name in names & set(raw):
        value = raw[name]
        if (cls.__name__, name) in _JSON_FIELDS:
            if not isinstance(value, dict) or value.get("type") != "Json" or set(value) != {"type", "value"}:
                raise Undecodable(f"{cls.__name__}.{name} is not a JSON value")
            values[name] = value["value"]
            continue
        if isinstance(value, dict):
            nested = _NESTED.get(str(value.get("type")))
            if nested is None:
                raise Undecodable(f"{cls.__name__}.{name} is not a known value")
            value = _decode(value, nested)
        elif not (value is None or isinstance(value, (str, int, bool))):
            raise Undecodable(f"{cls.__name__}.{name} has the wrong type")
        values[name] = value
    try:
        return cls(**values)
    except TypeError as exc:
        raise Undecodable(f"{cls.__name__}: {exc}") from None


Send = Callable[[str, str, dict[str, Any]], Awaitable[Any]]  # (address, path, body) -> answer


class RemoteTell:
    """`engine.remote_tell`: hand a message with no caller to the node owning its actor."""

    def __init__(
        self,
        where: Callable[[str], Where],
        send: Send,
        spawn: Callable[[Callable[[], Awaitable[None]]], object],
        retell: Callable[[str, str, Any], None],
    ) -> None:
        self.where = where  # the ownership's answer, as it is now
        self.send = send
        self.spawn = spawn  # runs a task in the engine's nursery
        self.retell = retell  # (kind, actor id, message): deliver here (the actor moved here)
        self.sent = 0
        self.dropped = 0

    def __call__(self, kind: Kind[Any], actor_id: str, envelope: Envelope) -> bool:
        """True: taken (on its way, or dropped when it cannot travel); False: retry shortly."""
        message = envelope.message
        if isinstance(self.where(actor_id), Local):
            return False  # owned here after all: the caller delivers it again
        try:
            body = {"kind": kind.name, "actorId": actor_id, "message": encode(message)}
        except Undecodable as exc:
            log.info(
                "%s %s lives elsewhere; %s not sent (%s)", kind.name, actor_id, type(message).__name__, exc
            )
            self.dropped += 1
            return True
        self.spawn(partial(self._deliver, kind.name, actor_id, message, body))
        return True

    async def _deliver(self, kind: str, actor_id: str, message: Any, body: dict[str, Any]) -> None:
        problem: object = "no node held it"
        for delay in (0.0, *RETRIES_S):
            await trio.sleep(delay)
            where = self.where(actor_id)
            if isinstance(where, Local):
                self.retell(kind, actor_id, message)
                return
            if isinstance(where, Unowned):
                continue  # a failover or hand-over under way: wait for the new owner
            try:
                await self.send(where.address, "/internal/tell", body)
            except Exception as exc:  # unreachable, or it moved meanwhile (503 not_owner)
                problem = exc
                continue
            self.sent += 1
            return
        self.dropped += 1
        log.warning("%s %s: %s dropped (%s)", kind, actor_id, type(message).__name__, problem)
