"""What travels through a run actor's mailbox: a machine message plus an optional reply slot."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import trio

from ..core.workflow.machine import Message, Reply
from ..storage.base import IdempotencyRecord


@attrs.frozen
class Redeliver:
    """After a restart: send the run's open task again with its original idempotency key."""

    token: str


@attrs.frozen
class Resolve:
    """A commit of the run is in doubt (its reply was lost and the run could not be read back):
    read the run again and perform that commit's effects if it was applied."""


ActorMessage = Message | Redeliver | Resolve


@attrs.define
class ReplySlot:
    """One answer, awaited by the caller (an HTTP route) after the actor committed.

    `on_settle` runs in the actor's task the moment the answer is known, whether or not the
    caller is still waiting: bookkeeping that must follow the commit (a queue reservation)
    goes there, out of reach of the caller's cancellation."""

    event: trio.Event = attrs.Factory(trio.Event)
    reply: Any = None  # a run's `Reply`, or what another kind of actor answers
    error: BaseException | None = None
    value: Any = None
    on_settle: Callable[[ReplySlot], None] | None = None

    def put(self, reply: Any, value: Any = None) -> None:
        self.reply, self.value = reply, value
        self._settled()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self._settled()

    def _settled(self) -> None:
        self.event.set()
        hook, self.on_settle = self.on_settle, None
        if hook is not None:
            hook(self)

    async def wait(self) -> Any:
        await self.event.wait()
        if self.error is not None:
            raise self.error
        assert self.reply is not None
        return self.reply


@attrs.frozen
class Envelope:
    message: Any  # a run's `ActorMessage`, or another kind's message
    reply: ReplySlot | None = None
    attempts: int = 0  # redeliveries after a storage failure
    # An idempotency record to commit with the transition, made from its reply (None: none).
    idempotency: Callable[[Reply], IdempotencyRecord | None] | None = None
