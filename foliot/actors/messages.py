"""What travels through a run actor's mailbox: a machine message plus an optional reply slot."""

from __future__ import annotations

from typing import Any

import attrs
import trio

from ..workflow.machine import Message, Reply


@attrs.frozen
class Redeliver:
    """After a restart: send the run's open task again with its original idempotency key."""

    token: str


ActorMessage = Message | Redeliver


@attrs.define
class ReplySlot:
    """One answer, awaited by the caller (an HTTP route) after the actor committed."""

    event: trio.Event = attrs.Factory(trio.Event)
    reply: Reply | None = None
    error: BaseException | None = None
    value: Any = None

    def put(self, reply: Reply, value: Any = None) -> None:
        self.reply, self.value = reply, value
        self.event.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.event.set()

    async def wait(self) -> Reply:
        await self.event.wait()
        if self.error is not None:
            raise self.error
        assert self.reply is not None
        return self.reply


@attrs.frozen
class Envelope:
    message: ActorMessage
    reply: ReplySlot | None = None
    attempts: int = 0  # redeliveries after a storage failure
