"""What the runtime needs from the node it runs in: the `Host` protocol.

The supervisor and its actors never see the composition root (`foliot.node.Node`) or any
kind: they are given a `Host`, which answers the few questions the runtime asks of its
surroundings (the clock, the settings, whether this node owns an actor, where to send a
message for one it does not own, how to retry a delivery later) and holds the shared
runtime services (the supervisor itself, the timer wheel, admission).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..core.config import Settings
    from .admission import Admission
    from .clock import Clock
    from .messages import Envelope
    from .runtime import Kind
    from .supervisor import Supervisor
    from .timer_wheel import TimerWheel


class Host(Protocol):
    """The runtime's view of its node."""

    @property
    def clock(self) -> Clock: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def supervisor(self) -> Supervisor: ...

    @property
    def timers(self) -> TimerWheel: ...

    @property
    def admission(self) -> Admission: ...

    def accepts(self, actor_id: str) -> bool:
        """This node owns the actor now (always true on a single node)."""
        ...

    def elsewhere(self, kind: Kind[Any], actor_id: str, envelope: Envelope) -> bool:
        """A message with no caller for an actor owned elsewhere; True when taken (or dropped)."""
        ...

    def later(self, delay_s: float, kind: Kind[Any], actor_id: str, envelope: Envelope) -> None:
        """Deliver `envelope` again after `delay_s` (storage was down when it arrived)."""
        ...
