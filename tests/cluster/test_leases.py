"""The pure lease planner: partitions, shares, and convergence of a cluster following it."""

from __future__ import annotations

import collections
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from foliot.core.leases import PARTITIONS, Lease, Node, Plan, View, partition_of, plan, shares

from .fake import FakeCluster

TTL = 10_000


def test_partition_of_is_stable_and_spreads_ids() -> None:
    assert partition_of("run_01HZZZ") == partition_of("run_01HZZZ")
    assert partition_of("abc") == 89  # fixed forever: a run must never change partition
    counts = collections.Counter(partition_of(f"run_{i}") for i in range(25_600))
    assert set(counts) == set(range(PARTITIONS))
    assert max(counts.values()) < 2 * 25_600 / PARTITIONS


@given(st.integers(1, 40), st.integers(1, 512))
def test_shares_add_up_and_differ_by_at_most_one(n: int, partitions: int) -> None:
    nodes = [f"n{i:02}" for i in range(n)]
    owed = shares(nodes, partitions)
    assert sum(owed.values()) == partitions
    assert max(owed.values()) - min(owed.values()) <= 1


def view(now: int, nodes: dict[str, int], leases: dict[int, tuple[str | None, int]]) -> View:
    return View(
        now,
        tuple(Node(n, f"http://{n}", hb) for n, hb in sorted(nodes.items())),
        tuple(Lease(p, holder, 1, expires) for p, (holder, expires) in sorted(leases.items())),
    )


def test_a_lone_node_takes_everything() -> None:
    v = view(1_000, {"a": 1_000}, {p: (None, 0) for p in range(8)})
    assert plan(v, "a", TTL, 8) == Plan(
        acquire=tuple(sorted(range(8), key=lambda p: (p - partition_of("a", 8)) % 8))
    )


def test_a_node_above_its_share_releases_only_what_others_lack_beyond_the_free_ones() -> None:
    # a holds all 8; b just joined: b is owed 4, nothing is free, so a gives back 4.
    v = view(1_000, {"a": 1_000, "b": 1_000}, {p: ("a", 5_000) for p in range(8)})
    assert len(plan(v, "a", TTL, 8).release) == 4
    # 2 are free already: a gives back only 2 more.
    v = view(1_000, {"a": 1_000, "b": 1_000}, {p: ("a", 5_000) if p < 6 else (None, 0) for p in range(8)})
    assert len(plan(v, "a", TTL, 8).release) == 2
    # b is dead (heartbeat older than the TTL): a keeps everything.
    v = view(20_000, {"a": 20_000, "b": 1_000}, {p: ("a", 25_000) for p in range(8)})
    assert plan(v, "a", TTL, 8) == Plan()


def test_expired_leases_are_free_even_when_their_holder_looks_alive() -> None:
    v = view(10_000, {"a": 10_000, "b": 9_999}, {0: ("b", 10_000), 1: ("b", 10_001)})
    assert plan(v, "a", TTL, 2) == Plan(acquire=(0,))


def converge(
    cluster: FakeCluster, held: dict[str, dict[int, int]], nodes: list[str], clock: list[int], rounds: int
) -> int:
    """Each round every node renews, announces itself and follows its plan; the rounds taken."""
    for n in nodes:
        held.setdefault(n, {})
    quiet = 0  # rounds in a row without a change: a node's first heartbeat takes a round to be seen
    for r in range(rounds):
        changed = False
        for n in nodes:
            renewed = cluster.renew(n, held[n], TTL)
            held[n] = {p: e for p, e in held[n].items() if p in renewed}
            wanted = plan(cluster.heartbeat(n, n, 0), n, TTL, len(cluster.leases))
            if wanted.release:
                cluster.release(n, {p: held[n][p] for p in wanted.release})
                for p in wanted.release:
                    del held[n][p]
                changed = True
            if wanted.acquire:
                held[n].update(cluster.acquire(n, wanted.acquire, TTL))
                changed = True
            clock[0] += 1
        owners = collections.Counter(cluster.holders().values())
        quiet = 0 if changed else quiet + 1
        if quiet == 2:
            owed = shares(sorted(nodes), len(cluster.leases))
            assert dict(owners) == {n: owed[n] for n in nodes if owed[n]}
            return r
    raise AssertionError(
        f"no convergence in {rounds} rounds: {collections.Counter(cluster.holders().values())}"
    )


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(0, 5),
    st.sampled_from([1, 7, 64, 256]),
    st.randoms(use_true_random=False),
)
def test_any_cluster_converges_to_fair_shares_with_every_partition_held_once(
    first: int, joining: int, partitions: int, rnd: random.Random
) -> None:
    clock = [0]
    cluster = FakeCluster(lambda: clock[0], partitions)
    nodes = [f"node-{i}" for i in range(first)]
    held: dict[str, dict[int, int]] = {}
    converge(cluster, held, nodes, clock, 5)
    nodes += [f"late-{i}" for i in range(joining)]
    rnd.shuffle(nodes)
    assert converge(cluster, held, nodes, clock, 8) <= 4
    assert len(cluster.holders()) == partitions
