"""Cross-node pull queues without processes: `Pull` over an in-memory broadcast channel, under
MockClock (a poll that was not woken would jump straight to its deadline)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import trio
import trio.testing

from foliot.actors.pull import Pull, long_poll
from foliot.actors.queues import Queues

from .fake import advance

KEY = ("orders", "work")
WAIT = 60.0


@attrs.define
class Channel:
    """LISTEN/NOTIFY in memory: every listener hears every message, in order."""

    listeners: list[Callable[[str], None]] = attrs.Factory(list)
    sent: list[str] = attrs.Factory(list)
    up: bool = True

    async def notify(self, channel: str, payload: str) -> None:
        await trio.lowlevel.checkpoint()
        if not self.up:
            raise OSError("the database is gone")
        self.sent.append(payload)
        for heard in list(self.listeners):
            heard(payload)

    async def listen(
        self,
        channel: str,
        on_message: Callable[[str], None],
        on_connected: Callable[[], None],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        self.listeners.append(on_message)
        on_connected()
        task_status.started()
        await trio.sleep_forever()


@attrs.define
class Node:
    name: str
    queues: Queues
    pull: Pull
    claims: list[str] = attrs.Factory(list)  # tokens claimed here for another node


async def claim_here(node: Node) -> list[str] | None:
    """What `/internal/claim` does: take one offer from this node's queue without waiting."""
    async with node.queues.reserve(*KEY, 1, trio.current_time()) as held:
        if not held.offers:
            return None
        token, _ = held.offers[0]
        held.settle(token, claimed=True)
        node.claims.append(token)
        return [token]


async def join(nursery: trio.Nursery, channel: Channel, nodes: dict[str, Node], name: str) -> Node:
    async def claim(address: str, request: dict[str, Any]) -> Any:
        await trio.lowlevel.checkpoint()
        return await claim_here(nodes[address])

    queues = Queues()
    node = Node(name, queues, Pull(name, name, queues, channel, claim))
    nodes[name] = node
    await nursery.start(node.pull.serve)
    await trio.testing.wait_all_tasks_blocked()
    return node


async def poll(node: Node, wait: float = WAIT) -> Any:
    here = lambda until: _local(node, until)  # noqa: E731
    return await long_poll(node.pull, KEY, trio.current_time() + wait, here, {"kind": "tasks"})


async def _local(node: Node, until: float) -> list[str] | None:
    async with node.queues.reserve(*KEY, 1, until) as held:
        if not held.offers:
            return None
        token, _ = held.offers[0]
        held.settle(token, claimed=True)
        return [token]


async def test_a_waiting_poll_takes_a_task_offered_on_another_node_at_once(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    channel, nodes = Channel(), {}
    a = await join(nursery, channel, nodes, "a")
    b = await join(nursery, channel, nodes, "b")
    assert a.pull.peers == {"b"} and b.pull.peers == {"a"}
    got: list[Any] = []
    began = trio.current_time()

    async def poller() -> None:
        got.append(await poll(b))
        got.append(trio.current_time() - began)

    nursery.start_soon(poller)
    await trio.testing.wait_all_tasks_blocked()
    assert b.queues.waiting_on(*KEY) == 1
    a.queues.offer(*KEY, "t1", "run-1")  # nobody polls on a: it is announced
    await trio.testing.wait_all_tasks_blocked()
    assert got == [["t1"], 0.0]  # at once: MockClock would have jumped to the deadline otherwise
    assert a.claims == ["t1"] and a.queues.depth(*KEY) == 0
    assert b.pull.remote_claims == 1


async def test_a_poll_that_starts_later_finds_the_backlog_of_a_node_that_was_there(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    channel, nodes = Channel(), {}
    a = await join(nursery, channel, nodes, "a")
    for i in range(3):
        a.queues.offer(*KEY, f"t{i}", f"run-{i}")
    assert channel.sent == ['{"n":"a","hello":true}']  # alone: its offers are not announced
    b = await join(nursery, channel, nodes, "b")  # its hello brings a's backlog
    began = trio.current_time()
    assert [await poll(b) for _ in range(3)] == [["t0"], ["t1"], ["t2"]]
    assert trio.current_time() == began
    assert a.queues.depth(*KEY) == 0


async def test_a_task_is_claimed_once_however_many_nodes_poll(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    channel, nodes = Channel(), {}
    a = await join(nursery, channel, nodes, "a")
    b = await join(nursery, channel, nodes, "b")
    c = await join(nursery, channel, nodes, "c")
    got: list[tuple[str, Any]] = []

    async def poller(node: Node) -> None:
        got.append((node.name, await poll(node, wait=5)))

    for node in (b, b, c, c):
        nursery.start_soon(poller, node)
    await trio.testing.wait_all_tasks_blocked()
    a.queues.offer(*KEY, "t1", "run-1")
    await advance(10)  # the three losers wait out their 5 s
    assert len(got) == 4
    assert sorted(answer for _, answer in got if answer is not None) == [["t1"]]
    assert a.claims == ["t1"]
    assert not b.pull.hints and not c.pull.hints  # a had nothing more: the hints were cleared


async def test_a_hint_newer_than_the_empty_answer_is_kept(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    channel, nodes = Channel(), {}
    a = await join(nursery, channel, nodes, "a")
    b = await join(nursery, channel, nodes, "b")
    b.pull.heard('{"n":"a","u":"a","k":[["orders","work"]]}')
    generation = b.pull.hints[KEY]["a"][1]
    b.pull.heard('{"n":"a","u":"a","k":[["orders","work"]]}')  # a newer offer came meanwhile
    b.pull._drained(KEY, "a", generation)  # the older claim found nothing
    assert "a" in b.pull.hints[KEY]
    b.pull._drained(KEY, "a", b.pull.hints[KEY]["a"][1])
    assert KEY not in b.pull.hints
    b.pull.heard("not json")  # ignored, logged
    b.pull.heard('{"n":"b","u":"b","k":[["orders","work"]]}')  # its own: ignored
    assert KEY not in b.pull.hints and a.pull.peers == {"b"}


async def test_a_lost_announcement_does_not_stop_the_node(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    channel, nodes = Channel(), {}
    a = await join(nursery, channel, nodes, "a")
    b = await join(nursery, channel, nodes, "b")
    channel.up = False
    a.queues.offer(*KEY, "t1", "run-1")
    await trio.testing.wait_all_tasks_blocked()
    assert KEY not in b.pull.hints  # lost; a poll on a still takes it
    assert await poll(a, wait=0) == ["t1"]
    channel.up = True
    a.queues.offer(*KEY, "t2", "run-2")
    await trio.testing.wait_all_tasks_blocked()
    assert await poll(b, wait=0) == ["t2"]
