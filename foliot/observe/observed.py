"""What observability reads of a node: the runtime's services, by their own types.

`foliot.node.Node` is one; metrics and trends never import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..actors.admission import Admission
    from ..actors.clock import Clock
    from ..actors.dispatcher import Dispatcher
    from ..actors.queues import Queues
    from ..actors.retention import Pruner
    from ..actors.supervisor import Supervisor
    from ..actors.timer_wheel import TimerWheel
    from ..storage.base import Store
    from .metrics import Metrics


class Observed(Protocol):
    @property
    def admission(self) -> Admission: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def dispatcher(self) -> Dispatcher: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def pruner(self) -> Pruner: ...

    @property
    def queues(self) -> Queues: ...

    @property
    def store(self) -> Store: ...

    @property
    def supervisor(self) -> Supervisor: ...

    @property
    def timers(self) -> TimerWheel: ...
