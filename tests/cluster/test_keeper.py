"""The lease keeper under MockClock against the fake store: joining, failover, cut-off nodes."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest
import trio
import trio.testing

from foliot.cluster.keeper import LeaseKeeper
from foliot.cluster.ownership import Ownership
from foliot.core.leases import MARGIN_MS, PARTITIONS, partition_of

from .fake import FakeCluster, FakeClusterStore, advance

TTL = 10_000


async def until(condition: Callable[[], bool], step: float, each: Callable[[], None] = lambda: None) -> None:
    """Let virtual time pass in steps until `condition` holds, checking `each` at every step
    (bounded: 5 virtual minutes)."""
    with trio.fail_after(300):
        while not condition():  # the keepers move on their own ticks
            each()
            await advance(step)


def db_now() -> int:
    return round(trio.current_time() * 1000)


class Recorder:
    """An `Ownership` that remembers what it was told and when."""

    def __init__(self, name: str, log: list[tuple[float, str, str, frozenset[int]]]) -> None:
        self.name, self.log = name, log
        self.owned: set[int] = set()

    async def gained(self, leases: Mapping[int, int]) -> None:
        self.owned |= set(leases)
        self.log.append((trio.current_time(), self.name, "gained", frozenset(leases)))

    async def releasing(self, partitions: frozenset[int]) -> None:
        assert partitions <= self.owned  # only what it owns, and before the release
        self.owned -= partitions
        self.log.append((trio.current_time(), self.name, "releasing", partitions))

    def lost(self, partitions: frozenset[int]) -> None:
        self.owned -= partitions
        self.log.append((trio.current_time(), self.name, "lost", partitions))


def owned_at_most_once(owners: list[Recorder]) -> None:
    seen: set[int] = set()
    for owner in owners:
        assert not (owner.owned & seen), "a partition owned by two nodes at once"
        seen |= owner.owned


def two_nodes(
    cluster: FakeCluster,
) -> tuple[list[tuple[float, str, str, frozenset[int]]], Recorder, Recorder, LeaseKeeper, LeaseKeeper]:
    """Nodes a and b on one fake database: their shared log, owners and keepers."""
    store = FakeClusterStore(cluster)
    log: list[tuple[float, str, str, frozenset[int]]] = []
    a, b = Recorder("a", log), Recorder("b", log)
    return (
        log,
        a,
        b,
        LeaseKeeper(store, "a", "http://a", a, ttl_ms=TTL),
        LeaseKeeper(store, "b", "http://b", b, ttl_ms=TTL),
    )


def balanced(*keepers: LeaseKeeper) -> bool:
    return sorted(len(k.held) for k in keepers) == [128, 128]


async def test_a_lone_node_holds_everything_and_is_ready(autojump_clock: trio.testing.MockClock) -> None:
    cluster = FakeCluster(db_now)
    log: list[tuple[float, str, str, frozenset[int]]] = []
    a = Recorder("a", log)
    keeper = LeaseKeeper(FakeClusterStore(cluster), "a", "http://a", a, ttl_ms=TTL)
    before = keeper.ready
    async with trio.open_nursery() as nursery:
        await nursery.start(keeper.run)
        assert not before and keeper.ready and len(keeper.held) == 256 and a.owned == set(range(256))
        await advance(60)  # renewals keep it all
        assert len(cluster.holders()) == 256 and set(cluster.holders().values()) == {"a"}
        assert keeper.ready
        nursery.cancel_scope.cancel()


async def test_nodes_that_join_get_their_share_within_a_minute_handed_over_cleanly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = FakeCluster(db_now)
    store = FakeClusterStore(cluster)
    log: list[tuple[float, str, str, frozenset[int]]] = []
    owners = [Recorder(n, log) for n in ("a", "b", "c")]
    keepers = [LeaseKeeper(store, o.name, f"http://{o.name}", o, ttl_ms=TTL) for o in owners]
    async with trio.open_nursery() as nursery:
        await nursery.start(keepers[0].run)
        joined = trio.current_time()
        await nursery.start(keepers[1].run)
        await nursery.start(keepers[2].run)
        await until(
            lambda: sorted(len(k.held) for k in keepers) == [85, 85, 86],
            0.5,
            lambda: owned_at_most_once(owners),
        )
        assert trio.current_time() - joined < 60
        assert sum(len(o.owned) for o in owners) == 256
        owned_at_most_once(owners)
        # Every partition a gave away went through `releasing` first (no partition was lost).
        assert not [entry for entry in log if entry[2] == "lost"]
        nursery.cancel_scope.cancel()


async def test_a_dead_nodes_partitions_are_taken_over_within_ttl_plus_2s(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = FakeCluster(db_now)
    _, _, _, dying, survivor = two_nodes(cluster)
    async with trio.open_nursery() as nursery:
        doomed = trio.CancelScope()  # node a, killed by cancelling its keeper: it says nothing

        async def node_a() -> None:
            with doomed:
                await dying.run()

        nursery.start_soon(node_a)
        await nursery.start(survivor.run)
        await until(lambda: balanced(dying, survivor), 0.5)
        doomed.cancel()
        killed = trio.current_time()
        orphans = frozenset(p for p, holder in cluster.holders().items() if holder == "a")
        assert orphans
        await until(lambda: orphans <= set(survivor.held), 0.1)
        assert trio.current_time() - killed <= TTL / 1000 + 2
        nursery.cancel_scope.cancel()


async def test_a_node_cut_off_from_the_database_drops_its_leases_before_anyone_can_take_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = FakeCluster(db_now)
    log, a, b, ka, kb = two_nodes(cluster)
    async with trio.open_nursery() as nursery:
        await nursery.start(ka.run)
        await nursery.start(kb.run)
        await until(lambda: balanced(ka, kb), 0.5)
        cluster.down.add("a")
        cut = trio.current_time()
        mine = frozenset(ka.held)
        await until(lambda: mine <= set(kb.held), 0.05, lambda: owned_at_most_once([a, b]))
        (dropped,) = [t for t, who, what, parts in log if who == "a" and what == "lost" and parts == mine]
        taken = min(at / 1000 for p, node, epoch, at in cluster.acquisitions if node == "b" and p in mine)
        assert dropped < taken  # a stopped trusting its leases before b could hold them
        assert taken - dropped >= MARGIN_MS / 1000 - 1e-9
        assert not ka.ready and kb.ready
        assert dropped - cut <= TTL / 1000
        # Back on line: a rejoins and gets its share again.
        cluster.down.discard("a")
        await until(
            lambda: balanced(ka, kb),
            0.5,
            lambda: owned_at_most_once([a, b]),
        )
        nursery.cancel_scope.cancel()


async def test_a_node_whose_database_calls_hang_drops_its_leases_on_its_own_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = FakeCluster(db_now)
    log: list[tuple[float, str, str, frozenset[int]]] = []
    a = Recorder("a", log)

    class Hanging(FakeClusterStore):
        hang = False

        async def cluster_renew(self, node_id: str, held: Mapping[int, int], ttl_ms: int) -> set[int]:
            if self.hang:
                await trio.sleep_forever()  # a paused connection: no answer, no error
            return await super().cluster_renew(node_id, held, ttl_ms)

    store = Hanging(cluster)
    keeper = LeaseKeeper(store, "a", "http://a", a, ttl_ms=TTL)
    async with trio.open_nursery() as nursery:
        await nursery.start(keeper.run)
        store.hang = True
        hung = trio.current_time()
        await until(lambda: not keeper.held, 0.1)
        (dropped,) = [t for t, _, what, _ in log if what == "lost"]
        assert dropped - hung <= (TTL - MARGIN_MS) / 1000 + 1e-9
        assert not keeper.ready and a.owned == set()
        nursery.cancel_scope.cancel()


async def test_a_failed_exchange_is_retried_and_the_leases_kept_while_still_valid(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = FakeCluster(db_now)
    log: list[tuple[float, str, str, frozenset[int]]] = []
    a = Recorder("a", log)
    keeper = LeaseKeeper(FakeClusterStore(cluster), "a", "http://a", a, ttl_ms=TTL)
    async with trio.open_nursery() as nursery:
        await nursery.start(keeper.run)
        cluster.down.add("a")
        await advance(3)  # one or two ticks fail; the leases are still valid
        assert len(keeper.held) == 256 and keeper.ready
        cluster.down.discard("a")
        await advance(30)
        assert len(keeper.held) == 256 and not [e for e in log if e[2] == "lost"]
        nursery.cancel_scope.cancel()


async def test_leaving_passivates_then_releases_everything(autojump_clock: trio.testing.MockClock) -> None:
    cluster = FakeCluster(db_now)
    log: list[tuple[float, str, str, frozenset[int]]] = []
    a = Recorder("a", log)
    keeper = LeaseKeeper(FakeClusterStore(cluster), "a", "http://a", a, ttl_ms=TTL)
    async with trio.open_nursery() as nursery:
        await nursery.start(keeper.run)
        nursery.cancel_scope.cancel()
    await keeper.leave()
    assert log[-1][2:] == ("releasing", frozenset(range(256)))
    assert cluster.holders() == {} and "a" not in cluster.nodes


def test_a_ttl_too_short_for_the_margin_is_refused() -> None:
    with pytest.raises(ValueError, match="TTL"):
        LeaseKeeper(
            FakeClusterStore(FakeCluster(lambda: 0)), "a", "http://a", Recorder("a", []), ttl_ms=2_000
        )


async def test_a_node_restarted_under_its_id_takes_its_leases_back_at_once_with_new_epochs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = FakeCluster(db_now)
    store = FakeClusterStore(cluster)
    log: list[tuple[float, str, str, frozenset[int]]] = []
    first = LeaseKeeper(store, "a", "http://a", Recorder("a", log), ttl_ms=TTL)
    async with trio.open_nursery() as nursery:
        killed = trio.CancelScope()

        async def run_first() -> None:
            with killed:
                await first.run()

        nursery.start_soon(run_first)
        await advance(1)
        old = dict(first.held)
        assert len(old) == 256
        killed.cancel()  # kill -9: its leases stay in the database, unexpired
        await advance(1)
        again = Recorder("a", log)
        second = LeaseKeeper(store, "a", "http://a", again, ttl_ms=TTL)
        restarted = trio.current_time()
        await nursery.start(second.run)
        assert trio.current_time() - restarted < 1  # not after the old leases' TTL
        assert again.owned == set(range(256)) and second.held == {p: e + 1 for p, e in old.items()}
        assert second.ready
        # The dead process's epochs are over: its renewal (or any write under them) is refused.
        assert await store.cluster_renew("a", old, TTL) == set()
        nursery.cancel_scope.cancel()


async def test_past_the_trusted_time_the_engine_refuses_its_actors_before_the_keeper_drops_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A node resumed from SIGSTOP (or a loop running late) may run its dispatcher before the
    # keeper's own task has dropped the leases: `accepts` must already say no (found by the
    # 3-node fault test: a push sent on a lease the database had already ended).
    class Owner:
        def spawn(self, fn: Callable[[], object]) -> bool:
            return False

        async def recover(self, partitions: frozenset[int] | None = None) -> None: ...

        async def passivate(self, partitions: frozenset[int]) -> None: ...

        def drop(self, partitions: frozenset[int]) -> None: ...

    ownership = Ownership(Owner())
    keeper = LeaseKeeper(FakeClusterStore(FakeCluster(db_now)), "a", "http://a", ownership, ttl_ms=TTL)
    ownership.keeper = keeper
    actor = "run_0123"
    p = partition_of(actor, PARTITIONS)
    ownership.held[p] = keeper.held[p] = 1
    keeper.valid_until = trio.current_time() + 1
    assert ownership.accepts(actor) and ownership.owns_partition(p)
    autojump_clock.jump(1)  # the keeper is not running: nothing dropped the lease yet
    assert p in ownership.held
    assert not ownership.accepts(actor) and not ownership.owns_partition(p)
