"""What the faces use of a node: the `Services` protocol.

The HTTP API, the SWF edge and the console are built with a `Services` (`create_app`), never
with the composition root: they call the kinds' entry points (`runs`, `swf`), the stores'
reads and writes that are not a kind's (apps, keys, operator tokens), the request path's
cached reads (`directory`), admission, and the runtime's gauges for the admin pages.
`foliot.node.Node` is one; a test's fake can be another (`tests/api/test_faces_fake_service.py`).
The `faces-see-services` import contract keeps `foliot.node` out of the faces.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from ..actors.admission import Admission
    from ..actors.clock import Clock
    from ..actors.directory import Directory
    from ..actors.dispatcher import Dispatcher
    from ..actors.messages import Envelope
    from ..actors.placement import Placement
    from ..actors.pull import Pull
    from ..actors.queues import Queues
    from ..actors.runtime import Kind
    from ..actors.supervisor import Supervisor
    from ..actors.timer_wheel import TimerWheel
    from ..core.config import Settings
    from ..core.credentials import Vault
    from ..kinds.run.service import Runs
    from ..kinds.schedule.service import Schedules
    from ..kinds.swf.service import Swf
    from ..observe.metrics import Metrics
    from ..observe.trends import Trends
    from ..storage.base import Store
    from ..storage.health import WriteHealth

T = TypeVar("T")


class Services(Protocol):
    @property
    def settings(self) -> Settings: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def store(self) -> Store: ...
    @property
    def vault(self) -> Vault: ...
    @property
    def directory(self) -> Directory: ...
    @property
    def admission(self) -> Admission: ...

    # the kinds' entry points
    @property
    def runs(self) -> Runs: ...
    @property
    def swf(self) -> Swf: ...
    @property
    def schedules(self) -> Schedules: ...
    @property
    def kinds(self) -> Mapping[str, Kind[Any]]: ...

    # where actors live, and the other nodes
    @property
    def placement(self) -> Placement: ...
    @property
    def pull(self) -> Pull | None: ...
    @property
    def forwarder(self) -> Any:
        """The HTTP face's `forward.Forwarder` in cluster mode (set by `foliot.server`), else None."""
        ...

    def tell_or_retry(self, kind: Kind[Any], actor_id: str, envelope: Envelope) -> None: ...
    async def outlive_caller(self, fn: Callable[[], Awaitable[T]]) -> T: ...

    # the runtime's gauges, for the admin API and the console
    @property
    def queues(self) -> Queues: ...
    @property
    def dispatcher(self) -> Dispatcher: ...
    @property
    def supervisor(self) -> Supervisor: ...
    @property
    def timers(self) -> TimerWheel: ...
    @property
    def metrics(self) -> Metrics: ...
    @property
    def trends(self) -> Trends: ...
    @property
    def write_health(self) -> WriteHealth: ...
    @property
    def started_at(self) -> int: ...
    @property
    def ready(self) -> bool: ...
    @property
    def serving(self) -> bool: ...
