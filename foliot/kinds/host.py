"""What a kind needs from its node, beyond the runtime's `Host`: the `KindHost` protocol.

A kind (runs, SWF executions) is built by the composition root with a `KindHost`; it never
imports the node. The shared services are typed by their own (lower-layer) classes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..actors.host import Host

if TYPE_CHECKING:
    import httpx

    from ..actors.directory import Directory
    from ..actors.dispatcher import Dispatcher
    from ..actors.messages import Envelope
    from ..actors.placement import Placement
    from ..actors.pull import Pull
    from ..actors.pushclient import Poster
    from ..actors.queues import Queues
    from ..actors.runtime import Kind
    from ..core.credentials import Vault
    from ..storage.base import Store
    from ..storage.fence import Fence

T = TypeVar("T")


class KindHost(Host, Protocol):
    """The node as a kind sees it: the runtime's services and the node's life."""

    @property
    def store(self) -> Store: ...

    @property
    def queues(self) -> Queues: ...

    @property
    def dispatcher(self) -> Dispatcher: ...

    @property
    def directory(self) -> Directory: ...

    @property
    def http(self) -> httpx.AsyncClient | Poster: ...

    @property
    def vault(self) -> Vault: ...

    @property
    def placement(self) -> Placement: ...

    @property
    def pull(self) -> Pull | None:
        """Several nodes: the pull queues across them, else None."""
        ...

    @property
    def ready(self) -> bool:
        """Started and recovered: entry points refuse with 503 until then."""
        ...

    def fences(self, *actor_ids: str) -> tuple[Fence, ...] | None:
        """The lease fences a write of these actors carries (None on a single node);
        `Fenced` when one's partition is not held here."""
        ...

    def new_id(self, make: Callable[[], str], key: Callable[[str], str] | None = None) -> str:
        """`make()` until the actor id (`key(id)`) falls in a partition this node owns."""
        ...

    async def shielded(self, write: Callable[[], Awaitable[T]]) -> T:
        """Run one storage write shielded from cancellation, bounded by the shutdown grace."""
        ...

    def spawn(self, fn: Callable[[], Awaitable[None]]) -> bool:
        """Run `fn` in the node's nursery; False when shutting down."""
        ...

    async def outlive_caller(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run `fn` in the node's nursery, so a caller going away cannot cut it short."""
        ...

    def tell_or_retry(self, kind: Kind[Any], actor_id: str, envelope: Envelope) -> None: ...
