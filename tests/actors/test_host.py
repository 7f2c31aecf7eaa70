"""The generic runtime on a fake host: no node, no dispatcher, no HTTP, no Foliot run.

`foliot.actors` is driven here the way the issue-21 layering says it is used: a supervisor, its
actors and the timer wheel, given a `Host` (`foliot.actors.host`) and a `Kind`. The host is a
small class of this file (a clock, the settings, the runtime's own services, and the three
questions: does this node own the actor, where does a message for another node go, how is a
delivery retried later); the kind is a counter machine over a dict-backed store that can refuse
loads and commits. The store is also the wheel's `TimerSource`: its timer rows are derived from
the documents, as the real stores derive them on every commit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import attrs
import pytest
import trio
from trio.testing import MockClock

from foliot.actors.admission import Admission
from foliot.actors.clock import Clock
from foliot.actors.host import Host
from foliot.actors.messages import Envelope, ReplySlot
from foliot.actors.runtime import Actor, Kind
from foliot.actors.supervisor import CRASH_WINDOW_MS, Supervisor
from foliot.actors.timer_wheel import Position, TimerWheel
from foliot.core.config import Settings
from foliot.core.errors import (
    Fenced,
    Internal,
    Overloaded,
    StorageUnavailable,
    Unavailable,
)
from foliot.http.errors import status_of
from foliot.storage.base import TimerRecord

from .counter import Add, Arm, Boom, Busy, Close, Counter, Fire, Hold, Timer, transition

T0 = 1_800_000_000_000
HOUR_MS = 3_600_000

# ---------------------------------------------------------------------- the counter machine


def timers_of(state: Counter) -> list[tuple[str, Timer]]:
    return [("tick", state.timer)] if state.timer is not None and state.open else []


class CounterStore:
    """The counters' storage: documents guarded by `version`, and every commit in order."""

    def __init__(self) -> None:
        self.docs: dict[str, Counter] = {}
        self.log: list[tuple[str, Counter]] = []
        self.loads = 0
        self.fail_loads = 0
        self.fail_commits = 0
        self.fence_commits = 0
        self.moved_commits = 0  # commits that find the stored document moved underneath

    async def load(self, actor_id: str) -> Counter | None:
        await trio.sleep(0.001)
        if self.fail_loads:
            self.fail_loads -= 1
            raise StorageUnavailable("down")
        self.loads += 1
        return self.docs.get(actor_id)

    async def commit(self, actor_id: str, expected: int, new: Counter) -> Counter | None:
        """The committed document; None when the stored one moved (a guarded write)."""
        await trio.sleep(0.01)
        if self.fail_commits:
            self.fail_commits -= 1
            raise StorageUnavailable("down")
        if self.fence_commits:
            self.fence_commits -= 1
            raise Fenced("the partition's lease is held by another node")
        if self.moved_commits:
            self.moved_commits -= 1
            self.docs[actor_id] = attrs.evolve(self.docs[actor_id], version=self.docs[actor_id].version + 1)
        if self.docs[actor_id].version != expected:
            return None
        stored = attrs.evolve(new, version=expected + 1)
        self.docs[actor_id] = stored
        self.log.append((actor_id, stored))
        return stored

    async def timers_due_before(
        self, before: int, limit: int, after: Position | None = None
    ) -> list[TimerRecord]:
        """The wheel's `TimerSource`: the rows the documents hold, in storage order."""
        await trio.lowlevel.checkpoint()
        rows = sorted(
            (t.due, actor_id, slot, t)
            for actor_id, doc in self.docs.items()
            for slot, t in timers_of(doc)
            if t.due < before
        )
        picked = [r for r in rows if after is None or (r[0], r[1], r[2]) > after][:limit]
        return [TimerRecord(a, s, t.kind, t.key, due, CounterKind.name) for due, a, s, t in picked]


class CounterKind:
    """`Kind[Counter]`: it sees the runtime only through `actor.host` (a `Host`)."""

    name = "counter"

    def __init__(self, store: CounterStore) -> None:
        self.store = store
        self.handled: list[Any] = []
        self.handling = 0
        self.most_at_once = 0
        self.firings: list[tuple[str, str]] = []
        self.gave_up: list[str] = []
        self.release = trio.Event()

    async def load(self, actor_id: str) -> Counter | None:
        return await self.store.load(actor_id)

    async def handle(self, actor: Actor[Counter], envelope: Envelope) -> bool:
        state = actor.state
        assert state is not None
        msg = envelope.message
        self.handling += 1
        self.most_at_once = max(self.most_at_once, self.handling)
        try:
            if isinstance(msg, Hold):
                await self.release.wait()
            if isinstance(msg, Fire):
                self.firings.append((actor.id, msg.key))
            new = transition(state, msg)
            if new != state:
                stored = await self.store.commit(actor.id, state.version, new)
                if stored is None:
                    return True  # the runtime reloads the document and hands the message again
                actor.state = new = stored
                actor.host.timers.sync(self.name, actor.id, self.timers(state), self.timers(new))
            self.handled.append(msg)
            if envelope.reply is not None:
                envelope.reply.put(new.total)
            return False
        finally:
            self.handling -= 1

    def timers(self, state: Counter) -> Sequence[tuple[str, Timer]]:
        return timers_of(state)

    def firing(self, slot: str, kind: str, key: str) -> Fire:
        return Fire(slot, key)

    def fired(self, message: Any) -> tuple[str, str] | None:
        return (message.slot, message.key) if isinstance(message, Fire) else None

    def parked(self, state: Counter) -> bool:
        return not state.busy

    def is_open(self, state: Counter) -> bool:
        return state.open

    def unknown(self, actor_id: str) -> Any:
        return f"no counter {actor_id}"

    def persistent(self, message: Any) -> bool:
        return False

    async def give_up(self, actor: Actor[Counter], exc: Exception) -> None:
        self.gave_up.append(actor.id)
        self.store.docs[actor.id] = attrs.evolve(self.store.docs[actor.id], open=False)

    def describe(self, actor: Actor[Counter]) -> dict[str, Any]:
        return {"total": actor.state.total if actor.state is not None else None}


# ---------------------------------------------------------------------- the fake host


class FakeHost:
    """A `Host` with nothing behind it but the runtime's own parts and a nursery."""

    def __init__(self, settings: Settings, store: CounterStore) -> None:
        self.clock = Clock(T0)
        self.settings = settings
        self.supervisor = Supervisor(self)
        self.timers = TimerWheel(
            store,
            self.clock,
            self._deliver_timer,
            window_ms=settings.timer_window_ms,
            max_inflight=settings.timer_max_inflight,
        )
        # The runtime asks admission only to count and shape a refusal (`refuse`), which
        # touches neither the dispatcher nor the store.
        self.admission = Admission(settings, None, None)  # type: ignore[arg-type]
        self.kinds: dict[str, Kind[Any]] = {}
        self.not_here: set[str] = set()  # actor ids another node owns
        self.sent_elsewhere: list[tuple[str, str, Any]] = []
        self.retries: list[tuple[float, str, Envelope]] = []
        self.nursery: trio.Nursery | None = None

    def accepts(self, actor_id: str) -> bool:
        return actor_id not in self.not_here

    def elsewhere(self, kind: Kind[Any], actor_id: str, envelope: Envelope) -> bool:
        self.sent_elsewhere.append((kind.name, actor_id, envelope.message))
        return True

    def later(self, delay_s: float, kind: Kind[Any], actor_id: str, envelope: Envelope) -> None:
        self.retries.append((delay_s, actor_id, envelope))
        assert self.nursery is not None

        async def again() -> None:
            await trio.sleep(delay_s)
            self.supervisor.tell(kind, actor_id, envelope)

        self.nursery.start_soon(again)

    def _deliver_timer(self, actor_kind: str, actor_id: str, slot: str, kind: str, key: str) -> bool:
        target = self.kinds[actor_kind]
        return self.supervisor.tell(target, actor_id, Envelope(target.firing(slot, kind, key)))


def _is_a_host(host: FakeHost) -> Host:
    return host  # mypy: the fake satisfies the protocol the runtime is typed against


@attrs.define
class Rig:
    host: FakeHost
    store: CounterStore
    kind: CounterKind

    @property
    def actors(self) -> dict[str, Actor[Any]]:
        return dict(self.host.supervisor.actors)

    def tell(self, actor_id: str, msg: Any) -> bool:
        return self.host.supervisor.tell(self.kind, actor_id, Envelope(msg))

    async def ask(self, actor_id: str, msg: Any, slot: ReplySlot | None = None) -> Any:
        slot = slot or ReplySlot()
        with trio.fail_after(600):  # virtual time: a lost answer fails the test, never hangs it
            await self.host.supervisor.ask(self.kind, actor_id, Envelope(msg, slot))
            return await slot.wait()


async def advance(seconds: float) -> None:
    await trio.sleep_until(trio.current_time() + seconds)


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {}


@pytest.fixture
async def rig(autojump_clock: MockClock, settings_overrides: dict[str, Any]) -> AsyncIterator[Rig]:
    settings = Settings(**{"passivate_after_ms": 60_000, "timer_window_ms": 86_400_000, **settings_overrides})
    store = CounterStore()
    kind = CounterKind(store)
    host = FakeHost(settings, store)
    host.kinds[kind.name] = kind
    async with trio.open_nursery() as nursery:
        host.nursery = nursery
        await nursery.start(host.supervisor.serve)
        await nursery.start(host.timers.serve)
        yield Rig(host, store, kind)
        nursery.cancel_scope.cancel()


# ---------------------------------------------------------------------- mailbox and drain


async def test_messages_are_handled_one_at_a_time_in_order_and_answered_after_their_commit(
    rig: Rig,
    autojump_clock: MockClock,
) -> None:
    rig.store.docs["ctr_a"] = Counter()
    assert all(rig.tell("ctr_a", Add(n)) for n in (1, 2, 3))
    committed_when_answered: list[int] = []
    slot = ReplySlot(on_settle=lambda s: committed_when_answered.append(len(rig.store.log)))
    assert await rig.ask("ctr_a", Add(10), slot) == 16
    assert rig.kind.handled == [Add(1), Add(2), Add(3), Add(10)]
    assert [doc.total for _, doc in rig.store.log] == [1, 3, 6, 16]
    assert committed_when_answered == [4]  # the answer came once its own commit was stored
    assert rig.kind.most_at_once == 1 and rig.store.loads == 1
    actor = rig.actors["ctr_a"]
    assert actor.processed == 4 and actor.mailbox is None and not actor.draining
    assert actor.describe() == {
        "kind": "counter",
        "id": "ctr_a",
        "mailboxDepth": 0,
        "liveSince": T0,
        "lastMessageAt": actor.last_message_at,
        "processed": 4,
        "total": 16,
    }


async def test_an_actor_with_no_document_answers_its_caller_and_leaves_memory(
    rig: Rig, autojump_clock: MockClock
) -> None:
    assert await rig.ask("ctr_none", Add(1)) == "no counter ctr_none"
    assert "ctr_none" not in rig.actors and rig.kind.handled == []


@pytest.mark.parametrize("settings_overrides", [{"mailbox_size": 2, "mailbox_wait_ms": 500}])
async def test_a_full_mailbox_refuses_a_tell_and_an_ask_waits_for_room_then_is_refused(
    rig: Rig, autojump_clock: MockClock
) -> None:
    rig.store.docs["ctr_a"] = Counter()
    assert rig.tell("ctr_a", Hold())  # taken by the drain, which then waits
    await advance(0.01)  # the document loaded, the drain holding
    assert rig.tell("ctr_a", Add(1)) and rig.tell("ctr_a", Add(2))
    assert not rig.tell("ctr_a", Add(100))  # two queued: the bound
    assert rig.actors["ctr_a"].mailbox_depth == 2

    began = trio.current_time()
    with pytest.raises(Overloaded) as refused:
        await rig.ask("ctr_a", Add(1000))
    assert trio.current_time() - began == pytest.approx(0.5)  # FOLIOT_MAILBOX_WAIT_MS
    assert status_of(refused.value) == 429 and refused.value.reason == "mailbox"
    assert rig.host.admission.refused["mailbox"] == 1

    async def release_soon() -> None:
        await advance(0.2)
        rig.kind.release.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(release_soon)
        assert await rig.ask("ctr_a", Add(4)) == 7  # waited for room, then went through
    assert rig.kind.handled == [Hold(), Add(1), Add(2), Add(4)]


# ---------------------------------------------------------------------- passivation


async def test_an_idle_parked_actor_is_passivated_and_rehydrated_on_its_next_message(
    rig: Rig, autojump_clock: MockClock
) -> None:
    rig.store.docs["ctr_a"] = Counter()
    rig.store.docs["ctr_b"] = Counter()
    await rig.ask("ctr_a", Add(1))
    await rig.ask("ctr_b", Busy(True))  # something in flight: never passivated
    await advance(59)
    assert set(rig.actors) == {"ctr_a", "ctr_b"}
    await advance(2)  # past FOLIOT_PASSIVATE_AFTER_MS since its last message
    assert set(rig.actors) == {"ctr_b"} and rig.host.supervisor.passivated == 1
    assert rig.store.loads == 2
    assert await rig.ask("ctr_a", Add(1)) == 2  # rehydrated from the store
    assert rig.store.loads == 3 and rig.host.supervisor.spawned == 3
    await rig.ask("ctr_a", Close())
    assert "ctr_a" not in rig.actors  # a closed actor leaves at once


@pytest.mark.parametrize("settings_overrides", [{"max_live_actors": 2}])
async def test_past_the_live_cap_a_spawn_drops_the_least_recently_active_idle_actor(
    rig: Rig, autojump_clock: MockClock
) -> None:
    for actor_id in ("ctr_a", "ctr_b", "ctr_c", "ctr_d"):
        rig.store.docs[actor_id] = Counter()
    await rig.ask("ctr_a", Busy(True))  # not parked: cannot be dropped
    await rig.ask("ctr_b", Add(1))
    await rig.ask("ctr_c", Add(1))
    assert set(rig.actors) == {"ctr_a", "ctr_c"}  # ctr_b, idle and parked, made room
    await rig.ask("ctr_c", Add(1))
    await rig.ask("ctr_d", Add(1))
    assert set(rig.actors) == {"ctr_a", "ctr_d"}


# ---------------------------------------------------------------------- timers


async def test_a_timer_fires_once_through_the_wheel_even_across_passivation(
    rig: Rig, autojump_clock: MockClock
) -> None:
    rig.store.docs["ctr_a"] = Counter()
    due = T0 + HOUR_MS
    await rig.ask("ctr_a", Arm(due))
    await rig.ask("ctr_a", Arm(due + 1_000))  # re-armed: the first arming is superseded
    assert rig.host.timers.pending_for("ctr_a", ["tick"]) == [
        {"slot": "tick", "kind": "tick", "key": "tick#2", "due": due + 1_000}
    ]
    await advance(600)
    assert "ctr_a" not in rig.actors  # passivated while it waits
    await advance(3_000)  # 3 600 s in: tick#1 would be due, but it was superseded
    assert rig.kind.firings == []
    await advance(2)
    assert rig.kind.firings == [("ctr_a", "tick#2")]
    assert rig.store.docs["ctr_a"].total == 1 and rig.store.docs["ctr_a"].timer is None
    assert rig.host.timers.stats()["inflight"] == 0 and rig.host.timers.fired == 1
    assert rig.host.timers.pending_for("ctr_a", ["tick"]) == []
    await advance(86_400)
    assert rig.kind.firings == [("ctr_a", "tick#2")]  # never again


async def test_a_stored_timer_is_paged_in_from_storage_and_rehydrates_its_actor(
    autojump_clock: MockClock,
) -> None:
    """A document armed before this host started (a restart): the wheel reads its row."""
    store = CounterStore()
    store.docs["ctr_a"] = Counter(timer=Timer("tick", "tick#1", T0 + 30_000), armings=1)
    kind = CounterKind(store)
    host = FakeHost(Settings(timer_window_ms=60_000), store)
    host.kinds[kind.name] = kind
    async with trio.open_nursery() as nursery:
        host.nursery = nursery
        await nursery.start(host.supervisor.serve)
        await nursery.start(host.timers.serve)
        assert host.timers.pending_for("ctr_a", ["tick"])[0]["key"] == "tick#1"
        assert host.supervisor.actors == {}  # nothing in memory for it yet
        await advance(31)
        assert kind.firings == [("ctr_a", "tick#1")] and store.loads == 1
        assert store.docs["ctr_a"].total == 1
        nursery.cancel_scope.cancel()


async def test_a_firing_that_could_not_commit_goes_back_to_the_wheel_not_to_later(
    rig: Rig, autojump_clock: MockClock
) -> None:
    rig.store.docs["ctr_a"] = Counter()
    await rig.ask("ctr_a", Arm(T0 + 1_000))
    rig.store.fail_commits = 2
    await advance(60)
    assert [key for _, key in rig.kind.firings] == ["tick#1"] * 3
    assert rig.store.docs["ctr_a"].total == 1
    assert rig.host.timers.retried == 2 and rig.host.retries == []


# ---------------------------------------------------------------------- placement


async def test_an_actor_owned_elsewhere_goes_to_the_host_and_is_never_spawned(
    rig: Rig, autojump_clock: MockClock
) -> None:
    rig.store.docs["ctr_far"] = Counter()
    rig.host.not_here.add("ctr_far")
    assert rig.tell("ctr_far", Add(1))
    assert rig.host.sent_elsewhere == [("counter", "ctr_far", Add(1))]
    with pytest.raises(Unavailable, match="owned by another node"):
        await rig.ask("ctr_far", Add(2))
    await trio.testing.wait_all_tasks_blocked()
    assert rig.actors == {} and rig.host.supervisor.spawned == 0
    assert rig.store.loads == 0 and rig.store.docs["ctr_far"] == Counter()
    assert len(rig.host.sent_elsewhere) == 1  # an ask is refused, never handed on silently


async def test_a_fenced_commit_drops_the_actor_and_refuses_what_it_holds(
    rig: Rig, autojump_clock: MockClock
) -> None:
    rig.store.docs["ctr_a"] = Counter()
    await rig.ask("ctr_a", Add(1))
    rig.store.fence_commits = 1
    outcomes: list[str] = []

    async def ask(msg: Any) -> None:
        try:
            await rig.ask("ctr_a", msg)
        except Unavailable as exc:
            outcomes.append(f"{msg.n}: {exc}")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask, Add(2))
        await trio.testing.wait_all_tasks_blocked()
        assert rig.tell("ctr_a", Add(3))  # queued behind the fenced one, as is the next ask
        nursery.start_soon(ask, Add(4))
    assert sorted(outcomes) == [
        "2: counter ctr_a moved to another node",
        "4: counter ctr_a moved to another node; retry",
    ]
    # Another node owns it now: nothing more was handled, loaded or retried here.
    assert "ctr_a" not in rig.actors and rig.store.docs["ctr_a"].total == 1
    assert rig.kind.handled == [Add(1)] and rig.store.loads == 1 and rig.host.retries == []


# ---------------------------------------------------------------------- storage failures


async def test_a_storage_failure_answers_its_caller_503_and_changes_nothing(rig: Rig) -> None:
    rig.store.docs["ctr_a"] = Counter()
    rig.store.fail_commits = 1
    with pytest.raises(Unavailable) as refused:
        await rig.ask("ctr_a", Add(5))
    assert status_of(refused.value) == 503
    assert rig.store.docs["ctr_a"] == Counter() and rig.store.log == []
    assert rig.host.retries == []  # the caller was told; nothing is retried behind its back
    assert await rig.ask("ctr_a", Add(5)) == 5


async def test_a_message_without_a_caller_is_retried_through_later_after_a_storage_failure(
    rig: Rig,
    autojump_clock: MockClock,
) -> None:
    rig.store.docs["ctr_a"] = Counter()
    rig.store.fail_commits = 2
    assert rig.tell("ctr_a", Add(5))
    await advance(0.1)
    assert [(delay, actor_id, e.attempts) for delay, actor_id, e in rig.host.retries] == [(0.2, "ctr_a", 1)]
    await advance(1)
    assert [(delay, e.attempts) for delay, _, e in rig.host.retries] == [(0.2, 1), (0.4, 2)]
    assert rig.store.docs["ctr_a"].total == 5 and len(rig.store.log) == 1  # applied once


async def test_messages_queued_behind_a_failed_rehydration_are_retried_or_refused(
    rig: Rig, autojump_clock: MockClock
) -> None:
    rig.store.docs["ctr_a"] = Counter()
    rig.store.fail_loads = 1
    assert rig.tell("ctr_a", Add(1)) and rig.tell("ctr_a", Add(2))
    with pytest.raises(Unavailable):
        await rig.ask("ctr_a", Add(4))
    assert sorted(e.message.n for _, _, e in rig.host.retries) == [1, 2]
    await trio.testing.wait_all_tasks_blocked()
    assert "ctr_a" not in rig.actors  # not loadable now: it left memory, holding nothing
    await advance(1)
    assert rig.store.docs["ctr_a"].total == 3  # the told ones arrived later; the asked one did not


async def test_a_stale_write_reloads_the_document_and_hands_the_message_again(
    rig: Rig, autojump_clock: MockClock
) -> None:
    rig.store.docs["ctr_a"] = Counter()
    await rig.ask("ctr_a", Add(1))
    rig.store.docs["ctr_a"] = Counter(version=7, total=100)  # another writer moved it
    assert await rig.ask("ctr_a", Add(1)) == 101
    assert rig.store.loads == 2
    rig.store.moved_commits = 3  # moved under every try: past the reloads one message may take
    with pytest.raises(Unavailable):
        await rig.ask("ctr_a", Add(1))
    assert rig.store.docs["ctr_a"].total == 101 and rig.store.loads == 5


# ---------------------------------------------------------------------- crashes


async def test_a_crash_fails_its_caller_restarts_from_the_checkpoint_and_gives_up_after_three(
    rig: Rig, autojump_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    rig.store.docs["ctr_a"] = Counter()
    await rig.ask("ctr_a", Add(1))
    with pytest.raises(Internal):
        await rig.ask("ctr_a", Boom())
    assert rig.host.supervisor.restarts == 1 and rig.store.loads == 1
    assert await rig.ask("ctr_a", Add(1)) == 2  # restarted: the document was reloaded
    assert rig.store.loads == 2 and rig.kind.gave_up == []
    for _ in range(2):
        with pytest.raises(Internal):
            await rig.ask("ctr_a", Boom())
    assert rig.kind.gave_up == ["ctr_a"] and not rig.store.docs["ctr_a"].open
    assert "counter actor ctr_a crashed" in caplog.text


async def test_crashes_further_apart_than_the_window_never_give_up(
    rig: Rig, autojump_clock: MockClock
) -> None:
    rig.store.docs["ctr_a"] = Counter()
    for _ in range(4):
        with pytest.raises(Internal):
            await rig.ask("ctr_a", Boom())
        await advance(CRASH_WINDOW_MS / 2000 + 1)
    assert rig.kind.gave_up == [] and rig.host.supervisor.restarts == 4
    assert await rig.ask("ctr_a", Add(1)) == 1
