"""Pull queues across nodes: a long poll on one node takes a task offered on another at once.

A task is offered to a pull queue (a Foliot queue or an SWF task list) by its run's actor, on
the node that owns the run; offers live in that node's memory (`foliot.actors.queues`). When an
offer finds no poller parked on its node, the node announces the queue on a broadcast channel
(PostgreSQL `LISTEN/NOTIFY`, one dedicated connection per node: `foliot.storage.notify`):
`{"n": node, "u": its address, "k": [[app, queue], ...]}`, announcements made together sent as
one. Every other node remembers the hint (which nodes have offers on which queue) and wakes the
pollers parked on that queue; a poller woken so claims **through the owner**
(`POST /internal/claim`, hop-authenticated, `foliot.http.internal`): the owner claims from its
own queue without waiting, through the run's actor, so a task is claimed exactly once however
many nodes' pollers try. An owner that answers "nothing" clears the hint (unless a newer
announcement came meanwhile).

A node that (re)connects to the channel says `hello`; every node then answers that it is there
(`peer`) and announces again every queue holding offers, so a poll that starts on a node that
just joined still finds the backlog the others hold. A node that never heard of another one
announces nothing: a single node pays no NOTIFY.

`Pull.poll` is the loop every long poll runs when the node is part of a cluster: claim here
(no waiting), else through each node hinted for the queue, else park on the queue until an
offer here, a new hint or the deadline.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import trio

from .queues import QueueKey, Queues

log = logging.getLogger("foliot.actors.pull")

CHANNEL = "foliot_offers"
PAYLOAD_MAX = 7_000  # NOTIFY payloads must stay under 8,000 bytes
HINTED_QUEUES_MAX = 10_000  # queues with hints kept at most (oldest dropped)

R = TypeVar("R")


class Bus(Protocol):
    """A broadcast channel between the nodes (PostgreSQL LISTEN/NOTIFY in production)."""

    async def notify(self, channel: str, payload: str) -> None: ...

    async def listen(
        self,
        channel: str,
        on_message: Callable[[str], None],
        on_connected: Callable[[], None],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Deliver every message of `channel` to `on_message` (on the Trio thread) until
        cancelled, reconnecting after a loss; `on_connected` after each (re)connection."""
        ...


def announcement(node_id: str, address: str, keys: list[QueueKey]) -> list[str]:
    """The payloads announcing offers on `keys`, each under `PAYLOAD_MAX` bytes."""
    out: list[str] = []
    batch: list[list[str]] = []
    size = 0
    for app, queue in keys:
        entry = len(app) + len(queue) + 8
        if batch and size + entry > PAYLOAD_MAX - len(node_id) - len(address) - 32:
            out.append(_compact({"n": node_id, "u": address, "k": batch}))
            batch, size = [], 0
        batch.append([app, queue])
        size += entry
    if batch:
        out.append(_compact({"n": node_id, "u": address, "k": batch}))
    return out


def _compact(message: dict[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"))


class Pull:
    """One node's side of the cross-node pull queues."""

    def __init__(
        self,
        node_id: str,
        address: str,
        queues: Queues,
        bus: Bus,
        claim: Callable[[str, dict[str, Any]], Awaitable[Any]],
        *,
        hinted_max: int = HINTED_QUEUES_MAX,
    ) -> None:
        self.node_id = node_id
        self.address = address
        self.queues = queues
        self.bus = bus
        self.claim = claim  # (address, request) -> the other node's claim: its answer or None
        self.hinted_max = hinted_max
        # queue -> node -> (address, generation): which nodes said they hold offers for it.
        self.hints: dict[QueueKey, dict[str, tuple[str, int]]] = {}
        self._generation = 0
        self._outgoing: dict[QueueKey, None] = {}  # queues to announce, in order
        self._send = trio.Event()
        self._hello_due = False
        self._presence_due = False
        self.peers: set[str] = set()  # other nodes heard on the channel since this one joined
        self.announced = 0  # payloads sent
        self.remote_claims = 0  # claims sent to other nodes that brought tasks
        queues.unclaimed = self._unclaimed

    # ------------------------------------------------------------------ announcing

    def _unclaimed(self, key: QueueKey) -> None:
        if self.peers:  # alone, nobody would hear: a single node pays nothing
            self._outgoing[key] = None
            self._send.set()

    def _announce_all(self) -> None:
        for key in self.queues.offered_queues():
            self._unclaimed(key)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.bus.listen, CHANNEL, self.heard, self._connected)
            task_status.started()
            while True:
                await self._send.wait()
                self._send = trio.Event()
                keys, self._outgoing = list(self._outgoing), {}
                payloads = announcement(self.node_id, self.address, keys)
                if self._presence_due:
                    self._presence_due = False
                    payloads.insert(0, _compact({"n": self.node_id, "peer": True}))
                if self._hello_due:
                    self._hello_due = False
                    payloads.insert(0, _compact({"n": self.node_id, "hello": True}))
                for payload in payloads:
                    try:
                        await self.bus.notify(CHANNEL, payload)
                        self.announced += 1
                    except Exception as exc:  # a hint lost: the next offer or hello brings it
                        log.warning("cluster: announcing offers failed: %s", exc)

    def _connected(self) -> None:
        """(Re)connected to the channel: ask the others to announce their backlogs again
        (hints may have been missed meanwhile), and announce ours."""
        self._hello_due = True
        self._send.set()
        self._announce_all()

    # ------------------------------------------------------------------ hearing

    def heard(self, payload: str) -> None:
        """A message of the channel (on the Trio thread)."""
        try:
            message = json.loads(payload)
            node = message["n"]
            if node == self.node_id:
                return
            self.peers.add(str(node))
            if message.get("hello"):  # a node (re)joined: say we are here, and what we hold
                self._presence_due = True
                self._send.set()
                self._announce_all()
                return
            if message.get("peer"):
                return
            address = message["u"]
            keys = [(str(app), str(queue)) for app, queue in message["k"]]
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("cluster: unreadable offer announcement ignored: %r", exc)
            return
        for key in keys:
            self._generation += 1
            nodes = self.hints.pop(key, {})
            nodes[node] = (address, self._generation)
            self.hints[key] = nodes  # most recently hinted last
            self.queues.wake_all(key)
        while len(self.hints) > self.hinted_max:
            del self.hints[next(iter(self.hints))]

    def _drained(self, key: QueueKey, node: str, generation: int) -> None:
        nodes = self.hints.get(key)
        if nodes is not None and nodes.get(node, ("", -1))[1] == generation:
            del nodes[node]
            if not nodes:
                del self.hints[key]

    # ------------------------------------------------------------------ polling

    async def poll(
        self,
        key: QueueKey,
        wait_until: float,
        here: Callable[[], Awaitable[Any]],
        request: dict[str, Any],
    ) -> Any:
        """Long-poll `key` across the cluster until `wait_until` (Trio time).

        `here()` claims from this node's queue without waiting (None: nothing); `request` is
        what another node is asked to claim with (`/internal/claim`), answered the same way. The
        first claim that brings something answers; None once the deadline passed with nothing."""
        while True:
            got = await here()
            if got is not None:
                return got
            seen = self._generation
            for node, (address, generation) in list(self.hints.get(key, {}).items()):
                try:
                    got = await self.claim(address, request)
                except Exception as exc:  # that node is gone or busy: try it again on its next hint
                    log.info("cluster: claim through %s failed: %s", node, exc)
                    self._drained(key, node, generation)
                    continue
                if got is not None:
                    self.remote_claims += 1
                    return got
                self._drained(key, node, generation)
            if trio.current_time() >= wait_until:
                return None
            if self._generation == seen and not self.queues.depth(*key):
                await self.queues.park(*key, wait_until)

    def describe(self) -> dict[str, Any]:
        return {
            "hintedQueues": len(self.hints),
            "announced": self.announced,
            "remoteClaims": self.remote_claims,
        }


async def long_poll(
    pull: Pull | None,
    key: QueueKey,
    wait_until: float,
    here: Callable[[float], Awaitable[R | None]],
    request: dict[str, Any],
) -> R | None:
    """A long poll of `key`: on this node alone (`here(wait_until)` parks on its queue), or
    across the cluster (`Pull.poll`: `here(now)` and claims through the other nodes). `R` is the
    poll's JSON answer, as another node would send it."""
    if pull is None:
        return await here(wait_until)
    got: R | None = await pull.poll(key, wait_until, lambda: here(trio.current_time()), request)
    return got
